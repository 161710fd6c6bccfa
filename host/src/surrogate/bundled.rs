//! The MeanField bundles shipped with the binary (`models/<scenario>/`), how a
//! command finds the bundle for a scenario, and how the shipped ones are made.
//!
//! The bundles are embedded with `include_bytes!`, so the binary predicts with no
//! training at start-up; `--models DIR` points elsewhere (a bundle directory, or
//! a directory of `<scenario>/` bundle directories like `models/`).
//!
//! Regeneration (`mfsched models regenerate [--seed S]`) profiles every bundled
//! scenario on the simulator and trains on the profile; for one scenario it is
//! exactly
//!
//! ```text
//! mfsched profile --scenario NAME --seed S [--samples 648] --out models/NAME/profile.csv
//! mfsched train --data models/NAME/profile.csv --scenario NAME --seed S --out models/NAME
//! ```
//!
//! (`--samples 648` for N > 2: every shipped bundle sees as many rows as the
//! published N = 2 grid has), so the `data_sha256` in `bundle.json` can be checked
//! against a fresh profile.

use super::bundle::{Bundle, META_FILE};
use super::training;
use crate::domain::Problem;
use crate::profile::{self, DEFAULT_REPEATS, Profile, SamplingPlan};
use crate::scenario::{self, Scenario};
use crate::sim::Simulator;
use anyhow::{Context, Result};
use mfsched_nn::TrainConfig;
use mfsched_rng::Rng;
use std::path::{Path, PathBuf};

/// The seed the shipped bundles were made with.
pub const DEFAULT_SEED: u64 = 7;
/// Profile rows of a shipped bundle for N > 2 (N = 2 profiles its full grid:
/// 162 × 4 = 648 rows).
pub const PROFILE_ROWS: usize = 648;
/// The training data file kept beside each shipped bundle.
pub const PROFILE_FILE: &str = "profile.csv";

/// A shipped bundle's files. The profile travels too: the candidate-aware field
/// fits its utilisation model on the very rows the predictors were trained on.
struct Embedded {
    scenario: &'static str,
    meta: &'static [u8],
    weights: &'static [u8],
    profile: &'static [u8],
}

const EMBEDDED: &[Embedded] = &[
    Embedded {
        scenario: "paper-n2",
        meta: include_bytes!("../../../models/paper-n2/bundle.json"),
        weights: include_bytes!("../../../models/paper-n2/weights.safetensors"),
        profile: include_bytes!("../../../models/paper-n2/profile.csv"),
    },
    Embedded {
        scenario: "paper-n3",
        meta: include_bytes!("../../../models/paper-n3/bundle.json"),
        weights: include_bytes!("../../../models/paper-n3/weights.safetensors"),
        profile: include_bytes!("../../../models/paper-n3/profile.csv"),
    },
    Embedded {
        scenario: "paper-n4",
        meta: include_bytes!("../../../models/paper-n4/bundle.json"),
        weights: include_bytes!("../../../models/paper-n4/weights.safetensors"),
        profile: include_bytes!("../../../models/paper-n4/profile.csv"),
    },
    Embedded {
        scenario: "paper-n5",
        meta: include_bytes!("../../../models/paper-n5/bundle.json"),
        weights: include_bytes!("../../../models/paper-n5/weights.safetensors"),
        profile: include_bytes!("../../../models/paper-n5/profile.csv"),
    },
    Embedded {
        scenario: "paper-n6",
        meta: include_bytes!("../../../models/paper-n6/bundle.json"),
        weights: include_bytes!("../../../models/paper-n6/weights.safetensors"),
        profile: include_bytes!("../../../models/paper-n6/profile.csv"),
    },
];

/// The scenarios with a shipped bundle.
pub fn embedded_names() -> impl Iterator<Item = &'static str> {
    EMBEDDED.iter().map(|e| e.scenario)
}

/// The shipped bundle of a scenario, parsed (not yet checked against it).
pub fn embedded(scenario: &str) -> Option<Result<Bundle>> {
    EMBEDDED.iter().find(|e| e.scenario == scenario).map(|e| {
        Bundle::from_bytes(e.meta, e.weights)
            .with_context(|| format!("the embedded model bundle of {}", e.scenario))
    })
}

/// The bundle a command uses for `scenario`: from `models` if given (a bundle
/// directory, or a directory holding `<scenario>/`), else the embedded one;
/// checked against the scenario either way.
pub fn load(scenario: &Scenario, models: Option<&Path>) -> Result<Bundle> {
    let bundle = match models {
        Some(dir) => {
            let dir = bundle_dir(dir, &scenario.name);
            Bundle::read(&dir)?
                .checked(scenario)
                .with_context(|| format!("model bundle {}", dir.display()))?
        }
        None => embedded(&scenario.name)
            .with_context(|| {
                format!(
                    "no embedded model bundle for scenario '{}' (there are bundles for: {}); train one with `mfsched train` and pass it with --models DIR",
                    scenario.name,
                    embedded_names().collect::<Vec<_>>().join(", ")
                )
            })??
            .checked(scenario)
            .with_context(|| format!("the embedded model bundle of {}", scenario.name))?,
    };
    Ok(bundle)
}

