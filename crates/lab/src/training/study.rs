//! The sample-complexity study (the published protocol, on the simulator).
//!
//! For each scenario (`paper-n2` … `paper-n6`, N = 2 … 6) a pool of profile rows
//! is measured once: the full grid × 4 regimes for N = 2 (648 rows), as many
//! rows stratified by variant and workload for N > 2. Then, for each of `seeds`
//! seeds, the pool is split into `folds` stratified folds; for each fold the
//! held-out fold is the test set and the other folds supply the training sets:
//! a stratified order of their rows whose prefixes of length n are the training
//! sets of the increasing sizes n (nested, so a curve's points differ only by the
//! extra rows). Each (seed, fold, n) trains one MeanField predictor per model and
//! scores it on the test fold; the point's value is the R² averaged over models,
//! and a curve point is the mean ± std over seeds × folds (25 evaluations).
//! n* is the smallest n whose mean reaches the target (0.95).
//!
//! The Joint-MLP baseline (N = 2 only, as published) runs on the same splits with
//! one net per model over the whole joint configuration plus the state.
//!
//! Evaluations run on `jobs` threads; each is seeded from (seed, scenario, seed
//! index, fold, n) alone, so results do not depend on the thread count.

use super::dataset::{self, Layout, ModelData};
use super::fit::{fidelity, model_seed, predict, train_net};
use super::regenerate::profile_on_simulator;
use super::split;
use crate::published;
use crate::svg::{LineChart, Reference, Series};
use anyhow::{Context, Result, bail};
use mfsched_core::SamplingPlan;
use mfsched_core::load_scenario;
use mfsched_core::write_atomically;
use mfsched_nn::TrainConfig;
use mfsched_nn::metrics::mean_std;
use mfsched_rng::Rng;
use mfsched_surrogate::OutputMap;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What the study runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyConfig {
    pub seed: u64,
    /// Scenarios, in increasing N.
    pub scenarios: Vec<String>,
    /// Profile rows per pool for N > 2 (N = 2 profiles its full grid).
    pub pool_rows: usize,
    /// Training-set sizes n, increasing.
    pub sizes: Vec<usize>,
    pub seeds: usize,
    pub folds: usize,
    /// n* is the smallest n whose mean R² reaches this.
    pub target_r2: f64,
    /// Also run the Joint-MLP baseline on the N = 2 scenarios.
    pub joint_baseline: bool,
    #[serde(skip)]
    pub train: TrainConfig,
    /// Worker threads.
    #[serde(skip)]
    pub jobs: usize,
}

impl StudyConfig {
    /// The published protocol: N = 2..6, 5 seeds × 5 folds, target R² 0.95.
    pub fn published(seed: u64) -> Self {
        Self {
            seed,
            scenarios: (2..=6).map(|n| format!("paper-n{n}")).collect(),
            pool_rows: 648,
            sizes: vec![10, 20, 30, 40, 50, 60, 80, 100, 120, 160, 200, 280, 400],
            seeds: 5,
            folds: 5,
            target_r2: 0.95,
            joint_baseline: true,
            train: TrainConfig::published(),
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Which predictor a curve is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    #[serde(rename = "meanfield")]
    MeanField,
    JointMlp,
}

impl Method {
    pub fn label(self) -> &'static str {
        match self {
            Method::MeanField => "MeanField",
            Method::JointMlp => "Joint MLP",
        }
    }

    fn layout(self) -> Layout {
        match self {
            Method::MeanField => Layout::MeanField,
            Method::JointMlp => Layout::Joint,
        }
    }
}

/// One point of a learning curve: mean R² over models, then mean ± std over
/// the seeds × folds evaluations; the same for the R² of the slowdown
/// (throughput / the simulator's solo throughput of the configuration), the
/// score co-location decides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    pub n: usize,
    pub mean_r2: f64,
    pub std_r2: f64,
    pub mean_r2_slowdown: f64,
    pub std_r2_slowdown: f64,
    pub evaluations: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    pub scenario: String,
    pub models: usize,
    pub method: Method,
    pub pool_rows: usize,
    /// Rows per test fold (the smallest fold).
    pub test_rows: usize,
    pub points: Vec<CurvePoint>,
    /// Smallest n with mean R² ≥ target; None if no size reaches it.
    pub n_star: Option<usize>,
}

