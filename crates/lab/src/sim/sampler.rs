//! The simulator as the daemon's GPU: the running configuration under the tick's
//! workload, one noisy measurement per tick.

use anyhow::Result;
use mfsched_core::{Problem, WorkloadLevel};
use mfsched_daemon::{Sample, Sampler};

use super::Simulator;

/// The daemon's simulated card (`sampler.kind = "sim"`), as the composition root
/// hands it to `mfsched_daemon::build_sampler`.
pub fn simulated_gpu(problem: &Problem, seed: u64) -> Result<Box<dyn Sampler>> {
    Ok(Box::new(SimSampler::new(problem, seed)?))
}

/// The shared-GPU simulator (seeded): the running configuration under the
/// tick's workload, one noisy measurement per tick.
#[derive(Debug, Clone)]
pub struct SimSampler {
    sim: Simulator,
}

impl SimSampler {
    /// The simulated card for `problem`, seeded.
    pub fn new(problem: &Problem, seed: u64) -> Result<Self> {
        Ok(Self {
            sim: Simulator::new(problem, seed)?,
        })
    }
}

impl Sampler for SimSampler {
    fn sample(
        &mut self,
        problem: &Problem,
        applied: &[u32],
        workload: WorkloadLevel,
    ) -> Result<Sample> {
        let m = self.sim.measure(applied, workload, 1);
        Ok(Sample {
            source: "sim".into(),
            vram_used_mib: Some(m.state.vram_used_mib),
            vram_total_mib: Some(f64::from(problem.card.vram_mib)),
            utilization: Some(m.state.utilization),
            contention: m.state.contention,
            processes: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_daemon::build_sampler;
    use mfsched_daemon::{SamplerConfig, SamplerKind};

    #[test]
    fn sim_sampler_measures_the_applied_configuration_reproducibly() {
        let p = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        let config = SamplerConfig {
            kind: SamplerKind::Sim,
            ..SamplerConfig::default()
        };
        let read = || {
            let (mut s, note) =
                build_sampler(&config, &p, 9, Some(&simulated_gpu)).expect("simulator");
            assert!(note.is_none());
            s.sample(&p, &p.current, WorkloadLevel::Burst)
                .expect("sample")
        };
        let a = read();
        assert_eq!(a, read(), "same seed, same reading");
        assert_eq!(a.source, "sim");
        let u = a.utilization.expect("the simulator knows utilisation");
        assert!((0.0..=1.0).contains(&u));
        assert!(a.vram_used_mib.expect("known") > 0.0);
    }
}
