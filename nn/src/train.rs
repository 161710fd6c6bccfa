//! The training loop: mini-batch Adam on the mean squared error of the sigmoid
//! output against the normalised target, with manual backpropagation.
//!
//! Everything random comes from three independent streams of the seeded RNG
//! (initialisation, epoch shuffles, dropout masks), and every loop has a fixed
//! order, so the same data, configuration and seed give bit-identical weights.

use crate::kernels::{axpy, dense_forward};
use crate::mlp::{BatchNorm, Hidden, Linear, Mlp, Standardize, TargetScale, sigmoid};
use crate::ridge::{RIDGE_PER_ROW, Ridge};
use mfsched_rng::Rng;

/// Hyper-parameters. The defaults are the published architecture (64-32,
/// Dropout 0.1) with PyTorch's defaults where the paper is silent, and a
/// linear skip, which the paper does not have ([`TrainConfig::published`] is
/// without it): on Gavel's measured pairs it kept MeanField at or above a
/// linear model of its inputs at every training budget (docs/model-bundle.md).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    /// Widths of the hidden (Linear → BatchNorm → ReLU → Dropout) blocks.
    pub hidden: Vec<usize>,
    pub dropout: f32,
    pub epochs: usize,
    pub batch_size: usize,
    pub learning_rate: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub adam_eps: f32,
    /// BatchNorm running-statistics momentum (PyTorch's convention: weight of the new batch).
    pub bn_momentum: f32,
    pub bn_eps: f32,
    /// Learn the logit as a ridge model of the inputs plus the MLP on its
    /// residual, the MLP's share chosen on held-out rows (see
    /// [`fit_with_linear_skip`]): two units of every hidden layer carry the
    /// linear part, so the trained net keeps the widths and the form of one
    /// without it.
    pub linear_skip: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            hidden: vec![64, 32],
            dropout: 0.1,
            epochs: 300,
            batch_size: 32,
            learning_rate: 3e-3,
            beta1: 0.9,
            beta2: 0.999,
            adam_eps: 1e-8,
            bn_momentum: 0.1,
            bn_eps: 1e-5,
            linear_skip: true,
        }
    }
}

impl TrainConfig {
    /// The published architecture alone (no linear skip): what the shipped
    /// bundles and the reproduced tables are trained with.
    pub fn published() -> Self {
        Self {
            linear_skip: false,
            ..Self::default()
        }
    }
}

/// Why training could not start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrainError {
    #[error("need at least 2 training rows (BatchNorm needs a batch variance), got {0}")]
    TooFewRows(usize),
    #[error("{values} input values do not make whole rows of width {width} for {rows} targets")]
    Shape {
        values: usize,
        width: usize,
        rows: usize,
    },
    #[error("row {row} has a non-finite input or target")]
    NonFinite { row: usize },
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// What a linear skip chose on the training rows (see [`fit_with_linear_skip`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SkipChoice {
    /// The ridge penalty per row of the linear part.
    pub penalty: f64,
    /// The MLP's weight over the linear part, in [0, 1].
    pub mlp_weight: f32,
}

/// Trains one network on `rows = y.len()` rows of `width` inputs (`x` row-major).
/// `on_epoch` is called after every epoch with the number of epochs done.
pub fn train(
    x: &[f32],
    y: &[f32],
    width: usize,
    config: &TrainConfig,
    seed: u64,
    on_epoch: &mut dyn FnMut(usize),
) -> Result<Mlp, TrainError> {
    train_explained(x, y, width, config, seed, on_epoch).map(|(net, _)| net)
}

/// [`train`], with what the linear skip chose where it is on.
pub fn train_explained(
    x: &[f32],
    y: &[f32],
    width: usize,
    config: &TrainConfig,
    seed: u64,
    on_epoch: &mut dyn FnMut(usize),
) -> Result<(Mlp, Option<SkipChoice>), TrainError> {
    let rows = y.len();
    if width == 0 || x.len() != rows * width {
        return Err(TrainError::Shape {
            values: x.len(),
            width,
            rows,
        });
    }
    if rows < 2 {
        return Err(TrainError::TooFewRows(rows));
    }
    if let Some(row) = (0..rows).find(|&r| {
        !y[r].is_finite() || x[r * width..(r + 1) * width].iter().any(|v| !v.is_finite())
    }) {
        return Err(TrainError::NonFinite { row });
    }
    if config.batch_size < 2 || config.hidden.contains(&0) || !(0.0..1.0).contains(&config.dropout)
    {
        return Err(TrainError::Config(format!(
            "batch size must be ≥ 2, hidden widths > 0 and dropout in [0, 1) (got {}, {:?}, {})",
            config.batch_size, config.hidden, config.dropout
        )));
    }

    let input = fit_standardize(x, width);
    let xs: Vec<f32> = x
        .chunks_exact(width)
        .flat_map(|r| {
            r.iter()
                .zip(&input.mean)
                .zip(&input.std)
                .map(|((v, m), s)| (v - m) / s)
        })
        .collect();
    let target = TargetScale::fit(y);
    let t: Vec<f32> = y.iter().map(|&v| target.normalise(v)).collect();
    let (hidden, head, skip) = if config.linear_skip {
        let (hidden, head, choice) = fit_with_linear_skip(&xs, &t, width, config, seed, on_epoch)?;
        (hidden, head, Some(choice))
    } else {
        let (hidden, head) = fit(&xs, &t, None, width, &config.hidden, config, seed, on_epoch);
        (hidden, head, None)
    };
    Ok((
        Mlp {
            input,
            hidden,
            head,
            target,
        },
        skip,
    ))
}

