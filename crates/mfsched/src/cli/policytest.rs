//! `mfsched plugins test`: where the states come from (a decision log written
//! by `mfsched run`, read by the daemon's own reader; a JSON-lines file; or the
//! four workload levels), the harness run, the summary table and the verdict.

use super::decide::{checked_state, parse_params};
use super::plugins::{PluginOpts, policy_params};
use anyhow::{Context as _, Result, bail};
use mfsched_core::{GpuState, JointConfig, Problem, WorkloadLevel};
use mfsched_core::{Scenario, load_scenario, scenario_from_toml};
use mfsched_daemon::LogContents;
use mfsched_plugin_host::resolve_policy;
use mfsched_plugin_host::{HARNESS_CLOCK_STEP, HarnessCase, HarnessInputs};
use mfsched_plugin_host::{default_state, run_harness};
use mfsched_surrogate::Served;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the states to decide on come from.
#[derive(Debug)]
pub enum StateSource {
    /// A decision log written by `mfsched run`.
    Log(PathBuf),
    /// One JSON object per line.
    Jsonl(PathBuf),
    /// Each workload level at the running configuration's memory.
    Levels,
}

#[derive(Debug)]
pub struct TestArgs<'a> {
    pub policy: &'a str,
    pub source: StateSource,
    /// `None`: the scenario a version 3 log records, else paper-n5.
    pub scenario: Option<&'a str>,
    pub runs: usize,
    pub budget_ms: Option<u64>,
    pub utility: &'a super::plugins::UtilityChoice,
    pub params: &'a [String],
    pub seed: u64,
    pub opts: &'a PluginOpts,
}

/// The scenario the states belong to: the one asked for, else the one the log
/// recorded, else paper-n5.
fn scenario_of(args: &TestArgs<'_>, log: Option<&LogContents>) -> Result<Scenario> {
    if let Some(name) = args.scenario {
        return load_scenario(name);
    }
    match log.and_then(|l| l.runs.first()) {
        Some((_, run)) => {
            scenario_from_toml(&run.scenario_toml).context("the scenario the decision log records")
        }
        None => load_scenario("paper-n5"),
    }
}

pub fn run(args: &TestArgs<'_>) -> Result<()> {
    let log = match &args.source {
        StateSource::Log(path) => Some(read_log(path)?),
        _ => None,
    };
    let scenario = scenario_of(args, log.as_ref())?;
    let Served {
        predictor,
        name: predictor_name,
        problem,
        ..
    } = args.opts.served(&scenario)?;
    let (cases, origin) = match &args.source {
        StateSource::Log(path) => (
            cases_from_log(
                path,
                log.as_ref().context("read above")?,
                &problem,
                &scenario.name,
            )?,
            path.display().to_string(),
        ),
        StateSource::Jsonl(path) => (
            cases_from_jsonl(path, &problem)?,
            path.display().to_string(),
        ),
        StateSource::Levels => (level_cases(&problem), "the four workload levels".to_owned()),
    };
    let engine = args.opts.engine()?;
    let dir = args.opts.dir.as_deref();
    let policy = resolve_policy(&engine, args.policy, dir)?;
    let params = policy_params(args.policy, &policy, parse_params(args.params, args.seed)?)?;
    // Scored as the log was, unless the command line names a utility.
    let logged = log
        .as_ref()
        .filter(|_| args.utility.is_default())
        .and_then(|l| {
            let first = l.records.first()?;
            Some((l.run_of(0)?, l.utility_of(first.tick)))
        });
    let utility = match logged {
        Some((run, recorded)) => super::replay::logged_utility(&engine, dir, run, recorded)?,
        None => args.utility.resolve(&engine, dir)?,
    };
    let budget = Duration::from_millis(args.budget_ms.unwrap_or(args.opts.deadline_ms));
    println!(
        "testing {} (\"{}\", sha256 {}) on {} state(s) of {}, scenario {} (predictor: {predictor_name})",
        args.policy,
        policy.info.title,
        policy.info.short_hash(),
        cases.len(),
        origin,
        scenario.name,
    );
    println!(
        "{} runs per state, the policy's clocks {:.6} s further ahead in each; latency budget {} ms, deadline {} ms; scored with {}",
        args.runs,
        HARNESS_CLOCK_STEP.as_secs_f64(),
        budget.as_millis(),
        args.opts.deadline_ms,
        utility.label()
    );
    let inputs = HarnessInputs {
        engine,
        predictor,
        policy,
        utility,
        params,
        runs: args.runs,
    };
    let reports = run_harness(&inputs, &cases);

    println!(
        "\n{:<12} {:<8} {:>9} {:>5}  {:<28} {:>6} {:>5} {:>8} {:>8}",
        "state", "workload", "vram MiB", "util", "decision", "valid", "same", "p50 ms", "max ms"
    );
    let mut all_ms = Vec::new();
    let mut findings = Vec::new();
    for r in &reports {
        let mut ms: Vec<f64> = r.latencies.iter().map(|l| l.as_secs_f64() * 1e3).collect();
        let max = ms.iter().copied().fold(0.0, f64::max);
        let p50 = mfsched_core::nearest_rank(&mut ms, 0.5);
        all_ms.extend(ms);
        let valid = r.answers.iter().filter(|a| a.is_ok()).count();
        println!(
            "{:<12} {:<8} {:>9.0} {:>5.2}  {:<28} {:>6} {:>5} {:>8.2} {:>8.2}",
            r.label,
            r.state.workload.to_string(),
            r.state.vram_used_mib,
            r.state.utilization,
            r.decision().map_or("-".to_owned(), |c| format!("{c:?}")),
            format!("{valid}/{}", r.answers.len()),
            if r.deterministic() { "yes" } else { "NO" },
            p50,
            max
        );
        findings.extend(
            r.findings(budget)
                .into_iter()
                .map(|f| format!("{}: {f}", r.label)),
        );
    }
    let decisions: usize = reports.iter().map(|r| r.answers.len()).sum();
    let valid: usize = reports
        .iter()
        .map(|r| r.answers.iter().filter(|a| a.is_ok()).count())
        .sum();
    let deterministic = reports.iter().filter(|r| r.deterministic()).count();
    let max_ms = all_ms.iter().copied().fold(0.0, f64::max);
    let p50_ms = mfsched_core::nearest_rank(&mut all_ms, 0.5);
    println!(
        "\n{} state(s) × {} runs: {valid} of {decisions} decisions valid, {deterministic} of {} states deterministic, latency p50 {p50_ms:.2} ms, max {max_ms:.2} ms (budget {} ms)",
        reports.len(),
        args.runs,
        reports.len(),
        budget.as_millis()
    );
    if !findings.is_empty() {
        for f in &findings {
            println!("ERROR {f}");
        }
        bail!(
            "{}: {} finding(s) (the ERROR lines above)",
            args.policy,
            findings.len()
        );
    }
    println!("passed: {} on every state", args.policy);
    Ok(())
}

