//! Exhaustive search: the per-step argmax over every VRAM-feasible joint
//! configuration of the same surrogate-predicted landscape the other policies
//! search (the published reference the GA is measured against).
//!
//! The feasible set is the host's (computed once per problem). Under the
//! observed field every candidate's row comes from one prediction per local
//! configuration, and with an additive utility its score is the sum of the
//! utility's per-model terms; under a candidate-aware field every feasible
//! candidate goes through the batched `predict` (N rows per candidate).

use mfsched_guest::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_guest::{Landscape, Params, Space, argmax};

struct Exhaustive;

impl mfsched_guest::Guest for Exhaustive {
    fn name() -> String {
        "exhaustive search".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        Params::parse(params, Self::parameters())?;
        let space = Space::new(&problem);
        let feasible = mfsched_guest::feasible(&space, u64::MAX);
        if feasible.is_empty() {
            return Err("no joint configuration fits in the card's VRAM".into());
        }
        let scores = Landscape::new(state).score(&space, &feasible);
        let best = argmax(&scores).ok_or("the utility returned no scores")?;
        let mut config = vec![0u32; space.models()];
        space.decode(feasible[best], &mut config);
        Ok(Decision {
            config,
            candidates_evaluated: feasible.len() as u64,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::Exhaustive;
    mfsched_guest::export_policy!(Exhaustive);
}
