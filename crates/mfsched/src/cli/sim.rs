use anyhow::{Context, Result, bail};
use clap::Subcommand;
use mfsched_core::WorkloadLevel;
use mfsched_core::load_scenario;
use mfsched_core::write_atomically;
use mfsched_core::{DEFAULT_PROFILE_REPEATS, SamplingPlan};
use mfsched_lab::Simulator;
use mfsched_lab::{
    CALIBRATION_REPEATS, CALIBRATION_SCENARIO, CalibrationCheck, SIM_DEVICE_NAME, calibrate,
    calibration_svg, noise_ceiling,
};
use mfsched_lab::{MetricsFormat, SimServeOptions, SimServers};
use mfsched_rng::Rng;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Reproduces the published interference figures on a simulated paper-n2 profile
    /// and prints them beside the published ones (fails if one is off).
    Calibration {
        /// First seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How many consecutive seeds to run, from --seed on.
        #[arg(long, default_value_t = 1)]
        seeds: u64,
        /// Measurements averaged into each profile row.
        #[arg(long, default_value_t = CALIBRATION_REPEATS)]
        repeats: u32,
        /// Also write the comparison as an SVG bar chart.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// How much of each model's throughput variance the simulator's noise alone
    /// leaves unexplained (the R² ceiling of any predictor).
    Ceiling {
        /// A bundled scenario name or a path to a scenario .toml file.
        #[arg(long)]
        scenario: String,
        #[arg(long)]
        seed: u64,
        /// Rows (default: the profiling default for the scenario).
        #[arg(long)]
        samples: Option<usize>,
        #[arg(long, default_value_t = DEFAULT_PROFILE_REPEATS)]
        repeats: u32,
    },
    /// Runs the simulator as one model server per model on loopback (SIMULATED
    /// servers, not real ones): each serves /metrics with vLLM's or Triton's
    /// metric names and takes its configuration from the daemon's webhook
    /// actuator (POST /config), while a workload trace drives the offered load.
    /// Prints the daemon config that reads and actuates them; runs until
    /// SIGINT/SIGTERM.
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A bundled scenario name or a path to a scenario .toml file.
    #[arg(long, default_value = "paper-n2")]
    scenario: String,
    /// A dynamic workload trace (steady, step-up, …), replayed cyclically; else --level.
    #[arg(long)]
    trace: Option<String>,
    /// The workload level of every tick when no --trace is given.
    #[arg(long, default_value = "medium")]
    level: String,
    #[arg(long, default_value_t = mfsched_core::DEFAULT_TRACE_TICKS)]
    trace_ticks: usize,
    /// Length of one simulated tick (one trace step), ms.
    #[arg(long, default_value_t = 1000)]
    tick_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Requests per second each server is offered at load ratio 1.
    #[arg(long, default_value_t = 10.0)]
    reference_rate: f64,
    /// Every server's metric names: vllm or triton (default: vllm for llm models, triton for the others).
    #[arg(long)]
    format: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    listen: std::net::IpAddr,
    /// Model i listens on port-base + i; 0 picks free ports (see --ports-file).
    #[arg(long, default_value_t = 18000)]
    port_base: u16,
    /// Writes {"model": "host:port", …} here (JSON, atomically) once every server listens.
    #[arg(long)]
    ports_file: Option<PathBuf>,
}

pub fn run(cmd: SimCommand) -> Result<()> {
    match cmd {
        SimCommand::Calibration {
            seed,
            seeds,
            repeats,
            svg,
        } => run_calibration(seed, seeds, repeats, svg),
        SimCommand::Ceiling {
            scenario,
            seed,
            samples,
            repeats,
        } => run_ceiling(&scenario, seed, samples, repeats),
        SimCommand::Serve(args) => run_serve(args),
    }
}

