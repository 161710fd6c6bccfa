//! Hostile test utility: scores a candidate as the plain sum of its
//! throughputs (additive), but the per-model terms it hands over hold a NaN.
//! A policy that sums terms must not be able to decide on them: the host
//! refuses the terms, naming the utility.

/// The generated `utility` world. wit-bindgen's glue is FFI, hence unsafe; its
/// lowered exports may take their flattened arguments as many scalars.
#[allow(unsafe_code, clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "utility",
        path: "../../../wit",
    });

    use super::BadTerms;
    export!(BadTerms);
}

use bindings::Guest;
use bindings::mfsched::scheduler::types::{Param, ParamSpec, Problem};

struct BadTerms;

impl Guest for BadTerms {
    fn name() -> String {
        "hostile: NaN among the terms".into()
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
        Ok(predictions
            .chunks(problem.models.len().max(1))
            .map(|row| row.iter().map(|&t| f64::from(t)).sum())
            .collect())
    }

    fn terms(_: Problem, _: Vec<Param>, table: Vec<f32>) -> Result<Option<Vec<f64>>, String> {
        let mut terms: Vec<f64> = table.iter().map(|&t| f64::from(t)).collect();
        if let Some(first) = terms.first_mut() {
            *first = f64::NAN;
        }
        Ok(Some(terms))
    }
}
