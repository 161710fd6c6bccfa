//! The production daemon (`mfsched run`): sampler, decision loop with shadow
//! (A/B) policies, actuators, append-only decision log, HTTP control API and
//! Prometheus metrics, graceful shutdown.
//!
//! The loop decides through the [`decider::Decider`] trait: the plugin host
//! implements it with policy components; [`decider::BuiltinDecider`] offers the
//! `hold` policy without any plugin.

pub mod actuator;
pub mod api;
pub mod config;
pub mod daemon;
pub mod decider;
pub mod declog;
pub mod metrics;
pub mod plugin_decider;
pub mod replay;
pub mod sampler;

use anyhow::{Context, Result, bail};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;

use config::{DaemonConfig, PolicyConfig};
use daemon::{Daemon, LoopSettings, RunSummary, WorkloadSource};
use decider::Decider;
use metrics::Metrics;

/// Command-line overrides of the config file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub sampler: Option<config::SamplerKind>,
    pub listen: Option<SocketAddr>,
    /// Stop after this many ticks (bounded runs).
    pub max_ticks: Option<u64>,
}

/// The decider for a policy config: the plugin host's policies (embedded and
/// those of `plugin_dir`, hot-reloaded) beside the built-in `hold`. Notes (plugin
/// files that did not load) go to stderr.
pub fn build_decider(
    config: &DaemonConfig,
    problem: &crate::domain::Problem,
    predictor: Arc<dyn crate::predict::Predictor>,
) -> Result<Arc<dyn Decider>> {
    let policy: &PolicyConfig = &config.policy;
    if let Some(dir) = &policy.plugin_dir
        && !dir.is_dir()
    {
        bail!("policy.plugin_dir {}: not a directory", dir.display());
    }
    let (decider, notes) = plugin_decider::PluginDecider::new(
        problem,
        predictor,
        policy.utility.as_deref().unwrap_or("utility"),
        policy.plugin_dir.as_deref(),
        config.tick.deadline(),
        config.seed,
    )?;
    for note in notes {
        eprintln!("notice: {note}");
    }
    Ok(Arc::new(decider))
}

pub fn workload_source(config: &DaemonConfig) -> Result<WorkloadSource> {
    Ok(match &config.workload.trace {
        None => WorkloadSource::Fixed(config.workload.level),
        Some(name) => {
            let trace =
                crate::eval::traces::generate(name, config.workload.trace_ticks, config.seed)
                    .with_context(|| format!("unknown workload trace '{name}'"))?;
            WorkloadSource::Trace(trace.levels)
        }
    })
}

/// Runs the daemon until SIGINT/SIGTERM (or `max_ticks`). Must run inside tokio.
/// Progress and notices go to stderr, one line each.
pub async fn run(mut config: DaemonConfig, overrides: Overrides) -> Result<RunSummary> {
    if let Some(kind) = overrides.sampler {
        config.sampler.kind = kind;
    }
    if let Some(listen) = overrides.listen {
        config.api.listen = listen;
    }
    let scenario = crate::scenario::load(&config.scenario)?;
    let mut problem = scenario.problem.clone();
    // The sampler first: a missing NVML is the likeliest start-up failure.
    let (sampler, note) = sampler::build(&config.sampler, &problem, config.seed)?;
    // The MeanField bundle (embedded for the scenario, or policy.bundle_dir):
    // its profiled floors and ranges fill the problem; inference on a hardware
    // GPU when there is one, else the CPU reference.
    let bundle = crate::surrogate::bundled::load(&scenario, config.policy.bundle_dir.as_deref())?;
    bundle.apply(&mut problem, &scenario.explicit_floors);
    let meanfield =
        bundle.meanfield_on(&problem, crate::surrogate::backend::BackendChoice::Auto)?;
    let field = config.policy.field;
    eprintln!(
        "predictor: MeanField surrogate ({}), {}",
        meanfield.backend_reason(),
        field.label()
    );
    let predictor: Arc<dyn crate::predict::Predictor> = match field {
        crate::predict::Field::Observed => Arc::new(meanfield),
        crate::predict::Field::CandidateAware => {
            let profile = crate::surrogate::bundled::training_profile(
                &scenario,
                config.policy.bundle_dir.as_deref(),
                &bundle,
            )
            .context("policy.field = \"candidate-aware\"")?;
            Arc::new(crate::surrogate::field::CandidateAware::new(
                Arc::new(meanfield),
                &problem,
                &profile,
            )?)
        }
    };
    let decider = build_decider(&config, &problem, predictor)?;
    if let Some(note) = note {
        eprintln!("notice: {note}");
    }
    let (log, torn) = declog::DecisionLog::open(&config.log.path)?;
    if let Some(torn) = torn {
        eprintln!(
            "notice: decision log {}: {torn}; cut off, appending after the last intact record",
            config.log.path.display()
        );
    }
    let metrics = Arc::new(Metrics::default());
    let actuators = actuator::Actuators::new(&config.actuator, &problem, Arc::clone(&metrics))?;
    let settings = LoopSettings {
        period: config.tick.period(),
        deadline: config.tick.deadline(),
        active: config.policy.active.clone(),
        shadows: config.policy.shadows.clone(),
        unknown_utilization: config.sampler.unknown_utilization,
        workload: workload_source(&config)?,
    };
    let daemon = Daemon::new(settings, problem, sampler, decider, actuators, log, metrics)?;

    let listener = tokio::net::TcpListener::bind(config.api.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.api.listen))?;
    let bound = listener.local_addr().context("listener address")?;
    eprintln!("listening on http://{bound}");

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        stop_tx.send_replace(true);
    });
    // The API stops once the loop has stopped (signal, bound reached or error),
    // so it answers until the last tick is recorded.
    let (done_tx, mut done_rx) = watch::channel(false);
    let app = api::router(daemon.shared());
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = done_rx.wait_for(|done| *done).await;
            })
            .await
    });
    let summary = daemon.run(stop_rx, overrides.max_ticks).await;
    done_tx.send_replace(true);
    server
        .await
        .context("the API server task")?
        .context("the API server")?;
    summary
}

/// Resolves on SIGINT or SIGTERM.
async fn wait_for_signal() {
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
