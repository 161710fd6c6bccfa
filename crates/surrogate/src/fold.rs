//! Folding a trained [`Mlp`] into the inference form [`FoldedNet`].
//!
//! In eval mode BatchNorm is a per-unit affine map `s ⊙ z + t` with
//! `s = γ / √(running_var + ε)` and `t = β − running_mean · s`, and input
//! standardisation is the affine map `(x − μ) / σ`. Both merge into the dense
//! layer next to them:
//!
//! - first layer: `W' = diag(s) · W · diag(1/σ)`, `b' = s ⊙ (b − W · (μ/σ)) + t`;
//! - later hidden layers: `W' = diag(s) · W`, `b' = s ⊙ b + t`;
//! - the head is unchanged; the target scale becomes the output affine map.
//!
//! Dropout is the identity at inference. The products are formed in f64 so the
//! folded net agrees with the unfolded eval forward to float rounding.

use super::net::{DenseLayer, FoldedNet};
use mfsched_nn::{Linear, Mlp};

pub fn fold(mlp: &Mlp) -> FoldedNet {
    let mut layers = Vec::with_capacity(mlp.hidden.len() + 1);
    for (l, hidden) in mlp.hidden.iter().enumerate() {
        let (scale, shift) = hidden.norm.eval_affine();
        let lin = &hidden.linear;
        // Per-input multiplier and the constant the input shift contributes.
        let (in_mul, in_shift): (Vec<f64>, Vec<f64>) = if l == 0 {
            mlp.input
                .mean
                .iter()
                .zip(&mlp.input.std)
                .map(|(&m, &s)| (1.0 / f64::from(s), f64::from(m) / f64::from(s)))
                .unzip()
        } else {
            (vec![1.0; lin.inputs], vec![0.0; lin.inputs])
        };
        let mut weights = Vec::with_capacity(lin.weight.len());
        let mut bias = Vec::with_capacity(lin.outputs);
        for (o, row) in lin.weight.chunks_exact(lin.inputs).enumerate() {
            let s = f64::from(scale[o]);
            let mut b = f64::from(lin.bias[o]);
            for ((&w, &mul), &shift_in) in row.iter().zip(&in_mul).zip(&in_shift) {
                weights.push((s * f64::from(w) * mul) as f32);
                b -= f64::from(w) * shift_in;
            }
            bias.push((s * b + f64::from(shift[o])) as f32);
        }
        layers.push(DenseLayer {
            inputs: lin.inputs,
            outputs: lin.outputs,
            weights,
            bias,
        });
    }
    layers.push(dense(&mlp.head));
    FoldedNet {
        layers,
        out_offset: mlp.target.offset,
        out_scale: mlp.target.scale,
    }
}

fn dense(lin: &Linear) -> DenseLayer {
    DenseLayer {
        inputs: lin.inputs,
        outputs: lin.outputs,
        weights: lin.weight.clone(),
        bias: lin.bias.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_nn::{TrainConfig, train};
    use mfsched_rng::Rng;

    #[test]
    fn folded_output_equals_the_eval_mode_training_forward() {
        // A smooth function of mixed one-hot and continuous inputs with a
        // deliberately non-zero mean and scale so standardisation matters.
        let mut rng = Rng::new(11);
        let width = 5;
        let mut x = Vec::new();
        let mut y = Vec::new();
        for _ in 0..120 {
            let v = rng.below(2) as f32;
            let a = 3.0 + 2.0 * rng.next_f64() as f32;
            let b = 100.0 * rng.next_f64() as f32;
            let c = rng.next_f64() as f32;
            x.extend([v, 1.0 - v, a, b, c]);
            y.push(200.0 + 40.0 * v + 10.0 * a - 0.5 * b + 30.0 * (3.0 * c).sin());
        }
        let config = TrainConfig {
            epochs: 40,
            ..TrainConfig::default()
        };
        let mlp = train(&x, &y, width, &config, 3, &mut |_| {}).expect("trains");
        let folded = fold(&mlp);
        folded.validate().expect("well-formed");
        let reference = mlp.predict(&x);
        let got = folded.predict(&x);
        assert_eq!(got.len(), reference.len());
        let max_rel = got
            .iter()
            .zip(&reference)
            .map(|(g, r)| ((g - r) / r.abs().max(1.0)).abs())
            .fold(0.0f32, f32::max);
        // Both sides land in the target unit (hundreds): compare relative to it.
        assert!(max_rel < 1e-5, "max relative difference {max_rel}");
        // And on the normalised (sigmoid) scale, where 1e-5 is absolute.
        let max_abs_sigmoid = got
            .iter()
            .zip(&reference)
            .map(|(g, r)| ((g - r) / mlp.target.scale).abs())
            .fold(0.0f32, f32::max);
        assert!(max_abs_sigmoid < 1e-5, "{max_abs_sigmoid}");
    }
}
