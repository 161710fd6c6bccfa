//! `mfsched surrogate ...`: the MeanField surrogate's inference backends.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use mfsched::scenario;
use mfsched::surrogate::agreement::{Agreement, TOLERANCE, check_backends};
use mfsched::surrogate::net::FoldedNet;
use mfsched::surrogate::synthetic::{HIDDEN_WIDTHS, synthetic_nets};

#[derive(Debug, Subcommand)]
pub enum SurrogateCommand {
    /// Runs the per-model table and every VRAM-feasible joint candidate (N rows
    /// each) on the CPU reference and on the wgpu backend, prints the adapter and
    /// the largest differences, and fails above 1e-5 on the normalised output.
    CheckBackends(CheckBackendsArgs),
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
    /// Seed of the synthetic predictors: untrained, with the real layer shapes and
    /// feature widths (enough for backend agreement and speed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl PredictorArgs {
    /// The predictors and a line saying what they are.
    pub fn load(&self, problem: &mfsched::domain::Problem) -> (Vec<FoldedNet>, String) {
        let [h1, h2] = HIDDEN_WIDTHS;
        (
            synthetic_nets(problem, self.seed),
            format!(
                "synthetic (seed {}; untrained, real shapes input-{h1}-{h2}-1: timing and agreement only)",
                self.seed
            ),
        )
    }
}

pub fn run(cmd: SurrogateCommand) -> Result<()> {
    match cmd {
        SurrogateCommand::CheckBackends(args) => check(args),
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
    let (nets, what) = args.predictors.load(problem);
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
