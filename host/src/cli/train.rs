//! `mfsched train`: a MeanField bundle from a profile CSV.

use super::profile::progress_bar;
use anyhow::{Context, Result};
use clap::Args;
use mfsched::profile;
use mfsched::scenario;
use mfsched::surrogate::training;
use mfsched_nn::TrainConfig;
use std::path::PathBuf;

/// Trains one MeanField predictor per model on a profile and writes the bundle.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The profile CSV (see docs/profile-format.md), e.g. from `mfsched profile`.
    #[arg(long)]
    data: PathBuf,
    /// The scenario the profile was measured for (bundled name or .toml path).
    #[arg(long)]
    scenario: String,
    /// Output bundle directory (bundle.json + weights.safetensors).
    #[arg(long)]
    out: PathBuf,
    /// Seed for initialisation, shuffling, dropout and the hold-out split.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Training epochs per predictor.
    #[arg(long, default_value_t = TrainConfig::default().epochs)]
    epochs: usize,
}

pub fn run(args: TrainArgs) -> Result<()> {
    let scenario = scenario::load(&args.scenario)?;
    let problem = &scenario.problem;
    let bytes = std::fs::read(&args.data)
        .with_context(|| format!("cannot read {}", args.data.display()))?;
    let data = profile::read_csv(&args.data, problem)?;
    let config = TrainConfig {
        epochs: args.epochs,
        ..TrainConfig::default()
    };
    eprintln!(
        "training {} MeanField predictors ({:?} hidden, {} epochs) on {} rows of {}",
        problem.models.len(),
        config.hidden,
        config.epochs,
        data.rows.len(),
        args.data.display()
    );
    let bar = progress_bar(0, "training");
    let bundle = training::train_bundle(
        &scenario,
        &data,
        training::sha256_hex(&bytes),
        &config,
        args.seed,
        &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )?;
    bar.finish_and_clear();
    bundle.write(&args.out)?;
    println!(
        "{:<10} {:>8} {:>8} {:>10}",
        "model", "train", "held out", "R²"
    );
    for m in &bundle.meta.models {
        println!(
            "{:<10} {:>8} {:>8} {:>10.4}",
            m.name, m.metrics.train_rows, m.metrics.holdout_rows, m.metrics.r2_holdout
        );
    }
    println!("wrote the bundle to {}", args.out.display());
    Ok(())
}