/// Share of the rows held out to choose the MLP's weight over the linear model.
/// An input column whose standard deviation on the training rows is below
/// this is taken as constant (scaled by 1, not by its spread): f32 inputs
/// carry no more, and dividing by rounding noise would blow up any row where
/// the column moves.
pub const MIN_INPUT_STD: f64 = 1e-6;

const SKIP_VALIDATION_SHARE: f64 = 0.2;
/// Below this many rows there is nothing to validate on: the linear model alone.
const SKIP_MIN_ROWS: usize = 10;
/// The MLP's weights tried: 0, 1/20, …, 1.
const SKIP_WEIGHT_STEPS: u32 = 20;
/// The linear part's ridge penalties tried (per row, on standardised inputs),
/// by cross-validation in this many folds: with few rows and many inputs (the
/// Joint MLP's) the lightest one overfits.
const SKIP_PENALTIES: [f64; 4] = [RIDGE_PER_ROW, 1e-2, 1e-1, 1.0];
const SKIP_PENALTY_FOLDS: usize = 5;

/// Trains a net whose logit is a ridge model of the (standardised) inputs plus
/// `weight` times an MLP fitted to the rest, and folds the ridge model into two
/// units of every hidden layer, so what comes out is an ordinary net of
/// `config.hidden`'s widths.
///
/// Why: with few rows an MLP overfits where a linear model of the same inputs
/// does not (on Gavel's measured pairs MeanField fell 0.06–0.10 below the
/// linear field in slowdown R² from 40 to 160 pairs). Both shrinkages are
/// measured, not assumed, on a seeded order of the rows: the ridge penalty by
/// 5-fold cross-validation (closed form, cheap); the MLP's weight by an MLP
/// trained on 80 % of the rows over a ridge model of the same 80 %, the weight
/// minimising the squared error on the other 20 % (the smallest of ties, 0 when
/// the MLP adds nothing). Then the MLP is trained again on every row. Fewer
/// than [`SKIP_MIN_ROWS`] rows: the ridge model alone, at the lightest penalty.
///
/// The linear part rides through the ReLUs exactly: the first layer's two
/// extra units are relu(ℓ) and relu(−ℓ), every later layer passes them on
/// (relu of a non-negative value is itself), and the head adds their
/// difference, ℓ, to the MLP's output. Their BatchNorm is the identity
/// (γ = √(1 + ε) over a running variance of 1).
fn fit_with_linear_skip(
    xs: &[f32],
    t: &[f32],
    width: usize,
    config: &TrainConfig,
    seed: u64,
    on_epoch: &mut dyn FnMut(usize),
) -> Result<(Vec<Hidden>, Linear, SkipChoice), TrainError> {
    if config.hidden.is_empty() || config.hidden.iter().any(|&h| h < 3) {
        return Err(TrainError::Config(format!(
            "a linear skip takes two units of every hidden layer: each needs at least 3 (got {:?})",
            config.hidden
        )));
    }
    let rows = t.len();
    let logit: Vec<f64> = t
        .iter()
        .map(|&v| {
            let p = f64::from(v).clamp(1e-4, 1.0 - 1e-4);
            (p / (1.0 - p)).ln()
        })
        .collect();
    let z: Vec<f64> = xs.iter().map(|&v| f64::from(v)).collect();
    let mut order: Vec<usize> = (0..rows).collect();
    shuffle(&mut order, &mut Rng::derive(seed, 4));
    // The squared error the net is trained on, of a logit for row r.
    let loss = |r: usize, logit: f64| (1.0 / (1.0 + (-logit).exp()) - f64::from(t[r])).powi(2);
    let validated = rows >= SKIP_MIN_ROWS;
    let penalty = if validated {
        Ridge::choose_penalty(
            &z,
            &logit,
            width,
            &SKIP_PENALTIES,
            SKIP_PENALTY_FOLDS,
            &order,
            &loss,
        )
    } else {
        RIDGE_PER_ROW
    };
    let linear = Ridge::fit(&z, &logit, width, penalty);
    let offsets_of = |linear: &Ridge| -> Vec<f32> {
        z.chunks_exact(width)
            .map(|r| linear.predict(r) as f32)
            .collect()
    };
    let offsets = offsets_of(&linear);
    let widths: Vec<usize> = config.hidden.iter().map(|h| h - 2).collect();
    let epochs = config.epochs;
    // Both trainings report into one count of `epochs`.
    let mlp_weight = if validated {
        let held = ((rows as f64 * SKIP_VALIDATION_SHARE).ceil() as usize).clamp(1, rows - 2);
        let (held, kept) = order.split_at(held);
        let pick = |rows: &[usize], from: &[f32], w: usize| -> Vec<f32> {
            rows.iter()
                .flat_map(|&r| from[r * w..(r + 1) * w].iter().copied())
                .collect()
        };
        // The linear part refitted without the held-out rows, so they score
        // both parts out of sample.
        let kept_z: Vec<f64> = kept
            .iter()
            .flat_map(|&r| z[r * width..(r + 1) * width].iter().copied())
            .collect();
        let kept_logit: Vec<f64> = kept.iter().map(|&r| logit[r]).collect();
        let inner = offsets_of(&Ridge::fit(&kept_z, &kept_logit, width, penalty));
        let (hidden, head) = fit(
            &pick(kept, xs, width),
            &pick(kept, t, 1),
            Some(&pick(kept, &inner, 1)),
            width,
            &widths,
            config,
            Rng::derive(seed, 5).next_u64(),
            &mut |e| on_epoch(e / 2),
        );
        let mlp = Mlp {
            input: Standardize {
                mean: vec![0.0; width],
                std: vec![1.0; width],
            },
            hidden,
            head,
            target: TargetScale {
                offset: 0.0,
                scale: 1.0,
            },
        };
        let residual = mlp.logits(&pick(held, xs, width));
        let total = |w: f32| -> f64 {
            held.iter()
                .zip(&residual)
                .map(|(&r, &m)| loss(r, f64::from(inner[r] + w * m)))
                .sum()
        };
        (0..=SKIP_WEIGHT_STEPS)
            .map(|k| k as f32 / SKIP_WEIGHT_STEPS as f32)
            .fold((f64::INFINITY, 0.0), |(best, bw), w| {
                let l = total(w);
                if l < best { (l, w) } else { (best, bw) }
            })
            .1
    } else {
        0.0
    };
    let (hidden, head) = fit(
        xs,
        t,
        Some(&offsets),
        width,
        &widths,
        config,
        seed,
        &mut |e| on_epoch((epochs + e) / 2),
    );
    let (hidden, head) = with_skip_units(hidden, head, &linear, mlp_weight, config.bn_eps);
    Ok((
        hidden,
        head,
        SkipChoice {
            penalty,
            mlp_weight,
        },
    ))
}

