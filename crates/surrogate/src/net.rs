//! The inference form of a MeanField predictor and the CPU reference path.
//!
//! Training (64-32 MLP with BatchNorm, ReLU, Dropout 0.1, sigmoid output) folds
//! into this: input standardisation and BatchNorm become part of the dense layers,
//! dropout vanishes at inference. What remains is
//! `y = out_offset + out_scale · σ(W₃ · relu(W₂ · relu(W₁ x + b₁) + b₂) + b₃)`.

use mfsched_nn::kernels::dense_forward;
use serde::{Deserialize, Serialize};

/// A dense layer, weights row-major `[outputs][inputs]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseLayer {
    pub inputs: usize,
    pub outputs: usize,
    pub weights: Vec<f32>,
    pub bias: Vec<f32>,
}

impl DenseLayer {
    /// `out[r][o] = bias[o] + Σ_k w[o][k] · x[r][k]` for a batch of rows.
    /// Row-outer, output-middle, input-inner over contiguous slices; the dot
    /// product keeps eight partial sums so it vectorises (see
    /// `mfsched_nn::kernels`). `out` is reused, never reallocated per row.
    fn forward(&self, x: &[f32], rows: usize, relu: bool, out: &mut Vec<f32>) {
        out.clear();
        out.resize(rows * self.outputs, 0.0);
        dense_forward(
            &x[..rows * self.inputs],
            &self.weights,
            &self.bias,
            self.inputs,
            out,
        );
        if relu {
            out.iter_mut().for_each(|v| *v = v.max(0.0));
        }
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

/// Scratch buffers for [`FoldedNet::predict_into`], reusable across calls.
#[derive(Debug, Default)]
pub struct Scratch {
    a: Vec<f32>,
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

    /// Predicts a batch: `x` holds `rows × input_len` values; results are appended to `out`.
    pub fn predict_into(&self, x: &[f32], scratch: &mut Scratch, out: &mut Vec<f32>) {
        let rows = x.len() / self.input_len().max(1);
        let last = self.layers.len() - 1;
        // Ping-pong between two scratch buffers: layer i reads the previous
        // layer's output (or `x`) and writes the other buffer.
        let Scratch { a, b } = scratch;
        for (i, layer) in self.layers.iter().enumerate() {
            let relu = i != last;
            match i {
                0 => layer.forward(x, rows, relu, a),
                _ if i % 2 == 1 => layer.forward(a, rows, relu, b),
                _ => layer.forward(b, rows, relu, a),
            }
        }
        let result = if last.is_multiple_of(2) { &*a } else { &*b };
        out.extend(
            result
                .iter()
                .map(|&z| self.out_offset + self.out_scale * sigmoid(z)),
        );
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
