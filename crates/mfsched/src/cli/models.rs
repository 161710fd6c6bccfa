//! `mfsched models ...`: the MeanField bundles shipped with the binary.

use super::profile::progress_bar;
use anyhow::Result;
use clap::Subcommand;
use mfsched_core::bundled_scenario_names;
use mfsched_lab::{DEFAULT_SEED, regenerate};
use mfsched_surrogate::{embedded_bundle, embedded_bundle_names};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Lists the embedded bundles with their training metrics.
    List,
    /// Re-profiles every bundled scenario on the simulator and retrains its
    /// bundle (see `crates/lab/src/training/regenerate.rs` for the exact recipe).
    Regenerate {
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
        /// Where the `<scenario>/` bundle directories go.
        #[arg(long, default_value = "models")]
        out: PathBuf,
        /// Only these scenarios (repeatable); default: every bundled scenario.
        #[arg(long = "scenario")]
        scenarios: Vec<String>,
    },
}

pub fn run(cmd: ModelsCommand) -> Result<()> {
    match cmd {
        ModelsCommand::List => list(),
        ModelsCommand::Regenerate {
            seed,
            out,
            scenarios,
        } => {
            let names: Vec<String> = if scenarios.is_empty() {
                bundled_scenario_names().map(str::to_string).collect()
            } else {
                scenarios
            };
            for name in &names {
                let dir = out.join(name);
                let bar = progress_bar(0, name);
                let bundle = regenerate(name, seed, &dir, &mut |stage, done, total| {
                    bar.set_message(format!("{name}: {stage}"));
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                })?;
                bar.finish_and_clear();
                let r2: Vec<String> = bundle
                    .meta
                    .models
                    .iter()
                    .map(|m| format!("{} {}", m.name, m.metrics.r2_text()))
                    .collect();
                println!(
                    "{name}: {} rows profiled on the simulator, held-out R²: {} → {}",
                    bundle.meta.training.data_rows,
                    r2.join(", "),
                    dir.display()
                );
            }
            Ok(())
        }
    }
}

fn list() -> Result<()> {
    println!(
        "{:<10} {:>4} {:>6} {:>6}  held-out R² per model",
        "scenario", "N", "rows", "seed"
    );
    for name in embedded_bundle_names() {
        if let Some(bundle) = embedded_bundle(name) {
            let b = bundle?;
            let r2: Vec<String> = b
                .meta
                .models
                .iter()
                .map(|m| format!("{} {}", m.name, m.metrics.r2_text()))
                .collect();
            println!(
                "{:<10} {:>4} {:>6} {:>6}  {}",
                name,
                b.meta.models.len(),
                b.meta.training.data_rows,
                b.meta.training.seed,
                r2.join(", ")
            );
        }
    }
    Ok(())
}
