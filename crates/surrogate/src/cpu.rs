//! Batched CPU evaluation of one predictor per model over the two entry points
//! (the per-model table and joint candidates). It is the reference the wgpu
//! backend is checked against and the CPU side of the surrogate benchmark.
//!
//! A model's input row is `[local features of its configuration | state]`, and
//! within one call the state is the same for every row but for the two field
//! features a candidate-aware call gives each candidate. So the first layer
//! never runs as a GEMM here: its pre-activation splits into a per-configuration
//! part `W₁[:, local] · local(c)`, computed once when the backend is built, and
//! a per-call part `b₁ + W₁[:, state] · state`. Both are summed in f64 and
//! rounded once into a per-call table of `grid × hidden` values, so a row's first
//! layer is a copy of its configuration's row (plus, with per-candidate fields,
//! the two field columns of `W₁` scaled by its field, then ReLU). The later
//! layers are [`FoldedNet::finish_block`]'s GEMMs.
//!
//! Joint calls run in fixed blocks of [`BLOCK_ROWS`] candidates; a large call
//! shares whole blocks out over scoped threads ([`CpuBackend::threads_for`]).
//! A row's value depends on nothing but the row (the GEMM computes every row
//! alike wherever it sits in a block), so it is the same in any batch and for
//! any thread count.

use crate::features::{
    FIELD_FEATURES, FieldFeatures, STATE_FEATURES, local_len, local_table, push_state,
};
use crate::net::{BLOCK_ROWS, FoldedNet, Scratch};
use anyhow::{Result, bail};
use mfsched_core::{GpuState, InSpace, JointSpace, Model, Problem};

/// A thread gets at least this many candidates of a joint call (two blocks,
/// a millisecond or more of work), so spawning it costs well under its share.
pub const MIN_CANDIDATES_PER_THREAD: usize = 2 * BLOCK_ROWS;

/// The threads a backend may use per call by default: every core the process
/// may run on.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One predictor per model of a problem, with each model's first-layer
/// contribution of every local configuration.
#[derive(Debug, Clone)]
pub struct CpuBackend {
    problem: Problem,
    space: JointSpace,
    models: Vec<ModelNet>,
    /// Most threads one joint call uses.
    threads: usize,
}

/// A model's predictor and `W₁[:, local] · local(c)` for each of its local
/// configurations c (`grid × hidden`, row-major), in f64 so the per-call sum
/// with the state's part rounds once.
#[derive(Debug, Clone)]
struct ModelNet {
    net: FoldedNet,
    local_pre: Vec<f64>,
}

impl ModelNet {
    fn new(model: &Model, net: &FoldedNet) -> Self {
        let first = &net.layers[0];
        let local = local_len(model);
        let table = local_table(model);
        let mut local_pre = Vec::with_capacity(model.grid_size() * first.outputs);
        for c in 0..model.grid_size() {
            let features = &table[c * local..(c + 1) * local];
            for weights in first.weights.chunks_exact(first.inputs) {
                local_pre.push(
                    weights
                        .iter()
                        .zip(features)
                        .map(|(&w, &x)| f64::from(w) * f64::from(x))
                        .sum(),
                );
            }
        }
        Self {
            net: net.clone(),
            local_pre,
        }
    }

