//! Getting a problem ready for plugins: the utility needs per-variant
//! throughput ranges and SLA floors, which profiles (via the surrogate bundle)
//! supply; until they do, they are derived from the predictor.

use crate::registry::{PluginInfo, World};
use mfsched_core::{GpuState, Problem, WorkloadLevel};
use mfsched_core::{PredictError, Predictor, predicted_quantile_floors, predicted_ranges};

/// Utilisations the derived ranges and floors sweep, beside the four regimes.
const SWEEP_UTILIZATION: [f64; 3] = [0.2, 0.5, 0.9];

/// The quantile SLA floors default to (the published P25).
pub const FLOOR_QUANTILE: f64 = 0.25;

/// Fills `throughput_ranges` when empty and every floor the scenario did not
/// set explicitly (`explicit[i]` false) with the P25 of predicted throughput.
/// Returns how many floors were derived.
pub fn fill_defaults(
    problem: &mut Problem,
    explicit: &[bool],
    predictor: &dyn Predictor,
) -> Result<usize, PredictError> {
    if problem.throughput_ranges.is_empty() {
        problem.throughput_ranges = predicted_ranges(predictor, problem, &SWEEP_UTILIZATION)?;
    }
    let derived =
        predicted_quantile_floors(predictor, problem, &SWEEP_UTILIZATION, FLOOR_QUANTILE)?;
    Ok(problem.fill_open_floors(explicit, |i| derived.get(i).copied()))
}

/// The parameter the host always passes and a policy may not declare.
pub const SEED: &str = "seed";

/// The parameters a policy or a utility is called with: `given` checked
/// against what it declares (an unknown key is refused, naming the known
/// ones), then every declared parameter not given, at its declared default,
/// so the defaults a component shows are the ones it runs with. A policy's
/// `given` may hold `seed` (the host puts it there); nothing else undeclared
/// may.
pub fn with_declared_params(
    component: &PluginInfo,
    mut given: Vec<(String, String)>,
) -> Result<Vec<(String, String)>, String> {
    let seeded = component.world == World::Policy;
    for (key, _) in &given {
        let declared = (seeded && key == SEED) || component.params.iter().any(|p| &p.name == key);
        if !declared {
            let known: Vec<&str> = component.params.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "unknown parameter '{key}' for {} '{}'; it knows: {}",
                component.world,
                component.name,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    for p in &component.params {
        if !given.iter().any(|(k, _)| *k == p.name) {
            given.push((p.name.clone(), p.default_value.clone()));
        }
    }
    Ok(given)
}

/// The state a one-off decision (and a component's self-check) is made for
/// when none is given: medium load, the running configuration's memory in
/// use, half the SMs and half the memory controller busy (a reading, so a
/// bundle trained on the contention field can be checked before the first).
pub fn default_state(problem: &Problem) -> GpuState {
    GpuState {
        workload: WorkloadLevel::Medium,
        vram_used_mib: problem.vram_mib(&problem.current) as f64,
        utilization: 0.5,
        contention: Some(0.5),
    }
}
