//! The co-runner-factors field's tables, learnt from co-location rows.
//!
//! A low-rank pair model of every model's log-throughput,
//!
//! ```text
//! log yᵢ = μᵢ + aᵢ[cᵢ] + Σ_{j≠i} ( bⱼ[cⱼ] + uᵢ[cᵢ] · vⱼ[cⱼ] ),
//! ```
//!
//! is fitted by alternating ridge regressions on a training set's rows. The
//! victim's side (μ, a, u) is thrown away: MeanField's net learns it from the
//! own configuration. The co-runner's side (b, v: [`FACTOR_RANK`] + 1 numbers
//! per configuration) is the table its co-runners' inputs sum
//! (`features::push_corunner_sums`), so the field does not grow with N. The
//! factors' penalty is chosen by an inner cross-validation over the training
//! rows' groups, as each dataset wants its own (`scripts/gavel-pair-factors.py`
//! measured 0.1 best on Gavel's P100 and K80, 1.0 on its V100).

use mfsched_core::{Problem, Profile};
use mfsched_nn::ridge::solve;
use mfsched_rng::Rng;
use mfsched_surrogate::{CorunnerTables, FACTOR_RANK};
use std::collections::BTreeMap;

/// The factors' ridge penalties tried (absolute, on each configuration's own
/// regression): the inner cross-validation keeps the best.
pub const PENALTIES: [f64; 6] = [0.1, 0.3, 1.0, 3.0, 10.0, 30.0];
/// Alternating sweeps (victim side, then co-runner side) per fit.
const SWEEPS: usize = 40;
/// Folds of the inner cross-validation that picks the penalty.
const INNER_FOLDS: usize = 3;
/// Penalty on the victim's intercept a: a guard against a singular system,
/// not a shrinkage (the net learns the own configuration's effect anyway).
/// The co-runner's intercept b is shrunk like its factors, so that a
/// configuration seen beside few others inflicts little.
const INTERCEPT_PENALTY: f64 = 1e-9;
/// Scale of the co-runner factors' seeded starting values.
const START_SCALE: f64 = 0.1;
const STREAM_FACTORS: u64 = 0x4641_4354; // "FACT"
const STREAM_INNER: u64 = 0x494e_4e52; // "INNR"

const WIDTH: usize = FACTOR_RANK + 1;

/// One measured log-throughput: model `victim` on profile row `row`.
#[derive(Debug, Clone, Copy)]
struct Obs {
    row: usize,
    victim: usize,
    y: f64,
}

/// A fitted pair model. Tables are per model, per configuration.
struct PairModel {
    mu: Vec<f64>,
    /// Victim side: [a, u₁ … u_R].
    own: Vec<Vec<[f64; WIDTH]>>,
    /// Co-runner side: [b, v₁ … v_R].
    inflicted: Vec<Vec<[f64; WIDTH]>>,
}

impl PairModel {
    /// The co-runners' part of model `i`'s log-throughput on `joint`, leaving
    /// out model `skip`'s.
    fn corunners(&self, joint: &[u32], i: usize, skip: usize) -> f64 {
        let own = &self.own[i][joint[i] as usize];
        joint
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i && j != skip)
            .map(|(j, &c)| {
                let f = &self.inflicted[j][c as usize];
                f[0] + (1..WIDTH).map(|k| own[k] * f[k]).sum::<f64>()
            })
            .sum()
    }

    fn predict(&self, joint: &[u32], i: usize) -> f64 {
        self.mu[i] + self.own[i][joint[i] as usize][0] + self.corunners(joint, i, usize::MAX)
    }
}

/// Learns the co-runner-factors tables from `profile`'s rows `train`: the
/// penalty by an inner cross-validation over `group_of[row]` (rows sharing a
/// group are held out together, so a mirrored pair never straddles the
/// split), then the factors on every training row. Configurations never seen
/// beside another model get zeros (an average co-runner).
pub fn learn(
    problem: &Problem,
    profile: &Profile,
    train: &[usize],
    group_of: &[usize],
    seed: u64,
) -> CorunnerTables {
    let obs = observations(profile, train);
    let penalty = choose_penalty(problem, profile, &obs, group_of, seed);
    let model = fit(problem, profile, &obs, penalty, seed);
    model
        .inflicted
        .iter()
        .map(|per_config| per_config.iter().map(|f| f.to_vec()).collect())
        .collect()
}

/// Every positive, finite throughput of the rows `train`, as its logarithm.
fn observations(profile: &Profile, train: &[usize]) -> Vec<Obs> {
    let mut out = Vec::with_capacity(train.len() * 2);
    for &row in train {
        for (victim, &t) in profile.rows[row].throughput.iter().enumerate() {
            if t.is_finite() && t > 0.0 {
                out.push(Obs {
                    row,
                    victim,
                    y: t.ln(),
                });
            }
        }
    }
    out
}

