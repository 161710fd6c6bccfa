//! The surrogate's error on the closed loop, measured on the simulator: one
//! policy's closed loop on a card perturbed away from the one its surrogate
//! learnt, with and without the online correction, beside the unperturbed
//! card for reference; each condition with floors enforced on the point
//! prediction and, where asked, on the split-conformal lower bound.
//! Realised utility and floor violations are scored on the (perturbed) card's
//! own noise-free throughput, against the declared floors.

use super::closed_loop::{Conditions, Harness, Perturbation, PolicySpec, Summary};
use anyhow::Result;
use mfsched_core::{CorrectionConfig, Floors, Trace};
use serde::Serialize;
use std::fmt::Write as _;

/// What the study varies.
#[derive(Debug, Clone)]
pub struct CorrectionStudy {
    /// The spread of the per-model factor (log scale).
    pub model_sigma: f64,
    /// The spread of the per-configuration factor around it (log scale).
    pub config_sigma: f64,
    pub seeds: Vec<u64>,
    pub correction: CorrectionConfig,
    /// Floors with margins: every condition is run again enforcing them.
    pub margins: Option<Floors>,
    /// What a tick does with a floor out of reach (point floors too).
    pub out_of_reach: mfsched_core::OutOfReach,
}

/// The three conditions, in report order.
pub const CONDITIONS: [&str; 3] = [
    "trained card",
    "perturbed card, uncorrected",
    "perturbed card, corrected",
];

/// One condition on one seed.
#[derive(Debug, Clone, Serialize)]
pub struct CorrectionRow {
    pub condition: &'static str,
    /// How its decisions enforced the floors ([`Floors::label`]).
    pub floors: String,
    pub seed: u64,
    pub summary: Summary,
}

/// Every row, and the report.
#[derive(Debug, Clone, Serialize)]
pub struct CorrectionResult {
    pub policy: String,
    pub trace: String,
    pub model_sigma: f64,
    pub config_sigma: f64,
    pub rows: Vec<CorrectionRow>,
}

impl CorrectionStudy {
    /// Runs `policy` under each condition for every seed, over that seed's
    /// trace (`traces[k]` for `seeds[k]`; the perturbation is drawn from the
    /// seed too); `on_tick` after every tick.
    pub fn run(
        &self,
        harness: &Harness,
        policy: &PolicySpec,
        traces: &[Trace],
        mut on_tick: impl FnMut(),
    ) -> Result<CorrectionResult> {
        anyhow::ensure!(
            traces.len() == self.seeds.len(),
            "one trace per seed ({} traces, {} seeds)",
            traces.len(),
            self.seeds.len()
        );
        let mut rows = Vec::new();
        for (&seed, trace) in self.seeds.iter().zip(traces) {
            let perturbation =
                Perturbation::seeded(harness.problem(), self.model_sigma, self.config_sigma, seed);
            let conditions = [
                Conditions::default(),
                Conditions {
                    perturbation: Some(perturbation.clone()),
                    ..Conditions::default()
                },
                Conditions {
                    perturbation: Some(perturbation),
                    correction: Some(self.correction.clone()),
                    ..Conditions::default()
                },
            ];
            // Point floors (the harness problem's), then the margins.
            let variants: Vec<Floors> = std::iter::once(
                Floors::point(harness.problem().sla_floors.clone())
                    .with_out_of_reach(self.out_of_reach),
            )
            .chain(self.margins.clone())
            .collect();
            for (name, c) in CONDITIONS.iter().zip(conditions) {
                for floors in &variants {
                    let label = floors.label();
                    let c = Conditions {
                        floors: Some(floors.clone()),
                        ..c.clone()
                    };
                    let runs = harness.run_under(&c, policy, &[], trace, seed, &mut on_tick)?;
                    rows.push(CorrectionRow {
                        condition: name,
                        floors: label,
                        seed,
                        summary: Summary::of(&runs[0].ticks),
                    });
                }
            }
        }
        Ok(CorrectionResult {
            policy: policy.label.clone(),
            trace: traces.first().map(|t| t.name.clone()).unwrap_or_default(),
            model_sigma: self.model_sigma,
            config_sigma: self.config_sigma,
            rows,
        })
    }
}

impl CorrectionStudy {
    /// How many runs each condition makes per seed: point floors, and the
    /// margins where the study has them.
    pub fn runs_per_condition(&self) -> usize {
        1 + usize::from(self.margins.is_some())
    }
}

impl CorrectionResult {
    /// Per condition, over every seed: mean realised utility, the ticks whose
    /// applied configuration broke a floor on the card (realised) and those
    /// the decision believed would (predicted), reconfigurations.
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| condition | floors | seeds | ticks | mean realised utility | realised floor violations | predicted floor violations | failed decisions | reconfigurations |\n|---|---|---|---|---|---|---|---|---|\n",
        );
        let mut floors: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !floors.contains(&r.floors.as_str()) {
                floors.push(&r.floors);
            }
        }
        for (condition, floors) in CONDITIONS
            .iter()
            .flat_map(|c| floors.iter().map(move |f| (*c, *f)))
        {
            let rows: Vec<&CorrectionRow> = self
                .rows
                .iter()
                .filter(|r| r.condition == condition && r.floors == floors)
                .collect();
            let ticks: usize = rows.iter().map(|r| r.summary.ticks).sum();
            let utility = rows
                .iter()
                .map(|r| r.summary.mean_realised_utility * r.summary.ticks as f64)
                .sum::<f64>()
                / ticks.max(1) as f64;
            let realised: usize = rows.iter().map(|r| r.summary.realised_sla_violations).sum();
            let predicted: usize = rows
                .iter()
                .map(|r| r.summary.predicted_sla_violations)
                .sum();
            let reconfigurations: usize = rows.iter().map(|r| r.summary.reconfigurations).sum();
            let failures: usize = rows.iter().map(|r| r.summary.failures).sum();
            let pct = |n: usize| 100.0 * n as f64 / ticks.max(1) as f64;
            writeln!(
                t,
                "| {condition} | {floors} | {} | {ticks} | {utility:.4} | {realised} ({:.1} %) | {predicted} ({:.1} %) | {failures} | {reconfigurations} |",
                rows.len(),
                pct(realised),
                pct(predicted)
            )
            .ok();
        }
        t
    }
}
