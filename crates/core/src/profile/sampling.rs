//! Which (joint configuration, workload) points a profiling run measures.
//!
//! - **Full grid** (the default for N ≤ 2, the published N = 2 protocol): every
//!   VRAM-feasible joint configuration under each of the four regimes, in joint-index
//!   order, regimes innermost (`paper-n2`: 162 × 4 = 648 rows).
//! - **Stratified** (the default for N > 2, with n = [`DEFAULT_SAMPLES_PER_MODEL`] × N
//!   rows): strata are (model, variant) and workload level. The n rows get the four
//!   regimes in equal shares (±1), and every model independently gets its variants in
//!   equal shares (±1); both assignments are shuffled, so the strata are crossed at
//!   random rather than in lockstep. Within its variant, each model's remaining knobs
//!   are drawn uniformly among the settings that keep the whole row VRAM-feasible
//!   (models are filled in a random order, each leaving room for the smallest
//!   setting of the variants still to place). If a row's variant mix cannot fit at
//!   all, the model being placed falls back to whichever of its settings fits, so
//!   every row is feasible. A (joint, regime) point is not sampled twice while
//!   retries find a new one.

use crate::domain::{JointConfig, Problem, WorkloadLevel};
use anyhow::{Result, bail};
use mfsched_rng::Rng;
use std::collections::HashSet;

/// Default stratified budget per model: twice the published convergence budget
/// n* ≈ 20·N, so learning curves can be drawn past the point of convergence.
pub const DEFAULT_SAMPLES_PER_MODEL: usize = 40;

/// How often a row is redrawn when it repeats an earlier (joint, regime) point.
const DUPLICATE_RETRIES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SamplingPlan {
    /// Every feasible joint configuration × every regime.
    FullGrid,
    /// `samples` rows, stratified by model variant and workload level.
    Stratified { samples: usize },
}

impl SamplingPlan {
    /// The published protocol: the full grid for N ≤ 2 unless a sample count is
    /// given, stratified sampling of `samples` (default 40·N) rows for N > 2.
    pub fn for_problem(problem: &Problem, samples: Option<usize>) -> Self {
        match samples {
            Some(samples) => SamplingPlan::Stratified { samples },
            None if problem.models.len() <= 2 => SamplingPlan::FullGrid,
            None => SamplingPlan::Stratified {
                samples: DEFAULT_SAMPLES_PER_MODEL * problem.models.len(),
            },
        }
    }

    pub fn describe(&self) -> String {
        match self {
            SamplingPlan::FullGrid => "full feasible grid × 4 regimes".into(),
            SamplingPlan::Stratified { samples } => {
                format!("{samples} rows stratified by model variant and workload level")
            }
        }
    }

    /// The points to measure, deterministic in `seed`.
    pub fn points(
        &self,
        problem: &Problem,
        seed: u64,
    ) -> Result<Vec<(JointConfig, WorkloadLevel)>> {
        if problem.count_feasible() == 0 {
            bail!("no joint configuration of this scenario fits the card's VRAM");
        }
        match *self {
            SamplingPlan::FullGrid => {
                let mut out = Vec::new();
                problem.for_each_feasible(|joint| {
                    out.extend(WorkloadLevel::ALL.map(|w| (joint.to_vec(), w)));
                });
                Ok(out)
            }
            SamplingPlan::Stratified { samples } => {
                if samples == 0 {
                    bail!("--samples must be at least 1");
                }
                Ok(stratified(problem, samples, seed))
            }
        }
    }
}

fn shuffle<T>(items: &mut [T], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// `n` labels 0..k in equal shares (±1), shuffled.
fn balanced(n: usize, k: usize, rng: &mut Rng) -> Vec<usize> {
    let mut labels: Vec<usize> = (0..n).map(|i| i % k).collect();
    shuffle(&mut labels, rng);
    labels
}

fn stratified(problem: &Problem, n: usize, seed: u64) -> Vec<(JointConfig, WorkloadLevel)> {
    let models = &problem.models;
    let mut rng = Rng::derive(seed, 0x5354_5241_5449_4659); // "STRATIFY"
    let workloads = balanced(n, WorkloadLevel::ALL.len(), &mut rng);
    let variants: Vec<Vec<usize>> = models
        .iter()
        .map(|m| balanced(n, m.variants.len(), &mut rng))
        .collect();
    // Smallest footprint per model and variant, and per model overall.
    let min_of_variant: Vec<Vec<u64>> = models
        .iter()
        .map(|m| {
            (0..m.variants.len())
                .map(|v| {
                    m.configs
                        .iter()
                        .filter(|c| c.variant == v)
                        .map(|c| u64::from(c.vram_mib))
                        .min()
                        .unwrap_or(u64::MAX)
                })
                .collect()
        })
        .collect();
    let min_overall: Vec<u64> = models.iter().map(|m| u64::from(m.min_vram_mib())).collect();
    let cap = u64::from(problem.card.vram_mib);

    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let workload = WorkloadLevel::ALL[workloads[k]];
        let target: Vec<usize> = variants.iter().map(|v| v[k]).collect();
        let mut joint = Vec::new();
        for _ in 0..=DUPLICATE_RETRIES {
            joint = draw_row(
                problem,
                &target,
                &min_of_variant,
                &min_overall,
                cap,
                &mut rng,
            );
            if seen.insert((joint.clone(), workload)) {
                break;
            }
        }
        out.push((joint, workload));
    }
    out
}