/// The logit `ℓ(x) + mlp_weight · mlp(x)` as one net: the MLP's layers with
/// two more units each, which carry ℓ (see [`fit_with_linear_skip`]).
fn with_skip_units(
    hidden: Vec<Hidden>,
    head: Linear,
    linear: &Ridge,
    mlp_weight: f32,
    eps: f32,
) -> (Vec<Hidden>, Linear) {
    let identity = (1.0 + eps).sqrt();
    let mut out = Vec::with_capacity(hidden.len());
    for (l, h) in hidden.into_iter().enumerate() {
        let Linear {
            inputs,
            outputs,
            mut weight,
            mut bias,
        } = h.linear;
        let (inputs, weight) = if l == 0 {
            let coef: Vec<f32> = linear.coef.iter().map(|&c| c as f32).collect();
            weight.extend(&coef);
            weight.extend(coef.iter().map(|c| -c));
            bias.extend([linear.intercept as f32, -linear.intercept as f32]);
            (inputs, weight)
        } else {
            // Every trained unit ignores the two carried units; they pass on.
            let wide = inputs + 2;
            let mut w = Vec::with_capacity(wide * (outputs + 2));
            for row in weight.chunks_exact(inputs) {
                w.extend(row);
                w.extend([0.0, 0.0]);
            }
            for k in 0..2 {
                w.extend((0..wide).map(|j| if j == inputs + k { 1.0 } else { 0.0 }));
            }
            bias.extend([0.0, 0.0]);
            (wide, w)
        };
        let mut norm = h.norm;
        norm.gamma.extend([identity; 2]);
        norm.beta.extend([0.0; 2]);
        norm.running_mean.extend([0.0; 2]);
        norm.running_var.extend([1.0; 2]);
        out.push(Hidden {
            linear: Linear {
                inputs,
                outputs: outputs + 2,
                weight,
                bias,
            },
            norm,
        });
    }
    let mut head_weight: Vec<f32> = head.weight.iter().map(|w| mlp_weight * w).collect();
    head_weight.extend([1.0, -1.0]);
    let head = Linear {
        inputs: head.inputs + 2,
        outputs: 1,
        weight: head_weight,
        bias: head.bias.iter().map(|b| mlp_weight * b).collect(),
    };
    (out, head)
}

