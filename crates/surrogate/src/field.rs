//! The candidate-aware (self-consistent) field: beyond the published design.
//!
//! Published MeanField search holds the field — the aggregate GPU state a
//! predictor is fed — at the value observed for the configuration running now,
//! for every candidate. Yet a candidate, once applied, changes that state: a
//! heavier set of co-runners uses more VRAM and keeps the GPU busier. Here each
//! candidate gets its own field:
//!
//! - **VRAM used** = the candidate's footprint + the offset observed now
//!   (VRAM used − the running configuration's footprint: allocator slack).
//! - **Utilisation** = a linear model fitted on the bundle's own training
//!   profile: workload regime + each model's configuration + each model's
//!   throughput (its demand on the GPU), plus the offset that makes it give the
//!   observed utilisation for the running configuration. Throughput depends on
//!   utilisation through the predictors, so utilisation and throughput are
//!   iterated to a fixed point: u₀ from the observed-field table, then
//!   T_k = MeanField(candidate, field(u_k)), u_{k+1} = g(candidate, T_k) until
//!   the candidate's utilisation moves by less than the tolerance; a settled
//!   candidate keeps T_k and leaves the batch (so its answer does not depend on
//!   which other candidates came with it).
//!
//! Every pass is one batched joint prediction with per-candidate fields (the
//! CPU reference or the wgpu shader's `JOINT_FIELDS` mode): an exhaustive
//! decision on paper-n5 sends 78,732 candidates × 5 models = 393,660 rows in
//! its first pass, and the candidates still moving in the next ones. The running configuration's field is the observed state exactly, so
//! for the current configuration both fields agree.

use super::MeanField;
use super::features::{local_len, local_table};
use anyhow::{Result, bail};
use mfsched_core::Profile;
use mfsched_core::{Field, InSpace, PredictError, Predictor};
use mfsched_core::{GpuState, JointSpace, Problem, WorkloadLevel};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Passes after which an unconverged fixed point stops (its last pass is used).
pub const MAX_PASSES: usize = 8;
/// Largest utilisation change between passes that counts as converged.
pub const TOLERANCE: f64 = 1e-3;
/// Ridge penalty of the utilisation fit (features are O(1)).
const RIDGE: f64 = 1e-3;
/// Every `HOLDOUT_EVERY`-th profile row is held out to measure the fit.
const HOLDOUT_EVERY: usize = 5;

/// How well the utilisation model fits the profile it was fitted on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FitQuality {
    pub rows: usize,
    pub parameters: usize,
    /// R² on every `HOLDOUT_EVERY`-th row, fitted without them.
    pub r2_holdout: f64,
    pub rmse_holdout: f64,
}

/// Utilisation = clamp(w[workload] + Σᵢ aᵢ·localᵢ(cᵢ) + Σᵢ bᵢ·Tᵢ/sᵢ, 0, 1).
#[derive(Debug, Clone, PartialEq)]
pub struct UtilizationModel {
    workload: [f64; 4],
    /// Per model, per local configuration: aᵢ · localᵢ(c).
    config_terms: Vec<Vec<f64>>,
    /// Per model: bᵢ, the weight of its normalised throughput.
    demand: Vec<f64>,
    /// Per model: sᵢ, the largest throughput in the profile.
    scale: Vec<f64>,
    pub quality: FitQuality,
}

/// One profile row as the model's features: workload one-hot, each model's
/// local features, each model's throughput / scale.
fn utilization_features(
    problem: &Problem,
    scale: &[f64],
    joint: &[u32],
    workload: WorkloadLevel,
    throughput: &[f64],
) -> Vec<f64> {
    let mut z: Vec<f64> = (0..4)
        .map(|w| f64::from(u8::from(w == workload.ordinal())))
        .collect();
    for (model, &c) in problem.models.iter().zip(joint) {
        let mut local = Vec::with_capacity(local_len(model));
        super::features::push_local(model, c as usize, &mut local);
        z.extend(local.iter().map(|&v| f64::from(v)));
    }
    z.extend(throughput.iter().zip(scale).map(|(t, s)| t / s));
    z
}

