use anyhow::{Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use mfsched_core::profile::{self, DEFAULT_REPEATS, SamplingPlan};
use mfsched_core::scenario;
use mfsched_lab::sim::{self, Simulator};
use mfsched_rng::Rng;
use std::io::IsTerminal;
use std::path::PathBuf;

/// Profiles a scenario's models on the simulator and writes the profile CSV.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// A bundled scenario name or a path to a scenario .toml file.
    #[arg(long)]
    scenario: String,
    /// Rows to sample, stratified by model variant and workload level. Default:
    /// the full feasible grid × 4 regimes for N ≤ 2, 40·N rows for N > 2.
    #[arg(long)]
    samples: Option<usize>,
    /// Measurements averaged into each row.
    #[arg(long, default_value_t = DEFAULT_REPEATS)]
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
    if args.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    let scenario = scenario::load(&args.scenario)?;
    let problem = &scenario.problem;
    let plan = SamplingPlan::for_problem(problem, args.samples);
    // Independent streams: changing the plan does not change the noise and back.
    let mut simulator = Simulator::new(problem, Rng::derive(args.seed, 1).next_u64())?;
    eprintln!(
        "profiling {} on the simulator ({}): {}, {} repeats per row",
        scenario.name,
        sim::DEVICE_NAME,
        plan.describe(),
        args.repeats
    );
    let bar = progress_bar(0, "measuring");
    let profile = mfsched_lab::profiling::run(
        &mut simulator,
        problem,
        &args.scenario,
        &plan,
        args.repeats,
        Rng::derive(args.seed, 2).next_u64(),
        &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )?;
    bar.finish_and_clear();
    profile::write_csv(&profile, problem, &args.out)?;
    println!(
        "wrote {} rows ({} models, measured on the simulator) to {}",
        profile.rows.len(),
        profile.models.len(),
        args.out.display()
    );
    Ok(())
}