/// Trains hidden blocks of `widths` and a one-output head on standardised rows
/// `xs` (`width` wide) and normalised targets `t`. `offsets`, when given, are
/// added to the head's output row by row before the sigmoid: a fixed part of
/// the logit the net learns the rest of.
#[allow(clippy::too_many_arguments)]
fn fit(
    xs: &[f32],
    t: &[f32],
    offsets: Option<&[f32]>,
    width: usize,
    widths: &[usize],
    config: &TrainConfig,
    seed: u64,
    on_epoch: &mut dyn FnMut(usize),
) -> (Vec<Hidden>, Linear) {
    let rows = t.len();
    let mut init_rng = Rng::derive(seed, 1);
    let mut shuffle_rng = Rng::derive(seed, 2);
    let mut dropout_rng = Rng::derive(seed, 3);

    let max_batch = config.batch_size.min(rows) + 1; // a merged trailing row
    let mut hidden: Vec<HiddenTrain> = Vec::with_capacity(widths.len());
    let mut inputs = width;
    for &outputs in widths {
        hidden.push(HiddenTrain::new(inputs, outputs, max_batch, &mut init_rng));
        inputs = outputs;
    }
    let mut head = DenseTrain::new(inputs, 1, &mut init_rng);

    // acts[0] is the batch input, acts[l + 1] the output of hidden block l;
    // grads[l] the loss gradient with respect to acts[l].
    let mut acts: Vec<Vec<f32>> = std::iter::once(width)
        .chain(widths.iter().copied())
        .map(|w| vec![0.0; w * max_batch])
        .collect();
    let mut grads: Vec<Vec<f32>> = acts.clone();
    let mut head_out = vec![0.0f32; max_batch];
    let mut head_grad = vec![0.0f32; max_batch];
    let mut tb = vec![0.0f32; max_batch];
    let mut ob = vec![0.0f32; max_batch];

    let adam = Adam::new(config);
    let mut step = 0i32;
    let mut order: Vec<usize> = (0..rows).collect();
    for epoch in 0..config.epochs {
        shuffle(&mut order, &mut shuffle_rng);
        for batch in batches(&order, config.batch_size) {
            let b = batch.len();
            for (k, &r) in batch.iter().enumerate() {
                acts[0][k * width..(k + 1) * width]
                    .copy_from_slice(&xs[r * width..(r + 1) * width]);
                tb[k] = t[r];
                ob[k] = offsets.map_or(0.0, |o| o[r]);
            }
            // Forward.
            for (l, layer) in hidden.iter_mut().enumerate() {
                let (before, after) = acts.split_at_mut(l + 1);
                layer.forward(&before[l], &mut after[0], b, config, &mut dropout_rng);
            }
            let last = &acts[hidden.len()];
            dense_forward(
                &last[..b * head.inputs],
                &head.w.value,
                &head.b.value,
                head.inputs,
                &mut head_out[..b],
            );
            // d(mean squared error)/d(pre-sigmoid output).
            for k in 0..b {
                let p = sigmoid(head_out[k] + ob[k]);
                head_grad[k] = 2.0 * (p - tb[k]) / b as f32 * p * (1.0 - p);
            }
            // Backward.
            let top = hidden.len();
            head.backward(&acts[top], &head_grad[..b], Some(&mut grads[top]), b);
            for l in (0..top).rev() {
                let (g_before, g_after) = grads.split_at_mut(l + 1);
                let prev_grad = (l > 0).then(|| &mut g_before[l]);
                hidden[l].backward(&acts[l], &g_after[0], prev_grad, b);
            }
            // Update.
            step += 1;
            let (bc1, bc2) = adam.corrections(step);
            for layer in &mut hidden {
                for p in [
                    &mut layer.dense.w,
                    &mut layer.dense.b,
                    &mut layer.gamma,
                    &mut layer.beta,
                ] {
                    adam.step(p, bc1, bc2);
                }
            }
            adam.step(&mut head.w, bc1, bc2);
            adam.step(&mut head.b, bc1, bc2);
        }
        on_epoch(epoch + 1);
    }

    (
        hidden
            .into_iter()
            .map(|h| Hidden {
                linear: h.dense.into_linear(),
                norm: BatchNorm {
                    gamma: h.gamma.value,
                    beta: h.beta.value,
                    running_mean: h.running_mean,
                    running_var: h.running_var,
                    batches_tracked: h.batches_tracked,
                    eps: config.bn_eps,
                },
            })
            .collect(),
        head.into_linear(),
    )
}

/// Per-feature mean and population standard deviation; a constant feature (e.g.
/// the one-hot of a model's only variant) gets std 1 so it standardises to 0.
fn fit_standardize(x: &[f32], width: usize) -> Standardize {
    let rows = (x.len() / width) as f64;
    let mut mean = vec![0.0f64; width];
    for r in x.chunks_exact(width) {
        for (m, &v) in mean.iter_mut().zip(r) {
            *m += f64::from(v);
        }
    }
    mean.iter_mut().for_each(|m| *m /= rows);
    let mut var = vec![0.0f64; width];
    for r in x.chunks_exact(width) {
        for ((s, &v), m) in var.iter_mut().zip(r).zip(&mean) {
            *s += (f64::from(v) - m).powi(2);
        }
    }
    Standardize {
        mean: mean.iter().map(|&m| m as f32).collect(),
        std: var
            .iter()
            .map(|&s| {
                let sd = (s / rows).sqrt();
                if sd > MIN_INPUT_STD { sd as f32 } else { 1.0 }
            })
            .collect(),
    }
}

/// Fisher–Yates.
fn shuffle(order: &mut [usize], rng: &mut Rng) {
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
}

/// The fewest batches of at most `size` rows, all of (nearly) equal size: sizes
/// differ by at most one row, and none has fewer than two (BatchNorm's batch
/// variance needs two). Equal sizes matter: a small trailing batch (e.g. 4 rows
/// after three of 32) gives noisy BatchNorm statistics and steps, and with a
/// momentum of 0.1 its noise lands in the running statistics every epoch.
fn batches(order: &[usize], size: usize) -> impl Iterator<Item = &[usize]> {
    let n = order.len();
    let count = n.div_ceil(size).min(n / 2).max(1);
    let (base, extra) = (n / count, n % count);
    (0..count).map(move |i| {
        // The first `extra` batches take one row more.
        let start = i * base + i.min(extra);
        let len = base + usize::from(i < extra);
        &order[start..start + len]
    })
}

/// A trainable tensor with its gradient and Adam moments.
#[derive(Debug, Clone)]
struct Param {
    value: Vec<f32>,
    grad: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

impl Param {
    fn new(value: Vec<f32>) -> Self {
        let n = value.len();
        Self {
            value,
            grad: vec![0.0; n],
            m: vec![0.0; n],
            v: vec![0.0; n],
        }
    }

