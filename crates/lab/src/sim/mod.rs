//! The ground-truth shared-GPU contention **simulator**: the embedded default "GPU"
//! (a simulated 24 GB card) for demos, tests and benchmarks. Seeded and deterministic.
//! Everything it reports is a simulation, and every user-facing line built on it says
//! so.
//!
//! # Model
//!
//! Per-family physics (`physics.toml`) gives every local configuration j a solo
//! throughput Tⱼ and, while it runs alone and saturated, a compute demand cⱼ (share of
//! SM time), a bandwidth demand bⱼ (share of DRAM bandwidth) and a GPU-time occupancy
//! xⱼ (what utilisation sees).
//!
//! **Workload.** A regime is an *offered load* ρ: the fraction of its solo capacity
//! every model is driven at, hence how busy it keeps the GPU. Each measurement draws
//! ρ ~ Normal(ρ̄, σ) clamped (low 0.45, medium 0.65, high 0.85, burst 1.15 with a
//! large σ: oversubscribed and noisy). All models of a measurement share the draw:
//! one load generator drives them.
//!
//! **Contention.** Model i feels the others' aggregate pressure, not who they are:
//! their GPU-time share Xᵢ = ρ Σⱼ≠ᵢ xⱼ (the SM time their kernels hold) and their
//! DRAM traffic Bᵢ = ρ Σⱼ≠ᵢ bⱼ; and the total demand D = ρ Σⱼ xⱼ. Past saturation
//! time slicing queues everyone: a smooth knee h(d) = w·softplus((d − d_sat)/w), of
//! which model i pays the part co-runners cause, Kᵢ = h(D) − h(ρ xᵢ) (so a model
//! alone is never slowed). Its work stretches by
//!
//! - LLM (memory bound while decoding):
//!   sᵢ = 1 + k_bw · bᵢ · Bᵢ + k_sync · eᵢ · Xᵢ + κ_llm · Kᵢ, where eᵢ = skip / step
//!   length: early exit synchronises with the host every token, each sync waits for
//!   the co-runners' kernels in flight, and that wait weighs more in a shorter step.
//!   This is why skip rate dominates LLM slowdown.
//! - vision (compute bound): sᵢ = 1 + k_c · cᵢ · Xᵢ + k_vb · bᵢ · Bᵢ + κ_vis · Kᵢ: a
//!   frame waits while co-runners hold the SMs, the more so the more SMs the detector
//!   needs (larger variants and images); the knee makes workload intensity the
//!   dominant factor.
//!
//! and throughput is Tᵢ / sᵢ, times a log-normal measurement noise of mean 1.
//!
//! **Observed state.** VRAM used = Σ footprints + allocator jitter (the caching
//! allocator holds a little more than reserved); utilisation = soft-min(D, 1) + noise,
//! clamped to [0, 1] (time slicing: the GPU is busy for Σ of the shares, up to all of
//! the time); contention (the memory controller's busy share) = soft-min(ρ Σ bⱼ, 1) +
//! noise, clamped, drawn from a stream of its own so that adding it left every other
//! draw, and so every published figure, as it was. `measure` averages `repeats`
//! measurements, state included.
//!
//! **Learnable by MeanField.** Given its own configuration and the workload level, a
//! model's slowdown depends on the co-runners only through aggregate demand, which
//! the observed utilisation and VRAM reflect; the burst load fluctuation is visible
//! in utilisation too. `mfsched sim ceiling` measures how much throughput variance the
//! noise leaves unexplained.

pub(crate) mod calibration;
pub(crate) mod calibration_plot;
pub(crate) mod ceiling;
pub(crate) mod physics;
pub(crate) mod sampler;
pub(crate) mod serve;

use anyhow::Result;
use mfsched_core::{GpuState, Problem, WorkloadLevel};
use mfsched_rng::Rng;
use physics::{ConfigPhysics, PhysicsFile, PhysicsKind};

