//! `mfsched surrogate ...`: inspecting and scoring MeanField bundles.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use mfsched::profile;
use mfsched::scenario;
use mfsched::surrogate::{Bundle, bundled, training};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum SurrogateCommand {
    /// R² per model of a bundle on a profile CSV (measured by the folded
    /// inference nets the scheduler uses).
    Eval {
        /// A bundle directory (or a directory of `<scenario>/` bundles); default:
        /// the bundle embedded for the scenario.
        #[arg(long)]
        model: Option<PathBuf>,
        /// The profile CSV to score on.
        #[arg(long)]
        data: PathBuf,
        /// The scenario (bundled name or .toml path); default: the bundle's.
        #[arg(long)]
        scenario: Option<String>,
    },
}

pub fn run(cmd: SurrogateCommand) -> Result<()> {
    match cmd {
        SurrogateCommand::Eval {
            model,
            data,
            scenario,
        } => eval(model, data, scenario),
    }
}

fn eval(model: Option<PathBuf>, data: PathBuf, scenario: Option<String>) -> Result<()> {
    let (scenario, bundle) = match (scenario, &model) {
        (Some(name), _) => {
            let scenario = scenario::load(&name)?;
            let bundle = bundled::load(&scenario, model.as_deref())?;
            (scenario, bundle)
        }
        (None, Some(dir)) => {
            // A bundle directory names its scenario.
            let bundle = Bundle::read(dir)?;
            let scenario = scenario::load(&bundle.meta.scenario)
                .with_context(|| format!("the scenario of model bundle {}", dir.display()))?;
            let bundle = bundle
                .checked(&scenario)
                .with_context(|| format!("model bundle {}", dir.display()))?;
            (scenario, bundle)
        }
        (None, None) => bail!("give --model DIR, --scenario NAME, or both"),
    };
    let profile = profile::read_csv(&data, &scenario.problem)?;
    let scores = training::evaluate(&bundle, &scenario, &profile);
    println!(
        "{} rows of {} scored by the {} bundle (trained on data {}…)",
        profile.rows.len(),
        data.display(),
        scenario.name,
        &bundle.meta.training.data_sha256[..bundle.meta.training.data_sha256.len().min(12)]
    );
    println!("{:<10} {:>10} {:>16}", "model", "R²", "R² at training");
    let mut defined = Vec::new();
    for (m, r2) in bundle.meta.models.iter().zip(&scores) {
        let shown = r2.map_or_else(|| "undefined".to_string(), |v| format!("{v:.4}"));
        println!(
            "{:<10} {:>10} {:>16.4}",
            m.name, shown, m.metrics.r2_holdout
        );
        defined.extend(*r2);
    }
    if !defined.is_empty() {
        println!(
            "{:<10} {:>10.4}",
            "mean",
            defined.iter().sum::<f64>() / defined.len() as f64
        );
    }
    Ok(())
}
