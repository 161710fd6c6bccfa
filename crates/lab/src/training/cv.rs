//! Cross-validation of the surrogate on a user's own profile, beside baselines
//! (`mfsched surrogate cv`).
//!
//! For each seed the co-location rows are split into k folds: stratified by
//! workload and variants, or, with group keys (`--group-by`), so that rows of one
//! group never straddle a split (both orders of a measured pair, the repeats of
//! one run). Every row is predicted once per seed by predictors trained on the
//! other folds; the metrics are computed on those out-of-fold predictions per
//! seed, then averaged (± std) over the seeds.
//!
//! Methods, each trained on each target (see `surrogate::target`), every
//! prediction turned back into throughput before scoring:
//! - **own-configuration mean**: the mean target of the model's configuration in
//!   the training folds (falling back to its variant's, then the model's). On
//!   the relative target this is *solo × the configuration's mean slowdown*.
//! - **linear field**: ridge regression on the MeanField inputs (own
//!   configuration + aggregate state).
//! - **MeanField**: the surrogate itself.
//! - **Joint MLP** (N ≤ 3): one net per model over every model's configuration
//!   plus the state.
//!
//! Scores: R² of throughput, R² of the slowdown (throughput / solo; where the
//! profile has solo rows) and MAPE of throughput (rows measuring 0 skipped), per
//! model, per variant and overall (the mean over models; MAPE pooled).

use super::dataset::{self, Layout, ModelData};
use super::fit::{model_seed, output_maps, train_net};
use super::split;
use crate::svg::{BarChart, BarGroup};
use anyhow::{Result, bail};
use mfsched_core::domain::Problem;
use mfsched_core::fsutil::write_atomically;
use mfsched_core::profile::Profile;
use mfsched_nn::TrainConfig;
use mfsched_nn::metrics::{mean_std, r2};
use mfsched_rng::Rng;
use mfsched_surrogate::target::{OutputMap, Target};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest N for which the Joint MLP runs (its input grows with N).
pub const JOINT_MAX_MODELS: usize = 3;
/// Ridge penalty of the linear field model (on standardised inputs, per row).
const RIDGE: f64 = 1e-3;
const STREAM_FOLDS: u64 = 0x464f_4c44; // "FOLD"

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CvConfig {
    pub folds: usize,
    pub seeds: Vec<u64>,
    pub targets: Vec<Target>,
    /// Columns whose values group rows (empty: every row its own group).
    pub group_by: Vec<String>,
    /// Run the Joint-MLP baseline (only where N ≤ [`JOINT_MAX_MODELS`]).
    pub joint: bool,
    #[serde(skip)]
    pub train: TrainConfig,
    #[serde(skip)]
    pub jobs: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    OwnConfigMean,
    LinearField,
    #[serde(rename = "meanfield")]
    MeanField,
    JointMlp,
}

impl Method {
    pub fn label(self) -> &'static str {
        match self {
            Method::OwnConfigMean => "own-config mean",
            Method::LinearField => "linear field",
            Method::MeanField => "MeanField",
            Method::JointMlp => "Joint MLP",
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
}

/// Out-of-fold throughput predictions: `[seed][model][row]`.
type Predictions = Vec<Vec<Vec<f32>>>;

struct Setup<'a> {
    problem: &'a Problem,
    maps: BTreeMap<Target, Vec<OutputMap>>,
    mf: Vec<ModelData>,
    joint: Option<Vec<ModelData>>,
    /// Per seed: fold of each row.
    folds: Vec<Vec<usize>>,
}

