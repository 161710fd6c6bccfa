//! `mfsched replay`: a decision log read back, and, with `--policy`, every
//! recorded tick decided again by other policies (counterfactual replay: offline
//! A/B on what a deployment actually saw).

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use super::eval::parse_policy;
use super::plugins::{PluginOpts, policy_params};
use mfsched_core::printable;
use mfsched_core::write_atomically;
use mfsched_core::{
    Corrected, Correction, CorrectionConfig, Floors, JointConfig, OutOfReach, Predictor, Problem,
};
use mfsched_daemon::{
    ComponentRecord, FloorsRecord, LogContents, RunRecord, TickRecord, UtilityRecord,
};
use mfsched_plugin_host::{Decider, Registry};
use mfsched_plugin_host::{LoadedUtility, OUTPUT_NAME_BYTES, PluginEngine};
use mfsched_plugin_host::{resolve_policy, resolve_utility};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A decision log written by `mfsched run`.
    log: PathBuf,
    /// Totals per policy instead of one line per tick.
    #[arg(long)]
    summary: bool,
    /// Decide every recorded tick again with this policy (`NAME[:k=v,…]`: an
    /// embedded name, a NAME.wasm of --plugin-dir, or a .wasm path) on the
    /// recorded state and running configuration; repeatable. Prints each
    /// policy beside what ran.
    #[arg(long = "policy", value_name = "SPEC")]
    policies: Vec<String>,
    /// With --policy: also write report.md and results.json here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// With --policy: print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// With --policy: decide again with the floors enforced on the
    /// split-conformal lower bound at this miss rate (0: on the point
    /// prediction) instead of as the log recorded.
    #[arg(long, value_name = "ALPHA")]
    floor_miss_rate: Option<f64>,
    #[command(flatten)]
    opts: PluginOpts,
}

pub fn replay(args: ReplayArgs) -> Result<()> {
    let contents = mfsched_daemon::read_decision_log(&args.log)?;
    for skipped in &contents.skipped {
        eprintln!("warning: {}: {skipped}", args.log.display());
    }
    if let Some(torn) = &contents.torn {
        eprintln!(
            "warning: {}: {torn}; the {} record(s) before it are intact",
            args.log.display(),
            contents.records.len()
        );
    }
    if !args.policies.is_empty() {
        return counterfactual(&args, &contents);
    }
    if args.summary {
        print!("{}", mfsched_daemon::replay_summary(&contents));
    } else {
        print!("{}", mfsched_daemon::replay_lines(&contents));
    }
    Ok(())
}

/// One policy's totals over the replayed ticks.
#[derive(Debug, Default, Serialize)]
struct Totals {
    label: String,
    ticks: usize,
    decided: usize,
    failed: usize,
    /// Mean predicted utility over the ticks with a finite one.
    mean_utility: Option<f64>,
    /// Ticks where a predicted throughput is under its model's enforced floor.
    floors_missed: usize,
    /// For what ran: ticks whose measured throughput (of the configuration
    /// that ran before the tick) is under a declared floor; `None` for the
    /// replayed policies, whose choices were never measured.
    measured_floor_misses: Option<usize>,
    /// Models whose configuration the decision changed, summed over the ticks.
    reconfigurations: usize,
    /// Ticks decided differently from what ran (none for what ran itself).
    differ_from_ran: Option<usize>,
    #[serde(skip)]
    utility_sum: f64,
    #[serde(skip)]
    utility_n: usize,
}

impl Totals {
    fn add(&mut self, utility: Option<f64>, floors_missed: bool, reconfigured: usize) {
        self.ticks += 1;
        if let Some(u) = utility.filter(|u| u.is_finite()) {
            self.utility_sum += u;
            self.utility_n += 1;
        }
        self.floors_missed += usize::from(floors_missed);
        self.reconfigurations += reconfigured;
        self.mean_utility = (self.utility_n > 0).then(|| self.utility_sum / self.utility_n as f64);
    }
}

