//! Hostile test policy: decides well when asked plainly (so it passes a
//! self-check), and attacks the host through `mode=`:
//! - `refuse`: refuses with a 20 MiB reason that carries forged lines and ANSI
//!   escapes (over the decision log's record cap);
//! - `print`: writes 16 MiB to stdout and as much to stderr, then decides;
//! - `predict`: asks for joint predictions of the whole space over and over
//!   (the host's work, not the guest's, must end at the deadline);
//! - `flood`: one `predict` call with more candidates than the host allows;
//! - `outside`: one `predict` call whose last candidate is past the joint space.
//!
//! Without `mode`, it refuses as `refuse` does whenever the load is `burst`: a
//! plugin that passes the start-up self-check (made at medium load) and turns
//! hostile later, in a daemon that passes no parameters.

use mfsched_sdk::Space;
use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem, WorkloadLevel};

struct HostileDecide;

fn mode(params: &[Param]) -> &str {
    params
        .iter()
        .find(|p| p.key == "mode")
        .map_or("", |p| p.value.as_str())
}

impl mfsched_sdk::Guest for HostileDecide {
    fn name() -> String {
        "hostile: attacks through decide".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        vec![ParamSpec {
            name: "mode".into(),
            default_value: String::new(),
            description: "refuse | print | predict | flood | outside; empty: decide plainly".into(),
        }]
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        let space = Space::new(&problem);
        let mode = match mode(&params) {
            "" if state.workload == WorkloadLevel::Burst => "refuse",
            m => m,
        };
        match mode {
            "refuse" => {
                let mut why = String::from("no\nok    passed  ready to ship\u{1b}[2J");
                why.push_str(&"x".repeat(20 << 20));
                return Err(why);
            }
            "print" => {
                use std::io::Write;
                let line = "chatty\n".repeat(1 << 16);
                for _ in 0..(16 << 20) / line.len() {
                    let _ = std::io::stdout().write_all(line.as_bytes());
                    let _ = std::io::stderr().write_all(line.as_bytes());
                }
            }
            "predict" => {
                let all: Vec<u64> = (0..space.size().min(1 << 20)).collect();
                loop {
                    let _ = mfsched_sdk::surrogate::predict(state, &all);
                }
            }
            "outside" => {
                let _ = mfsched_sdk::surrogate::predict(state, &[0, space.size()]);
            }
            "flood" => {
                let all: Vec<u64> = (0..(8u64 << 20)).map(|i| i % space.size()).collect();
                let _ = mfsched_sdk::surrogate::predict(state, &all);
            }
            _ => {}
        }
        Ok(Decision {
            config: problem.current.clone(),
            candidates_evaluated: 0,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::HostileDecide;
    mfsched_sdk::export_policy!(HostileDecide);
}
