//! Training a MeanField bundle from a profile, and scoring predictors on one.

use super::dataset::{self, Layout, ModelData};
use super::split;
use anyhow::{Context, Result, bail};
use mfsched_core::profile::Profile;
use mfsched_core::scenario::Scenario;
use mfsched_nn::metrics::r2;
use mfsched_nn::{Mlp, TrainConfig};
use mfsched_rng::Rng;
use mfsched_surrogate::bundle::{
    Architecture, Bundle, BundleMeta, FORMAT_VERSION, Metrics, ModelMeta, TrainingInfo,
    VariantRange,
};
use mfsched_surrogate::features;
use mfsched_surrogate::fold::fold;

/// Share of the profile held out (stratified) to measure a bundle's R².
pub const HOLDOUT_FRACTION: f64 = 0.2;
/// Default SLA floor: this quantile of the profiled throughput (P25, as published).
pub const FLOOR_QUANTILE: f64 = 0.25;

/// RNG stream labels, so adding draws in one place never shifts another's.
const STREAM_HOLDOUT: u64 = 0x484f_4c44; // "HOLD"
const STREAM_MODEL: u64 = 0x4d4f_4445_4c00; // "MODEL" + index

/// The training seed of predictor `i`: independent per model.
pub fn model_seed(seed: u64, i: usize) -> u64 {
    Rng::derive(seed, STREAM_MODEL + i as u64).next_u64()
}

/// Trains one net on `data`, naming the model in errors.
pub fn train_net(
    data: &ModelData,
    config: &TrainConfig,
    seed: u64,
    model: &str,
    on_epoch: &mut dyn FnMut(usize),
) -> Result<Mlp> {
    mfsched_nn::train(&data.x, &data.y, data.width, config, seed, on_epoch)
        .with_context(|| format!("training the predictor of model '{model}'"))
}

/// R² of a trained net on `data` (None when undefined: constant truth).
pub fn score(net: &Mlp, data: &ModelData) -> Option<f64> {
    r2(&net.predict(&data.x), &data.y)
}

/// Trains a bundle: a stratified hold-out of [`HOLDOUT_FRACTION`] of the rows
/// measures each model's R²; the shipped nets are the ones trained on the rest.
/// `progress(done, total)` counts epochs over all models.
pub fn train_bundle(
    scenario: &Scenario,
    profile: &Profile,
    data_sha256: String,
    config: &TrainConfig,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Bundle> {
    let problem = &scenario.problem;
    let n_models = problem.models.len();
    let strata = split::strata(problem, profile);
    let (train_rows, test_rows) = split::holdout(
        &strata,
        HOLDOUT_FRACTION,
        &mut Rng::derive(seed, STREAM_HOLDOUT),
    );
    if test_rows.is_empty() || train_rows.len() < 2 {
        bail!(
            "the profile has {} rows: too few to train on and hold {:.0} % out (need at least 5)",
            profile.rows.len(),
            HOLDOUT_FRACTION * 100.0
        );
    }
    let data = dataset::build(problem, profile, Layout::MeanField);
    let ranges = profile.throughput_ranges(problem);
    let total = n_models * config.epochs;
    let mut nets = Vec::with_capacity(n_models);
    let mut models = Vec::with_capacity(n_models);
    for (i, model) in problem.models.iter().enumerate() {
        let train = data[i].subset(&train_rows);
        let test = data[i].subset(&test_rows);
        let net = train_net(&train, config, model_seed(seed, i), &model.name, &mut |e| {
            progress(i * config.epochs + e, total)
        })?;
        let r2_holdout = score(&net, &test).with_context(|| {
            format!(
                "model '{}': its held-out throughput is constant, R² is undefined",
                model.name
            )
        })?;
        models.push(ModelMeta {
            name: model.name.clone(),
            family: model.family.clone(),
            kind: model.kind.clone(),
            unit: model.unit.clone(),
            features: features::input_names(model),
            input_mean: net.input.mean.clone(),
            input_std: net.input.std.clone(),
            target_offset: net.target.offset,
            target_scale: net.target.scale,
            metrics: Metrics {
                train_rows: train.rows(),
                holdout_rows: test.rows(),
                r2_holdout,
            },
            sla_floor_p25: profile.throughput_quantile(i, FLOOR_QUANTILE),
            throughput_ranges: model
                .variants
                .iter()
                .zip(&ranges[i])
                .map(|(v, r)| VariantRange {
                    variant: v.name.clone(),
                    min: r.min,
                    max: r.max,
                })
                .collect(),
        });
        nets.push(net);
    }
    Ok(Bundle {
        meta: BundleMeta {
            format_version: FORMAT_VERSION,
            scenario: scenario.name.clone(),
            card_vram_mib: problem.card.vram_mib,
            architecture: Architecture {
                hidden: config.hidden.clone(),
                dropout: config.dropout,
                batchnorm_eps: config.bn_eps,
            },
            training: TrainingInfo {
                data_sha256,
                data_rows: profile.rows.len(),
                seed,
                epochs: config.epochs,
                batch_size: config.batch_size,
                learning_rate: config.learning_rate,
                holdout_fraction: HOLDOUT_FRACTION,
            },
            models,
        },
        nets,
    })
}

/// Per model: R² of the bundle's folded (inference-form) nets on a whole profile.
pub fn evaluate(bundle: &Bundle, scenario: &Scenario, profile: &Profile) -> Vec<Option<f64>> {
    let data = dataset::build(&scenario.problem, profile, Layout::MeanField);
    bundle
        .nets
        .iter()
        .zip(&data)
        .map(|(net, d)| r2(&fold(net).predict(&d.x), &d.y))
        .collect()
}
