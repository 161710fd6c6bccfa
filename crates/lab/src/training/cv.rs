//! Cross-validation of the surrogate on a user's own profile, beside baselines
//! (`mfsched surrogate cv`).
//!
//! For each seed the co-location rows are split into k folds: stratified by
//! workload and variants, or, with group keys (`--group-by`), so that rows of one
//! group never straddle a split (both orders of a measured pair, the repeats of
//! one run). Every row is predicted once per seed by predictors trained on the
//! other folds; the metrics are computed on those out-of-fold predictions per
//! seed, then averaged (± std) over the seeds. A learning curve (`train_sizes`)
//! repeats this with each split's training folds cut to n groups (nested, a
//! seeded order per split), always scored on the whole test fold.
//!
//! Methods, each trained on each target (see `surrogate::target`), every
//! prediction turned back into throughput before scoring:
//! - **own-configuration mean**: the mean target of the model's configuration in
//!   the training folds (falling back to its variant's, then the model's). On
//!   the relative target this is *solo × the configuration's mean slowdown*.
//! - **pressure** (relative target, solo rows needed): no network, two factors:
//!   the own configuration's mean slowdown × each co-runner configuration's mean
//!   inflicted factor.
//! - **linear field**: ridge regression on the MeanField inputs (own
//!   configuration + field), for each field feature set asked for.
//! - **MeanField**: the surrogate itself, for each field feature set asked for
//!   (`features::FieldFeatures`).
//! - **Joint MLP** (N ≤ 3): one net per model over every model's configuration
//!   plus the state.
//!
//! Scores (`fit::fidelity`): R² of the slowdown (throughput / solo; where the
//! profile has solo rows) — the headline — MAPE and R² of throughput (rows
//! measuring 0 skipped), per model, per variant and overall (the mean over
//! models; MAPE pooled).

use super::dataset::{self, Layout, ModelData};
use super::fit::{
    corunner_tables, fidelity, mape, measured_over, model_seed, output_maps, solo_tables, train_net,
};
use super::split;
use crate::svg::{BarChart, BarGroup, LineChart, Series};
use anyhow::{Result, bail};
use mfsched_core::FloorMargin;
use mfsched_core::Problem;
use mfsched_core::Profile;
use mfsched_core::write_atomically;
use mfsched_nn::metrics::mean_std;
use mfsched_nn::ridge::{RIDGE_PER_ROW, Ridge};
use mfsched_nn::{MIN_INPUT_STD, TrainConfig};
use mfsched_rng::Rng;
use mfsched_surrogate::FieldFeatures;
use mfsched_surrogate::{OutputMap, Target};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest N for which the Joint MLP runs (its input grows with N).
pub const JOINT_MAX_MODELS: usize = 3;
const STREAM_FOLDS: u64 = 0x464f_4c44; // "FOLD"
const STREAM_SUBSET: u64 = 0x5355_4253_0000; // "SUBS" + fold
const STREAM_FIELD: u64 = 0x4649_0000_0000_0000; // "FI" + fold, size

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CvConfig {
    pub folds: usize,
    pub seeds: Vec<u64>,
    pub targets: Vec<Target>,
    /// The field features the linear field model and MeanField are run with,
    /// each its own row of the table.
    pub fields: Vec<FieldFeatures>,
    /// Columns whose values group rows (empty: every row its own group).
    pub group_by: Vec<String>,
    /// Run the Joint-MLP baseline (only where N ≤ [`JOINT_MAX_MODELS`]).
    pub joint: bool,
    /// Learning curve: training sets of these many groups (rows when
    /// ungrouped), drawn from each split's training folds, nested (each inside
    /// the next); scored on the whole test fold. Empty: no curve.
    pub train_sizes: Vec<usize>,
    /// α of the conformal coverage scored: each fold's floor margin is taken
    /// from the other folds' out-of-fold ratios at this miss rate.
    pub miss_rate: f64,
    #[serde(skip)]
    pub train: TrainConfig,
    #[serde(skip)]
    pub jobs: usize,
}

/// The discriminants seed the nets (`predict_all`): never renumber them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    OwnConfigMean = 0,
    LinearField = 1,
    #[serde(rename = "meanfield")]
    MeanField = 2,
    JointMlp = 3,
    Pressure = 4,
}

impl Method {
    pub fn label(self) -> &'static str {
        match self {
            Method::OwnConfigMean => "own-config mean",
            Method::LinearField => "linear field",
            Method::MeanField => "MeanField",
            Method::JointMlp => "Joint MLP",
            Method::Pressure => "pressure",
        }
    }

    fn trains_a_net(self) -> bool {
        matches!(self, Method::MeanField | Method::JointMlp)
    }
}
/// Mean ± std over seeds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stat {
    pub mean: f64,
    pub std: f64,
}

impl Stat {
    fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let (mean, std) = mean_std(values);
        Some(Self { mean, std })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scores {
    pub r2: Option<Stat>,
    /// R² of throughput / solo (the slowdown), where solo throughput is known.
    pub r2_relative: Option<Stat>,
    pub mape: Option<Stat>,
    /// The share of rows whose measured throughput is at or above the
    /// split-conformal lower bound at α = `miss_rate` (the margin of a floor),
    /// the bound taken from the other folds' out-of-fold ratios: 1 − α when
    /// the margins are calibrated.
    pub coverage: Option<Stat>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelScores {
    pub model: String,
    #[serde(flatten)]
    pub scores: Scores,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariantScores {
    pub model: String,
    pub variant: String,
    pub rows: usize,
    #[serde(flatten)]
    pub scores: Scores,
}

/// One method trained on one target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodResult {
    pub target: Target,
    pub method: Method,
    /// The field features its inputs carried (the observed state for methods
    /// that read no field).
    pub field: FieldFeatures,
    /// Mean over models (MAPE: pooled over every row and model).
    pub overall: Scores,
    pub per_model: Vec<ModelScores>,
    pub per_variant: Vec<VariantScores>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CvReport {
    pub scenario: String,
    pub data: String,
    pub rows: usize,
    pub groups: usize,
    pub models: Vec<String>,
    pub config: CvConfig,
    pub results: Vec<MethodResult>,
    /// One point per (training-set size, target, method, field).
    pub learning_curve: Vec<CurvePoint>,
}

/// A method's overall scores trained on `n` groups per split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    pub n: usize,
    pub target: Target,
    pub method: Method,
    pub field: FieldFeatures,
    pub overall: Scores,
}

/// Out-of-fold throughput predictions: `[seed][model][row]`.
type Predictions = Vec<Vec<Vec<f32>>>;

/// What a table row is: a method trained on a target with a field.
type Key = (Target, Method, FieldFeatures);

/// Per seed, per fold: (training rows, test rows).
type Splits = Vec<Vec<(Vec<usize>, Vec<usize>)>>;

struct Setup<'a> {
    problem: &'a Problem,
    profile: &'a Profile,
    /// Every row's group (a learnt field's inner cross-validation folds them).
    group_of: Vec<usize>,
    maps: BTreeMap<Target, Vec<OutputMap>>,
    /// Per field not learnt: the MeanField matrices.
    mf: BTreeMap<FieldFeatures, Vec<ModelData>>,
    joint: Option<Vec<ModelData>>,
    /// Per model, per configuration: solo throughput, where every model has solo rows.
    solo: Option<Vec<Vec<f32>>>,
    keys: Vec<Key>,
}

impl Setup<'_> {
    fn observed(&self) -> &[ModelData] {
        &self.mf[&FieldFeatures::Observed]
    }

