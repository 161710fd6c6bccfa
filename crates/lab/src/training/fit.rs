//! Training a MeanField bundle from a profile, and scoring predictors on one.

use super::dataset::{self, Layout, ModelData};
use super::split;
use anyhow::{Context, Result, bail};
use mfsched_core::domain::Problem;
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
use mfsched_surrogate::target::{OutputMap, Target, fill_solo};

/// Default share of the profile held out (stratified) to measure a bundle's R².
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

/// Trains one net on `data` to learn the quantity `map`'s target encodes,
/// naming the model in errors.
pub fn train_net(
    data: &ModelData,
    map: &OutputMap,
    config: &TrainConfig,
    seed: u64,
    model: &str,
    on_epoch: &mut dyn FnMut(usize),
) -> Result<Mlp> {
    let y: Vec<f32> = if map.is_identity() {
        data.y.clone()
    } else {
        data.y
            .iter()
            .zip(&data.configs)
            .map(|(&y, &c)| map.encode(c as usize, f64::from(y)))
            .collect()
    };
    mfsched_nn::train(&data.x, &y, data.width, config, seed, on_epoch)
        .with_context(|| format!("training the predictor of model '{model}'"))
}

/// A trained net's throughput predictions on `data`'s rows.
pub fn predict(net: &Mlp, data: &ModelData, map: &OutputMap) -> Vec<f32> {
    let mut out = net.predict(&data.x);
    if !map.is_identity() {
        for (y, &c) in out.iter_mut().zip(&data.configs) {
            *y = map.apply(c as usize, *y);
        }
    }
    out
}

/// R² of a trained net's throughput on `data` (None when undefined: constant truth).
pub fn score(net: &Mlp, data: &ModelData, map: &OutputMap) -> Option<f64> {
    r2(&predict(net, data, map), &data.y)
}

/// The target `train` uses unless told: relative to solo where the profile has
/// solo rows, else absolute. Measured with `surrogate cv` (docs/model-bundle.md):
/// on the Gavel V100 pairs the relative target gave MeanField the best held-out
/// R² of throughput and of the slowdown, log the worst; on a simulator profile
/// (no solo rows) log and absolute were within one standard deviation, and
/// absolute keeps the shipped bundles and the published tables as they are.
pub fn default_target(profile: &Profile) -> Target {
    if profile.solo.is_empty() {
        Target::Absolute
    } else {
        Target::RelativeToSolo
    }
}

/// How a bundle is trained beyond the network's own settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainOptions {
    pub target: Target,
    /// Share of rows held out (stratified) to measure R²; 0 trains on all.
    pub holdout: f64,
}

impl TrainOptions {
    /// The default target for `profile`, the default hold-out.
    pub fn for_profile(profile: &Profile) -> Self {
        Self {
            target: default_target(profile),
            holdout: HOLDOUT_FRACTION,
        }
    }
}

/// Per model, the output map `target` needs: the solo table (measured, the
/// rest borrowed from the nearest measured configuration) for the relative
/// target. Also returns, per model, how many configurations were borrowed.
pub fn output_maps(
    problem: &Problem,
    profile: &Profile,
    target: Target,
) -> Result<(Vec<OutputMap>, Vec<usize>)> {
    if !target.needs_solo() {
        return Ok((
            vec![OutputMap::plain(target); problem.models.len()],
            vec![0; problem.models.len()],
        ));
    }
    let measured = profile.solo_table(problem);
    let mut maps = Vec::with_capacity(problem.models.len());
    let mut borrowed = Vec::with_capacity(problem.models.len());
    for (model, measured) in problem.models.iter().zip(&measured) {
        let (solo, filled) = fill_solo(model, measured).with_context(|| {
            format!(
                "model '{}' has no solo rows: the {target} target needs it measured alone \
                 (rows where only it runs; docs/profile-format.md)",
                model.name
            )
        })?;
        maps.push(OutputMap::new(model, target, Some(&solo))?);
        borrowed.push(filled);
    }
    Ok((maps, borrowed))
}

/// Trains a bundle: a stratified hold-out of `options.holdout` of the rows
/// measures each model's R² (of throughput, whatever the target); the shipped
/// nets are the ones trained on the rest. `progress(done, total)` counts
/// epochs over all models.
pub fn train_bundle(
    scenario: &Scenario,
    profile: &Profile,
    data_sha256: String,
    config: &TrainConfig,
    options: TrainOptions,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Bundle> {
    let problem = &scenario.problem;
    let n_models = problem.models.len();
    if !(0.0..1.0).contains(&options.holdout) {
        bail!(
            "the held-out share must be in [0, 1), got {}",
            options.holdout
        );
    }
    let strata = split::strata(problem, profile);
    let (train_rows, test_rows) = split::holdout(
        &strata,
        options.holdout,
        &mut Rng::derive(seed, STREAM_HOLDOUT),
    );
    if train_rows.len() < 2 || (options.holdout > 0.0 && test_rows.is_empty()) {
        bail!(
            "the profile has {} co-location rows: too few to train on and hold {:.0} % out",
            profile.rows.len(),
            options.holdout * 100.0
        );
    }
    let (maps, _) = output_maps(problem, profile, options.target)?;
    let data = dataset::build(problem, profile, Layout::MeanField);
    let ranges = profile.throughput_ranges(problem);
    let total = n_models * config.epochs;
    let mut nets = Vec::with_capacity(n_models);
    let mut models = Vec::with_capacity(n_models);
    for (i, model) in problem.models.iter().enumerate() {
        let train = data[i].subset(&train_rows);
        let test = data[i].subset(&test_rows);
        let net = train_net(
            &train,
            &maps[i],
            config,
            model_seed(seed, i),
            &model.name,
            &mut |e| progress(i * config.epochs + e, total),
        )?;
        let r2_holdout = if test_rows.is_empty() {
            None
        } else {
            Some(score(&net, &test, &maps[i]).with_context(|| {
                format!(
                    "model '{}': its held-out throughput is constant, R² is undefined",
                    model.name
                )
            })?)
        };
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
            solo_throughput: options
                .target
                .needs_solo()
                .then(|| maps[i].solo.iter().map(|&v| f64::from(v)).collect()),
        });
        nets.push(net);
    }
    Ok(Bundle {
        meta: BundleMeta {
            format_version: FORMAT_VERSION,
            scenario: scenario.name.clone(),
            scenario_toml: Some(scenario.source.clone()),
            target: options.target,
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
                holdout_fraction: options.holdout,
            },
            models,
        },
        nets,
    })
}

/// Per model: the throughput the bundle's folded (inference-form) nets predict
/// on every co-location row of a profile, in row order.
pub fn predictions(
    bundle: &Bundle,
    scenario: &Scenario,
    profile: &Profile,
) -> Result<Vec<Vec<f32>>> {
    let data = dataset::build(&scenario.problem, profile, Layout::MeanField);
    let maps = bundle.output_maps(&scenario.problem)?;
    Ok(bundle
        .nets
        .iter()
        .zip(&data)
        .zip(&maps)
        .map(|((net, d), map)| {
            let mut y = fold(net).predict(&d.x);
            for (v, &c) in y.iter_mut().zip(&d.configs) {
                *v = map.apply(c as usize, *v);
            }
            y
        })
        .collect())
}
