//! The MeanField predictor: one folded MLP per model over
//! `[local features of its configuration | state features]`.
//!
//! Local features depend only on the model and its configuration, so they are
//! tabulated once per problem (Σᵢ kᵢ rows); a prediction appends the state
//! features to table rows and runs the batch through the net. The CPU path is
//! the reference backend; a GPU backend plugs in behind the same type (the
//! folded nets and local tables are exposed for it).

use super::features;
use super::net::{FoldedNet, Scratch};
use crate::domain::{GpuState, Problem};
use crate::predict::Predictor;
use anyhow::{Result, bail};
use std::borrow::Cow;

/// Where the dense layers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The batched CPU reference (`FoldedNet::predict_into`).
    Cpu,
}

/// Candidates are evaluated in chunks of this many rows per model: large enough
/// to amortise the per-layer loop, small enough to stay in cache.
const CHUNK_ROWS: usize = 1024;

/// A MeanField surrogate bound to one problem's models.
#[derive(Debug, Clone)]
pub struct MeanField {
    nets: Vec<FoldedNet>,
    /// Per model: (name, grid size) the local tables were built for.
    shape: Vec<(String, usize)>,
    /// Per model: `grid_size × local_len` local features, row-major.
    local: Vec<Vec<f32>>,
    backend: Backend,
}

