//! `data check`: which scenario a profile file belongs to, and a summary of it.

use super::csv::{self as profile_csv, COL_CONTENTION, COL_UTILIZATION, COL_VRAM, Record};
use super::{ProfileRow, SoloRow};
use crate::domain::{KnobType, KnobValue};
use crate::domain::{Problem, WorkloadLevel};
use crate::scenario::{self, Scenario};
use anyhow::{Result, bail};
use std::path::Path;

/// The scenario a profile is checked against, and how it was chosen.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub scenario: Scenario,
    /// For the user: "given with --scenario", "named in the file", …
    pub reason: String,
}

/// Picks the scenario: the one given, else the one the file names (a bundled name or
/// a scenario file), else the bundled scenario whose models are exactly the file's.
pub fn resolve_scenario(path: &Path, given: Option<&str>) -> Result<Resolved> {
    let peek = profile_csv::peek(path)?;
    if let Some(name) = given {
        let scenario = scenario::load(name)?;
        let reason = match &peek.scenario {
            Some(named) if *named != scenario.name && named != name => {
                format!("given with --scenario; the file names '{named}'")
            }
            _ => "given with --scenario".to_string(),
        };
        return Ok(Resolved { scenario, reason });
    }
    if let Some(named) = &peek.scenario
        && let Ok(scenario) = scenario::load(named)
    {
        return Ok(Resolved {
            scenario,
            reason: "named in the file".into(),
        });
    }
    let mut file_models = peek.models.clone();
    file_models.sort();
    for name in scenario::bundled_names() {
        let scenario = scenario::load(name)?;
        let mut models: Vec<String> = scenario
            .problem
            .models
            .iter()
            .map(|m| m.name.clone())
            .collect();
        models.sort();
        if models == file_models {
            let reason = match &peek.scenario {
                Some(named) => format!(
                    "its models match; the file names '{named}', which is not a known scenario"
                ),
                None => "its models match the file's".into(),
            };
            return Ok(Resolved { scenario, reason });
        }
    }
    bail!(
        "{}: cannot tell which scenario it belongs to (it names {} and has models {}); pass --scenario NAME or a scenario .toml",
        path.display(),
        peek.scenario
            .map_or("none".to_string(), |s| format!("'{s}'")),
        if peek.models.is_empty() {
            "none".to_string()
        } else {
            peek.models.join(", ")
        }
    )
}

/// What one column holds.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnSummary {
    Numeric {
        name: String,
        min: f64,
        max: f64,
    },
    /// Distinct values with their row counts, in first-seen order.
    Categorical {
        name: String,
        counts: Vec<(String, usize)>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub rows: usize,
    /// (name, kind, throughput unit)
    pub models: Vec<(String, String, String)>,
    /// Rows per regime, in regime order.
    pub regimes: Vec<(WorkloadLevel, usize)>,
    /// Per model: solo rows (the model measured alone), and how many of its
    /// configurations they cover.
    pub solo: Vec<(usize, usize)>,
    /// Every column except the format version and scenario.
    pub columns: Vec<ColumnSummary>,
}

