//! `mfsched bench ...`: performance measured side by side in one process.

use super::plugins::PluginOpts;
use super::surrogate::PredictorArgs;
use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mfsched_core::write_atomically;
use mfsched_core::{GpuState, WorkloadLevel};
use mfsched_core::{Scenario, load_scenario, nearest_rank, quantile_ms};
use mfsched_lab::{
    Contender, ContenderResult, LineChart, PEER_PYTHON, PeerFigures, PeerRun, Series, Timing,
    bench_candidate_aware, bench_ticks, format_load_average, load_average, overall_forecast_scores,
    peer_scenario_toml, run_forecast_bench, run_peer_bench, run_policy_bench, run_surrogate_bench,
    surrogate_bench_steps, utility_gaps,
};
use mfsched_plugin_host::{resolve_policy, resolve_utility};
use mfsched_surrogate::CandidateAware;
use mfsched_surrogate::GpuBackend;
use mfsched_surrogate::Served;
use mfsched_surrogate::{BackendChoice, auto_uses};
use mfsched_surrogate::{MIN_CANDIDATES_PER_THREAD, default_threads};
use mfsched_surrogate::{bundled_training_profile, load_bundled};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Decision latency per policy through the Wasm boundary, and each policy's
    /// utility gap to exhaustive search on the same ticks.
    Policies(PoliciesArgs),
    /// MeanField inference rows/s on the CPU and on wgpu, side by side: joint
    /// candidate batches of rising size, and one full decision from the table vs
    /// from every feasible candidate.
    Surrogate(SurrogateArgs),
    /// Training time of one MeanField predictor (median per size).
    Train(super::train::BenchTrainArgs),
    /// The daemon's load forecasters (last, EWMA, Holt) on the eight dynamic
    /// traces with the simulator's load draws: how often the forecast regime is
    /// the next tick's, and the mean absolute error of the forecast load.
    Forecast(ForecastArgs),
}

#[derive(Debug, Args)]
pub struct ForecastArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Consecutive seeds from --seed on.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// Ticks per trace.
    #[arg(long, default_value_t = mfsched_core::DEFAULT_TRACE_TICKS)]
    ticks: usize,
}

#[derive(Debug, Args)]
pub struct PoliciesArgs {
    /// Scenarios, comma-separated (e.g. paper-n5,scale-n8,scale-n12,scale-n16):
    /// each is benchmarked in turn, and with --svg several give a latency-vs-N chart.
    #[arg(long, value_delimiter = ',', default_value = "paper-n5")]
    scenario: Vec<String>,
    /// Decision ticks per policy (each tick: a seeded random state and seed).
    #[arg(long, default_value_t = 100)]
    decisions: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write an SVG chart: the latency distributions (one scenario), or the
    /// median latency of each policy against N (several).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Benchmark this policy (`NAME[:k=v,…]`: a bundled name, a NAME.wasm of
    /// --plugin-dir, or a .wasm path) against the reference instead of the
    /// bundled set; repeatable.
    #[arg(long = "policy", value_name = "SPEC")]
    policies: Vec<String>,
    /// Also run the numpy peer (e.g. bench/numpy_peer.py) after each scenario's
    /// decisions and print its table-then-exhaustive path beside exhaustive
    /// (table) through Wasm; a peer that cannot run is one line.
    #[arg(long, value_name = "PATH")]
    peer: Option<PathBuf>,
    /// Seconds the peer may run before it is stopped.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    peer_timeout: u64,
    /// With --peer: the decisions run in this many slices, the peer after
    /// each, and the ratio is the median of the slices' (a shared machine's
    /// speed drifts between seconds; each ratio pairs timings taken together).
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=20))]
    peer_rounds: u64,
    #[command(flatten)]
    opts: PluginOpts,
}

/// One slice of decisions and the peer run right after it.
#[derive(Debug, Clone, Copy)]
struct PeerRound {
    /// exhaustive (table)'s median over the slice.
    mfsched_ms: f64,
    peer_ms: f64,
}