/// The penalty of [`PENALTIES`] with the least held-out squared error of
/// log-throughput over [`INNER_FOLDS`] folds of the training groups; the first
/// on a tie, and the middle one when there are too few groups to fold.
fn choose_penalty(
    problem: &Problem,
    profile: &Profile,
    obs: &[Obs],
    group_of: &[usize],
    seed: u64,
) -> f64 {
    let mut groups: Vec<usize> = obs.iter().map(|o| group_of[o.row]).collect();
    groups.sort_unstable();
    groups.dedup();
    if groups.len() < INNER_FOLDS {
        return PENALTIES[PENALTIES.len() / 2];
    }
    super::split::shuffle(&mut groups, &mut Rng::derive(seed, STREAM_INNER));
    let fold_of: BTreeMap<usize, usize> = groups
        .iter()
        .enumerate()
        .map(|(k, &g)| (g, k % INNER_FOLDS))
        .collect();
    let fold = |o: &Obs| fold_of[&group_of[o.row]];
    let mut best = (f64::INFINITY, PENALTIES[0]);
    for penalty in PENALTIES {
        let mut error = 0.0;
        for k in 0..INNER_FOLDS {
            let (held, kept): (Vec<Obs>, Vec<Obs>) = obs.iter().partition(|o| fold(o) == k);
            let model = fit(problem, profile, &kept, penalty, seed);
            error += held
                .iter()
                .map(|o| (model.predict(&profile.rows[o.row].joint, o.victim) - o.y).powi(2))
                .sum::<f64>();
        }
        if error < best.0 {
            best = (error, penalty);
        }
    }
    best.1
}

/// Fits the pair model on `obs` by alternating ridge regressions: each
/// victim configuration's (a, u) given the co-runners' factors, then each
/// co-runner configuration's (b, v) given the rest (Gauss–Seidel, so N > 2
/// needs no joint solve).
fn fit(problem: &Problem, profile: &Profile, obs: &[Obs], penalty: f64, seed: u64) -> PairModel {
    let n = problem.models.len();
    let mut mu = vec![0.0; n];
    let mut counts = vec![0usize; n];
    for o in obs {
        mu[o.victim] += o.y;
        counts[o.victim] += 1;
    }
    for (m, &c) in mu.iter_mut().zip(&counts) {
        *m /= c.max(1) as f64;
    }
    let mut rng = Rng::derive(seed, STREAM_FACTORS);
    let mut model = PairModel {
        mu,
        own: problem
            .models
            .iter()
            .map(|m| vec![[0.0; WIDTH]; m.grid_size()])
            .collect(),
        inflicted: problem
            .models
            .iter()
            .map(|m| {
                (0..m.grid_size())
                    .map(|_| {
                        let mut f = [0.0; WIDTH];
                        for v in &mut f[1..] {
                            *v = START_SCALE * rng.normal();
                        }
                        f
                    })
                    .collect()
            })
            .collect(),
    };
    // Which observations each configuration takes part in, per side.
    let mut as_victim: BTreeMap<(usize, u32), Vec<usize>> = BTreeMap::new();
    let mut as_corunner: BTreeMap<(usize, u32), Vec<usize>> = BTreeMap::new();
    for (k, o) in obs.iter().enumerate() {
        let joint = &profile.rows[o.row].joint;
        as_victim
            .entry((o.victim, joint[o.victim]))
            .or_default()
            .push(k);
        for (j, &c) in joint.iter().enumerate() {
            if j != o.victim {
                as_corunner.entry((j, c)).or_default().push(k);
            }
        }
    }
    // A configuration never beside another model keeps zeros: an average
    // co-runner, not its random start.
    for (j, per_config) in model.inflicted.iter_mut().enumerate() {
        for (c, f) in per_config.iter_mut().enumerate() {
            if !as_corunner.contains_key(&(j, c as u32)) {
                *f = [0.0; WIDTH];
            }
        }
    }
    let victim_diagonal: [f64; WIDTH] =
        std::array::from_fn(|k| if k == 0 { INTERCEPT_PENALTY } else { penalty });
    let mut victim = NormalEquations::new(victim_diagonal);
    let mut corunner = NormalEquations::new([penalty; WIDTH]);
    for _ in 0..SWEEPS {
        for (&(i, c), members) in &as_victim {
            victim.clear();
            for &k in members {
                let o = &obs[k];
                let joint = &profile.rows[o.row].joint;
                let mut x = [0.0; WIDTH];
                x[0] = 1.0;
                let mut target = o.y - model.mu[i];
                for (j, &cj) in joint.iter().enumerate().filter(|&(j, _)| j != i) {
                    let f = &model.inflicted[j][cj as usize];
                    target -= f[0];
                    for d in 1..WIDTH {
                        x[d] += f[d];
                    }
                }
                victim.add(&x, target);
            }
            model.own[i][c as usize] = victim.solve();
        }
        for (&(j, c), members) in &as_corunner {
            corunner.clear();
            for &k in members {
                let o = &obs[k];
                let joint = &profile.rows[o.row].joint;
                let own = model.own[o.victim][joint[o.victim] as usize];
                let mut x = own;
                x[0] = 1.0;
                let target =
                    o.y - model.mu[o.victim] - own[0] - model.corunners(joint, o.victim, j);
                corunner.add(&x, target);
            }
            model.inflicted[j][c as usize] = corunner.solve();
        }
    }
    model
}

