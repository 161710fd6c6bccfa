//! The shipped bundles, remade: every bundled scenario profiled on the simulator
//! and trained on that profile.
//!
//! For one scenario `mfsched models regenerate` is exactly
//!
//! ```text
//! mfsched profile --scenario NAME --seed S [--samples 648] --out models/NAME/profile.csv
//! mfsched train --data models/NAME/profile.csv --scenario NAME --seed S --linear-skip off --out models/NAME
//! ```
//!
//! (`--samples 648` for N > 2: every shipped bundle sees as many rows as the
//! published N = 2 grid has) with `--linear-skip off` (the published
//! architecture, which Tables I and II reproduce), so the `data_sha256` in
//! `bundle.json` can be checked against a fresh profile.

use anyhow::{Context, Result};
use mfsched_core::Problem;
use mfsched_core::Scenario;
use mfsched_core::sha256_hex;
use mfsched_core::{DEFAULT_PROFILE_REPEATS, Profile, SamplingPlan};
use mfsched_core::{load_scenario, write_profile};
use mfsched_nn::TrainConfig;
use mfsched_rng::Rng;
use mfsched_surrogate::BUNDLED_PROFILE_FILE;
use mfsched_surrogate::Bundle;
use std::path::Path;

use super::fit;
use crate::profiling;
use crate::sim::Simulator;

/// The seed the shipped bundles were made with.
pub const DEFAULT_SEED: u64 = 7;
/// Profile rows of a shipped bundle for N > 2 (N = 2 profiles its full grid:
/// 162 × 4 = 648 rows).
pub const PROFILE_ROWS: usize = 648;

/// The profiling plan of a shipped bundle.
pub fn regenerate_plan(scenario: &Scenario) -> SamplingPlan {
    let n = scenario.problem.models.len();
    SamplingPlan::for_problem(&scenario.problem, (n > 2).then_some(PROFILE_ROWS))
}

/// Profiles `problem` on the simulator exactly as `mfsched profile --scenario
/// NAME --seed SEED` does (same RNG streams, same repeats), so a run can be
/// reproduced, and its file checked, from the command line.
pub fn profile_on_simulator(
    name: &str,
    problem: &Problem,
    plan: &SamplingPlan,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Profile> {
    let mut sim = Simulator::new(problem, Rng::derive(seed, 1).next_u64())?;
    profiling::run(
        &mut sim,
        problem,
        name,
        plan,
        DEFAULT_PROFILE_REPEATS,
        Rng::derive(seed, 2).next_u64(),
        progress,
    )
}

/// Profiles a bundled scenario on the simulator (seeded as `mfsched profile
/// --seed`), writes the profile to `dir/profile.csv`, trains on it and writes
/// the bundle into `dir`. `progress(stage, done, total)` reports both stages.
pub fn regenerate(
    name: &str,
    seed: u64,
    dir: &Path,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Bundle> {
    let scenario = load_scenario(name)?;
    let problem = &scenario.problem;
    let plan = regenerate_plan(&scenario);
    let profile = profile_on_simulator(name, problem, &plan, seed, &mut |done, total| {
        progress("profiling", done, total)
    })?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let csv_path = dir.join(BUNDLED_PROFILE_FILE);
    write_profile(&profile, problem, &csv_path)?;
    let csv = std::fs::read(&csv_path)
        .with_context(|| format!("cannot read back {}", csv_path.display()))?;
    let bundle = fit::train_bundle(
        &scenario,
        &profile,
        sha256_hex(&csv),
        &TrainConfig::published(),
        fit::TrainOptions::for_profile(&profile),
        seed,
        &mut |done, total| progress("training", done, total),
    )?;
    bundle.write(dir)?;
    Ok(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_surrogate::embedded_bundle;

    /// Retrains the smallest shipped bundle exactly as `mfsched models
    /// regenerate` does and checks its accuracy against the committed metrics.
    /// The simulator may have changed since the bundle was made (then the data
    /// hash differs): the accuracy must still hold.
    #[test]
    fn retraining_paper_n2_keeps_the_committed_accuracy() {
        let committed = embedded_bundle("paper-n2")
            .expect("shipped")
            .expect("parses");
        let dir = tempfile::tempdir().expect("temp dir");
        let fresh = regenerate(
            "paper-n2",
            committed.meta.training.seed,
            dir.path(),
            &mut |_, _, _| {},
        )
        .expect("regenerates");
        for (old, new) in committed.meta.models.iter().zip(&fresh.meta.models) {
            let (Some(a), Some(b)) = (old.metrics.r2_holdout, new.metrics.r2_holdout) else {
                panic!("{}: both bundles hold rows out", old.name);
            };
            assert!(
                (a - b).abs() <= 0.01,
                "{}: committed held-out R² {a:.4}, retrained {b:.4}; regenerate the bundles",
                old.name
            );
            assert!(b >= 0.95, "{}: R² {b:.4}", old.name);
        }
        if fresh.meta.training.data_sha256 == committed.meta.training.data_sha256 {
            // Same data, same seed: the weights are bit-identical.
            assert_eq!(fresh.nets, committed.nets);
        }
    }
}
