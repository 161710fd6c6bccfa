//! The inference form of a MeanField predictor and its CPU arithmetic.
//!
//! Training (64-32 MLP with BatchNorm, ReLU, Dropout 0.1, sigmoid output) folds
//! into this: input standardisation and BatchNorm become part of the dense layers,
//! dropout vanishes at inference. What remains is
//! `y = out_offset + out_scale · σ(W₃ · relu(W₂ · relu(W₁ x + b₁) + b₂) + b₃)`.
//!
//! The CPU arithmetic runs blocks of at most [`BLOCK_ROWS`] rows. The first layer's
//! output comes from a GEMM of the inputs ([`FoldedNet::predict_into`]) or, in
//! `crate::cpu`, from per-configuration pre-activations; every later hidden layer
//! is a GEMM (`matrixmultiply`'s sgemm, through `ndarray`'s safe
//! `general_mat_mul`) writing column-major, and the one-output head runs down
//! the last GEMM's columns (a dot product per row when the first layer feeds it).
//!
//! Why `matrixmultiply` (bluss, through `ndarray`): on this workload (blocks of
//! 1,024 rows × 64 · 64 × 32, the head after it, one core of a Xeon with AVX-512)
//! it gave 10.2 M rows/s with its AVX2 kernel and 11.1 M with its AVX-512 one,
//! the `gemm` crate 10.9 M; with the GEMM writing column-major and the head run
//! down the columns, matrixmultiply gave 12.1 M (AVX2) and 14.3 M (AVX-512).
//! Raw speed is close; what decides is that matrixmultiply has one microkernel for
//! every matrix size, edge tiles computed by the same kernel into a buffer, so
//! a row's value depends neither on the block it is in nor on its place there
//! (a one-candidate joint call gives the table's bits, which validation relies
//! on), while `gemm` takes other paths by size (a GEMV for one row). `ndarray`
//! is its safe face (the workspace denies `unsafe`) and adds no copy: the views
//! below have the strides sgemm takes directly.

use mfsched_nn::kernels::dot;
use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder as _};
use serde::{Deserialize, Serialize};

/// Rows per block: one block's activations (1024 × 64 × 4 B = 256 KiB for the
/// first hidden layer) stay in a core's L2 cache between the layers, and a GEMM
/// of this many rows amortises its packing of the weights (256 and 4,096 rows
/// measured within 5 % of it). Blocks are fixed slices of a call's rows, so no
/// result depends on how they are shared out.
pub const BLOCK_ROWS: usize = 1024;

/// A dense layer, weights row-major `[outputs][inputs]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseLayer {
    pub inputs: usize,
    pub outputs: usize,
    pub weights: Vec<f32>,
    pub bias: Vec<f32>,
}

/// How a block's activations (`rows × units`) lie in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// A row's units together: how the first layer's output is gathered.
    RowMajor,
    /// A unit's rows together: how every GEMM writes, so bias, ReLU and the
    /// head run down contiguous columns.
    ColumnMajor,
}

impl DenseLayer {
    /// `out[r][o] = Σ_k w[o][k] · x[r][k]` (no bias) for `rows` rows, by sgemm:
    /// `x` is `rows × inputs` in `x_layout`, the weights read with swapped
    /// strides are `Wᵀ`, and `out` is written in `out_layout`. It only grows,
    /// so a block reuses it.
    fn matmul(
        &self,
        x: &[f32],
        x_layout: Layout,
        rows: usize,
        out: &mut Vec<f32>,
        out_layout: Layout,
    ) {
        let len = rows * self.outputs;
        if out.len() < len {
            out.resize(len, 0.0);
        }
        let column_major = |layout| layout == Layout::ColumnMajor;
        // The shapes hold by construction: `FoldedNet::validate` checked the
        // weights and the callers size `x`.
        let x = ArrayView2::from_shape(
            (rows, self.inputs).set_f(column_major(x_layout)),
            &x[..rows * self.inputs],
        )
        .expect("x holds rows × inputs values");
        let w = ArrayView2::from_shape((self.outputs, self.inputs), &self.weights)
            .expect("validated weights");
        let mut y = ArrayViewMut2::from_shape(
            (rows, self.outputs).set_f(column_major(out_layout)),
            &mut out[..len],
        )
        .expect("sized above");
        general_mat_mul(1.0, &x, &w.t(), 0.0, &mut y);
    }
}

/// A folded predictor: ReLU between layers, sigmoid after the last (one output),
/// then the affine map back to the model's throughput unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldedNet {
    pub layers: Vec<DenseLayer>,
    pub out_offset: f32,
    pub out_scale: f32,
}

/// Scratch buffers for [`FoldedNet::predict_into`] and the CPU backend, reusable
/// across calls: `a` holds a block's first-layer output, `b` the next layer's.
#[derive(Debug, Default)]
pub struct Scratch {
    pub(crate) a: Vec<f32>,
    b: Vec<f32>,
}

impl FoldedNet {
    pub fn input_len(&self) -> usize {
        self.layers.first().map_or(0, |l| l.inputs)
    }

    /// Checks that layer shapes chain and end in one output.
    pub fn validate(&self) -> Result<(), String> {
        if self.layers.is_empty() {
            return Err("no layers".into());
        }
        for (i, l) in self.layers.iter().enumerate() {
            if l.weights.len() != l.inputs * l.outputs || l.bias.len() != l.outputs {
                return Err(format!(
                    "layer {i}: expected {}×{} weights and {} biases, found {} and {}",
                    l.outputs,
                    l.inputs,
                    l.outputs,
                    l.weights.len(),
                    l.bias.len()
                ));
            }
            if i > 0 && self.layers[i - 1].outputs != l.inputs {
                return Err(format!(
                    "layer {i} takes {} inputs but layer {} gives {}",
                    l.inputs,
                    i - 1,
                    self.layers[i - 1].outputs
                ));
            }
            if l.weights.iter().chain(&l.bias).any(|v| !v.is_finite()) {
                return Err(format!("layer {i} has non-finite parameters"));
            }
        }
        if self.layers.last().is_some_and(|l| l.outputs != 1) {
            return Err("the last layer must have one output".into());
        }
        Ok(())
    }

