//! `mfsched surrogate ...`: scoring MeanField bundles on profile data and
//! checking the inference backends against each other.

use super::profile::progress_bar;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use mfsched_core::Scenario;
use mfsched_core::{Profile, load_scenario, read_profile, read_profile_columns};
use mfsched_lab::CvConfig;
use mfsched_lab::{Fidelity, bundle_predictions, fidelity, solo_tables};
use mfsched_nn::TrainConfig;
use mfsched_surrogate::Bundle;
use mfsched_surrogate::FieldFeatures;
use mfsched_surrogate::FoldedNet;
use mfsched_surrogate::Target;
use mfsched_surrogate::{AGREEMENT_TOLERANCE, Agreement, check_backends};
use mfsched_surrogate::{HIDDEN_WIDTHS, synthetic_nets};
use mfsched_surrogate::{bundle_dir, load_bundled};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum SurrogateCommand {
    /// Runs the per-model table and every VRAM-feasible joint candidate (N rows
    /// each) on the CPU reference and on the wgpu backend, prints the adapter and
    /// the largest differences, and fails above 1e-5 on the normalised output.
    CheckBackends(CheckBackendsArgs),
    /// R² of the slowdown (throughput / solo, where solo throughput is known:
    /// the profile's solo rows or a relative bundle's table), MAPE and R² of
    /// throughput per model of a bundle on a profile CSV (measured by the folded
    /// inference nets the scheduler uses).
    Eval {
        /// A bundle directory (or a directory of `<scenario>/` bundles); default:
        /// the bundle embedded for the scenario.
        #[arg(long)]
        model: Option<PathBuf>,
        /// The profile CSV to score on.
        #[arg(long)]
        data: PathBuf,
        /// The scenario (bundled name or .toml path); default: the one the
        /// bundle embeds.
        #[arg(long)]
        scenario: Option<String>,
        /// Also write every row's measured and predicted throughput to this CSV:
        /// one line per (co-location row, model); `row` numbers the profile's
        /// co-location rows from 1 in file order, solo rows not counted (the
        /// same numbering as `surrogate cv --export`).
        #[arg(long, value_name = "OUT.csv")]
        predictions: Option<PathBuf>,
    },
    /// Grouped k-fold cross-validation on your own profile: MeanField beside an
    /// own-configuration mean, the pressure baseline (relative target), a
    /// linear field model and (N ≤ 3) the Joint MLP, per target and field; R² of
    /// the slowdown, MAPE and R² per model, per variant and overall, and a
    /// learning curve with --train-sizes. Writes cv.json, cv.md, cv.svg (and
    /// cv-curve.svg).
    Cv(CvArgs),
}

#[derive(Debug, Args)]
pub struct CvArgs {
    /// The profile CSV.
    #[arg(long)]
    data: PathBuf,
    /// The scenario it was measured for (bundled name or .toml path).
    #[arg(long)]
    scenario: String,
    #[arg(long, default_value_t = 5)]
    folds: usize,
    /// Columns whose values keep rows together in one fold (e.g. `x-pair`);
    /// default: stratified folds, each row on its own.
    #[arg(long, value_delimiter = ',', value_name = "COLS")]
    group_by: Vec<String>,
    /// One full cross-validation per seed; figures are mean ± std over them.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    /// Targets to train on (default: absolute and log, and relative where the
    /// profile has solo rows).
    #[arg(long, value_delimiter = ',', value_parser = parse_target)]
    targets: Vec<Target>,
    /// Training epochs per net.
    #[arg(long, default_value_t = TrainConfig::default().epochs)]
    epochs: usize,
    /// MeanField and the Joint MLP learn a ridge model of their inputs plus an
    /// MLP on the residual, the MLP's weight chosen on held-out rows of the
    /// training folds (`on`), or the MLP alone (`off`), as `train --linear-skip`.
    #[arg(long, value_name = "on|off", action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new(),
          default_value_t = TrainConfig::default().linear_skip)]
    linear_skip: bool,
    /// Field feature sets for the linear field model and MeanField, each its
    /// own row: `observed` (the state), `co-runner-solo` (the state plus the
    /// co-runners' summed solo profiles; needs solo rows), `co-runner-factors`
    /// (the state plus the co-runners' summed factors, learnt per fold from its
    /// training rows alone), `contention` (the state plus the measured
    /// contention reading; needs the profile's contention column).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = super::choices::field_features(),
        default_value = "observed"
    )]
    fields: Vec<FieldFeatures>,
    /// Learning curve: also train on n groups (rows when ungrouped) of each
    /// split's training folds, for each n given (e.g. 20,40,80,160,320).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    train_sizes: Vec<usize>,
    /// Skip the Joint-MLP baseline (it runs where N ≤ 3).
    #[arg(long)]
    no_joint: bool,
    /// The miss rate α whose conformal coverage the table scores (a floor's
    /// margin at α should be met by 1 − α of held-out rows).
    #[arg(long, default_value_t = mfsched_core::DEFAULT_FLOOR_MISS_RATE)]
    miss_rate: f64,
    /// Also write folds.csv (each row's fold per seed) and predictions.csv
    /// (every out-of-fold prediction of the full run) into this directory.
    #[arg(long, value_name = "DIR")]
    export: Option<PathBuf>,
    /// Worker threads (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Directory for cv.json, cv.md and cv.svg.
    #[arg(long, default_value = "cv-report")]
    out: PathBuf,
}