fn changed(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

fn misses_a_floor(problem: &Problem, throughput: impl IntoIterator<Item = f64>) -> bool {
    throughput
        .into_iter()
        .zip(&problem.sla_floors)
        .any(|(t, &f)| f > 0.0 && t < f)
}

/// What every replayed tick ran and what each policy would have decided.
#[derive(Debug, Serialize)]
struct Results {
    log: String,
    scenario: String,
    bundle_sha256: Option<String>,
    field: String,
    seed: u64,
    /// The utility every row is scored with, as the log recorded it
    /// (`name@hash`, its parameters in brackets), and whether the corrected
    /// predictions of the online correction were replayed.
    scored_with: String,
    corrected: bool,
    /// How the replay enforced the floors ("on the point prediction",
    /// "conformal, α 0.05"), and whether that is as the log recorded.
    floors: String,
    ticks: usize,
    skipped_without_previous: usize,
    ran: Totals,
    policies: Vec<Totals>,
    /// The components that answered in the log, and those replayed.
    recorded_components: Vec<ComponentRecord>,
    replayed_components: Vec<ComponentRecord>,
    /// Per tick: the recorded active decision and each policy's, in `policies` order.
    decisions: Vec<TickDecisions>,
}

#[derive(Debug, Serialize)]
struct TickDecisions {
    tick: u64,
    ran: Option<JointConfig>,
    policies: Vec<Option<JointConfig>>,
}

fn run_of(contents: &LogContents, i: usize) -> Result<&RunRecord> {
    contents.run_of(i).context(
        "this log has no run record (it was written before decision log version 3): \
         replay --policy needs the scenario, bundle and seed a version 3 log records",
    )
}

/// The utility a log's ticks were scored with: the daemon's (`run`), called
/// with the parameters the log recorded (`recorded`; logs before utility
/// records: its defaults). One rule for `replay` and `plugins test --log`.
pub(super) fn logged_utility(
    engine: &PluginEngine,
    dir: Option<&std::path::Path>,
    run: &RunRecord,
    recorded: Option<&UtilityRecord>,
) -> Result<Arc<LoadedUtility>> {
    let utility = resolve_utility(engine, &run.utility, dir).with_context(|| {
        format!(
            "the utility the log was scored with, '{}'{}",
            printable(&run.utility, OUTPUT_NAME_BYTES),
            if dir.is_none() {
                ": a component from the daemon's plugin_dir is found with --plugin-dir DIR"
            } else {
                ""
            }
        )
    })?;
    Ok(match recorded {
        Some(u) => Arc::new(
            utility
                .configured(u.params.clone())
                .map_err(|e| anyhow::anyhow!("the utility parameters the log recorded: {e}"))?,
        ),
        None => utility,
    })
}

/// The floors the replay enforces, and how to name them: `--floor-miss-rate`
/// where given (margins from the served bundle), else as the log recorded
/// (one floors record for every replayed tick), else on the point prediction.
fn replay_floors(
    args: &ReplayArgs,
    contents: &LogContents,
    ticks: &[(usize, &TickRecord)],
    served: &mfsched_surrogate::Served,
) -> Result<(Floors, String)> {
    let records: Vec<Option<&FloorsRecord>> =
        ticks.iter().map(|&(i, _)| contents.floors_of(i)).collect();
    if let Some(alpha) = args.floor_miss_rate {
        // Margins afresh; a floor out of reach handled as the daemon did.
        let floors = served
            .floors(super::eval::floor_miss_rate("--floor-miss-rate", alpha)?)
            .with_out_of_reach(
                records
                    .first()
                    .copied()
                    .flatten()
                    .map_or(OutOfReach::Keep, |r| r.out_of_reach),
            );
        let label = format!("{} (--floor-miss-rate)", floors.label());
        return Ok((floors, label));
    }
    if records.windows(2).any(|w| w[0] != w[1]) {
        bail!(
            "{}: the ticks enforced their floors differently ([floors] changed between daemon starts); replay one daemon set-up at a time, or set --floor-miss-rate",
            args.log.display()
        );
    }
    let n = served.problem.models.len();
    match records.first().copied().flatten() {
        Some(r) => {
            if r.declared.len() != n || r.enforced.len() != n {
                bail!(
                    "{}: the floors record holds {} declared and {} enforced floors for {n} models",
                    args.log.display(),
                    r.declared.len(),
                    r.enforced.len()
                );
            }
            // The daemon's own enforced floors, whatever margins this build
            // would take.
            let floors = Floors::as_recorded(r.declared.clone(), &r.enforced, r.miss_rate)
                .with_out_of_reach(r.out_of_reach);
            let label = format!("{} (as the log recorded)", floors.label());
            Ok((floors, label))
        }
        None => {
            let floors = Floors::point(served.problem.sla_floors.clone());
            let label = format!("{} (the log records no floors)", floors.label());
            Ok((floors, label))
        }
    }
}

fn counterfactual(args: &ReplayArgs, contents: &LogContents) -> Result<()> {
    let ticks: Vec<(usize, &TickRecord)> = contents
        .records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.previous.is_some())
        .collect();
    let skipped = contents.records.len() - ticks.len();
    let Some(&(first, _)) = ticks.first() else {
        bail!(
            "{}: no tick records the configuration it started from (logs before version 3 do not); nothing to replay",
            args.log.display()
        );
    };
    let run = run_of(contents, first)?;
    // One problem for the whole replay: every tick must come from the same set-up.
    for &(i, r) in &ticks {
        let other = run_of(contents, i)?;
        if other.scenario_toml != run.scenario_toml
            || other.bundle_sha256 != run.bundle_sha256
            || other.field != run.field
            || other.seed != run.seed
            || other.utility != run.utility
        {
            bail!(
                "{}: tick {} was decided with another scenario, bundle, field, seed or utility than tick {}; replay one daemon set-up at a time",
                args.log.display(),
                r.tick,
                contents.records[first].tick
            );
        }
    }
    let scenario = mfsched_core::scenario_from_toml(&run.scenario_toml)
        .context("the scenario the log recorded")?;
    let mut opts = args.opts.clone();
    opts.field = run.field;
    let served = opts.served(&scenario)?;
    if served.bundle_sha256 != run.bundle_sha256 {
        bail!(
            "the log was decided with bundle {}, this replay would predict with {}: pass the bundle the daemon used with --models DIR",
            run.bundle_sha256.as_deref().unwrap_or("(none)"),
            served.bundle_sha256.as_deref().unwrap_or("(none)")
        );
    }
    let engine = opts.engine()?;
    let dir = opts.dir.as_deref();
    // Scored as recorded: the utility's parameters come from the log (logs
    // before utility records: its defaults).
    let recorded = contents.utility_of(contents.records[first].tick);
    if let Some(&(_, r)) = ticks.iter().find(|(_, r)| {
        contents.utility_of(r.tick).map(|u| &u.params) != recorded.map(|u| &u.params)
    }) {
        bail!(
            "{}: tick {} was scored with other utility parameters than tick {}; replay one daemon set-up at a time",
            args.log.display(),
            r.tick,
            contents.records[first].tick
        );
    }
    let utility = logged_utility(&engine, dir, run, recorded)?;
    // Corrected as the daemon was: the settings its measurements recorded,
    // learnt afresh at each daemon start, fed each tick's measurements before
    // the tick is decided again.
    let corrections: Vec<&CorrectionConfig> = ticks
        .iter()
        .filter_map(|(_, r)| contents.measured_of(r.tick)?.correction.as_ref())
        .collect();
    if corrections.windows(2).any(|w| w[0] != w[1]) {
        bail!(
            "{}: the ticks were corrected with different [correction] settings; replay one daemon set-up at a time",
            args.log.display()
        );
    }
    let corrected = corrections.first().map(|&config| {
        let correction = Correction::new(&served.problem, config.clone(), &served.relative_error);
        Arc::new(Corrected::new(
            Arc::clone(&served.predictor),
            &served.problem,
            correction,
        ))
    });
    let predictor: Arc<dyn Predictor> = match &corrected {
        Some(c) => Arc::clone(c) as Arc<dyn Predictor>,
        None => Arc::clone(&served.predictor),
    };
    let (floors, floors_label) = replay_floors(args, contents, &ticks, &served)?;
    let registry = Registry::default();
    let mut deciders = Vec::with_capacity(args.policies.len());
    let mut replayed_components = Vec::with_capacity(args.policies.len());
    for spec in &args.policies {
        let (name, mut params) = parse_policy(spec)?;
        if params.iter().any(|(k, _)| k == "seed") {
            bail!(
                "policy '{spec}': seed is the recorded one ({}); do not set it",
                run.seed
            );
        }
        params.push(("seed".into(), run.seed.to_string()));
        let policy = resolve_policy(&engine, &name, dir)?;
        let params = policy_params(spec, &policy, params)?;
        deciders.push((
            spec.clone(),
            Decider::new(
                Arc::clone(&engine),
                registry.policy_slot(Arc::clone(&policy)),
                registry.utility_slot(Arc::clone(&utility)),
                Arc::clone(&predictor),
                params,
            )
            .floors_out_of_reach(floors.out_of_reach),
        ));
        replayed_components.push(ComponentRecord {
            policy: spec.clone(),
            identity: policy.info.identity(),
        });
    }
    let mut problem = served.problem.clone();
    problem.sla_floors = floors.enforced().to_vec();
    // Every policy that was active in the replayed ticks, in order of first
    // appearance (a switch through the API changes it mid-log).
    let mut actives: Vec<&str> = Vec::new();
    for (_, r) in &ticks {
        if !actives.contains(&r.active.policy.as_str()) {
            actives.push(&r.active.policy);
        }
    }
    let ran_label = format!(
        "ran ({})",
        actives
            .iter()
            .map(|p| printable(p, OUTPUT_NAME_BYTES))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut ran = Totals {
        label: ran_label,
        measured_floor_misses: Some(0),
        ..Totals::default()
    };
    let mut totals: Vec<Totals> = args
        .policies
        .iter()
        .map(|p| Totals {
            label: p.clone(),
            differ_from_ran: Some(0),
            ..Totals::default()
        })
        .collect();
    let mut decisions = Vec::with_capacity(ticks.len());
    let mut run_start = None;
    for (n, &(i, r)) in ticks.iter().enumerate() {
        let previous = r.previous.clone().unwrap_or_default();
        if previous.len() != problem.models.len() {
            bail!(
                "tick {}: the recorded configuration has {} models, the scenario {}",
                r.tick,
                previous.len(),
                problem.models.len()
            );
        }
        problem.current.clone_from(&previous);
        // Priced as the daemon priced this tick (its measured downtimes, with
        // `actuator.downtime_as_cost`); logs without costs: the scenario's.
        match contents.costs_of(r.tick) {
            Some(c) if c.costs.len() != problem.models.len() => bail!(
                "tick {}: the recorded reconfiguration costs are for {} models, the scenario has {}",
                r.tick,
                c.costs.len(),
                problem.models.len()
            ),
            Some(c) => problem.reconfig.clone_from(&c.costs),
            None => problem.reconfig.clone_from(&served.problem.reconfig),
        }
        if let Some(c) = &corrected {
            let start = contents
                .runs
                .iter()
                .rev()
                .find(|(first, _)| *first <= i)
                .map(|(first, _)| *first);
            if std::mem::replace(&mut run_start, start) != start {
                c.reset();
            }
            if let Some(m) = contents.measured_of(r.tick) {
                c.observe(&r.state, &previous, &m.throughput)
                    .with_context(|| format!("tick {}: the correction's prediction", r.tick))?;
            }
        }
        if let Some(m) = contents.measured_of(r.tick)
            && !floors.misses(&m.throughput).is_empty()
        {
            *ran.measured_floor_misses.get_or_insert(0) += 1;
        }
        let ran_joint = r.active.outcome.as_ref().ok().map(|p| p.joint.clone());
        match &r.active.outcome {
            Ok(_) => ran.decided += 1,
            Err(_) => ran.failed += 1,
        }
        let ran_throughput: Vec<f64> = r
            .active
            .outcome
            .as_ref()
            .ok()
            .and_then(|p| p.predicted_throughput.clone())
            .unwrap_or_default();
        ran.add(
            r.active
                .outcome
                .as_ref()
                .ok()
                .and_then(|p| p.predicted_utility),
            misses_a_floor(&problem, ran_throughput),
            r.changed_models.len(),
        );
        let mut mine = Vec::with_capacity(deciders.len());
        // The floors the tick decided with (those out of reach held at its
        // edge): each replayed decider holds them as the daemon did, whatever
        // its policy.
        let mut tick_floors = None;
        for ((_, decider), t) in deciders.iter_mut().zip(&mut totals) {
            let report = decider.decide(&problem, &r.state);
            tick_floors.get_or_insert_with(|| report.floors.clone());
            let accepted = report.failure().is_none();
            if accepted {
                t.decided += 1;
            } else {
                t.failed += 1;
            }
            let joint = accepted.then(|| report.applied.config.clone());
            if joint != ran_joint {
                *t.differ_from_ran.get_or_insert(0) += 1;
            }
            t.add(
                report.applied.utility.filter(|_| accepted),
                accepted && !report.floors_missed(&problem).is_empty(),
                changed(&report.applied.config, &previous),
            );
            mine.push(joint);
        }
        // What the daemon's floors forced out at this tick, remembered as it
        // remembered it, for the ticks after.
        if let Some(c) = &corrected {
            let floors = tick_floors.as_ref().unwrap_or(&problem.sla_floors);
            c.forced_out(&r.state, &previous, &r.applied, floors)
                .with_context(|| format!("tick {}: the configuration left", r.tick))?;
        }
        decisions.push(TickDecisions {
            tick: r.tick,
            ran: ran_joint,
            policies: mine,
        });
        if !args.json && (n + 1) % 100 == 0 {
            eprintln!("replayed {} of {} ticks", n + 1, ticks.len());
        }
    }
    let results = Results {
        log: args.log.display().to_string(),
        scenario: scenario.name.clone(),
        bundle_sha256: run.bundle_sha256.clone(),
        field: run.field.label().to_owned(),
        seed: run.seed,
        scored_with: {
            let label = format!(
                "{}@{}",
                utility.info.name,
                mfsched_core::short_digest(&utility.info.sha256)
            );
            let params = utility.params_text();
            if params.is_empty() {
                label
            } else {
                format!("{label} ({params})")
            }
        },
        corrected: corrected.is_some(),
        floors: floors_label,
        ticks: ticks.len(),
        skipped_without_previous: skipped,
        ran,
        policies: totals,
        recorded_components: contents.components.clone(),
        replayed_components,
        decisions,
    };
    let report = markdown(&results, &served.name);
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        write_atomically(&dir.join("report.md"), report.as_bytes())?;
        write_atomically(
            &dir.join("results.json"),
            &serde_json::to_vec_pretty(&results)?,
        )?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{report}");
        if let Some(dir) = &args.out {
            println!("\nreport.md and results.json written to {}", dir.display());
        }
    }
    Ok(())
}