/// Solves (XᵀX + λI) θ = Xᵀy by Gaussian elimination with partial pivoting.
fn ridge(rows: &[(Vec<f64>, f64)], width: usize) -> Result<Vec<f64>> {
    let mut a = vec![vec![0.0; width + 1]; width];
    for (z, y) in rows {
        for i in 0..width {
            for j in 0..width {
                a[i][j] += z[i] * z[j];
            }
            a[i][width] += z[i] * y;
        }
    }
    for (i, row) in a.iter_mut().enumerate() {
        row[i] += RIDGE * rows.len() as f64;
    }
    for col in 0..width {
        let pivot = (col..width)
            .max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))
            .unwrap_or(col);
        a.swap(col, pivot);
        if a[col][col].abs() < 1e-12 {
            bail!("the utilisation fit is singular (too few distinct profile rows)");
        }
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            if r != col && f != 0.0 {
                for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *x -= f * p;
                }
            }
        }
    }
    Ok((0..width).map(|i| a[i][width] / a[i][i]).collect())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl UtilizationModel {
    /// Fits on `profile`'s rows (the measured throughputs stand for the
    /// predicted ones the model is later fed).
    pub fn fit(problem: &Problem, profile: &Profile) -> Result<Self> {
        let n = problem.models.len();
        if profile.rows.len() < 2 * HOLDOUT_EVERY {
            bail!(
                "the profile has {} rows; the utilisation model needs at least {}",
                profile.rows.len(),
                2 * HOLDOUT_EVERY
            );
        }
        let scale: Vec<f64> = (0..n)
            .map(|i| {
                profile
                    .rows
                    .iter()
                    .map(|r| r.throughput[i])
                    .fold(0.0, f64::max)
                    .max(1e-9)
            })
            .collect();
        let rows: Vec<(Vec<f64>, f64)> = profile
            .rows
            .iter()
            .map(|r| {
                (
                    utilization_features(problem, &scale, &r.joint, r.workload, &r.throughput),
                    r.state.utilization,
                )
            })
            .collect();
        let width = rows[0].0.len();
        let (train, test): (Vec<_>, Vec<_>) = rows
            .iter()
            .cloned()
            .enumerate()
            .partition(|(k, _)| k % HOLDOUT_EVERY != 0);
        let train: Vec<_> = train.into_iter().map(|(_, r)| r).collect();
        let held = ridge(&train, width)?;
        let observed: Vec<f64> = test.iter().map(|(_, (_, y))| *y).collect();
        let predicted: Vec<f64> = test
            .iter()
            .map(|(_, (z, _))| dot(&held, z).clamp(0.0, 1.0))
            .collect();
        let mean = observed.iter().sum::<f64>() / observed.len() as f64;
        let ss_res: f64 = observed
            .iter()
            .zip(&predicted)
            .map(|(y, p)| (y - p).powi(2))
            .sum();
        let ss_tot: f64 = observed.iter().map(|y| (y - mean).powi(2)).sum();
        let quality = FitQuality {
            rows: rows.len(),
            parameters: width,
            r2_holdout: if ss_tot > 0.0 {
                1.0 - ss_res / ss_tot
            } else {
                0.0
            },
            rmse_holdout: (ss_res / observed.len() as f64).sqrt(),
        };

        let theta = ridge(&rows, width)?;
        let mut at = 4;
        let config_terms = problem
            .models
            .iter()
            .map(|model| {
                let len = local_len(model);
                let coefficients = &theta[at..at + len];
                at += len;
                local_table(model)
                    .chunks_exact(len.max(1))
                    .map(|local| {
                        local
                            .iter()
                            .zip(coefficients)
                            .map(|(&x, c)| f64::from(x) * c)
                            .sum()
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            workload: [theta[0], theta[1], theta[2], theta[3]],
            config_terms,
            demand: theta[at..at + n].to_vec(),
            scale,
            quality,
        })
    }

    /// The throughput-independent part for `joint` under `workload`.
    fn base(&self, workload: WorkloadLevel, joint: &[u32]) -> f64 {
        self.workload[workload.ordinal()]
            + joint
                .iter()
                .zip(&self.config_terms)
                .map(|(&c, terms)| terms[c as usize])
                .sum::<f64>()
    }

    /// The demand part for one candidate's throughputs.
    fn demand(&self, throughput: impl Iterator<Item = f64>) -> f64 {
        throughput
            .zip(self.demand.iter().zip(&self.scale))
            .map(|(t, (b, s))| b * t / s)
            .sum()
    }

    /// Utilisation of `joint` under `workload` at these throughputs (unanchored).
    pub fn predict(&self, workload: WorkloadLevel, joint: &[u32], throughput: &[f64]) -> f64 {
        (self.base(workload, joint) + self.demand(throughput.iter().copied())).clamp(0.0, 1.0)
    }
}

/// Counters over every candidate-aware prediction so far, for reports.
#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    candidates: AtomicU64,
    passes: AtomicU64,
    rows: AtomicU64,
    unconverged_calls: AtomicU64,
}

/// What the fixed-point solves have cost so far.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FieldStats {
    pub calls: u64,
    pub candidates: u64,
    /// Batched joint passes (each one MLP evaluation of the candidates still moving).
    pub passes: u64,
    /// Predictor rows evaluated over all passes.
    pub rows: u64,
    /// Calls that stopped at `MAX_PASSES` without converging.
    pub unconverged_calls: u64,
}