    /// Per seed and fold of `splits`, per learnt field the keys use: the
    /// MeanField matrices with the field learnt from that split's training
    /// rows alone, seeded per seed, fold and training size.
    fn learnt(
        &self,
        seeds: &[u64],
        splits: &Splits,
        size: usize,
    ) -> Result<BTreeMap<(usize, usize, FieldFeatures), Vec<ModelData>>> {
        let mut fields: Vec<FieldFeatures> = self
            .keys
            .iter()
            .map(|k| k.2)
            .filter(FieldFeatures::is_learnt)
            .collect();
        fields.sort_unstable();
        fields.dedup();
        let mut out = BTreeMap::new();
        for (seed, per_fold) in splits.iter().enumerate() {
            for (fold, (train, _)) in per_fold.iter().enumerate() {
                for &field in &fields {
                    let stream = STREAM_FIELD | ((fold as u64) << 32) | size as u64;
                    let field_seed = Rng::derive(seeds[seed], stream).next_u64();
                    let tables = corunner_tables(
                        self.problem,
                        self.profile,
                        field,
                        train,
                        &self.group_of,
                        field_seed,
                    )?;
                    let data = dataset::build_with(
                        self.problem,
                        self.profile,
                        Layout::MeanField,
                        field,
                        tables.as_ref(),
                    )?;
                    out.insert((seed, fold, field), data);
                }
            }
        }
        Ok(out)
    }
}

/// What [`run`] measured, with what `--export` writes: the fold of every row
/// per seed and the full run's out-of-fold predictions.
#[derive(Debug)]
pub struct CvRun {
    pub folds: Vec<Vec<usize>>,
    predictions: BTreeMap<Key, Predictions>,
}