/// Above this many feasible joint configurations exhaustive search is not run
/// (it would take seconds a tick): the reference is `exact`, whose answers
/// match exhaustive's on every tick where both run (tests/all/exact.rs).
const EXHAUSTIVE_REFERENCE_LIMIT: u64 = 5_000_000;

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Policies(args) => policies(args),
        BenchCommand::Surrogate(args) => surrogate(args),
        BenchCommand::Train(args) => super::train::bench(args),
        BenchCommand::Forecast(args) => forecast(args),
    }
}

fn forecast(args: ForecastArgs) -> Result<()> {
    if args.seeds == 0 || args.ticks < 2 {
        anyhow::bail!("--seeds must be at least 1 and --ticks at least 2");
    }
    let scores = run_forecast_bench(args.seed, args.seeds, args.ticks)?;
    println!(
        "Load forecasts one tick ahead on the eight traces, loads drawn as the simulator draws them (seeds {}..={}, {} ticks each)",
        args.seed,
        args.seed + args.seeds - 1,
        args.ticks
    );
    println!(
        "regime hit rate (forecast regime = next tick's regime) / mean absolute error of the load ratio"
    );
    print!("{:<12}", "trace");
    for kind in mfsched_daemon::ForecastKind::ALL {
        print!(" {:>16}", kind.as_str());
    }
    println!();
    for trace in mfsched_core::TRACE_NAMES {
        print!("{trace:<12}");
        for s in scores.iter().filter(|s| s.trace == trace) {
            print!(
                " {:>16}",
                format!("{:.1} % / {:.3}", 100.0 * s.accuracy(), s.mae())
            );
        }
        println!();
    }
    print!("{:<12}", "all");
    let totals = overall_forecast_scores(&scores);
    for (_, acc, mae) in &totals {
        print!(" {:>16}", format!("{:.1} % / {mae:.3}", 100.0 * acc));
    }
    println!();
    println!(
        "the daemon's default (workload.forecast): {}",
        mfsched_daemon::DEFAULT_FORECAST.as_str()
    );
    Ok(())
}

/// One scenario's results.
struct ScenarioBench {
    models: usize,
    results: Vec<ContenderResult>,
}