/// One fixed-point solve: the predictions, each candidate's field and the passes it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Solved {
    /// N per candidate, row-major, each made under the candidate's field.
    pub predictions: Vec<f32>,
    /// Per candidate: (VRAM used / card VRAM, utilisation) its predictions were made under.
    pub fields: Vec<[f32; 2]>,
    /// Passes the slowest candidate took.
    pub passes: usize,
    /// Every candidate settled within `MAX_PASSES`.
    pub converged: bool,
    /// Predictor rows evaluated over all passes.
    pub rows: u64,
}

/// The MeanField surrogate with the candidate-aware field.
#[derive(Debug)]
pub struct CandidateAware {
    meanfield: Arc<MeanField>,
    utilization: UtilizationModel,
    space: JointSpace,
    /// Per model, per local configuration, MiB.
    footprints: Vec<Vec<f64>>,
    card_vram_mib: f64,
    counters: Counters,
}

impl CandidateAware {
    /// The field for `problem`'s models, with the utilisation model fitted on
    /// `profile` (the one the predictors were trained on).
    pub fn new(meanfield: Arc<MeanField>, problem: &Problem, profile: &Profile) -> Result<Self> {
        Ok(Self {
            utilization: UtilizationModel::fit(problem, profile)?,
            space: problem.space(),
            footprints: problem
                .models
                .iter()
                .map(|m| m.configs.iter().map(|c| f64::from(c.vram_mib)).collect())
                .collect(),
            card_vram_mib: f64::from(problem.card.vram_mib.max(1)),
            meanfield,
            counters: Counters::default(),
        })
    }

    pub fn meanfield(&self) -> &MeanField {
        &self.meanfield
    }

    pub fn utilization_model(&self) -> &UtilizationModel {
        &self.utilization
    }

    pub fn stats(&self) -> FieldStats {
        let c = &self.counters;
        FieldStats {
            calls: c.calls.load(Ordering::Relaxed),
            candidates: c.candidates.load(Ordering::Relaxed),
            passes: c.passes.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            unconverged_calls: c.unconverged_calls.load(Ordering::Relaxed),
        }
    }

    fn footprint(&self, joint: &[u32]) -> f64 {
        joint
            .iter()
            .zip(&self.footprints)
            .map(|(&c, f)| f[c as usize])
            .sum()
    }