fn parse_target(text: &str) -> Result<Target> {
    Target::parse(text)
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
        let bundle = load_bundled(scenario, self.models.as_deref())?;
        let meanfield = bundle.meanfield(&scenario.problem)?;
        let origin = match &self.models {
            Some(dir) => format!("bundle {}", bundle_dir(dir, &scenario.name).display()),
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
            predictions,
        } => eval(model, data, scenario, predictions),
        SurrogateCommand::Cv(args) => cv(args),
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
    let scenario = load_scenario(&args.scenario)?;
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
         Δσ = Δy / out_scale is gated at {AGREEMENT_TOLERANCE:.0e}"
    );
    let worst = check.table.merge(check.joint).max_normalised;
    if !check.passes() {
        bail!("the backends disagree: max |Δσ| = {worst:.3e} > {AGREEMENT_TOLERANCE:.0e}");
    }
    println!("PASS: max |Δσ| = {worst:.3e} ≤ {AGREEMENT_TOLERANCE:.0e}");
    Ok(())
}

fn eval(
    model: Option<PathBuf>,
    data: PathBuf,
    scenario: Option<String>,
    predictions: Option<PathBuf>,
) -> Result<()> {
    let (scenario, bundle) = match (scenario, &model) {
        (Some(name), _) => {
            let scenario = load_scenario(&name)?;
            let bundle = load_bundled(&scenario, model.as_deref())?;
            (scenario, bundle)
        }
        (None, Some(dir)) => {
            // A bundle carries its scenario (embedded, or by name in version 1).
            let bundle = Bundle::read(dir)?;
            let scenario = bundle
                .scenario()
                .with_context(|| format!("the scenario of model bundle {}", dir.display()))?;
            let bundle = bundle
                .checked(&scenario)
                .with_context(|| format!("model bundle {}", dir.display()))?;
            (scenario, bundle)
        }
        (None, None) => bail!("give --model DIR, --scenario NAME, or both"),
    };
    let profile = read_profile(&data, &scenario.problem)?;
    let predicted = bundle_predictions(&bundle, &scenario, &profile)?;
    println!(
        "{} rows of {} scored by the {} bundle (target {}, field {}, trained on data {}…)",
        profile.rows.len(),
        data.display(),
        scenario.name,
        bundle.meta.target,
        bundle.meta.field_features,
        mfsched_core::short_digest(&bundle.meta.training.data_sha256)
    );
    // The slowdown's reference: the file's own solo rows, else the bundle's
    // solo table (a relative bundle's), else none.
    let (solo, solo_from) = match solo_tables(&scenario.problem, &profile) {
        Some(t) => (Some(t), "the file's solo rows"),
        None => match bundle.output_maps(&scenario.problem) {
            Ok(maps) if bundle.meta.target.needs_solo() => (
                Some(maps.into_iter().map(|m| m.solo).collect()),
                "the bundle's solo table",
            ),
            _ => (None, "none: no solo rows, no solo table"),
        },
    };
    println!("solo throughput (for the slowdown): {solo_from}");
    let alpha = mfsched_core::DEFAULT_FLOOR_MISS_RATE;
    println!(
        "{:<10} {:>14} {:>8} {:>10} {:>16} {:>16} {:>18}",
        "model",
        "R² slowdown",
        "MAPE %",
        "R²",
        "R² at training",
        "slowdown at tr.",
        format!("covered at α {alpha}")
    );
    let text = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
    };
    let mut scores = Vec::new();
    for (i, m) in bundle.meta.models.iter().enumerate() {
        let truth: Vec<f32> = profile
            .rows
            .iter()
            .map(|r| r.throughput[i] as f32)
            .collect();
        let solo_rows: Option<Vec<f32>> = solo.as_ref().map(|t: &Vec<Vec<f32>>| {
            profile
                .rows
                .iter()
                .map(|r| t[i][r.joint[i] as usize])
                .collect()
        });
        let f = fidelity(&predicted[i], &truth, solo_rows.as_deref());
        // The share of rows at or above the bundle's own floor margin: 1 − α
        // where the margin holds on this data.
        let covered = m
            .metrics
            .holdout_ratios
            .as_deref()
            .and_then(|r| mfsched_core::FloorMargin::conformal(r, alpha))
            .map(|margin| {
                let rows = predicted[i].len().max(1);
                let met = predicted[i]
                    .iter()
                    .zip(&truth)
                    .filter(|&(&p, &t)| f64::from(t) >= margin.ratio * f64::from(p))
                    .count();
                met as f64 / rows as f64
            });
        println!(
            "{:<10} {:>14} {:>8} {:>10} {:>16} {:>16} {:>18}",
            m.name,
            text(f.r2_slowdown, 4),
            text(f.mape, 2),
            f.r2.map_or_else(|| "undefined".to_string(), |v| format!("{v:.4}")),
            m.metrics.r2_text(),
            m.metrics.r2_slowdown_text(),
            text(covered, 3)
        );
        scores.push(f);
    }
    let mean = |pick: fn(&Fidelity) -> Option<f64>| {
        let v: Vec<f64> = scores.iter().filter_map(pick).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    if let Some(r2) = mean(|f| f.r2) {
        println!(
            "{:<10} {:>14} {:>8} {:>10.4}",
            "mean",
            text(mean(|f| f.r2_slowdown), 4),
            text(mean(|f| f.mape), 2),
            r2
        );
    }
    if let Some(out) = predictions {
        write_predictions(&out, &scenario, &profile, &predicted)?;
        println!(
            "wrote every row's measured and predicted throughput to {}",
            out.display()
        );
    }
    Ok(())
}

