//! `mfsched bench ...`: performance measured side by side in one process.

use super::plugins::{PluginOpts, predictor};
use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mfsched::plugin::bench::{self, Contender, ContenderResult};
use mfsched::plugin::registry::{resolve_policy, resolve_utility};
use mfsched::plugin::setup;
use mfsched::scenario;
use mfsched::svg::{LineChart, Series};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Decision latency per policy through the Wasm boundary, and each policy's
    /// utility gap to exhaustive search on the same ticks.
    Policies(PoliciesArgs),
}

#[derive(Debug, Args)]
pub struct PoliciesArgs {
    #[arg(long, default_value = "paper-n5")]
    scenario: String,
    /// Decision ticks per policy (each tick: a seeded random state and seed).
    #[arg(long, default_value_t = 100)]
    decisions: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the latency distributions as an SVG chart.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    opts: PluginOpts,
}

pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Policies(args) => policies(args),
    }
}

fn policies(args: PoliciesArgs) -> Result<()> {
    if args.decisions == 0 {
        bail!("--decisions must be positive");
    }
    let scenario = scenario::load(&args.scenario)?;
    let (predictor, predictor_name) = predictor();
    let mut problem = scenario.problem.clone();
    setup::fill_defaults(&mut problem, &scenario.explicit_floors, predictor.as_ref());
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
        })
    };
    // Exhaustive (table) first: the reference for the gaps.
    let contenders = vec![
        contender(
            "exhaustive (table)",
            "exhaustive",
            &[("predictions", "table")],
        )?,
        contender(
            "exhaustive (candidates)",
            "exhaustive",
            &[("predictions", "candidates")],
        )?,
        contender("ga", "ga", &[])?,
        contender("static-budget k=500", "static-budget", &[("k", "500")])?,
        contender("static-budget k=5000", "static-budget", &[("k", "5000")])?,
        contender("static-full", "static-budget", &[("k", "full")])?,
    ];
    let ticks = bench::ticks(&problem, args.decisions, args.seed);
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new((ticks.len() * contenders.len()) as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} decisions {eta}")
                .context("progress template")?,
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let results = bench::run(
        &engine,
        &utility,
        &predictor,
        &problem,
        &contenders,
        &ticks,
        || bar.inc(1),
    );
    bar.finish_and_clear();

    let reference = results[0].utilities.clone();
    let rows: Vec<serde_json::Value> = results.iter().map(|r| summary(r, &reference)).collect();
    let table_ms = bench::quantile_ms(&results[0].latencies, 0.5);
    let candidates_ms = bench::quantile_ms(&results[1].latencies, 0.5);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "scenario": scenario.name,
                "predictor": predictor_name,
                "decisions": args.decisions,
                "seed": args.seed,
                "feasible": problem.count_feasible(),
                "policies": rows,
                "exhaustive_candidates_over_table": candidates_ms / table_ms,
            }))?
        );
    } else {
        println!(
            "scenario {} ({} feasible joint configurations), {} decisions per policy, seed {}",
            scenario.name,
            problem.count_feasible(),
            args.decisions,
            args.seed
        );
        println!("predictor {predictor_name}");
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
                row["gap_p50_pct"].as_f64().unwrap_or(f64::NAN),
                row["gap_max_pct"].as_f64().unwrap_or(f64::NAN),
                row["failed"].as_u64().unwrap_or(0),
            );
        }
        println!();
        println!(
            "exhaustive: table-based {table_ms:.2} ms vs candidate-based {candidates_ms:.2} ms median ({:.1}x)",
            candidates_ms / table_ms
        );
        println!(
            "gaps are to exhaustive (table) on the same tick: (J_exhaustive - J) / |J_exhaustive|"
        );
    }
    if let Some(path) = &args.svg {
        write_svg(path, &results)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn summary(r: &ContenderResult, reference: &[f64]) -> serde_json::Value {
    let mut gaps = bench::gaps(reference, &r.utilities);
    let gap_max = gaps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut gaps_for_mean = gaps.clone();
    gaps_for_mean.retain(|g| g.is_finite());
    let gap_mean = gaps_for_mean.iter().sum::<f64>() / gaps_for_mean.len().max(1) as f64;
    let mut candidates: Vec<f64> = r.candidates.iter().map(|&c| c as f64).collect();
    serde_json::json!({
        "policy": r.label,
        "latency_p50_ms": bench::quantile_ms(&r.latencies, 0.5),
        "latency_p99_ms": bench::quantile_ms(&r.latencies, 0.99),
        "predict_p50_ms": bench::quantile_ms(&r.predict, 0.5),
        "evaluate_p50_ms": bench::quantile_ms(&r.evaluate, 0.5),
        "candidates_p50": bench::quantile(&mut candidates, 0.5),
        "gap_p50_pct": 100.0 * bench::quantile(&mut gaps, 0.5),
        "gap_mean_pct": 100.0 * gap_mean,
        "gap_max_pct": 100.0 * gap_max,
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