    /// The first layer for one call under `state_features` (the [`push_state`]
    /// row). With `per_row_fields` the two field features are left out of the
    /// table and kept as columns for [`FirstLayer::fill`] to add per row.
    fn first_layer(&self, state_features: &[f32], per_row_fields: bool) -> FirstLayer {
        let layer = &self.net.layers[0];
        let local = layer.inputs - STATE_FEATURES;
        let shared_features = if per_row_fields {
            STATE_FEATURES - FIELD_FEATURES
        } else {
            STATE_FEATURES
        };
        let shared: Vec<f64> = layer
            .weights
            .chunks_exact(layer.inputs)
            .zip(&layer.bias)
            .map(|(weights, &b)| {
                f64::from(b)
                    + weights[local..local + shared_features]
                        .iter()
                        .zip(state_features)
                        .map(|(&w, &x)| f64::from(w) * f64::from(x))
                        .sum::<f64>()
            })
            .collect();
        let relu = self.net.first_is_hidden();
        // Without per-row fields the table row is the whole first layer: its
        // ReLU is applied once here rather than on every row.
        let relu_in_table = relu && !per_row_fields;
        let table = self
            .local_pre
            .chunks_exact(layer.outputs)
            .flat_map(|row| {
                row.iter().zip(&shared).map(move |(&l, &s)| {
                    let z = (l + s) as f32;
                    if relu_in_table { z.max(0.0) } else { z }
                })
            })
            .collect();
        let column = |k: usize| -> Vec<f32> {
            layer
                .weights
                .chunks_exact(layer.inputs)
                .map(|w| w[local + k])
                .collect()
        };
        let field_columns = per_row_fields.then(|| {
            let at = STATE_FEATURES - FIELD_FEATURES;
            [column(at), column(at + 1)]
        });
        FirstLayer {
            table,
            width: layer.outputs,
            field_columns,
            relu,
        }
    }
}

/// One model's first layer within one call.
#[derive(Debug)]
struct FirstLayer {
    /// Per local configuration: the first layer's output under the call's
    /// state (pre-activation without the field features when `field_columns`).
    table: Vec<f32>,
    width: usize,
    /// The columns of `W₁` for (VRAM fraction, utilisation) when each row has
    /// its own field.
    field_columns: Option<[Vec<f32>; 2]>,
    /// Whether ReLU follows the first layer (it is a hidden layer).
    relu: bool,
}

impl FirstLayer {
    /// Writes the first-layer output of rows in local configurations `configs`
    /// (with `fields[r]` for row r when the call has them) to `a[..rows × width]`.
    fn fill(
        &self,
        configs: impl Iterator<Item = usize>,
        fields: Option<&[[f32; 2]]>,
        a: &mut Vec<f32>,
        rows: usize,
    ) {
        let width = self.width;
        if a.len() < rows * width {
            a.resize(rows * width, 0.0);
        }
        let rows_out = a[..rows * width].chunks_exact_mut(width);
        match (&self.field_columns, fields) {
            (Some([vram, util]), Some(fields)) => {
                for ((row, c), &[v, u]) in rows_out.zip(configs).zip(fields) {
                    let pre = &self.table[c * width..(c + 1) * width];
                    for (((y, &p), &wv), &wu) in row.iter_mut().zip(pre).zip(vram).zip(util) {
                        let z = p + v * wv + u * wu;
                        *y = if self.relu { z.max(0.0) } else { z };
                    }
                }
            }
            _ => {
                for (row, c) in rows_out.zip(configs) {
                    row.copy_from_slice(&self.table[c * width..(c + 1) * width]);
                }
            }
        }
    }
}

/// Checks that `nets` holds one valid predictor per model with the model's input width.
pub fn check_nets(problem: &Problem, nets: &[FoldedNet]) -> Result<()> {
    check_nets_on(problem, nets, FieldFeatures::Observed)
}

