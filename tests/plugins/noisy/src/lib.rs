//! Hostile test policy: decides plainly, but prints a line to stdout and to
//! stderr and reads stdin on every call, as a careless guest does. The host
//! must capture the output (never crash on it), also in the daemon's
//! start-up self-check.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct Noisy;

impl mfsched_sdk::Guest for Noisy {
    fn name() -> String {
        println!("noisy: naming myself");
        "hostile: noisy".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        use std::io::{Read, Write};
        println!("noisy: deciding for {} models", problem.models.len());
        eprintln!("noisy: a line on stderr");
        let _ = std::io::stdout().flush();
        let mut byte = [0u8; 1];
        let _ = std::io::stdin().read(&mut byte);
        Ok(Decision {
            config: problem.current.clone(),
            candidates_evaluated: 0,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::Noisy;
    mfsched_sdk::export_policy!(Noisy);
}
