//! Hostile test policy: panics in `name()` (the panic message goes to stderr
//! before the trap). The host must refuse it at load in one line, also in the
//! daemon's start-up, and go on.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct PanicName;

impl mfsched_sdk::Guest for PanicName {
    fn name() -> String {
        panic!("this test plugin panics in name() on purpose")
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        Ok(Decision {
            config: problem.current.clone(),
            candidates_evaluated: 0,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::PanicName;
    mfsched_sdk::export_policy!(PanicName);
}
