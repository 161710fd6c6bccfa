//! A trained MLP in the layout PyTorch would give it.
//!
//! `nn.Sequential(Linear, BatchNorm1d, ReLU, Dropout, …, Linear, Sigmoid)`: the
//! parameters keep PyTorch's shapes and meanings (weights `[out][in]`, BatchNorm
//! `weight`/`bias`/`running_mean`/`running_var` with biased batch statistics in the
//! forward pass and unbiased ones in the running variance), so a net trained
//! there can be loaded here and the other way round. Around the sequential part
//! sit an input standardisation and the map from the sigmoid's (0, 1) back to the
//! target's own unit.

use crate::kernels::dense_forward;

/// A dense layer, `weight` row-major `[outputs][inputs]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    pub inputs: usize,
    pub outputs: usize,
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

/// BatchNorm1d parameters and running statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNorm {
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub running_mean: Vec<f32>,
    pub running_var: Vec<f32>,
    /// Training batches seen (PyTorch's `num_batches_tracked`).
    pub batches_tracked: u64,
    pub eps: f32,
}

impl BatchNorm {
    /// Per-feature eval-mode map `y = scale · z + shift`.
    pub fn eval_affine(&self) -> (Vec<f32>, Vec<f32>) {
        let scale: Vec<f32> = self
            .gamma
            .iter()
            .zip(&self.running_var)
            .map(|(g, v)| g / (v + self.eps).sqrt())
            .collect();
        let shift = self
            .beta
            .iter()
            .zip(&self.running_mean)
            .zip(&scale)
            .map(|((b, m), s)| b - m * s)
            .collect();
        (scale, shift)
    }
}

/// Linear → BatchNorm → ReLU (→ Dropout while training).
#[derive(Debug, Clone, PartialEq)]
pub struct Hidden {
    pub linear: Linear,
    pub norm: BatchNorm,
}

/// Input standardisation `(x − mean) / std`, per feature.
#[derive(Debug, Clone, PartialEq)]
pub struct Standardize {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

/// The target in its own unit is `offset + scale · sigmoid output`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetScale {
    pub offset: f32,
    pub scale: f32,
}

impl TargetScale {
    /// Maps the observed target range into (0, 1) with a 10 % margin on each side
    /// so the sigmoid never has to saturate to reach an observed value; a
    /// non-negative target keeps a non-negative offset (throughput is never < 0).
    pub fn fit(y: &[f32]) -> Self {
        let lo = y.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = y.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut range = hi - lo;
        if range <= f32::EPSILON * hi.abs().max(1.0) {
            range = hi.abs().max(1.0);
        }
        let mut offset = lo - 0.1 * range;
        if lo >= 0.0 && offset < 0.0 {
            offset = 0.0;
        }
        let top = hi + 0.1 * range;
        Self {
            offset,
            scale: top - offset,
        }
    }

    pub fn normalise(&self, y: f32) -> f32 {
        (y - self.offset) / self.scale
    }

    pub fn denormalise(&self, s: f32) -> f32 {
        self.offset + self.scale * s
    }
}

/// A trained network: standardise → hidden layers → head → sigmoid → target unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    pub input: Standardize,
    pub hidden: Vec<Hidden>,
    /// The output layer (one output).
    pub head: Linear,
    pub target: TargetScale,
}

pub fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

impl Mlp {
    pub fn input_len(&self) -> usize {
        self.input.mean.len()
    }

    /// Eval-mode forward pass (running BatchNorm statistics, no dropout) over
    /// `x.len() / input_len` rows; predictions in the target's unit. This is the
    /// unfolded reference the folded inference form is checked against.
    pub fn predict(&self, x: &[f32]) -> Vec<f32> {
        self.logits(x)
            .into_iter()
            .map(|z| self.target.denormalise(sigmoid(z)))
            .collect()
    }

    /// The eval-mode forward pass up to the head's output, before the sigmoid.
    pub fn logits(&self, x: &[f32]) -> Vec<f32> {
        let width = self.input_len();
        let rows = x.len() / width.max(1);
        let mut act: Vec<f32> = x[..rows * width]
            .chunks_exact(width)
            .flat_map(|r| {
                r.iter()
                    .zip(&self.input.mean)
                    .zip(&self.input.std)
                    .map(|((v, m), s)| (v - m) / s)
            })
            .collect();
        let mut inputs = width;
        for layer in &self.hidden {
            let outputs = layer.linear.outputs;
            let mut z = vec![0.0; rows * outputs];
            dense_forward(
                &act,
                &layer.linear.weight,
                &layer.linear.bias,
                inputs,
                &mut z,
            );
            let n = &layer.norm;
            for row in z.chunks_exact_mut(outputs) {
                for (j, v) in row.iter_mut().enumerate() {
                    let xhat = (*v - n.running_mean[j]) / (n.running_var[j] + n.eps).sqrt();
                    *v = (n.gamma[j] * xhat + n.beta[j]).max(0.0);
                }
            }
            act = z;
            inputs = outputs;
        }
        let mut out = vec![0.0; rows];
        dense_forward(&act, &self.head.weight, &self.head.bias, inputs, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_scale_keeps_observed_values_inside_the_sigmoid_range() {
        let t = TargetScale::fit(&[10.0, 30.0, 20.0]);
        assert!((t.offset - 8.0).abs() < 1e-6 && (t.scale - 24.0).abs() < 1e-5);
        for y in [10.0, 20.0, 30.0] {
            let s = t.normalise(y);
            assert!(s > 0.0 && s < 1.0);
            assert!((t.denormalise(s) - y).abs() < 1e-5);
        }
        // Non-negative targets never map below zero; a constant target still scales.
        assert_eq!(TargetScale::fit(&[0.5, 100.0]).offset, 0.0);
        let c = TargetScale::fit(&[5.0, 5.0]);
        assert!(c.scale > 0.0 && c.normalise(5.0) > 0.0 && c.normalise(5.0) < 1.0);
    }
}
