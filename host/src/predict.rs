//! The contract between throughput predictors (the MeanField surrogate, its
//! baselines) and their users (the plugin host, evaluation).

use crate::domain::{GpuState, Problem};

/// Predicts each model's throughput, in the model's own unit (tokens/s, FPS).
pub trait Predictor: Send + Sync {
    /// Every local configuration of every model under one state: a flat buffer,
    /// model-major (model 0's grid first, in grid order), Σᵢ kᵢ values.
    ///
    /// With the field held fixed (the published mode) this is all a decision needs.
    fn predict_table(&self, problem: &Problem, state: &GpuState) -> Vec<f32>;

    /// N predictions per joint candidate (mixed-radix indices), row-major:
    /// `out[c * N + i]` is model i's throughput in candidate c.
    fn predict_joint(&self, problem: &Problem, state: &GpuState, candidates: &[u64]) -> Vec<f32>;
}

/// Offsets of each model's block in a `predict_table` buffer (length N + 1).
pub fn table_offsets(problem: &Problem) -> Vec<usize> {
    let mut offsets = Vec::with_capacity(problem.models.len() + 1);
    let mut acc = 0;
    offsets.push(0);
    for m in &problem.models {
        acc += m.grid_size();
        offsets.push(acc);
    }
    offsets
}
