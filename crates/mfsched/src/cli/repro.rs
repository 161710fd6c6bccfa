//! `mfsched repro`: the published tables regenerated on the simulator, in one
//! report — Table I (the surrogate's sample complexity) and Table II (scheduling)
//! — each row beside the published figure. `repro sample-complexity` runs Table I
//! alone with every knob of the study.

use super::eval::{Loop, compare, trace_list};
use super::plugins::PluginOpts;
use super::profile::progress_bar;
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use mfsched_core::DEFAULT_TRACE_TICKS;
use mfsched_core::write_atomically;
use mfsched_lab::Comparison;
use mfsched_lab::{PUBLISHED_N_STAR, PUBLISHED_R2, SIM_DEVICE_NAME, published_table2_row};
use mfsched_lab::{StudyConfig, StudyResult};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ReproArgs {
    /// Table I alone, with every knob of the study.
    #[command(subcommand)]
    what: Option<ReproWhat>,
    /// Directory for repro.md, results.json, and table1/ and table2/ with their plots.
    #[arg(long, default_value = "repro-report")]
    out: PathBuf,
    /// Which tables: 1 (sample complexity), 2 (scheduling), or both.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2])]
    tables: Vec<u8>,
    /// Decision ticks per workload scenario in Table II [default: 100; 10 with --quick].
    #[arg(long)]
    ticks: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A smoke run in about a minute, not the published protocol: Table I on
    /// N = 2, 3 with 1 seed × 2 folds, Table II with 10 ticks (unless --ticks is given).
    #[arg(long)]
    quick: bool,
    /// Worker threads for Table I (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    #[command(flatten)]
    plugins: PluginOpts,
}

#[derive(Debug, Subcommand)]
pub enum ReproWhat {
    /// The accuracy study: n* per N (R² ≥ 0.95) with learning curves, and the
    /// Joint MLP at N = 2.
    SampleComplexity(SampleComplexityArgs),
    /// The online correction on a perturbed simulated card: realised utility
    /// and floor violations without and with it, each with floors held on the
    /// point prediction and on the conformal lower bound.
    Correction(super::eval::CorrectionArgs),
}

/// Table II's rows: (label, policy spec).
const TABLE2: [(&str, &str); 5] = [
    ("ga", "ga"),
    ("exhaustive", "exhaustive"),
    ("static-full", "static-budget:k=full"),
    ("static-budget-500", "static-budget:k=500"),
    ("static-budget-5000", "static-budget:k=5000"),
];

/// Ticks of a `--quick` Table II.
const QUICK_TICKS: usize = 10;

pub fn repro(args: ReproArgs) -> Result<()> {
    match args.what {
        Some(ReproWhat::SampleComplexity(args)) => return sample_complexity(args),
        Some(ReproWhat::Correction(args)) => return super::eval::correction(args),
        None => {}
    }
    let (table1, table2) = (args.tables.contains(&1), args.tables.contains(&2));
    if let Some(t) = args.tables.iter().find(|t| !(1..=2).contains(*t)) {
        bail!("--tables: there is no Table {t}; use 1, 2 or 1,2");
    }
    let default_ticks = if args.quick {
        QUICK_TICKS
    } else {
        DEFAULT_TRACE_TICKS
    };
    let ticks = args.ticks.unwrap_or(default_ticks);
    let mut command = format!("mfsched repro --seed {}", args.seed);
    if args.quick {
        command.push_str(" --quick");
    }
    if !(table1 && table2) {
        command.push_str(if table1 { " --tables 1" } else { " --tables 2" });
    }
    if table2 && ticks != default_ticks {
        command.push_str(&format!(" --ticks {ticks}"));
    }
    let started = Instant::now();

    let study = if table1 {
        let mut config = StudyConfig::published(args.seed);
        if args.quick {
            config.scenarios = vec!["paper-n2".into(), "paper-n3".into()];
            config.sizes = vec![10, 20, 40, 60, 80, 120];
            config.seeds = 1;
            config.folds = 2;
        }
        if let Some(jobs) = args.jobs {
            config.jobs = jobs_at_least_one(jobs)?;
        }
        println!(
            "Table I: sample complexity of the MeanField surrogate, N = {}",
            scenario_models(&config)
        );
        let result = study_with_progress(&config)?;
        print!("{}", result.table());
        println!();
        Some(result)
    } else {
        None
    };

    let comparison = if table2 {
        let traces = trace_list("all", ticks, args.seed)?;
        let loops: Vec<Loop> = TABLE2.iter().map(|(l, s)| Loop::alone(l, s)).collect();
        println!(
            "Table II: {} policies × {} workload scenarios × {ticks} ticks on the {} (paper-n5)",
            loops.len(),
            traces.len(),
            SIM_DEVICE_NAME
        );
        let cmp = compare(
            "paper-n5",
            &args.plugins,
            &super::plugins::UtilityChoice::embedded(),
            &loops,
            &traces,
            args.seed,
        )?;
        print!("{}", table2_markdown(&cmp));
        Some(cmp)
    } else {
        None
    };

    let files = write_report(
        &args.out,
        &command,
        study.as_ref(),
        comparison.as_ref(),
        args.quick,
    )?;
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    super::eval::print_written(&files, &args.out);
    Ok(())
}

fn jobs_at_least_one(jobs: usize) -> Result<usize> {
    if jobs == 0 {
        bail!("--jobs must be at least 1");
    }
    Ok(jobs)
}