fn run_serve(args: ServeArgs) -> Result<()> {
    let scenario = load_scenario(&args.scenario)?;
    let problem = scenario.problem;
    let levels = match &args.trace {
        Some(name) => {
            mfsched_core::generate_trace(name, args.trace_ticks, args.seed)
                .with_context(|| {
                    format!(
                        "--trace '{name}' is unknown: use one of {}",
                        mfsched_core::TRACE_NAMES.join(", ")
                    )
                })?
                .levels
        }
        None => vec![WorkloadLevel::parse(&args.level).with_context(|| {
            format!(
                "--level '{}' is unknown: use low, medium, high or burst",
                args.level
            )
        })?],
    };
    let format = match args.format.as_deref() {
        None => None,
        Some(f) => Some(
            MetricsFormat::parse(f)
                .with_context(|| format!("--format '{f}' is unknown: use vllm or triton"))?,
        ),
    };
    let formats: Vec<MetricsFormat> = problem
        .models
        .iter()
        .map(|m| format.unwrap_or_else(|| MetricsFormat::for_kind(&m.kind)))
        .collect();
    let options = SimServeOptions {
        reference_rates: vec![args.reference_rate; problem.models.len()],
        formats: formats.clone(),
        levels,
        tick: std::time::Duration::from_millis(args.tick_ms),
        seed: args.seed,
        listen: args.listen,
        port_base: args.port_base,
        problem: problem.clone(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let servers = SimServers::start(options).await?;
        if let Some(path) = &args.ports_file {
            let ports: std::collections::BTreeMap<&str, String> = servers
                .addresses
                .iter()
                .map(|(m, a)| (m.as_str(), a.to_string()))
                .collect();
            write_atomically(path, &serde_json::to_vec_pretty(&ports)?)?;
        }
        println!(
            "SIMULATED model servers ({}, seed {}): not real inference servers",
            SIM_DEVICE_NAME,
            args.seed
        );
        for (m, f) in problem.models.iter().zip(&formats) {
            println!(
                "  {:<12} {:<7} http://{}/metrics  POST /config",
                m.name,
                f.as_str(),
                servers.addresses[&m.name]
            );
        }
        println!();
        println!("# For mfsched run: read these servers' load and actuate them.");
        println!("[workload]\nsource = \"prometheus\"\n\n[workload.prometheus]");
        for (m, f) in problem.models.iter().zip(&formats) {
            println!(
                "[workload.prometheus.models.{}]\npreset = \"{}\"\nscrape = \"http://{}/metrics\"\nreference_rate = {}",
                m.name,
                f.as_str(),
                servers.addresses[&m.name],
                args.reference_rate
            );
        }
        println!("\n[actuator.webhook.urls]");
        for m in &problem.models {
            println!("{} = \"http://{}/config\"", m.name, servers.addresses[&m.name]);
        }
        // Every server's page shows the one simulated card under DCGM's names.
        if let Some(first) = problem.models.first() {
            println!(
                "\n[sampler]\nkind = \"dcgm\"\n\n[sampler.dcgm]\nurl = \"http://{}/metrics\"",
                servers.addresses[&first.name]
            );
        }
        mfsched_daemon::wait_for_signal().await;
        drop(servers);
        anyhow::Ok(())
    })
}

fn run_calibration(seed: u64, seeds: u64, repeats: u32, svg: Option<PathBuf>) -> Result<()> {
    if seeds == 0 || repeats == 0 {
        bail!("--seeds and --repeats must be at least 1");
    }
    let runs = (seed..seed + seeds)
        .map(|s| calibrate(s, repeats))
        .collect::<Result<Vec<_>>>()?;
    println!(
        "Calibration against the published interference, measured on the simulator ({})",
        SIM_DEVICE_NAME
    );
    println!(
        "{}: full grid × 4 regimes = {} rows, {repeats} repeats per row; slowdown = 1 − throughput / solo throughput",
        CALIBRATION_SCENARIO, runs[0].rows
    );
    println!();
    let checks: Vec<Vec<CalibrationCheck>> = runs.iter().map(|r| r.checks()).collect();
    print!("{:<30} {:>16}", "figure", "published");
    for r in &runs {
        print!(" {:>13}", format!("seed {}", r.seed));
    }
    println!();
    for (k, first) in checks[0].iter().enumerate() {
        print!("{:<30} {:>16}", first.what, first.published);
        for c in &checks {
            let mark = if c[k].pass { "ok" } else { "OFF" };
            print!(" {:>13}", format!("{} {mark}", c[k].measured));
        }
        println!();
    }
    print!(
        "{:<30} {:>16}",
        "FP16 LLM throughput loss", "(not published)"
    );
    for r in &runs {
        let fp16 = r
            .llm
            .loss_pct("fp16")
            .map_or("-".into(), |v| format!("{v:.1} %"));
        print!(" {fp16:>13}");
    }
    println!();
    for (label, stats) in [("LLM", &runs[0].llm), ("vision", &runs[0].vision)] {
        println!();
        println!(
            "one-way ANOVA of {label} slowdown (seed {}), largest effect first",
            runs[0].seed
        );
        println!(
            "  {:<20} {:>6} {:>12} {:>8}",
            "factor", "groups", "SS between", "eta²"
        );
        for f in &stats.factors {
            println!(
                "  {:<20} {:>6} {:>12.4} {:>8.3}",
                f.name, f.groups, f.ss_between, f.eta_squared
            );
        }
    }
    if let Some(path) = svg {
        write_atomically(&path, calibration_svg(&runs).as_bytes())?;
        println!();
        println!("chart written to {}", path.display());
    }
    let off: Vec<u64> = runs
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.seed)
        .collect();
    if !off.is_empty() {
        bail!("the calibration is off for seed(s) {off:?} (see OFF above)");
    }
    Ok(())
}

fn run_ceiling(name: &str, seed: u64, samples: Option<usize>, repeats: u32) -> Result<()> {
    if repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    let scenario = load_scenario(name)?;
    let problem = &scenario.problem;
    let plan = SamplingPlan::for_problem(problem, samples);
    let mut simulator = Simulator::new(problem, Rng::derive(seed, 1).next_u64())?;
    let data = mfsched_lab::run_profiling(
        &mut simulator,
        problem,
        name,
        &plan,
        repeats,
        Rng::derive(seed, 2).next_u64(),
        &mut |_, _| {},
    )?;
    println!(
        "R² ceiling on {} ({} rows: {}, {repeats} repeats per row), measured on the simulator",
        scenario.name,
        data.rows.len(),
        plan.describe()
    );
    println!("R² of measured throughput against the simulator's noise-free expectation:");
    println!("{:<10} {:>10} {:>22}", "model", "R²", "R² relative to solo");
    for c in noise_ceiling(&data, problem, &simulator) {
        println!("{:<10} {:>10.4} {:>22.4}", c.model, c.r2, c.r2_relative);
    }
    Ok(())
}