    /// PyTorch's default initialisation of `Linear`: U(−1/√fan_in, 1/√fan_in).
    fn uniform(n: usize, fan_in: usize, rng: &mut Rng) -> Self {
        let bound = 1.0 / (fan_in as f64).sqrt();
        Self::new(
            (0..n)
                .map(|_| ((rng.next_f64() * 2.0 - 1.0) * bound) as f32)
                .collect(),
        )
    }
}

/// Adam exactly as `torch.optim.Adam` writes it (no weight decay).
#[derive(Debug)]
struct Adam {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
}

impl Adam {
    fn new(c: &TrainConfig) -> Self {
        Self {
            lr: c.learning_rate,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.adam_eps,
        }
    }

    /// Bias corrections 1 − β₁ᵗ and √(1 − β₂ᵗ).
    fn corrections(&self, step: i32) -> (f32, f32) {
        (
            1.0 - self.beta1.powi(step),
            (1.0 - self.beta2.powi(step)).sqrt(),
        )
    }

    fn step(&self, p: &mut Param, bc1: f32, bc2_sqrt: f32) {
        let step_size = self.lr / bc1;
        for (((w, g), m), v) in p.value.iter_mut().zip(&p.grad).zip(&mut p.m).zip(&mut p.v) {
            *m = self.beta1 * *m + (1.0 - self.beta1) * g;
            *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
            *w -= step_size * *m / (v.sqrt() / bc2_sqrt + self.eps);
        }
    }
}

#[derive(Debug, Clone)]
struct DenseTrain {
    inputs: usize,
    outputs: usize,
    w: Param,
    b: Param,
}

impl DenseTrain {
    fn new(inputs: usize, outputs: usize, rng: &mut Rng) -> Self {
        Self {
            inputs,
            outputs,
            w: Param::uniform(inputs * outputs, inputs, rng),
            b: Param::uniform(outputs, inputs, rng),
        }
    }

    /// Weight and bias gradients from `dz` (`b × outputs`), and, if asked, the
    /// gradient with respect to the input `x` (`b × inputs`).
    fn backward(&mut self, x: &[f32], dz: &[f32], dx: Option<&mut Vec<f32>>, b: usize) {
        let (i, o) = (self.inputs, self.outputs);
        self.w.grad.fill(0.0);
        self.b.grad.fill(0.0);
        for (xr, dzr) in x[..b * i].chunks_exact(i).zip(dz[..b * o].chunks_exact(o)) {
            for ((gw, &d), gb) in self
                .w
                .grad
                .chunks_exact_mut(i)
                .zip(dzr)
                .zip(&mut self.b.grad)
            {
                axpy(gw, d, xr);
                *gb += d;
            }
        }
        if let Some(dx) = dx {
            for (dxr, dzr) in dx[..b * i]
                .chunks_exact_mut(i)
                .zip(dz[..b * o].chunks_exact(o))
            {
                dxr.fill(0.0);
                for (w, &d) in self.w.value.chunks_exact(i).zip(dzr) {
                    axpy(dxr, d, w);
                }
            }
        }
    }

    fn into_linear(self) -> Linear {
        Linear {
            inputs: self.inputs,
            outputs: self.outputs,
            weight: self.w.value,
            bias: self.b.value,
        }
    }
}

/// A hidden block with its parameters, running statistics and batch caches.
#[derive(Debug, Clone)]
struct HiddenTrain {
    dense: DenseTrain,
    gamma: Param,
    beta: Param,
    running_mean: Vec<f32>,
    running_var: Vec<f32>,
    batches_tracked: u64,
    /// Pre-normalisation output, then reused for the gradient with respect to it.
    z: Vec<f32>,
    xhat: Vec<f32>,
    /// BatchNorm output before the ReLU (its sign gates the gradient).
    bn: Vec<f32>,
    /// Dropout multiplier per unit: 0 or 1 / (1 − p).
    mask: Vec<f32>,
    mean: Vec<f32>,
    inv_std: Vec<f32>,
    sum1: Vec<f32>,
    sum2: Vec<f32>,
}

impl HiddenTrain {
    fn new(inputs: usize, outputs: usize, max_batch: usize, rng: &mut Rng) -> Self {
        let cache = vec![0.0; outputs * max_batch];
        Self {
            dense: DenseTrain::new(inputs, outputs, rng),
            gamma: Param::new(vec![1.0; outputs]),
            beta: Param::new(vec![0.0; outputs]),
            running_mean: vec![0.0; outputs],
            running_var: vec![1.0; outputs],
            batches_tracked: 0,
            z: cache.clone(),
            xhat: cache.clone(),
            bn: cache.clone(),
            mask: cache,
            mean: vec![0.0; outputs],
            inv_std: vec![0.0; outputs],
            sum1: vec![0.0; outputs],
            sum2: vec![0.0; outputs],
        }
    }

