//! Helpers shared by the bundled policy components: the `policy` world's
//! bindings, a view of the joint space (mixed-radix indices, VRAM, feasible
//! enumeration), parameter parsing and table-based scoring.
//!
//! Only the `policy` world is generated here: a crate linking these bindings
//! carries the world's type section, so the utility component generates its
//! own (it would otherwise be asked to export `decide`).

pub mod params;
pub mod space;

pub use mfsched_rng::Rng;
pub use params::Params;
pub use space::Space;

/// The generated `policy` world. wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "policy",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_policy",
        default_bindings_module: "mfsched_guest::bindings",
    });
}

pub use bindings::mfsched::scheduler::{objective, surrogate, types};
pub use bindings::{Guest, export_policy};

/// Gathers N predictions per candidate from a `predict-table` buffer.
pub fn gather(space: &Space, table: &[f32], candidates: &[u64], out: &mut Vec<f32>) {
    out.clear();
    out.reserve(candidates.len() * space.models());
    let mut tuple = vec![0u32; space.models()];
    for &c in candidates {
        space.decode(c, &mut tuple);
        out.extend(
            tuple
                .iter()
                .enumerate()
                .map(|(i, &l)| table[space.table_offset(i) + l as usize]),
        );
    }
}

/// Scores candidates with the host's utility, predictions taken from a table
/// (the field held fixed, as published).
pub fn evaluate_from_table(space: &Space, table: &[f32], candidates: &[u64]) -> Vec<f64> {
    let mut predictions = Vec::new();
    gather(space, table, candidates, &mut predictions);
    objective::evaluate(candidates, &predictions)
}

/// Candidates per host call in [`evaluate_joint`]: bounds the guest's buffers
/// without paying the boundary cost too often.
pub const JOINT_BATCH: usize = 16_384;

/// Scores candidates with the host's utility, predictions asked of the host per
/// candidate (N rows each): the path that carries a candidate-dependent field.
pub fn evaluate_joint(state: types::GpuState, candidates: &[u64]) -> Vec<f64> {
    let mut scores = Vec::with_capacity(candidates.len());
    for chunk in candidates.chunks(JOINT_BATCH) {
        let predictions = surrogate::predict(state, chunk);
        scores.extend(objective::evaluate(chunk, &predictions));
    }
    scores
}

/// Index of the best score (first on ties); `None` for an empty slice.
pub fn argmax(scores: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, s) in scores.iter().enumerate() {
        if best.is_none_or(|b| *s > scores[b]) {
            best = Some(i);
        }
    }
    best
}
