//! Hostile test policy: allocates (and touches) memory until something stops
//! it. The host's memory limit must trap it.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct MemoryBomb;

impl mfsched_sdk::Guest for MemoryBomb {
    fn name() -> String {
        "hostile: memory hog".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(_: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let chunk = vec![0xA5u8; 1 << 20];
            hoard.push(std::hint::black_box(chunk));
        }
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::MemoryBomb;
    mfsched_sdk::export_policy!(MemoryBomb);
}