fn policies(args: PoliciesArgs) -> Result<()> {
    if args.decisions == 0 {
        bail!("--decisions must be positive");
    }
    let mut benches = Vec::new();
    let mut reports = Vec::new();
    for name in &args.scenario {
        let (bench, report) = policies_on(&args, name)?;
        benches.push(bench);
        reports.push(report);
    }
    if args.json {
        let value = if reports.len() == 1 {
            reports.remove(0)
        } else {
            serde_json::Value::Array(reports)
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    }
    if let Some(path) = &args.svg {
        match benches.as_slice() {
            [one] => write_svg(path, &one.results)?,
            several => write_scaling_svg(path, several)?,
        }
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The peer's table-then-exhaustive median on `scenario` (`name` as given on
/// the command line), checking it measured that scenario.
fn run_table_peer(
    script: &std::path::Path,
    name: &str,
    scenario: &str,
    timeout: u64,
) -> Result<f64> {
    let figures = run_peer_bench(&PeerRun {
        scenario_toml: peer_scenario_toml(script, name),
        script: script.to_path_buf(),
        repeats: 20,
        timeout: Duration::from_secs(timeout),
    })?;
    if figures.scenario != scenario {
        bail!("it measured {}, not {scenario}", figures.scenario);
    }
    Ok(figures.table.median_ms)
}

/// Benchmarks one scenario, prints its table (unless --json) and returns its
/// results and JSON report.
fn policies_on(args: &PoliciesArgs, name: &str) -> Result<(ScenarioBench, serde_json::Value)> {
    let scenario = load_scenario(name)?;
    let Served {
        predictor,
        name: predictor_name,
        problem,
        ..
    } = args.opts.served(&scenario)?;
    let engine = args.opts.engine()?;
    let dir = args.opts.dir.as_deref();
    let utility = resolve_utility(&engine, "utility", dir)?;
    let contender = |label: &str, policy: &str, params: &[(&str, &str)]| -> Result<Contender> {
        Ok(Contender {
            label: label.into(),
            policy: resolve_policy(&engine, policy, dir)?,
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            per_candidate: false,
        })
    };
    let feasible = problem.count_feasible();
    let exhaustive = feasible <= EXHAUSTIVE_REFERENCE_LIMIT;
    // The reference first: exhaustive (table), or exact where exhaustive search
    // is out of reach. "(candidates)" is the same landscape with every feasible
    // candidate through joint predict.
    let reference = if exhaustive {
        contender("exhaustive (table)", "exhaustive", &[])?
    } else {
        contender("exact", "exact", &[])?
    };
    let reference_label = reference.label.clone();
    let mut contenders = vec![reference];
    if args.policies.is_empty() {
        if exhaustive {
            contenders.extend([
                Contender {
                    per_candidate: true,
                    ..contender("exhaustive (candidates)", "exhaustive", &[])?
                },
                contender("ga", "ga", &[])?,
                contender("exact", "exact", &[])?,
                contender("static-budget k=500", "static-budget", &[("k", "500")])?,
                contender("static-budget k=5000", "static-budget", &[("k", "5000")])?,
                contender("static-full", "static-budget", &[("k", "full")])?,
            ]);
        } else {
            contenders.push(contender("ga", "ga", &[])?);
        }
    }
    for spec in &args.policies {
        // The reference is measured already: asked for again, it is one row.
        if *spec == reference_label {
            continue;
        }
        let (policy, params) = super::eval::parse_policy(spec)?;
        let params: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        contenders.push(contender(spec, &policy, &params)?);
    }
    let ticks = bench_ticks(&problem, args.decisions, args.seed);
    let rounds = match &args.peer {
        Some(_) if exhaustive => args.peer_rounds as usize,
        _ => 1,
    };
    let bar = progress((ticks.len() * contenders.len()) as u64, "decisions")?;
    let mut results: Vec<ContenderResult> = Vec::new();
    let mut peer_rounds: Vec<Result<PeerRound>> = Vec::new();
    for slice in ticks.chunks(ticks.len().div_ceil(rounds).max(1)) {
        let slice_results = run_policy_bench(
            &engine,
            &utility,
            &predictor,
            &problem,
            &contenders,
            slice,
            || bar.inc(1),
        );
        let mfsched_ms = quantile_ms(&slice_results[0].latencies, 0.5);
        if results.is_empty() {
            results = slice_results;
        } else {
            for (all, more) in results.iter_mut().zip(slice_results) {
                all.append(more);
            }
        }
        // The peer right after the slice, under the same machine load; once
        // it failed, not again (a stalled one would cost its timeout each time).
        let peer_failed = peer_rounds.iter().any(Result::is_err);
        if let Some(script) = args.peer.as_ref().filter(|_| exhaustive && !peer_failed) {
            bar.suspend(|| eprintln!("running the peer: {} {}", PEER_PYTHON, script.display()));
            peer_rounds.push(
                run_table_peer(script, name, &scenario.name, args.peer_timeout).map(|peer_ms| {
                    PeerRound {
                        mfsched_ms,
                        peer_ms,
                    }
                }),
            );
        }
    }
    bar.finish_and_clear();

    let reference_utilities = results[0].utilities.clone();
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|r| summary(r, &reference_utilities, &ticks))
        .collect();
    let median_of = |label: &str| {
        results
            .iter()
            .find(|r| r.label == label)
            .map(|r| quantile_ms(&r.latencies, 0.5))
    };
    let candidates_over_table =
        median_of("exhaustive (candidates)").zip(median_of("exhaustive (table)"));
    let ga_over_exact = median_of("ga").zip(median_of("exact"));
    let load = load_average();
    let peer_failure = peer_rounds.iter().find_map(|r| r.as_ref().err());
    let measured: Vec<PeerRound> = peer_rounds
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .copied()
        .collect();
    let peer_ratio = (peer_failure.is_none() && !measured.is_empty()).then(|| {
        let mut ratios: Vec<f64> = measured.iter().map(|r| r.peer_ms / r.mfsched_ms).collect();
        ratios.sort_by(f64::total_cmp);
        ratios[ratios.len() / 2]
    });
    let report = serde_json::json!({
        "scenario": scenario.name,
        "models": problem.models.len(),
        "predictor": predictor_name,
        "decisions": args.decisions,
        "seed": args.seed,
        "feasible": feasible,
        "reference": reference_label,
        "load_average": load.map(|l| l.to_vec()),
        "policies": rows,
        "exhaustive_candidates_over_table": candidates_over_table.map(|(c, t)| c / t),
        "ga_over_exact": ga_over_exact.map(|(ga, exact)| ga / exact),
        "peer_rounds": measured.iter().map(|r| serde_json::json!({
            "exhaustive_table_ms": r.mfsched_ms,
            "peer_table_ms": r.peer_ms,
            "peer_table_over_exhaustive_table": r.peer_ms / r.mfsched_ms,
        })).collect::<Vec<_>>(),
        "peer_table_over_exhaustive_table": peer_ratio,
    });
    if !args.json {
        println!(
            "scenario {} ({} models, {} feasible joint configurations), {} decisions per policy, seed {}",
            scenario.name,
            problem.models.len(),
            feasible,
            args.decisions,
            args.seed
        );
        println!("predictor {predictor_name}");
        println!("machine   load average {}", format_load_average(load));
        println!();
        println!(
            "{:<24} {:>9} {:>9} {:>10} {:>10} {:>11} {:>11} {:>11} {:>7}",
            "policy",
            "p50 ms",
            "p99 ms",
            "pred p50",
            "util p50",
            "candidates",
            "gap p50 %",
            "gap max %",
            "failed"
        );
        for row in &rows {
            println!(
                "{:<24} {:>9.2} {:>9.2} {:>10.2} {:>10.2} {:>11.0} {:>11.4} {:>11.4} {:>7}",
                row["policy"].as_str().unwrap_or(""),
                row["latency_p50_ms"].as_f64().unwrap_or(f64::NAN),
                row["latency_p99_ms"].as_f64().unwrap_or(f64::NAN),
                row["predict_p50_ms"].as_f64().unwrap_or(f64::NAN),
                row["evaluate_p50_ms"].as_f64().unwrap_or(f64::NAN),
                row["candidates_p50"].as_f64().unwrap_or(f64::NAN),
                // JSON has no infinity: null is a tick whose configuration scored −∞.
                row["gap_p50_pct"].as_f64().unwrap_or(f64::INFINITY),
                row["gap_max_pct"].as_f64().unwrap_or(f64::INFINITY),
                row["failed"].as_u64().unwrap_or(0),
            );
        }
        println!();
        if let Some((candidates_ms, table_ms)) = candidates_over_table {
            println!(
                "exhaustive: table-based {table_ms:.2} ms vs candidate-based {candidates_ms:.2} ms median ({:.1}x)",
                candidates_ms / table_ms
            );
        }
        if let Some((ga_ms, exact_ms)) = ga_over_exact {
            println!(
                "exact: {exact_ms:.2} ms vs GA {ga_ms:.2} ms median ({:.1}x faster)",
                ga_ms / exact_ms
            );
        }
        if let Some(e) = peer_failure {
            println!("numpy peer  not measured: {e:#}");
        } else if let Some(ratio) = peer_ratio {
            println!(
                "exhaustive (table) through Wasm vs the numpy peer's table-then-exhaustive path, in {} alternating rounds (decisions, then the peer):",
                measured.len()
            );
            for (k, r) in measured.iter().enumerate() {
                println!(
                    "  round {}: {:.3} ms vs {:.3} ms median ({:.2}x the peer's speed)",
                    k + 1,
                    r.mfsched_ms,
                    r.peer_ms,
                    r.peer_ms / r.mfsched_ms
                );
            }
            println!(
                "  median {ratio:.2}x the peer's speed; load average {} after the peer",
                format_load_average(load_average())
            );
        }
        if exhaustive {
            println!(
                "gaps are to exhaustive (table) on the same tick: (J_exhaustive - J) / |J_exhaustive|"
            );
        } else {
            println!(
                "gaps are to exact on the same tick (too many feasible configurations for exhaustive search): (J_exact - J) / |J_exact|"
            );
        }
        println!(
            "failed: ticks whose decision was not used (the last valid one was kept; inf gap if it scores -inf)"
        );
        println!();
    }
    Ok((
        ScenarioBench {
            models: problem.models.len(),
            results,
        },
        report,
    ))
}

/// Median latency of each policy against the number of models.
fn write_scaling_svg(path: &std::path::Path, benches: &[ScenarioBench]) -> Result<()> {
    let mut labels: Vec<&str> = Vec::new();
    for b in benches {
        for r in &b.results {
            if !labels.contains(&r.label.as_str()) {
                labels.push(&r.label);
            }
        }
    }
    let series = labels
        .iter()
        .map(|&label| {
            let points = benches
                .iter()
                .filter_map(|b| {
                    let r = b.results.iter().find(|r| r.label == label)?;
                    Some((b.models as f64, quantile_ms(&r.latencies, 0.5)))
                })
                .collect();
            Series::new(label, points)
        })
        .collect();
    let chart = LineChart {
        title: "Median decision latency through the Wasm boundary against N".into(),
        x_label: "models N".into(),
        y_label: "median latency (ms)".into(),
        series,
        ..Default::default()
    };
    write_atomically(path, chart.render().as_bytes())
}

/// Ticks listed with their state and seed in the JSON, worst gap first.
const WORST_TICKS: usize = 5;

fn summary(r: &ContenderResult, reference: &[f64], ticks: &[(GpuState, u64)]) -> serde_json::Value {
    let mut gaps = utility_gaps(reference, &r.utilities);
    // The ticks it fell short on, with what `mfsched decide --state … --seed …`
    // needs to decide them again.
    let mut short: Vec<usize> = (0..gaps.len()).filter(|&t| gaps[t] > 0.0).collect();
    short.sort_by(|&a, &b| gaps[b].total_cmp(&gaps[a]));
    let worst_ticks: Vec<serde_json::Value> = short
        .iter()
        .take(WORST_TICKS)
        .map(|&t| {
            serde_json::json!({
                "tick": t,
                "gap_pct": 100.0 * gaps[t],
                "state": ticks[t].0,
                "seed": ticks[t].1,
            })
        })
        .collect();
    let gap_max = gaps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut gaps_for_mean = gaps.clone();
    gaps_for_mean.retain(|g| g.is_finite());
    let gap_mean = gaps_for_mean.iter().sum::<f64>() / gaps_for_mean.len().max(1) as f64;
    let mut candidates: Vec<f64> = r.candidates.iter().map(|&c| c as f64).collect();
    serde_json::json!({
        "policy": r.label,
        "latency_p50_ms": quantile_ms(&r.latencies, 0.5),
        "latency_p99_ms": quantile_ms(&r.latencies, 0.99),
        "predict_p50_ms": quantile_ms(&r.predict, 0.5),
        "evaluate_p50_ms": quantile_ms(&r.evaluate, 0.5),
        "candidates_p50": nearest_rank(&mut candidates, 0.5),
        "gap_p50_pct": 100.0 * nearest_rank(&mut gaps, 0.5),
        "gap_mean_pct": 100.0 * gap_mean,
        "gap_max_pct": 100.0 * gap_max,
        "worst_ticks": worst_ticks,
        "failed": r.failures,
    })
}

/// Latency CDFs, one line per policy, on a log-scaled time axis.
fn write_svg(path: &std::path::Path, results: &[ContenderResult]) -> Result<()> {
    let series = results
        .iter()
        .map(|r| {
            let mut ms: Vec<f64> = r.latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
            ms.sort_by(f64::total_cmp);
            let n = ms.len() as f64;
            let points = ms
                .iter()
                .enumerate()
                .map(|(i, &t)| (t.max(1e-3), (i + 1) as f64 / n))
                .collect();
            Series::new(r.label.clone(), points)
        })
        .collect();
    let chart = LineChart {
        title: "Decision latency through the Wasm boundary".into(),
        x_label: "latency (ms, log scale)".into(),
        y_label: "fraction of decisions".into(),
        series,
        log_x: true,
        y_range: Some((0.0, 1.0)),
        ..Default::default()
    };
    let tmp = path.with_extension("svg.tmp");
    std::fs::write(&tmp, chart.render())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A progress bar on stderr when it is a terminal.
fn progress(len: u64, what: &str) -> Result<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return Ok(ProgressBar::hidden());
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!("{{bar:40}} {{pos}}/{{len}} {what} {{eta}}"))
            .context("progress template")?,
    );
    Ok(bar)
}