/// The name users see for the simulated device.
pub const DEVICE_NAME: &str = "simulated 24 GB card";

/// Gauss–Hermite nodes and weights (probabilists', 7 points) for the expectation
/// over the load draw: exact for polynomials of degree ≤ 13, ample for a smooth stretch.
const HERMITE_7: [(f64, f64); 7] = [
    (-3.750_439_717_725_742, 0.000_548_268_855_972_218),
    (-2.366_759_410_734_541, 0.030_757_123_967_586_54),
    (-1.154_405_394_739_968, 0.240_123_178_605_012_7),
    (0.0, 0.457_142_857_142_857_1),
    (1.154_405_394_739_968, 0.240_123_178_605_012_7),
    (2.366_759_410_734_541, 0.030_757_123_967_586_54),
    (3.750_439_717_725_742, 0.000_548_268_855_972_218),
];

/// One profiling measurement: throughput per model and the observed aggregate state.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub throughput: Vec<f64>,
    pub state: GpuState,
    /// The offered load ρ the measurement drew (mean over its repeats): the
    /// fraction of their solo capacity the models were driven at.
    pub offered_load: f64,
}

/// The simulated shared GPU running a problem's models.
#[derive(Debug, Clone)]
pub struct Simulator {
    physics: PhysicsFile,
    /// Per model, per local configuration.
    configs: Vec<Vec<ConfigPhysics>>,
    /// Per model, per local configuration, MiB.
    vram_mib: Vec<Vec<u32>>,
    rng: Rng,
    /// The contention reading's noise (its own stream: see the module doc).
    contention_rng: Rng,
}

/// Offsets the contention stream's seed from the main one.
const CONTENTION_STREAM: u64 = 0x6d65_6d62_7573_7900;

impl Simulator {
    /// Errors (clear message) if a model's family has no physics entry.
    pub fn new(problem: &Problem, seed: u64) -> Result<Self> {
        Self::with_physics(problem, PhysicsFile::bundled()?, seed)
    }

    /// A simulator with other physics (for experiments with the model itself).
    pub fn with_physics(problem: &Problem, physics: PhysicsFile, seed: u64) -> Result<Self> {
        let configs = problem
            .models
            .iter()
            .map(|m| physics.configs(m))
            .collect::<Result<Vec<_>>>()?;
        let vram_mib = problem
            .models
            .iter()
            .map(|m| m.configs.iter().map(|c| c.vram_mib).collect())
            .collect();
        Ok(Self {
            physics,
            configs,
            vram_mib,
            rng: Rng::new(seed),
            contention_rng: Rng::new(seed ^ CONTENTION_STREAM),
        })
    }

    /// One profiling measurement of `joint` under `workload`: `repeats` noisy
    /// measurements averaged (throughput per model + the observed aggregate state).
    /// `repeats` of 0 counts as 1.
    ///
    /// The simulator does not check VRAM: a joint configuration over the card's
    /// memory would not start on a real card, so callers profile feasible ones.
    /// Panics if `joint` has the wrong arity or an index off a model's grid.
    pub fn measure(&mut self, joint: &[u32], workload: WorkloadLevel, repeats: u32) -> Measurement {
        let parts = self.parts(joint);
        let repeats = repeats.max(1);
        let load = self.physics.workload.load(workload);
        let obs = self.physics.observation.clone();
        let footprint: f64 = joint
            .iter()
            .enumerate()
            .map(|(i, &c)| f64::from(self.vram_mib[i][c as usize]))
            .sum();
        let mut throughput = vec![0.0; parts.len()];
        let mut vram = 0.0;
        let mut utilization = 0.0;
        let mut contention = 0.0;
        let mut offered_load = 0.0;
        for _ in 0..repeats {
            let rho = self
                .physics
                .workload
                .clamp(load.offered_load + load.spread * self.rng.normal());
            offered_load += rho;
            let demand = rho * parts.iter().map(|p| p.occupancy).sum::<f64>();
            for (i, t) in throughput.iter_mut().enumerate() {
                let noise = (obs.throughput_noise * self.rng.normal()
                    - 0.5 * obs.throughput_noise.powi(2))
                .exp();
                *t += parts[i].solo / self.stretch(&parts, i, rho) * noise;
            }
            vram += footprint + obs.allocator_jitter_mib * self.rng.normal().abs();
            utilization += (self.utilization(demand) + obs.utilization_noise * self.rng.normal())
                .clamp(0.0, 1.0);
            let traffic = rho * parts.iter().map(|p| p.bandwidth).sum::<f64>();
            contention += (self.utilization(traffic)
                + obs.utilization_noise * self.contention_rng.normal())
            .clamp(0.0, 1.0);
        }
        let r = f64::from(repeats);
        throughput.iter_mut().for_each(|t| *t /= r);
        Measurement {
            throughput,
            state: GpuState {
                workload,
                vram_used_mib: vram / r,
                utilization: utilization / r,
                contention: Some(contention / r),
            },
            offered_load: offered_load / r,
        }
    }

