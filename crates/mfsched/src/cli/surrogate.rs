//! `mfsched surrogate ...`: scoring MeanField bundles on profile data and
//! checking the inference backends against each other.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use mfsched_core::profile;
use mfsched_core::scenario::{self, Scenario};
use mfsched_lab::training::fit;
use mfsched_surrogate::agreement::{Agreement, TOLERANCE, check_backends};
use mfsched_surrogate::net::FoldedNet;
use mfsched_surrogate::synthetic::{HIDDEN_WIDTHS, synthetic_nets};
use mfsched_surrogate::{Bundle, bundled};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum SurrogateCommand {
    /// Runs the per-model table and every VRAM-feasible joint candidate (N rows
    /// each) on the CPU reference and on the wgpu backend, prints the adapter and
    /// the largest differences, and fails above 1e-5 on the normalised output.
    CheckBackends(CheckBackendsArgs),
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

#[derive(Debug, Args)]
pub struct CheckBackendsArgs {
    /// A bundled scenario name or a path to a scenario .toml file.
    #[arg(long, default_value = "paper-n5")]
    scenario: String,
    #[command(flatten)]
    predictors: PredictorArgs,
    /// Check only this many feasible candidates, evenly spread (default: all).
    #[arg(long, value_name = "COUNT")]
    sample: Option<usize>,
}

/// Where the predictors come from.
#[derive(Debug, Args)]
pub struct PredictorArgs {
    /// A bundle directory (or a directory of `<scenario>/` bundles); default: the
    /// bundle embedded for the scenario.
    #[arg(long, value_name = "DIR", conflicts_with = "synthetic")]
    pub models: Option<PathBuf>,
    /// Use seeded synthetic predictors instead: untrained, with the real layer
    /// shapes and feature widths (enough for backend agreement and speed).
    #[arg(long, value_name = "SEED")]
    pub synthetic: Option<u64>,
}

impl PredictorArgs {
    /// The predictors and a line saying what they are.
    pub fn load(&self, scenario: &Scenario) -> Result<(Vec<FoldedNet>, String)> {
        if let Some(seed) = self.synthetic {
            let [h1, h2] = HIDDEN_WIDTHS;
            return Ok((
                synthetic_nets(&scenario.problem, seed),
                format!(
                    "synthetic (seed {seed}; untrained, real shapes input-{h1}-{h2}-1: timing and agreement only)"
                ),
            ));
        }
        let bundle = bundled::load(scenario, self.models.as_deref())?;
        let meanfield = bundle.meanfield(&scenario.problem)?;
        let origin = match &self.models {
            Some(dir) => format!(
                "bundle {}",
                bundled::bundle_dir(dir, &scenario.name).display()
            ),
            None => format!("embedded bundle {}", scenario.name),
        };
        Ok((meanfield.nets().to_vec(), format!("MeanField, {origin}")))
    }
}

pub fn run(cmd: SurrogateCommand) -> Result<()> {
    match cmd {
        SurrogateCommand::CheckBackends(args) => check(args),
        SurrogateCommand::Eval {
            model,
            data,
            scenario,
        } => eval(model, data, scenario),
    }
}

/// Every `len / count`-th element (rounded up), so `count` or fewer spread over all.
fn spread(all: Vec<u64>, count: Option<usize>) -> Result<Vec<u64>> {
    match count {
        None => Ok(all),
        Some(0) => bail!("--sample must be positive"),
        Some(c) => {
            let step = all.len().div_ceil(c).max(1);
            Ok(all.into_iter().step_by(step).collect())
        }
    }
}

fn check(args: CheckBackendsArgs) -> Result<()> {
    let scenario = scenario::load(&args.scenario)?;
    let problem = &scenario.problem;
    let (nets, what) = args.predictors.load(&scenario)?;
    let feasible = problem.feasible_indices();
    let total = feasible.len();
    let candidates = spread(feasible, args.sample)?;
    println!(
        "scenario    {}: {} models, {total} VRAM-feasible joint configurations, {} checked",
        scenario.name,
        problem.models.len(),
        candidates.len()
    );
    println!("predictors  {what}");
    let check = check_backends(problem, &nets, &candidates)?;
    println!("adapter     {}", check.adapter);
    println!();
    println!(
        "{:<26} {:>8} {:>12} {:>12} {:>12}",
        "", "rows", "max |Δσ|", "max |Δy|", "max rel"
    );
    let line = |label: &str, a: &Agreement| {
        println!(
            "{label:<26} {:>8} {:>12.3e} {:>12.3e} {:>12.3e}",
            a.rows, a.max_normalised, a.max_absolute, a.max_relative
        );
    };
    line(
        &format!("table ({} states)", check.table_states),
        &check.table,
    );
    line(
        &format!("joint ({} candidates)", check.candidates),
        &check.joint,
    );
    println!();
    println!(
        "σ is the normalised output in [0, 1] (throughput y = out_offset + out_scale·σ); \
         Δσ = Δy / out_scale is gated at {TOLERANCE:.0e}"
    );
    let worst = check.table.merge(check.joint).max_normalised;
    if !check.passes() {
        bail!("the backends disagree: max |Δσ| = {worst:.3e} > {TOLERANCE:.0e}");
    }
    println!("PASS: max |Δσ| = {worst:.3e} ≤ {TOLERANCE:.0e}");
    Ok(())
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
    let scores = fit::evaluate(&bundle, &scenario, &profile);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_keeps_at_most_count_evenly() {
        let all: Vec<u64> = (0..10).collect();
        assert_eq!(spread(all.clone(), Some(3)).expect("ok"), vec![0, 4, 8]);
        assert_eq!(spread(all.clone(), Some(20)).expect("ok"), all);
        assert_eq!(spread(all.clone(), None).expect("ok"), all);
        assert!(spread(all, Some(0)).is_err());
    }
}