/// Runs the cross-validation. `groups` holds one key per co-location row
/// (empty: stratified folds). `progress(done, total)` counts trained nets.
pub fn run(
    config: &CvConfig,
    problem: &Problem,
    profile: &Profile,
    groups: &[String],
    data_name: &str,
    scenario_name: &str,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<CvReport> {
    let rows = profile.rows.len();
    if config.folds < 2 {
        bail!("--folds must be at least 2, got {}", config.folds);
    }
    if config.seeds.is_empty() || config.targets.is_empty() {
        bail!("give at least one seed and one target");
    }
    if !groups.is_empty() && groups.len() != rows {
        bail!("{} group keys for {rows} rows", groups.len());
    }
    let group_count = if groups.is_empty() {
        rows
    } else {
        groups
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
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
    let strata = split::strata(problem, profile);
    let setup = Setup {
        problem,
        maps,
        mf: dataset::build(problem, profile, Layout::MeanField),
        joint: (config.joint && problem.models.len() <= JOINT_MAX_MODELS)
            .then(|| dataset::build(problem, profile, Layout::Joint)),
        folds: config
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
            .collect(),
    };
    let mut methods = vec![
        Method::OwnConfigMean,
        Method::LinearField,
        Method::MeanField,
    ];
    if setup.joint.is_some() {
        methods.push(Method::JointMlp);
    }
    let predictions = predict_all(config, &setup, &methods, progress)?;
    // The slowdown scale needs every model's solo table, whatever was trained.
    let solo = output_maps(problem, profile, Target::RelativeToSolo)
        .ok()
        .map(|(m, _)| m);
    let mut results = Vec::new();
    for &target in &config.targets {
        for &method in &methods {
            let p = &predictions[&(target, method)];
            results.push(score(
                problem,
                &setup.mf,
                solo.as_deref(),
                target,
                method,
                p,
            ));
        }
    }
    Ok(CvReport {
        scenario: scenario_name.to_string(),
        data: data_name.to_string(),
        rows,
        groups: group_count,
        models: problem.models.iter().map(|m| m.name.clone()).collect(),
        config: config.clone(),
        results,
    })
}

/// One net to train: (seed index, fold, target, method, model).
#[derive(Debug, Clone, Copy)]
struct Job {
    seed: usize,
    fold: usize,
    target: Target,
    method: Method,
    model: usize,
}

fn predict_all(
    config: &CvConfig,
    setup: &Setup<'_>,
    methods: &[Method],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<BTreeMap<(Target, Method), Predictions>> {
    let n = setup.problem.models.len();
    let rows = setup.mf.first().map_or(0, ModelData::rows);
    let mut out: BTreeMap<(Target, Method), Predictions> = BTreeMap::new();
    for &t in &config.targets {
        for &m in methods {
            out.insert(
                (t, m),
                vec![vec![vec![f32::NAN; rows]; n]; config.seeds.len()],
            );
        }
    }
    let split_rows = |seed: usize, fold: usize| -> (Vec<usize>, Vec<usize>) {
        (0..rows).partition(|&r| setup.folds[seed][r] != fold)
    };
    // The cheap baselines, inline.
    for seed in 0..config.seeds.len() {
        for fold in 0..config.folds {
            let (train, test) = split_rows(seed, fold);
            for &target in &config.targets {
                for model in 0..n {
                    let data = &setup.mf[model];
                    let map = &setup.maps[&target][model];
                    let (tr, te) = (data.subset(&train), data.subset(&test));
                    let own = own_config_mean(setup.problem, model, &tr, &te, map);
                    let linear = linear_field(&tr, &te, map);
                    for (method, values) in
                        [(Method::OwnConfigMean, own), (Method::LinearField, linear)]
                    {
                        let slot = &mut out.get_mut(&(target, method)).expect("made")[seed][model];
                        for (&r, v) in test.iter().zip(values) {
                            slot[r] = v;
                        }
                    }
                }
            }
        }
    }
    // The nets, on worker threads; each seeded from what it evaluates alone.
    let mut jobs = Vec::new();
    for seed in 0..config.seeds.len() {
        for fold in 0..config.folds {
            for &target in &config.targets {
                for &method in methods.iter().filter(|m| m.trains_a_net()) {
                    for model in 0..n {
                        jobs.push(Job {
                            seed,
                            fold,
                            target,
                            method,
                            model,
                        });
                    }
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
                    let (train, test) = split_rows(job.seed, job.fold);
                    let data = match job.method {
                        Method::JointMlp => &setup.joint.as_ref().expect("joint built")[job.model],
                        _ => &setup.mf[job.model],
                    };
                    let map = &setup.maps[&job.target][job.model];
                    let seed = Rng::derive(
                        config.seeds[job.seed],
                        ((job.fold as u64) << 40)
                            | ((job.target as u64) << 32)
                            | ((job.method as u64) << 24),
                    )
                    .next_u64();
                    let result = train_net(
                        &data.subset(&train),
                        map,
                        &config.train,
                        model_seed(seed, job.model),
                        &setup.problem.models[job.model].name,
                        &mut |_| {},
                    )
                    .map(|net| super::fit::predict(&net, &data.subset(&test), map));
                    results.lock().expect("no poisoning").push((job, result));
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, jobs.len());
                }
            });
        }
    });
    for (job, result) in results.into_inner().expect("no poisoning") {
        let values = result?;
        let (_, test) = split_rows(job.seed, job.fold);
        let slot = &mut out.get_mut(&(job.target, job.method)).expect("made")[job.seed][job.model];
        for (&r, v) in test.iter().zip(values) {
            slot[r] = v;
        }
    }
    Ok(out)
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
    let mut by_config: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
    let mut by_variant: BTreeMap<usize, (f64, u32)> = BTreeMap::new();
    let mut all = (0.0, 0u32);
    for (&y, &c) in train.y.iter().zip(&train.configs) {
        let v = f64::from(map.encode(c as usize, f64::from(y)));
        for acc in [
            by_config.entry(c).or_default(),
            by_variant.entry(configs[c as usize].variant).or_default(),
            &mut all,
        ] {
            acc.0 += v;
            acc.1 += 1;
        }
    }
    let mean = |acc: &(f64, u32)| acc.0 / f64::from(acc.1.max(1));
    test.configs
        .iter()
        .map(|&c| {
            let m = by_config
                .get(&c)
                .or_else(|| by_variant.get(&configs[c as usize].variant))
                .map_or_else(|| mean(&all), mean);
            map.apply(c as usize, m as f32)
        })
        .collect()
}

