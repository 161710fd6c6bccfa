//! Training a MeanField bundle from a profile, and scoring predictors on one.

use super::dataset::{self, Layout, ModelData};
use super::{factors, split};
use anyhow::{Context, Result, bail};
use mfsched_core::Problem;
use mfsched_core::Profile;
use mfsched_core::Scenario;
use mfsched_nn::metrics::r2;
use mfsched_nn::{Mlp, SkipChoice, TrainConfig};
use mfsched_rng::Rng;
use mfsched_surrogate::fold;
use mfsched_surrogate::{
    Architecture, BUNDLE_FORMAT_VERSION, Bundle, BundleMeta, BundleMetrics, LinearSkip, ModelMeta,
    TrainingInfo, VariantRange,
};
use mfsched_surrogate::{CorunnerTables, FieldFeatures, solo_corunner_tables};
use mfsched_surrogate::{OutputMap, Target, fill_solo};
use mfsched_surrogate::{layout_names, solo_profiles};

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
/// naming the model in errors; with what the linear skip chose where it is on.
pub fn train_net(
    data: &ModelData,
    map: &OutputMap,
    config: &TrainConfig,
    seed: u64,
    model: &str,
    on_epoch: &mut dyn FnMut(usize),
) -> Result<(Mlp, Option<SkipChoice>)> {
    let y: Vec<f32> = if map.is_identity() {
        data.y.clone()
    } else {
        data.y
            .iter()
            .zip(&data.configs)
            .map(|(&y, &c)| map.encode(c as usize, f64::from(y)))
            .collect()
    };
    mfsched_nn::train_explained(&data.x, &y, data.width, config, seed, on_epoch)
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

/// How well throughput predictions match measurements: the one set of scores
/// every accuracy report prints (`train`, `surrogate eval`, `surrogate cv`,
/// Table I). Each is `None` where it is undefined.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fidelity {
    /// R² of throughput.
    pub r2: Option<f64>,
    /// R² of the slowdown, throughput / solo throughput in the same
    /// configuration: the part of the variance co-location causes. Throughput R²
    /// is dominated by which configuration runs (an own-configuration mean alone
    /// can reach 0.95 on it), so this is the score that separates surrogates.
    pub r2_slowdown: Option<f64>,
    /// Mean absolute percentage error of throughput (%; rows measuring 0 skipped).
    pub mape: Option<f64>,
}

/// Scores `predicted` against `truth`, row by row; `solo`, when known, is each
/// row's solo throughput (the slowdown's denominator).
pub fn fidelity(predicted: &[f32], truth: &[f32], solo: Option<&[f32]>) -> Fidelity {
    let r2_slowdown = solo.and_then(|solo| {
        let ratio = |v: &[f32]| -> Vec<f32> { v.iter().zip(solo).map(|(a, s)| a / s).collect() };
        (solo.len() == truth.len()).then(|| r2(&ratio(predicted), &ratio(truth)))?
    });
    Fidelity {
        r2: r2(predicted, truth),
        r2_slowdown,
        mape: mape(predicted, truth),
    }
}

/// Per row, measured / predicted throughput, ascending: the residuals a
/// split-conformal floor margin is taken from. A row predicted at 0 or below
/// (or not finite) counts as 0, a miss.
pub fn measured_over_predicted(predicted: &[f32], truth: &[f32]) -> Vec<f32> {
    let mut ratios: Vec<f32> = predicted
        .iter()
        .zip(truth)
        .map(|(&p, &t)| measured_over(p, t))
        .collect();
    ratios.sort_by(f32::total_cmp);
    ratios
}

/// One row's measured / predicted throughput (see [`measured_over_predicted`]).
pub fn measured_over(predicted: f32, measured: f32) -> f32 {
    let r = measured / predicted;
    if predicted > 0.0 && r.is_finite() {
        r.max(0.0)
    } else {
        0.0
    }
}

/// Mean absolute percentage error (%) over the rows measuring more than 0.
pub fn mape(predicted: &[f32], truth: &[f32]) -> Option<f64> {
    let (sum, n) = predicted
        .iter()
        .zip(truth)
        .filter(|(_, t)| **t > 0.0)
        .fold((0.0, 0usize), |(s, n), (p, t)| {
            (s + f64::from((p - t).abs() / t), n + 1)
        });
    (n > 0).then(|| 100.0 * sum / n as f64)
}

