//! `ab` and `demo`: closed-loop policy comparisons on the simulator (and the
//! shared machinery `repro`'s Table II runs on).

use super::plugins::{PluginOpts, UtilityChoice, policy_params};
use super::profile::progress_bar;
use anyhow::{Context as _, Result, bail};
use clap::Args;
use mfsched_core::Field;
use mfsched_core::{DEFAULT_TRACE_TICKS, TRACE_NAMES, Trace};
use mfsched_core::{generate_trace, load_scenario};
use mfsched_lab::Comparison;
use mfsched_lab::SIM_DEVICE_NAME;
use mfsched_lab::{Harness, PolicySpec};
use mfsched_plugin_host::PluginEngine;
use mfsched_plugin_host::resolve_policy;
use mfsched_surrogate::Served;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What every comparison command shares.
#[derive(Debug, Args)]
pub struct EvalOpts {
    /// The bundled scenario (models and card) or a scenario .toml file
    /// (`--scenario` as in the other commands).
    #[arg(long, visible_alias = "scenario", default_value = "paper-n5")]
    problem: String,
    /// Dynamic workload scenarios: `all` or a comma-separated list of
    /// steady, step-up, step-down, ramp, periodic, bursts, random-walk, mixed.
    #[arg(long, default_value = "all")]
    scenarios: String,
    /// Decision ticks per workload scenario (at least 100 for the published protocol).
    #[arg(long, default_value_t = DEFAULT_TRACE_TICKS)]
    ticks: usize,
    /// Seed of the workload traces, the simulator and every policy.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    utility: UtilityChoice,
    #[command(flatten)]
    plugins: PluginOpts,
}

#[derive(Debug, Args)]
pub struct AbArgs {
    /// Policy A: NAME or FILE.wasm, optionally with parameters: `static-budget:k=500`.
    #[arg(long)]
    a: String,
    /// Policy B, same syntax.
    #[arg(long)]
    b: String,
    /// The field policy A is served under [default: --field].
    #[arg(long, value_parser = super::choices::field())]
    a_field: Option<Field>,
    /// The field policy B is served under [default: --field]. `--a ga --b ga
    /// --b-field candidate-aware` compares the two fields under one policy.
    #[arg(long, value_parser = super::choices::field())]
    b_field: Option<Field>,
    /// Directory for report.md, results.json and the SVG plots.
    #[arg(long, default_value = "ab-report")]
    out: PathBuf,
    #[command(flatten)]
    eval: EvalOpts,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the report and plots.
    #[arg(long, default_value = "mfsched-demo")]
    out: PathBuf,
    /// Dynamic workload scenario the demo runs.
    #[arg(long, default_value = "mixed")]
    scenario: String,
    #[arg(long, default_value_t = DEFAULT_TRACE_TICKS)]
    ticks: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    plugins: PluginOpts,
}

/// Parses `NAME[:k=v,k=v]` or `FILE.wasm[:k=v,k=v]`: the parameters start at
/// the first ':' after the `.wasm` of a path (which may itself hold ':'), or
/// at the first ':' of a name.
pub(super) fn parse_policy(spec: &str) -> Result<(String, Vec<(String, String)>)> {
    let (name, params) = match spec.find(".wasm:") {
        Some(at) => (&spec[..at + ".wasm".len()], &spec[at + ".wasm:".len()..]),
        None if spec.ends_with(".wasm") => (spec, ""),
        None => spec.split_once(':').unwrap_or((spec, "")),
    };
    if name.trim().is_empty() {
        bail!("policy '{spec}': the name is empty (use e.g. ga, exhaustive, static-budget:k=500)");
    }
    let mut out = Vec::new();
    for kv in params.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("policy '{spec}': parameter '{kv}' is not KEY=VALUE"))?;
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok((name.to_string(), out))
}

pub(super) fn trace_list(spec: &str, ticks: usize, seed: u64) -> Result<Vec<Trace>> {
    if ticks == 0 {
        bail!("--ticks must be at least 1");
    }
    let names: Vec<&str> = if spec == "all" {
        TRACE_NAMES.to_vec()
    } else {
        spec.split(',').map(str::trim).collect()
    };
    names
        .into_iter()
        .map(|n| {
            generate_trace(n, ticks, seed).with_context(|| {
                format!(
                    "unknown workload scenario '{n}': use all or some of {}",
                    TRACE_NAMES.join(", ")
                )
            })
        })
        .collect()
}

