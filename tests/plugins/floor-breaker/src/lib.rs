//! Hostile test policy: answers a configuration that fits in VRAM and is on
//! every grid, but puts model 0 on its slowest predicted configuration, under
//! its SLA floor. Only the floor check of the host's validation can reject it.

use mfsched_sdk::Space;
use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};

struct FloorBreaker;

impl mfsched_sdk::Guest for FloorBreaker {
    fn name() -> String {
        "hostile: under the SLA floor".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, state: GpuState, _: Vec<Param>) -> Result<Decision, String> {
        let space = Space::new(&problem);
        let table = mfsched_sdk::surrogate::predict_table(state);
        let floor = problem.sla_floors.first().copied().unwrap_or(0.0);
        let mut tuple = vec![0u32; space.models()];
        // Every feasible candidate whose model-0 prediction is under the floor,
        // the slowest first.
        let under = space
            .feasible_indices()
            .into_iter()
            .filter_map(|c| {
                space.decode(c, &mut tuple);
                let t = f64::from(table[space.table_offset(0) + tuple[0] as usize]);
                (t < floor).then_some((t, c))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let (_, chosen) = under.ok_or("no feasible configuration is under model 0's floor")?;
        space.decode(chosen, &mut tuple);
        Ok(Decision {
            config: tuple,
            candidates_evaluated: 0,
        })
    }
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::FloorBreaker;
    mfsched_sdk::export_policy!(FloorBreaker);
}
