use anyhow::{Context as _, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mfsched_core::WorkloadLevel;
use mfsched_core::{DEFAULT_PROFILE_REPEATS, SamplingPlan};
use mfsched_core::{load_scenario, read_profile, write_profile};
use mfsched_lab::Simulator;
use mfsched_lab::{SIM_DEVICE_NAME, live_remaining_points, profile_live};
use mfsched_rng::Rng;
use std::io::IsTerminal;
use std::path::PathBuf;

/// Profiles a scenario's models on the simulator (or, with --live, through the
/// daemon's actuators on real or simulated servers) and writes the profile CSV.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// A bundled scenario name or a path to a scenario .toml file (offline).
    #[arg(long, required_unless_present = "live", conflicts_with = "live")]
    scenario: Option<String>,
    /// Profile live: apply each point through the actuators of --config and
    /// measure it from the servers' /metrics (docs/production.md).
    #[arg(long, requires_all = ["config", "workload"])]
    live: bool,
    /// The daemon config whose scenario, actuators, [workload.prometheus]
    /// entries (with scrape) and sampler the live profile uses.
    #[arg(long, requires = "live")]
    config: Option<PathBuf>,
    /// The regime the load generator holds during this live run: the plan's
    /// points of that regime are measured.
    #[arg(long, requires = "live")]
    workload: Option<String>,
    /// Time a live point runs before its window, for the servers to reconfigure, ms.
    #[arg(long, default_value_t = 5000, requires = "live")]
    settle_ms: u64,
    /// Length of a live point's measurement window, ms.
    #[arg(long, default_value_t = 10000, requires = "live")]
    window_ms: u64,
    /// Read the GPU state from a DCGM exporter's /metrics (sim serve's pages
    /// carry it) instead of the config's sampler; the same fields as
    /// sampler.kind = "dcgm" reads.
    #[arg(long, requires = "live", value_name = "URL")]
    gpu_metrics: Option<String>,
    /// Print the live plan and its duration, measure nothing.
    #[arg(long, requires = "live")]
    dry_run: bool,
    /// Rows to sample, stratified by model variant and workload level. Default:
    /// the full feasible grid × 4 regimes for N ≤ 2, 40·N rows for N > 2.
    #[arg(long)]
    samples: Option<usize>,
    /// Measurements averaged into each row.
    #[arg(long, default_value_t = DEFAULT_PROFILE_REPEATS)]
    repeats: u32,
    /// Seed for the sampling plan and the simulator's noise: same seed, same file.
    #[arg(long)]
    seed: u64,
    /// Where to write the profile (CSV, see docs/profile-format.md).
    #[arg(long)]
    out: PathBuf,
}

/// A progress bar on a terminal, nothing otherwise.
pub fn progress_bar(total: usize, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

pub fn run(args: ProfileArgs) -> Result<()> {
    if args.live {
        return live(args);
    }
    if args.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    let name = args.scenario.clone().unwrap_or_default();
    let scenario = load_scenario(&name)?;
    let problem = &scenario.problem;
    let plan = SamplingPlan::for_problem(problem, args.samples);
    // Independent streams: changing the plan does not change the noise and back.
    let mut simulator = Simulator::new(problem, Rng::derive(args.seed, 1).next_u64())?;
    eprintln!(
        "profiling {} on the simulator ({}): {}, {} repeats per row",
        scenario.name,
        SIM_DEVICE_NAME,
        plan.describe(),
        args.repeats
    );
    let bar = progress_bar(0, "measuring");
    let profile = mfsched_lab::run_profiling(
        &mut simulator,
        problem,
        &name,
        &plan,
        args.repeats,
        Rng::derive(args.seed, 2).next_u64(),
        &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )?;
    bar.finish_and_clear();
    write_profile(&profile, problem, &args.out)?;
    println!(
        "wrote {} rows ({} models, measured on the simulator) to {}",
        profile.rows.len(),
        profile.models.len(),
        args.out.display()
    );
    Ok(())
}

fn live(args: ProfileArgs) -> Result<()> {
    use mfsched_lab::{LiveOptions, StateSource};
    let config_path = args.config.clone().unwrap_or_default();
    let config = mfsched_daemon::DaemonConfig::load(&config_path)?;
    let level = args.workload.as_deref().unwrap_or_default();
    let workload = WorkloadLevel::parse(level).with_context(|| {
        format!("--workload '{level}' is unknown: use low, medium, high or burst")
    })?;
    if args.window_ms == 0 {
        bail!("--window-ms must be positive");
    }
    let scenario = load_scenario(&config.scenario)?;
    let problem = &scenario.problem;
    let plan = SamplingPlan::for_problem(problem, args.samples);
    let existing = if args.out.exists() {
        Some(read_profile(&args.out, problem)?)
    } else {
        None
    };
    let points = live_remaining_points(problem, &plan, args.seed, workload, existing.as_ref())?;
    let per_point = std::time::Duration::from_millis(args.settle_ms + args.window_ms);
    let total = per_point * points.len() as u32;
    eprintln!(
        "live profile of {} at {workload} load: {} of the plan ({}, seed {}) still to measure, {} already in {}; about {:.0} min ({} ms settle + {} ms window each)",
        scenario.name,
        points.len(),
        plan.describe(),
        args.seed,
        existing.as_ref().map_or(0, |p| p.rows.len()),
        args.out.display(),
        total.as_secs_f64() / 60.0,
        args.settle_ms,
        args.window_ms
    );
    if args.dry_run {
        for joint in &points {
            let knobs: Vec<String> = problem
                .models
                .iter()
                .zip(joint)
                .map(|(m, &c)| format!("{}: {}", m.name, m.knobs(c as usize)))
                .collect();
            println!("{}", knobs.join(" | "));
        }
        return Ok(());
    }
    let options = LiveOptions {
        config,
        workload,
        seed: args.seed,
        settle: std::time::Duration::from_millis(args.settle_ms),
        window: std::time::Duration::from_millis(args.window_ms),
        state: match &args.gpu_metrics {
            Some(url) => StateSource::Dcgm(url.clone()),
            None => StateSource::Sampler,
        },
        out: args.out.clone(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let bar = progress_bar(points.len(), "measuring");
    let summary = rt.block_on(profile_live(
        &options,
        problem,
        &points,
        existing,
        |done, _| bar.set_position(done as u64),
    ))?;
    bar.finish_and_clear();
    println!(
        "measured {} rows at {workload} load ({} rows in {}); {} row(s) saw a load outside that regime",
        summary.measured,
        summary.rows_in_file,
        args.out.display(),
        summary.off_regime
    );
    if summary.skipped > 0 {
        println!(
            "{} point(s) skipped: their readings were not a valid row (see the warnings); a rerun measures them again",
            summary.skipped
        );
    }
    for (actuator, ms) in &summary.downtime_ms {
        let mut ms = ms.clone();
        println!(
            "{actuator}: {} reconfigurations, downtime (request to ready) median {:.0} ms, p90 {:.0} ms, max {:.0} ms",
            ms.len(),
            mfsched_core::nearest_rank(&mut ms, 0.5),
            mfsched_core::nearest_rank(&mut ms, 0.9),
            mfsched_core::nearest_rank(&mut ms, 1.0)
        );
    }
    Ok(())
}