impl Curve {
    /// The point at exactly `n`, if it was measured.
    pub fn at(&self, n: usize) -> Option<&CurvePoint> {
        self.points.iter().find(|p| p.n == n)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyResult {
    pub device: String,
    pub config: StudyConfig,
    pub curves: Vec<Curve>,
}

/// A scenario's pool and splits, prepared before the evaluations run.
struct Pool {
    scenario: String,
    models: usize,
    method: Method,
    rows: usize,
    data: Vec<ModelData>,
    /// Per model, per configuration: the simulator's solo throughput.
    solo: Vec<Vec<f32>>,
    /// Per (seed index, fold): the test rows and the stratified training order.
    splits: Vec<(Vec<usize>, Vec<usize>)>,
    scenario_index: usize,
}

/// One training-and-scoring job.
#[derive(Debug, Clone, Copy)]
struct Job {
    pool: usize,
    split: usize,
    size: usize,
}

/// Runs the study. `progress(done, total)` is called after each evaluation.
pub fn run(config: &StudyConfig, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<StudyResult> {
    if config.seeds == 0 || config.folds < 2 || config.sizes.is_empty() {
        bail!("the study needs at least one seed, two folds and one training-set size");
    }
    let mut pools = Vec::new();
    for (scenario_index, name) in config.scenarios.iter().enumerate() {
        let s = load_scenario(name)?;
        let problem = &s.problem;
        let n_models = problem.models.len();
        let plan = SamplingPlan::for_problem(problem, (n_models > 2).then_some(config.pool_rows));
        // The pool is what `mfsched profile --scenario NAME --seed S` measures.
        let profile_seed = Rng::derive(config.seed, 0x504f_4f4c + scenario_index as u64).next_u64(); // "POOL"
        let profile = profile_on_simulator(name, problem, &plan, profile_seed, &mut |_, _| {})
            .with_context(|| format!("profiling the {name} pool"))?;
        let strata = split::strata(problem, &profile);
        let mut splits = Vec::with_capacity(config.seeds * config.folds);
        for s_idx in 0..config.seeds {
            let mut rng = Rng::derive(
                config.seed,
                0x5350_4c49_5400 + (scenario_index as u64) * 1000 + s_idx as u64, // "SPLIT"
            );
            let folds = split::stratified_folds(&strata, config.folds, &mut rng);
            for f in 0..config.folds {
                let test: Vec<usize> = (0..folds.len()).filter(|&r| folds[r] == f).collect();
                let rest: Vec<usize> = (0..folds.len()).filter(|&r| folds[r] != f).collect();
                let order = split::stratified_order(&rest, &strata, &mut rng);
                splits.push((test, order));
            }
        }
        let largest = config.sizes.iter().copied().max().unwrap_or(0);
        let available = splits.iter().map(|(_, o)| o.len()).min().unwrap_or(0);
        if largest > available {
            bail!(
                "{name}: the largest training size {largest} exceeds the {available} rows outside a test fold (pool of {} rows)",
                profile.rows.len()
            );
        }
        let methods: &[Method] = if config.joint_baseline && n_models == 2 {
            &[Method::MeanField, Method::JointMlp]
        } else {
            &[Method::MeanField]
        };
        // Solo throughput is the physics' own, independent of the noise seed.
        let sim = crate::sim::Simulator::new(problem, 0)?;
        let solo: Vec<Vec<f32>> = (0..n_models)
            .map(|i| {
                (0..problem.models[i].grid_size())
                    .map(|c| sim.solo_throughput(i, c) as f32)
                    .collect()
            })
            .collect();
        for &method in methods {
            pools.push(Pool {
                solo: solo.clone(),
                scenario: name.clone(),
                models: n_models,
                method,
                rows: profile.rows.len(),
                data: dataset::build(problem, &profile, method.layout()),
                splits: splits.clone(),
                scenario_index,
            });
        }
    }

    let mut jobs: Vec<Job> = Vec::new();
    for (p, pool) in pools.iter().enumerate() {
        for split in 0..pool.splits.len() {
            for &size in &config.sizes {
                jobs.push(Job {
                    pool: p,
                    split,
                    size,
                });
            }
        }
    }
    // Longest first (cost ∝ models × rows) so the threads finish together.
    jobs.sort_by_key(|j| std::cmp::Reverse(pools[j.pool].models * j.size));
    // One slot per job, filled by whichever worker ran it.
    let results: Mutex<Vec<Option<Result<JobScores>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let total = jobs.len();
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(k) else { break };
                    let value = evaluate(&pools[job.pool], job, config);
                    if let Ok(mut r) = results.lock() {
                        r[k] = Some(value);
                    }
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                }
            });
        }
    });
    let results = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a study worker panicked"))?;

    let mut curves = Vec::with_capacity(pools.len());
    for (p, pool) in pools.iter().enumerate() {
        let mut points = Vec::with_capacity(config.sizes.len());
        for &size in &config.sizes {
            let mut values = Vec::with_capacity(pool.splits.len());
            let mut slowdowns = Vec::with_capacity(pool.splits.len());
            for (job, result) in jobs.iter().zip(&results) {
                if job.pool == p && job.size == size {
                    let r = result
                        .as_ref()
                        .context("an evaluation did not run")?
                        .as_ref()
                        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
                    values.push(r.0);
                    slowdowns.push(r.1);
                }
            }
            let (mean_r2, std_r2) = mean_std(&values);
            let (mean_r2_slowdown, std_r2_slowdown) = mean_std(&slowdowns);
            points.push(CurvePoint {
                n: size,
                mean_r2,
                std_r2,
                mean_r2_slowdown,
                std_r2_slowdown,
                evaluations: values.len(),
            });
        }
        let n_star = points
            .iter()
            .find(|pt| pt.mean_r2 >= config.target_r2)
            .map(|pt| pt.n);
        curves.push(Curve {
            scenario: pool.scenario.clone(),
            models: pool.models,
            method: pool.method,
            pool_rows: pool.rows,
            test_rows: pool.splits.iter().map(|(t, _)| t.len()).min().unwrap_or(0),
            points,
            n_star,
        });
    }
    Ok(StudyResult {
        device: crate::sim::DEVICE_NAME.to_string(),
        config: config.clone(),
        curves,
    })
}