/// Runs the cross-validation. `groups` holds one key per co-location row
/// (empty: stratified folds). `progress(done, total)` counts trained nets,
/// over the full run and every learning-curve size.
pub fn run(
    config: &CvConfig,
    problem: &Problem,
    profile: &Profile,
    groups: &[String],
    data_name: &str,
    scenario_name: &str,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(CvReport, CvRun)> {
    let rows = profile.rows.len();
    if config.folds < 2 {
        bail!("--folds must be at least 2, got {}", config.folds);
    }
    if config.seeds.is_empty() || config.targets.is_empty() || config.fields.is_empty() {
        bail!("give at least one seed, one target and one field");
    }
    if !groups.is_empty() && groups.len() != rows {
        bail!("{} group keys for {rows} rows", groups.len());
    }
    let group_of = split::group_ids(groups, rows);
    let group_count = group_of.iter().max().map_or(0, |&g| g + 1);
    if group_count < config.folds {
        bail!(
            "{group_count} groups cannot fill {} folds: lower --folds",
            config.folds
        );
    }
    let mut maps = BTreeMap::new();
    for &t in &config.targets {
        maps.insert(t, output_maps(problem, profile, t)?.0);
    }
    // The fields read from the whole profile, built once; a learnt field is
    // built per split, from its training rows (`Setup::learnt`).
    let mut mf = BTreeMap::new();
    for field in std::iter::once(FieldFeatures::Observed).chain(config.fields.iter().copied()) {
        if !field.is_learnt()
            && let std::collections::btree_map::Entry::Vacant(slot) = mf.entry(field)
        {
            let tables = corunner_tables(problem, profile, field, &[], &group_of, 0)?;
            slot.insert(dataset::build_with(
                problem,
                profile,
                Layout::MeanField,
                field,
                tables.as_ref(),
            )?);
        }
    }
    let solo = solo_tables(problem, profile);
    let joint = config.joint && problem.models.len() <= JOINT_MAX_MODELS;
    let mut keys = Vec::new();
    for &target in &config.targets {
        let observed = FieldFeatures::Observed;
        keys.push((target, Method::OwnConfigMean, observed));
        if target == Target::RelativeToSolo && solo.is_some() {
            keys.push((target, Method::Pressure, observed));
        }
        for method in [Method::LinearField, Method::MeanField] {
            keys.extend(config.fields.iter().map(|&f| (target, method, f)));
        }
        if joint {
            keys.push((target, Method::JointMlp, observed));
        }
    }
    let setup = Setup {
        problem,
        profile,
        group_of: group_of.clone(),
        maps,
        mf,
        joint: joint.then(|| dataset::build(problem, profile, Layout::Joint)),
        solo,
        keys,
    };
    let strata = split::strata(problem, profile);
    let folds: Vec<Vec<usize>> = config
        .seeds
        .iter()
        .map(|&s| {
            let mut rng = Rng::derive(s, STREAM_FOLDS);
            if groups.is_empty() {
                split::stratified_folds(&strata, config.folds, &mut rng)
            } else {
                split::group_folds(groups, config.folds, &mut rng)
            }
        })
        .collect();
    let full: Splits = folds
        .iter()
        .map(|f| {
            (0..config.folds)
                .map(|k| (0..rows).partition(|&r| f[r] != k))
                .collect()
        })
        .collect();
    let mut curve_splits = Vec::new();
    for &n in &config.train_sizes {
        curve_splits.push((n, subsample(config, &full, &group_of, n)?));
    }
    let nets_per_run = setup.keys.iter().filter(|k| k.1.trains_a_net()).count()
        * problem.models.len()
        * config.seeds.len()
        * config.folds;
    let total = nets_per_run * (1 + curve_splits.len());
    let done = AtomicUsize::new(0);
    let counted = |_: usize, _: usize| progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
    let predictions = predict_all(config, &setup, &full, 0, &counted)?;
    let score_all = |predictions: &BTreeMap<Key, Predictions>| {
        setup
            .keys
            .iter()
            .map(|&(target, method, field)| {
                score(
                    problem,
                    setup.observed(),
                    setup.solo.as_deref(),
                    (&folds, config.miss_rate),
                    (target, method, field),
                    &predictions[&(target, method, field)],
                )
            })
            .collect::<Vec<_>>()
    };
    let results = score_all(&predictions);
    let mut learning_curve = Vec::new();
    for (n, splits) in &curve_splits {
        let p = predict_all(config, &setup, splits, *n, &counted)?;
        for r in score_all(&p) {
            learning_curve.push(CurvePoint {
                n: *n,
                target: r.target,
                method: r.method,
                field: r.field,
                overall: r.overall,
            });
        }
    }
    let report = CvReport {
        scenario: scenario_name.to_string(),
        data: data_name.to_string(),
        rows,
        groups: group_count,
        models: problem.models.iter().map(|m| m.name.clone()).collect(),
        config: config.clone(),
        results,
        learning_curve,
    };
    Ok((report, CvRun { folds, predictions }))
}

/// Each split's training rows cut to the rows of `n` of its groups: the
/// groups in a seeded order (per seed and fold, the same for every n), so a
/// smaller training set is always inside a larger one.
fn subsample(config: &CvConfig, full: &Splits, group_of: &[usize], n: usize) -> Result<Splits> {
    let mut out = Vec::with_capacity(full.len());
    for (s, per_fold) in full.iter().enumerate() {
        let mut folds = Vec::with_capacity(per_fold.len());
        for (k, (train, test)) in per_fold.iter().enumerate() {
            let mut order: Vec<usize> = train.iter().map(|&r| group_of[r]).collect();
            order.sort_unstable();
            order.dedup();
            if n == 0 || n > order.len() {
                bail!(
                    "--train-sizes {n}: fold {} of seed {} has {} groups to train on \
                     (sizes run from 1 to the smallest training folds' count)",
                    k + 1,
                    config.seeds[s],
                    order.len()
                );
            }
            split::shuffle(
                &mut order,
                &mut Rng::derive(config.seeds[s], STREAM_SUBSET + k as u64),
            );
            let mut keep = vec![false; group_of.len()];
            for &g in &order[..n] {
                keep[g] = true;
            }
            let train: Vec<usize> = train
                .iter()
                .copied()
                .filter(|&r| keep[group_of[r]])
                .collect();
            folds.push((train, test.clone()));
        }
        out.push(folds);
    }
    Ok(out)
}

/// One net to train: (seed index, fold, table row, model).
#[derive(Debug, Clone, Copy)]
struct Job {
    seed: usize,
    fold: usize,
    key: Key,
    model: usize,
}

/// Out-of-fold predictions of every table row on `splits`; `size` (0 for the
/// full training folds) joins the nets' seeds, so the full run keeps the seeds
/// it always had.
fn predict_all(
    config: &CvConfig,
    setup: &Setup<'_>,
    splits: &Splits,
    size: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<BTreeMap<Key, Predictions>> {
    let n = setup.problem.models.len();
    let rows = setup.observed().first().map_or(0, ModelData::rows);
    let learnt = setup.learnt(&config.seeds, splits, size)?;
    let mf = |seed: usize, fold: usize, field: FieldFeatures| -> &[ModelData] {
        match learnt.get(&(seed, fold, field)) {
            Some(data) => data,
            None => &setup.mf[&field],
        }
    };
    let mut out: BTreeMap<Key, Predictions> = setup
        .keys
        .iter()
        .map(|&k| (k, vec![vec![vec![f32::NAN; rows]; n]; config.seeds.len()]))
        .collect();
    // The cheap baselines, inline.
    for (seed, per_fold) in splits.iter().enumerate() {
        for (fold, (train, test)) in per_fold.iter().enumerate() {
            for &key in setup.keys.iter().filter(|k| !k.1.trains_a_net()) {
                let (target, method, field) = key;
                for model in 0..n {
                    let data = &mf(seed, fold, field)[model];
                    let map = &setup.maps[&target][model];
                    let (tr, te) = (data.subset(train), data.subset(test));
                    let values = match method {
                        Method::OwnConfigMean => {
                            own_config_mean(setup.problem, model, &tr, &te, map)
                        }
                        Method::LinearField => linear_field(&tr, &te, map),
                        Method::Pressure => match &setup.solo {
                            Some(solo) => {
                                pressure(setup.problem, setup.observed(), solo, model, train, test)
                            }
                            None => continue,
                        },
                        Method::MeanField | Method::JointMlp => continue,
                    };
                    let slot = &mut out.get_mut(&key).expect("made")[seed][model];
                    for (&r, v) in test.iter().zip(values) {
                        slot[r] = v;
                    }
                }
            }
        }
    }
    // The nets, on worker threads; each seeded from what it evaluates alone.
    let mut jobs = Vec::new();
    for seed in 0..config.seeds.len() {
        for fold in 0..config.folds {
            for &key in setup.keys.iter().filter(|k| k.1.trains_a_net()) {
                for model in 0..n {
                    jobs.push(Job {
                        seed,
                        fold,
                        key,
                        model,
                    });
                }
            }
        }
    }
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(Job, Result<Vec<f32>>)>> = Mutex::new(Vec::new());
    let workers = config.jobs.clamp(1, jobs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&job) = jobs.get(k) else { break };
                    let (train, test) = &splits[job.seed][job.fold];
                    let (target, method, field) = job.key;
                    let data = match method {
                        Method::JointMlp => &setup.joint.as_ref().expect("joint built")[job.model],
                        _ => &mf(job.seed, job.fold, field)[job.model],
                    };
                    let map = &setup.maps[&target][job.model];
                    let seed = Rng::derive(
                        config.seeds[job.seed],
                        ((job.fold as u64) << 40)
                            | ((target as u64) << 32)
                            | ((method as u64) << 24)
                            | ((field as u64) << 20)
                            | size as u64,
                    )
                    .next_u64();
                    let result = train_net(
                        &data.subset(train),
                        map,
                        &config.train,
                        model_seed(seed, job.model),
                        &setup.problem.models[job.model].name,
                        &mut |_| {},
                    )
                    .map(|(net, _)| super::fit::predict(&net, &data.subset(test), map));
                    results.lock().expect("no poisoning").push((job, result));
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, jobs.len());
                }
            });
        }
    });
    for (job, result) in results.into_inner().expect("no poisoning") {
        let values = result?;
        let (_, test) = &splits[job.seed][job.fold];
        let slot = &mut out.get_mut(&job.key).expect("made")[job.seed][job.model];
        for (&r, v) in test.iter().zip(values) {
            slot[r] = v;
        }
    }
    Ok(out)
}

