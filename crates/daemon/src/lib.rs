//! The production daemon (`mfsched run`): sampler, decision loop with shadow
//! (A/B) policies, actuators, append-only decision log, HTTP control API and
//! Prometheus metrics, graceful shutdown.
//!
//! The loop's ticks are the plugin host's (`mfsched_plugin_host::Decider`: every
//! policy through the one pipeline, the last-valid rule, the outcome and its
//! recorded form); the daemon keeps the sampler, the load source, the
//! actuators, the log's framing and the API. Its policies are a
//! `PolicySource`: [`PluginPolicies`] (components, hot-reloaded, and `hold`) in
//! production.
//!
//! # The façade
//!
//! Every module is private; what other crates may name is re-exported here, and
//! nothing else (the compiler enforces it, and `tests/all/layering.rs` checks that
//! the lab names no path below a product crate's root). Names that read well only
//! beside their module are re-exported under a qualified name (`api::serve` as
//! [`serve_api`], `declog::read` as [`read_decision_log`]).

mod actuator;
mod api;
mod config;
mod daemon;
mod dashboard;
mod declog;
mod forecast;
mod history;
mod load;
mod metrics;
mod policies;
mod replay;
mod reversals;
mod sampler;
mod streak;

/// Applying a decision to the servers.
pub use actuator::{Actuators, ModelUpdate};
/// The control API and the Prometheus metrics.
pub use api::{
    Guard as ApiGuard, ServeLimits as ApiLimits, router as api_router, serve as serve_api,
};
/// The configuration file (`mfsched run --config`).
pub use config::{
    ActuatorConfig, ApiConfig, DEFAULT_THRESHOLDS, DaemonConfig, DcgmSamplerConfig,
    EXAMPLE as EXAMPLE_CONFIG, HostSamplerConfig, ModelLoadConfig, SamplerConfig, SamplerKind,
    WebhookConfig,
};
/// Running the daemon: its loop, what it decides with and where its load comes from.
pub use daemon::{Daemon, Deciding, LoopSettings, WorkloadSource};
/// The append-only decision log and its replay.
pub use declog::{
    ComponentRecord, DecisionLog, FloorsRecord, LogContents, MeasuredRecord, ReconfigRecord,
    Recovery as LogRecovery, RunRecord, TickRecord, UtilityRecord, parse as parse_decision_log,
    read as read_decision_log,
};
/// The load the servers see, and the small HTTP client and metrics-page reader
/// the load source scrapes with (the lab's live profiling reads the same way).
pub use forecast::{DEFAULT_FORECAST, ForecastKind, Forecaster};
pub use load::{HttpClient, get as http_get, http_client, sample_sum, sample_sums};
pub use metrics::{Metrics, escape_label_value};
pub use policies::PluginPolicies;
pub use replay::{lines as replay_lines, summary as replay_summary};
pub use reversals::ReversalDamping;
/// Reading the card or the host: the field a tick decides under.
pub use sampler::{
    DcgmReading, DcgmSampler, FootprintSampler, HostSampler, Sample, Sampler,
    build as build_sampler, dcgm::read_page as read_dcgm_page, nvml_probe,
};

use anyhow::{Context, Result, bail};
use mfsched_core::{Corrected, Correction};
use mfsched_surrogate::BackendChoice;
use mfsched_surrogate::{ServeOptions, Served, serve};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;

use config::{PolicyConfig, WorkloadSourceKind};
use daemon::RunSummary;

/// Command-line overrides of the config file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub sampler: Option<SamplerKind>,
    pub listen: Option<SocketAddr>,
    /// Stop after this many ticks (bounded runs).
    pub max_ticks: Option<u64>,
}

/// The policies of a policy config: the plugin host's components (embedded and
/// those of `plugin_dir`, hot-reloaded) beside the built-in `hold`. Plugin files
/// that did not load are logged, one line each.
pub fn build_policies(
    config: &DaemonConfig,
    problem: &mfsched_core::Problem,
    predictor: Arc<dyn mfsched_core::Predictor>,
) -> Result<PluginPolicies> {
    let policy: &PolicyConfig = &config.policy;
    if let Some(dir) = &policy.plugin_dir
        && !dir.is_dir()
    {
        bail!("policy.plugin_dir {}: not a directory", dir.display());
    }
    let (policies, notes) = PluginPolicies::new(
        problem,
        predictor,
        policy.utility.as_deref().unwrap_or("utility"),
        &policy.utility_params(),
        policy.plugin_dir.as_deref(),
        config.tick.deadline(),
        config.seed,
    )?;
    for note in notes {
        tracing::warn!("{note}");
    }
    // What every tick is scored with, for the operator reading the log.
    let utility = policies.pipeline().utility().load();
    let params = utility.params_text();
    tracing::info!(
        sha256 = %utility.info.sha256,
        "scoring with utility '{}' ({}){}",
        utility.info.name,
        utility.info.title,
        if params.is_empty() {
            String::new()
        } else {
            format!(", parameters {params}")
        }
    );
    Ok(policies)
}

