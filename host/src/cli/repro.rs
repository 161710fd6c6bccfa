//! `mfsched repro sample-complexity`: the published accuracy study on the simulator.

use super::profile::progress_bar;
use anyhow::{Result, bail};
use clap::Args;
use mfsched::surrogate::study::{self, StudyConfig};
use std::path::PathBuf;
use std::time::Instant;

/// N = 2..6, increasing training-set sizes, seeds × stratified folds, mean R²
/// over models; n* = the smallest n with mean R² ≥ 0.95; the Joint MLP at N = 2.
#[derive(Debug, Args)]
pub struct SampleComplexityArgs {
    /// Directory for results.json, learning-curves.svg and sample-complexity.md.
    #[arg(long, default_value = "repro-sample-complexity")]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Training-set sizes, comma-separated (default: the published range).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// Scenarios, comma-separated (default: paper-n2 … paper-n6).
    #[arg(long, value_delimiter = ',')]
    scenarios: Option<Vec<String>>,
    /// Seeds (default 5).
    #[arg(long)]
    seeds: Option<usize>,
    /// Cross-validation folds (default 5).
    #[arg(long)]
    folds: Option<usize>,
}

pub fn sample_complexity(args: SampleComplexityArgs) -> Result<()> {
    let mut config = StudyConfig::published(args.seed);
    if let Some(jobs) = args.jobs {
        if jobs == 0 {
            bail!("--jobs must be at least 1");
        }
        config.jobs = jobs;
    }
    if let Some(mut sizes) = args.sizes {
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.first() < Some(&2) {
            bail!("--sizes: every training-set size must be at least 2");
        }
        config.sizes = sizes;
    }
    if let Some(s) = args.scenarios {
        config.scenarios = s;
    }
    if let Some(s) = args.seeds {
        config.seeds = s;
    }
    if let Some(f) = args.folds {
        config.folds = f;
    }
    let mut command = format!("mfsched repro sample-complexity --seed {}", args.seed);
    let default = StudyConfig::published(args.seed);
    if (&config.sizes, &config.scenarios, config.seeds, config.folds)
        != (
            &default.sizes,
            &default.scenarios,
            default.seeds,
            default.folds,
        )
    {
        command.push_str(&format!(
            " --sizes {} --scenarios {} --seeds {} --folds {}",
            config
                .sizes
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
            config.scenarios.join(","),
            config.seeds,
            config.folds
        ));
    }
    eprintln!(
        "sample complexity on the {}: {} scenarios, n ∈ {:?}, {} seeds × {} folds, {} threads",
        mfsched::sim::DEVICE_NAME,
        config.scenarios.len(),
        config.sizes,
        config.seeds,
        config.folds,
        config.jobs
    );
    let started = Instant::now();
    let bar = progress_bar(0, "training");
    let result = study::run(&config, &|done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    println!(
        "Sample complexity of the MeanField surrogate, measured on the {} ({} seeds × {}-fold stratified CV, mean R² over models; n* = smallest n with mean R² ≥ {})",
        result.device, config.seeds, config.folds, config.target_r2
    );
    print!("{}", result.table());
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    for path in result.write(&args.out, &command)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}
