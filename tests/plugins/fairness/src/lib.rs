//! Test utility that is not additive: a candidate scores the share of its
//! worst-served model (each model's throughput over the most its variants
//! showed in profiling), so no per-model terms can add up to it and `terms`
//! answers `none`. A policy that needs terms (exact) cannot decide with it.

/// The generated `utility` world. wit-bindgen's glue is FFI, hence unsafe; its
/// lowered exports may take their flattened arguments as many scalars.
#[allow(unsafe_code, clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "utility",
        path: "../../../wit",
    });

    use super::Fairness;
    export!(Fairness);
}

use bindings::Guest;
use bindings::mfsched::scheduler::types::{Param, ParamSpec, Problem};

struct Fairness;

impl Guest for Fairness {
    fn name() -> String {
        "fairness: the worst-served model's share".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn score(
        problem: Problem,
        _: Vec<Param>,
        _: Vec<u64>,
        predictions: Vec<f32>,
    ) -> Result<Vec<f64>, String> {
        let most: Vec<f64> = problem
            .throughput_ranges
            .iter()
            .map(|variants| {
                variants
                    .iter()
                    .map(|r| r.max)
                    .fold(f64::MIN_POSITIVE, f64::max)
            })
            .collect();
        Ok(predictions
            .chunks(problem.models.len().max(1))
            .map(|row| {
                let under_floor = row
                    .iter()
                    .zip(&problem.sla_floors)
                    .any(|(&t, &floor)| f64::from(t) < floor);
                if under_floor {
                    return f64::NEG_INFINITY;
                }
                row.iter()
                    .zip(&most)
                    .map(|(&t, &m)| f64::from(t) / m)
                    .fold(f64::INFINITY, f64::min)
            })
            .collect())
    }

    fn terms(_: Problem, _: Vec<Param>, _: Vec<f32>) -> Result<Option<Vec<f64>>, String> {
        Ok(None)
    }
}