/// Means of a value by configuration, falling back to the configuration's
/// variant, then to every row.
struct ConfigMeans {
    by_config: BTreeMap<u32, (f64, u32)>,
    by_variant: BTreeMap<usize, (f64, u32)>,
    all: (f64, u32),
}

impl ConfigMeans {
    fn new() -> Self {
        Self {
            by_config: BTreeMap::new(),
            by_variant: BTreeMap::new(),
            all: (0.0, 0),
        }
    }

    fn add(&mut self, configs: &[mfsched_core::LocalConfig], c: u32, v: f64) {
        for acc in [
            self.by_config.entry(c).or_default(),
            self.by_variant
                .entry(configs[c as usize].variant)
                .or_default(),
            &mut self.all,
        ] {
            acc.0 += v;
            acc.1 += 1;
        }
    }

    /// The mean for configuration `c`; `None` when no row was added at all.
    fn get(&self, configs: &[mfsched_core::LocalConfig], c: u32) -> Option<f64> {
        let mean = |acc: &(f64, u32)| acc.0 / f64::from(acc.1.max(1));
        if self.all.1 == 0 {
            return None;
        }
        Some(
            self.by_config
                .get(&c)
                .or_else(|| self.by_variant.get(&configs[c as usize].variant))
                .map_or_else(|| mean(&self.all), mean),
        )
    }
}

/// The mean encoded target of the test row's configuration in the training
/// rows (else of its variant, else of the model), decoded.
fn own_config_mean(
    problem: &Problem,
    model: usize,
    train: &ModelData,
    test: &ModelData,
    map: &OutputMap,
) -> Vec<f32> {
    let configs = &problem.models[model].configs;
    let mut means = ConfigMeans::new();
    for (&y, &c) in train.y.iter().zip(&train.configs) {
        means.add(configs, c, f64::from(map.encode(c as usize, f64::from(y))));
    }
    test.configs
        .iter()
        .map(|&c| map.apply(c as usize, means.get(configs, c).unwrap_or(0.0) as f32))
        .collect()
}

/// The two-factor pressure baseline, no network: model `i`'s slowdown is its
/// own configuration's mean slowdown times, for each co-runner, the mean
/// factor that co-runner's configuration inflicts (the training rows'
/// slowdown over the own mean), all means from the training rows.
fn pressure(
    problem: &Problem,
    data: &[ModelData],
    solo: &[Vec<f32>],
    i: usize,
    train: &[usize],
    test: &[usize],
) -> Vec<f32> {
    let configs = |m: usize| problem.models[m].configs.as_slice();
    let c = |m: usize, r: usize| data[m].configs[r];
    let slowdown = |r: usize| f64::from(data[i].y[r]) / f64::from(solo[i][c(i, r) as usize]);
    let mut own = ConfigMeans::new();
    for &r in train {
        own.add(configs(i), c(i, r), slowdown(r));
    }
    let own_at = |r: usize| own.get(configs(i), c(i, r)).unwrap_or(1.0);
    let partners: Vec<(usize, ConfigMeans)> = (0..data.len())
        .filter(|&j| j != i)
        .map(|j| {
            let mut inflicted = ConfigMeans::new();
            for &r in train {
                let base = own_at(r);
                if base > 0.0 {
                    inflicted.add(configs(j), c(j, r), slowdown(r) / base);
                }
            }
            (j, inflicted)
        })
        .collect();
    test.iter()
        .map(|&r| {
            let factor: f64 = partners
                .iter()
                .map(|(j, m)| m.get(configs(*j), c(*j, r)).unwrap_or(1.0))
                .product();
            (f64::from(solo[i][c(i, r) as usize]) * own_at(r) * factor).max(0.0) as f32
        })
        .collect()
}

/// Ridge regression of the encoded target on the standardised inputs, decoded.
fn linear_field(train: &ModelData, test: &ModelData, map: &OutputMap) -> Vec<f32> {
    let w = train.width;
    let column = |data: &ModelData, j: usize| -> Vec<f64> {
        (0..data.rows())
            .map(|r| f64::from(data.x[r * w + j]))
            .collect()
    };
    let stats: Vec<(f64, f64)> = (0..w)
        .map(|j| {
            let (mean, std) = mean_std(&column(train, j));
            (mean, if std > MIN_INPUT_STD { std } else { 1.0 })
        })
        .collect();
    let standardised = |data: &ModelData| -> Vec<f64> {
        data.x
            .chunks_exact(w)
            .flat_map(|r| {
                r.iter()
                    .zip(&stats)
                    .map(|(&v, (mean, std))| (f64::from(v) - mean) / std)
            })
            .collect()
    };
    let y: Vec<f64> = train
        .y
        .iter()
        .zip(&train.configs)
        .map(|(&y, &c)| f64::from(map.encode(c as usize, f64::from(y))))
        .collect();
    let fit = Ridge::fit(&standardised(train), &y, w, RIDGE_PER_ROW);
    standardised(test)
        .chunks_exact(w)
        .zip(&test.configs)
        .map(|(z, &c)| map.apply(c as usize, fit.predict(z) as f32))
        .collect()
}