    /// Solves every candidate's field, anchored on `running`, the
    /// configuration that ran while `state` was observed (a configuration
    /// outside the space anchors nothing: no offsets).
    pub fn solve(
        &self,
        state: &GpuState,
        running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Solved, PredictError> {
        let n = self.space.radices().len();
        let workload = state.workload;
        // Anchor both parts of the field on the running configuration, whose
        // field is the observation itself.
        let (vram_offset, utilization_offset) = match self.space.index(running) {
            Some(index) => {
                let at_current = self
                    .meanfield
                    .predict_joint(state, running, &[index])?
                    .iter()
                    .map(|&t| f64::from(t))
                    .collect::<Vec<_>>();
                (
                    state.vram_used_mib - self.footprint(running),
                    state.utilization - self.utilization.predict(workload, running, &at_current),
                )
            }
            None => (0.0, 0.0),
        };
        let mut joint = vec![0u32; n];
        let mut base = Vec::with_capacity(candidates.len());
        let mut vram = Vec::with_capacity(candidates.len());
        let mut utilization = Vec::with_capacity(candidates.len());
        let table = self.meanfield.predict_table(state, running)?;
        let offsets = self.meanfield.table_offsets();
        for &c in candidates.iter() {
            self.space.decode(c, &mut joint);
            let b = self.utilization.base(workload, &joint) + utilization_offset;
            let observed_field = joint
                .iter()
                .zip(offsets)
                .map(|(&cfg, &off)| f64::from(table[off + cfg as usize]));
            utilization.push((b + self.utilization.demand(observed_field)).clamp(0.0, 1.0));
            base.push(b);
            vram.push(
                ((vram_offset + self.footprint(&joint)) / self.card_vram_mib).clamp(0.0, 1.0)
                    as f32,
            );
        }
        // Each candidate iterates until its own utilisation settles and is then
        // frozen, so its answer does not depend on the batch it came in, and
        // later passes only carry the candidates still moving.
        let mut predictions = vec![f32::NAN; candidates.len() * n];
        let mut fields: Vec<[f32; 2]> = vram.iter().map(|&v| [v, 0.0]).collect();
        let mut moving: Vec<usize> = (0..candidates.len()).collect();
        let mut passes = 0;
        let mut rows = 0u64;
        let mut batch_indices = Vec::with_capacity(candidates.len());
        while !moving.is_empty() && passes < MAX_PASSES {
            let batch = candidates.select(&moving, &mut batch_indices);
            let batch_fields: Vec<[f32; 2]> = moving
                .iter()
                .map(|&k| [vram[k], utilization[k] as f32])
                .collect();
            let predicted =
                self.meanfield
                    .predict_joint_fields(state, batch, Some(&batch_fields))?;
            passes += 1;
            rows += (batch.len() * n) as u64;
            let mut still_moving = Vec::with_capacity(moving.len());
            for (j, &k) in moving.iter().enumerate() {
                let throughput = &predicted[j * n..(j + 1) * n];
                predictions[k * n..(k + 1) * n].copy_from_slice(throughput);
                fields[k] = batch_fields[j];
                let next = (base[k]
                    + self
                        .utilization
                        .demand(throughput.iter().map(|&t| f64::from(t))))
                .clamp(0.0, 1.0);
                if (next - utilization[k]).abs() >= TOLERANCE {
                    still_moving.push(k);
                }
                utilization[k] = next;
            }
            moving = still_moving;
        }
        let converged = moving.is_empty();
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.candidates
            .fetch_add(candidates.len() as u64, Ordering::Relaxed);
        c.passes.fetch_add(passes as u64, Ordering::Relaxed);
        c.rows.fetch_add(rows, Ordering::Relaxed);
        if !converged {
            c.unconverged_calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Solved {
            predictions,
            fields,
            passes,
            converged,
            rows,
        })
    }
}

/// The table is the observed field's (a per-configuration table cannot carry a
/// per-candidate field); joint predictions carry each candidate's own field.
impl Predictor for CandidateAware {
    fn joint_size(&self) -> u64 {
        self.space.size()
    }

    fn predict_table(&self, state: &GpuState, running: &[u32]) -> Result<Vec<f32>, PredictError> {
        self.meanfield.predict_table(state, running)
    }

