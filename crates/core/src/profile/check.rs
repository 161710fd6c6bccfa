//! `data check`: which scenario a profile file belongs to, and a summary of it.

use super::Profile;
use super::csv::{self as profile_csv, COL_UTILIZATION, COL_VRAM};
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

fn count<T: PartialEq + Clone>(values: impl Iterator<Item = T>) -> Vec<(T, usize)> {
    let mut counts: Vec<(T, usize)> = Vec::new();
    for v in values {
        match counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    counts
}

fn numeric(name: String, values: impl Iterator<Item = f64>) -> ColumnSummary {
    let (min, max) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    ColumnSummary::Numeric { name, min, max }
}

pub fn summarize(profile: &Profile, problem: &Problem) -> Summary {
    let rows = &profile.rows;
    let mut columns = vec![
        ColumnSummary::Categorical {
            name: profile_csv::COL_WORKLOAD.into(),
            counts: count(rows.iter().map(|r| r.workload.to_string())),
        },
        numeric(COL_VRAM.into(), rows.iter().map(|r| r.state.vram_used_mib)),
        numeric(
            COL_UTILIZATION.into(),
            rows.iter().map(|r| r.state.utilization),
        ),
    ];
    for (i, m) in problem.models.iter().enumerate() {
        let knobs: Vec<_> = rows.iter().map(|r| m.knobs(r.joint[i] as usize)).collect();
        columns.push(ColumnSummary::Categorical {
            name: format!("{}.variant", m.name),
            counts: count(knobs.iter().map(|k| k.variant.clone())),
        });
        for (k, knob) in m.knobs.iter().enumerate() {
            let name = format!("{}.{}", m.name, knob.name);
            let values = rows.iter().map(|r| m.value(r.joint[i] as usize, k));
            columns.push(match knob.kind {
                KnobType::Category => ColumnSummary::Categorical {
                    name,
                    counts: count(values.map(ToString::to_string)),
                },
                _ => numeric(name, values.filter_map(KnobValue::as_f64)),
            });
        }
        columns.push(numeric(
            format!("{}.throughput", m.name),
            rows.iter().map(|r| r.throughput[i]),
        ));
    }
    Summary {
        rows: rows.len(),
        models: problem
            .models
            .iter()
            .map(|m| (m.name.clone(), m.kind.clone(), m.unit.clone()))
            .collect(),
        regimes: WorkloadLevel::ALL
            .iter()
            .map(|&w| (w, rows.iter().filter(|r| r.workload == w).count()))
            .collect(),
        solo: profile
            .solo_table(problem)
            .iter()
            .enumerate()
            .map(|(i, table)| {
                (
                    profile.solo.iter().filter(|r| r.model == i).count(),
                    table.iter().flatten().count(),
                )
            })
            .collect(),
        columns,
    }
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
        let profile = profile_csv::read_csv(&fixture("good.csv"), &problem).expect("good");
        let s = summarize(&profile, &problem);
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
    }
}