/// The tick's load: fixed, a synthetic trace, or read from the serving stack
/// (its pollers start here, so this must run inside tokio).
pub fn workload_source(
    config: &DaemonConfig,
    problem: &mfsched_core::Problem,
    metrics: Arc<Metrics>,
) -> Result<WorkloadSource> {
    let w = &config.workload;
    Ok(match (w.source(), &w.trace, &w.prometheus) {
        (WorkloadSourceKind::Trace, Some(name), _) => {
            let trace = mfsched_core::generate_trace(name, w.trace_ticks, config.seed)
                .with_context(|| format!("unknown workload trace '{name}'"))?;
            WorkloadSource::Trace(trace.levels)
        }
        (WorkloadSourceKind::Prometheus, _, Some(p)) => WorkloadSource::Measured(Box::new(
            load::LoadMonitor::start(p, w.forecast, config.tick.period_ms, problem, metrics)?,
        )),
        _ => WorkloadSource::Fixed(w.level),
    })
}

/// How the floors are enforced, for the start-up line: "conformal α 0.05
/// (llama3b 12.0 → 13.1, …)" or "on the point prediction".
fn floors_text(problem: &mfsched_core::Problem, floors: &mfsched_core::Floors) -> String {
    let Some(alpha) = floors.miss_rate else {
        return floors.label();
    };
    let raised: Vec<String> = problem
        .models
        .iter()
        .zip(floors.declared.iter().zip(floors.enforced()))
        .map(|(m, (d, e))| format!("{} {d:.1} → {e:.1}", m.name))
        .collect();
    format!(
        "conformal α {alpha} ({}), out of reach: {}",
        raised.join(", "),
        floors.out_of_reach.as_str()
    )
}