    /// Training-mode forward of `b` rows from `x` into `out`.
    fn forward(&mut self, x: &[f32], out: &mut [f32], b: usize, c: &TrainConfig, rng: &mut Rng) {
        let (i, o) = (self.dense.inputs, self.dense.outputs);
        let z = &mut self.z[..b * o];
        dense_forward(&x[..b * i], &self.dense.w.value, &self.dense.b.value, i, z);

        // Batch statistics (biased variance in the forward pass, as PyTorch).
        self.mean.fill(0.0);
        for zr in z.chunks_exact(o) {
            axpy(&mut self.mean, 1.0, zr);
        }
        let inv_b = 1.0 / b as f32;
        self.mean.iter_mut().for_each(|m| *m *= inv_b);
        self.inv_std.fill(0.0); // holds the variance until inverted below
        for zr in z.chunks_exact(o) {
            for ((v, &zj), &m) in self.inv_std.iter_mut().zip(zr).zip(&self.mean) {
                *v += (zj - m) * (zj - m);
            }
        }
        let unbias = b as f32 / (b as f32 - 1.0);
        let mom = c.bn_momentum;
        for (((var, rm), rv), &m) in self
            .inv_std
            .iter_mut()
            .zip(&mut self.running_mean)
            .zip(&mut self.running_var)
            .zip(&self.mean)
        {
            *var *= inv_b;
            *rm = (1.0 - mom) * *rm + mom * m;
            *rv = (1.0 - mom) * *rv + mom * *var * unbias;
            *var = 1.0 / (*var + c.bn_eps).sqrt();
        }
        self.batches_tracked += 1;

        let keep = 1.0 - c.dropout;
        let dropping = c.dropout > 0.0;
        for k in 0..b {
            let span = k * o..(k + 1) * o;
            let zr = &z[span.clone()];
            let xh = &mut self.xhat[span.clone()];
            let bn = &mut self.bn[span.clone()];
            let mask = &mut self.mask[span.clone()];
            for j in 0..o {
                xh[j] = (zr[j] - self.mean[j]) * self.inv_std[j];
                bn[j] = self.gamma.value[j] * xh[j] + self.beta.value[j];
                mask[j] = if !dropping || rng.next_f64() < f64::from(keep) {
                    1.0 / keep
                } else {
                    0.0
                };
            }
            for ((y, &v), &m) in out[span].iter_mut().zip(bn.iter()).zip(mask.iter()) {
                *y = v.max(0.0) * m;
            }
        }
    }