/// As [`check_nets`], for nets whose field features follow the local ones
/// as `field` lays them out (`surrogate::features`).
pub fn check_nets_on(problem: &Problem, nets: &[FoldedNet], field: FieldFeatures) -> Result<()> {
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
        let want = local_len(model) + field.width();
        if net.input_len() != want {
            bail!(
                "predictor of model '{}' takes {} inputs but the model's feature layout has {want}",
                model.name,
                net.input_len()
            );
        }
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
    /// The backend for `problem`, with [`default_threads`] per joint call.
    pub fn new(problem: &Problem, nets: &[FoldedNet]) -> Result<Self> {
        check_nets(problem, nets)?;
        Ok(Self {
            problem: problem.clone(),
            space: problem.space(),
            models: problem
                .models
                .iter()
                .zip(nets)
                .map(|(model, net)| ModelNet::new(model, net))
                .collect(),
            threads: default_threads(),
        })
    }

    /// The joint space the backend decodes candidates in.
    pub fn space(&self) -> &JointSpace {
        &self.space
    }

    /// At most `threads` threads per joint call (at least one). Results do not
    /// depend on it.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The threads a joint call of `candidates` candidates uses: one per
    /// [`MIN_CANDIDATES_PER_THREAD`], at most the backend's threads
    /// ([`default_threads`], or [`CpuBackend::with_threads`]).
    pub fn threads_for(&self, candidates: usize) -> usize {
        (candidates / MIN_CANDIDATES_PER_THREAD).clamp(1, self.threads)
    }

    /// Every local configuration of every model under `state`: Σᵢ kᵢ values,
    /// model-major, in grid order (the `Predictor::predict_table` layout).
    pub fn predict_table(&self, state: &GpuState) -> Vec<f32> {
        let state_features = self.state_features(state);
        let mut out = Vec::with_capacity(self.models.iter().map(|m| m.local_pre.len()).sum());
        let mut scratch = Scratch::default();
        for model in &self.models {
            let first = model.first_layer(&state_features, false);
            let grid = first.table.len() / first.width;
            let start = out.len();
            out.resize(start + grid, 0.0);
            for (block_no, out) in out[start..].chunks_mut(BLOCK_ROWS).enumerate() {
                let from = block_no * BLOCK_ROWS;
                first.fill(from..from + out.len(), None, &mut scratch.a, out.len());
                model.net.finish_block(&mut scratch, out);
            }
        }
        out
    }

    /// N predictions per joint candidate, row-major: `out[c * N + i]`; an
    /// index outside the joint space is refused ([`InSpace::check`]).
    pub fn predict_joint(&self, state: &GpuState, candidates: &[u64]) -> Result<Vec<f32>> {
        let candidates = InSpace::check(self.space.size(), candidates)?;
        self.predict_joint_fields(state, candidates, None)
    }

    /// As [`CpuBackend::predict_joint`], with each candidate's own field when
    /// `fields` is given: `fields[c]` = (VRAM used / card VRAM, utilisation)
    /// replaces the state's two continuous features for candidate c (the
    /// workload stays the state's). See `surrogate::field`.
    pub fn predict_joint_fields(
        &self,
        state: &GpuState,
        candidates: InSpace<'_>,
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>> {
        let candidates: &[u64] = &candidates;
        check_fields(candidates, fields)?;
        let n = self.models.len();
        let mut out = vec![0.0; candidates.len() * n];
        if out.is_empty() {
            return Ok(out);
        }
        let state_features = self.state_features(state);
        let firsts: Vec<FirstLayer> = self
            .models
            .iter()
            .map(|m| m.first_layer(&state_features, fields.is_some()))
            .collect();
        let firsts = &firsts;
        let blocks = candidates.len().div_ceil(BLOCK_ROWS);
        // Whole blocks per thread: the blocks are the same for any thread count.
        let per_thread = blocks.div_ceil(self.threads_for(candidates.len())) * BLOCK_ROWS;
        std::thread::scope(|scope| {
            let mut jobs = candidates
                .chunks(per_thread)
                .zip(out.chunks_mut(per_thread * n))
                .enumerate()
                .map(|(t, (candidates, out))| {
                    let fields =
                        fields.map(|f| &f[t * per_thread..t * per_thread + candidates.len()]);
                    (candidates, fields, out)
                });
            // The calling thread takes the first share rather than waiting idle.
            let mine = jobs.next();
            for (candidates, fields, out) in jobs {
                scope.spawn(move || self.joint_share(firsts, candidates, fields, out));
            }
            if let Some((candidates, fields, out)) = mine {
                self.joint_share(firsts, candidates, fields, out);
            }
        });
        Ok(out)
    }

    /// One thread's share of a joint call, block by block: decode the block's
    /// candidates once, then each model's rows through its net.
    fn joint_share(
        &self,
        firsts: &[FirstLayer],
        candidates: &[u64],
        fields: Option<&[[f32; 2]]>,
        out: &mut [f32],
    ) {
        let n = self.models.len();
        let block_len = candidates.len().min(BLOCK_ROWS);
        let mut digits = vec![0u32; block_len * n];
        let mut y = vec![0.0; block_len];
        let mut scratch = Scratch::default();
        for (block_no, (block, out)) in candidates
            .chunks(BLOCK_ROWS)
            .zip(out.chunks_mut(BLOCK_ROWS * n))
            .enumerate()
        {
            let rows = block.len();
            for (&c, d) in block.iter().zip(digits.chunks_exact_mut(n)) {
                self.space.decode(c, d);
            }
            let fields = fields.map(|f| &f[block_no * BLOCK_ROWS..block_no * BLOCK_ROWS + rows]);
            for (i, (model, first)) in self.models.iter().zip(firsts).enumerate() {
                let configs = digits[..rows * n]
                    .iter()
                    .skip(i)
                    .step_by(n)
                    .map(|&d| d as usize);
                first.fill(configs, fields, &mut scratch.a, rows);
                model.net.finish_block(&mut scratch, &mut y[..rows]);
                for (row, &v) in out.chunks_exact_mut(n).zip(&y[..rows]) {
                    row[i] = v;
                }
            }
        }
    }

    fn state_features(&self, state: &GpuState) -> Vec<f32> {
        let mut v = Vec::new();
        push_state(&self.problem, state, &mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agreement::{TOLERANCE, check_states};
    use crate::features::input_row;
    use crate::synthetic::synthetic_nets_with;
    use mfsched_core::WorkloadLevel;
    use mfsched_core::load_scenario;
    use mfsched_core::table_offsets;
    use mfsched_rng::Rng;

    /// The scalar reference the GEMM path is held to: one row at a time, every
    /// layer `b + Σ w·x` in f64, ReLU between layers, sigmoid, the output map.
    fn reference(net: &FoldedNet, row: &[f32]) -> f64 {
        let mut x: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        let last = net.layers.len() - 1;
        for (i, layer) in net.layers.iter().enumerate() {
            x = layer
                .weights
                .chunks_exact(layer.inputs)
                .zip(&layer.bias)
                .map(|(w, &b)| {
                    let z = f64::from(b)
                        + w.iter()
                            .zip(&x)
                            .map(|(&w, &x)| f64::from(w) * x)
                            .sum::<f64>();
                    if i < last { z.max(0.0) } else { z }
                })
                .collect();
        }
        f64::from(net.out_offset) + f64::from(net.out_scale) / (1.0 + (-x[0]).exp())
    }

    /// |got − want| on the normalised (σ) scale, the agreement gate's quantity.
    fn assert_agrees(net: &FoldedNet, got: f32, want: f64, what: &str) {
        let normalised = (f64::from(got) - want).abs() / f64::from(net.out_scale);
        assert!(
            normalised <= TOLERANCE,
            "{what}: {got} vs {want} ({normalised:.2e})"
        );
    }

    /// Hidden widths that hit every remainder of the GEMM's tiles and of the
    /// head's eight-lane dot product, a one-layer net (no hidden layer) and the
    /// published 64-32.
    const HIDDEN: [&[usize]; 5] = [&[64, 32], &[7, 5], &[1], &[64, 33, 3], &[]];

    #[test]
    fn predict_into_matches_the_scalar_reference_for_every_batch_remainder() {
        let problem = load_scenario("paper-n3").expect("bundled").problem;
        let mut rng = Rng::new(5);
        let mut sizes: Vec<usize> = (1..=40).collect();
        sizes.extend([
            BLOCK_ROWS - 1,
            BLOCK_ROWS,
            BLOCK_ROWS + 1,
            2 * BLOCK_ROWS + 17,
        ]);
        for hidden in HIDDEN {
            let net = &synthetic_nets_with(&problem, 3, hidden)[0];
            let width = net.input_len();
            for &rows in &sizes {
                let x: Vec<f32> = (0..rows * width)
                    .map(|_| (3.0 * rng.next_f64() - 1.0) as f32)
                    .collect();
                let got = net.predict(&x);
                assert_eq!(got.len(), rows);
                for (r, (&y, row)) in got.iter().zip(x.chunks_exact(width)).enumerate() {
                    let what = format!("hidden {hidden:?}, {rows} rows, row {r}");
                    assert_agrees(net, y, reference(net, row), &what);
                }
                // A row's value does not depend on the batch around it.
                let last = &x[(rows - 1) * width..];
                assert_eq!(
                    net.predict(last)[0],
                    got[rows - 1],
                    "hidden {hidden:?}, {rows} rows"
                );
            }
        }
    }

    #[test]
    fn table_and_joint_match_the_scalar_reference_on_any_thread_count() {
        let problem = load_scenario("paper-n5").expect("bundled").problem;
        let space = problem.space();
        let n = problem.models.len();
        let mut rng = Rng::new(9);
        // Six blocks and a partial one: enough for three threads, whole blocks each.
        let count = 6 * BLOCK_ROWS + 37;
        let candidates: Vec<u64> = (0..count).map(|_| rng.below(space.size())).collect();
        let checked = InSpace::check(space.size(), &candidates).expect("in range");
        let fields: Vec<[f32; 2]> = (0..count)
            .map(|_| [rng.next_f64() as f32, rng.next_f64() as f32])
            .collect();
        let state = check_states(&problem)[WorkloadLevel::High.ordinal()];
        let offsets = table_offsets(&problem);
        for hidden in HIDDEN {
            let nets = synthetic_nets_with(&problem, 7, hidden);
            let one = CpuBackend::new(&problem, &nets)
                .expect("fits")
                .with_threads(1);
            let table = one.predict_table(&state);
            for (i, net) in nets.iter().enumerate() {
                for c in 0..problem.models[i].grid_size() {
                    let row = input_row(&problem, i, c, &state);
                    let what = format!("hidden {hidden:?}, table, model {i}, config {c}");
                    assert_agrees(net, table[offsets[i] + c], reference(net, &row), &what);
                }
            }
            for per_candidate in [None, Some(&fields[..])] {
                let single = one
                    .predict_joint_fields(&state, checked, per_candidate)
                    .expect("in range");
                for threads in [2, 3] {
                    let many = one.clone().with_threads(threads);
                    assert_eq!(many.threads_for(count), threads);
                    let got = many
                        .predict_joint_fields(&state, checked, per_candidate)
                        .expect("in range");
                    assert_eq!(got, single, "hidden {hidden:?}, {threads} threads");
                }
                let mut digits = vec![0; n];
                for (k, &c) in candidates.iter().enumerate() {
                    space.decode(c, &mut digits);
                    if per_candidate.is_none() {
                        // Bit for bit the table's values: a policy choosing from
                        // the table is validated on a joint prediction.
                        for (i, &d) in digits.iter().enumerate() {
                            assert_eq!(single[k * n + i], table[offsets[i] + d as usize]);
                        }
                    }
                    for (i, net) in nets.iter().enumerate() {
                        let mut row = input_row(&problem, i, digits[i] as usize, &state);
                        if let Some(fields) = per_candidate {
                            let at = row.len() - FIELD_FEATURES;
                            row[at..].copy_from_slice(&fields[k]);
                        }
                        let what = format!("hidden {hidden:?}, candidate {k}, model {i}");
                        assert_agrees(net, single[k * n + i], reference(net, &row), &what);
                    }
                }
                // A candidate's values do not depend on the batch it came in.
                let (from, to) = (BLOCK_ROWS + 3, BLOCK_ROWS + 9);
                let alone = one
                    .predict_joint_fields(
                        &state,
                        InSpace::check(space.size(), &candidates[from..to]).expect("in range"),
                        per_candidate.map(|f| &f[from..to]),
                    )
                    .expect("in range");
                assert_eq!(alone, single[from * n..to * n], "hidden {hidden:?}");
            }
        }
    }
}