/// The candidate-aware field over the CPU backend and, when an adapter is
/// there, over the wgpu backend (any adapter, software ones included).
struct FieldPair {
    cpu: CandidateAware,
    gpu: Option<CandidateAware>,
}

impl FieldPair {
    fn load(scenario: &Scenario, models: Option<&std::path::Path>) -> Result<Self> {
        let bundle = load_bundled(scenario, models)?;
        let profile = bundled_training_profile(scenario, models, &bundle)?;
        let problem = &scenario.problem;
        let on = |choice| -> Result<CandidateAware> {
            let meanfield = Arc::new(bundle.meanfield_on(problem, choice)?);
            CandidateAware::new(meanfield, problem, &profile)
        };
        Ok(Self {
            cpu: on(BackendChoice::Cpu)?,
            gpu: on(BackendChoice::Gpu).ok(),
        })
    }
}

#[derive(Debug, Args)]
pub struct SurrogateArgs {
    /// A bundled scenario name or a path to a scenario .toml file.
    #[arg(long, default_value = "paper-n5")]
    scenario: String,
    #[command(flatten)]
    predictors: PredictorArgs,
    /// Timed runs per backend and call kind (the median is reported).
    #[arg(long, default_value_t = 7)]
    repeats: usize,
    /// Rows per joint-candidate batch [default: 100, 10000 and every feasible candidate].
    #[arg(long, value_delimiter = ',', value_name = "ROWS,...")]
    rows: Vec<usize>,
    /// Also write rows/s against batch size as an SVG chart.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Also run the numpy peer (e.g. bench/numpy_peer.py) with python3, after
    /// mfsched's timings, and print its figures beside mfsched's; a peer that
    /// cannot run is reported in one line and the rest of the bench stands.
    #[arg(long, value_name = "PATH")]
    peer: Option<PathBuf>,
    /// Seconds the peer may run before it is stopped.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    peer_timeout: u64,
}

