//! `mfsched decide`: one decision tick through a policy component.

use super::plugins::{PluginOpts, UtilityChoice, key_values, policy_params};
use anyhow::{Context as _, Result, bail};
use clap::Args;
use mfsched_core::GpuState;
use mfsched_core::load_scenario;
use mfsched_plugin_host::default_state;
use mfsched_plugin_host::resolve_policy;
use mfsched_plugin_host::{Decider, Registry};
use mfsched_surrogate::Served;
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// A bundled scenario name or a path to a scenario .toml file.
    #[arg(long)]
    scenario: String,
    /// The policy: an embedded name (ga, exhaustive, exact, static-budget), a NAME.wasm of --plugin-dir, or a .wasm path.
    #[arg(long)]
    policy: String,
    #[command(flatten)]
    utility: UtilityChoice,
    /// The GPU state, as JSON: {"workload":"high","vram_used_mib":12000,"utilization":0.7},
    /// with "contention":0.4 for a bundle trained on the contention field.
    /// Default: medium load, the running configuration's VRAM, utilisation and contention 0.5.
    #[arg(long, value_name = "JSON")]
    state: Option<String>,
    /// A policy parameter (repeatable); `mfsched plugins list` shows each policy's.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// Seed passed to the policy.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    opts: PluginOpts,
}

#[derive(Debug, Serialize)]
struct ModelLine {
    model: String,
    config: u32,
    knobs: mfsched_core::KnobSetting,
    vram_mib: u32,
    predicted: f32,
    floor: f64,
}

#[derive(Debug, Serialize)]
struct Output {
    scenario: String,
    predictor: String,
    policy: String,
    policy_title: String,
    utility: String,
    /// Every parameter the utility is called with (given or its default).
    utility_params: Vec<(String, String)>,
    state: GpuState,
    params: Vec<(String, String)>,
    accepted: bool,
    reason: Option<String>,
    models: Vec<ModelLine>,
    joint_index: Option<u64>,
    predicted_utility: Option<f64>,
    feasible: bool,
    vram_mib: u64,
    cap_mib: u32,
    floors_met: bool,
    latency_ms: f64,
    predict_ms: f64,
    evaluate_ms: f64,
    candidates_evaluated: u64,
}

pub(super) fn parse_params(raw: &[String], seed: u64) -> Result<Vec<(String, String)>> {
    let mut params = key_values("--param", raw)?;
    if params.iter().any(|(k, _)| k == "seed") {
        bail!("--param seed=...: use --seed");
    }
    params.push(("seed".into(), seed.to_string()));
    Ok(params)
}

pub fn run(args: DecideArgs) -> Result<()> {
    let scenario = load_scenario(&args.scenario)?;
    let Served {
        predictor,
        name: predictor_name,
        problem,
        ..
    } = args.opts.served(&scenario)?;
    let state = match &args.state {
        None => default_state(&problem),
        Some(json) => parse_state(json)?,
    };
    let params = parse_params(&args.params, args.seed)?;
    let engine = args.opts.engine()?;
    let dir = args.opts.dir.as_deref();
    let policy = resolve_policy(&engine, &args.policy, dir)?;
    let params = policy_params(&args.policy, &policy, params)?;
    let utility = args.utility.resolve(&engine, dir)?;
    let registry = Registry::default();
    let mut decider = Decider::new(
        Arc::clone(&engine),
        registry.policy_slot(Arc::clone(&policy)),
        registry.utility_slot(Arc::clone(&utility)),
        Arc::clone(&predictor),
        params.clone(),
    );
    let report = decider.decide(&problem, &state);

    let applied = &report.applied;
    let feasible = problem.check_feasible(&applied.config).is_ok();
    let floors_met = applied.predictions.len() == problem.models.len()
        && report.floors_missed(&problem).is_empty();
    let reason = report.failure().map(ToString::to_string);
    let out = Output {
        scenario: scenario.name.clone(),
        predictor: predictor_name,
        policy: policy.info.name.clone(),
        policy_title: policy.info.title.clone(),
        utility: utility.info.name.clone(),
        utility_params: utility.params_pairs(),
        state,
        params,
        accepted: reason.is_none(),
        reason: reason.clone(),
        models: problem
            .models
            .iter()
            .zip(&applied.config)
            .enumerate()
            .map(|(i, (m, &c))| ModelLine {
                model: m.name.clone(),
                config: c,
                knobs: m.knobs(c as usize),
                vram_mib: m.configs[c as usize].vram_mib,
                predicted: applied.predictions.get(i).copied().unwrap_or(f32::NAN),
                floor: problem.sla_floors[i],
            })
            .collect(),
        joint_index: problem.space().index(&applied.config),
        predicted_utility: applied.utility,
        feasible,
        vram_mib: problem.vram_mib(&applied.config),
        cap_mib: problem.card.vram_mib,
        floors_met,
        latency_ms: report.latency.as_secs_f64() * 1e3,
        predict_ms: report.active.stats.predict.as_secs_f64() * 1e3,
        evaluate_ms: report.active.stats.evaluate.as_secs_f64() * 1e3,
        candidates_evaluated: report.active.candidates_evaluated,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_text(&out);
    }
    match reason {
        None => Ok(()),
        Some(why) => bail!("{why}; the running configuration was kept"),
    }
}

