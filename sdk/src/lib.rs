//! The mfsched policy SDK: what a scheduling policy written in Rust needs,
//! with the WIT bindings of `mfsched:scheduler` already generated, so a policy
//! crate neither copies the WIT nor runs wit-bindgen itself.
//!
//! A policy is a `cdylib` built for `wasm32-wasip2`:
//!
//! ```ignore
//! use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};
//! use mfsched_sdk::{Landscape, Params, Space, argmax};
//!
//! struct Best;
//!
//! impl mfsched_sdk::Guest for Best {
//!     fn name() -> String {
//!         "best feasible".into()
//!     }
//!
//!     fn parameters() -> Vec<ParamSpec> {
//!         Vec::new()
//!     }
//!
//!     fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
//!         Params::parse(params, Self::parameters())?;
//!         let space = Space::new(&problem);
//!         let feasible = mfsched_sdk::feasible(&space, u64::MAX);
//!         let scores = Landscape::new(state).score(&space, &feasible);
//!         let best = argmax(&scores).ok_or("nothing fits in the card's memory")?;
//!         let mut config = vec![0; space.models()];
//!         space.decode(feasible[best], &mut config);
//!         Ok(Decision { config, candidates_evaluated: feasible.len() as u64 })
//!     }
//! }
//!
//! mfsched_sdk::export_policy!(Best);
//! ```
//!
//! What is here:
//!
//! - [`bindings`]: the generated `policy` world: the [`Guest`] trait to
//!   implement, the record types ([`types`]), the host's interfaces
//!   ([`surrogate`], [`host_space`], [`objective`]) and [`export_policy!`].
//! - [`Space`]: the joint space of a problem (mixed-radix joint indices with
//!   the last model fastest, memory per configuration, feasible enumeration,
//!   an exact search over additive terms), and [`Odometer`] to walk ascending
//!   indices cheaply.
//! - [`Landscape`]: scoring candidates the cheapest way the host allows
//!   (summed utility terms, a prediction table, or joint predictions under a
//!   candidate-aware field), with [`gather`], [`evaluate_from_table`] and
//!   [`evaluate_joint`] batching the host calls.
//! - [`Params`]: the parameters the host passes, checked against the schema
//!   and read as typed values ([`params::ParamError`]).
//! - [`Rng`]: the seeded PRNG the bundled policies use (same seed, same
//!   numbers, on any host): draw every random number from the `seed` parameter.
//!
//! The host's contract (deadline, memory cap, validation, determinism) is in
//! `docs/writing-a-policy.md`; `mfsched plugins test` checks a policy against
//! it on recorded states.
//!
//! Only the `policy` world is generated here: a crate linking these bindings
//! carries the world's type section, so a utility component generates its
//! own (it would otherwise be asked to export `decide`).

pub mod params;
pub mod space;

pub use mfsched_rng::Rng;
pub use params::Params;
pub use space::{Best, Odometer, Space};

/// The generated `policy` world of the WIT package in `wit/` (the host's own:
/// a link to the repository's `wit/`). `export_policy!(T)` exports `T`'s
/// [`Guest`] implementation from the author's crate, which therefore needs no
/// wit-bindgen of its own. wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "policy",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "export_policy",
        default_bindings_module: "mfsched_sdk::bindings",
    });
}

pub use bindings::mfsched::scheduler::space as host_space;
pub use bindings::mfsched::scheduler::{objective, surrogate, types};
pub use bindings::{Guest, export_policy};

/// Gathers N predictions per candidate from a `predict-table` buffer.
pub fn gather(space: &Space, table: &[f32], candidates: &[u64], out: &mut Vec<f32>) {
    out.clear();
    out.reserve(candidates.len() * space.models());
    let mut odometer = Odometer::new(space);
    for &c in candidates {
        odometer.seek(c);
        out.extend(
            odometer
                .tuple()
                .iter()
                .enumerate()
                .map(|(i, &l)| table[space.table_offset(i) + l as usize]),
        );
    }
}

