//! What a predictor's net learns, and how its output becomes throughput.
//!
//! - [`Target::Absolute`]: the throughput itself, min–max scaled (the published
//!   design). On a linear scale the fastest configurations dominate the loss.
//! - [`Target::Log`]: `ln(1 + throughput)`: relative errors weigh alike for slow
//!   and fast configurations.
//! - [`Target::RelativeToSolo`]: the throughput under co-location divided by the
//!   model's solo throughput in the same configuration (from the profile's solo
//!   rows): the slowdown, the part the field has to explain. Configurations never
//!   measured alone borrow the solo throughput of the nearest measured one (in
//!   local-feature space), so every configuration of the grid has a prediction.
//!
//! The net (and the GPU shader) always compute the learnt quantity; [`OutputMap`]
//! turns it into throughput after inference, so the backends stay target-agnostic.

use crate::features;
use anyhow::{Result, bail};
use mfsched_core::Model;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    #[default]
    Absolute,
    Log,
    #[serde(rename = "relative")]
    RelativeToSolo,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Absolute, Target::Log, Target::RelativeToSolo];

    pub fn name(self) -> &'static str {
        match self {
            Target::Absolute => "absolute",
            Target::Log => "log",
            Target::RelativeToSolo => "relative",
        }
    }

    pub fn parse(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == text)
            .ok_or_else(|| {
                anyhow::anyhow!("unknown target '{text}' (known: absolute, log, relative)")
            })
    }

    /// Whether it needs the model's solo throughput.
    pub fn needs_solo(self) -> bool {
        self == Target::RelativeToSolo
    }

    /// The learnt quantity for a measured throughput (`solo`: the model's solo
    /// throughput in that configuration; only the relative target reads it).
    pub fn encode(self, throughput: f64, solo: f64) -> f32 {
        match self {
            Target::Absolute => throughput as f32,
            Target::Log => throughput.max(0.0).ln_1p() as f32,
            Target::RelativeToSolo => (throughput / solo) as f32,
        }
    }

    /// Throughput from the learnt quantity (never negative).
    pub fn decode(self, output: f32, solo: f32) -> f32 {
        match self {
            Target::Absolute => output,
            Target::Log => output.exp_m1().max(0.0),
            Target::RelativeToSolo => (output * solo).max(0.0),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One model's way from net output to throughput.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputMap {
    pub target: Target,
    /// Per configuration of the model's grid; empty unless the target needs it.
    pub solo: Vec<f32>,
}

impl OutputMap {
    /// The absolute target: outputs are throughput already.
    pub fn identity() -> Self {
        Self::plain(Target::Absolute)
    }

    /// A target that needs no solo table (absolute or log).
    pub fn plain(target: Target) -> Self {
        debug_assert!(!target.needs_solo());
        Self {
            target,
            solo: Vec::new(),
        }
    }

    /// A map for `model`; `solo` must cover its grid when the target needs it.
    pub fn new(model: &Model, target: Target, solo: Option<&[f64]>) -> Result<Self> {
        let solo: Vec<f32> = match (target.needs_solo(), solo) {
            (false, _) => Vec::new(),
            (true, None) => bail!(
                "model '{}': the {target} target needs its solo throughput per configuration",
                model.name
            ),
            (true, Some(s)) if s.len() != model.grid_size() => bail!(
                "model '{}': {} solo throughputs for {} configurations",
                model.name,
                s.len(),
                model.grid_size()
            ),
            (true, Some(s)) => {
                if let Some(bad) = s.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                    bail!(
                        "model '{}': solo throughput {bad} is not a positive number",
                        model.name
                    );
                }
                s.iter().map(|&v| v as f32).collect()
            }
        };
        Ok(Self { target, solo })
    }

    pub fn is_identity(&self) -> bool {
        self.target == Target::Absolute
    }

    /// The learnt quantity for throughput `y` of configuration `config`.
    pub fn encode(&self, config: usize, y: f64) -> f32 {
        let solo = self.solo.get(config).map_or(f64::NAN, |&v| f64::from(v));
        self.target.encode(y, solo)
    }

    /// Throughput of configuration `config` from the net's output.
    pub fn apply(&self, config: usize, output: f32) -> f32 {
        let solo = self.solo.get(config).copied().unwrap_or(f32::NAN);
        self.target.decode(output, solo)
    }
}

/// Fills the configurations never measured alone with the solo throughput of the
/// nearest measured configuration (squared distance of local features; ties to
/// the lowest index). `None` when no configuration was measured alone.
/// Returns the filled table and how many configurations were filled.
pub fn fill_solo(model: &Model, measured: &[Option<f64>]) -> Option<(Vec<f64>, usize)> {
    let table = features::local_table(model);
    let width = features::local_len(model);
    let row = |c: usize| &table[c * width..(c + 1) * width];
    let known: Vec<usize> = (0..measured.len())
        .filter(|&c| measured[c].is_some())
        .collect();
    if known.is_empty() {
        return None;
    }
    let mut filled = 0;
    let values = (0..measured.len())
        .map(|c| {
            measured[c].unwrap_or_else(|| {
                filled += 1;
                let distance = |k: usize| -> f32 {
                    row(c)
                        .iter()
                        .zip(row(k))
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum()
                };
                let nearest = known
                    .iter()
                    .copied()
                    .min_by(|&a, &b| distance(a).total_cmp(&distance(b)))
                    .expect("known is not empty");
                measured[nearest].expect("known")
            })
        })
        .collect();
    Some((values, filled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::load_scenario;

    #[test]
    fn each_target_decodes_what_it_encodes() {
        for target in Target::ALL {
            for (y, solo) in [(0.0, 10.0), (3.5, 7.0), (1234.5, 2000.0)] {
                let back = target.decode(target.encode(y, solo), solo as f32);
                assert!(
                    (f64::from(back) - y).abs() <= 1e-4 * y.max(1.0),
                    "{target}: {y} → {back}"
                );
            }
            assert_eq!(Target::parse(target.name()).expect("named"), target);
        }
        assert!(Target::parse("ratio").is_err());
        assert_eq!(Target::default(), Target::Absolute);
    }

    #[test]
    fn unmeasured_configurations_borrow_the_nearest_solo() {
        let problem = load_scenario("paper-n2").expect("bundled").problem;
        let yolo = &problem.models[1];
        let mut measured = vec![None; yolo.grid_size()];
        measured[0] = Some(100.0);
        measured[yolo.grid_size() - 1] = Some(10.0);
        let (values, filled) = fill_solo(yolo, &measured).expect("some measured");
        assert_eq!(filled, yolo.grid_size() - 2);
        assert_eq!(values[0], 100.0);
        assert_eq!(values[1], 100.0, "same variant, next image size");
        assert_eq!(values[yolo.grid_size() - 2], 10.0);
        assert!(fill_solo(yolo, &vec![None; yolo.grid_size()]).is_none());

        let map = OutputMap::new(yolo, Target::RelativeToSolo, Some(&values)).expect("fits");
        assert_eq!(map.apply(0, 0.5), 50.0);
        assert!(OutputMap::new(yolo, Target::RelativeToSolo, None).is_err());
        assert!(OutputMap::new(yolo, Target::RelativeToSolo, Some(&values[1..])).is_err());
    }
}
