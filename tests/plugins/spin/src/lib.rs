//! Hostile test policy: never returns (an infinite loop). The host's epoch
//! deadline must interrupt it.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct Spin;

impl mfsched_sdk::Guest for Spin {
    fn name() -> String {
        "hostile: infinite loop".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(_: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        let mut spins = 0u64;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::Spin;
    mfsched_sdk::export_policy!(Spin);
}