fn read_log(path: &Path) -> Result<LogContents> {
    let contents = mfsched_daemon::read_decision_log(path)?;
    for skipped in &contents.skipped {
        eprintln!("warning: {}: {skipped}", path.display());
    }
    if let Some(torn) = &contents.torn {
        eprintln!("warning: {}: {torn}", path.display());
    }
    Ok(contents)
}

/// The states of a decision log, each with the configuration running when it
/// was recorded: the one the record holds (version 3), else the previous
/// record's applied one (the scenario's own before the first record).
fn cases_from_log(
    path: &Path,
    contents: &LogContents,
    problem: &Problem,
    scenario: &str,
) -> Result<Vec<HarnessCase>> {
    if contents.records.is_empty() {
        bail!("{}: the log holds no record", path.display());
    }
    let mut current = problem.current.clone();
    let mut cases = Vec::with_capacity(contents.records.len());
    for r in &contents.records {
        check_config(problem, &r.applied).with_context(|| {
            format!(
                "{}: tick {}: its configuration does not belong to scenario {scenario} (pass the --scenario the daemon ran)",
                path.display(),
                r.tick
            )
        })?;
        if let Some(previous) = &r.previous {
            check_config(problem, previous).with_context(|| {
                format!(
                    "{}: tick {}: the configuration it started from does not belong to scenario {scenario}",
                    path.display(),
                    r.tick
                )
            })?;
            current.clone_from(previous);
        }
        cases.push(case(format!("tick {}", r.tick), problem, &current, r.state));
        current.clone_from(&r.applied);
    }
    Ok(cases)
}

/// One line of a `--states` file.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StateLine {
    workload: WorkloadLevel,
    vram_used_mib: f64,
    utilization: f64,
    /// The configuration running then (default: the scenario's).
    current: Option<JointConfig>,
}

fn cases_from_jsonl(path: &Path, problem: &Problem) -> Result<Vec<HarnessCase>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let parsed: StateLine = serde_json::from_str(line).with_context(|| {
            format!(
                "{}: expected e.g. {{\"workload\":\"high\",\"vram_used_mib\":12000,\"utilization\":0.7}}",
                at()
            )
        })?;
        let state = checked_state(GpuState {
            workload: parsed.workload,
            vram_used_mib: parsed.vram_used_mib,
            utilization: parsed.utilization,
            contention: None,
        })
        .with_context(at)?;
        let current = parsed.current.unwrap_or_else(|| problem.current.clone());
        check_config(problem, &current).with_context(|| format!("{}: current", at()))?;
        cases.push(case(format!("line {}", i + 1), problem, &current, state));
    }
    if cases.is_empty() {
        bail!("{}: no state in the file", path.display());
    }
    Ok(cases)
}

fn level_cases(problem: &Problem) -> Vec<HarnessCase> {
    let default = default_state(problem);
    WorkloadLevel::ALL
        .iter()
        .map(|&workload| {
            let state = GpuState {
                workload,
                ..default
            };
            case(workload.to_string(), problem, &problem.current, state)
        })
        .collect()
}

fn case(label: String, problem: &Problem, current: &[u32], state: GpuState) -> HarnessCase {
    let mut problem = problem.clone();
    problem.current = current.to_vec();
    HarnessCase {
        label,
        problem,
        state,
    }
}

/// One local configuration per model of `problem`, each in range.
fn check_config(problem: &Problem, config: &[u32]) -> Result<()> {
    if config.len() != problem.models.len() {
        bail!(
            "{} model(s) in {config:?}, the scenario has {}",
            config.len(),
            problem.models.len()
        );
    }
    for (m, &c) in problem.models.iter().zip(config) {
        if c as usize >= m.configs.len() {
            bail!(
                "model {} has {} configurations, {config:?} asks for number {c}",
                m.name,
                m.configs.len()
            );
        }
    }
    Ok(())
}