    fn predict_in_space(
        &self,
        state: &GpuState,
        running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError> {
        Ok(self.solve(state, running, candidates)?.predictions)
    }

    fn field(&self) -> Field {
        Field::CandidateAware
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundled;
    use mfsched_core::load_scenario;

    /// The shipped paper-n5 surrogate with the field fitted on its own profile.
    fn paper_n5() -> (Problem, CandidateAware, Profile) {
        let s = load_scenario("paper-n5").expect("bundled");
        let bundle = bundled::load(&s, None).expect("embedded bundle");
        let mut problem = s.problem.clone();
        bundle.apply(&mut problem, &s.explicit_floors);
        let profile = bundled::training_profile(&s, None, &bundle).expect("embedded profile");
        let meanfield = Arc::new(bundle.meanfield(&problem).expect("fits"));
        let field = CandidateAware::new(meanfield, &problem, &profile).expect("fits");
        (problem, field, profile)
    }

    /// The `k`-th state measured under `workload` in the bundle's own profile: a
    /// state the card really showed (the field is anchored on whatever is observed).
    fn observed(profile: &Profile, workload: WorkloadLevel, k: usize) -> GpuState {
        profile
            .rows
            .iter()
            .filter(|r| r.workload == workload)
            .nth(k)
            .expect("every regime is profiled")
            .state
    }

    #[test]
    fn the_utilisation_model_explains_the_profile() {
        let (_, field, _) = paper_n5();
        let q = field.utilization_model().quality;
        assert_eq!(q.rows, 648);
        // Measured: R² 0.8 or more on held-out rows (utilisation is near
        // saturation on paper-n5, so little variance is left to explain).
        assert!(q.r2_holdout > 0.8, "{q:?}");
        assert!(q.rmse_holdout < 0.02, "{q:?}");
    }

    #[test]
    fn the_running_configuration_keeps_the_observed_field() {
        let (problem, field, profile) = paper_n5();
        let current = problem.space().index(&problem.current).expect("valid");
        for (k, workload) in WorkloadLevel::ALL.into_iter().enumerate() {
            let state = observed(&profile, workload, k);
            let solved = field
                .solve(&state, &problem.current, in_space(&problem, &[current]))
                .expect("solves");
            assert!(solved.converged, "{workload:?}");
            let [vram, utilization] = solved.fields[0];
            let card = f64::from(problem.card.vram_mib);
            assert!((f64::from(vram) - state.vram_used_mib / card).abs() < 1e-6);
            assert!(
                (f64::from(utilization) - state.utilization).abs() < 2.0 * TOLERANCE,
                "{workload:?}: {utilization} vs {}",
                state.utilization
            );
            let fixed = field
                .meanfield
                .predict_joint(&state, &problem.current, &[current])
                .expect("predicts");
            for (a, b) in solved.predictions.iter().zip(&fixed) {
                assert!((a - b).abs() <= 0.01 * b.abs().max(1.0), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn every_feasible_candidate_reaches_a_fixed_point_with_its_own_field() {
        let (problem, field, profile) = paper_n5();
        // Every 7th feasible candidate keeps the debug-build test short.
        let candidates: Vec<u64> = problem.feasible_indices().into_iter().step_by(7).collect();
        let state = observed(&profile, WorkloadLevel::High, 3);
        let solved = field
            .solve(&state, &problem.current, in_space(&problem, &candidates))
            .expect("solves");
        assert!(
            solved.converged && solved.passes <= MAX_PASSES,
            "{}",
            solved.passes
        );
        let n = problem.models.len();
        let space = problem.space();
        let mut joint = vec![0u32; n];
        for (k, &c) in candidates.iter().enumerate() {
            space.decode(c, &mut joint);
            let throughput: Vec<f64> = solved.predictions[k * n..(k + 1) * n]
                .iter()
                .map(|&t| f64::from(t))
                .collect();
            assert!(throughput.iter().all(|t| t.is_finite() && *t > 0.0));
            // The field's VRAM follows the candidate's footprint.
            let footprint = problem.vram_mib(&joint) as f64;
            let [vram, _] = solved.fields[k];
            let expect = (footprint + state.vram_used_mib
                - problem.vram_mib(&problem.current) as f64)
                / f64::from(problem.card.vram_mib);
            assert!((f64::from(vram) - expect.clamp(0.0, 1.0)).abs() < 1e-5);
        }
        // Each candidate's fixed point is its own: a batch of 50 lands exactly
        // where the whole set did, and the utilisation each prediction was made
        // under is (to the tolerance) the one the prediction implies.
        let again = field
            .solve(
                &state,
                &problem.current,
                in_space(&problem, &candidates[..50]),
            )
            .expect("solves");
        assert_eq!(again.predictions, solved.predictions[..50 * n]);
        assert_eq!(again.fields, solved.fields[..50]);
        let stats = field.stats();
        assert_eq!(stats.calls, 2);
        assert_eq!(stats.unconverged_calls, 0);
        // Settled candidates leave the batch: the first pass carries every
        // candidate, the later ones at most as many.
        let n = n as u64;
        let first = (candidates.len() + 50) as u64 * n;
        let bound = (solved.passes * candidates.len() + again.passes * 50) as u64 * n;
        assert!((first..=bound).contains(&stats.rows), "{stats:?}");
        assert_eq!(stats.rows, solved.rows + again.rows);
    }

    fn in_space<'a>(problem: &Problem, candidates: &'a [u64]) -> InSpace<'a> {
        InSpace::check(problem.space().size(), candidates).expect("in the space")
    }

    #[test]
    fn an_out_of_range_candidate_is_refused_and_solves_nothing() {
        let (problem, field, profile) = paper_n5();
        let size = problem.space().size();
        let state = observed(&profile, WorkloadLevel::Low, 1);
        let err = field
            .predict_joint(&state, &problem.current, &[0, size, 1])
            .expect_err("size is past the space");
        assert!(
            matches!(err, PredictError::OutOfRange { candidate, .. } if candidate == size),
            "{err}"
        );
        assert_eq!(field.stats().calls, 0);
        let out = field
            .predict_joint(&state, &problem.current, &[0, 1])
            .expect("predicts");
        assert_eq!(out.len(), 10);
        assert!(out.iter().all(|v| v.is_finite()));
        assert_eq!(field.field(), Field::CandidateAware);
    }
}
