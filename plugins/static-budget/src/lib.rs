//! StaticBudgetK and StaticFull: search over a candidate set fixed offline.
//!
//! Interpretation (see docs/policies.md): the candidate set is drawn once, before
//! deployment, and never changes: K joint configurations sampled uniformly
//! without replacement from the VRAM-feasible space with the given seed
//! (`k=full` takes the whole feasible space: StaticFull). Every tick re-ranks
//! that fixed set under the current state's predictions (the host's field and
//! the utility's terms when it is additive, as exhaustive) and returns its best
//! member. It loses utility against per-step search exactly when the tick's
//! optimum is not in the set. The set is a pure function of the problem, K and
//! the seed, so a stateless component rebuilds the same set every tick.

use mfsched_sdk::params::spec;
use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_sdk::{Landscape, Params, Rng, Space, argmax};

struct StaticBudget;

impl mfsched_sdk::Guest for StaticBudget {
    fn name() -> String {
        "static candidate set (StaticBudgetK / StaticFull)".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        vec![spec(
            "k",
            "500",
            "size of the offline candidate set; 'full' for every feasible configuration (StaticFull)",
        )]
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        let params = Params::parse(params, Self::parameters())?;
        let space = Space::new(&problem);
        let mut feasible = mfsched_sdk::feasible(&space, u64::MAX);
        if feasible.is_empty() {
            return Err("no joint configuration fits in the card's VRAM".into());
        }
        let k = match params.raw("k") {
            Some("full") => feasible.len(),
            _ => params.u64_in("k", 1, u64::MAX)? as usize,
        };
        let candidates = if k >= feasible.len() {
            feasible
        } else {
            // Partial Fisher-Yates: the first k slots become a uniform sample.
            let mut rng = Rng::new(params.seed()?);
            for i in 0..k {
                let j = i + rng.below((feasible.len() - i) as u64) as usize;
                feasible.swap(i, j);
            }
            feasible.truncate(k);
            feasible
        };
        let scores = Landscape::new(state).score(&space, &candidates);
        let best = argmax(&scores).ok_or("the utility returned no scores")?;
        let mut config = vec![0u32; space.models()];
        space.decode(candidates[best], &mut config);
        Ok(Decision {
            config,
            candidates_evaluated: candidates.len() as u64,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::StaticBudget;
    mfsched_sdk::export_policy!(StaticBudget);
}
