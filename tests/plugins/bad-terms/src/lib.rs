//! Hostile test utility: scores a candidate as the plain sum of its
//! throughputs (additive), but the per-model terms it hands over hold a NaN.
//! A policy that sums terms must not be able to decide on them: the host
//! refuses the terms, naming the utility.

/// The generated `utility` world. wit-bindgen's glue is FFI, hence unsafe; its
/// lowered `terms` export takes the flattened problem and table as 15 scalars.
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
use bindings::mfsched::scheduler::types::Problem;

struct BadTerms;

impl Guest for BadTerms {
    fn name() -> String {
        "hostile: NaN among the terms".into()
    }

    fn score(problem: Problem, _: Vec<u64>, predictions: Vec<f32>) -> Vec<f64> {
        predictions
            .chunks(problem.models.len().max(1))
            .map(|row| row.iter().map(|&t| f64::from(t)).sum())
            .collect()
    }

    fn terms(_: Problem, table: Vec<f32>) -> Option<Vec<f64>> {
        let mut terms: Vec<f64> = table.iter().map(|&t| f64::from(t)).collect();
        if let Some(first) = terms.first_mut() {
            *first = f64::NAN;
        }
        Some(terms)
    }
}