/// The joint configuration the daemon starts from: `policy.start`'s labels
/// where given, else each model's least-memory configuration (the scenario's).
fn start_configuration(
    problem: &mfsched_core::Problem,
    start: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<u32>> {
    let mut current = problem.current.clone();
    for (name, label) in start {
        let i = problem.model_index(name).with_context(|| {
            format!("policy.start names model '{name}', which the scenario does not have")
        })?;
        let model = &problem.models[i];
        let config = (0..model.grid_size())
            .find(|&c| model.knobs(c).to_string() == *label)
            .with_context(|| {
                format!(
                    "policy.start.{name}: '{label}' is not one of its configurations (e.g. '{}')",
                    model.knobs(0)
                )
            })?;
        current[i] = config as u32;
    }
    problem
        .check_feasible(&current)
        .map_err(|e| anyhow::anyhow!("policy.start: {e}"))?;
    Ok(current)
}

/// Runs the daemon until SIGINT/SIGTERM (or `max_ticks`). Must run inside tokio.
/// Progress and notices are logged (`tracing`), one line each.
/// `simulated_gpu` is the simulated card for `sampler.kind = "sim"` (the
/// composition root hands in the lab's simulator; `None` in a build without one).
pub async fn run(
    mut config: DaemonConfig,
    overrides: Overrides,
    simulated_gpu: Option<&sampler::SimulatedGpu>,
) -> Result<RunSummary> {
    if let Some(kind) = overrides.sampler {
        config.sampler.kind = kind;
    }
    if let Some(listen) = overrides.listen {
        config.api.listen = listen;
    }
    let scenario = mfsched_core::load_scenario(&config.scenario)?;
    // The sampler first: a missing NVML is the likeliest start-up failure.
    let (sampler, note) = sampler::build(
        &config.sampler,
        &scenario.problem,
        config.seed,
        simulated_gpu,
    )?;
    // The MeanField bundle (embedded for the scenario, or policy.bundle_dir): its
    // profiled floors and ranges fill the problem; inference on a hardware GPU
    // when there is one, else the CPU reference.
    let served = serve(
        &scenario,
        ServeOptions {
            models: config.policy.bundle_dir.as_deref(),
            backend: BackendChoice::Auto,
            field: config.policy.field,
        },
    )
    .context("policy.bundle_dir / policy.field")?;
    let sampling = if note.is_some() {
        config.sampler.fallback
    } else {
        config.sampler.kind
    };
    if served.needs_contention && sampling == SamplerKind::Footprint {
        bail!(
            "policy.bundle_dir: the bundle was trained on a field with the contention reading, and the footprint \
             sampler gives no contention reading to predict with; sample with nvml, host, dcgm or sim"
        );
    }
    tracing::info!(predictor = %served.name, "serving the predictor");
    let run_record = RunRecord {
        unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        scenario: scenario.name.clone(),
        scenario_toml: scenario.source.clone(),
        predictor: served.name.clone(),
        bundle_sha256: served.bundle_sha256.clone(),
        field: config.policy.field,
        seed: config.seed,
        utility: config
            .policy
            .utility
            .clone()
            .unwrap_or_else(|| "utility".to_owned()),
        active: config.policy.active.clone(),
        shadows: config.policy.shadows.clone(),
    };
    // Decisions hold each floor on a lower bound of the prediction; what
    // the servers measure is held to the declared floor.
    let floors = served
        .floors(config.floors.margins_at())
        .with_out_of_reach(config.floors.out_of_reach);
    if let (Some(alpha), Some(uncalibrated)) =
        (floors.miss_rate, floors.uncalibrated_names(&served.problem))
    {
        tracing::warn!(
            "floors.miss_rate = {alpha}: the bundle keeps no held-out ratios for {uncalibrated}, whose floors stay on the point prediction; retrain the bundle (mfsched train) for margins"
        );
    }
    let Served {
        predictor,
        mut problem,
        relative_error,
        ..
    } = served;
    problem.sla_floors = floors.enforced().to_vec();
    problem.current = start_configuration(&problem, &config.policy.start)?;
    // Decisions use predictions corrected from measured throughput (they stay
    // the surrogate's until a model's throughput is measured).
    let correction = config.correction.enabled.then(|| {
        let correction = Correction::new(&problem, config.correction.clone(), &relative_error);
        Arc::new(Corrected::new(predictor.clone(), &problem, correction))
    });
    let predictor = match &correction {
        Some(c) => Arc::clone(c) as Arc<dyn mfsched_core::Predictor>,
        None => predictor,
    };
    let policies = build_policies(&config, &problem, predictor)?;
    if let Some(note) = note {
        tracing::warn!("{note}");
    }
    let deciding = Deciding::plugins(policies);
    // Refused before anything is written: a configuration that cannot decide.
    can_decide(&deciding, &problem, &config).await?;
    tracing::info!(
        "deciding every {} ms (deadline {} ms): active {}, shadows [{}], sampler {}, plugin_dir {}, correction {}, floors {}; switches and shadows changed through the API last until the daemon stops",
        config.tick.period_ms,
        config.tick.deadline_ms,
        config.policy.active,
        config.policy.shadows.join(", "),
        format!("{:?}", config.sampler.kind).to_lowercase(),
        config
            .policy
            .plugin_dir
            .as_deref()
            .map_or_else(|| "none".to_owned(), mfsched_core::printable_path),
        if config.correction.enabled {
            "on"
        } else {
            "off"
        },
        floors_text(&problem, &floors)
    );
    // Refused before anything runs: an unguarded API off loopback.
    let guard = api::Guard::from_config(&config.api)?;
    let metrics = Arc::new(Metrics::default());
    let actuators = Actuators::new(&config.actuator, &problem, Arc::clone(&metrics))?;
    let workload = workload_source(&config, &problem, Arc::clone(&metrics))?;
    let listener = std::net::TcpListener::bind(config.api.listen)
        .with_context(|| format!("cannot listen on {}", config.api.listen))?;
    // The log last: a start refused above writes nothing to it.
    let (mut log, recovery) = DecisionLog::open(&config.log.path)?;
    for note in recovery.notes() {
        tracing::warn!("decision log {}: {note}", config.log.path.display());
    }
    log.append_run(&run_record)?;
    log.append_floors(&FloorsRecord {
        miss_rate: floors.miss_rate,
        declared: floors.declared.clone(),
        enforced: floors.enforced().to_vec(),
        out_of_reach: floors.out_of_reach,
    })?;
    metrics.floors(&problem, &floors);
    // What the driven servers run is brought up once the start is sure.
    actuators.bring_up(&problem);
    let settings = LoopSettings {
        period: config.tick.period(),
        deadline: config.tick.deadline(),
        active: config.policy.active.clone(),
        shadows: config.policy.shadows.clone(),
        unknown_utilization: config.sampler.unknown_utilization,
        contention_window: std::time::Duration::from_millis(config.sampler.contention_window_ms),
        workload,
        downtime_cost_horizon: config.actuator.downtime_cost_horizon(config.tick.period_ms),
        reversal_damping: config.actuator.reversal_damping(),
        correction,
        floors,
    };
    let daemon = Daemon::new(
        settings,
        problem,
        sampler,
        deciding,
        actuators,
        log,
        Arc::clone(&metrics),
    )?;

    listener.set_nonblocking(true).context("the API listener")?;
    let bound = listener.local_addr().context("listener address")?;
    tracing::info!(
        "listening on http://{bound}{}",
        if guard.has_token() {
            " (changes need the API token)"
        } else {
            " (read-only: no API token configured)"
        }
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        stop_tx.send_replace(true);
    });
    // The API stops once the loop has stopped (signal, bound reached or error),
    // so it answers until the last tick is recorded. It runs on a runtime of
    // its own thread: no number of clients can take the tick loop's workers.
    let (done_tx, mut done_rx) = watch::channel(false);
    let app = api::router(daemon.shared(), guard);
    let limits = api::ServeLimits::from_config(&config.api);
    let api_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("mfsched-api")
        .enable_all()
        .build()
        .context("cannot start the API runtime")?;
    let server = std::thread::Builder::new()
        .name("mfsched-api".into())
        .spawn(move || {
            api_runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                api::serve(listener, app, limits, metrics, async move {
                    let _ = done_rx.wait_for(|done| *done).await;
                })
                .await;
                anyhow::Ok(())
            })
        })
        .context("cannot start the API thread")?;
    let summary = daemon.run(stop_rx, overrides.max_ticks).await;
    done_tx.send_replace(true);
    server
        .join()
        .map_err(|_| anyhow::anyhow!("the API thread panicked"))?
        .context("the API server")?;
    summary
}

