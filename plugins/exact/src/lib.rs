//! Exact search for the fixed-field problem (beyond the published design).
//!
//! With the aggregate state held fixed, model i's predicted throughput depends
//! only on its own configuration, and an additive utility (the published one
//! is: normalised reward minus reconfiguration cost, per model) is a sum of
//! per-model terms under two kinds of constraint: per-model floors and one
//! shared VRAM cap. That is a multiple-choice knapsack, solved here exactly:
//!
//! 1. `predict-table` gives every local configuration's throughput (Σk rows);
//!    the utility's `terms` turn it into one term per local configuration
//!    (−∞ for one under its floor, which is dropped).
//! 2. Dynamic programming over the models keeps, per stage, the Pareto front of
//!    (VRAM used, Σ terms) — never a dominated partial solution — and ends
//!    with the best total under the cap.
//! 3. The answer's utility is evaluated once more and must equal the sum of
//!    its terms: a utility whose terms do not add up to its score fails loudly
//!    instead of returning a wrong "optimum".
//!
//! A utility that is not additive has no terms: exact refuses, naming the
//! policies that search it.

use mfsched_sdk::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_sdk::{Params, Space, objective, surrogate};

/// Relative tolerance of the additivity check (f64 sums of a few terms).
const ADDITIVITY_TOLERANCE: f64 = 1e-9;

struct Exact;

/// One entry of a Pareto front: VRAM so far, value so far, and how to get back.
#[derive(Clone, Copy)]
struct Partial {
    vram: u64,
    value: f64,
    /// Index into the previous stage's front.
    parent: u32,
    /// Local configuration chosen at this stage.
    config: u32,
}

impl mfsched_sdk::Guest for Exact {
    fn name() -> String {
        "exact (multiple-choice knapsack over the per-model table)".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn decide(problem: Problem, state: GpuState, params: Vec<Param>) -> Result<Decision, String> {
        Params::parse(params, Self::parameters())?;
        let space = Space::new(&problem);
        let n = space.models();
        let table = surrogate::predict_table(state);
        let terms = objective::terms(&table).ok_or(
            "exact needs an additive utility (this one hands over no per-model terms): use ga or exhaustive with it",
        )?;
        for i in 0..n {
            let block =
                &terms[space.table_offset(i)..space.table_offset(i) + space.radix(i) as usize];
            if block.iter().all(|t| !t.is_finite()) {
                return Err(format!(
                    "no configuration of model '{}' is predicted to meet its floor of {:.2}",
                    problem.models[i].name, problem.sla_floors[i]
                ));
            }
        }

        // Pareto-front dynamic programming over the models.
        let mut fronts: Vec<Vec<Partial>> = Vec::with_capacity(n + 1);
        fronts.push(vec![Partial {
            vram: 0,
            value: 0.0,
            parent: 0,
            config: 0,
        }]);
        let cap = space.cap_mib();
        for i in 0..n {
            let prev = &fronts[i];
            let mut stage: Vec<Partial> = Vec::with_capacity(prev.len() * space.radix(i) as usize);
            for c in 0..space.radix(i) {
                let d = terms[space.table_offset(i) + c as usize];
                if !d.is_finite() {
                    continue;
                }
                let vram = u64::from(space.vram_of(i, c));
                for (p, partial) in prev.iter().enumerate() {
                    if partial.vram + vram <= cap {
                        stage.push(Partial {
                            vram: partial.vram + vram,
                            value: partial.value + d,
                            parent: p as u32,
                            config: c,
                        });
                    }
                }
            }
            fronts.push(pareto(stage));
        }
        let last = fronts.last().expect("n + 1 fronts");
        let (mut at, best) = last
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.value.total_cmp(&b.1.value))
            .ok_or("no joint configuration fits in the card's VRAM")?;
        let expected = best.value;
        let mut config = vec![0u32; n];
        for i in (0..n).rev() {
            let p = fronts[i + 1][at];
            config[i] = p.config;
            at = p.parent as usize;
        }

        // The additivity check: the answer's own utility must be what the DP summed.
        let index = space.index(&config);
        let mut row = Vec::new();
        mfsched_sdk::gather(&space, &table, &[index], &mut row);
        let actual = objective::evaluate(&[index], &row)[0];
        if (actual - expected).abs() > ADDITIVITY_TOLERANCE * expected.abs().max(1.0) {
            return Err(format!(
                "the utility's terms do not add up to its score (terms sum to {expected}, score {actual}): use ga or exhaustive with it"
            ));
        }
        Ok(Decision {
            config,
            candidates_evaluated: terms.len() as u64 + 1,
        })
    }
}

/// Keeps the non-dominated partials: sorted by VRAM, each must beat the best
/// value of every cheaper one.
fn pareto(mut stage: Vec<Partial>) -> Vec<Partial> {
    stage.sort_by(|a, b| a.vram.cmp(&b.vram).then(b.value.total_cmp(&a.value)));
    let mut front: Vec<Partial> = Vec::with_capacity(stage.len());
    for p in stage {
        if front.last().is_none_or(|best| p.value > best.value) {
            front.push(p);
        }
    }
    front
}

/// The component's exports; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod exports {
    use super::Exact;
    mfsched_sdk::export_policy!(Exact);
}