/// Per seed, per model, the conformal coverage of the model's rows as
/// (covered, rows): for each fold, the lower ratio at `miss_rate` from the
/// other folds' out-of-fold measured / predicted ratios, and how many of the
/// fold's rows reach it.
fn coverage(
    data: &[ModelData],
    predictions: &Predictions,
    folds: &[Vec<usize>],
    miss_rate: f64,
) -> Vec<Vec<(usize, usize)>> {
    predictions
        .iter()
        .zip(folds)
        .map(|(seed, fold_of)| {
            let folds = fold_of.iter().max().map_or(0, |&k| k + 1);
            data.iter()
                .zip(seed)
                .map(|(d, predicted)| {
                    let ratio: Vec<f32> = predicted
                        .iter()
                        .zip(&d.y)
                        .map(|(&p, &t)| measured_over(p, t))
                        .collect();
                    let (mut covered, mut rows) = (0, 0);
                    for k in 0..folds {
                        let calibration: Vec<f32> = (0..d.rows())
                            .filter(|&r| fold_of[r] != k)
                            .map(|r| ratio[r])
                            .collect();
                        let Some(margin) = FloorMargin::conformal(&calibration, miss_rate) else {
                            continue;
                        };
                        for r in (0..d.rows()).filter(|&r| fold_of[r] == k) {
                            rows += 1;
                            covered += usize::from(f64::from(ratio[r]) >= margin.ratio);
                        }
                    }
                    (covered, rows)
                })
                .collect()
        })
        .collect()
}

/// The coverage shares over seeds of the (covered, rows) `pick` sums from a
/// seed's per-model counts (seeds that scored no row left out).
fn coverage_stat(
    per_seed: &[Vec<(usize, usize)>],
    pick: impl Fn(&[(usize, usize)]) -> (usize, usize),
) -> Option<Stat> {
    Stat::of(
        &per_seed
            .iter()
            .map(|models| pick(models))
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| c as f64 / n as f64)
            .collect::<Vec<_>>(),
    )
}

fn score(
    problem: &Problem,
    data: &[ModelData],
    solo: Option<&[Vec<f32>]>,
    (folds, miss_rate): (&[Vec<usize>], f64),
    (target, method, field): Key,
    predictions: &Predictions,
) -> MethodResult {
    let seeds = predictions.len();
    // Scores of model `i` on the rows `keep` selects, one per seed.
    let scores_of = |i: usize, keep: &dyn Fn(usize) -> bool| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let d = &data[i];
        let rows: Vec<usize> = (0..d.rows()).filter(|&r| keep(r)).collect();
        let truth: Vec<f32> = rows.iter().map(|&r| d.y[r]).collect();
        let solo_rows: Option<Vec<f32>> =
            solo.map(|t| rows.iter().map(|&r| t[i][d.configs[r] as usize]).collect());
        let (mut r2s, mut rel, mut mapes) = (Vec::new(), Vec::new(), Vec::new());
        for seed in predictions {
            let p: Vec<f32> = rows.iter().map(|&r| seed[i][r]).collect();
            let f = fidelity(&p, &truth, solo_rows.as_deref());
            r2s.extend(f.r2);
            rel.extend(f.r2_slowdown);
            mapes.extend(f.mape);
        }
        (r2s, rel, mapes)
    };
    let n = problem.models.len();
    let per_model_raw: Vec<_> = (0..n).map(|i| scores_of(i, &|_| true)).collect();
    let covered = coverage(data, predictions, folds, miss_rate);
    let per_model = problem
        .models
        .iter()
        .zip(&per_model_raw)
        .enumerate()
        .map(|(i, (m, (a, b, c)))| ModelScores {
            model: m.name.clone(),
            scores: Scores {
                r2: Stat::of(a),
                r2_relative: Stat::of(b),
                mape: Stat::of(c),
                coverage: coverage_stat(&covered, |models| models[i]),
            },
        })
        .collect();
    // Overall, per seed: the mean R² over models, the MAPE pooled over all.
    let per_seed = |pick: &dyn Fn(usize, usize) -> Option<f64>| -> Vec<f64> {
        (0..seeds)
            .filter_map(|s| {
                let values: Vec<f64> = (0..n).filter_map(|i| pick(i, s)).collect();
                (values.len() == n).then(|| values.iter().sum::<f64>() / n as f64)
            })
            .collect()
    };
    let pooled_mape: Vec<f64> = predictions
        .iter()
        .filter_map(|seed| {
            let p: Vec<f32> = seed.iter().flatten().copied().collect();
            let t: Vec<f32> = data.iter().flat_map(|d| d.y.iter().copied()).collect();
            mape(&p, &t)
        })
        .collect();
    let overall = Scores {
        r2: Stat::of(&per_seed(&|i, s| per_model_raw[i].0.get(s).copied())),
        r2_relative: Stat::of(&per_seed(&|i, s| per_model_raw[i].1.get(s).copied())),
        mape: Stat::of(&pooled_mape),
        coverage: coverage_stat(&covered, |models| {
            models
                .iter()
                .fold((0, 0), |(c, n), &(mc, mn)| (c + mc, n + mn))
        }),
    };
    let mut per_variant = Vec::new();
    for (i, m) in problem.models.iter().enumerate() {
        for (v, variant) in m.variants.iter().enumerate() {
            let keep = |r: usize| m.configs[data[i].configs[r] as usize].variant == v;
            let rows = (0..data[i].rows()).filter(|&r| keep(r)).count();
            if rows == 0 {
                continue;
            }
            let (a, b, c) = scores_of(i, &keep);
            per_variant.push(VariantScores {
                model: m.name.clone(),
                variant: variant.name.clone(),
                rows,
                scores: Scores {
                    r2: Stat::of(&a),
                    r2_relative: Stat::of(&b),
                    mape: Stat::of(&c),
                    coverage: None,
                },
            });
        }
    }
    MethodResult {
        target,
        method,
        field,
        overall,
        per_model,
        per_variant,
    }
}

fn stat_text(s: Option<Stat>, digits: usize) -> String {
    s.map_or_else(
        || "-".to_string(),
        |s| format!("{:.digits$} ± {:.digits$}", s.mean, s.std),
    )
}

/// A table row's name: the method, and the field where it is not the observed one.
fn row_label(method: Method, field: FieldFeatures) -> String {
    if field.is_observed() {
        method.label().to_string()
    } else {
        format!("{} + {field}", method.label())
    }
}

impl MethodResult {
    pub fn label(&self) -> String {
        row_label(self.method, self.field)
    }
}

impl CvReport {
    /// Whether any row has a slowdown score (the profile has solo rows).
    fn has_slowdown(&self) -> bool {
        self.results.iter().any(|r| r.overall.r2_relative.is_some())
    }