/// One policy of a loop: its report label, its `NAME[:k=v,…]` spec, and the
/// field it is served under (`None`: the `--field` of the plugin options).
pub(super) struct Contestant {
    label: String,
    spec: String,
    field: Option<Field>,
}

impl Contestant {
    fn new(label: &str, spec: &str) -> Self {
        Self {
            label: label.to_string(),
            spec: spec.to_string(),
            field: None,
        }
    }
}

/// A closed loop to run: the active policy and its shadows.
pub(super) struct Loop {
    active: Contestant,
    shadows: Vec<Contestant>,
}

impl Loop {
    pub(super) fn alone(label: &str, spec: &str) -> Self {
        Self {
            active: Contestant::new(label, spec),
            shadows: Vec::new(),
        }
    }
}

/// Loads `contestant`'s policy, served under its field (see [`params_for_field`]).
fn load_spec(
    engine: &PluginEngine,
    plugin_dir: Option<&Path>,
    served: &Served,
    contestant: &Contestant,
) -> Result<PolicySpec> {
    let (name, params) = parse_policy(&contestant.spec)?;
    let plugin = resolve_policy(engine, &name, plugin_dir)?;
    let predictor = match contestant.field {
        Some(field) => served.under(field)?,
        None => Arc::clone(&served.predictor),
    };
    let params = policy_params(&contestant.label, &plugin, params)?;
    Ok(PolicySpec {
        label: contestant.label.clone(),
        plugin,
        params,
        predictor: Some(predictor),
    })
}

/// Loads the problem and the plugins and runs every loop over every trace.
pub(super) fn compare(
    problem_name: &str,
    plugins: &PluginOpts,
    utility: &UtilityChoice,
    loops: &[Loop],
    traces: &[Trace],
    seed: u64,
) -> Result<Comparison> {
    let scenario = load_scenario(problem_name)?;
    let served = plugins.served(&scenario)?;
    let engine = plugins.engine()?;
    let plugin_dir = plugins.dir.as_deref();
    let utility = utility.resolve(&engine, plugin_dir)?;
    let loaded: Vec<(PolicySpec, Vec<PolicySpec>)> = loops
        .iter()
        .map(|l| {
            let shadows = l
                .shadows
                .iter()
                .map(|s| load_spec(&engine, plugin_dir, &served, s))
                .collect::<Result<_>>()?;
            Ok((load_spec(&engine, plugin_dir, &served, &l.active)?, shadows))
        })
        .collect::<Result<_>>()?;
    let utility_title = utility.info.title.clone();
    let fields: Vec<Field> = loaded
        .iter()
        .flat_map(|(a, shadows)| std::iter::once(a).chain(shadows))
        .filter_map(|p| p.predictor.as_ref().map(|p| p.field()))
        .fold(Vec::new(), |mut acc, f| {
            if !acc.contains(&f) {
                acc.push(f);
            }
            acc
        });
    let predictor_name = match fields.as_slice() {
        [f] if *f == served.predictor.field() => served.name.clone(),
        [f] => format!("{}, {}", served.origin, f.label()),
        _ => format!(
            "{}, observed and candidate-aware fields (per policy)",
            served.origin
        ),
    };
    let harness = Harness::new(
        engine,
        utility,
        Arc::clone(&served.predictor),
        served.problem.clone(),
    );
    let total: usize = traces.iter().map(|t| t.levels.len()).sum::<usize>() * loaded.len();
    let bar = progress_bar(total, "closed-loop runs on the simulator");
    let mut runs = Vec::new();
    for trace in traces {
        for (active, shadows) in &loaded {
            bar.set_message(format!("{} / {}", trace.name, active.label));
            runs.extend(harness.run(active, shadows, trace, seed, || bar.inc(1))?);
        }
    }
    bar.finish_and_clear();
    let mut policies: Vec<String> = Vec::new();
    for run in &runs {
        if !policies.contains(&run.policy) {
            policies.push(run.policy.clone());
        }
    }
    Ok(Comparison {
        device: format!("{} (mfsched simulator)", SIM_DEVICE_NAME),
        scenario: scenario.name,
        predictor: predictor_name,
        utility: utility_title,
        seed,
        feasible_configurations: harness.feasible_count(),
        policies,
        traces: traces.iter().map(|t| t.name.clone()).collect(),
        runs,
    })
}