    /// Noise-free expected throughput per model (ground truth for realised utility):
    /// the mean of `measure` over its noise and the regime's load fluctuation.
    pub fn expected_throughput(&self, joint: &[u32], workload: WorkloadLevel) -> Vec<f64> {
        let parts = self.parts(joint);
        let load = self.physics.workload.load(workload);
        let mut out = vec![0.0; parts.len()];
        for (z, weight) in HERMITE_7 {
            let rho = self
                .physics
                .workload
                .clamp(load.offered_load + load.spread * z);
            for (i, o) in out.iter_mut().enumerate() {
                *o += weight * parts[i].solo / self.stretch(&parts, i, rho);
            }
        }
        out
    }

    /// Throughput of model `i` in local config `config` running alone.
    pub fn solo_throughput(&self, i: usize, config: usize) -> f64 {
        self.configs[i][config].solo
    }

    /// How model `i` reacts to contention in this simulator.
    pub fn physics_kind(&self, i: usize) -> PhysicsKind {
        self.configs[i][0].kind
    }

    fn parts(&self, joint: &[u32]) -> Vec<ConfigPhysics> {
        assert_eq!(
            joint.len(),
            self.configs.len(),
            "joint configuration arity must match the problem"
        );
        joint
            .iter()
            .zip(&self.configs)
            .map(|(&c, m)| m[c as usize])
            .collect()
    }

