//! The simulator's physics data (`physics.toml`) and what it implies for one local
//! configuration of a model: solo throughput and resource demands.

use anyhow::{Context, Result, bail};
use mfsched_core::{Model, WorkloadLevel};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The bundled physics of the simulated card.
pub const BUNDLED_PHYSICS: &str = include_str!("physics.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhysicsFile {
    pub workload: WorkloadPhysics,
    pub contention: Contention,
    pub observation: Observation,
    pub families: BTreeMap<String, FamilyPhysics>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Load {
    pub offered_load: f64,
    pub spread: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadPhysics {
    pub load_min: f64,
    pub load_max: f64,
    pub low: Load,
    pub medium: Load,
    pub high: Load,
    pub burst: Load,
}

impl WorkloadPhysics {
    pub fn load(&self, level: WorkloadLevel) -> Load {
        match level {
            WorkloadLevel::Low => self.low,
            WorkloadLevel::Medium => self.medium,
            WorkloadLevel::High => self.high,
            WorkloadLevel::Burst => self.burst,
        }
    }

    pub fn clamp(&self, load: f64) -> f64 {
        load.clamp(self.load_min, self.load_max)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contention {
    pub saturation_demand: f64,
    pub knee_width: f64,
    pub llm: LlmContention,
    pub vision: VisionContention,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmContention {
    pub bandwidth: f64,
    pub early_exit_sync: f64,
    pub knee: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionContention {
    pub compute: f64,
    pub bandwidth: f64,
    pub knee: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    pub throughput_noise: f64,
    pub utilization_noise: f64,
    pub utilization_sharpness: f64,
    pub allocator_jitter_mib: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum FamilyPhysics {
    Llm(LlmFamily),
    Vision(VisionFamily),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmFamily {
    pub concurrency_exponent: f64,
    pub fixed_step_fraction: f64,
    pub compute_concurrency_exponent: f64,
    pub bandwidth_per_extra_sequence: f64,
    pub exit_idle: f64,
    pub variants: BTreeMap<String, LlmVariant>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmVariant {
    pub tokens_per_s: f64,
    pub compute: f64,
    pub bandwidth: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionFamily {
    pub reference_image_size: u32,
    pub compute_fixed_share: f64,
    pub bandwidth_fixed_share: f64,
    pub variants: BTreeMap<String, VisionVariant>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionVariant {
    pub fps: f64,
    pub fixed_time_fraction: f64,
    pub compute: f64,
    pub bandwidth: f64,
}

/// How a simulated model reacts to contention: the simulator's own notion,
/// set by its physics family (the scenario's free-form `kind` is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhysicsKind {
    /// Decoder LLM: memory-bandwidth bound while decoding.
    Llm,
    /// Vision detector: compute bound.
    Vision,
}

impl PhysicsKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PhysicsKind::Llm => "llm",
            PhysicsKind::Vision => "vision",
        }
    }
}

impl FamilyPhysics {
    pub fn kind(&self) -> PhysicsKind {
        match self {
            FamilyPhysics::Llm(_) => PhysicsKind::Llm,
            FamilyPhysics::Vision(_) => PhysicsKind::Vision,
        }
    }

    /// The knobs the simulator's physics for this family knows how to apply.
    fn knobs(&self) -> &'static [&'static str] {
        match self {
            FamilyPhysics::Llm(_) => &[CONCURRENCY, SKIP_RATE],
            FamilyPhysics::Vision(_) => &[IMAGE_SIZE, SKIP_RATE],
        }
    }

    fn variant_names(&self) -> Vec<&str> {
        match self {
            FamilyPhysics::Llm(f) => f.variants.keys().map(String::as_str).collect(),
            FamilyPhysics::Vision(f) => f.variants.keys().map(String::as_str).collect(),
        }
    }
}

/// The knob names the simulator's physics reads (as the bundled zoo declares them).
pub const CONCURRENCY: &str = "concurrency";
pub const SKIP_RATE: &str = "skip_rate";
pub const IMAGE_SIZE: &str = "image_size";

/// What the simulator needs to know about one local configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigPhysics {
    pub kind: PhysicsKind,
    /// Throughput alone on the card (tokens/s or FPS).
    pub solo: f64,
    /// Share of the SMs its kernels need while they run (a vision model's
    /// sensitivity to co-runners holding them).
    pub compute: f64,
    /// Share of DRAM bandwidth it takes while it runs alone and saturated (its
    /// pressure on co-runners, and a memory-bound model's sensitivity to theirs).
    pub bandwidth: f64,
    /// Share of GPU time its kernels occupy (what utilisation sees).
    pub occupancy: f64,
    /// LLM early exit: skip rate / relative step length (0 without early exit).
    pub exit_sync: f64,
}

impl PhysicsFile {
    pub fn parse(text: &str) -> Result<Self> {
        let file: PhysicsFile =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("simulator physics: {e}"))?;
        file.validate()?;
        Ok(file)
    }

    pub fn bundled() -> Result<Self> {
        Self::parse(BUNDLED_PHYSICS)
    }

    fn validate(&self) -> Result<()> {
        let w = &self.workload;
        if !(w.load_min > 0.0 && w.load_min < w.load_max) {
            bail!("simulator physics: need 0 < workload.load_min < workload.load_max");
        }
        for level in WorkloadLevel::ALL {
            let l = w.load(level);
            if !(l.offered_load > 0.0 && l.spread >= 0.0) {
                bail!("simulator physics: workload.{level} needs offered_load > 0 and spread ≥ 0");
            }
        }
        if self.contention.knee_width <= 0.0 || self.observation.utilization_sharpness <= 0.0 {
            bail!(
                "simulator physics: contention.knee_width and observation.utilization_sharpness must be positive"
            );
        }
        Ok(())
    }

    /// The physics of every local configuration of `model`, in grid order.
    pub fn configs(&self, model: &Model) -> Result<Vec<ConfigPhysics>> {
        let family = self.families.get(&model.family).with_context(|| {
            format!(
                "model '{}': the simulator has no physics for family '{}' (it knows: {}); \
                 add it to crates/lab/src/sim/physics.toml or profile a real card",
                model.name,
                model.family,
                self.families.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?;
        if let Some(knob) = model
            .knobs
            .iter()
            .find(|k| !family.knobs().contains(&k.name.as_str()))
        {
            bail!(
                "model '{}': the simulator's physics for family '{}' has no knob '{}' (it applies: {})",
                model.name,
                model.family,
                knob.name,
                family.knobs().join(", ")
            );
        }
        model
            .configs
            .iter()
            .enumerate()
            .map(|(ci, c)| {
                let variant = &model.variants[c.variant].name;
                let missing = || {
                    format!(
                        "model '{}': the simulator has no physics for variant '{variant}' of family '{}' (it knows: {})",
                        model.name,
                        model.family,
                        family.variant_names().join(", ")
                    )
                };
                let skip = model.number(ci, SKIP_RATE).unwrap_or(0.0);
                Ok(match family {
                    FamilyPhysics::Llm(f) => {
                        let v = f.variants.get(variant).with_context(missing)?;
                        let concurrency = model.number(ci, CONCURRENCY).unwrap_or(1.0).max(1.0);
                        llm_config(f, v, concurrency, skip)
                    }
                    FamilyPhysics::Vision(f) => {
                        let v = f.variants.get(variant).with_context(missing)?;
                        let size = model
                            .number(ci, IMAGE_SIZE)
                            .unwrap_or(f64::from(f.reference_image_size));
                        vision_config(f, v, size, skip)
                    }
                })
            })
            .collect()
    }
}

fn llm_config(f: &LlmFamily, v: &LlmVariant, concurrency: f64, skip: f64) -> ConfigPhysics {
    // Early exit skips `skip` of the layers but not the fixed part of a step.
    let step = f.fixed_step_fraction + (1.0 - f.fixed_step_fraction) * (1.0 - skip);
    let compute = v.compute * concurrency.powf(f.compute_concurrency_exponent);
    let bandwidth = v.bandwidth * (1.0 + f.bandwidth_per_extra_sequence * (concurrency - 1.0));
    ConfigPhysics {
        kind: PhysicsKind::Llm,
        solo: v.tokens_per_s * concurrency.powf(f.concurrency_exponent) / step,
        compute,
        bandwidth,
        occupancy: compute.max(bandwidth).min(1.0) * (1.0 - f.exit_idle * skip),
        exit_sync: skip / step,
    }
}

fn vision_config(f: &VisionFamily, v: &VisionVariant, size: f64, skip: f64) -> ConfigPhysics {
    let pixels = (size / f64::from(f.reference_image_size)).powi(2);
    let frame_time = v.fixed_time_fraction + (1.0 - v.fixed_time_fraction) * pixels;
    // Skipped frames are never sent to the GPU: the detector keeps it busy less
    // (its SM need per frame is unchanged).
    let duty = 1.0 - skip;
    let compute = v.compute * (f.compute_fixed_share + (1.0 - f.compute_fixed_share) * pixels);
    let bandwidth =
        v.bandwidth * (f.bandwidth_fixed_share + (1.0 - f.bandwidth_fixed_share) * pixels);
    ConfigPhysics {
        kind: PhysicsKind::Vision,
        solo: v.fps / frame_time,
        compute,
        bandwidth: bandwidth * duty,
        occupancy: compute.max(bandwidth).min(1.0) * duty,
        exit_sync: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::{bundled_scenario_families, instantiate_scenario};

    #[test]
    fn bundled_physics_covers_every_zoo_family_and_variant() {
        let physics = PhysicsFile::bundled().expect("bundled physics parses");
        for (name, family) in bundled_scenario_families().expect("zoo") {
            let model = instantiate_scenario("m", &name, &family, None).expect("model");
            let configs = physics
                .configs(&model)
                .expect("physics for every zoo family");
            assert_eq!(configs.len(), model.grid_size());
            for c in configs {
                assert!(c.solo > 0.0 && c.solo.is_finite(), "{name}: {c:?}");
                assert!((0.0..=1.0).contains(&c.occupancy), "{name}: {c:?}");
            }
        }
    }

    #[test]
    fn knobs_move_solo_throughput_the_physical_way() {
        let physics = PhysicsFile::bundled().expect("bundled physics");
        let families = bundled_scenario_families().expect("zoo");
        let llm = instantiate_scenario("l", "llama-3.2-3b", &families["llama-3.2-3b"], None)
            .expect("llm");
        let p = physics.configs(&llm).expect("physics");
        let solo = |v: &str, c: u32, s: f64| {
            let i = llm
                .configs
                .iter()
                .enumerate()
                .position(|(i, x)| {
                    llm.variants[x.variant].name == v
                        && llm.number(i, CONCURRENCY) == Some(f64::from(c))
                        && llm.number(i, SKIP_RATE) == Some(s)
                })
                .expect("config on the grid");
            p[i].solo
        };
        assert!(
            solo("awq", 1, 0.0) > solo("fp16", 1, 0.0),
            "AWQ decodes faster"
        );
        assert!(
            solo("awq", 4, 0.0) > 3.0 * solo("awq", 1, 0.0),
            "batching is nearly free"
        );
        assert!(
            solo("awq", 1, 0.5) > 1.5 * solo("awq", 1, 0.0),
            "early exit speeds up"
        );

        let yolo = instantiate_scenario("y", "yolo11", &families["yolo11"], None).expect("yolo");
        let p = physics.configs(&yolo).expect("physics");
        // Grid order: variant (n, s, m) × image size (320, 480, 640).
        assert!(p[0].solo > p[2].solo, "smaller images are faster");
        assert!(
            p[2].solo > p[5].solo && p[5].solo > p[8].solo,
            "n > s > m at 640"
        );
        assert!(p[8].compute > p[2].compute, "m needs more SMs than n");
    }

    #[test]
    fn unknown_family_and_unknown_knob_are_clear_errors() {
        let physics = PhysicsFile::bundled().expect("bundled physics");
        let families = bundled_scenario_families().expect("zoo");
        let mut model =
            instantiate_scenario("x", "yolo11", &families["yolo11"], None).expect("model");
        model.family = "resnet".into();
        let err = physics.configs(&model).expect_err("no physics").to_string();
        assert!(err.contains("no physics for family 'resnet'"), "{err}");

        // A detector's image size means nothing to an LLM's physics.
        model.family = "llama-3.2-3b".into();
        let err = physics
            .configs(&model)
            .expect_err("knob without physics")
            .to_string();
        assert!(
            err.contains("family 'llama-3.2-3b' has no knob 'image_size'"),
            "{err}"
        );
    }
}