impl MeanField {
    /// Binds one folded net per model (in the problem's model order) to the problem.
    pub fn new(problem: &Problem, nets: Vec<FoldedNet>) -> Result<Self> {
        if nets.len() != problem.models.len() {
            bail!(
                "{} predictors for {} models",
                nets.len(),
                problem.models.len()
            );
        }
        for (net, model) in nets.iter().zip(&problem.models) {
            if let Err(e) = net.validate() {
                bail!("predictor for model '{}': {e}", model.name);
            }
            let expected = features::input_len(model);
            if net.input_len() != expected {
                bail!(
                    "predictor for model '{}' takes {} inputs, its feature layout has {expected}",
                    model.name,
                    net.input_len()
                );
            }
        }
        Ok(Self {
            nets,
            shape: shape_of(problem),
            local: local_tables(problem),
            backend: Backend::Cpu,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn nets(&self) -> &[FoldedNet] {
        &self.nets
    }

    /// Model i's local feature table (`grid_size × local_len`, row-major).
    pub fn local_table(&self, i: usize) -> &[f32] {
        &self.local[i]
    }

    /// The cached local tables when `problem` has the models they were built
    /// for, else fresh ones (correct, just not cached).
    fn tables_for(&self, problem: &Problem) -> Cow<'_, [Vec<f32>]> {
        let same = problem.models.len() == self.shape.len()
            && problem
                .models
                .iter()
                .zip(&self.shape)
                .all(|(m, (name, k))| m.name == *name && m.grid_size() == *k);
        if same {
            Cow::Borrowed(&self.local)
        } else {
            Cow::Owned(local_tables(problem))
        }
    }
}

fn shape_of(problem: &Problem) -> Vec<(String, usize)> {
    problem
        .models
        .iter()
        .map(|m| (m.name.clone(), m.grid_size()))
        .collect()
}

fn local_tables(problem: &Problem) -> Vec<Vec<f32>> {
    problem.models.iter().map(features::local_table).collect()
}

fn state_features(problem: &Problem, state: &GpuState) -> Vec<f32> {
    let mut s = Vec::with_capacity(features::STATE_FEATURES);
    features::push_state(problem, state, &mut s);
    s
}

impl Predictor for MeanField {
    fn predict_table(&self, problem: &Problem, state: &GpuState) -> Vec<f32> {
        let tables = self.tables_for(problem);
        let state = state_features(problem, state);
        let total: usize = problem.models.iter().map(|m| m.grid_size()).sum();
        let mut out = Vec::with_capacity(total);
        let mut x = Vec::new();
        let mut scratch = Scratch::default();
        for ((net, table), model) in self.nets.iter().zip(tables.iter()).zip(&problem.models) {
            let local_len = features::local_len(model);
            x.clear();
            for row in table.chunks_exact(local_len) {
                x.extend_from_slice(row);
                x.extend_from_slice(&state);
            }
            net.predict_into(&x, &mut scratch, &mut out);
        }
        out
    }

    /// Candidates outside the joint space get NaN (the caller validates indices).
    fn predict_joint(&self, problem: &Problem, state: &GpuState, candidates: &[u64]) -> Vec<f32> {
        let tables = self.tables_for(problem);
        let state = state_features(problem, state);
        let n = problem.models.len();
        let space = problem.space();
        let mut out = vec![f32::NAN; candidates.len() * n];
        // Mixed-radix strides: the last model varies fastest.
        let mut strides = vec![1u64; n];
        for i in (0..n.saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * u64::from(space.radices()[i + 1]);
        }
        let mut x = Vec::with_capacity(CHUNK_ROWS * 32);
        let mut y = Vec::with_capacity(CHUNK_ROWS);
        let mut rows = Vec::with_capacity(CHUNK_ROWS);
        let mut scratch = Scratch::default();
        for (i, ((net, table), model)) in self
            .nets
            .iter()
            .zip(tables.iter())
            .zip(&problem.models)
            .enumerate()
        {
            let local_len = features::local_len(model);
            let radix = u64::from(space.radices()[i]);
            for (chunk_no, chunk) in candidates.chunks(CHUNK_ROWS).enumerate() {
                x.clear();
                rows.clear();
                for (k, &c) in chunk.iter().enumerate() {
                    if c >= space.size() {
                        continue;
                    }
                    let digit = ((c / strides[i]) % radix) as usize;
                    x.extend_from_slice(&table[digit * local_len..(digit + 1) * local_len]);
                    x.extend_from_slice(&state);
                    rows.push(chunk_no * CHUNK_ROWS + k);
                }
                y.clear();
                net.predict_into(&x, &mut scratch, &mut y);
                for (&row, &v) in rows.iter().zip(&y) {
                    out[row * n + i] = v;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::WorkloadLevel;
    use crate::predict::table_offsets;
    use crate::scenario;
    use crate::surrogate::fold::fold;
    use mfsched_nn::{TrainConfig, train};
    use mfsched_rng::Rng;

    /// Untrained-but-real nets: a short training run on noise gives arbitrary,
    /// well-formed weights, which is all these layout tests need.
    fn nets_for(problem: &Problem) -> Vec<FoldedNet> {
        problem
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let width = features::input_len(m);
                let mut rng = Rng::new(i as u64);
                let x: Vec<f32> = (0..20 * width).map(|_| rng.next_f64() as f32).collect();
                let y: Vec<f32> = (0..20).map(|_| 100.0 * rng.next_f64() as f32).collect();
                let config = TrainConfig {
                    epochs: 3,
                    ..TrainConfig::default()
                };
                fold(&train(&x, &y, width, &config, 1, &mut |_| {}).expect("trains"))
            })
            .collect()
    }

    fn state() -> GpuState {
        GpuState {
            workload: WorkloadLevel::Medium,
            vram_used_mib: 15000.0,
            utilization: 0.62,
        }
    }

    #[test]
    fn table_rows_are_the_per_row_predictions() {
        let s = scenario::load("paper-n3").expect("bundled");
        let p = &s.problem;
        let mf = MeanField::new(p, nets_for(p)).expect("fits");
        let table = mf.predict_table(p, &state());
        let offsets = table_offsets(p);
        assert_eq!(table.len(), offsets[p.models.len()]);
        for (i, model) in p.models.iter().enumerate() {
            for c in 0..model.grid_size() {
                let row = features::input_row(p, i, c, &state());
                let single = mf.nets()[i].predict(&row)[0];
                assert!((table[offsets[i] + c] - single).abs() <= 1e-4 * single.abs().max(1.0));
            }
        }
    }

    #[test]
    fn joint_rows_agree_with_the_table() {
        let s = scenario::load("paper-n3").expect("bundled");
        let p = &s.problem;
        let mf = MeanField::new(p, nets_for(p)).expect("fits");
        let table = mf.predict_table(p, &state());
        let offsets = table_offsets(p);
        let space = p.space();
        // More than one chunk, plus an out-of-range index.
        let mut candidates: Vec<u64> = (0..space.size()).step_by(2).collect();
        candidates.push(space.size());
        assert!(candidates.len() > CHUNK_ROWS);
        let joint = mf.predict_joint(p, &state(), &candidates);
        let n = p.models.len();
        assert_eq!(joint.len(), candidates.len() * n);
        for (k, &c) in candidates[..candidates.len() - 1].iter().enumerate() {
            let tuple = space.tuple(c).expect("in range");
            for i in 0..n {
                let expect = table[offsets[i] + tuple[i] as usize];
                assert!((joint[k * n + i] - expect).abs() <= 1e-5 * expect.abs().max(1.0));
            }
        }
        assert!(joint[joint.len() - n..].iter().all(|v| v.is_nan()));
    }

    #[test]
    fn wrong_predictors_are_refused() {
        // paper-n5's llama7b is AWQ-only: one input fewer than its neighbours.
        let s = scenario::load("paper-n5").expect("bundled");
        let p = &s.problem;
        let mut nets = nets_for(p);
        nets.swap(1, 2);
        let err = MeanField::new(p, nets).expect_err("widths differ");
        assert!(err.to_string().contains("takes 9 inputs"), "{err}");
        let err = MeanField::new(p, nets_for(p)[..4].to_vec()).expect_err("one short");
        assert!(
            err.to_string().contains("4 predictors for 5 models"),
            "{err}"
        );
    }
}