pub(super) fn print_written(files: &[PathBuf], dir: &Path) {
    println!("\nreport written to {}/", dir.display());
    for f in files {
        if let Some(name) = f.file_name() {
            println!("  {}", name.to_string_lossy());
        }
    }
}

pub fn ab(args: AbArgs) -> Result<()> {
    let e = &args.eval;
    let field_a = args.a_field.unwrap_or(e.plugins.field);
    let field_b = args.b_field.unwrap_or(e.plugins.field);
    if args.a == args.b && field_a == field_b {
        bail!(
            "--a and --b are the same policy ('{}') under the same field: compare two different ones, or set --b-field",
            args.a
        );
    }
    // Same policy under two fields: the labels say which is which.
    let label = |spec: &str, field: Field| {
        if field_a == field_b {
            spec.to_string()
        } else {
            format!("{spec} ({})", field.label())
        }
    };
    let (label_a, label_b) = (label(&args.a, field_a), label(&args.b, field_b));
    let traces = trace_list(&e.scenarios, e.ticks, e.seed)?;
    let contestant = |label: &str, spec: &str, field: Field| Loop {
        active: Contestant {
            label: label.to_string(),
            spec: spec.to_string(),
            field: Some(field),
        },
        shadows: Vec::new(),
    };
    let loops = [
        contestant(&label_a, &args.a, field_a),
        contestant(&label_b, &args.b, field_b),
    ];
    let cmp = compare(&e.problem, &e.plugins, &e.utility, &loops, &traces, e.seed)?;
    println!(
        "A/B on the {} — {label_a} vs {label_b} on {}, seed {}",
        cmp.device, cmp.scenario, e.seed
    );
    print!("{}", cmp.summary_table());
    if let Some(table) = cmp.b_versus_a() {
        print!("{table}");
    }
    let mut command = format!(
        "mfsched ab --a {} --b {} --problem {} --scenarios {} --ticks {} --seed {}",
        args.a, args.b, e.problem, e.scenarios, e.ticks, e.seed
    );
    for (flag, field) in [("--a-field", field_a), ("--b-field", field_b)] {
        if field != Field::Observed {
            command.push_str(&format!(" {flag} candidate-aware"));
        }
    }
    let files = cmp.write(&args.out, "A/B policy comparison", &command)?;
    print_written(&files, &args.out);
    // A policy that produced no valid decision on a whole trace did not take
    // part: say so, with its reason, and fail.
    let dead: Vec<String> = cmp
        .runs
        .iter()
        .filter(|r| !r.ticks.is_empty() && r.ticks.iter().all(|t| !t.accepted))
        .map(|r| {
            format!(
                "{} failed every one of its {} tick(s) on '{}' ({})",
                r.policy,
                r.ticks.len(),
                r.trace,
                r.ticks
                    .iter()
                    .find_map(|t| t.failure.as_deref())
                    .unwrap_or("no reason recorded")
            )
        })
        .collect();
    if let Some(first) = dead.first() {
        bail!(
            "{first}{}; the report is in {}",
            match dead.len() {
                1 => String::new(),
                n => format!(" (and {} more run(s) like it)", n - 1),
            },
            args.out.display()
        );
    }
    Ok(())
}

