//! Hostile test policy: answers a local configuration index one past the end
//! of model 0's grid. The host's validation must reject it.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct OutOfRange;

impl mfsched_sdk::Guest for OutOfRange {
    fn name() -> String {
        "hostile: out-of-range decision".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        let mut config = problem.current.clone();
        if let (Some(first), Some(model)) = (config.first_mut(), problem.models.first()) {
            *first = model.configs.len() as u32;
        }
        Ok(Decision {
            config,
            candidates_evaluated: 0,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::OutOfRange;
    mfsched_sdk::export_policy!(OutOfRange);
}