    /// How much longer model `i`'s work takes beside the others at load `rho` (≥ 1).
    fn stretch(&self, parts: &[ConfigPhysics], i: usize, rho: f64) -> f64 {
        let me = &parts[i];
        let others = |f: fn(&ConfigPhysics) -> f64| {
            rho * parts
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, p)| f(p))
                .sum::<f64>()
        };
        let bandwidth = others(|p| p.bandwidth);
        let occupancy = others(|p| p.occupancy);
        let queueing = self.knee(rho * me.occupancy + occupancy) - self.knee(rho * me.occupancy);
        let c = &self.physics.contention;
        match me.kind {
            PhysicsKind::Llm => {
                1.0 + c.llm.bandwidth * me.bandwidth * bandwidth
                    + c.llm.early_exit_sync * me.exit_sync * occupancy
                    + c.llm.knee * queueing
            }
            PhysicsKind::Vision => {
                1.0 + c.vision.compute * me.compute * occupancy
                    + c.vision.bandwidth * me.bandwidth * bandwidth
                    + c.vision.knee * queueing
            }
        }
    }

    /// The smooth hinge w·softplus((d − d_sat)/w): ≈ 0 below saturation, ≈ d − d_sat past it.
    fn knee(&self, demand: f64) -> f64 {
        let c = &self.physics.contention;
        let x = (demand - c.saturation_demand) / c.knee_width;
        // softplus, written to stay finite for large x.
        let softplus = x.max(0.0) + (-x.abs()).exp().ln_1p();
        c.knee_width * softplus
    }

    /// Utilisation for a total GPU-time demand: a soft minimum of (demand, 1).
    fn utilization(&self, demand: f64) -> f64 {
        let p = self.physics.observation.utilization_sharpness;
        demand / (1.0 + demand.powf(p)).powf(1.0 / p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::load_scenario;

    fn paper(n: usize) -> Problem {
        load_scenario(&format!("paper-n{n}"))
            .expect("bundled scenario")
            .problem
    }

    #[test]
    fn same_seed_same_measurements_and_seeds_differ() {
        let p = paper(2);
        let run = |seed| {
            let mut sim = Simulator::new(&p, seed).expect("physics for paper-n2");
            (0..5)
                .map(|k| sim.measure(&[k, 8 - k], WorkloadLevel::Burst, 3))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn co_runners_slow_a_model_down_and_alone_it_runs_at_solo_speed() {
        let p = paper(2);
        let sim = Simulator::new(&p, 1).expect("physics");
        for w in WorkloadLevel::ALL {
            let tp = sim.expected_throughput(&[3, 4], w);
            assert!(tp[0] < sim.solo_throughput(0, 3), "{w}: {tp:?}");
            assert!(tp[1] < sim.solo_throughput(1, 4), "{w}: {tp:?}");
        }
        // More load, more interference.
        let low = sim.expected_throughput(&[3, 4], WorkloadLevel::Low);
        let burst = sim.expected_throughput(&[3, 4], WorkloadLevel::Burst);
        assert!(burst[1] < low[1]);

        // A one-model problem: no co-runners, no slowdown, whatever the load.
        let mut solo = p.clone();
        solo.models.truncate(1);
        solo.current.truncate(1);
        let sim = Simulator::new(&solo, 1).expect("physics");
        for w in WorkloadLevel::ALL {
            let tp = sim.expected_throughput(&[5], w)[0];
            assert!((tp / sim.solo_throughput(0, 5) - 1.0).abs() < 1e-12, "{w}");
        }
    }

    #[test]
    fn observed_state_follows_the_joint_configuration() {
        let p = paper(2);
        let mut sim = Simulator::new(&p, 3).expect("physics");
        let joint = [17, 8]; // the largest of both
        let m = sim.measure(&joint, WorkloadLevel::High, 5);
        let footprint = p.vram_mib(&joint) as f64;
        assert!(m.state.vram_used_mib >= footprint);
        assert!(m.state.vram_used_mib < footprint + 200.0);
        assert!((0.0..=1.0).contains(&m.state.utilization));
        let light = sim.measure(&[0, 0], WorkloadLevel::Low, 5);
        assert!(light.state.utilization < m.state.utilization);
        let (busy, calm) = (m.state.contention, light.state.contention);
        assert!(busy.is_some_and(|c| (0.0..=1.0).contains(&c)), "{busy:?}");
        assert!(
            calm < busy,
            "less traffic, less contention: {calm:?} {busy:?}"
        );
        assert_eq!(m.state.workload, WorkloadLevel::High);
    }

    #[test]
    fn repeats_average_the_noise_toward_the_expectation() {
        let p = paper(2);
        let mut sim = Simulator::new(&p, 11).expect("physics");
        let joint = [10, 5];
        let expected = sim.expected_throughput(&joint, WorkloadLevel::Medium);
        let n = 400;
        let mean: f64 = (0..n)
            .map(|_| sim.measure(&joint, WorkloadLevel::Medium, 1).throughput[1])
            .sum::<f64>()
            / f64::from(n);
        assert!(
            (mean / expected[1] - 1.0).abs() < 0.01,
            "{mean} vs {expected:?}"
        );
    }

    #[test]
    fn a_family_without_physics_is_a_clear_error() {
        let mut p = paper(2);
        p.models[1].family = "detr".into();
        let err = Simulator::new(&p, 1).expect_err("no physics").to_string();
        assert!(err.contains("no physics for family 'detr'"), "{err}");
    }
}