pub fn demo(args: DemoArgs) -> Result<()> {
    let traces = trace_list(&args.scenario, args.ticks, args.seed)?;
    println!(
        "mfsched demo: paper-n5 (3 LLMs + 2 YOLO11) on the {}, workload '{}', {} ticks",
        SIM_DEVICE_NAME, args.scenario, args.ticks
    );
    println!("active policy: ga; shadow: exhaustive (per-step argmax, never applied)\n");
    let loops = [Loop {
        active: Contestant::new("ga", "ga"),
        shadows: vec![Contestant::new("exhaustive", "exhaustive")],
    }];
    let cmp = compare(
        "paper-n5",
        &args.plugins,
        &UtilityChoice::embedded(),
        &loops,
        &traces,
        args.seed,
    )?;
    print!("{}", cmp.summary_table());
    let command = format!(
        "mfsched demo --scenario {} --ticks {} --seed {}",
        args.scenario, args.ticks, args.seed
    );
    let files = cmp.write(
        &args.out,
        "mfsched demo: GA with an exhaustive shadow",
        &command,
    )?;
    print_written(&files, &args.out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_specs_parse() {
        assert_eq!(parse_policy("ga").expect("plain"), ("ga".into(), vec![]));
        assert_eq!(
            parse_policy("static-budget:k=500").expect("with k"),
            ("static-budget".into(), vec![("k".into(), "500".into())])
        );
        assert_eq!(
            parse_policy("ga:population=64,generations=30")
                .expect("two")
                .1
                .len(),
            2
        );
        assert!(parse_policy(":k=1").is_err());
        assert!(parse_policy("ga:k=1,oops").is_err());
        assert_eq!(
            parse_policy("c:/p/my.wasm:chains=4").expect("a path with ':'"),
            ("c:/p/my.wasm".into(), vec![("chains".into(), "4".into())])
        );
        assert_eq!(
            parse_policy("c:/p/my.wasm").expect("a bare path").0,
            "c:/p/my.wasm"
        );
        // A parameter without a value is named, not read as part of the file name.
        for spec in ["my.wasm:chains", "ga:chains"] {
            let err = parse_policy(spec).expect_err("no value");
            assert!(
                err.to_string()
                    .contains("parameter 'chains' is not KEY=VALUE"),
                "{err}"
            );
        }
    }

    #[test]
    fn trace_lists() {
        assert_eq!(trace_list("all", 100, 1).expect("all").len(), 8);
        assert_eq!(trace_list("ramp, bursts", 100, 1).expect("two").len(), 2);
        let err = trace_list("ramp,nope", 100, 1).expect_err("unknown");
        assert!(format!("{err:#}").contains("unknown workload scenario 'nope'"));
        assert!(trace_list("all", 0, 1).is_err());
    }
}

/// `repro correction`: one policy's closed loop on a simulated card perturbed
/// away from the one the surrogate learnt (each model's throughput scaled by
/// seeded factors), without and with the online correction, beside the
/// unperturbed card.
#[derive(Debug, Args)]
pub struct CorrectionArgs {
    /// Directory for correction.md and results.json.
    #[arg(long, default_value = "repro-correction")]
    out: PathBuf,
    /// The policy: NAME or FILE.wasm, optionally with parameters.
    #[arg(long, default_value = "ga")]
    policy: String,
    /// The workload trace (one of steady, step-up, step-down, ramp, periodic,
    /// bursts, random-walk, mixed).
    #[arg(long, default_value = "random-walk")]
    trace: String,
    /// Seeds, comma-separated: each draws its own perturbation, trace and simulator.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 3])]
    seeds: Vec<u64>,
    /// Spread of each model's throughput factor (log scale: 0.3 ≈ ±35 %).
    #[arg(long, default_value_t = 0.3)]
    model_sigma: f64,
    /// Spread of each configuration's factor around its model's (log scale).
    #[arg(long, default_value_t = 0.1)]
    config_sigma: f64,
    /// The bundled scenario (models and card) or a scenario .toml file.
    #[arg(long, visible_alias = "scenario", default_value = "paper-n3")]
    problem: String,
    /// Decision ticks per run.
    #[arg(long, default_value_t = DEFAULT_TRACE_TICKS)]
    ticks: usize,
    /// Each condition again with floors enforced on the split-conformal lower
    /// bound at this miss rate (from the bundle's held-out ratios); 0: point
    /// floors only.
    #[arg(long, default_value_t = mfsched_core::DEFAULT_FLOOR_MISS_RATE)]
    floor_miss_rate: f64,
    /// What a tick does when no configuration is predicted to meet a floor:
    /// `keep` (every decision refused, the last valid configuration kept, as
    /// `decide` and `ab` do) or `best-effort` (the floor held at the edge of
    /// the model's reach, as the daemon does by default).
    #[arg(long, value_enum, default_value = "keep")]
    floors_out_of_reach: OutOfReachArg,
    #[command(flatten)]
    utility: UtilityChoice,
    #[command(flatten)]
    plugins: PluginOpts,
}

/// `--floors-out-of-reach`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OutOfReachArg {
    Keep,
    BestEffort,
}

impl From<OutOfReachArg> for mfsched_core::OutOfReach {
    fn from(a: OutOfReachArg) -> Self {
        match a {
            OutOfReachArg::Keep => Self::Keep,
            OutOfReachArg::BestEffort => Self::BestEffort,
        }
    }
}

