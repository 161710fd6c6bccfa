//! The policy benchmark behind `mfsched bench policies`: decision latency
//! through the Wasm boundary per policy (median, p99), and each policy's
//! utility gap to exhaustive search on the same ticks.

use mfsched_core::{GpuState, Problem, WorkloadLevel};
use mfsched_core::{PerCandidate, Predictor};
use mfsched_plugin_host::wit;
use mfsched_plugin_host::{Decider, Pipeline, PluginEngine};
use mfsched_plugin_host::{LoadedPolicy, LoadedUtility, Registry, Slot};
use mfsched_rng::Rng;
use std::sync::Arc;
use std::time::Duration;

/// One policy configuration under test.
#[derive(Debug, Clone)]
pub struct Contender {
    /// Label in reports, e.g. `static-budget k=500`.
    pub label: String,
    pub policy: Arc<LoadedPolicy>,
    /// Parameters besides `seed` (which the benchmark sets per tick).
    pub params: Vec<(String, String)>,
    /// Serves the predictor's observed field through joint predictions only
    /// ([`PerCandidate`]): the same landscape, asked per candidate.
    pub per_candidate: bool,
}

/// What one contender did over all ticks.
#[derive(Debug, Clone)]
pub struct ContenderResult {
    pub label: String,
    pub latencies: Vec<Duration>,
    /// Time in the predictor per tick.
    pub predict: Vec<Duration>,
    /// Time in the utility component per tick.
    pub evaluate: Vec<Duration>,
    /// Utility of the configuration used per tick (−∞ when none was valid).
    pub utilities: Vec<f64>,
    pub candidates: Vec<u64>,
    /// Ticks whose decision was not used (failure or rejection).
    pub failures: usize,
}

impl ContenderResult {
    /// Appends `later`'s ticks (the same contender on later ticks) to these.
    pub fn append(&mut self, later: ContenderResult) {
        self.latencies.extend(later.latencies);
        self.predict.extend(later.predict);
        self.evaluate.extend(later.evaluate);
        self.utilities.extend(later.utilities);
        self.candidates.extend(later.candidates);
        self.failures += later.failures;
    }
}

/// The ticks a benchmark decides: seeded random states (any regime, VRAM in
/// use between the resident models' least and the card, any utilisation), seeds
/// per tick.
pub fn ticks(problem: &Problem, count: usize, seed: u64) -> Vec<(GpuState, u64)> {
    let mut rng = Rng::derive(seed, 0x7ec5);
    let cap = f64::from(problem.card.vram_mib);
    // Every model is resident: the card holds at least their smallest
    // configurations (drawing below that gave states no card can be in, on
    // which a 16-model surrogate extrapolates).
    let resident: f64 = problem
        .models
        .iter()
        .map(|m| f64::from(m.min_vram_mib()))
        .sum::<f64>()
        .min(cap);
    (0..count)
        .map(|_| {
            let workload = WorkloadLevel::ALL[rng.below(4) as usize];
            let state = GpuState {
                workload,
                vram_used_mib: resident + (cap - resident) * rng.next_f64(),
                utilization: 0.1 + 0.85 * rng.next_f64(),
                contention: None,
            };
            (state, rng.next_u64() >> 11)
        })
        .collect()
}

/// Runs every contender on every tick (each tick with its own seed), in one
/// process, interleaving contenders per tick so drift hits all alike.
pub fn run(
    engine: &Arc<PluginEngine>,
    utility: &Arc<LoadedUtility>,
    predictor: &Arc<dyn Predictor>,
    problem: &Problem,
    contenders: &[Contender],
    ticks: &[(GpuState, u64)],
    mut progress: impl FnMut(),
) -> Vec<ContenderResult> {
    let registry = Registry::default();
    let utility_slot = registry.utility_slot(Arc::clone(utility));
    let mut results: Vec<ContenderResult> = contenders
        .iter()
        .map(|c| ContenderResult {
            label: c.label.clone(),
            latencies: Vec::new(),
            predict: Vec::new(),
            evaluate: Vec::new(),
            utilities: Vec::new(),
            candidates: Vec::new(),
            failures: 0,
        })
        .collect();
    // One pipeline per contender for every tick, as the daemon keeps one: the
    // feasible set is computed once per problem and the prepared problem
    // updated in place. Each tick gets a fresh decider: its own seed, and no
    // last valid decision from another tick's state.
    let pipelines: Vec<Pipeline> = contenders
        .iter()
        .map(|c| {
            let served: Arc<dyn Predictor> = if c.per_candidate {
                Arc::new(PerCandidate(Arc::clone(predictor)))
            } else {
                Arc::clone(predictor)
            };
            Pipeline::new(Arc::clone(engine), Arc::clone(&utility_slot), served)
        })
        .collect();
    for (state, seed) in ticks {
        for ((c, pipeline), result) in contenders.iter().zip(&pipelines).zip(&mut results) {
            let params = c
                .params
                .iter()
                .cloned()
                .chain([("seed".to_owned(), seed.to_string())])
                .map(|(key, value)| wit::Param { key, value })
                .collect();
            let mut decider = Decider::with_source(
                pipeline.clone(),
                Arc::new(Slot::new(Arc::clone(&c.policy))),
                &c.policy.info.name,
                params,
            );
            let report = decider.decide(problem, state);
            result.latencies.push(report.latency);
            result.predict.push(report.active.stats.predict);
            result.evaluate.push(report.active.stats.evaluate);
            result.candidates.push(report.active.candidates_evaluated);
            if report.failure().is_some() {
                result.failures += 1;
            }
            result
                .utilities
                .push(report.applied.utility.unwrap_or(f64::NEG_INFINITY));
            progress();
        }
    }
    results
}

/// Relative utility gap of `got` to `best` per tick: (best − got) / |best|.
pub fn gaps(best: &[f64], got: &[f64]) -> Vec<f64> {
    best.iter()
        .zip(got)
        .map(|(&b, &g)| {
            if b == g {
                0.0
            } else {
                (b - g) / b.abs().max(f64::MIN_POSITIVE)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_relative_and_zero_when_equal() {
        let g = gaps(
            &[2.0, 4.0, f64::NEG_INFINITY],
            &[1.0, 4.0, f64::NEG_INFINITY],
        );
        assert_eq!(g, vec![0.5, 0.0, 0.0]);
    }

    #[test]
    fn ticks_are_seeded() {
        let p = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        let a = ticks(&p, 5, 9);
        assert_eq!(a, ticks(&p, 5, 9));
        assert_ne!(a, ticks(&p, 5, 10));
    }
}