/// Scores candidates with the host's utility, predictions taken from a table
/// (the field held fixed, as published).
pub fn evaluate_from_table(space: &Space, table: &[f32], candidates: &[u64]) -> Vec<f64> {
    let mut scores = Vec::with_capacity(candidates.len());
    let mut predictions = Vec::new();
    for chunk in candidates.chunks(TABLE_BATCH) {
        gather(space, table, chunk, &mut predictions);
        scores.extend(objective::evaluate(chunk, &predictions));
    }
    scores
}

/// Candidates per `evaluate` call in [`evaluate_from_table`]: far under the
/// host's per-call cap, large enough that the boundary costs little.
pub const TABLE_BATCH: usize = 1 << 17;

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

/// The memory-feasible joint indices, ascending: the host's set, computed once
/// per problem, or enumerated here when the host has more than `limit`.
pub fn feasible(space: &Space, limit: u64) -> Vec<u64> {
    host_space::feasible(limit).unwrap_or_else(|| space.feasible_indices())
}

/// What candidates are scored against for one decision.
#[derive(Debug)]
pub enum Landscape {
    /// The utility is additive: a candidate's score is the sum of its models'
    /// terms (no host call per candidate).
    Terms { terms: Vec<f64> },
    /// Not additive: predictions from the table, scores from `evaluate`.
    Table { table: Vec<f32> },
    /// A candidate-aware field: predictions from `predict` per candidate.
    Joint { state: types::GpuState },
}

impl Landscape {
    /// The landscape of `state`: joint predictions when the host predicts
    /// under a candidate-aware field, else the table, summed terms when the
    /// utility hands them over.
    pub fn new(state: types::GpuState) -> Self {
        if surrogate::prediction_field() == types::Field::CandidateAware {
            return Landscape::Joint { state };
        }
        Self::of_table(surrogate::predict_table(state))
    }

    /// [`Landscape::new`] for a policy that already holds `state`'s table
    /// (one `predict-table` call per decision): the table is used unless the
    /// host predicts under a candidate-aware field.
    pub fn with_table(state: types::GpuState, table: Vec<f32>) -> Self {
        if surrogate::prediction_field() == types::Field::CandidateAware {
            return Landscape::Joint { state };
        }
        Self::of_table(table)
    }

    /// The landscape of a prediction table (the field held fixed).
    pub fn of_table(table: Vec<f32>) -> Self {
        match objective::terms(&table) {
            Some(terms) => Landscape::Terms { terms },
            None => Landscape::Table { table },
        }
    }

    /// One utility per candidate; negative infinity for a candidate that does
    /// not fit in memory (as the utility scores it).
    pub fn score(&self, space: &Space, candidates: &[u64]) -> Vec<f64> {
        match self {
            Landscape::Terms { terms } => {
                // Running sums over models 0..=i, redone only from the first
                // model whose configuration changed: the same additions in the
                // same order as summing each candidate afresh.
                let n = space.models();
                let mut odometer = Odometer::new(space);
                let (mut total, mut vram) = (vec![0.0; n + 1], vec![0u64; n + 1]);
                let mut stale = 0;
                candidates
                    .iter()
                    .map(|&c| {
                        let from = odometer.seek(c).min(stale);
                        stale = n;
                        for (i, &l) in odometer.tuple().iter().enumerate().skip(from) {
                            total[i + 1] = total[i] + terms[space.table_offset(i) + l as usize];
                            vram[i + 1] = vram[i] + u64::from(space.vram_of(i, l));
                        }
                        if vram[n] > space.cap_mib() {
                            f64::NEG_INFINITY
                        } else {
                            total[n]
                        }
                    })
                    .collect()
            }
            Landscape::Table { table } => evaluate_from_table(space, table, candidates),
            Landscape::Joint { state } => evaluate_joint(*state, candidates),
        }
    }
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
