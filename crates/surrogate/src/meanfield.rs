//! The MeanField predictor: one folded MLP per model over
//! `[local features of its configuration | state features]`, bound to one
//! problem's models.
//!
//! Inference runs on [`InferenceBackend`]: the batched CPU reference
//! (`surrogate::cpu`) or the wgpu shader (`surrogate::gpu`) with the CPU as
//! fallback. The trained nets stay available for whoever needs them (the
//! backend agreement check, benchmarks).

use super::backend::{BackendChoice, InferenceBackend};
use super::cpu::check_nets;
use super::net::FoldedNet;
use anyhow::Result;
use mfsched_core::domain::{GpuState, Problem};
use mfsched_core::predict::{PredictError, Predictor};

/// A MeanField surrogate bound to one problem's models.
#[derive(Debug)]
pub struct MeanField {
    nets: Vec<FoldedNet>,
    inference: InferenceBackend,
}

impl MeanField {
    /// Binds one folded net per model (in the problem's model order) to the
    /// problem, on the CPU reference backend.
    pub fn new(problem: &Problem, nets: Vec<FoldedNet>) -> Result<Self> {
        Self::with_backend(problem, nets, BackendChoice::Cpu)
    }

    /// As [`MeanField::new`], on the backend `choice` asks for.
    pub fn with_backend(
        problem: &Problem,
        nets: Vec<FoldedNet>,
        choice: BackendChoice,
    ) -> Result<Self> {
        check_nets(problem, &nets)?;
        let inference = InferenceBackend::select(choice, problem, &nets)?;
        Ok(Self { nets, inference })
    }

    pub fn nets(&self) -> &[FoldedNet] {
        &self.nets
    }

    /// Joint predictions with each candidate's own (VRAM fraction, utilisation)
    /// field; see [`InferenceBackend::predict_joint_fields`].
    pub fn predict_joint_fields(
        &self,
        problem: &Problem,
        state: &GpuState,
        candidates: &[u64],
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>, PredictError> {
        self.inference
            .predict_joint_fields(problem, state, candidates, fields)
    }

    /// Where inference runs: `CPU` or `GPU on <adapter>`.
    pub fn backend_label(&self) -> String {
        self.inference.label()
    }

    /// Where inference runs and why.
    pub fn backend_reason(&self) -> &str {
        &self.inference.reason
    }
}

/// `problem` must have the models the surrogate was bound to; only the state
/// (and, for joint calls, the candidates) vary between calls.
impl Predictor for MeanField {
    fn predict_table(&self, problem: &Problem, state: &GpuState) -> Result<Vec<f32>, PredictError> {
        self.inference.predict_table(problem, state)
    }

    /// Candidates outside the joint space get NaN (the caller validates indices).
    fn predict_joint(
        &self,
        problem: &Problem,
        state: &GpuState,
        candidates: &[u64],
    ) -> Result<Vec<f32>, PredictError> {
        self.inference.predict_joint(problem, state, candidates)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features;
    use crate::fold::fold;
    use mfsched_core::domain::WorkloadLevel;
    use mfsched_core::predict::table_offsets;
    use mfsched_core::scenario;
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
        let table = mf.predict_table(p, &state()).expect("predicts");
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
        let table = mf.predict_table(p, &state()).expect("predicts");
        let offsets = table_offsets(p);
        let space = p.space();
        // More than one chunk, plus an out-of-range index.
        let mut candidates: Vec<u64> = (0..space.size()).step_by(2).collect();
        candidates.push(space.size());
        assert!(candidates.len() > 1024, "more than one CPU block");
        let joint = mf
            .predict_joint(p, &state(), &candidates)
            .expect("predicts");
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