fn markdown(r: &Results, predictor: &str) -> String {
    let mut out = String::new();
    writeln!(out, "# Counterfactual replay of {}", r.log).ok();
    writeln!(out).ok();
    writeln!(
        out,
        "{} recorded ticks decided again on the recorded state and running configuration \
         ({} skipped: no recorded configuration). Scenario {}, {predictor}{}, bundle {}, seed {}, \
         scored with {}; floors enforced {}. Utilities are predicted, by the same surrogate for every row; \
         floors are missed on predictions against the enforced floors, and on what ran's measured \
         throughput against the declared ones.",
        r.ticks,
        r.skipped_without_previous,
        r.scenario,
        if r.corrected {
            ", corrected online as the daemon corrected it"
        } else {
            ""
        },
        r.bundle_sha256
            .as_deref()
            .map_or("(none)", mfsched_core::short_digest),
        r.seed,
        r.scored_with,
        r.floors
    )
    .ok();
    writeln!(out).ok();
    for (what, components) in [
        (
            "Components that answered in the log",
            &r.recorded_components,
        ),
        ("Components replayed", &r.replayed_components),
    ] {
        if components.is_empty() {
            continue;
        }
        let named: Vec<String> = components
            .iter()
            .map(|c| {
                let declares = c.identity.metadata.describe();
                let sha = &c.identity.sha256;
                format!(
                    "`{}@{}`{}",
                    printable(&c.policy, OUTPUT_NAME_BYTES),
                    mfsched_core::short_digest(sha),
                    if declares.is_empty() {
                        String::new()
                    } else {
                        // Printable and cut when it was read from the component.
                        format!(" ({declares})")
                    }
                )
            })
            .collect();
        writeln!(out, "{what}: {}.", named.join(", ")).ok();
        writeln!(out).ok();
    }
    writeln!(
        out,
        "| policy | decided | failed | mean predicted utility | vs what ran | ticks predicted under a floor | ticks measured under a floor | reconfigurations | ticks decided differently |"
    )
    .ok();
    writeln!(out, "|---|---|---|---|---|---|---|---|---|").ok();
    let base = r.ran.mean_utility;
    for t in std::iter::once(&r.ran).chain(&r.policies) {
        let delta = match (t.mean_utility, base, t.differ_from_ran) {
            (Some(u), Some(b), Some(_)) => format!("{:+.4}", u - b),
            _ => "—".to_owned(),
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {delta} | {} | {} | {} | {} |",
            t.label,
            t.decided,
            t.failed,
            t.mean_utility.map_or("—".to_owned(), |u| format!("{u:.4}")),
            t.floors_missed,
            t.measured_floor_misses
                .map_or("—".to_owned(), |n| n.to_string()),
            t.reconfigurations,
            t.differ_from_ran.map_or("—".to_owned(), |d| d.to_string()),
        )
        .ok();
    }
    out
}