/// Refuses a configuration whose active policy cannot decide: one trial
/// decision at start-up (medium load, the running configuration's memory),
/// through the ticks' own runner with the configured utility, off the async runtime
/// as every decision is. A policy that refuses, traps or misuses the host (exact
/// with a utility that is not additive) stops the daemon here, naming the keys;
/// a rejected decision (a floor missed at this state), a deadline or a host
/// failure may be the state's or the moment's, so the daemon starts and the
/// ticks tell.
async fn can_decide(
    deciding: &Deciding,
    problem: &mfsched_core::Problem,
    config: &DaemonConfig,
) -> Result<()> {
    use mfsched_plugin_host::PluginFailure;
    let active = config.policy.active.clone();
    daemon::check_loaded(deciding.policies.as_ref(), &active, &config.policy.shadows)?;
    let (deciding, problem, policy) = (deciding.clone(), problem.clone(), active.clone());
    let deadline = config.tick.deadline();
    let out_of_reach = config.floors.out_of_reach;
    let Err(failure) = tokio::task::spawn_blocking(move || {
        deciding.trial(&policy, &problem, out_of_reach, deadline)
    })
    .await
    .context("the start-up decision")?
    else {
        return Ok(());
    };
    // A utility's refusal may be its parameters' doing: name them too.
    let params = match (&failure, config.policy.utility_params.is_empty()) {
        (PluginFailure::Utility(_), false) => format!(
            " (policy.utility_params: {})",
            config
                .policy
                .utility_params()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        _ => String::new(),
    };
    // A utility's failure names the utility itself; anything else is the policy's.
    let whose = if matches!(failure, PluginFailure::Utility(_)) {
        ""
    } else {
        "the policy "
    };
    bail!(
        "policy.active = '{active}' cannot decide with policy.utility = '{}'{params}: {whose}{}",
        config.policy.utility.as_deref().unwrap_or("utility"),
        mfsched_core::printable(&failure.to_string(), 300)
    )
}

/// Resolves on SIGINT or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
