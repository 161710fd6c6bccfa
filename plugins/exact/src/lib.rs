//! Exact search for the fixed-field problem (beyond the published design).
//!
//! With the aggregate state held fixed, model i's predicted throughput depends
//! only on its own configuration, and the published utility is a sum of
//! per-model terms (normalised reward minus reconfiguration cost) under two kinds
//! of constraint: per-model floors and one shared VRAM cap. That is a
//! multiple-choice knapsack, solved here exactly:
//!
//! 1. `predict-table` gives every local configuration's throughput (Σk rows);
//!    configurations predicted under their floor are dropped.
//! 2. The per-model terms are *measured* through the host's utility, not
//!    re-implemented: a base configuration b takes, for every model, its
//!    smallest-VRAM floor-meeting configuration; candidate "b with model i set
//!    to c" is scored for every (i, c) in one `evaluate` call, and
//!    dᵢ(c) = J(b|i←c) − J(b). Any configuration that cannot be part of a
//!    feasible answer overflows the cap even beside b's minimal co-runners, so
//!    its probe is −∞ and it is dropped too.
//! 3. Dynamic programming over the models keeps, per stage, the Pareto front of
//!    (VRAM used, Σ d) — never a dominated partial solution — and ends with the
//!    best total under the cap.
//! 4. The answer's utility is evaluated once more and must equal J(b) + Σ dᵢ: a
//!    utility that is not additive across models fails loudly instead of
//!    returning a wrong "optimum".

use mfsched_guest::types::{Decision, GpuState, Param, ParamSpec, Problem};
use mfsched_guest::{Params, Space, objective, surrogate};

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

impl mfsched_guest::Guest for Exact {
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

        // Floor-meeting configurations per model, and the base b.
        let mut allowed: Vec<Vec<u32>> = Vec::with_capacity(n);
        for i in 0..n {
            let floor = problem.sla_floors[i];
            let ok: Vec<u32> = (0..space.radix(i))
                .filter(|&c| f64::from(table[space.table_offset(i) + c as usize]) >= floor)
                .collect();
            if ok.is_empty() {
                return Err(format!(
                    "no configuration of model '{}' is predicted to meet its floor of {floor:.2}",
                    problem.models[i].name
                ));
            }
            allowed.push(ok);
        }
        let base: Vec<u32> = allowed
            .iter()
            .enumerate()
            .map(|(i, ok)| {
                *ok.iter()
                    .min_by_key(|&&c| space.vram_of(i, c))
                    .expect("non-empty: checked above")
            })
            .collect();
        if !space.fits(&base) {
            return Err("no floor-meeting joint configuration fits in the card's VRAM".into());
        }

        // Probe J(b) and J(b|i←c) for every allowed (i, c) in one call.
        let mut probes = vec![space.index(&base)];
        let mut tuple = base.clone();
        for (i, ok) in allowed.iter().enumerate() {
            for &c in ok {
                tuple[i] = c;
                probes.push(space.index(&tuple));
            }
            tuple[i] = base[i];
        }
        let mut predictions = Vec::new();
        mfsched_guest::gather(&space, &table, &probes, &mut predictions);
        let scores = objective::evaluate(&probes, &predictions);
        let j_base = scores[0];
        if !j_base.is_finite() {
            return Err("the utility rejects the minimal floor-meeting configuration".into());
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
        let mut next_score = 1;
        for (i, ok) in allowed.iter().enumerate() {
            let terms = &scores[next_score..next_score + ok.len()];
            next_score += ok.len();
            let prev = &fronts[i];
            let mut stage: Vec<Partial> = Vec::with_capacity(prev.len() * ok.len());
            for (&c, &score) in ok.iter().zip(terms) {
                if !score.is_finite() {
                    continue;
                }
                let d = score - j_base;
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
        let expected = j_base + best.value;
        let mut config = vec![0u32; n];
        for i in (0..n).rev() {
            let p = fronts[i + 1][at];
            config[i] = p.config;
            at = p.parent as usize;
        }

        // The additivity check: the answer's own utility must be what the DP summed.
        let index = space.index(&config);
        let mut row = Vec::new();
        mfsched_guest::gather(&space, &table, &[index], &mut row);
        let actual = objective::evaluate(&[index], &row)[0];
        if (actual - expected).abs() > ADDITIVITY_TOLERANCE * expected.abs().max(1.0) {
            return Err(format!(
                "the utility is not additive across models (expected {expected}, got {actual}): use ga or exhaustive with it"
            ));
        }
        Ok(Decision {
            config,
            candidates_evaluated: probes.len() as u64 + 1,
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
    mfsched_guest::export_policy!(Exact);
}
