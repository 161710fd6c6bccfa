use anyhow::{Result, bail};
use clap::Subcommand;
use mfsched_core::fsutil::write_atomically;
use mfsched_core::profile::{DEFAULT_REPEATS, SamplingPlan};
use mfsched_core::scenario;
use mfsched_lab::sim::{self, Simulator, calibration, calibration_plot, ceiling};
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
        #[arg(long, default_value_t = calibration::REPEATS)]
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
        #[arg(long, default_value_t = DEFAULT_REPEATS)]
        repeats: u32,
    },
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
    }
}

fn run_calibration(seed: u64, seeds: u64, repeats: u32, svg: Option<PathBuf>) -> Result<()> {
    if seeds == 0 || repeats == 0 {
        bail!("--seeds and --repeats must be at least 1");
    }
    let runs = (seed..seed + seeds)
        .map(|s| calibration::calibrate(s, repeats))
        .collect::<Result<Vec<_>>>()?;
    println!(
        "Calibration against the published interference, measured on the simulator ({})",
        sim::DEVICE_NAME
    );
    println!(
        "{}: full grid × 4 regimes = {} rows, {repeats} repeats per row; slowdown = 1 − throughput / solo throughput",
        calibration::SCENARIO,
        runs[0].rows
    );
    println!();
    let checks: Vec<Vec<calibration::Check>> = runs.iter().map(|r| r.checks()).collect();
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
        write_atomically(&path, calibration_plot::svg(&runs).as_bytes())?;
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
    let scenario = scenario::load(name)?;
    let problem = &scenario.problem;
    let plan = SamplingPlan::for_problem(problem, samples);
    let mut simulator = Simulator::new(problem, Rng::derive(seed, 1).next_u64())?;
    let data = mfsched_lab::profiling::run(
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
    for c in ceiling::noise_ceiling(&data, problem, &simulator) {
        println!("{:<10} {:>10.4} {:>22.4}", c.model, c.r2, c.r2_relative);
    }
    Ok(())
}