impl ColumnSummary {
    fn numeric(name: String) -> Self {
        ColumnSummary::Numeric {
            name,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    fn categorical(name: String) -> Self {
        ColumnSummary::Categorical {
            name,
            counts: Vec::new(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ColumnSummary::Numeric { name, .. } | ColumnSummary::Categorical { name, .. } => name,
        }
    }

    fn see_number(&mut self, v: f64) {
        if let ColumnSummary::Numeric { min, max, .. } = self {
            *min = min.min(v);
            *max = max.max(v);
        }
    }

    /// One more row with `value`: a column holds a few distinct values (a
    /// knob's levels, a model's variants), so a scan finds it.
    fn see_value(&mut self, value: &str) {
        if let ColumnSummary::Categorical { counts, .. } = self {
            match counts.iter_mut().find(|(v, _)| v == value) {
                Some((_, n)) => *n += 1,
                None => counts.push((value.to_owned(), 1)),
            }
        }
    }
}

/// A [`Summary`] built one row at a time, holding no row: what `data check`
/// needs of a file of any length.
#[derive(Debug, Clone)]
pub struct Summarizer<'p> {
    problem: &'p Problem,
    rows: usize,
    /// Rows per regime, in [`WorkloadLevel::ALL`] order.
    regimes: [usize; WorkloadLevel::ALL.len()],
    /// Per model: solo rows, and which configurations they measured.
    solo: Vec<(usize, Vec<bool>)>,
    /// Co-location rows with a contention reading (its column is summarised
    /// only where some row has one).
    contention_rows: usize,
    columns: Vec<ColumnSummary>,
}

impl<'p> Summarizer<'p> {
    pub fn new(problem: &'p Problem) -> Self {
        let mut columns = vec![
            ColumnSummary::categorical(profile_csv::COL_WORKLOAD.into()),
            ColumnSummary::numeric(COL_VRAM.into()),
            ColumnSummary::numeric(COL_UTILIZATION.into()),
            ColumnSummary::numeric(COL_CONTENTION.into()),
        ];
        for m in &problem.models {
            columns.push(ColumnSummary::categorical(format!("{}.variant", m.name)));
            for knob in &m.knobs {
                let name = format!("{}.{}", m.name, knob.name);
                columns.push(match knob.kind {
                    KnobType::Category => ColumnSummary::categorical(name),
                    _ => ColumnSummary::numeric(name),
                });
            }
            columns.push(ColumnSummary::numeric(format!("{}.throughput", m.name)));
        }
        Self {
            problem,
            rows: 0,
            regimes: [0; WorkloadLevel::ALL.len()],
            solo: problem
                .models
                .iter()
                .map(|m| (0, vec![false; m.grid_size()]))
                .collect(),
            contention_rows: 0,
            columns,
        }
    }

    pub fn add(&mut self, record: &Record) {
        match record {
            Record::CoLocation(row) => self.add_row(row),
            Record::Solo(row) => self.add_solo(row),
        }
    }

    /// A co-location row: every column but the format version and scenario.
    fn add_row(&mut self, row: &ProfileRow) {
        self.rows += 1;
        self.regimes[row.workload.ordinal()] += 1;
        let mut columns = self.columns.iter_mut();
        let mut next = || columns.next().expect("a column per cell");
        next().see_value(row.workload.as_str());
        next().see_number(row.state.vram_used_mib);
        next().see_number(row.state.utilization);
        let contention = next();
        if let Some(c) = row.state.contention {
            contention.see_number(c);
            self.contention_rows += 1;
        }
        for (i, m) in self.problem.models.iter().enumerate() {
            let config = row.joint[i] as usize;
            next().see_value(&m.variants[m.configs[config].variant].name);
            for k in 0..m.knobs.len() {
                match m.value(config, k) {
                    KnobValue::Category(text) => next().see_value(text),
                    value => {
                        let column = next();
                        if let Some(v) = value.as_f64() {
                            column.see_number(v);
                        }
                    }
                }
            }
            next().see_number(row.throughput[i]);
        }
    }

    /// A solo row: counted for its model, with the configuration it measured.
    fn add_solo(&mut self, row: &SoloRow) {
        if let Some((rows, measured)) = self.solo.get_mut(row.model) {
            *rows += 1;
            if let Some(seen) = measured.get_mut(row.config as usize) {
                *seen = true;
            }
        }
    }

    pub fn finish(mut self) -> Summary {
        if self.contention_rows == 0 {
            self.columns.retain(|c| c.name() != COL_CONTENTION);
        }
        Summary {
            rows: self.rows,
            models: self
                .problem
                .models
                .iter()
                .map(|m| (m.name.clone(), m.kind.clone(), m.unit.clone()))
                .collect(),
            regimes: WorkloadLevel::ALL.into_iter().zip(self.regimes).collect(),
            solo: self
                .solo
                .into_iter()
                .map(|(rows, measured)| (rows, measured.iter().filter(|&&m| m).count()))
                .collect(),
            columns: self.columns,
        }
    }
}

/// Checks every row of a profile file against `problem` and summarises it,
/// streaming: memory does not grow with the file's length.
pub fn check_file(path: &Path, problem: &Problem) -> Result<Summary> {
    let mut summary = Summarizer::new(problem);
    profile_csv::stream_csv(path, problem, |record| summary.add(&record))?;
    Ok(summary.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/profiles")
            .join(name)
    }

    #[test]
    fn scenario_comes_from_the_flag_the_file_or_the_models() {
        let r = resolve_scenario(&fixture("good.csv"), None).expect("named");
        assert_eq!(r.scenario.name, "paper-n2");
        assert_eq!(r.reason, "named in the file");

        let r = resolve_scenario(&fixture("other-scenario-name.csv"), None).expect("by models");
        assert_eq!(r.scenario.name, "paper-n2");
        assert!(r.reason.contains("models match"), "{}", r.reason);

        let r = resolve_scenario(&fixture("good.csv"), Some("paper-n2")).expect("given");
        assert_eq!(r.reason, "given with --scenario");

        let err = resolve_scenario(&fixture("unknown-model.csv"), None).expect_err("no match");
        assert!(err.to_string().contains("pass --scenario"), "{err}");
    }

    #[test]
    fn the_summary_counts_regimes_and_ranges() {
        let problem = scenario::load("paper-n2").expect("bundled").problem;
        let s = check_file(&fixture("good.csv"), &problem).expect("good");
        assert_eq!(s.rows, 4);
        assert_eq!(s.regimes.iter().map(|(_, n)| n).sum::<usize>(), 4);
        assert_eq!(
            s.models[0],
            ("llama3b".into(), "llm".into(), "tokens/s".into())
        );
        assert_eq!(s.models[1].2, "FPS");
        let throughput = s
            .columns
            .iter()
            .find(
                |c| matches!(c, ColumnSummary::Numeric { name, .. } if name == "yolo-a.throughput"),
            )
            .expect("a throughput column");
        let ColumnSummary::Numeric { min, max, .. } = throughput else {
            unreachable!("matched as numeric above")
        };
        assert!(min <= max && *min > 0.0);
        assert!(
            s.columns.iter().all(|c| c.name() != COL_CONTENTION),
            "no row has a reading: no contention column"
        );

        // With readings, the column is summarised as the others are.
        let mut profile = profile_csv::read_csv(&fixture("good.csv"), &problem).expect("good");
        for (k, row) in profile.rows.iter_mut().enumerate() {
            row.state.contention = Some(0.1 * (k + 1) as f64);
        }
        let mut summary = Summarizer::new(&problem);
        for row in &profile.rows {
            summary.add(&Record::CoLocation(row.clone()));
        }
        let s = summary.finish();
        let column = s.columns.iter().find(|c| c.name() == COL_CONTENTION);
        let Some(ColumnSummary::Numeric { min, max, .. }) = column else {
            panic!("a contention column: {:?}", s.columns)
        };
        assert!((min - 0.1).abs() < 1e-12 && (max - 0.4).abs() < 1e-12);
    }

    /// The summary built row by row while streaming is the one the rows, read
    /// whole, give: counts per value, ranges per column, solo coverage.
    #[test]
    fn the_streamed_summary_is_that_of_the_rows_read_whole() {
        let problem = scenario::load("paper-n2").expect("bundled").problem;
        let file = fixture("good.csv");
        let profile = profile_csv::read_csv(&file, &problem).expect("good");
        let s = check_file(&file, &problem).expect("good");
        assert_eq!(s.rows, profile.rows.len());
        for (w, n) in &s.regimes {
            assert_eq!(*n, profile.rows.iter().filter(|r| r.workload == *w).count());
        }
        for (i, m) in problem.models.iter().enumerate() {
            let tp: Vec<f64> = profile.rows.iter().map(|r| r.throughput[i]).collect();
            let name = format!("{}.throughput", m.name);
            let column = s
                .columns
                .iter()
                .find(|c| matches!(c, ColumnSummary::Numeric { name: n, .. } if *n == name));
            let Some(ColumnSummary::Numeric { min, max, .. }) = column else {
                panic!("no column {name}")
            };
            assert_eq!(*min, tp.iter().copied().fold(f64::INFINITY, f64::min));
            assert_eq!(*max, tp.iter().copied().fold(f64::NEG_INFINITY, f64::max));
            let variants = format!("{}.variant", m.name);
            let column = s.columns.iter().find(
                |c| matches!(c, ColumnSummary::Categorical { name: n, .. } if *n == variants),
            );
            let Some(ColumnSummary::Categorical { counts, .. }) = column else {
                panic!("no column {variants}")
            };
            for (variant, n) in counts {
                let rows = profile
                    .rows
                    .iter()
                    .filter(|r| m.knobs(r.joint[i] as usize).variant == *variant);
                assert_eq!(*n, rows.count(), "{variants} {variant}");
            }
            assert_eq!(counts.iter().map(|(_, n)| n).sum::<usize>(), s.rows);
            let solo = profile.solo.iter().filter(|r| r.model == i).count();
            assert_eq!(s.solo[i].0, solo);
        }
    }
}
