//! Batched CPU evaluation of one predictor per model over the two entry points
//! (the per-model table and joint candidates), with [`FoldedNet::predict_into`]
//! as the arithmetic. It is the reference the wgpu backend is checked against
//! and the CPU side of the surrogate benchmark.

use crate::features::{FIELD_FEATURES, input_len, local_len, local_table, push_state};
use crate::net::{FoldedNet, Scratch};
use anyhow::{Result, bail};
use mfsched_core::domain::{GpuState, JointSpace, Problem};

/// Rows gathered per `predict_into` call in the joint path: small enough to stay
/// in cache, large enough to amortise the call.
const JOINT_BLOCK_ROWS: usize = 1024;

/// One predictor per model of a problem, with each model's local feature table.
#[derive(Debug, Clone)]
pub struct CpuBackend {
    problem: Problem,
    space: JointSpace,
    nets: Vec<FoldedNet>,
    /// Per model: `grid_size × local_len` local features.
    tables: Vec<Vec<f32>>,
}

/// Checks that `nets` holds one valid predictor per model with the model's input width.
pub fn check_nets(problem: &Problem, nets: &[FoldedNet]) -> Result<()> {
    if nets.len() != problem.models.len() {
        bail!(
            "{} predictors for {} models: give one predictor per model",
            nets.len(),
            problem.models.len()
        );
    }
    for (model, net) in problem.models.iter().zip(nets) {
        if let Err(why) = net.validate() {
            bail!("predictor of model '{}' is malformed: {why}", model.name);
        }
        if net.input_len() != input_len(model) {
            bail!(
                "predictor of model '{}' takes {} inputs but the model's feature layout has {}",
                model.name,
                net.input_len(),
                input_len(model)
            );
        }
    }
    Ok(())
}

/// Rejects candidates outside the joint space (they would decode to wrong digits).
pub fn check_candidates(space: &JointSpace, candidates: &[u64]) -> Result<()> {
    if let Some((at, &bad)) = candidates
        .iter()
        .enumerate()
        .find(|&(_, &c)| c >= space.size())
    {
        bail!(
            "candidate {at} has joint index {bad}, outside the joint space of {} configurations",
            space.size()
        );
    }
    Ok(())
}

/// Rejects a field list whose length is not one field per candidate.
pub fn check_fields(candidates: &[u64], fields: Option<&[[f32; 2]]>) -> Result<()> {
    match fields {
        Some(f) if f.len() != candidates.len() => bail!(
            "{} fields for {} candidates: give one field per candidate",
            f.len(),
            candidates.len()
        ),
        _ => Ok(()),
    }
}

impl CpuBackend {
    pub fn new(problem: &Problem, nets: &[FoldedNet]) -> Result<Self> {
        check_nets(problem, nets)?;
        Ok(Self {
            problem: problem.clone(),
            space: problem.space(),
            nets: nets.to_vec(),
            tables: problem.models.iter().map(local_table).collect(),
        })
    }

    /// Every local configuration of every model under `state`: Σᵢ kᵢ values,
    /// model-major, in grid order (the `Predictor::predict_table` layout).
    pub fn predict_table(&self, state: &GpuState) -> Vec<f32> {
        let state_features = self.state_features(state);
        let mut out = Vec::with_capacity(self.tables.iter().map(Vec::len).sum());
        let mut x = Vec::new();
        let mut scratch = Scratch::default();
        for ((model, net), table) in self.problem.models.iter().zip(&self.nets).zip(&self.tables) {
            x.clear();
            // Every model has at least its variant one-hot, so rows are never empty.
            for row in table.chunks_exact(local_len(model).max(1)) {
                x.extend_from_slice(row);
                x.extend_from_slice(&state_features);
            }
            net.predict_into(&x, &mut scratch, &mut out);
        }
        out
    }

    /// N predictions per joint candidate, row-major: `out[c * N + i]`.
    pub fn predict_joint(&self, state: &GpuState, candidates: &[u64]) -> Result<Vec<f32>> {
        self.predict_joint_fields(state, candidates, None)
    }

    /// As [`CpuBackend::predict_joint`], with each candidate's own field when
    /// `fields` is given: `fields[c]` = (VRAM used / card VRAM, utilisation)
    /// replaces the state's two continuous features for candidate c (the
    /// workload stays the state's). See `surrogate::field`.
    pub fn predict_joint_fields(
        &self,
        state: &GpuState,
        candidates: &[u64],
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>> {
        check_candidates(&self.space, candidates)?;
        check_fields(candidates, fields)?;
        let n = self.nets.len();
        let state_features = self.state_features(state);
        let mut out = vec![0.0; candidates.len() * n];
        let mut x = Vec::new();
        let mut y = Vec::with_capacity(JOINT_BLOCK_ROWS);
        let mut scratch = Scratch::default();
        for (i, ((model, net), table)) in self
            .problem
            .models
            .iter()
            .zip(&self.nets)
            .zip(&self.tables)
            .enumerate()
        {
            let width = local_len(model);
            for (block_no, block) in candidates.chunks(JOINT_BLOCK_ROWS).enumerate() {
                x.clear();
                let first = block_no * JOINT_BLOCK_ROWS;
                for (k, &c) in block.iter().enumerate() {
                    let config = self.space.digit(c, i) as usize;
                    x.extend_from_slice(&table[config * width..(config + 1) * width]);
                    x.extend_from_slice(&state_features);
                    if let Some(fields) = fields {
                        let at = x.len() - FIELD_FEATURES;
                        x[at..].copy_from_slice(&fields[first + k]);
                    }
                }
                y.clear();
                net.predict_into(&x, &mut scratch, &mut y);
                for (k, &v) in y.iter().enumerate() {
                    out[(first + k) * n + i] = v;
                }
            }
        }
        Ok(out)
    }

    fn state_features(&self, state: &GpuState) -> Vec<f32> {
        let mut v = Vec::new();
        push_state(&self.problem, state, &mut v);
        v
    }
}