/// Per model, per configuration: the solo throughput the slowdown is scored
/// against (the profile's solo rows, configurations never measured alone
/// borrowing the nearest measured one); `None` when a model has no solo rows.
pub fn solo_tables(problem: &Problem, profile: &Profile) -> Option<Vec<Vec<f32>>> {
    output_maps(problem, profile, Target::RelativeToSolo)
        .ok()
        .map(|(maps, _)| maps.into_iter().map(|m| m.solo).collect())
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
#[derive(Debug, Clone, PartialEq)]
pub struct TrainOptions {
    pub target: Target,
    /// Share of rows held out to measure R²; 0 trains on all.
    pub holdout: f64,
    /// One key per co-location row: rows sharing a key are held out together
    /// (both orders of a measured pair), so the held-out score never sees a
    /// row's mirror in training. Empty: a stratified row-by-row hold-out.
    pub groups: Vec<String>,
    /// The field features the nets see.
    pub field: FieldFeatures,
    /// Which configurations they see: MeanField's own, or every model's (the
    /// Joint-MLP baseline, N ≤ `cv::JOINT_MAX_MODELS`).
    pub layout: Layout,
}

impl TrainOptions {
    /// The default target for `profile`, the default hold-out, the observed field.
    pub fn for_profile(profile: &Profile) -> Self {
        Self {
            target: default_target(profile),
            holdout: HOLDOUT_FRACTION,
            groups: Vec::new(),
            field: FieldFeatures::Observed,
            layout: Layout::MeanField,
        }
    }
}

/// `field`'s co-runner tables (none for the observed field): the co-runners'
/// solo profiles from the profile's solo rows, or the co-runner factors
/// learnt from the rows `train` alone (`group_of` holds every row's group,
/// for the factors' inner cross-validation).
pub fn corunner_tables(
    problem: &Problem,
    profile: &Profile,
    field: FieldFeatures,
    train: &[usize],
    group_of: &[usize],
    seed: u64,
) -> Result<Option<CorunnerTables>> {
    Ok(match field {
        FieldFeatures::Observed | FieldFeatures::Contention => None,
        FieldFeatures::CoRunnerSolo => Some(solo_corunner_tables(
            &solo_profiles(problem, profile).map_err(anyhow::Error::msg)?,
        )),
        FieldFeatures::CoRunnerFactors | FieldFeatures::ContentionFactors => {
            Some(factors::learn(problem, profile, train, group_of, seed))
        }
    })
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

/// Trains a bundle: a hold-out of `options.holdout` of the rows (stratified, or
/// grouped by `options.groups`) measures each model's R² of throughput and of
/// the slowdown and its MAPE (whatever the target); the shipped nets are the
/// ones trained on the rest. `progress(done, total)` counts epochs over all models.
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
    let mut rng = Rng::derive(seed, STREAM_HOLDOUT);
    let (train_rows, test_rows) = if options.groups.is_empty() {
        split::holdout(&split::strata(problem, profile), options.holdout, &mut rng)
    } else {
        if options.groups.len() != profile.rows.len() {
            bail!(
                "{} group keys for {} co-location rows",
                options.groups.len(),
                profile.rows.len()
            );
        }
        split::group_holdout(&options.groups, options.holdout, &mut rng)
    };
    if train_rows.len() < 2 || (options.holdout > 0.0 && test_rows.is_empty()) {
        bail!(
            "the profile has {} co-location rows: too few to train on and hold {:.0} % out",
            profile.rows.len(),
            options.holdout * 100.0
        );
    }
    let (maps, _) = output_maps(problem, profile, options.target)?;
    if options.layout == Layout::Joint && n_models > super::cv::JOINT_MAX_MODELS {
        bail!(
            "the Joint MLP takes every model's configuration as input: at most {} models, the scenario has {n_models}",
            super::cv::JOINT_MAX_MODELS
        );
    }
    let group_of = split::group_ids(&options.groups, profile.rows.len());
    let tables = corunner_tables(
        problem,
        profile,
        options.field,
        &train_rows,
        &group_of,
        seed,
    )?;
    let data = dataset::build_with(
        problem,
        profile,
        options.layout,
        options.field,
        tables.as_ref(),
    )?;
    let solo_profiles = match options.field {
        FieldFeatures::CoRunnerSolo => {
            Some(solo_profiles(problem, profile).map_err(anyhow::Error::msg)?)
        }
        _ => None,
    };
    let solo = solo_tables(problem, profile);
    let ranges = profile.throughput_ranges(problem);
    let total = n_models * config.epochs;
    let mut nets = Vec::with_capacity(n_models);
    let mut models = Vec::with_capacity(n_models);
    for (i, model) in problem.models.iter().enumerate() {
        let train = data[i].subset(&train_rows);
        let test = data[i].subset(&test_rows);
        let (net, skip) = train_net(
            &train,
            &maps[i],
            config,
            model_seed(seed, i),
            &model.name,
            &mut |e| progress(i * config.epochs + e, total),
        )?;
        let (held, holdout_ratios) = if test_rows.is_empty() {
            (Fidelity::default(), None)
        } else {
            let solo_rows: Option<Vec<f32>> = solo
                .as_ref()
                .map(|t| test.configs.iter().map(|&c| t[i][c as usize]).collect());
            let predicted = predict(&net, &test, &maps[i]);
            let f = fidelity(&predicted, &test.y, solo_rows.as_deref());
            if f.r2.is_none() {
                bail!(
                    "model '{}': its held-out throughput is constant, R² is undefined",
                    model.name
                );
            }
            (f, Some(measured_over_predicted(&predicted, &test.y)))
        };
        models.push(ModelMeta {
            name: model.name.clone(),
            family: model.family.clone(),
            kind: model.kind.clone(),
            unit: model.unit.clone(),
            features: layout_names(problem, i, options.layout, options.field),
            input_mean: net.input.mean.clone(),
            input_std: net.input.std.clone(),
            target_offset: net.target.offset,
            target_scale: net.target.scale,
            metrics: BundleMetrics {
                train_rows: train.rows(),
                holdout_rows: test.rows(),
                r2_holdout: held.r2,
                r2_slowdown_holdout: held.r2_slowdown,
                mape_holdout: held.mape,
                holdout_ratios,
                linear_skip: skip.map(|c| LinearSkip {
                    ridge_penalty: c.penalty,
                    mlp_weight: f64::from(c.mlp_weight),
                }),
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
            solo_profile: solo_profiles.as_ref().map(|s| s[i].clone()),
            corunner_factors: match (options.field, &tables) {
                (field, Some(t)) if field.is_learnt() => Some(t[i].clone()),
                _ => None,
            },
        });
        nets.push(net);
    }
    Ok(Bundle {
        meta: BundleMeta {
            format_version: BUNDLE_FORMAT_VERSION,
            scenario: scenario.name.clone(),
            scenario_toml: Some(scenario.source.clone()),
            target: options.target,
            field_features: options.field,
            layout: options.layout,
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
                linear_skip: config.linear_skip,
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
    let field = bundle.meta.field_features;
    let tables = bundle.corunner_tables();
    if field.has_corunner_tables() && tables.is_none() {
        bail!("the bundle lacks the co-runner tables its {field} field needs");
    }
    let data = dataset::build_with(
        &scenario.problem,
        profile,
        bundle.meta.layout,
        field,
        tables.as_ref(),
    )?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mape_skips_zero_truth() {
        let m = mape(&[1.1, 5.0], &[1.0, 0.0]).expect("one row counts");
        assert!((m - 10.0).abs() < 1e-4, "{m}");
        assert_eq!(mape(&[1.0], &[0.0]), None);
    }

    #[test]
    fn slowdown_r2_removes_what_the_configuration_explains() {
        // Two configurations (solo 10 and 100), each slowed by 0.5 or 0.9.
        let solo = [10.0, 10.0, 100.0, 100.0];
        let truth = [5.0, 9.0, 50.0, 90.0];
        // Right configuration, co-runner ignored: throughput R² 0.83, slowdown R² 0.
        let own_mean = [7.0, 7.0, 70.0, 70.0];
        let f = fidelity(&own_mean, &truth, Some(&solo));
        assert!(f.r2.expect("defined") > 0.8, "{f:?}");
        assert!(f.r2_slowdown.expect("defined").abs() < 1e-6, "{f:?}");
        let exact = fidelity(&truth, &truth, Some(&solo));
        assert_eq!((exact.r2, exact.r2_slowdown), (Some(1.0), Some(1.0)));
        assert_eq!(exact.mape, Some(0.0));
        assert_eq!(fidelity(&truth, &truth, None).r2_slowdown, None);
    }
}
