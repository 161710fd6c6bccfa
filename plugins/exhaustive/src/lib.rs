//! Exhaustive search: the per-step argmax over every VRAM-feasible joint
//! configuration of the same surrogate-predicted landscape the other policies
//! search (the published reference the GA is measured against).
//!
//! Under the observed field every candidate's row comes from one prediction
//! per local configuration. With an additive utility a candidate's score is
//! the sum of the utility's per-model terms, and every feasible candidate is
//! covered by meeting in the middle (`Space::best_by_terms`: the last models'
//! combinations sorted by VRAM with their best sums, the models before walked
//! with the partial sums carried down): cheaper than receiving the host's
//! feasible list.
//! Otherwise the candidates are the host's feasible set (computed once per
//! problem), scored by the utility from the table or, under a candidate-aware
//! field, through the batched `predict` (N rows per candidate).

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_sdk::{Landscape, Params, Space, argmax};

struct Exhaustive;

impl mfsched_sdk::Guest for Exhaustive {
    fn name() -> String {
        "exhaustive search".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        Params::parse(params, Self::parameters())?;
        let space = Space::new(&problem);
        const NOTHING_FITS: &str = "no joint configuration fits in the card's VRAM";
        let landscape = Landscape::new(state);
        let (index, scored) = match &landscape {
            Landscape::Terms { terms } => {
                let best = space.best_by_terms(terms).ok_or(NOTHING_FITS)?;
                (best.index, best.scored)
            }
            _ => {
                let feasible = mfsched_sdk::feasible(&space, u64::MAX);
                if feasible.is_empty() {
                    return Err(NOTHING_FITS.into());
                }
                let scores = landscape.score(&space, &feasible);
                let best = argmax(&scores).ok_or("the utility returned no scores")?;
                (feasible[best], feasible.len() as u64)
            }
        };
        let mut config = vec![0u32; space.models()];
        space.decode(index, &mut config);
        Ok(Decision {
            config,
            candidates_evaluated: scored,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::Exhaustive;
    mfsched_sdk::export_policy!(Exhaustive);
}
