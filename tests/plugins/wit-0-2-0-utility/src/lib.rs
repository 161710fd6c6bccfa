//! Test utility built against `mfsched:scheduler@0.2.0` (the WIT before
//! utilities declared parameters, kept in `tests/fixtures/wit-0.2.0/`):
//! otherwise well-behaved (additive: a candidate scores the sum of its
//! throughputs), so the only reason a 0.3 host can give for refusing it is
//! the version.

/// The generated bindings; wit-bindgen's glue is FFI, hence unsafe; its
/// lowered `terms` export takes the flattened problem and table as 15 scalars.
#[allow(unsafe_code, clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "utility",
        path: "../../fixtures/wit-0.2.0",
    });

    use super::Sum;
    export!(Sum);
}

use bindings::Guest;
use bindings::mfsched::scheduler::types::Problem;

struct Sum;

impl Guest for Sum {
    fn name() -> String {
        "test: built against WIT 0.2.0".into()
    }

    fn score(problem: Problem, _: Vec<u64>, predictions: Vec<f32>) -> Vec<f64> {
        predictions
            .chunks(problem.models.len().max(1))
            .map(|row| row.iter().map(|&t| f64::from(t)).sum())
            .collect()
    }

    fn terms(_: Problem, table: Vec<f32>) -> Option<Vec<f64>> {
        Some(table.iter().map(|&t| f64::from(t)).collect())
    }
}
