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
use super::target::OutputMap;
use anyhow::{Result, bail};
use mfsched_core::{GpuState, JointSpace, Problem};
use mfsched_core::{InSpace, PredictError, Predictor, table_offsets};

/// A MeanField surrogate bound to one problem's models.
#[derive(Debug)]
pub struct MeanField {
    nets: Vec<FoldedNet>,
    inference: InferenceBackend,
    /// Per model: net output → throughput (identity for the absolute target).
    outputs: Vec<OutputMap>,
    space: JointSpace,
    offsets: Vec<usize>,
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
        Ok(Self {
            outputs: vec![OutputMap::identity(); nets.len()],
            nets,
            inference,
            space: problem.space(),
            offsets: table_offsets(problem),
        })
    }

    /// The same surrogate with each model's output turned into throughput by
    /// its target (see `surrogate::target`).
    pub fn with_outputs(mut self, outputs: Vec<OutputMap>) -> Result<Self> {
        if outputs.len() != self.nets.len() {
            bail!(
                "{} output maps for {} models",
                outputs.len(),
                self.nets.len()
            );
        }
        self.outputs = outputs;
        Ok(self)
    }

    /// The nets (their outputs are the learnt quantity, before [`OutputMap`]).
    pub fn nets(&self) -> &[FoldedNet] {
        &self.nets
    }

    /// Throughput from joint outputs (`out[c * N + i]`) in place.
    fn map_joint(&self, candidates: &[u64], out: &mut [f32]) {
        let n = self.outputs.len();
        if self.outputs.iter().all(OutputMap::is_identity) {
            return;
        }
        for (k, &c) in candidates.iter().enumerate() {
            for (i, map) in self.outputs.iter().enumerate() {
                let y = &mut out[k * n + i];
                *y = map.apply(self.space.digit(c, i) as usize, *y);
            }
        }
    }

    /// Joint predictions with each candidate's own (VRAM fraction, utilisation)
    /// field; see [`InferenceBackend::predict_joint_fields`].
    pub fn predict_joint_fields(
        &self,
        state: &GpuState,
        candidates: InSpace<'_>,
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>, PredictError> {
        let mut out = self
            .inference
            .predict_joint_fields(state, candidates, fields)?;
        self.map_joint(&candidates, &mut out);
        Ok(out)
    }

    /// Offsets of each model's block in a table (see [`table_offsets`]).
    pub fn table_offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Where inference runs: `CPU` or `GPU on <adapter>`.
    pub fn backend_label(&self) -> String {
        self.inference.label()
    }

    /// Where inference runs and why.
    pub fn backend_reason(&self) -> &str {
        &self.inference.reason
    }

    /// Threads a joint call of `candidates` candidates uses on the CPU backend.
    pub fn cpu_threads_for(&self, candidates: usize) -> usize {
        self.inference.cpu().threads_for(candidates)
    }
}

/// The surrogate answers for the models it was bound to; only the state (and,
/// for joint calls, the candidates) vary between calls.
impl Predictor for MeanField {
    fn joint_size(&self) -> u64 {
        self.space.size()
    }

    fn predict_table(&self, state: &GpuState) -> Result<Vec<f32>, PredictError> {
        let mut table = self.inference.predict_table(state)?;
        for (map, range) in self.outputs.iter().zip(self.offsets.windows(2)) {
            if !map.is_identity() {
                for (c, y) in table[range[0]..range[1]].iter_mut().enumerate() {
                    *y = map.apply(c, *y);
                }
            }
        }
        Ok(table)
    }

    fn predict_in_space(
        &self,
        state: &GpuState,
        _running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError> {
        self.predict_joint_fields(state, candidates, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features;
    use crate::fold::fold;
    use mfsched_core::WorkloadLevel;
    use mfsched_core::load_scenario;
    use mfsched_core::table_offsets;
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
        let s = load_scenario("paper-n3").expect("bundled");
        let p = &s.problem;
        let mf = MeanField::new(p, nets_for(p)).expect("fits");
        let table = mf.predict_table(&state()).expect("predicts");
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
        let s = load_scenario("paper-n3").expect("bundled");
        let p = &s.problem;
        let mf = MeanField::new(p, nets_for(p)).expect("fits");
        let table = mf.predict_table(&state()).expect("predicts");
        let offsets = table_offsets(p);
        let space = p.space();
        // More than one chunk.
        let mut candidates: Vec<u64> = (0..space.size()).step_by(2).collect();
        assert!(candidates.len() > 1024, "more than one CPU block");
        let joint = mf
            .predict_joint(&state(), &p.current, &candidates)
            .expect("predicts");
        let n = p.models.len();
        assert_eq!(joint.len(), candidates.len() * n);
        for (k, &c) in candidates.iter().enumerate() {
            let tuple = space.tuple(c).expect("in range");
            for i in 0..n {
                let expect = table[offsets[i] + tuple[i] as usize];
                assert!((joint[k * n + i] - expect).abs() <= 1e-5 * expect.abs().max(1.0));
            }
        }
        // An out-of-range index among them refuses the whole call.
        candidates.push(space.size());
        let err = mf
            .predict_joint(&state(), &p.current, &candidates)
            .expect_err("the last is past the space");
        assert!(
            matches!(err, PredictError::OutOfRange { candidate, .. } if candidate == space.size()),
            "{err}"
        );
    }

    /// Log and relative targets: table and joint rows are the nets' outputs
    /// decoded per model and configuration, alike on both paths.
    #[test]
    fn outputs_are_decoded_per_target_on_table_and_joint_rows() {
        use crate::target::{OutputMap, Target};
        let s = load_scenario("paper-n3").expect("bundled");
        let p = &s.problem;
        let raw = MeanField::new(p, nets_for(p)).expect("fits");
        let solo: Vec<f64> = (0..p.models[1].grid_size())
            .map(|c| 10.0 + c as f64)
            .collect();
        let maps = vec![
            OutputMap::plain(Target::Log),
            OutputMap::new(&p.models[1], Target::RelativeToSolo, Some(&solo)).expect("fits"),
            OutputMap::identity(),
        ];
        let mapped = MeanField::new(p, nets_for(p))
            .expect("fits")
            .with_outputs(maps.clone())
            .expect("three maps");
        let offsets = table_offsets(p);
        let before = raw.predict_table(&state()).expect("predicts");
        let after = mapped.predict_table(&state()).expect("predicts");
        for (i, map) in maps.iter().enumerate() {
            for c in 0..p.models[i].grid_size() {
                let k = offsets[i] + c;
                assert_eq!(after[k], map.apply(c, before[k]), "model {i} config {c}");
            }
        }
        assert_eq!(after[offsets[1] + 3], before[offsets[1] + 3] * 13.0);
        let candidates: Vec<u64> = (0..p.space().size()).step_by(7).collect();
        let joint = mapped
            .predict_joint(&state(), &p.current, &candidates)
            .expect("predicts");
        for (k, &c) in candidates.iter().enumerate() {
            let tuple = p.space().tuple(c).expect("in range");
            for i in 0..3 {
                let expect = after[offsets[i] + tuple[i] as usize];
                assert!((joint[k * 3 + i] - expect).abs() <= 1e-4 * expect.abs().max(1.0));
            }
        }
        assert!(
            MeanField::new(p, nets_for(p))
                .expect("fits")
                .with_outputs(maps[..2].to_vec())
                .is_err()
        );
    }

    #[test]
    fn wrong_predictors_are_refused() {
        // paper-n5's llama7b is AWQ-only: one input fewer than its neighbours.
        let s = load_scenario("paper-n5").expect("bundled");
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