/// Ridge regression of the encoded target on the standardised inputs, decoded.
fn linear_field(train: &ModelData, test: &ModelData, map: &OutputMap) -> Vec<f32> {
    let w = train.width;
    let rows = train.rows();
    let column = |data: &ModelData, j: usize| -> Vec<f64> {
        (0..data.rows())
            .map(|r| f64::from(data.x[r * w + j]))
            .collect()
    };
    let stats: Vec<(f64, f64)> = (0..w)
        .map(|j| {
            let (mean, std) = mean_std(&column(train, j));
            (mean, if std > 1e-12 { std } else { 1.0 })
        })
        .collect();
    let z = |data: &ModelData, r: usize, j: usize| {
        (f64::from(data.x[r * w + j]) - stats[j].0) / stats[j].1
    };
    let y: Vec<f64> = train
        .y
        .iter()
        .zip(&train.configs)
        .map(|(&y, &c)| f64::from(map.encode(c as usize, f64::from(y))))
        .collect();
    let y_mean = y.iter().sum::<f64>() / rows.max(1) as f64;
    // Normal equations (ZᵀZ + λ·rows·I) β = Zᵀ(y − ȳ).
    let mut a = vec![0.0; w * w];
    let mut b = vec![0.0; w];
    for (r, &yr) in y.iter().enumerate() {
        let zr: Vec<f64> = (0..w).map(|j| z(train, r, j)).collect();
        for (i, &zi) in zr.iter().enumerate() {
            b[i] += zi * (yr - y_mean);
            for (j, &zj) in zr.iter().enumerate() {
                a[i * w + j] += zi * zj;
            }
        }
    }
    for i in 0..w {
        a[i * w + i] += RIDGE * rows as f64;
    }
    let beta = solve(a, b, w);
    (0..test.rows())
        .map(|r| {
            let v = y_mean + (0..w).map(|j| beta[j] * z(test, r, j)).sum::<f64>();
            map.apply(test.configs[r] as usize, v as f32)
        })
        .collect()
}

