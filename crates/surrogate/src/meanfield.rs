//! The MeanField predictor: one folded MLP per model over
//! `[local features of its configuration | state features]`, bound to one
//! problem's models.
//!
//! Inference runs on [`InferenceBackend`]: the batched CPU reference
//! (`surrogate::cpu`) or the wgpu shader (`surrogate::gpu`) with the CPU as
//! fallback. A bundle trained on another field (`[… | state | the contention
//! reading]`, `[… | state | the co-runners' summed tables]`) runs row by row
//! on the CPU instead ([`FieldRows`]): the backends' first-layer split knows
//! the observed layout only. The trained nets stay available for whoever needs them (the
//! backend agreement check, benchmarks).

use super::backend::{BackendChoice, InferenceBackend};
use super::cpu::{check_fields, check_nets, check_nets_on};
use super::features::{
    CorunnerTables, FIELD_FEATURES, FieldFeatures, contention_input, local_len, local_table,
    push_corunner_sums, push_state,
};
use super::net::FoldedNet;
use super::target::OutputMap;
use anyhow::{Result, bail};
use mfsched_core::{GpuState, JointSpace, Problem};
use mfsched_core::{InSpace, PredictError, Predictor, table_offsets};

/// A MeanField surrogate bound to one problem's models.
#[derive(Debug)]
pub struct MeanField {
    nets: Vec<FoldedNet>,
    inference: Inference,
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
        let inference =
            Inference::Backend(Box::new(InferenceBackend::select(choice, problem, &nets)?));
        Ok(Self {
            outputs: vec![OutputMap::identity(); nets.len()],
            nets,
            inference,
            space: problem.space(),
            offsets: table_offsets(problem),
        })
    }

    /// Binds nets trained on another `field` than the observed one, on the
    /// CPU. A co-runner field comes with its `tables` (per model, per
    /// configuration: what it adds to its co-runners' inputs; empty for a field
    /// without them): under the observed field a model's co-runners are those
    /// of the running configuration, and a candidate-aware call gives each
    /// candidate its own ([`MeanField::predict_joint_fields`]).
    pub fn with_field(
        problem: &Problem,
        nets: Vec<FoldedNet>,
        field: FieldFeatures,
        tables: CorunnerTables,
        choice: BackendChoice,
    ) -> Result<Self> {
        if choice == BackendChoice::Gpu {
            bail!(
                "the {field} field runs on the CPU only (the wgpu shader computes the observed layout); use the auto or cpu backend"
            );
        }
        let rows = FieldRows::new(problem, &nets, field, tables)?;
        Ok(Self {
            outputs: vec![OutputMap::identity(); nets.len()],
            nets,
            inference: Inference::Rows(rows),
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
    /// field; see [`InferenceBackend::predict_joint_fields`]. Under a
    /// co-runner field each candidate's co-runners are its own too.
    pub fn predict_joint_fields(
        &self,
        state: &GpuState,
        candidates: InSpace<'_>,
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>, PredictError> {
        let mut out = match &self.inference {
            Inference::Backend(b) => b.predict_joint_fields(state, candidates, fields)?,
            Inference::Rows(r) => r.joint(&self.nets, &self.space, state, &candidates, fields)?,
        };
        self.map_joint(&candidates, &mut out);
        Ok(out)
    }

    /// Offsets of each model's block in a table (see [`table_offsets`]).
    pub fn table_offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Where inference runs: `CPU` or `GPU on <adapter>`.
    pub fn backend_label(&self) -> String {
        match &self.inference {
            Inference::Backend(b) => b.label(),
            Inference::Rows(r) => format!("CPU, row by row ({} field)", r.field),
        }
    }

    /// Where inference runs and why.
    pub fn backend_reason(&self) -> &str {
        match &self.inference {
            Inference::Backend(b) => &b.reason,
            Inference::Rows(_) => {
                "a field beyond the observed one: the batched backends compute the observed layout only"
            }
        }
    }

    /// Threads a joint call of `candidates` candidates uses on the CPU backend.
    pub fn cpu_threads_for(&self, candidates: usize) -> usize {
        match &self.inference {
            Inference::Backend(b) => b.cpu().threads_for(candidates),
            Inference::Rows(_) => 1,
        }
    }
}

/// How a [`MeanField`] evaluates its nets.
#[derive(Debug)]
enum Inference {
    /// The observed layout: the batched CPU or wgpu backend.
    Backend(Box<InferenceBackend>),
    /// Another field: input rows built here, one per model and
    /// configuration or candidate, through the folded nets on the CPU.
    Rows(FieldRows),
}

/// A state's features in a field's rows: the observed state features, then
/// the contention reading where the field has one (after the part a
/// candidate-aware call replaces).
#[derive(Debug)]
struct RowState {
    state: Vec<f32>,
    contention: Option<f32>,
}

/// What the rows of a field beyond the observed one are made of.
#[derive(Debug)]
struct FieldRows {
    problem: Problem,
    field: FieldFeatures,
    tables: CorunnerTables,
    /// Per model: its local feature table (`grid × local_len`).
    locals: Vec<Vec<f32>>,
}

impl FieldRows {
    fn new(
        problem: &Problem,
        nets: &[FoldedNet],
        field: FieldFeatures,
        tables: CorunnerTables,
    ) -> Result<Self> {
        check_nets_on(problem, nets, field)?;
        if !field.has_corunner_tables() {
            if !tables.is_empty() {
                bail!("the {field} field has no co-runner tables");
            }
        } else if tables.len() != problem.models.len() {
            bail!(
                "{} co-runner tables for {} models",
                tables.len(),
                problem.models.len()
            );
        }
        let width = field.corunner_names().len();
        for (model, table) in problem.models.iter().zip(&tables) {
            if table.len() != model.grid_size() || table.iter().any(|r| r.len() != width) {
                bail!(
                    "model '{}': its co-runner table is not {} rows of {width}",
                    model.name,
                    model.grid_size()
                );
            }
        }
        Ok(Self {
            problem: problem.clone(),
            field,
            tables,
            locals: problem.models.iter().map(local_table).collect(),
        })
    }

    /// Model `i`'s input row in configuration `config`: its local features,
    /// the state (its two field features replaced by `field` where given;
    /// `state` ends with them, so the contention reading follows in the row),
    /// then the sums over the co-runners of `joint` (its own entry skipped).
    fn push_row(
        &self,
        i: usize,
        config: usize,
        state: &RowState,
        field: Option<[f32; 2]>,
        joint: &[u32],
        out: &mut Vec<f32>,
    ) {
        let len = local_len(&self.problem.models[i]);
        out.extend_from_slice(&self.locals[i][config * len..(config + 1) * len]);
        out.extend_from_slice(&state.state);
        if let Some(f) = field {
            let at = out.len() - FIELD_FEATURES;
            out[at..].copy_from_slice(&f);
        }
        out.extend(state.contention);
        let width = self.field.corunner_names().len();
        push_corunner_sums(&self.tables, width, i, joint, out);
    }

    fn state_features(&self, state: &GpuState) -> Result<RowState, PredictError> {
        let contention = contention_input(self.field, state).map_err(PredictError::Mismatch)?;
        let mut v = Vec::new();
        push_state(&self.problem, state, &mut v);
        Ok(RowState {
            state: v,
            contention,
        })
    }

    /// The table (model-major, as `Predictor::predict_table`) with every
    /// model's co-runners taken from `running`.
    fn table(
        &self,
        nets: &[FoldedNet],
        state: &GpuState,
        running: &[u32],
    ) -> Result<Vec<f32>, PredictError> {
        if running.len() != self.problem.models.len() {
            return Err(PredictError::Mismatch(format!(
                "the {} field needs the running configuration of {} models, got {}",
                self.field,
                self.problem.models.len(),
                running.len()
            )));
        }
        let state = self.state_features(state)?;
        let mut out = Vec::new();
        let mut rows = Vec::new();
        for (i, (model, net)) in self.problem.models.iter().zip(nets).enumerate() {
            rows.clear();
            for c in 0..model.grid_size() {
                self.push_row(i, c, &state, None, running, &mut rows);
            }
            out.extend(net.predict(&rows));
        }
        Ok(out)
    }

    /// N predictions per candidate (`out[c * N + i]`), each model's
    /// co-runners those of the candidate, with `fields[c]` for its field
    /// where given.
    fn joint(
        &self,
        nets: &[FoldedNet],
        space: &JointSpace,
        state: &GpuState,
        candidates: &[u64],
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>, PredictError> {
        check_fields(candidates, fields).map_err(|e| PredictError::Mismatch(e.to_string()))?;
        let n = self.problem.models.len();
        let state = self.state_features(state)?;
        let mut digits = vec![0u32; candidates.len() * n];
        for (&c, d) in candidates.iter().zip(digits.chunks_exact_mut(n)) {
            space.decode(c, d);
        }
        let mut out = vec![0.0; candidates.len() * n];
        let mut rows = Vec::new();
        for (i, net) in nets.iter().enumerate() {
            rows.clear();
            for (k, joint) in digits.chunks_exact(n).enumerate() {
                let field = fields.map(|f| f[k]);
                self.push_row(i, joint[i] as usize, &state, field, joint, &mut rows);
            }
            for (row, y) in out.chunks_exact_mut(n).zip(net.predict(&rows)) {
                row[i] = y;
            }
        }
        Ok(out)
    }
}

/// The surrogate answers for the models it was bound to; only the state (and,
/// for joint calls, the candidates) vary between calls.
impl Predictor for MeanField {
    fn joint_size(&self) -> u64 {
        self.space.size()
    }

    fn predict_table(&self, state: &GpuState, running: &[u32]) -> Result<Vec<f32>, PredictError> {
        let mut table = match &self.inference {
            Inference::Backend(b) => b.predict_table(state, running)?,
            Inference::Rows(r) => r.table(&self.nets, state, running)?,
        };
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
        running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError> {
        match &self.inference {
            Inference::Backend(_) => self.predict_joint_fields(state, candidates, None),
            // The observed field: every candidate is read from the table of
            // the running configuration's co-runners, as the policies see it.
            Inference::Rows(_) => {
                let table = self.predict_table(state, running)?;
                let n = self.offsets.len() - 1;
                let mut out = Vec::with_capacity(candidates.len() * n);
                for &c in candidates.iter() {
                    for (i, off) in self.offsets[..n].iter().enumerate() {
                        out.push(table[off + self.space.digit(c, i) as usize]);
                    }
                }
                Ok(out)
            }
        }
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
        nets_with(problem, FieldFeatures::Observed)
    }

    fn nets_with(problem: &Problem, field: FieldFeatures) -> Vec<FoldedNet> {
        problem
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let width = local_len(m) + field.width();
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
            contention: None,
        }
    }

    #[test]
    fn table_rows_are_the_per_row_predictions() {
        let s = load_scenario("paper-n3").expect("bundled");
        let p = &s.problem;
        let mf = MeanField::new(p, nets_for(p)).expect("fits");
        let table = mf.predict_table(&state(), &p.current).expect("predicts");
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

    /// Under a co-runner field the table takes every model's co-runners from
    /// the running configuration (and moves with it), the observed joint
    /// predictions read that table, and a candidate-aware call gives each
    /// candidate its own co-runners: each value is its model's net on the row
    /// the features module builds.
    #[test]
    fn corunner_rows_take_the_running_or_the_candidates_corunners() {
        let s = load_scenario("paper-n3").expect("bundled");
        let p = &s.problem;
        let field = FieldFeatures::CoRunnerFactors;
        let width = field.corunner_names().len();
        let tables: CorunnerTables = p
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                (0..m.grid_size())
                    .map(|c| (0..width).map(|k| 0.1 * (i + c + k) as f64).collect())
                    .collect()
            })
            .collect();
        let nets = nets_with(p, field);
        let mf = MeanField::with_field(p, nets, field, tables.clone(), BackendChoice::Auto)
            .expect("fits");
        assert!(mf.backend_label().contains("row by row"));
        let reference = |i: usize, config: usize, joint: &[u32], fields: Option<[f32; 2]>| {
            let mut row = features::input_row(p, i, config, &state());
            if let Some(f) = fields {
                let at = row.len() - FIELD_FEATURES;
                row[at..].copy_from_slice(&f);
            }
            push_corunner_sums(&tables, width, i, joint, &mut row);
            mf.nets()[i].predict(&row)[0]
        };
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
        let running = p.current.clone();
        let table = mf.predict_table(&state(), &running).expect("predicts");
        let offsets = table_offsets(p);
        for (i, model) in p.models.iter().enumerate() {
            for c in 0..model.grid_size() {
                assert!(close(
                    table[offsets[i] + c],
                    reference(i, c, &running, None)
                ));
            }
        }
        let mut other = running.clone();
        other[1] = u32::from(other[1] == 0);
        let moved = mf.predict_table(&state(), &other).expect("predicts");
        assert_ne!(table[offsets[0]..offsets[1]], moved[offsets[0]..offsets[1]]);
        assert_eq!(table[offsets[1]..offsets[2]], moved[offsets[1]..offsets[2]]);

        let space = p.space();
        let candidates: Vec<u64> = (0..space.size()).step_by(97).collect();
        let n = p.models.len();
        let observed = mf
            .predict_joint(&state(), &running, &candidates)
            .expect("predicts");
        let fields: Vec<[f32; 2]> = candidates.iter().map(|_| [0.4, 0.7]).collect();
        let aware = mf
            .predict_joint_fields(
                &state(),
                InSpace::check(space.size(), &candidates).expect("in space"),
                Some(&fields),
            )
            .expect("predicts");
        for (k, &c) in candidates.iter().enumerate() {
            let tuple = space.tuple(c).expect("in range");
            for i in 0..n {
                let d = tuple[i] as usize;
                assert_eq!(observed[k * n + i], table[offsets[i] + d]);
                assert!(close(
                    aware[k * n + i],
                    reference(i, d, &tuple, Some([0.4, 0.7]))
                ));
            }
        }
        let err = MeanField::with_field(p, nets_with(p, field), field, tables, BackendChoice::Gpu)
            .expect_err("CPU only");
        assert!(err.to_string().contains("CPU only"), "{err}");
    }

    /// Under the contention field every row is the observed one plus the
    /// reading (a candidate-aware call replaces the two field features before
    /// it), and a state without a reading is refused, not predicted as 0.
    #[test]
    fn contention_rows_follow_the_state_with_the_reading() {
        let s = load_scenario("paper-n3").expect("bundled");
        let p = &s.problem;
        let field = FieldFeatures::Contention;
        let mf = MeanField::with_field(
            p,
            nets_with(p, field),
            field,
            CorunnerTables::new(),
            BackendChoice::Auto,
        )
        .expect("fits");
        let measured = GpuState {
            contention: Some(0.35),
            ..state()
        };
        let reference = |i: usize, config: usize, fields: Option<[f32; 2]>| {
            let mut row = features::input_row(p, i, config, &measured);
            if let Some(f) = fields {
                let at = row.len() - FIELD_FEATURES;
                row[at..].copy_from_slice(&f);
            }
            row.push(0.35);
            mf.nets()[i].predict(&row)[0]
        };
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
        let table = mf.predict_table(&measured, &p.current).expect("predicts");
        let offsets = table_offsets(p);
        for (i, model) in p.models.iter().enumerate() {
            for c in 0..model.grid_size() {
                assert!(close(table[offsets[i] + c], reference(i, c, None)));
            }
        }
        let space = p.space();
        let candidates: Vec<u64> = (0..space.size()).step_by(211).collect();
        let fields: Vec<[f32; 2]> = candidates.iter().map(|_| [0.3, 0.9]).collect();
        let aware = mf
            .predict_joint_fields(
                &measured,
                InSpace::check(space.size(), &candidates).expect("in space"),
                Some(&fields),
            )
            .expect("predicts");
        let n = p.models.len();
        for (k, &c) in candidates.iter().enumerate() {
            let tuple = space.tuple(c).expect("in range");
            for (i, &d) in tuple.iter().enumerate() {
                assert!(close(
                    aware[k * n + i],
                    reference(i, d as usize, Some([0.3, 0.9]))
                ));
            }
        }
        let err = mf
            .predict_table(&state(), &p.current)
            .expect_err("no reading");
        assert!(matches!(err, PredictError::Mismatch(_)), "{err}");
        let tables = vec![vec![vec![]; 1]; p.models.len()];
        assert!(
            MeanField::with_field(p, nets_with(p, field), field, tables, BackendChoice::Cpu)
                .is_err()
        );
    }

    #[test]
    fn joint_rows_agree_with_the_table() {
        let s = load_scenario("paper-n3").expect("bundled");
        let p = &s.problem;
        let mf = MeanField::new(p, nets_for(p)).expect("fits");
        let table = mf.predict_table(&state(), &p.current).expect("predicts");
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
        let before = raw.predict_table(&state(), &p.current).expect("predicts");
        let after = mapped
            .predict_table(&state(), &p.current)
            .expect("predicts");
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