fn surrogate(args: SurrogateArgs) -> Result<()> {
    if args.repeats == 0 {
        bail!("--repeats must be positive");
    }
    if args.rows.contains(&0) {
        bail!("--rows: every batch needs at least one row");
    }
    let scenario = load_scenario(&args.scenario)?;
    let problem = &scenario.problem;
    let (nets, what) = args.predictors.load(&scenario)?;
    let n = problem.models.len();
    let feasible = problem.count_feasible() as usize;
    let mut sizes = if args.rows.is_empty() {
        vec![100, 10_000, feasible * n]
    } else {
        args.rows.clone()
    };
    sizes.sort_unstable();
    sizes.dedup();
    // A busy machine, not a fixed point of the field: what a decision sees under load.
    let state = GpuState {
        workload: WorkloadLevel::High,
        vram_used_mib: 0.8 * f64::from(problem.card.vram_mib),
        utilization: 0.85,
        contention: None,
    };

    println!(
        "scenario    {}: {n} models, Σk = {} local configurations, {feasible} VRAM-feasible joint configurations",
        scenario.name,
        problem.models.iter().map(|m| m.grid_size()).sum::<usize>()
    );
    println!("predictors  {what}");
    let load_at_start = load_average();
    println!(
        "machine     {} CPUs, load average {} (1, 5, 15 min) at the start",
        default_threads(),
        format_load_average(load_at_start)
    );
    println!(
        "CPU         mfsched's backend: up to {} threads per joint call, one per {MIN_CANDIDATES_PER_THREAD} candidates (column CPU thr)",
        default_threads()
    );
    if cfg!(debug_assertions) {
        println!("build       debug: the CPU numbers are not representative, use --release");
    }
    // The candidate-aware field needs the bundle and its training profile.
    let field = match &args.predictors.synthetic {
        Some(_) => None,
        None => Some(FieldPair::load(
            &scenario,
            args.predictors.models.as_deref(),
        )?),
    };
    let gpu = match GpuBackend::new(problem, &nets) {
        Ok(gpu) => {
            let adapter = gpu.adapter();
            println!(
                "adapter     {adapter}; automatic backend choice: {}",
                if auto_uses(adapter) {
                    "wgpu (hardware adapter)"
                } else {
                    "CPU (software adapter; --backend gpu to use it anyway)"
                }
            );
            Some(gpu)
        }
        Err(e) => {
            println!("adapter     none, wgpu not measured: {e:#}");
            None
        }
    };
    println!(
        "repeats     {} per backend and call, medians, CPU and wgpu alternating",
        args.repeats
    );
    println!();

    let bar = progress(surrogate_bench_steps(&sizes, args.repeats), "timed rounds")?;
    let result = run_surrogate_bench(
        problem,
        &nets,
        gpu.as_ref(),
        &state,
        &sizes,
        args.repeats,
        || bar.inc(1),
    )?;
    bar.finish_and_clear();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or_else(|| "-".to_string(), f);
    println!(
        "{:<22} {:>9} {:>7} {:>14} {:>14} {:>10} {:>10} {:>10}",
        "joint candidates",
        "rows",
        "CPU thr",
        "CPU rows/s",
        "wgpu rows/s",
        "wgpu/CPU",
        "CPU ms",
        "wgpu ms"
    );
    let line = |label: &str, t: &Timing| {
        println!(
            "{label:<22} {:>9} {:>7} {:>14.3e} {:>14} {:>10} {:>10.3} {:>10}",
            t.rows,
            t.cpu_threads,
            t.cpu_rows_per_s(),
            opt(t.gpu_rows_per_s(), &|v| format!("{v:.3e}")),
            opt(t.gpu_speedup(), &|v| format!("{v:.2}x")),
            ms(t.cpu),
            opt(t.gpu.map(ms), &|v| format!("{v:.3}")),
        );
    };
    for t in &result.batches {
        line(&format!("{} candidates", t.rows / n), t);
    }
    println!();
    println!("one full {} decision", scenario.name);
    line("table (Σk rows)", &result.decision_table);
    line("every feasible cand.", &result.decision_joint);
    let ratio = |joint: Duration, table: Duration| joint.as_secs_f64() / table.as_secs_f64();
    println!(
        "candidates / table time: CPU {:.0}x, wgpu {}",
        ratio(result.decision_joint.cpu, result.decision_table.cpu),
        opt(
            result
                .decision_joint
                .gpu
                .zip(result.decision_table.gpu)
                .map(|(j, t)| ratio(j, t)),
            &|v| format!("{v:.0}x")
        )
    );
    if let Some(script) = &args.peer {
        let peer = PeerRun {
            scenario_toml: peer_scenario_toml(script, &args.scenario),
            script: script.clone(),
            repeats: args.repeats,
            timeout: Duration::from_secs(args.peer_timeout),
        };
        eprintln!("running the peer: {} {}", PEER_PYTHON, script.display());
        let outcome = run_peer_bench(&peer);
        print_peer(
            &scenario.name,
            &result.decision_joint,
            outcome,
            load_at_start,
        );
    }
    if let Some(field) = &field {
        let bar = progress(args.repeats as u64, "candidate-aware solves")?;
        let result = bench_candidate_aware(
            problem,
            &field.cpu,
            field.gpu.as_ref(),
            &state,
            args.repeats,
            || bar.inc(1),
        )?;
        bar.finish_and_clear();
        let t = &result.solve;
        println!();
        println!(
            "one candidate-aware {} decision: every feasible candidate ({} rows in the first pass), fixed point to {:.0e}",
            scenario.name,
            t.rows,
            mfsched_surrogate::FIELD_TOLERANCE
        );
        println!(
            "{:<22} {:>9} {:>12} {:>14} {:>10} {:>10}",
            "backend", "passes", "rows", "rows/s", "solve ms", "wgpu/CPU"
        );
        println!(
            "{:<22} {:>9} {:>12} {:>14.3e} {:>10.1} {:>10}",
            format!("CPU, {} thr", t.cpu_threads),
            result.passes_cpu,
            result.rows_cpu,
            result.rows_cpu as f64 / t.cpu.as_secs_f64(),
            ms(t.cpu),
            "-"
        );
        if let (Some(g), Some(passes), Some(rows)) = (t.gpu, result.passes_gpu, result.rows_gpu) {
            println!(
                "{:<22} {:>9} {:>12} {:>14.3e} {:>10.1} {:>10}",
                "wgpu",
                passes,
                rows,
                rows as f64 / g.as_secs_f64(),
                ms(g),
                format!("{:.2}x", t.cpu.as_secs_f64() / g.as_secs_f64())
            );
        }
        if let Some(d) = result.max_normalised_difference {
            println!("largest |CPU − wgpu| prediction: {d:.2e} of the model's output scale");
        }
        let q = field.cpu.utilization_model().quality;
        println!(
            "utilisation model: {} parameters fitted on the bundle's {} profile rows, held-out R² {:.3}, RMSE {:.4}",
            q.parameters, q.rows, q.r2_holdout, q.rmse_holdout
        );
    }
    println!("wgpu/CPU is throughput over throughput: above 1x the GPU is faster");

    if let Some(path) = &args.svg {
        let series = |name: &str, rate: &dyn Fn(&Timing) -> Option<f64>| {
            Series::new(
                name,
                result
                    .batches
                    .iter()
                    .filter_map(|t| rate(t).map(|r| (t.rows as f64, r / 1e6)))
                    .collect(),
            )
        };
        let mut lines = vec![series("CPU", &|t| Some(t.cpu_rows_per_s()))];
        let mut title = format!("MeanField inference throughput, {}", scenario.name);
        if let Some(gpu) = &gpu {
            lines.push(series("wgpu", &|t| t.gpu_rows_per_s()));
            title.push_str(&format!(" (wgpu on {})", gpu.adapter().name));
        }
        let chart = LineChart {
            title,
            x_label: "rows per call (log scale)".into(),
            y_label: "million rows/s".into(),
            series: lines,
            log_x: true,
            ..Default::default()
        };
        write_atomically(path, chart.render().as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The peer's figures beside mfsched's every-feasible-candidate call, in one
/// table: each row says whose it is (mfsched with its CPU threads, the numpy
/// peer with its BLAS threads), and mfsched/peer is rows/s over rows/s. A peer
/// that gave no figures is one line.
fn print_peer(
    scenario: &str,
    mfsched: &Timing,
    outcome: Result<PeerFigures>,
    load_at_start: Option<[f64; 3]>,
) {
    println!();
    let peer = match outcome {
        Ok(peer) => peer,
        Err(e) => {
            println!("numpy peer  not measured: {e:#}");
            return;
        }
    };
    let same = peer.scenario == scenario;
    println!(
        "side by side with the numpy peer: numpy {}, BLAS {}, {}, {} repeats, medians{}",
        peer.machine.numpy,
        peer.machine.blas,
        peer.blas_threads_label(),
        peer.repeats,
        if same {
            String::new()
        } else {
            format!(" (it measured {}, not {scenario}: no ratio)", peer.scenario)
        }
    );
    println!(
        "{:<28} {:<30} {:>9} {:>10} {:>12} {:>13}",
        "who", "call", "rows", "median ms", "rows/s", "mfsched/peer"
    );
    let mfsched_rate = mfsched.cpu_rows_per_s();
    println!(
        "{:<28} {:<30} {:>9} {:>10.2} {:>12.3e} {:>13}",
        format!("mfsched CPU, {} thr", mfsched.cpu_threads),
        "every feasible candidate",
        mfsched.rows,
        mfsched.cpu.as_secs_f64() * 1e3,
        mfsched_rate,
        ""
    );
    let who = format!("numpy peer, {}", peer.blas_threads_label());
    for (call, t) in [
        ("A every candidate + utility", &peer.candidates),
        ("MLP one batch (one model)", &peer.mlp_batch),
    ] {
        println!(
            "{who:<28} {call:<30} {:>9} {:>10.2} {:>12.3e} {:>13}",
            t.rows,
            t.median_ms,
            t.rows_per_s,
            if same {
                format!("{:.2}x", mfsched_rate / t.rows_per_s)
            } else {
                "-".to_string()
            }
        );
    }
    println!(
        "load average {} at the start, {} when the peer started, {} when it ended",
        format_load_average(load_at_start),
        format_load_average(Some(peer.machine.loadavg_before)),
        format_load_average(Some(peer.machine.loadavg_after)),
    );
}