    /// The headline score of a row: the slowdown's R² where the profile has
    /// solo rows, else throughput R².
    fn headline(&self, s: &Scores) -> Option<Stat> {
        if self.has_slowdown() {
            s.r2_relative
        } else {
            s.r2
        }
    }

    fn headline_name(&self) -> &'static str {
        if self.has_slowdown() {
            "R² of slowdown"
        } else {
            "R² of throughput"
        }
    }

    /// The summary table (also the start of the markdown report): the slowdown
    /// first (the score that separates methods), then MAPE and throughput R².
    pub fn table(&self) -> String {
        let mut out = format!(
            "| target | method | R² of slowdown | MAPE % | coverage at α {} | R² | {} |\n|---|---|---|---|---|---|{}\n",
            self.config.miss_rate,
            self.models
                .iter()
                .map(|m| format!("R² {m}"))
                .collect::<Vec<_>>()
                .join(" | "),
            "---|".repeat(self.models.len())
        );
        for r in &self.results {
            out += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.target,
                r.label(),
                stat_text(r.overall.r2_relative, 4),
                stat_text(r.overall.mape, 2),
                stat_text(r.overall.coverage, 3),
                stat_text(r.overall.r2, 4),
                r.per_model
                    .iter()
                    .map(|m| stat_text(m.scores.r2, 4))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
        out
    }

    /// The learning curve as a table: one row per training-set size, one column
    /// per (target, method), the headline score.
    pub fn curve_table(&self) -> String {
        if self.learning_curve.is_empty() {
            return String::new();
        }
        let columns: Vec<(Target, Method, FieldFeatures)> = self
            .results
            .iter()
            .map(|r| (r.target, r.method, r.field))
            .collect();
        let mut out = format!(
            "| n | {} |\n|---|{}\n",
            columns
                .iter()
                .map(|&(t, m, f)| format!("{} ({t})", row_label(m, f)))
                .collect::<Vec<_>>()
                .join(" | "),
            "---|".repeat(columns.len())
        );
        for &n in &self.config.train_sizes {
            let cells: Vec<String> = columns
                .iter()
                .map(|&(t, m, f)| {
                    self.learning_curve
                        .iter()
                        .find(|p| p.n == n && p.target == t && p.method == m && p.field == f)
                        .map_or_else(|| "-".into(), |p| stat_text(self.headline(&p.overall), 3))
                })
                .collect();
            out += &format!("| {n} | {} |\n", cells.join(" | "));
        }
        out
    }

    /// The learning curve: the headline score against the training-set size,
    /// one line per (target, method), ± std over seeds as a band.
    pub fn curve_chart(&self) -> String {
        let series = self
            .results
            .iter()
            .map(|r| {
                let points: Vec<&CurvePoint> = self
                    .learning_curve
                    .iter()
                    .filter(|p| p.target == r.target && p.method == r.method && p.field == r.field)
                    .filter(|p| self.headline(&p.overall).is_some())
                    .collect();
                let stat = |p: &CurvePoint| self.headline(&p.overall).expect("filtered");
                let mut s = Series::new(
                    if self.config.targets.len() > 1 {
                        format!("{} ({})", r.label(), r.target)
                    } else {
                        r.label()
                    },
                    points.iter().map(|p| (p.n as f64, stat(p).mean)).collect(),
                );
                s.band = Some(points.iter().map(|p| stat(p).std).collect());
                s.dashed = !r.method.trains_a_net();
                s
            })
            .collect();
        LineChart {
            title: format!(
                "Learning curve, {} ({} folds × {} seeds, out of fold)",
                self.scenario,
                self.config.folds,
                self.config.seeds.len()
            ),
            x_label: if self.config.group_by.is_empty() {
                "training rows n".into()
            } else {
                format!("training groups n (by {})", self.config.group_by.join(", "))
            },
            y_label: self.headline_name().into(),
            series,
            references: Vec::new(),
            log_x: true,
            y_range: None,
        }
        .render()
    }

    /// Per variant, the R² of throughput of every method, one table per target.
    fn variant_tables(&self) -> String {
        let mut out = String::new();
        for target in &self.config.targets {
            let results: Vec<&MethodResult> = self
                .results
                .iter()
                .filter(|r| r.target == *target)
                .collect();
            let Some(first) = results.first() else {
                continue;
            };
            out += &format!(
                "\n### Per variant, trained on the {target} target (R² of slowdown; MAPE %)\n\n| model | variant | rows | {} |\n|---|---|---|{}\n",
                results
                    .iter()
                    .map(|r| r.label())
                    .collect::<Vec<_>>()
                    .join(" | "),
                "---|".repeat(results.len())
            );
            for (k, v) in first.per_variant.iter().enumerate() {
                let cells: Vec<String> = results
                    .iter()
                    .map(|r| {
                        let s = &r.per_variant[k].scores;
                        format!(
                            "{}; {}",
                            stat_text(s.r2_relative.or(s.r2), 3),
                            stat_text(s.mape, 1)
                        )
                    })
                    .collect();
                out += &format!(
                    "| {} | {} | {} | {} |\n",
                    v.model,
                    v.variant,
                    v.rows,
                    cells.join(" | ")
                );
            }
        }
        out
    }

    /// The headline score per method, grouped by target.
    pub fn chart(&self) -> String {
        let mut labels: Vec<String> = Vec::new();
        for r in &self.results {
            if !labels.contains(&r.label()) {
                labels.push(r.label());
            }
        }
        BarChart {
            title: format!(
                "Held-out {}, {} ({} rows, {} folds × {} seeds)",
                self.headline_name(),
                self.scenario,
                self.rows,
                self.config.folds,
                self.config.seeds.len()
            ),
            y_label: format!("{} (out of fold)", self.headline_name()),
            bars: labels.clone(),
            groups: self
                .config
                .targets
                .iter()
                .map(|t| BarGroup {
                    label: format!("trained on {t}"),
                    values: labels
                        .iter()
                        .map(|l| {
                            self.results
                                .iter()
                                .find(|r| r.target == *t && r.label() == *l)
                                .and_then(|r| self.headline(&r.overall))
                                .map(|s| s.mean)
                        })
                        .collect(),
                })
                .collect(),
        }
        .render()
    }

    pub fn markdown(&self, command: &str) -> String {
        let curve = if self.learning_curve.is_empty() {
            String::new()
        } else {
            format!(
                "\n## Learning curve ({} at each training-set size n, {})\n\n{}\n![learning curve](cv-curve.svg)\n",
                self.headline_name(),
                if self.config.group_by.is_empty() {
                    "n rows drawn from each split's training folds".to_string()
                } else {
                    format!(
                        "n groups by {} drawn from each split's training folds",
                        self.config.group_by.join(", ")
                    )
                },
                self.curve_table()
            )
        };
        format!(
            "# Surrogate cross-validation: {}\n\n`{command}`\n\nData: {} ({} co-location rows in {} groups, models {}), {} folds × seeds {:?}, \
             {} epochs per net, linear skip {}. Every figure below is from this run: out-of-fold predictions, \
             scored per seed, mean ± std over seeds. *R² of slowdown* is of throughput / solo \
             throughput (where the profile has solo rows), the score that separates methods; \
             *MAPE* and *R²* are of throughput.\n\n{}\n![scores per method](cv.svg)\n{curve}{}",
            self.scenario,
            self.data,
            self.rows,
            self.groups,
            self.models.join(", "),
            self.config.folds,
            self.config.seeds,
            self.config.train.epochs,
            if self.config.train.linear_skip {
                "on"
            } else {
                "off"
            },
            self.table(),
            self.variant_tables()
        )
    }

    /// Writes `cv.json`, `cv.md`, `cv.svg` and, with a learning curve,
    /// `cv-curve.svg` into `dir`, each atomically.
    pub fn write(&self, dir: &Path, command: &str) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::json!({
            "command": command,
            "epochs": self.config.train.epochs,
            "linear_skip": self.config.train.linear_skip,
            "report": self,
        });
        let mut files = vec![
            ("cv.json", serde_json::to_string_pretty(&json)? + "\n"),
            ("cv.md", self.markdown(command)),
            ("cv.svg", self.chart()),
        ];
        if !self.learning_curve.is_empty() {
            files.push(("cv-curve.svg", self.curve_chart()));
        }
        let mut written = Vec::new();
        for (name, text) in files {
            let path = dir.join(name);
            write_atomically(&path, text.as_bytes())?;
            written.push(path);
        }
        Ok(written)
    }
}