/// What [`evaluate`] scores one job with: (throughput R², slowdown R²).
type JobScores = (f64, f64);

/// Trains one predictor per model on the first `size` rows of the split's
/// training order and returns the R² of throughput and of the slowdown on its
/// test fold, each averaged over models.
fn evaluate(pool: &Pool, job: &Job, config: &StudyConfig) -> Result<JobScores> {
    let (test, order) = &pool.splits[job.split];
    let train_rows = &order[..job.size];
    // The seed depends on what is evaluated, never on which thread runs it.
    let seed = Rng::derive(
        config.seed,
        ((pool.scenario_index as u64) << 48) | ((job.split as u64) << 32) | job.size as u64,
    )
    .next_u64();
    let mut r2s = Vec::with_capacity(pool.models);
    let mut slowdowns = Vec::with_capacity(pool.models);
    for (i, data) in pool.data.iter().enumerate() {
        let (net, _) = train_net(
            &data.subset(train_rows),
            &OutputMap::identity(),
            &config.train,
            model_seed(seed, i),
            &format!("{} model {i}", pool.scenario),
            &mut |_| {},
        )?;
        let test = data.subset(test);
        let solo: Vec<f32> = test
            .configs
            .iter()
            .map(|&c| pool.solo[i][c as usize])
            .collect();
        // A constant test target has no R²; it cannot happen with a noisy simulator.
        let f = fidelity(
            &predict(&net, &test, &OutputMap::identity()),
            &test.y,
            Some(&solo),
        );
        r2s.extend(f.r2);
        slowdowns.extend(f.r2_slowdown);
    }
    if r2s.is_empty() || slowdowns.is_empty() {
        bail!(
            "{}: no model had a defined R² on a test fold",
            pool.scenario
        );
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    Ok((mean(&r2s), mean(&slowdowns)))
}

impl StudyResult {
    fn largest(&self) -> usize {
        self.config.sizes.iter().copied().max().unwrap_or(0)
    }

    /// The summary table (plain text, aligned): n* per N, R² ± std at n = 20N
    /// and at the largest n, the Joint MLP at N = 2, beside the published n*.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let fmt_point = |p: Option<&CurvePoint>| {
            p.map_or_else(
                || "—".to_string(),
                |p| format!("{:.3} ± {:.3}", p.mean_r2, p.std_r2),
            )
        };
        let fmt_slowdown = |p: Option<&CurvePoint>| {
            p.map_or_else(
                || "—".to_string(),
                |p| format!("{:.3} ± {:.3}", p.mean_r2_slowdown, p.std_r2_slowdown),
            )
        };
        let largest = self.largest();
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<10} {:>2} {:<10} {:>5} {:>11}  {:<20} {:<20} {:<22} {:<22}",
            "scenario",
            "N",
            "method",
            "n*",
            "published",
            "R² at n = 20N",
            format!("R² at n = {largest}"),
            "slowdown R² at 20N",
            format!("slowdown R² at {largest}")
        );
        for c in &self.curves {
            let published = published::N_STAR
                .iter()
                .find(|(n, _)| *n == c.models)
                .filter(|_| c.method == Method::MeanField)
                .map_or_else(|| "—".to_string(), |(_, s)| format!("≈{s}"));
            let n_star = c
                .n_star
                .map_or_else(|| format!(">{largest}"), |n| n.to_string());
            let at_20n = c.at(20 * c.models).map_or_else(
                || format!("(n = {} not run)", 20 * c.models),
                |p| fmt_point(Some(p)),
            );
            let slowdown_20n = c.at(20 * c.models).map_or_else(
                || format!("(n = {} not run)", 20 * c.models),
                |p| fmt_slowdown(Some(p)),
            );
            let _ = writeln!(
                t,
                "{:<10} {:>2} {:<10} {:>5} {:>11}  {:<20} {:<20} {:<22} {:<22}",
                c.scenario,
                c.models,
                c.method.label(),
                n_star,
                published,
                at_20n,
                fmt_point(c.at(largest)),
                slowdown_20n,
                fmt_slowdown(c.at(largest))
            );
        }
        t
    }

    /// Learning curves: mean R² over models vs training-set size, ± std bands,
    /// the target as a reference line.
    pub fn chart(&self) -> String {
        let series = self
            .curves
            .iter()
            .map(|c| {
                let mut s = Series::new(
                    match c.method {
                        Method::MeanField => format!("N = {}", c.models),
                        Method::JointMlp => format!("Joint MLP, N = {}", c.models),
                    },
                    c.points.iter().map(|p| (p.n as f64, p.mean_r2)).collect(),
                );
                s.band = Some(c.points.iter().map(|p| p.std_r2).collect());
                s.dashed = c.method == Method::JointMlp;
                s
            })
            .collect();
        LineChart {
            title: format!(
                "MeanField learning curves on the {} ({} seed{} × {}-fold CV)",
                self.device,
                self.config.seeds,
                if self.config.seeds == 1 { "" } else { "s" },
                self.config.folds
            ),
            x_label: "training-set size n".into(),
            y_label: "mean R² over models".into(),
            series,
            references: vec![Reference {
                label: format!("target {}", self.config.target_r2),
                y: self.config.target_r2,
            }],
            log_x: true,
            y_range: None,
        }
        .render()
    }

    /// Every number of the study, with the published figures beside them.
    pub fn json(&self, command: &str) -> serde_json::Value {
        serde_json::json!({
            "command": command,
            "device": self.device,
            "published": {
                "n_star": published::N_STAR.iter().map(|(n, s)| serde_json::json!({"N": n, "n_star": s})).collect::<Vec<_>>(),
                "r2": published::R2,
            },
            "config": self.config,
            "training": {
                "hidden": self.config.train.hidden,
                "dropout": self.config.train.dropout,
                "epochs": self.config.train.epochs,
                "batch_size": self.config.train.batch_size,
                "learning_rate": self.config.train.learning_rate,
            },
            "summary": self.curves.iter().map(|c| serde_json::json!({
                "scenario": c.scenario,
                "N": c.models,
                "method": c.method,
                "n_star": c.n_star,
                "r2_at_20N": c.at(20 * c.models),
                "r2_at_largest_n": c.at(self.largest()),
            })).collect::<Vec<_>>(),
            "curves": self.curves,
        })
    }

    /// Writes `results.json`, `learning-curves.svg` and `sample-complexity.md`
    /// into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, command: &str) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create directory {}", dir.display()))?;
        let json = self.json(command);
        let mut text = serde_json::to_vec_pretty(&json).context("serialising results.json")?;
        text.push(b'\n');
        let files = [
            (dir.join("results.json"), text),
            (dir.join("learning-curves.svg"), self.chart().into_bytes()),
            (
                dir.join("sample-complexity.md"),
                format!(
                    "# Sample complexity of the MeanField surrogate\n\nMeasured on the **{}** (a seeded simulator, not a real GPU) with `{command}`: {} seeds × {}-fold stratified cross-validation, mean R² over models, n* = smallest n with mean R² ≥ {}. Published: n* ≈ 40/60/80/100/120 for N = 2..6, R² ≈ {}.\n\n```text\n{}```\n\n![learning curves](learning-curves.svg)\n",
                    self.device,
                    self.config.seeds,
                    self.config.folds,
                    self.config.target_r2,
                    published::R2,
                    self.table()
                )
                .into_bytes(),
            ),
        ];
        let mut written = Vec::new();
        for (path, bytes) in files {
            write_atomically(&path, &bytes)?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(jobs: usize) -> StudyConfig {
        StudyConfig {
            scenarios: vec!["paper-n2".into()],
            sizes: vec![20, 40],
            seeds: 1,
            folds: 2,
            jobs,
            train: TrainConfig {
                epochs: 60,
                ..TrainConfig::published()
            },
            ..StudyConfig::published(4)
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let one = run(&tiny(1), &|_, _| {}).expect("runs");
        let two = run(&tiny(2), &|_, _| {}).expect("runs");
        assert_eq!(one.curves, two.curves);
        assert_eq!(one.curves.len(), 2, "MeanField and the Joint MLP");
        let mf = &one.curves[0];
        assert_eq!(mf.method, Method::MeanField);
        assert_eq!((mf.pool_rows, mf.test_rows), (648, 324));
        assert!(mf.points.iter().all(|p| p.evaluations == 2));
        // More data, better fit (nested training sets).
        assert!(
            mf.points[1].mean_r2 > mf.points[0].mean_r2,
            "{:?}",
            mf.points
        );
    }

    #[test]
    fn a_size_larger_than_the_training_folds_is_refused() {
        let config = StudyConfig {
            sizes: vec![600],
            ..tiny(1)
        };
        let err = run(&config, &|_, _| {}).expect_err("too large");
        assert!(err.to_string().contains("exceeds the 324 rows"), "{err}");
    }

    #[test]
    fn the_table_shows_n_star_beside_the_published_figure() {
        let result = StudyResult {
            device: "test".into(),
            config: tiny(1),
            curves: vec![Curve {
                scenario: "paper-n2".into(),
                models: 2,
                method: Method::MeanField,
                pool_rows: 648,
                test_rows: 324,
                points: vec![
                    CurvePoint {
                        n: 20,
                        mean_r2: 0.90,
                        std_r2: 0.02,
                        mean_r2_slowdown: 0.40,
                        std_r2_slowdown: 0.05,
                        evaluations: 2,
                    },
                    CurvePoint {
                        n: 40,
                        mean_r2: 0.96,
                        std_r2: 0.01,
                        mean_r2_slowdown: 0.55,
                        std_r2_slowdown: 0.04,
                        evaluations: 2,
                    },
                ],
                n_star: Some(40),
            }],
        };
        let table = result.table();
        assert!(table.contains("paper-n2"), "{table}");
        assert!(table.contains("0.960 ± 0.010"), "{table}");
        assert!(table.contains("≈40"), "{table}");
        assert!(
            table.contains("0.550 ± 0.040"),
            "the slowdown beside it: {table}"
        );
        assert!(result.chart().contains("N = 2"));
    }
}
