//! `mfsched train`: a MeanField bundle from a profile CSV.

use super::profile::progress_bar;
use anyhow::{Context, Result};
use clap::Args;
use mfsched_core::{load_scenario, read_profile, read_profile_columns};
use mfsched_lab::{
    HOLDOUT_FRACTION, TrainOptions, build_dataset, default_target, format_load_average,
    load_average, output_maps, profile_on_simulator, regenerate_plan, train_bundle, train_net,
};
use mfsched_nn::TrainConfig;
use mfsched_surrogate::{BUNDLED_PROFILE_FILE, FieldFeatures, Layout};
use mfsched_surrogate::{OutputMap, Target};
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
    /// What the nets learn: `absolute` throughput, `log` (ln(1 + throughput)),
    /// or `relative` (throughput / the model's solo throughput in the same
    /// configuration; needs solo rows in the profile). Default: relative where
    /// the profile has solo rows, else absolute (chosen by measurement:
    /// docs/model-bundle.md).
    #[arg(long, value_parser = parse_target)]
    target: Option<Target>,
    /// Share of the rows held out (stratified, or whole groups with
    /// --group-by) to measure R² of the slowdown and of throughput and MAPE; 0
    /// trains on every row and reports none.
    #[arg(long, value_name = "F", default_value_t = HOLDOUT_FRACTION)]
    holdout: f64,
    /// Columns whose values keep rows together on one side of the hold-out
    /// (e.g. `x-pair`: both orders of a measured pair), so the held-out score
    /// never sees a row's mirror in training.
    #[arg(long, value_delimiter = ',', value_name = "COLS")]
    group_by: Vec<String>,
    /// The field features the nets see: `observed` (the state; served on the
    /// CPU or the GPU), `co-runner-solo` (plus the co-runners' summed solo
    /// profiles; needs solo rows), `co-runner-factors` (plus the co-runners'
    /// summed factors, learnt from the training rows' co-location
    /// throughputs) or `contention` (plus the measured contention reading:
    /// memory-controller utilisation on a card, run-queue wait on a CPU host;
    /// needs the profile's contention column); all but the first are served
    /// on the CPU (docs/model-bundle.md).
    #[arg(long, value_parser = super::choices::field_features(), default_value = "observed")]
    field: FieldFeatures,
    /// What to train: `meanfield` (one net per model on its own configuration
    /// and the field: what the scheduler serves) or `joint` (the Joint-MLP
    /// baseline: every model's configuration in each net's input; N ≤ 3;
    /// scored by `surrogate eval`, never served).
    #[arg(long, value_parser = super::choices::layout(), default_value = "meanfield")]
    model: Layout,
    /// Each net learns a ridge model of its inputs plus an MLP on the residual,
    /// the MLP's weight chosen on held-out rows (`on`), or the MLP alone
    /// (`off`): docs/model-bundle.md.
    #[arg(long, value_name = "on|off", action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new(),
          default_value_t = TrainConfig::default().linear_skip)]
    linear_skip: bool,
}

fn parse_target(text: &str) -> Result<Target> {
    Target::parse(text)
}

pub fn run(args: TrainArgs) -> Result<()> {
    let scenario = load_scenario(&args.scenario)?;
    let problem = &scenario.problem;
    let bytes = std::fs::read(&args.data)
        .with_context(|| format!("cannot read {}", args.data.display()))?;
    let data = read_profile(&args.data, problem)?;
    let config = TrainConfig {
        epochs: args.epochs,
        linear_skip: args.linear_skip,
        ..TrainConfig::default()
    };
    eprintln!(
        "training {} {} predictors ({:?} hidden, {} epochs, linear skip {}) on {} rows of {}",
        problem.models.len(),
        match args.model {
            Layout::MeanField => "MeanField",
            Layout::Joint => "Joint-MLP",
        },
        config.hidden,
        config.epochs,
        if config.linear_skip { "on" } else { "off" },
        data.rows.len(),
        args.data.display()
    );
    let target = args.target.unwrap_or_else(|| default_target(&data));
    let groups: Vec<String> = if args.group_by.is_empty() {
        Vec::new()
    } else {
        read_profile_columns(&args.data, problem, &args.group_by)?
            .into_iter()
            .map(|cells| cells.join("\u{1f}"))
            .collect()
    };
    let options = TrainOptions {
        target,
        holdout: args.holdout,
        groups,
        field: args.field,
        layout: args.model,
    };
    if target.needs_solo() {
        // Warn only for configurations the co-location rows use: the others
        // borrow a solo throughput too, but nothing scored or trained reads it.
        let measured = data.solo_table(problem);
        for (i, m) in problem.models.iter().enumerate() {
            let mut used: Vec<u32> = data.rows.iter().map(|r| r.joint[i]).collect();
            used.sort_unstable();
            used.dedup();
            let never = used
                .iter()
                .filter(|&&c| measured[i].get(c as usize).is_some_and(Option::is_none))
                .count();
            if never > 0 {
                eprintln!(
                    "{}: {never} of the {} configurations its co-location rows use were never \
                     measured alone; they borrow the solo throughput of the nearest measured configuration",
                    m.name,
                    used.len()
                );
            }
        }
        // The target itself needs every model measured alone at least once.
        output_maps(problem, &data, target)?;
    }
    let bar = progress_bar(0, "training");
    let bundle = train_bundle(
        &scenario,
        &data,
        mfsched_core::sha256_hex(&bytes),
        &config,
        options,
        args.seed,
        &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )?;
    bar.finish_and_clear();
    bundle.write(&args.out)?;
    // The profile beside the bundle, as the shipped bundles keep theirs: the
    // candidate-aware field fits its utilisation model on it (checked against
    // the bundle's data_sha256 when it is read).
    mfsched_core::write_atomically(&args.out.join(BUNDLED_PROFILE_FILE), &bytes)
        .with_context(|| format!("writing the training profile into {}", args.out.display()))?;
    println!("target    {}", bundle.meta.target);
    println!("field     {}", bundle.meta.field_features);
    let alpha = mfsched_core::DEFAULT_FLOOR_MISS_RATE;
    println!(
        "{:<10} {:>8} {:>8} {:>13} {:>8} {:>8} {:>22} {:>18}",
        "model",
        "train",
        "held out",
        "R² slowdown",
        "MAPE %",
        "R²",
        format!("floor margin (α {alpha})"),
        "MLP weight (ridge)"
    );
    for m in &bundle.meta.models {
        // The linear skip's shrinkages: how much the MLP adds to the linear
        // model these rows support.
        let skip = m.metrics.linear_skip.map_or_else(
            || "-".to_string(),
            |s| format!("{:.2} ({})", s.mlp_weight, s.ridge_penalty),
        );
        println!(
            "{:<10} {:>8} {:>8} {:>13} {:>8} {:>8} {:>22} {:>18}",
            m.name,
            m.metrics.train_rows,
            m.metrics.holdout_rows,
            m.metrics.r2_slowdown_text(),
            m.metrics.mape_text(),
            m.metrics.r2_text(),
            m.metrics.floor_margin_text(alpha),
            skip
        );
    }
    println!("wrote the bundle to {}", args.out.display());
    Ok(())
}

