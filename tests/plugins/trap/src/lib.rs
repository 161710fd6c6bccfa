//! Hostile test policy: traps (a Rust panic becomes a Wasm `unreachable`).

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct Trap;

impl mfsched_sdk::Guest for Trap {
    fn name() -> String {
        "hostile: trap".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(_: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        panic!("this test plugin traps on purpose")
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::Trap;
    mfsched_sdk::export_policy!(Trap);
}
