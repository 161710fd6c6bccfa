//! Rendering closed-loop comparisons: a terminal table, `report.md`,
//! `results.json` (every number the other two print) and SVG plots.

use crate::eval::closed_loop::{Run, Summary};
use crate::svg::{LineChart, Series};
use anyhow::{Context, Result};
use mfsched_core::nearest_rank_sorted;
use mfsched_core::write_atomically;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A set of runs: every policy over every trace, same seeds.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// What produced the numbers, said plainly in every report.
    pub device: String,
    pub scenario: String,
    pub predictor: String,
    pub utility: String,
    pub seed: u64,
    pub feasible_configurations: usize,
    pub policies: Vec<String>,
    pub traces: Vec<String>,
    pub runs: Vec<Run>,
}

/// One row of a table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub trace: String,
    pub policy: String,
    pub summary: Summary,
}

impl Comparison {
    /// Per (trace, policy), in trace-major order.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for trace in &self.traces {
            for policy in &self.policies {
                let ticks = self
                    .runs
                    .iter()
                    .filter(|r| &r.trace == trace && &r.policy == policy)
                    .flat_map(|r| &r.ticks);
                rows.push(Row {
                    trace: trace.clone(),
                    policy: policy.clone(),
                    summary: Summary::of(ticks),
                });
            }
        }
        rows
    }

    /// Per policy over every trace.
    pub fn overall(&self) -> Vec<Row> {
        self.policies
            .iter()
            .map(|policy| Row {
                trace: "all".into(),
                policy: policy.clone(),
                summary: Summary::of(
                    self.runs
                        .iter()
                        .filter(|r| &r.policy == policy)
                        .flat_map(|r| &r.ticks),
                ),
            })
            .collect()
    }

    pub fn summary_table(&self) -> String {
        let mut out = String::new();
        // Wide enough for the longest label ("ga (candidate-aware field)").
        let width = self
            .policies
            .iter()
            .map(|p| p.chars().count())
            .max()
            .unwrap_or(0)
            .max(20);
        let _ = writeln!(
            out,
            "{:<12} {:<width$} {:>9} {:>10} {:>10} {:>9} {:>9} {:>7} {:>8} {:>9} {:>9}",
            "scenario",
            "policy",
            "gap %",
            "pred U",
            "real U",
            "SLA pred",
            "SLA real",
            "reconf",
            "failed",
            "p50 ms",
            "p99 ms"
        );
        let overall = self.overall();
        for row in self.rows().iter().chain(overall.iter()) {
            let s = &row.summary;
            let _ = writeln!(
                out,
                "{:<12} {:<width$} {:>9.3} {:>10.4} {:>10.4} {:>9} {:>9} {:>7} {:>8} {:>9.2} {:>9.2}",
                row.trace,
                row.policy,
                s.utility_gap_pct,
                s.mean_predicted_utility,
                s.mean_realised_utility,
                s.predicted_sla_violations,
                s.realised_sla_violations,
                s.reconfigurations,
                s.failures,
                s.latency_p50_ms,
                s.latency_p99_ms
            );
        }
        out
    }

    pub fn markdown(&self, title: &str, command: &str) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# {title}\n");
        let _ = writeln!(
            md,
            "All numbers below were measured on the **{}**: a seeded simulator, not a real GPU.\n",
            self.device
        );
        let _ = writeln!(md, "- command: `{command}`");
        let _ = writeln!(
            md,
            "- scenario: `{}` ({} VRAM-feasible joint configurations)",
            self.scenario, self.feasible_configurations
        );
        let _ = writeln!(md, "- predictor: {}", self.predictor);
        let _ = writeln!(md, "- utility: {}", self.utility);
        let _ = writeln!(md, "- seed: {}", self.seed);
        let _ = writeln!(md, "- policies: {}", self.policies.join(", "));
        let _ = writeln!(md, "- workload traces: {}\n", self.traces.join(", "));
        let _ = writeln!(
            md,
            "Columns: *gap %* = loss of predicted utility against the per-step exhaustive argmax on the same surrogate landscape (the published metric); *pred U* / *real U* = mean utility on the surrogate's prediction / on the simulator's ground truth (floors lifted); *SLA* = ticks with a floor broken, predicted / on ground truth; *reconf* = ticks that changed configuration; *failed* = ticks whose answer was rejected or failed (the last valid decision was kept); latency = the whole decision through the Wasm boundary.\n"
        );
        let _ = writeln!(
            md,
            "| scenario | policy | gap % | pred U | real U | SLA pred | SLA real | reconf | failed | p50 ms | p99 ms |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let overall = self.overall();
        for row in self.rows().iter().chain(overall.iter()) {
            let s = &row.summary;
            let name = if row.trace == "all" {
                "**all**".to_string()
            } else {
                row.trace.clone()
            };
            let _ = writeln!(
                md,
                "| {name} | {} | {:.3} | {:.4} | {:.4} | {} | {} | {} | {} | {:.2} | {:.2} |",
                row.policy,
                s.utility_gap_pct,
                s.mean_predicted_utility,
                s.mean_realised_utility,
                s.predicted_sla_violations,
                s.realised_sla_violations,
                s.reconfigurations,
                s.failures,
                s.latency_p50_ms,
                s.latency_p99_ms
            );
        }
        if let Some(table) = self.b_versus_a() {
            md.push_str(&table);
        }
        md.push_str("\nPlots: `utility-<scenario>.svg` (realised utility per tick per policy), `latency.svg` (decision latency distribution).\n");
        md
    }

    /// Realised utility change of B over A per scenario, for a two-policy comparison.
    pub fn b_versus_a(&self) -> Option<String> {
        let [a, b] = self.policies.as_slice() else {
            return None;
        };
        let rows = self.rows();
        let overall = self.overall();
        let mut md = format!(
            "\n**{b}** against **{a}**: change of mean realised utility (on the simulator's ground truth) and of the realised SLA violations.\n\n| scenario | real U change % | SLA real (A → B) |\n|---|---:|---:|\n"
        );
        for pair in rows.chunks_exact(2).chain(std::iter::once(&overall[..])) {
            let (sa, sb) = (&pair[0].summary, &pair[1].summary);
            let change = 100.0 * (sb.mean_realised_utility - sa.mean_realised_utility)
                / sa.mean_realised_utility.abs();
            let name = if pair[0].trace == "all" {
                "**all**".to_string()
            } else {
                pair[0].trace.clone()
            };
            let _ = writeln!(
                md,
                "| {name} | {change:+.3} | {} → {} |",
                sa.realised_sla_violations, sb.realised_sla_violations
            );
        }
        Some(md)
    }

    /// Realised utility over time, one line per policy, for one trace.
    pub fn utility_chart(&self, trace: &str) -> String {
        let series = self
            .policies
            .iter()
            .filter_map(|policy| {
                let run = self
                    .runs
                    .iter()
                    .find(|r| r.trace == trace && &r.policy == policy)?;
                let points = run
                    .ticks
                    .iter()
                    .map(|t| (t.tick as f64, t.realised_utility))
                    .filter(|p| p.1.is_finite())
                    .collect();
                Some(Series::new(policy.clone(), points))
            })
            .collect();
        LineChart {
            title: format!("Realised utility over time — {trace} ({})", self.device),
            x_label: "tick".into(),
            y_label: "utility on ground truth".into(),
            series,
            ..LineChart::default()
        }
        .render()
    }

    /// Empirical CDF of decision latency per policy (log x).
    pub fn latency_chart(&self) -> String {
        let series = self
            .policies
            .iter()
            .map(|policy| {
                let mut l: Vec<f64> = self
                    .runs
                    .iter()
                    .filter(|r| &r.policy == policy)
                    .flat_map(|r| r.ticks.iter().map(|t| t.latency_ms.max(1e-3)))
                    .collect();
                l.sort_by(f64::total_cmp);
                // 50 quantile points keep the file small whatever the tick count.
                let points = (1..=50)
                    .map(|k| {
                        let q = f64::from(k) / 50.0;
                        (nearest_rank_sorted(&l, q), q)
                    })
                    .collect();
                Series::new(policy.clone(), points)
            })
            .collect();
        LineChart {
            title: "Decision latency (CDF)".into(),
            x_label: "latency, ms (log)".into(),
            y_label: "fraction of decisions".into(),
            series,
            log_x: true,
            y_range: Some((0.0, 1.0)),
            ..LineChart::default()
        }
        .render()
    }

    /// Every number the report prints, per tick included. JSON has no −∞:
    /// serde_json writes a non-finite utility (a broken floor) as `null`.
    pub fn json(&self, command: &str) -> serde_json::Value {
        serde_json::json!({
            "command": command,
            "device": self.device,
            "scenario": self.scenario,
            "predictor": self.predictor,
            "utility": self.utility,
            "seed": self.seed,
            "feasible_configurations": self.feasible_configurations,
            "policies": self.policies,
            "traces": self.traces,
            "rows": self.rows(),
            "overall": self.overall(),
            "runs": self.runs,
        })
    }

    /// Writes `report.md`, `results.json`, the plots and `report.html` (the
    /// report with the plots inline, one file) into `dir`; returns the files.
    pub fn write(&self, dir: &Path, title: &str, command: &str) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the report directory {}", dir.display()))?;
        let mut files = Vec::new();
        let mut put = |name: String, bytes: Vec<u8>| -> Result<()> {
            let path = dir.join(name);
            write_atomically(&path, &bytes)?;
            files.push(path);
            Ok(())
        };
        let markdown = self.markdown(title, command);
        put("report.md".into(), markdown.clone().into_bytes())?;
        put(
            "results.json".into(),
            serde_json::to_vec_pretty(&self.json(command)).context("serialising results")?,
        )?;
        for trace in &self.traces {
            put(
                format!("utility-{trace}.svg"),
                self.utility_chart(trace).into_bytes(),
            )?;
        }
        put("latency.svg".into(), self.latency_chart().into_bytes())?;
        let charts: Vec<String> = self
            .traces
            .iter()
            .map(|t| format!("utility-{t}.svg"))
            .chain(std::iter::once("latency.svg".to_owned()))
            .collect();
        let html = crate::html::page(title, &markdown, dir, &charts)?;
        put("report.html".into(), html.into_bytes())?;
        Ok(files)
    }
}