/// `mfsched bench train`: how long training takes.
#[derive(Debug, Args)]
pub struct BenchTrainArgs {
    /// Training rows per run (taken from a seeded paper-n2 profile).
    #[arg(long, value_delimiter = ',', default_value = "50,200,518")]
    rows: Vec<usize>,
    #[arg(long, default_value_t = 500)]
    epochs: usize,
    /// Runs per size; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
}

/// Trains the llama3b predictor of paper-n2 on `rows` rows for `epochs` epochs,
/// `repeats` times per size, with the published architecture and with the
/// linear skip (the default) side by side, each repeat timing both in turn so
/// the machine's load falls on both; prints the medians, their ratio and the
/// time per row-epoch (the unit the cost of a study is made of).
pub fn bench(args: BenchTrainArgs) -> Result<()> {
    use std::time::Instant;
    if args.repeats == 0 || args.epochs == 0 {
        anyhow::bail!("--repeats and --epochs must be positive");
    }
    let scenario = load_scenario("paper-n2")?;
    let plan = regenerate_plan(&scenario);
    let profile = profile_on_simulator("paper-n2", &scenario.problem, &plan, 1, &mut |_, _| {})?;
    let data = &build_dataset(&scenario.problem, &profile, Layout::MeanField)[0];
    let published = TrainConfig {
        epochs: args.epochs,
        ..TrainConfig::published()
    };
    let skip = TrainConfig {
        epochs: args.epochs,
        ..TrainConfig::default()
    };
    println!(
        "training one MeanField predictor (llama3b, {} inputs, {:?} hidden), median of {} runs, \
         load average {}",
        data.width,
        published.hidden,
        args.repeats,
        format_load_average(load_average())
    );
    println!(
        "{:>6} {:>7} {:>13} {:>15} {:>6} {:>16}",
        "rows", "epochs", "published ms", "linear skip ms", "ratio", "µs / row-epoch"
    );
    for &rows in &args.rows {
        if rows < 2 || rows > data.rows() {
            anyhow::bail!("--rows: each size must be between 2 and {}", data.rows());
        }
        let subset = data.subset(&(0..rows).collect::<Vec<_>>());
        let time = |config: &TrainConfig, seed: u64| -> Result<f64> {
            let t = Instant::now();
            train_net(
                &subset,
                &OutputMap::identity(),
                config,
                seed,
                "llama3b",
                &mut |_| {},
            )?;
            Ok(t.elapsed().as_secs_f64())
        };
        let (mut plain, mut skipped) = (Vec::new(), Vec::new());
        for r in 0..args.repeats as u64 {
            plain.push(time(&published, r)?);
            skipped.push(time(&skip, r)?);
        }
        let plain = mfsched_core::nearest_rank(&mut plain, 0.5);
        let skipped = mfsched_core::nearest_rank(&mut skipped, 0.5);
        println!(
            "{:>6} {:>7} {:>13.3} {:>15.3} {:>6.2} {:>16.2}",
            rows,
            args.epochs,
            plain * 1e3,
            skipped * 1e3,
            skipped / plain,
            plain * 1e6 / (rows * args.epochs) as f64
        );
    }
    println!(
        "load average after: {}",
        format_load_average(load_average())
    );
    Ok(())
}