fn parse_state(json: &str) -> Result<GpuState> {
    let state: GpuState = serde_json::from_str(json).map_err(|e| {
        anyhow::anyhow!(
            "--state: {e}; expected e.g. {{\"workload\":\"high\",\"vram_used_mib\":12000,\"utilization\":0.7}}"
        )
    })?;
    checked_state(state).context("--state")
}

/// `state` if its numbers are in range: utilisation in [0, 1], memory in use
/// finite and non-negative.
pub(super) fn checked_state(state: GpuState) -> Result<GpuState> {
    if !(0.0..=1.0).contains(&state.utilization) {
        bail!("utilization must be in [0, 1], got {}", state.utilization);
    }
    if !(state.vram_used_mib.is_finite() && state.vram_used_mib >= 0.0) {
        bail!("vram_used_mib must be a non-negative number");
    }
    Ok(state)
}

fn print_text(o: &Output) {
    let params: Vec<String> = o.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("scenario   {}", o.scenario);
    println!("predictor  {}", o.predictor);
    println!(
        "state      {} load, {:.0} MiB in use, utilisation {:.2}",
        o.state.workload, o.state.vram_used_mib, o.state.utilization
    );
    println!(
        "policy     {} ({}), {}",
        o.policy,
        o.policy_title,
        params.join(" ")
    );
    let utility_params: Vec<String> = o
        .utility_params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if utility_params.is_empty() {
        println!("utility    {}", o.utility);
    } else {
        println!("utility    {}, {}", o.utility, utility_params.join(" "));
    }
    println!();
    // Columns as wide as their widest cell: model names and knob settings are
    // data of any length.
    let decisions: Vec<String> = o.models.iter().map(|m| m.knobs.to_string()).collect();
    let wide = |header: &str, cells: &mut dyn Iterator<Item = usize>| {
        cells.fold(header.chars().count(), usize::max)
    };
    let name_w = wide(
        "model",
        &mut o.models.iter().map(|m| m.model.chars().count()),
    );
    let decision_w = wide("decision", &mut decisions.iter().map(|d| d.chars().count()));
    println!(
        "{:<name_w$} {:<decision_w$} {:>8} {:>11} {:>11}",
        "model", "decision", "VRAM MiB", "predicted", "SLA floor"
    );
    for (m, decision) in o.models.iter().zip(&decisions) {
        println!(
            "{:<name_w$} {:<decision_w$} {:>8} {:>11.1} {:>11.1}",
            m.model, decision, m.vram_mib, m.predicted, m.floor
        );
    }
    println!();
    match o.predicted_utility {
        Some(u) => println!("predicted utility  {u:.4}"),
        None => println!("predicted utility  (the utility component failed)"),
    }
    println!(
        "feasible           {}: {} / {} MiB, SLA floors {}",
        if o.feasible && o.floors_met {
            "yes"
        } else {
            "no"
        },
        o.vram_mib,
        o.cap_mib,
        if o.floors_met { "met" } else { "NOT met" }
    );
    println!(
        "decision latency   {:.2} ms (predictor {:.2} ms, utility {:.2} ms, {} candidates scored)",
        o.latency_ms, o.predict_ms, o.evaluate_ms, o.candidates_evaluated
    );
    match &o.reason {
        None => println!("outcome            accepted"),
        Some(why) => println!("outcome            KEPT the running configuration: {why}"),
    }
}