/// `--floor-miss-rate`'s value as margins: `None` for 0.
pub fn floor_miss_rate(flag: &str, value: f64) -> Result<Option<f64>> {
    mfsched_core::floor_miss_rate(value).map_err(|e| anyhow::anyhow!("{flag} {value}: {e}"))
}

pub fn correction(args: CorrectionArgs) -> Result<()> {
    use mfsched_lab::CorrectionStudy;
    for (flag, v) in [
        ("--model-sigma", args.model_sigma),
        ("--config-sigma", args.config_sigma),
    ] {
        if !(v.is_finite() && (0.0..=2.0).contains(&v)) {
            bail!("{flag} {v}: use a spread between 0 and 2");
        }
    }
    if args.seeds.is_empty() {
        bail!("--seeds: give at least one seed");
    }
    let miss_rate = floor_miss_rate("--floor-miss-rate", args.floor_miss_rate)?;
    let scenario = load_scenario(&args.problem)?;
    let served = args.plugins.served(&scenario)?;
    let out_of_reach = mfsched_core::OutOfReach::from(args.floors_out_of_reach);
    let margins = miss_rate.map(|a| served.floors(Some(a)).with_out_of_reach(out_of_reach));
    if let Some(uncalibrated) = margins
        .as_ref()
        .and_then(|m| m.uncalibrated_names(&served.problem))
    {
        bail!(
            "--floor-miss-rate: the bundle of {} keeps no held-out ratios for {uncalibrated} (retrain it; or --floor-miss-rate 0)",
            scenario.name,
        );
    }
    let engine = args.plugins.engine()?;
    let plugin_dir = args.plugins.dir.as_deref();
    let utility = args.utility.resolve(&engine, plugin_dir)?;
    let policy = load_spec(
        &engine,
        plugin_dir,
        &served,
        &Contestant::new(&args.policy, &args.policy),
    )?;
    let harness = Harness::new(
        engine,
        utility,
        Arc::clone(&served.predictor),
        served.problem.clone(),
    );
    let mut traces = Vec::new();
    for &seed in &args.seeds {
        let mut named = trace_list(&args.trace, args.ticks, seed)?;
        if named.len() != 1 {
            bail!(
                "--trace {}: name one trace (every seed runs on it; run again for another)",
                args.trace
            );
        }
        traces.append(&mut named);
    }
    let study = CorrectionStudy {
        model_sigma: args.model_sigma,
        config_sigma: args.config_sigma,
        seeds: args.seeds.clone(),
        correction: mfsched_core::CorrectionConfig::default(),
        margins,
        out_of_reach,
    };
    let total = args.ticks
        * args.seeds.len()
        * mfsched_lab::CORRECTION_CONDITIONS.len()
        * study.runs_per_condition();
    let bar = progress_bar(total, "closed-loop runs on the simulator");
    let result = study.run(&harness, &policy, &traces, || bar.inc(1))?;
    bar.finish_and_clear();
    let command = format!(
        "mfsched repro correction --problem {} --policy {} --trace {} --ticks {} --seeds {} --model-sigma {} --config-sigma {} --floor-miss-rate {} --floors-out-of-reach {}",
        args.problem,
        args.policy,
        args.trace,
        args.ticks,
        args.seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
        args.model_sigma,
        args.config_sigma,
        args.floor_miss_rate,
        out_of_reach.as_str()
    );
    let heading = format!(
        "Online correction and calibrated floors on the {} (mfsched simulator) — {} on {}, trace {}, {} ticks, seeds {:?}; the card's throughputs scaled by e^(σ_m·z + σ_c·z) with σ_m = {}, σ_c = {}; predictor: {}; floor violations are of the card's noise-free throughput against the declared floors, whatever floors the decisions enforced",
        SIM_DEVICE_NAME,
        policy.label,
        scenario.name,
        args.trace,
        args.ticks,
        args.seeds,
        args.model_sigma,
        args.config_sigma,
        served.name
    );
    let table = result.table();
    println!("{heading}\n\n{table}");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let md = args.out.join("correction.md");
    mfsched_core::write_atomically(
        &md,
        format!("# {heading}\n\n{table}\nCommand: `{command}`\n").as_bytes(),
    )?;
    let json = args.out.join("results.json");
    mfsched_core::write_atomically(&json, &serde_json::to_vec_pretty(&result)?)?;
    print_written(&[md, json], &args.out);
    Ok(())
}
