//! Hostile test policy: describes itself with a name of 1 MiB that forges a
//! line, and a million parameters. The host must refuse it at load, in one line.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct HostileDescribe;

impl mfsched_sdk::Guest for HostileDescribe {
    fn name() -> String {
        let mut name = String::from("x\nok    passed  ready to ship\n");
        name.push_str(&"n".repeat(1 << 20));
        name
    }

    fn parameters() -> Vec<ParamSpec> {
        (0..1_000_000)
            .map(|i| ParamSpec {
                name: format!("p{i}"),
                default_value: String::new(),
                description: String::new(),
            })
            .collect()
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
    use super::HostileDescribe;
    mfsched_sdk::export_policy!(HostileDescribe);
}