/// The profile `bundle` was trained on: `profile.csv` beside it (from `models`
/// as in [`load`], else the embedded copy), checked against the SHA-256 the
/// bundle recorded, so nothing fitted on it can drift from the predictors.
pub fn training_profile(
    scenario: &Scenario,
    models: Option<&Path>,
    bundle: &Bundle,
) -> Result<Profile> {
    let (bytes, path) = match models {
        Some(dir) => {
            let path = bundle_dir(dir, &scenario.name).join(PROFILE_FILE);
            let bytes = std::fs::read(&path).with_context(|| {
                format!(
                    "cannot read {} (the bundle's training profile, kept beside it)",
                    path.display()
                )
            })?;
            (std::borrow::Cow::Owned(bytes), path)
        }
        None => {
            let embedded = EMBEDDED
                .iter()
                .find(|e| e.scenario == scenario.name)
                .with_context(|| {
                    format!("no embedded model bundle for scenario '{}'", scenario.name)
                })?;
            (
                std::borrow::Cow::Borrowed(embedded.profile),
                Path::new("models").join(&scenario.name).join(PROFILE_FILE),
            )
        }
    };
    let sha = training::sha256_hex(&bytes);
    if sha != bundle.meta.training.data_sha256 {
        anyhow::bail!(
            "{} is not the profile the bundle was trained on (SHA-256 {sha}, the bundle records {}); regenerate both with `mfsched models regenerate`",
            path.display(),
            bundle.meta.training.data_sha256
        );
    }
    profile::csv::read_csv_bytes(&bytes, &path, &scenario.problem)
}

/// `dir` itself when it holds a bundle, else `dir/<scenario>`.
pub fn bundle_dir(dir: &Path, scenario: &str) -> PathBuf {
    if dir.join(META_FILE).exists() {
        dir.to_path_buf()
    } else {
        dir.join(scenario)
    }
}

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
    profile::run(
        &mut sim,
        problem,
        name,
        plan,
        DEFAULT_REPEATS,
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
    let scenario = scenario::load(name)?;
    let problem = &scenario.problem;
    let plan = regenerate_plan(&scenario);
    let profile = profile_on_simulator(name, problem, &plan, seed, &mut |done, total| {
        progress("profiling", done, total)
    })?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    let csv_path = dir.join(PROFILE_FILE);
    profile::write_csv(&profile, problem, &csv_path)?;
    let csv = std::fs::read(&csv_path)
        .with_context(|| format!("cannot read back {}", csv_path.display()))?;
    let bundle = training::train_bundle(
        &scenario,
        &profile,
        training::sha256_hex(&csv),
        &TrainConfig::default(),
        seed,
        &mut |done, total| progress("training", done, total),
    )?;
    bundle.write(dir)?;
    Ok(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_scenario_has_a_loadable_embedded_bundle() {
        for name in scenario::bundled_names() {
            let s = scenario::load(name).expect("bundled");
            let bundle = load(&s, None).expect("embedded bundle fits");
            assert_eq!(bundle.meta.scenario, name);
            assert!(bundle.meanfield(&s.problem).is_ok());
        }
    }

    #[test]
    fn a_models_dir_may_be_the_bundle_or_its_parent() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
        let s = scenario::load("paper-n4").expect("bundled");
        let from_root = load(&s, Some(&root)).expect("models/paper-n4");
        let from_dir = load(&s, Some(&root.join("paper-n4"))).expect("the bundle dir");
        assert_eq!(from_root, from_dir);
        assert_eq!(
            Some(from_root),
            embedded("paper-n4").map(|b| b.expect("parses"))
        );
    }

    /// Retrains the smallest shipped bundle exactly as `mfsched models
    /// regenerate` does and checks its accuracy against the committed metrics.
    /// The simulator may have changed since the bundle was made (then the data
    /// hash differs): the accuracy must still hold.
    #[test]
    fn retraining_paper_n2_keeps_the_committed_accuracy() {
        let committed = embedded("paper-n2").expect("shipped").expect("parses");
        let dir = tempfile::tempdir().expect("temp dir");
        let fresh = regenerate(
            "paper-n2",
            committed.meta.training.seed,
            dir.path(),
            &mut |_, _, _| {},
        )
        .expect("regenerates");
        for (old, new) in committed.meta.models.iter().zip(&fresh.meta.models) {
            let (a, b) = (old.metrics.r2_holdout, new.metrics.r2_holdout);
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