/// Solves the symmetric positive-definite system `a x = b` (n × n, row-major)
/// by Gaussian elimination with partial pivoting.
fn solve(mut a: Vec<f64>, mut b: Vec<f64>, n: usize) -> Vec<f64> {
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .expect("non-empty");
        if pivot != col {
            for k in 0..n {
                a.swap(col * n + k, pivot * n + k);
            }
            b.swap(col, pivot);
        }
        let d = a[col * n + col];
        if d.abs() < 1e-300 {
            continue;
        }
        for row in col + 1..n {
            let f = a[row * n + col] / d;
            if f != 0.0 {
                for k in col..n {
                    a[row * n + k] -= f * a[col * n + k];
                }
                b[row] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let d = a[row * n + row];
        let s = b[row] - (row + 1..n).map(|k| a[row * n + k] * x[k]).sum::<f64>();
        x[row] = if d.abs() < 1e-300 { 0.0 } else { s / d };
    }
    x
}

/// Mean absolute percentage error over the rows measuring more than 0.
fn mape(predicted: &[f32], truth: &[f32]) -> Option<f64> {
    let (sum, n) = predicted
        .iter()
        .zip(truth)
        .filter(|(_, t)| **t > 0.0)
        .fold((0.0, 0usize), |(s, n), (p, t)| {
            (s + f64::from((p - t).abs() / t), n + 1)
        });
    (n > 0).then(|| 100.0 * sum / n as f64)
}

fn score(
    problem: &Problem,
    data: &[ModelData],
    solo: Option<&[OutputMap]>,
    target: Target,
    method: Method,
    predictions: &Predictions,
) -> MethodResult {
    let seeds = predictions.len();
    // Scores of model `i` on the rows `keep` selects, one per seed.
    let scores_of = |i: usize, keep: &dyn Fn(usize) -> bool| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let d = &data[i];
        let rows: Vec<usize> = (0..d.rows()).filter(|&r| keep(r)).collect();
        let truth: Vec<f32> = rows.iter().map(|&r| d.y[r]).collect();
        let ratio = |values: &[f32]| -> Option<Vec<f32>> {
            let map = &solo?[i];
            Some(
                rows.iter()
                    .zip(values)
                    .map(|(&r, &v)| v / map.solo[d.configs[r] as usize])
                    .collect(),
            )
        };
        let (mut r2s, mut rel, mut mapes) = (Vec::new(), Vec::new(), Vec::new());
        for seed in predictions {
            let p: Vec<f32> = rows.iter().map(|&r| seed[i][r]).collect();
            r2s.extend(r2(&p, &truth));
            if let (Some(pr), Some(tr)) = (ratio(&p), ratio(&truth)) {
                rel.extend(r2(&pr, &tr));
            }
            mapes.extend(mape(&p, &truth));
        }
        (r2s, rel, mapes)
    };
    let n = problem.models.len();
    let per_model_raw: Vec<_> = (0..n).map(|i| scores_of(i, &|_| true)).collect();
    let per_model = problem
        .models
        .iter()
        .zip(&per_model_raw)
        .map(|(m, (a, b, c))| ModelScores {
            model: m.name.clone(),
            scores: Scores {
                r2: Stat::of(a),
                r2_relative: Stat::of(b),
                mape: Stat::of(c),
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
                },
            });
        }
    }
    MethodResult {
        target,
        method,
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

impl CvReport {
    /// The summary table (also the start of the markdown report).
    pub fn table(&self) -> String {
        let mut out = format!(
            "| target | method | R² | R² of slowdown | MAPE % | {} |\n|---|---|---|---|---|{}\n",
            self.models
                .iter()
                .map(|m| format!("R² {m}"))
                .collect::<Vec<_>>()
                .join(" | "),
            "---|".repeat(self.models.len())
        );
        for r in &self.results {
            out += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                r.target,
                r.method.label(),
                stat_text(r.overall.r2, 4),
                stat_text(r.overall.r2_relative, 4),
                stat_text(r.overall.mape, 2),
                r.per_model
                    .iter()
                    .map(|m| stat_text(m.scores.r2, 4))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
        out
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
                "\n### Per variant, trained on the {target} target (R² of throughput; MAPE %)\n\n| model | variant | rows | {} |\n|---|---|---|{}\n",
                results
                    .iter()
                    .map(|r| r.method.label())
                    .collect::<Vec<_>>()
                    .join(" | "),
                "---|".repeat(results.len())
            );
            for (k, v) in first.per_variant.iter().enumerate() {
                let cells: Vec<String> = results
                    .iter()
                    .map(|r| {
                        let s = &r.per_variant[k].scores;
                        format!("{}; {}", stat_text(s.r2, 3), stat_text(s.mape, 1))
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

    /// Overall R² of throughput per method, grouped by target.
    pub fn chart(&self) -> String {
        let mut methods: Vec<Method> = self.results.iter().map(|r| r.method).collect();
        methods.dedup();
        methods.sort();
        methods.dedup();
        BarChart {
            title: format!(
                "Held-out R² of throughput, {} ({} rows, {} folds × {} seeds)",
                self.scenario,
                self.rows,
                self.config.folds,
                self.config.seeds.len()
            ),
            y_label: "R² (out of fold)".into(),
            bars: methods.iter().map(|m| m.label().to_string()).collect(),
            groups: self
                .config
                .targets
                .iter()
                .map(|t| BarGroup {
                    label: format!("trained on {t}"),
                    values: methods
                        .iter()
                        .map(|m| {
                            self.results
                                .iter()
                                .find(|r| r.target == *t && r.method == *m)
                                .and_then(|r| r.overall.r2)
                                .map(|s| s.mean)
                        })
                        .collect(),
                })
                .collect(),
        }
        .render()
    }

    pub fn markdown(&self, command: &str) -> String {
        format!(
            "# Surrogate cross-validation: {}\n\n`{command}`\n\nData: {} ({} co-location rows in {} groups, models {}), {} folds × seeds {:?}, \
             {} epochs per net. Every figure below is from this run: out-of-fold predictions, \
             scored per seed, mean ± std over seeds.\n\n{}\n![R² per method](cv.svg)\n{}",
            self.scenario,
            self.data,
            self.rows,
            self.groups,
            self.models.join(", "),
            self.config.folds,
            self.config.seeds,
            self.config.train.epochs,
            self.table(),
            self.variant_tables()
        )
    }

    /// Writes `cv.json`, `cv.md` and `cv.svg` into `dir`, each atomically.
    pub fn write(&self, dir: &Path, command: &str) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::json!({
            "command": command,
            "epochs": self.config.train.epochs,
            "report": self,
        });
        let files = [
            ("cv.json", serde_json::to_string_pretty(&json)? + "\n"),
            ("cv.md", self.markdown(command)),
            ("cv.svg", self.chart()),
        ];
        let mut written = Vec::new();
        for (name, text) in files {
            let path = dir.join(name);
            write_atomically(&path, text.as_bytes())?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_recovers_a_known_solution() {
        let a = vec![4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 2.0];
        let x = [1.0, -2.0, 0.5];
        let b: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| a[i * 3 + j] * x[j]).sum())
            .collect();
        for (got, want) in solve(a, b, 3).iter().zip(x) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
    }

    #[test]
    fn mape_skips_zero_truth() {
        let m = mape(&[1.1, 5.0], &[1.0, 0.0]).expect("one row counts");
        assert!((m - 10.0).abs() < 1e-4, "{m}");
        assert_eq!(mape(&[1.0], &[0.0]), None);
    }
}
