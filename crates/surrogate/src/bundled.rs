//! The MeanField bundles shipped with the binary (`models/<scenario>/`), how a
//! command finds the bundle for a scenario (how the shipped ones are made:
//! `mfsched_lab::training::regenerate`).
//!
//! The bundles are embedded with `include_bytes!`, so the binary predicts with no
//! training at start-up; `--models DIR` points elsewhere (a bundle directory, or
//! a directory of `<scenario>/` bundle directories like `models/`).

use super::bundle::{Bundle, META_FILE};
use anyhow::{Context, Result};
use mfsched_core::Scenario;
use mfsched_core::{Profile, read_profile_bytes};
use std::path::{Path, PathBuf};

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
    Embedded {
        scenario: "scale-n8",
        meta: include_bytes!("../../../models/scale-n8/bundle.json"),
        weights: include_bytes!("../../../models/scale-n8/weights.safetensors"),
        profile: include_bytes!("../../../models/scale-n8/profile.csv"),
    },
    Embedded {
        scenario: "scale-n12",
        meta: include_bytes!("../../../models/scale-n12/bundle.json"),
        weights: include_bytes!("../../../models/scale-n12/weights.safetensors"),
        profile: include_bytes!("../../../models/scale-n12/profile.csv"),
    },
    Embedded {
        scenario: "scale-n16",
        meta: include_bytes!("../../../models/scale-n16/bundle.json"),
        weights: include_bytes!("../../../models/scale-n16/weights.safetensors"),
        profile: include_bytes!("../../../models/scale-n16/profile.csv"),
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
            let bytes = mfsched_core::read_capped(
                &path,
                crate::bundle::MAX_PROFILE_BYTES,
                "training profile",
            )
            .with_context(|| {
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
    let sha = mfsched_core::sha256_hex(&bytes);
    if sha != bundle.meta.training.data_sha256 {
        anyhow::bail!(
            "{} is not the profile the bundle was trained on (SHA-256 {sha}, the bundle records {}); regenerate both with `mfsched models regenerate`",
            path.display(),
            bundle.meta.training.data_sha256
        );
    }
    read_profile_bytes(&bytes, &path, &scenario.problem)
}

/// `dir` itself when it holds a bundle, else `dir/<scenario>`.
pub fn bundle_dir(dir: &Path, scenario: &str) -> PathBuf {
    if dir.join(META_FILE).exists() {
        dir.to_path_buf()
    } else {
        dir.join(scenario)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::{bundled_scenario_names, load_scenario};

    #[test]
    fn every_bundled_scenario_has_a_loadable_embedded_bundle() {
        for name in bundled_scenario_names() {
            let s = load_scenario(name).expect("bundled");
            let bundle = load(&s, None).expect("embedded bundle fits");
            assert_eq!(bundle.meta.scenario, name);
            assert!(bundle.meanfield(&s.problem).is_ok());
        }
    }

    #[test]
    fn a_models_dir_may_be_the_bundle_or_its_parent() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
        let s = load_scenario("paper-n4").expect("bundled");
        let from_root = load(&s, Some(&root)).expect("models/paper-n4");
        let from_dir = load(&s, Some(&root.join("paper-n4"))).expect("the bundle dir");
        assert_eq!(from_root, from_dir);
        assert_eq!(
            Some(from_root),
            embedded("paper-n4").map(|b| b.expect("parses"))
        );
    }
}
