//! Hostile test policy: its answer depends on the wall clock. It picks the
//! best or the second-best configuration by the parity of the hour, both
//! valid, so one decision passes validation and two runs a moment apart agree
//! (`plugins check` cannot tell); `plugins test`, which moves the clocks the
//! guest sees between runs, must catch it.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_sdk::{Landscape, Params, Space};
use std::time::{SystemTime, UNIX_EPOCH};

struct ClockReader;

impl mfsched_sdk::Guest for ClockReader {
    fn name() -> String {
        "hostile: picks by the hour".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        Params::parse(params, Self::parameters())?;
        let space = Space::new(&problem);
        let feasible = mfsched_sdk::feasible(&space, u64::MAX);
        let scores = Landscape::new(state).score(&space, &feasible);
        // Candidates that meet every floor (finite utility), best first.
        let mut ranked: Vec<usize> = (0..feasible.len())
            .filter(|&i| scores[i].is_finite())
            .collect();
        ranked.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        let hour = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 3600);
        let pick = ranked
            .get((hour % 2) as usize)
            .or(ranked.first())
            .ok_or("no configuration meets every floor")?;
        let mut config = vec![0; space.models()];
        space.decode(feasible[*pick], &mut config);
        Ok(Decision {
            config,
            candidates_evaluated: feasible.len() as u64,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::ClockReader;
    mfsched_sdk::export_policy!(ClockReader);
}