impl CvRun {
    /// Writes `folds.csv` (per seed, every co-location row's group and fold)
    /// and `predictions.csv` (the full run's out-of-fold prediction of every
    /// row, model and table row) into `dir`, each atomically. `row` numbers
    /// the profile's co-location rows from 1 in file order, solo rows not
    /// counted (as `surrogate eval --predictions` does); folds count from 1.
    pub fn export(
        &self,
        dir: &Path,
        config: &CvConfig,
        problem: &Problem,
        profile: &Profile,
        groups: &[String],
    ) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut folds = csv::Writer::from_writer(Vec::new());
        folds.write_record(["seed", "row", "group", "fold"])?;
        for (s, per_row) in self.folds.iter().enumerate() {
            for (r, f) in per_row.iter().enumerate() {
                folds.write_record([
                    config.seeds[s].to_string(),
                    (r + 1).to_string(),
                    groups
                        .get(r)
                        .map_or_else(|| (r + 1).to_string(), |g| g.replace('\u{1f}', "|")),
                    (f + 1).to_string(),
                ])?;
            }
        }
        let mut preds = csv::Writer::from_writer(Vec::new());
        preds.write_record([
            "seed",
            "target",
            "method",
            "field",
            "row",
            "model",
            "configuration",
            "measured",
            "predicted",
        ])?;
        for (&(target, method, field), per_seed) in &self.predictions {
            let method_name = serde_json::to_value(method)?
                .as_str()
                .unwrap_or_default()
                .to_string();
            for (s, per_model) in per_seed.iter().enumerate() {
                for (r, row) in profile.rows.iter().enumerate() {
                    for (i, m) in problem.models.iter().enumerate() {
                        preds.write_record([
                            config.seeds[s].to_string(),
                            target.to_string(),
                            method_name.clone(),
                            field.to_string(),
                            (r + 1).to_string(),
                            m.name.clone(),
                            m.knobs(row.joint[i] as usize).to_string(),
                            row.throughput[i].to_string(),
                            per_model[i][r].to_string(),
                        ])?;
                    }
                }
            }
        }
        let mut written = Vec::new();
        for (name, w) in [("folds.csv", folds), ("predictions.csv", preds)] {
            let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?;
            let path = dir.join(name);
            write_atomically(&path, &bytes)?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::{GpuState, WorkloadLevel};
    use mfsched_core::{ProfileRow, SoloRow};

    /// paper-n2 measured on a few configurations of each model, each pair
    /// twice (both "orders", one group), with solo rows, and a slowdown that is
    /// exactly own factor × inflicted factor.
    fn two_factor_profile() -> (Problem, Profile, Vec<String>) {
        let problem = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        let configs = [0u32, 3, 5, 8];
        let solo = |m: usize, c: u32| 100.0 + 10.0 * f64::from(c) + 50.0 * m as f64;
        let own = |c: u32| 0.9 - 0.02 * f64::from(c % 7);
        let inflicted = |c: u32| 1.0 - 0.03 * f64::from(c % 5);
        let state = |u: f64| GpuState {
            workload: WorkloadLevel::Medium,
            vram_used_mib: 8000.0,
            utilization: u,
            contention: None,
        };
        let (mut rows, mut groups, mut solo_rows) = (Vec::new(), Vec::new(), Vec::new());
        for &a in &configs {
            for &b in &configs {
                for repeat in 0..2 {
                    rows.push(ProfileRow {
                        joint: vec![a, b],
                        workload: WorkloadLevel::Medium,
                        state: state(0.5 + 0.01 * f64::from(a + b)),
                        throughput: vec![
                            solo(0, a) * own(a) * inflicted(b) * (1.0 + 0.001 * f64::from(repeat)),
                            solo(1, b) * own(b) * inflicted(a),
                        ],
                    });
                    groups.push(format!("{a}|{b}"));
                }
            }
            for m in 0..2 {
                solo_rows.push(SoloRow {
                    model: m,
                    config: a,
                    state: state(0.3 + 0.01 * f64::from(a)),
                    throughput: solo(m, a),
                });
            }
        }
        let profile = Profile {
            scenario: "paper-n2".into(),
            models: problem.models.iter().map(|m| m.name.clone()).collect(),
            rows,
            solo: solo_rows,
        };
        (problem, profile, groups)
    }

    fn tiny_config() -> CvConfig {
        CvConfig {
            folds: 2,
            seeds: vec![1],
            targets: vec![Target::RelativeToSolo],
            fields: vec![FieldFeatures::Observed, FieldFeatures::CoRunnerSolo],
            group_by: vec!["pair".into()],
            joint: true,
            train_sizes: vec![3, 6],
            miss_rate: 0.05,
            train: TrainConfig {
                epochs: 5,
                ..TrainConfig::default()
            },
            jobs: 2,
        }
    }

    #[test]
    fn the_pressure_baseline_recovers_a_two_factor_slowdown() {
        let (problem, profile, _) = two_factor_profile();
        let data = dataset::build(&problem, &profile, Layout::MeanField);
        let solo = solo_tables(&problem, &profile).expect("solo rows");
        // Every pair once (even rows; the odd ones repeat them 0.1 % faster).
        let rows: Vec<usize> = (0..profile.rows.len()).step_by(2).collect();
        for i in 0..2 {
            let predicted = pressure(&problem, &data, &solo, i, &rows, &rows);
            for (&r, p) in rows.iter().zip(predicted) {
                let truth = data[i].y[r];
                assert!(
                    (p - truth).abs() <= 1e-3 * truth,
                    "model {i} row {r}: {p} vs {truth}"
                );
            }
        }
    }

    #[test]
    fn conformal_coverage_is_one_minus_alpha_on_exchangeable_ratios() {
        // 5 folds of 400 rows; measured = predicted × a log-normal ratio:
        // every fold's bound, taken from the other four, covers ~95 %.
        let mut rng = Rng::new(3);
        let rows = 2000;
        let predicted: Vec<f32> = (0..rows).map(|r| 10.0 + (r % 7) as f32).collect();
        let y: Vec<f32> = predicted
            .iter()
            .map(|&p| p * (0.2 * rng.normal()).exp() as f32)
            .collect();
        let data = vec![ModelData {
            width: 0,
            x: Vec::new(),
            y,
            configs: vec![0; rows],
        }];
        let folds = vec![(0..rows).map(|r| r % 5).collect::<Vec<_>>()];
        let per_seed = coverage(&data, &vec![vec![predicted]], &folds, 0.05);
        assert_eq!(per_seed[0][0].1, rows);
        let share = per_seed[0][0].0 as f64 / rows as f64;
        assert!((0.93..=0.97).contains(&share), "coverage {share}");
        let at_20 = coverage(&data, &vec![vec![data[0].y.clone()]], &folds, 0.2);
        assert_eq!(at_20[0][0].0, rows, "exact predictions: every row covered");
    }

    #[test]
    fn a_learning_curve_trains_on_nested_whole_groups_and_every_row_is_scored() {
        let (problem, profile, groups) = two_factor_profile();
        let config = tiny_config();
        let (report, run) = run(
            &config,
            &problem,
            &profile,
            &groups,
            "test",
            "paper-n2",
            &|_, _| {},
        )
        .expect("runs");
        let methods: Vec<String> = report.results.iter().map(MethodResult::label).collect();
        for m in [
            "own-config mean",
            "pressure",
            "linear field",
            "linear field + co-runner-solo",
            "MeanField",
            "MeanField + co-runner-solo",
            "Joint MLP",
        ] {
            assert!(methods.iter().any(|l| l == m), "{m} in {methods:?}");
        }
        assert_eq!(report.learning_curve.len(), 2 * report.results.len());
        for r in &report.results {
            assert!(
                r.overall.r2_relative.is_some(),
                "{}: slowdown scored",
                r.label()
            );
            let coverage = r.overall.coverage.expect("coverage scored").mean;
            assert!((0.0..=1.0).contains(&coverage), "{}: {coverage}", r.label());
        }
        let slowdown = |method: Method| {
            report
                .results
                .iter()
                .find(|r| r.method == method)
                .and_then(|r| r.overall.r2_relative)
                .expect("scored")
                .mean
        };
        let (pressure, own) = (slowdown(Method::Pressure), slowdown(Method::OwnConfigMean));
        assert!(
            pressure > own,
            "the co-runner's factor explains more: {pressure} vs {own}"
        );
        // Nested subsets of whole groups, inside the training folds.
        let full: Splits = run
            .folds
            .iter()
            .map(|f| {
                (0..2)
                    .map(|k| (0..f.len()).partition(|&r| f[r] != k))
                    .collect()
            })
            .collect();
        let ids: Vec<usize> = groups
            .iter()
            .map(|g| groups.iter().position(|h| h == g).expect("itself"))
            .collect();
        let small = subsample(&config, &full, &ids, 3).expect("fits");
        let large = subsample(&config, &full, &ids, 6).expect("fits");
        for k in 0..2 {
            let (s, l) = (&small[0][k].0, &large[0][k].0);
            assert_eq!(s.len(), 6, "3 groups of 2 rows");
            assert!(s.iter().all(|r| l.contains(r)), "nested");
            assert!(
                s.iter().all(|&r| run.folds[0][r] != k),
                "outside the test fold"
            );
        }
        assert!(subsample(&config, &full, &ids, 1000).is_err());
        // Groups never straddle the folds; the export says so too.
        for (r, g) in groups.iter().enumerate() {
            for (q, h) in groups.iter().enumerate() {
                if g == h {
                    assert_eq!(run.folds[0][r], run.folds[0][q], "group {g}");
                }
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let files = run
            .export(dir.path(), &config, &problem, &profile, &groups)
            .expect("exports");
        let folds = std::fs::read_to_string(&files[0]).expect("folds.csv");
        assert_eq!(folds.lines().count(), 1 + profile.rows.len());
        let predictions = std::fs::read_to_string(&files[1]).expect("predictions.csv");
        assert_eq!(
            predictions.lines().count(),
            1 + report.results.len() * profile.rows.len() * 2,
            "one line per table row, co-location row and model"
        );
        assert!(
            !predictions.contains("NaN"),
            "every row predicted out of fold"
        );
        let written = report.write(dir.path(), "test").expect("writes");
        assert!(written.iter().any(|p| p.ends_with("cv-curve.svg")));
        assert!(
            report.curve_table().lines().count() == 4,
            "{}",
            report.curve_table()
        );
    }
}