fn cv(args: CvArgs) -> Result<()> {
    let scenario = load_scenario(&args.scenario)?;
    let problem = &scenario.problem;
    let profile = read_profile(&args.data, problem)?;
    let groups: Vec<String> = if args.group_by.is_empty() {
        Vec::new()
    } else {
        read_profile_columns(&args.data, problem, &args.group_by)?
            .into_iter()
            .map(|cells| cells.join("\u{1f}"))
            .collect()
    };
    let targets = if args.targets.is_empty() {
        let mut t = vec![Target::Absolute, Target::Log];
        if !profile.solo.is_empty() {
            t.push(Target::RelativeToSolo);
        }
        t
    } else {
        args.targets.clone()
    };
    if super::eval::floor_miss_rate("--miss-rate", args.miss_rate)?.is_none() {
        bail!("--miss-rate 0: coverage needs a miss rate above 0");
    }
    let config = CvConfig {
        folds: args.folds,
        seeds: args.seeds.clone(),
        targets,
        fields: args.fields.clone(),
        group_by: args.group_by.clone(),
        joint: !args.no_joint,
        train_sizes: args.train_sizes.clone(),
        miss_rate: args.miss_rate,
        train: TrainConfig {
            epochs: args.epochs,
            linear_skip: args.linear_skip,
            ..TrainConfig::default()
        },
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    eprintln!(
        "cross-validating on {} co-location rows of {} ({} folds × {} seeds, targets {}, {} epochs per net, linear skip {})",
        profile.rows.len(),
        args.data.display(),
        config.folds,
        config.seeds.len(),
        config
            .targets
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", "),
        config.train.epochs,
        if config.train.linear_skip {
            "on"
        } else {
            "off"
        }
    );
    let bar = progress_bar(0, "training");
    // Without a terminal (a log, CI) the bar is hidden: a line per tenth instead.
    let plain = bar.is_hidden();
    let started = std::time::Instant::now();
    let (report, run) = mfsched_lab::run_cv(
        &config,
        problem,
        &profile,
        &groups,
        &args.data.display().to_string(),
        &scenario.name,
        &|done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            if plain && done > 0 && done * 10 / total.max(1) > (done - 1) * 10 / total.max(1) {
                eprintln!(
                    "trained {done} of {total} nets ({:.0} s)",
                    started.elapsed().as_secs_f64()
                );
            }
        },
    )?;
    bar.finish_and_clear();
    println!("{}", report.table());
    if !report.learning_curve.is_empty() {
        println!("{}", report.curve_table());
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    for path in report.write(&args.out, &command)? {
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &args.export {
        for path in run.export(dir, &config, problem, &profile, &groups)? {
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// One line per (co-location row, model): what was measured and what the
/// bundle predicts, for plots and checks outside mfsched. Written atomically.
fn write_predictions(
    out: &std::path::Path,
    scenario: &Scenario,
    profile: &Profile,
    predicted: &[Vec<f32>],
) -> Result<()> {
    let mut text = Vec::new();
    {
        let mut w = csv::Writer::from_writer(&mut text);
        w.write_record([
            "row",
            "model",
            "configuration",
            "workload",
            "measured",
            "predicted",
        ])?;
        for (r, row) in profile.rows.iter().enumerate() {
            for (i, m) in scenario.problem.models.iter().enumerate() {
                w.write_record([
                    (r + 1).to_string(),
                    m.name.clone(),
                    m.knobs(row.joint[i] as usize).to_string(),
                    row.workload.to_string(),
                    row.throughput[i].to_string(),
                    predicted[i][r].to_string(),
                ])?;
            }
        }
        w.flush()?;
    }
    mfsched_core::write_atomically(out, &text)
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
