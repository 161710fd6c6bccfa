//! Hostile test policy: answers every model's most memory-hungry
//! configuration, which overflows the card on any problem where not
//! everything fits (e.g. paper-n5). The host's validation must reject it.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct VramInfeasible;

impl mfsched_sdk::Guest for VramInfeasible {
    fn name() -> String {
        "hostile: VRAM-infeasible decision".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        let config = problem
            .models
            .iter()
            .map(|m| {
                (0..m.configs.len() as u32)
                    .max_by_key(|&c| m.configs[c as usize].vram_mib)
                    .unwrap_or(0)
            })
            .collect();
        Ok(Decision {
            config,
            candidates_evaluated: 0,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::VramInfeasible;
    mfsched_sdk::export_policy!(VramInfeasible);
}