    /// Backward of `b` rows given the gradient `dout` of this block's output.
    fn backward(&mut self, x: &[f32], dout: &[f32], dx: Option<&mut Vec<f32>>, b: usize) {
        let o = self.dense.outputs;
        // Through dropout and ReLU: dy = dout · mask · [bn > 0] (stored in `bn`).
        for ((d, bn), &m) in dout[..b * o]
            .iter()
            .zip(&mut self.bn[..b * o])
            .zip(&self.mask[..b * o])
        {
            *bn = if *bn > 0.0 { d * m } else { 0.0 };
        }
        let dy = &self.bn[..b * o];
        let xhat = &self.xhat[..b * o];
        self.gamma.grad.fill(0.0);
        self.beta.grad.fill(0.0);
        for (dyr, xr) in dy.chunks_exact(o).zip(xhat.chunks_exact(o)) {
            for j in 0..o {
                self.gamma.grad[j] += dyr[j] * xr[j];
                self.beta.grad[j] += dyr[j];
            }
        }
        // dxhat = dy · γ; Σ dxhat = γ · Σ dy = γ · dβ; Σ dxhat · xhat = γ · dγ.
        for j in 0..o {
            self.sum1[j] = self.gamma.value[j] * self.beta.grad[j];
            self.sum2[j] = self.gamma.value[j] * self.gamma.grad[j];
        }
        // dz = inv_std / B · (B · dxhat − Σ dxhat − xhat · Σ(dxhat · xhat)).
        let bf = b as f32;
        let inv_b = 1.0 / bf;
        let dz = &mut self.z[..b * o];
        for ((dzr, dyr), xr) in dz
            .chunks_exact_mut(o)
            .zip(dy.chunks_exact(o))
            .zip(xhat.chunks_exact(o))
        {
            for j in 0..o {
                let dxhat = dyr[j] * self.gamma.value[j];
                dzr[j] =
                    self.inv_std[j] * inv_b * (bf * dxhat - self.sum1[j] - xr[j] * self.sum2[j]);
            }
        }
        self.dense.backward(x, &self.z, dx, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::r2;

    /// A smooth test function of three inputs, plus a little seeded noise.
    fn smooth_data(rows: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = Rng::new(seed);
        let mut x = Vec::with_capacity(rows * 3);
        let mut y = Vec::with_capacity(rows);
        for _ in 0..rows {
            let a = rng.next_f64();
            let b = rng.next_f64();
            let c = if rng.bernoulli(0.5) { 1.0 } else { 0.0 };
            x.extend([a as f32, b as f32, c as f32]);
            let v = 50.0 + 30.0 * (2.0 * a).sin() - 20.0 * a * b + 15.0 * c + rng.normal();
            y.push(v as f32);
        }
        (x, y)
    }

    #[test]
    fn same_seed_same_bits_other_seed_other_bits() {
        let (x, y) = smooth_data(50, 1);
        let config = TrainConfig {
            epochs: 20,
            ..TrainConfig::default()
        };
        let a = train(&x, &y, 3, &config, 7, &mut |_| {}).expect("trains");
        let b = train(&x, &y, 3, &config, 7, &mut |_| {}).expect("trains");
        let c = train(&x, &y, 3, &config, 8, &mut |_| {}).expect("trains");
        assert_eq!(a, b);
        assert_ne!(a.hidden[0].linear.weight, c.hidden[0].linear.weight);
    }

    #[test]
    fn learns_a_smooth_function() {
        let (x, y) = smooth_data(300, 2);
        let (xt, yt) = smooth_data(200, 3);
        let mut epochs = 0;
        let net =
            train(&x, &y, 3, &TrainConfig::default(), 1, &mut |e| epochs = e).expect("trains");
        assert_eq!(epochs, TrainConfig::default().epochs);
        let fit = r2(&net.predict(&xt), &yt).expect("defined");
        assert!(fit > 0.95, "held-out R² {fit}");
    }

    /// Two hidden blocks and a head, for checking gradients on one batch.
    #[derive(Clone)]
    struct SmallNet {
        l1: HiddenTrain,
        l2: HiddenTrain,
        head: DenseTrain,
    }

    /// What one training-mode forward pass leaves behind.
    struct Pass {
        loss: f64,
        a1: Vec<f32>,
        a2: Vec<f32>,
        head_grad: Vec<f32>,
    }

    impl SmallNet {
        fn forward(&mut self, xs: &[f32], t: &[f32], c: &TrainConfig) -> Pass {
            let b = t.len();
            let mut rng = Rng::new(0); // dropout is off: unused
            let mut a1 = vec![0.0; b * self.l1.dense.outputs];
            let mut a2 = vec![0.0; b * self.l2.dense.outputs];
            self.l1.forward(xs, &mut a1, b, c, &mut rng);
            self.l2.forward(&a1, &mut a2, b, c, &mut rng);
            let mut s = vec![0.0; b];
            dense_forward(
                &a2,
                &self.head.w.value,
                &self.head.b.value,
                self.head.inputs,
                &mut s,
            );
            let mut loss = 0.0f64;
            let mut head_grad = vec![0.0; b];
            for ((&z, &tk), g) in s.iter().zip(t).zip(&mut head_grad) {
                let p = sigmoid(z);
                loss += f64::from((p - tk) * (p - tk));
                *g = 2.0 * (p - tk) / b as f32 * p * (1.0 - p);
            }
            Pass {
                loss: loss / b as f64,
                a1,
                a2,
                head_grad,
            }
        }
    }

    /// The analytic gradient of one batch against central differences of the loss.
    #[test]
    fn gradients_match_finite_differences() {
        let (x, y) = smooth_data(6, 4);
        let config = TrainConfig {
            dropout: 0.0,
            ..TrainConfig::default()
        };
        let input = fit_standardize(&x, 3);
        let xs: Vec<f32> = x
            .chunks_exact(3)
            .flat_map(|r| {
                (0..3)
                    .map(|k| (r[k] - input.mean[k]) / input.std[k])
                    .collect::<Vec<_>>()
            })
            .collect();
        let t: Vec<f32> = y.iter().map(|v| v / 100.0).collect();
        let mut rng = Rng::new(5);
        let mut net = SmallNet {
            l1: HiddenTrain::new(3, 5, 6, &mut rng),
            l2: HiddenTrain::new(5, 4, 6, &mut rng),
            head: DenseTrain::new(4, 1, &mut rng),
        };
        // Non-trivial γ and β so their terms in the BatchNorm gradient count.
        for (j, g) in net.l1.gamma.value.iter_mut().enumerate() {
            *g = 0.5 + 0.2 * j as f32;
        }
        for (j, b) in net.l2.beta.value.iter_mut().enumerate() {
            *b = 0.1 * j as f32 - 0.15;
        }

        let mut analytic = net.clone();
        let pass = analytic.forward(&xs, &t, &config);
        assert!(pass.loss > 0.0);
        let mut g2 = vec![0.0; 6 * 4];
        let mut g1 = vec![0.0; 6 * 5];
        analytic
            .head
            .backward(&pass.a2, &pass.head_grad, Some(&mut g2), 6);
        analytic.l2.backward(&pass.a1, &g2, Some(&mut g1), 6);
        analytic.l1.backward(&xs, &g1, None, 6);

        let h = 1e-2f32;
        let numeric = |perturb: &dyn Fn(&mut SmallNet, f32)| {
            let mut up = net.clone();
            perturb(&mut up, h);
            let mut down = net.clone();
            perturb(&mut down, -h);
            (up.forward(&xs, &t, &config).loss - down.forward(&xs, &t, &config).loss)
                / (2.0 * f64::from(h))
        };
        let close = |numeric: f64, analytic: f32, what: &str| {
            let scale = numeric.abs().max(f64::from(analytic.abs())).max(1e-4);
            assert!(
                (numeric - f64::from(analytic)).abs() / scale < 0.05,
                "{what}: numeric {numeric} analytic {analytic}"
            );
        };
        for idx in [0, 4, 7, 14] {
            let n = numeric(&|m, d| m.l1.dense.w.value[idx] += d);
            close(n, analytic.l1.dense.w.grad[idx], &format!("W1[{idx}]"));
        }
        for (idx, &g) in analytic.l1.gamma.grad.iter().enumerate() {
            let n = numeric(&|m, d| m.l1.gamma.value[idx] += d);
            close(n, g, &format!("gamma1[{idx}]"));
        }
        for idx in [0, 3, 11, 19] {
            let n = numeric(&|m, d| m.l2.dense.w.value[idx] += d);
            close(n, analytic.l2.dense.w.grad[idx], &format!("W2[{idx}]"));
        }
        for idx in 0..4 {
            let n = numeric(&|m, d| m.head.w.value[idx] += d);
            close(n, analytic.head.w.grad[idx], &format!("head[{idx}]"));
        }
    }

    /// A logit linear in the inputs, as a net with a linear skip sees it.
    fn logistic_data(rows: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = Rng::new(seed);
        let mut x = Vec::with_capacity(rows * 3);
        let mut y = Vec::with_capacity(rows);
        for _ in 0..rows {
            let v = [rng.next_f64(), rng.next_f64(), rng.next_f64()];
            x.extend(v.map(|a| a as f32));
            let logit = 1.5 * v[0] - 2.0 * v[1] + 0.5 * v[2] - 0.2;
            y.push((10.0 + 80.0 / (1.0 + (-logit).exp()) + 0.3 * rng.normal()) as f32);
        }
        (x, y)
    }

    #[test]
    fn a_linear_skip_keeps_the_widths_and_holds_on_few_rows() {
        let (x, y) = logistic_data(24, 11);
        let (xt, yt) = logistic_data(400, 12);
        let plain = TrainConfig::published();
        let skip = TrainConfig::default();
        assert!(skip.linear_skip && !plain.linear_skip);
        let mut last = 0;
        let with = train(&x, &y, 3, &skip, 3, &mut |e| {
            assert!(e >= last, "progress never goes back");
            last = e;
        })
        .expect("trains");
        assert_eq!(last, skip.epochs, "both trainings count into one total");
        let widths: Vec<usize> = with.hidden.iter().map(|h| h.linear.outputs).collect();
        assert_eq!(widths, skip.hidden, "the skip rides on the net's own units");
        let without = train(&x, &y, 3, &plain, 3, &mut |_| {}).expect("trains");
        let held = |net: &Mlp| r2(&net.predict(&xt), &yt).expect("defined");
        assert!(
            held(&with) > 0.9 && held(&with) > held(&without),
            "24 rows of a logistic function: R² {} with the skip, {} without",
            held(&with),
            held(&without)
        );
        let again = train(&x, &y, 3, &skip, 3, &mut |_| {}).expect("trains");
        assert_eq!(with, again, "same seed, same bits");
    }

    #[test]
    fn the_skip_units_carry_the_linear_logit_exactly() {
        // Weight 0: the net is the ridge model's logit, whatever the MLP
        // learnt. The base net is a plain one, so the only skip units are the
        // ones added here.
        let (x, y) = smooth_data(30, 13);
        let config = TrainConfig {
            epochs: 3,
            ..TrainConfig::published()
        };
        let net = train(&x, &y, 3, &config, 1, &mut |_| {}).expect("trains");
        let linear = Ridge {
            coef: vec![0.7, -1.1, 0.25],
            intercept: 0.3,
        };
        let (hidden, head) = with_skip_units(net.hidden, net.head, &linear, 0.0, config.bn_eps);
        let skipped = Mlp {
            hidden,
            head,
            ..net
        };
        let logits = skipped.logits(&x);
        for (row, got) in x.chunks_exact(3).zip(logits) {
            let z: Vec<f64> = row
                .iter()
                .zip(&skipped.input.mean)
                .zip(&skipped.input.std)
                .map(|((&v, &m), &s)| f64::from((v - m) / s))
                .collect();
            let want = linear.predict(&z);
            assert!((f64::from(got) - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn a_skip_needs_room_in_every_hidden_layer() {
        let (x, y) = smooth_data(20, 14);
        let config = TrainConfig {
            hidden: vec![8, 2],
            linear_skip: true,
            ..TrainConfig::default()
        };
        let err = train(&x, &y, 3, &config, 0, &mut |_| {}).expect_err("2 units is no room");
        assert!(matches!(err, TrainError::Config(_)), "{err}");
    }

    #[test]
    fn bad_inputs_are_errors() {
        let c = TrainConfig::default();
        assert_eq!(
            train(&[1.0], &[1.0], 1, &c, 0, &mut |_| {}),
            Err(TrainError::TooFewRows(1))
        );
        assert!(matches!(
            train(&[1.0, 2.0, 3.0], &[1.0, 2.0], 2, &c, 0, &mut |_| {}),
            Err(TrainError::Shape { .. })
        ));
        assert_eq!(
            train(&[1.0, f32::NAN], &[1.0, 2.0], 1, &c, 0, &mut |_| {}),
            Err(TrainError::NonFinite { row: 1 })
        );
    }

    #[test]
    fn batches_are_balanced_cover_every_row_and_never_hold_one() {
        let sizes = |n: usize, size: usize| -> Vec<usize> {
            let order: Vec<usize> = (0..n).collect();
            let parts: Vec<&[usize]> = batches(&order, size).collect();
            let flat: Vec<usize> = parts.iter().flat_map(|b| b.iter().copied()).collect();
            assert_eq!(flat, order, "n = {n}: every row once, in order");
            parts.iter().map(|b| b.len()).collect()
        };
        assert_eq!(sizes(100, 32), vec![25, 25, 25, 25]);
        assert_eq!(sizes(65, 32), vec![22, 22, 21]);
        assert_eq!(sizes(64, 32), vec![32, 32]);
        assert_eq!(sizes(10, 32), vec![10]);
        assert_eq!(sizes(3, 2), vec![3]);
        assert_eq!(sizes(2, 2), vec![2]);
        for n in 2..200 {
            let s = sizes(n, 32);
            assert!(s.iter().all(|&b| (2..=33).contains(&b)), "n = {n}: {s:?}");
        }
    }
}