    /// Whether the first layer is a hidden one (ReLU after it), rather than the
    /// head of a one-layer net.
    pub(crate) fn first_is_hidden(&self) -> bool {
        self.layers.len() > 1
    }

    /// Predicts a batch: `x` holds `rows × input_len` values; results are appended to `out`.
    pub fn predict_into(&self, x: &[f32], scratch: &mut Scratch, out: &mut Vec<f32>) {
        let inputs = self.input_len().max(1);
        let rows = x.len() / inputs;
        let start = out.len();
        out.resize(start + rows, 0.0);
        let first = &self.layers[0];
        let relu = self.first_is_hidden();
        for (x, out) in x[..rows * inputs]
            .chunks(BLOCK_ROWS * inputs)
            .zip(out[start..].chunks_mut(BLOCK_ROWS))
        {
            let a = &mut scratch.a;
            first.matmul(x, Layout::RowMajor, out.len(), a, Layout::RowMajor);
            for row in a[..out.len() * first.outputs].chunks_exact_mut(first.outputs) {
                for (v, b) in row.iter_mut().zip(&first.bias) {
                    *v += b;
                    if relu {
                        *v = v.max(0.0);
                    }
                }
            }
            self.finish_block(scratch, out);
        }
    }

    /// The rest of the net for one block of `out.len()` rows whose first-layer
    /// output is in `scratch.a`, row-major (`rows × layers[0].outputs`: after its
    /// ReLU when the first layer is hidden, else the head's pre-sigmoid value).
    pub(crate) fn finish_block(&self, scratch: &mut Scratch, out: &mut [f32]) {
        let rows = out.len();
        let Scratch { a, b } = scratch;
        let (head, hidden) = self
            .layers
            .split_last()
            .expect("validated: one layer at least");
        // The hidden layers after the first: a GEMM each into `b` (then swapped
        // into `a`), its bias and ReLU applied when the next layer reads it.
        let mut layout = Layout::RowMajor;
        let mut pending: Option<&DenseLayer> = None;
        for layer in hidden.iter().skip(1) {
            if let Some(previous) = pending {
                for (column, &bias) in a.chunks_exact_mut(rows).zip(&previous.bias) {
                    column.iter_mut().for_each(|v| *v = (*v + bias).max(0.0));
                }
            }
            layer.matmul(a, layout, rows, b, Layout::ColumnMajor);
            std::mem::swap(a, b);
            layout = Layout::ColumnMajor;
            pending = Some(layer);
        }
        match pending {
            // Down the columns of the last GEMM, its bias and ReLU folded in.
            Some(previous) => {
                out.fill(head.bias[0]);
                for ((column, &w), &bias) in
                    a.chunks_exact(rows).zip(&head.weights).zip(&previous.bias)
                {
                    for (y, &h) in out.iter_mut().zip(column) {
                        *y += w * (h + bias).max(0.0);
                    }
                }
            }
            // The first layer feeds the head: a dot product per row.
            None if !hidden.is_empty() => {
                let width = head.inputs;
                for (y, h) in out.iter_mut().zip(a[..rows * width].chunks_exact(width)) {
                    *y = head.bias[0] + dot(&head.weights, h);
                }
            }
            // The first layer is the head.
            None => out.copy_from_slice(&a[..rows]),
        }
        for y in out.iter_mut() {
            *y = self.out_offset + self.out_scale * sigmoid(*y);
        }
    }

    pub fn predict(&self, x: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(x.len() / self.input_len().max(1));
        self.predict_into(x, &mut Scratch::default(), &mut out);
        out
    }
}

pub fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_layer_net_by_hand() {
        let net = FoldedNet {
            layers: vec![
                DenseLayer {
                    inputs: 2,
                    outputs: 2,
                    weights: vec![1.0, -1.0, 0.5, 0.5],
                    bias: vec![0.0, -1.0],
                },
                DenseLayer {
                    inputs: 2,
                    outputs: 1,
                    weights: vec![2.0, 1.0],
                    bias: vec![0.25],
                },
            ],
            out_offset: 10.0,
            out_scale: 100.0,
        };
        net.validate().expect("valid");
        // Row 1: h = relu([3-1, 0.5*4-1]) = [2, 1]; z = 4+1+0.25.
        // Row 2: h = relu([-2, -0.5]) = [0, 0]; z = 0.25.
        let y = net.predict(&[3.0, 1.0, 0.0, 2.0]);
        assert_eq!(y.len(), 2);
        assert!((y[0] - (10.0 + 100.0 * sigmoid(5.25))).abs() < 1e-4);
        assert!((y[1] - (10.0 + 100.0 * sigmoid(0.25))).abs() < 1e-4);
    }

    #[test]
    fn shape_errors_are_reported() {
        let net = FoldedNet {
            layers: vec![DenseLayer {
                inputs: 3,
                outputs: 1,
                weights: vec![1.0, 2.0],
                bias: vec![0.0],
            }],
            out_offset: 0.0,
            out_scale: 1.0,
        };
        assert!(net.validate().expect_err("bad shape").contains("layer 0"));
    }
}
