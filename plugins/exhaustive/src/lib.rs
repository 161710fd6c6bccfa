//! Exhaustive search: the per-step argmax over every VRAM-feasible joint
//! configuration of the same surrogate-predicted landscape the other policies
//! search (the published reference the GA is measured against).
//!
//! `predictions=table` asks the host for one prediction per local
//! configuration (sum of grid sizes) and assembles each candidate's row from
//! it, which is exact while the field is held fixed; `predictions=candidates`
//! sends every feasible candidate through the batched `predict` (N rows per
//! candidate), the path the candidate-aware field (`--field candidate-aware`) needs.

use mfsched_guest::params::spec;
use mfsched_guest::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_guest::{Params, Space, argmax, surrogate};

struct Exhaustive;

impl mfsched_guest::Guest for Exhaustive {
    fn name() -> String {
        "exhaustive search".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        vec![spec(
            "predictions",
            "table",
            "table: one prediction per local configuration (field held fixed); candidates: N predictions per feasible joint candidate",
        )]
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        let params = Params::parse(params, Self::parameters())?;
        let mode = params.choice("predictions", &["table", "candidates"])?;
        let space = Space::new(&problem);
        let feasible = space.feasible_indices();
        if feasible.is_empty() {
            return Err("no joint configuration fits in the card's VRAM".into());
        }
        let scores = match mode {
            "table" => {
                let table = surrogate::predict_table(state);
                mfsched_guest::evaluate_from_table(&space, &table, &feasible)
            }
            _ => mfsched_guest::evaluate_joint(state, &feasible),
        };
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