/// "2, 3, 4" for the scenarios a study runs.
fn scenario_models(config: &StudyConfig) -> String {
    config
        .scenarios
        .iter()
        .map(|s| s.trim_start_matches("paper-n").to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the study with a progress bar on stderr.
fn study_with_progress(config: &StudyConfig) -> Result<StudyResult> {
    eprintln!(
        "sample complexity on the {}: {} scenarios, n ∈ {:?}, {} seeds × {} folds, {} threads",
        SIM_DEVICE_NAME,
        config.scenarios.len(),
        config.sizes,
        config.seeds,
        config.folds,
        config.jobs
    );
    let bar = progress_bar(0, "training");
    let result = mfsched_lab::run_study(config, &|done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    Ok(result)
}

/// `repro.md` (both tables beside the published figures), `results.json` (every
/// number of both), and each table's own report under `table1/` and `table2/`.
fn write_report(
    dir: &Path,
    command: &str,
    study: Option<&StudyResult>,
    comparison: Option<&Comparison>,
    quick: bool,
) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut md = String::new();
    let device = comparison.map_or_else(
        || format!("{} (mfsched simulator)", SIM_DEVICE_NAME),
        |c| c.device.clone(),
    );
    let _ = writeln!(md, "# Reproduction of the published tables\n");
    let _ = writeln!(
        md,
        "Every number below was measured on the **{device}**: a seeded simulator, not a \
         real GPU. The published figures (Ennouri & Ha, MeanField surrogate) stand beside \
         them for comparison; none is copied into a measurement.\n\n- command: `{command}`\n"
    );
    if quick {
        let _ = writeln!(
            md,
            "**This is a `--quick` smoke run** (fewer scenarios, seeds, folds and ticks), \
             not the published protocol: run `mfsched repro` for that.\n"
        );
    }
    if let Some(study) = study {
        let _ = writeln!(
            md,
            "## Table I — sample complexity of the MeanField surrogate\n\n\
             {} seeds × {}-fold stratified cross-validation, mean R² over models; n* is the \
             smallest training-set size n with mean R² ≥ {}. Published: n* ≈ {} for N = 2..6, \
             R² ≈ {}.\n\n```text\n{}```\n\n![learning curves](table1/learning-curves.svg)\n",
            study.config.seeds,
            study.config.folds,
            study.config.target_r2,
            PUBLISHED_N_STAR
                .iter()
                .map(|(_, n)| n.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            PUBLISHED_R2,
            study.table()
        );
        files.extend(study.write(&dir.join("table1"), command)?);
    }
    if let Some(cmp) = comparison {
        let _ = writeln!(
            md,
            "## Table II — scheduling on {} over the eight dynamic scenarios\n\n\
             Closed loop: each tick's state comes from the simulator running the previous \
             decision. *Utility vs exhaustive* is the chosen utility relative to the \
             exhaustive argmax on the surrogate landscape, summed over the ticks (the published \
             metric, negative for a shortfall); SLA violations are counted \
             on the predictions and on the simulator's noise-free throughput.\n\n{}\n\
             Per-scenario rows: `table2/report.md`; plots: `table2/utility-*.svg`, \
             `table2/latency.svg`.\n\n![latency](table2/latency.svg)\n",
            cmp.scenario,
            table2_markdown(cmp)
        );
        files.extend(cmp.write(
            &dir.join("table2"),
            "Reproduction: Table II (scheduling)",
            command,
        )?);
    }
    let json = serde_json::json!({
        "command": command,
        "device": device,
        "quick": quick,
        "table1": study.map(|s| s.json(command)),
        "table2": comparison.map(|c| c.json(command)),
    });
    let mut text = serde_json::to_vec_pretty(&json)?;
    text.push(b'\n');
    // The charts are written by now: the HTML page inlines them.
    let html = mfsched_lab::html_page("Reproduction of the published tables", &md, dir, &[])?;
    for (name, bytes) in [
        ("repro.md", md.into_bytes()),
        ("results.json", text),
        ("repro.html", html.into_bytes()),
    ] {
        let path = dir.join(name);
        write_atomically(&path, &bytes)?;
        files.push(path);
    }
    Ok(files)
}

/// Table II as markdown: our measurement beside the published figure.
fn table2_markdown(cmp: &Comparison) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "| policy | utility vs exhaustive % | SLA violations (pred / real) | p50 ms | p99 ms | published |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---|");
    for row in cmp.overall() {
        let s = &row.summary;
        // The published sign: a shortfall is negative.
        let relative = -s.utility_gap_pct;
        let _ = writeln!(
            t,
            "| {} | {} | {} / {} | {:.2} | {:.2} | {} |",
            row.policy,
            if relative.abs() < 5e-4 {
                "0.000".to_string()
            } else {
                format!("{relative:+.3}")
            },
            s.predicted_sla_violations,
            s.realised_sla_violations,
            s.latency_p50_ms,
            s.latency_p99_ms,
            published_table2_row(&row.policy)
        );
    }
    t
}

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

fn sample_complexity(args: SampleComplexityArgs) -> Result<()> {
    let mut config = StudyConfig::published(args.seed);
    if let Some(jobs) = args.jobs {
        config.jobs = jobs_at_least_one(jobs)?;
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
    let started = Instant::now();
    let result = study_with_progress(&config)?;
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