/// One feasible joint configuration, each model at its target variant when the
/// VRAM budget allows.
fn draw_row(
    problem: &Problem,
    target: &[usize],
    min_of_variant: &[Vec<u64>],
    min_overall: &[u64],
    cap: u64,
    rng: &mut Rng,
) -> JointConfig {
    let n = problem.models.len();
    let mut order: Vec<usize> = (0..n).collect();
    shuffle(&mut order, rng);
    let mut joint = vec![0u32; n];
    let mut used = 0u64;
    for (pos, &i) in order.iter().enumerate() {
        let rest = &order[pos + 1..];
        let room_keeping_variants: u64 = rest.iter().map(|&j| min_of_variant[j][target[j]]).sum();
        let room_any: u64 = rest.iter().map(|&j| min_overall[j]).sum();
        let model = &problem.models[i];
        let fits = |vram: u32, room: u64| used + u64::from(vram) + room <= cap;
        // Preferred: the target variant, leaving the others theirs; then the target
        // variant with the others at any variant; then any setting that fits. The
        // last always has a candidate: the previous model left room for this one's
        // smallest setting (and the first model's is feasible as the problem is).
        let tiers: [&dyn Fn(usize) -> bool; 3] = [
            &|c| {
                model.configs[c].variant == target[i]
                    && fits(model.configs[c].vram_mib, room_keeping_variants)
            },
            &|c| model.configs[c].variant == target[i] && fits(model.configs[c].vram_mib, room_any),
            &|c| fits(model.configs[c].vram_mib, room_any),
        ];
        let candidates = tiers
            .iter()
            .map(|ok| {
                (0..model.grid_size())
                    .filter(|&c| ok(c))
                    .collect::<Vec<_>>()
            })
            .find(|c| !c.is_empty())
            .expect("a feasible problem always leaves room for the smallest setting");
        let c = candidates[rng.below(candidates.len() as u64) as usize];
        used += u64::from(model.configs[c].vram_mib);
        joint[i] = c as u32;
    }
    joint
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;

    #[test]
    fn full_grid_is_every_feasible_joint_under_every_regime() {
        let p = scenario::load("paper-n2").expect("bundled").problem;
        let plan = SamplingPlan::for_problem(&p, None);
        assert_eq!(plan, SamplingPlan::FullGrid);
        let points = plan.points(&p, 1).expect("points");
        assert_eq!(points.len(), 648);
        let distinct: HashSet<_> = points.iter().collect();
        assert_eq!(distinct.len(), 648);
    }

    #[test]
    fn stratified_rows_are_feasible_balanced_and_reproducible() {
        let p = scenario::load("paper-n5").expect("bundled").problem;
        let plan = SamplingPlan::for_problem(&p, None);
        assert_eq!(plan, SamplingPlan::Stratified { samples: 200 });
        let points = plan.points(&p, 9).expect("points");
        assert_eq!(points, plan.points(&p, 9).expect("points"), "same seed");
        assert_ne!(points, plan.points(&p, 10).expect("points"), "other seed");
        assert_eq!(points.len(), 200);
        for (joint, _) in &points {
            assert!(p.check_feasible(joint).is_ok(), "{joint:?}");
        }
        for w in WorkloadLevel::ALL {
            assert_eq!(points.iter().filter(|(_, x)| *x == w).count(), 50, "{w}");
        }
        // Every model's variants in (nearly) equal shares: the VRAM fallback may move
        // a few rows, never many.
        for (i, m) in p.models.iter().enumerate() {
            let share = 200 / m.variants.len();
            for v in 0..m.variants.len() {
                let count = points
                    .iter()
                    .filter(|(j, _)| m.configs[j[i] as usize].variant == v)
                    .count();
                assert!(
                    count.abs_diff(share) <= share / 10,
                    "{} variant {v}: {count}",
                    m.name
                );
            }
        }
        let distinct: HashSet<_> = points.iter().collect();
        assert_eq!(distinct.len(), 200, "no repeated points");
    }

    #[test]
    fn zero_samples_is_an_error() {
        let p = scenario::load("paper-n3").expect("bundled").problem;
        let err = SamplingPlan::Stratified { samples: 0 }
            .points(&p, 1)
            .expect_err("zero samples");
        assert!(err.to_string().contains("at least 1"));
    }
}