/// (XᵀX + diag(λ)) w = Xᵀt, accumulated row by row.
struct NormalEquations {
    diagonal: [f64; WIDTH],
    a: [f64; WIDTH * WIDTH],
    b: [f64; WIDTH],
}

impl NormalEquations {
    fn new(diagonal: [f64; WIDTH]) -> Self {
        Self {
            diagonal,
            a: [0.0; WIDTH * WIDTH],
            b: [0.0; WIDTH],
        }
    }

    fn clear(&mut self) {
        self.a = [0.0; WIDTH * WIDTH];
        self.b = [0.0; WIDTH];
    }

    fn add(&mut self, x: &[f64; WIDTH], target: f64) {
        for r in 0..WIDTH {
            self.b[r] += x[r] * target;
            for c in 0..WIDTH {
                self.a[r * WIDTH + c] += x[r] * x[c];
            }
        }
    }

    fn solve(&self) -> [f64; WIDTH] {
        let mut a = self.a.to_vec();
        for (k, d) in self.diagonal.iter().enumerate() {
            a[k * WIDTH + k] += d;
        }
        let w = solve(a, self.b.to_vec(), WIDTH);
        std::array::from_fn(|k| w[k])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::{GpuState, ProfileRow, WorkloadLevel, load_scenario};

    /// Rows of two models whose log-throughput is exactly a rank-1 pair
    /// model over a few configurations each, every pair measured.
    fn rank_one_profile() -> (Problem, Profile, Vec<usize>) {
        let problem = load_scenario("paper-n2").expect("bundled").problem;
        let state = GpuState {
            workload: WorkloadLevel::Medium,
            vram_used_mib: 4096.0,
            utilization: 0.5,
            contention: None,
        };
        let (b, v): ([f64; 4], [f64; 4]) = ([0.0, -0.2, -0.5, -0.1], [0.3, -0.4, 0.8, 0.1]);
        let (a, u): ([f64; 4], [f64; 4]) = ([1.0, 1.5, 2.0, 0.5], [1.0, -0.5, 0.7, 0.2]);
        let mut rows = Vec::new();
        for c0 in 0..4u32 {
            for c1 in 0..4u32 {
                let (i0, i1) = (c0 as usize, c1 as usize);
                let y0 = a[i0] + b[i1] + u[i0] * v[i1];
                let y1 = a[i1] + b[i0] + u[i1] * v[i0];
                rows.push(ProfileRow {
                    joint: vec![c0, c1],
                    workload: WorkloadLevel::Medium,
                    state,
                    throughput: vec![y0.exp(), y1.exp()],
                });
            }
        }
        let profile = Profile {
            scenario: "paper-n2".into(),
            models: problem.models.iter().map(|m| m.name.clone()).collect(),
            rows,
            solo: vec![],
        };
        let groups = (0..profile.rows.len()).collect();
        (problem, profile, groups)
    }

    #[test]
    fn an_exact_low_rank_pair_model_is_recovered() {
        let (problem, profile, groups) = rank_one_profile();
        let all: Vec<usize> = (0..profile.rows.len()).collect();
        let obs = observations(&profile, &all);
        let model = fit(&problem, &profile, &obs, 1e-6, 7);
        let worst = obs
            .iter()
            .map(|o| (model.predict(&profile.rows[o.row].joint, o.victim) - o.y).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-3, "largest log error {worst}");
        // The tables: one row per configuration, zeros where never a co-runner.
        let tables = learn(&problem, &profile, &all, &groups, 7);
        for (m, t) in problem.models.iter().zip(&tables) {
            assert_eq!(t.len(), m.grid_size());
            assert!(t.iter().all(|f| f.len() == WIDTH));
            assert!(t[4..].iter().flatten().all(|&v| v == 0.0));
        }
        assert!(tables[1][2].iter().any(|&v| v != 0.0));
    }

    #[test]
    fn same_seed_same_factors_and_only_training_rows_count() {
        let (problem, mut profile, groups) = rank_one_profile();
        let train: Vec<usize> = (0..12).collect();
        let first = learn(&problem, &profile, &train, &groups, 3);
        assert_eq!(first, learn(&problem, &profile, &train, &groups, 3));
        // A held-out row's throughput cannot move what was learnt.
        profile.rows[15].throughput = vec![1e9, 1e-9];
        assert_eq!(first, learn(&problem, &profile, &train, &groups, 3));
    }
}
