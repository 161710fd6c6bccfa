//! The decision loop: each tick samples, decides with the active policy (and the
//! shadow policies, on the same state, in parallel) within the deadline,
//! validates, applies what changed, records, and publishes for the API.

use anyhow::{Context, Result};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::actuator::Actuators;
use super::declog::{
    DecisionLog, LoadRecord, MeasuredRecord, ReconfigRecord, TickRecord, UtilityRecord,
};
use super::history::{History, Measured};
use super::load::{LoadMonitor, LoadReading, ThroughputReading};
use super::metrics::{Metrics, Role};
use super::policies::PluginPolicies;
use super::reversals::{ReversalDamping, Reversals};
use super::sampler::{Sample, Sampler};
use super::streak::{Change, Streaks};
use mfsched_core::{
    Corrected, DriftEdge, ForcedOut, GpuState, PredictError, Problem, ReconfigCosts, WorkloadLevel,
};
use mfsched_plugin_host::ComponentIdentity;
use mfsched_plugin_host::wit;
use mfsched_plugin_host::{
    Decider, Pipeline, PolicyRecord, PolicySource, ReloadCounts, ReloadEvent,
};

/// Where each tick's workload level comes from.
#[derive(Debug)]
pub enum WorkloadSource {
    Fixed(WorkloadLevel),
    /// Replayed cyclically, one level per tick.
    Trace(Vec<WorkloadLevel>),
    /// The load the model servers report (Prometheus or their `/metrics`).
    Measured(Box<LoadMonitor>),
}

impl WorkloadSource {
    fn read(&mut self, tick: u64) -> LoadReading {
        let level = match self {
            WorkloadSource::Fixed(l) => *l,
            WorkloadSource::Trace(levels) if !levels.is_empty() => {
                levels[(tick % levels.len() as u64) as usize]
            }
            WorkloadSource::Trace(_) => WorkloadLevel::Medium,
            WorkloadSource::Measured(monitor) => return monitor.read(),
        };
        LoadReading {
            level,
            observed: None,
            forecast: None,
            fallback: None,
            measured: Vec::new(),
        }
    }
}

#[derive(Debug)]
pub struct LoopSettings {
    pub period: Duration,
    pub deadline: Duration,
    pub active: String,
    pub shadows: Vec<String>,
    /// Utilisation assumed when the sampler cannot give one.
    pub unknown_utilization: f64,
    /// The contention reading's averaging time (`sampler.contention_window_ms`).
    pub contention_window: Duration,
    pub workload: WorkloadSource,
    /// Measured downtime, not the configured constants, as the
    /// reconfiguration cost, paid off over this horizon
    /// (`actuator.downtime_as_cost`, `actuator.downtime_horizon_ms`).
    pub downtime_cost_horizon: Option<Duration>,
    /// Reconfiguration costs raised for a model that keeps going back to the
    /// configuration it left (`actuator.reversal_window_ticks`).
    pub reversal_damping: Option<ReversalDamping>,
    /// The predictor the policies are served, when it is corrected online:
    /// every tick, before deciding, it learns from the throughput measured
    /// for the running configuration (`[correction]`).
    pub correction: Option<Arc<Corrected>>,
    /// The floors as declared (what measured throughput is held to) and as
    /// the problem's `sla_floors` enforce them (`[floors]`).
    pub floors: mfsched_core::Floors,
}

/// Measured downtime per model, split by what changed: the utility's
/// reconfiguration cost when `actuator.downtime_as_cost` is set.
#[derive(Debug, Default)]
struct DowntimeBook {
    /// Per model: (sum ms, count) of variant switches, then of knob changes.
    per_model: Vec<[(f64, u64); 2]>,
}

impl DowntimeBook {
    fn record(&mut self, models: usize, r: &ReconfigRecord) {
        if r.error.is_some() {
            return;
        }
        self.per_model.resize(models, [(0.0, 0); 2]);
        if let Some(m) = self.per_model.get_mut(r.model as usize) {
            let slot = &mut m[usize::from(!r.variant_switch)];
            slot.0 += r.downtime_ms;
            slot.1 += 1;
        }
    }

    /// Per model, the costs: each kind's mean measured downtime as a
    /// fraction of the horizon a new configuration is expected to serve for
    /// (by default one tick period: the share of one tick's utility the
    /// model loses while it does not serve; the utility's per-model reward is
    /// at most 1), capped at 1. The utility charges a change once, in the
    /// tick that makes it, against that tick's gain: paid off over a horizon
    /// of H, a restart is made where its gain per tick, kept for H, outweighs
    /// the reward its downtime loses. A kind the model was not measured in
    /// takes its other kind's (both actuators reload or restart the server
    /// for either: a llama-server knob change is a restart too), and a model
    /// never measured its configured costs. Per model, not averaged over
    /// them: a llama-server restart of 3.6 s and an MLServer reload of 80 ms
    /// are different prices.
    fn costs(&self, horizon: Duration, configured: &[ReconfigCosts]) -> Vec<ReconfigCosts> {
        let horizon_ms = horizon.as_secs_f64() * 1e3;
        configured
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mean = |kind: usize| {
                    let m = self.per_model.get(i)?[kind];
                    (m.1 > 0 && horizon_ms > 0.0).then(|| (m.0 / m.1 as f64 / horizon_ms).min(1.0))
                };
                let cost = |kind: usize, fallback: f64| {
                    mean(kind).or_else(|| mean(1 - kind)).unwrap_or(fallback)
                };
                ReconfigCosts {
                    variant_switch: cost(0, c.variant_switch),
                    knob_change: cost(1, c.knob_change),
                }
            })
            .collect()
    }
}

/// Trial decisions a policy may fail before it is refused as one that
/// cannot decide (at start-up, or as the API's new active policy).
const TRIALS: usize = 3;

/// What decides: the policies, the one pipeline they decide through, the
/// parameters every policy gets, and (for plugin components) where they were
/// loaded, which says what each declares and how often it was reloaded.
#[derive(Clone)]
pub struct Deciding {
    pub pipeline: Arc<Pipeline>,
    pub policies: Arc<dyn PolicySource>,
    pub params: Vec<wit::Param>,
    plugins: Option<Arc<PluginPolicies>>,
}

impl std::fmt::Debug for Deciding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deciding")
            .field("pipeline", &self.pipeline)
            .field("policies", &self.policies.policies())
            .finish_non_exhaustive()
    }
}

impl Deciding {
    /// Policies of any source (native ones, a test's stand-ins): no
    /// components to describe, nothing reloaded.
    pub fn new(
        pipeline: Arc<Pipeline>,
        policies: Arc<dyn PolicySource>,
        params: Vec<wit::Param>,
    ) -> Self {
        Self {
            pipeline,
            policies,
            params,
            plugins: None,
        }
    }

    /// The plugin host's components (and `hold`), hot-reloaded.
    pub fn plugins(plugins: PluginPolicies) -> Self {
        let plugins = Arc::new(plugins);
        Self {
            pipeline: plugins.pipeline(),
            params: plugins.params().to_vec(),
            policies: Arc::clone(&plugins) as Arc<dyn PolicySource>,
            plugins: Some(plugins),
        }
    }

    /// The component behind `policy` now (`None` for a native one).
    pub fn identity(&self, policy: &str) -> Option<ComponentIdentity> {
        self.plugins.as_ref()?.registry().policy_identity(policy)
    }

    pub fn reloads(&self) -> ReloadCounts {
        self.plugins
            .as_ref()
            .map_or_else(ReloadCounts::default, |p| p.reloads())
    }

    pub fn reload_events(&self) -> Vec<ReloadEvent> {
        self.plugins
            .as_ref()
            .map(|p| p.reload_events())
            .unwrap_or_default()
    }

    /// Trial decisions of `policy` alone at the default state (blocking: off
    /// the async runtime): the failure that says it cannot decide at all (it
    /// refuses, traps, misuses the host, its utility fails, …) on each of
    /// [`TRIALS`] tries, or `Ok` once it decides or misses only for the
    /// moment (a deadline, a rejected answer, a prediction the host could not
    /// serve). A policy that fails now and then passes; one that can never
    /// decide (exact beside a utility that is not additive) does not.
    pub fn trial(
        &self,
        policy: &str,
        problem: &Problem,
        out_of_reach: mfsched_core::OutOfReach,
        deadline: Duration,
    ) -> Result<(), mfsched_plugin_host::PluginFailure> {
        use mfsched_plugin_host::{DecisionFailure, PluginFailure};
        let mut decider = self.decider(policy, 0).floors_out_of_reach(out_of_reach);
        let state = mfsched_plugin_host::default_state(problem);
        let mut last = None;
        for _ in 0..TRIALS {
            match decider
                .tick(problem, &state, policy, &[], deadline)
                .active
                .result
            {
                Err(DecisionFailure::Plugin(
                    f @ (PluginFailure::Refused(_)
                    | PluginFailure::Trap(_)
                    | PluginFailure::Misuse(_)
                    | PluginFailure::Utility(_)
                    | PluginFailure::Instantiate(_)
                    | PluginFailure::Memory { .. }
                    | PluginFailure::Unknown(_)),
                )) => last = Some(f),
                Err(other) => {
                    tracing::warn!(
                        "policy '{policy}': its trial decision was not used ({}); taken anyway",
                        mfsched_core::printable(&other.to_string(), 300)
                    );
                    return Ok(());
                }
                Ok(_) => return Ok(()),
            }
        }
        match last {
            // No configuration of some model is predicted to meet its floor at
            // the trial state: a refusal is then the state's answer, not the
            // policy's fault; the ticks, at the states they measure, tell.
            Some(PluginFailure::Refused(why))
                if let Some(model) = self.floor_out_of_reach(problem, &state) =>
            {
                tracing::warn!(
                    "policy '{policy}': its trial decision was refused ({}), and no configuration of '{model}' is predicted to meet its floor at the trial state; starting: the ticks decide at the states they measure",
                    mfsched_core::printable(&why, 300)
                );
                Ok(())
            }
            last => last.map_or(Ok(()), Err),
        }
    }

    /// A model no configuration of which is predicted to meet its (enforced)
    /// floor at `state`, if there is one.
    fn floor_out_of_reach<'p>(&self, problem: &'p Problem, state: &GpuState) -> Option<&'p str> {
        let table = self
            .pipeline
            .predictor()
            .predict_table(state, &problem.current)
            .ok()?;
        let offsets = mfsched_core::table_offsets(problem);
        problem
            .models
            .iter()
            .zip(offsets.windows(2))
            .zip(&problem.sla_floors)
            .find(|((_, range), floor)| {
                table[range[0]..range[1]]
                    .iter()
                    .all(|&t| f64::from(t) < **floor)
            })
            .map(|((m, _), _)| m.name.as_str())
    }

    /// The decider of the daemon's ticks: every policy on a thread of its
    /// own (a hung native policy costs a thread, never the tick), numbered
    /// from `first_tick`, its checkpoint the one hot reload checks on.
    pub(crate) fn decider(&self, active: &str, first_tick: u64) -> Decider {
        let decider = Decider::with_source(
            Pipeline::clone(&self.pipeline),
            Arc::clone(&self.policies),
            active,
            self.params.clone(),
        )
        .isolated()
        .numbered_from(first_tick);
        match &self.plugins {
            Some(p) => decider.sharing_checkpoint(p.checkpoint()),
            None => decider,
        }
    }
}

/// What the loop shares with the HTTP API.
pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub deciding: Deciding,
    /// The problem decisions are checked on (its `sla_floors` the enforced ones).
    pub problem: Problem,
    /// The floors as declared and enforced.
    pub floors: mfsched_core::Floors,
    pub period: Duration,
    /// A tick's deadline (a trial decision before a switch gets the same).
    pub deadline: Duration,
    /// What the dashboard charts (bounded).
    pub history: History,
    /// The active policy and the shadows, under one lock so a switch and a
    /// shadow change never both take the same policy.
    roles: RwLock<Roles>,
    last: RwLock<Option<Arc<TickRecord>>>,
    last_at: RwLock<Instant>,
    /// How long the first tick may wait ([`Daemon::start_up`]): the servers'
    /// bring-up, the load's first readings and one period.
    pub first_tick_wait: Duration,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("roles", &*read(&self.roles))
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub fn active_policy(&self) -> String {
        read(&self.roles).active.clone()
    }

    pub fn shadows(&self) -> Vec<String> {
        read(&self.roles).shadows.clone()
    }

    pub fn last_record(&self) -> Option<Arc<TickRecord>> {
        read(&self.last).clone()
    }

    /// Time since the last tick finished (or since start, before the first).
    pub fn since_last_tick(&self) -> Duration {
        read(&self.last_at).elapsed()
    }

    /// Makes `policy` the active one from the next tick on. A shadow is
    /// promoted: it leaves the shadows in the same step (the end of an online
    /// A/B), and the policy it replaces stops being asked.
    pub fn set_active(&self, policy: &str) -> Result<(), String> {
        self.loaded(policy)?;
        let (from, promoted) = {
            let mut roles = write(&self.roles);
            let shadow = roles.shadows.iter().position(|s| s == policy);
            if let Some(at) = shadow {
                roles.shadows.remove(at);
            }
            (
                std::mem::replace(&mut roles.active, policy.to_owned()),
                shadow.is_some(),
            )
        };
        self.metrics.policy_swapped();
        if from != policy {
            if promoted {
                tracing::info!(
                    "active policy: {from} → {policy}, promoted from the shadows (through the API)"
                );
                self.history.shadow_changed(unix_ms_now(), policy, false);
            } else {
                tracing::info!("active policy: {from} → {policy} (through the API)");
            }
            self.history.switched(unix_ms_now(), &from, policy);
        }
        Ok(())
    }

    /// Adds `policy` as a shadow from the next tick on: decided on the same
    /// state beside the active one, recorded, never applied. The shadows now.
    pub fn add_shadow(&self, policy: &str) -> Result<Vec<String>, String> {
        self.loaded(policy)?;
        let shadows = {
            let mut roles = write(&self.roles);
            if roles.active == policy {
                return Err(format!("policy '{policy}' is the active one"));
            }
            if roles.shadows.iter().any(|s| s == policy) {
                return Ok(roles.shadows.clone());
            }
            if roles.shadows.len() >= MAX_SHADOWS {
                return Err(format!(
                    "already {MAX_SHADOWS} shadows, the most a tick decides beside the active policy: remove one first"
                ));
            }
            roles.shadows.push(policy.to_owned());
            roles.shadows.clone()
        };
        tracing::info!("shadow policy added: {policy} (through the API)");
        self.history.shadow_changed(unix_ms_now(), policy, true);
        Ok(shadows)
    }

    /// Stops asking the shadow `policy` from the next tick on. The shadows now.
    pub fn remove_shadow(&self, policy: &str) -> Result<Vec<String>, String> {
        let shadows = {
            let mut roles = write(&self.roles);
            let Some(at) = roles.shadows.iter().position(|s| s == policy) else {
                let name = mfsched_core::printable(policy, 100);
                return Err(format!(
                    "policy '{name}' is not a shadow: the shadows are {}",
                    list_or_none(&roles.shadows)
                ));
            };
            roles.shadows.remove(at);
            roles.shadows.clone()
        };
        tracing::info!("shadow policy removed: {policy} (through the API)");
        self.history.shadow_changed(unix_ms_now(), policy, false);
        Ok(shadows)
    }

    /// `Ok` when a policy of that name is loaded; else the error naming the
    /// loaded ones (the name escaped and cut: it comes from a request).
    pub(crate) fn loaded(&self, policy: &str) -> Result<(), String> {
        let available = self.deciding.policies.policies();
        if available.iter().any(|p| p == policy) {
            return Ok(());
        }
        Err(format!(
            "no policy '{}': available are {}",
            mfsched_core::printable(policy, 100),
            available.join(", ")
        ))
    }
}

/// The most shadows the API lets a tick decide beside the active policy (each
/// is one more blocking thread per tick).
pub const MAX_SHADOWS: usize = 8;

/// Who decides: the active policy, applied, and the shadows, only recorded.
#[derive(Debug, Clone)]
struct Roles {
    active: String,
    shadows: Vec<String>,
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The lock only guards plain values replaced whole, so a poisoned one is still sound.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

/// The most of a failure's reason one log line carries (a plugin writes it).
const REASON_BYTES: usize = 300;

/// Every configured policy is loaded, or the error naming the key and the
/// policies that are.
pub fn check_loaded(policies: &dyn PolicySource, active: &str, shadows: &[String]) -> Result<()> {
    let available = policies.policies();
    let keys = std::iter::once(("policy.active", active))
        .chain(shadows.iter().map(|s| ("policy.shadows", s.as_str())));
    for (key, p) in keys {
        if !available.iter().any(|a| a == p) {
            anyhow::bail!(
                "{key}: policy '{p}' is not loaded: available are {}",
                available.join(", ")
            );
        }
    }
    Ok(())
}

/// How a bounded or interrupted run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    pub ticks: u64,
    pub missed_ticks: u64,
    pub log_records: u64,
}

#[derive(Debug)]
pub struct Daemon {
    settings: LoopSettings,
    problem: Problem,
    sampler: Box<dyn Sampler>,
    actuators: Actuators,
    log: DecisionLog,
    shared: Arc<Shared>,
    next_tick: u64,
    /// Runs every tick's decision; on a blocking thread while it does.
    decider: Option<Decider>,
    /// The last append failed (the next failure is not logged again).
    log_failing: bool,
    /// The last correction step failed (logged once per run of failures).
    correction_failing: bool,
    /// The last tick's floor memory could not predict the configuration a
    /// model left (logged once per run of failures, apart from the
    /// correction's own: one succeeding must not re-arm the other's line).
    floor_memory_failing: bool,
    /// Where the correction stood on the configuration that ran, for the history.
    corrections: Vec<mfsched_core::ModelCorrection>,
    /// Each policy's run of failed ticks, for the log's one line per edge.
    streaks: Streaks,
    downtime: DowntimeBook,
    /// The scenario's reconfiguration costs (before any measured ones).
    configured_costs: Vec<ReconfigCosts>,
    /// The costs before reversal damping: the configured ones, or the
    /// measured downtimes' once there are some.
    undamped_costs: Vec<ReconfigCosts>,
    /// Each model's reversals, which raise its costs (`None`: not damped).
    reversals: Option<Reversals>,
    /// The contention reading the ticks decide with, averaged over time.
    contention: TimeAverage,
    /// Per model: since its floor was said to be out of reach, the ticks it
    /// has been within reach in a row (`None`: not said).
    out_of_reach: Vec<Option<u32>>,
    /// The reconfigurations in flight, which make a tick's reading transient.
    settling: Settling,
    /// The device part of the last state read while none was (what a
    /// transient tick decides on).
    steady: Option<GpuState>,
    /// The bring-ups that finished before the first tick, for its record.
    brought_up: Vec<ReconfigRecord>,
}

/// The reconfigurations the v2-repository and process actuators are carrying
/// out. A state read while a server reloads or restarts, or over a period in
/// which one did, is the reconfiguration's, neither the old configuration's
/// nor the new one's: a restarted llama-server holds no memory and takes no
/// CPU until it is up. Decided on, such a reading flips the decision back and
/// forth with every restart (on the rig at N = 3, `gemma` every 5–7 ticks);
/// `profile --live` never measures one either (it reads after its settle time).
/// The same holds for a model's measured throughput: over a period in which
/// it reloaded or restarted, it is the reconfiguration's downtime, not what
/// the configuration gives, and the online correction learning from it lowers
/// whichever configuration was just started (on the rig, `conv` then flipped
/// between its variants every tick).
#[derive(Debug, Default)]
struct Settling {
    /// Per model: the tick whose reconfiguration is not seen finished yet,
    /// and when it was sent.
    pending: std::collections::BTreeMap<usize, (u64, Instant)>,
    /// Per model: when its last reconfiguration was seen finished.
    finished: std::collections::BTreeMap<usize, Instant>,
    /// Per model: when the last throughput reading learnt from was read (a
    /// reading stands in for several ticks while it is recent: one
    /// observation, learnt once).
    learnt: std::collections::BTreeMap<usize, Instant>,
}

impl Settling {
    fn sent(&mut self, model: usize, tick: u64, at: Instant) {
        self.pending.insert(model, (tick, at));
    }

    /// `done` finished by `at` (a record of an older tick than the model's
    /// newest request leaves that one pending).
    fn finished(&mut self, done: &[ReconfigRecord], at: Instant) {
        for r in done {
            let model = r.model as usize;
            if self.pending.get(&model).is_some_and(|&(t, _)| t <= r.tick) {
                self.pending.remove(&model);
            }
            self.finished.insert(model, at);
        }
    }

    /// The models being reconfigured at `now`, or whose reconfiguration
    /// finished within the last `period` (a reading covers the period before
    /// it). A request pending for longer than `longest` can take (superseded
    /// and never reported, or lost at a failure) stops counting.
    fn unsettled(&mut self, now: Instant, period: Duration, longest: Duration) -> Vec<usize> {
        self.pending
            .retain(|_, &mut (_, sent)| now.saturating_duration_since(sent) <= longest + period);
        let recent = self
            .finished
            .iter()
            .filter(|&(_, &at)| now.saturating_duration_since(at) < period)
            .map(|(&m, _)| m);
        let mut models: Vec<usize> = self.pending.keys().copied().chain(recent).collect();
        models.sort_unstable();
        models.dedup();
        models
    }

    /// Per model, the throughput the online correction may learn from: a
    /// reading over a whole rate window, not learnt before, whose span began
    /// after the model's last reconfiguration finished, with none in flight.
    /// A reading's span can reach far behind the tick (llama-server's is a
    /// 10 s window on the rig, and a reading stands in while it is recent):
    /// one that covers a restart is the restart's downtime, and learnt as the
    /// new configuration's throughput it pushed that configuration under its
    /// floor, the next restart likewise (on the rig at N = 3, `gemma` every
    /// 5 ticks for 40 ticks, its correction falling to ×0.3).
    fn learnable(&mut self, measured: &[Option<ThroughputReading>]) -> Vec<Option<f64>> {
        measured
            .iter()
            .enumerate()
            .map(|(m, reading)| {
                let r = reading.as_ref()?;
                let steady = !self.pending.contains_key(&m)
                    && self.finished.get(&m).is_none_or(|&done| r.since >= done);
                let fresh = self.learnt.get(&m).is_none_or(|&at| r.at > at);
                (r.whole && steady && fresh).then(|| {
                    self.learnt.insert(m, r.at);
                    r.rate
                })
            })
            .collect()
    }
}

/// The state a tick decides on, and whether it is held: the reading
/// `measured` when `settled` (and it becomes the steady one), else the last
/// steady reading at the tick's load. With none yet, the first reading stands
/// as the steady one: else a policy that changes something every tick,
/// deciding on readings over its own reconfigurations, never gets one and
/// keeps deciding on them (the rig's first runs with a start-up wait, whose
/// first tick saw the bring-ups finish: 96–113 model changes a run against
/// 25–28).
fn steady_state(
    steady: &mut Option<GpuState>,
    measured: GpuState,
    settled: bool,
) -> (GpuState, bool) {
    match *steady {
        Some(held) if !settled => (
            GpuState {
                workload: measured.workload,
                ..held
            },
            true,
        ),
        _ => {
            *steady = Some(measured);
            (measured, false)
        }
    }
}

/// The longest [`Daemon::start_up`] waits before the first tick: the
/// servers' bring-up (where the actuators drive any), the load's first
/// readings (where it is measured) and one period; `None` where it waits for
/// nothing.
fn start_up_bound(
    actuators: &Actuators,
    workload: &WorkloadSource,
    period: Duration,
) -> Option<Duration> {
    let bring_up = actuators
        .drives_servers()
        .then(|| actuators.longest_reconfiguration());
    let load = match workload {
        WorkloadSource::Measured(monitor) => Some(monitor.stale()),
        _ => None,
    };
    if bring_up.is_none() && load.is_none() {
        return None;
    }
    Some(bring_up.unwrap_or_default() + load.unwrap_or_default() + period)
}

/// Ticks in a row a held floor must be within reach before the log says it
/// is back: a floor at the edge of reach goes in and out of it with the
/// state, and that is one `warn` line, not one pair per edge.
const BACK_WITHIN_REACH_TICKS: u32 = 10;

/// An exponential average over time of a reading: each reading moves it by
/// 1 − e^(−Δt / window) of the way; a missing reading starts it afresh (no
/// reading is carried across a gap the sampler could not see).
#[derive(Debug, Default)]
struct TimeAverage {
    last: Option<(Instant, f64)>,
}

impl TimeAverage {
    fn update(&mut self, at: Instant, reading: Option<f64>, window: Duration) -> Option<f64> {
        let value = reading.filter(|r| r.is_finite());
        self.last = match (self.last, value) {
            (_, None) => None,
            (None, Some(r)) => Some((at, r)),
            (Some((then, avg)), Some(r)) => {
                let dt = at.saturating_duration_since(then).as_secs_f64();
                let weight = if window.is_zero() {
                    1.0
                } else {
                    1.0 - (-dt / window.as_secs_f64()).exp()
                };
                Some((at, avg + weight * (r - avg)))
            }
        };
        self.last.map(|(_, avg)| avg)
    }
}

impl Daemon {
    /// Tick numbers continue those already in the log.
    pub fn new(
        settings: LoopSettings,
        problem: Problem,
        sampler: Box<dyn Sampler>,
        deciding: Deciding,
        actuators: Actuators,
        log: DecisionLog,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let first_tick = log.last_tick().map_or(0, |t| t + 1);
        let configured_costs = problem.reconfig.clone();
        let reversals = settings
            .reversal_damping
            .map(|d| Reversals::new(d, problem.models.len()));
        check_loaded(
            deciding.policies.as_ref(),
            &settings.active,
            &settings.shadows,
        )?;
        let models = problem.models.len();
        let decider = deciding
            .decider(&settings.active, first_tick)
            .floors_out_of_reach(settings.floors.out_of_reach);
        let shared = Arc::new(Shared {
            metrics,
            deciding,
            problem: problem.clone(),
            floors: settings.floors.clone(),
            period: settings.period,
            deadline: settings.deadline,
            history: History::new(unix_ms_now()),
            roles: RwLock::new(Roles {
                active: settings.active.clone(),
                shadows: settings.shadows.clone(),
            }),
            last: RwLock::new(None),
            last_at: RwLock::new(Instant::now()),
            first_tick_wait: start_up_bound(&actuators, &settings.workload, settings.period)
                .unwrap_or_default(),
        });
        Ok(Self {
            settings,
            problem,
            sampler,
            actuators,
            log,
            shared,
            next_tick: first_tick,
            decider: Some(decider),
            log_failing: false,
            correction_failing: false,
            floor_memory_failing: false,
            corrections: Vec::new(),
            streaks: Streaks::default(),
            downtime: DowntimeBook::default(),
            undamped_costs: configured_costs.clone(),
            reversals,
            configured_costs,
            contention: TimeAverage::default(),
            out_of_reach: vec![None; models],
            settling: Settling::default(),
            steady: None,
            brought_up: Vec::new(),
        })
    }

    pub fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Runs until `shutdown` turns true (the tick in progress finishes first) or
    /// `max_ticks` ticks ran; then syncs the log and stops the actuators.
    pub async fn run(
        mut self,
        mut shutdown: watch::Receiver<bool>,
        max_ticks: Option<u64>,
    ) -> Result<RunSummary> {
        let mut interval = tokio::time::interval(self.settings.period);
        // A late tick is skipped, not bunched up: skipped ticks are the missed ones.
        interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut previous: Option<tokio::time::Instant> = None;
        let mut summary = RunSummary {
            ticks: 0,
            missed_ticks: 0,
            log_records: 0,
        };
        let period = self.settings.period.as_nanos().max(1);
        if self.start_up(&mut shutdown).await {
            // The first tick a period from now: its state is read over servers serving.
            interval.reset();
        }
        while max_ticks.is_none_or(|m| summary.ticks < m) {
            if *shutdown.borrow() {
                break;
            }
            let scheduled = tokio::select! {
                at = interval.tick() => at,
                _ = shutdown.changed() => break,
            };
            // Whole periods that passed since the previous slot, beyond the one
            // this tick fills: slots skipped, plus this tick if it starts a whole
            // period late.
            let missed = previous.map_or(0, |p| {
                ((tokio::time::Instant::now() - p).as_nanos() / period).saturating_sub(1) as u64
            });
            previous = Some(scheduled);
            self.tick(missed).await?;
            summary.ticks += 1;
            summary.missed_ticks += missed;
        }
        self.log.sync()?;
        summary.log_records = self.log.records();
        self.actuators.shutdown(Duration::from_secs(2)).await;
        Ok(summary)
    }

    /// Before the first tick: the servers the actuators brought up serving
    /// (or failed), at most their longest reconfiguration, and every model's
    /// load read, at most `stale_ms`; then the sampler's span restarted, so
    /// the first decision is on the load and the state of running servers,
    /// not on the safe level and the servers' start-up (on the rig, tick 0
    /// restarted `gemma` for a `high` load no request had made, at a state
    /// where llama-server was still loading). Whether it waited for anything.
    async fn start_up(&mut self, shutdown: &mut watch::Receiver<bool>) -> bool {
        if start_up_bound(
            &self.actuators,
            &self.settings.workload,
            self.settings.period,
        )
        .is_none()
        {
            return false;
        }
        let waited = async {
            if self.actuators.drives_servers() {
                let within = self.actuators.longest_reconfiguration();
                let pending = self.actuators.brought_up(within).await;
                if !pending.is_empty() {
                    let names: Vec<&str> = pending
                        .iter()
                        .map(|&i| self.problem.models[i].name.as_str())
                        .collect();
                    tracing::warn!(
                        "start-up: {} not brought up within {} ms; deciding from what serves",
                        names.join(", "),
                        within.as_millis()
                    );
                }
            }
            if let WorkloadSource::Measured(monitor) = &mut self.settings.workload {
                monitor.first_readings().await;
            }
        };
        tokio::select! {
            () = waited => {}
            _ = shutdown.changed() => {}
        }
        // Taken now, so the bring-ups count as finished a period before the
        // first tick, not at it: a first reading over the one period after
        // them is a steady one.
        self.brought_up = self.finished_reconfigurations();
        self.sampler.restart_span();
        true
    }

    async fn tick(&mut self, missed_before: u64) -> Result<()> {
        let tick = self.next_tick;
        self.next_tick += 1;
        let unix_ms = unix_ms_now();
        let started = tokio::time::Instant::now();
        let mut reconfigurations = std::mem::take(&mut self.brought_up);
        reconfigurations.extend(self.finished_reconfigurations());
        let footprint = self.problem.vram_mib(&self.problem.current) as f64;
        let load = self.settings.workload.read(tick);
        self.shared
            .metrics
            .load(load.level, load.observed, load.forecast, load.fallback);
        let measured_throughput = load.throughput();
        self.shared
            .metrics
            .measured_throughput(&self.problem, &measured_throughput);
        self.shared.metrics.measured_floor_misses(
            &self.problem,
            &self.settings.floors.misses(&measured_throughput),
        );
        let workload = load.level;
        let sample = self
            .sampler
            .sample(&self.problem, &self.problem.current, workload)
            .unwrap_or_else(|err| Sample {
                source: format!("failed: {err:#}"),
                vram_used_mib: None,
                vram_total_mib: None,
                utilization: None,
                contention: None,
                processes: Vec::new(),
            });
        let measured = GpuState {
            workload,
            vram_used_mib: sample.vram_used_mib.unwrap_or(footprint),
            utilization: sample
                .utilization
                .unwrap_or(self.settings.unknown_utilization),
            contention: self.contention.update(
                Instant::now(),
                sample.contention,
                self.settings.contention_window,
            ),
        };
        // A reading over a reconfiguration is the reconfiguration's: the tick
        // decides on the last steady one, at this tick's load.
        let unsettled = self.settling.unsettled(
            Instant::now(),
            self.settings.period,
            self.actuators.longest_reconfiguration(),
        );
        let (state, state_held) = steady_state(&mut self.steady, measured, unsettled.is_empty());
        if state_held {
            self.shared.metrics.state_held();
        }

        let Roles { active, shadows } = read(&self.shared.roles).clone();
        let (budget, started_at) = (self.settings.deadline, started.into_std());
        // The utility this tick is scored with, named on the dashboard and
        // recorded in the decision log when it changes.
        let (utility, scored_with) = {
            let u = self.shared.deciding.pipeline.utility().load();
            (
                u.label(),
                UtilityRecord {
                    tick,
                    name: u.info.name.clone(),
                    identity: u.info.identity(),
                    params: u.params_pairs(),
                },
            )
        };
        // The tick's decision, off the async runtime (WASI guests block on
        // it), done by the tick's deadline counted from its start.
        let mut decider = self
            .decider
            .take()
            .context("the decider is back after every tick")?;
        let problem = self.problem.clone();
        let correction = self.settings.correction.clone();
        // What a model measured over its own reconfiguration is its downtime,
        // not its configuration's: not learnt from (nor recorded as learnt).
        let learnt_from = self.settling.learnable(&load.measured);
        let measured = learnt_from.clone();
        let (decider, outcome, learnt, forced_out) = tokio::task::spawn_blocking(move || {
            // What ran since the last tick corrects the predictions first, so
            // this tick decides on them (one inference of one candidate).
            let learnt = correction
                .as_ref()
                .map(|c| c.observe(&state, &problem.current, &measured));
            let budget = budget.saturating_sub(started_at.elapsed());
            let outcome = decider.tick(&problem, &state, &active, &shadows, budget);
            // What a floor forced out is remembered for the next ticks.
            let forced_out = correction.as_ref().map(|c| {
                c.forced_out(
                    &state,
                    &problem.current,
                    &outcome.applied.config,
                    &outcome.floors,
                )
            });
            (decider, outcome, learnt, forced_out)
        })
        .await
        .context("the tick's decision")?;
        self.decider = Some(decider);
        if let Some(learnt) = learnt {
            self.corrected(tick, learnt);
        }
        if let Some(forced_out) = forced_out {
            self.forced_out(tick, forced_out);
        }
        let active_record = PolicyRecord::from(&outcome.active);
        let shadows: Vec<PolicyRecord> = outcome.shadows.iter().map(PolicyRecord::from).collect();
        let components: Vec<(String, ComponentIdentity)> = std::iter::once(&outcome.active)
            .chain(&outcome.shadows)
            .filter_map(|v| Some((v.policy.clone(), v.from.as_ref()?.identity.clone())))
            .collect();
        self.count(&active_record, Role::Active);
        for r in &shadows {
            self.count(r, Role::Shadow);
        }
        self.log_edges(tick, &active_record, &shadows);
        self.floors_held(tick, &outcome.floors_held);
        let kept_last_valid = outcome.kept_last_valid;
        if kept_last_valid {
            self.shared.metrics.kept_last_valid();
            for m in outcome.floors_missed(&self.problem) {
                self.shared
                    .metrics
                    .sla_violation(&self.problem.models[m].name);
            }
        }
        let applied = outcome.applied.config;
        let changed: Vec<usize> = applied
            .iter()
            .zip(&self.problem.current)
            .enumerate()
            .filter(|(_, (a, c))| a != c)
            .map(|(i, _)| i)
            .collect();
        self.actuators
            .apply(&self.problem, tick, &applied, &changed);
        let sent = Instant::now();
        for &i in &changed {
            if self.actuators.measured_by(i).is_some() {
                self.settling.sent(i, tick, sent);
            }
        }
        self.shared.metrics.model_changes(changed.len());
        let previous = std::mem::replace(&mut self.problem.current, applied.clone());
        self.note_reversals(tick, &previous, &applied);

        let record = TickRecord {
            tick,
            unix_ms,
            missed_before,
            sample,
            state,
            load: LoadRecord {
                observed: load.observed,
                forecast: load.forecast,
                fallback: load.fallback.map(str::to_owned),
            },
            previous: Some(previous),
            active: active_record,
            shadows,
            applied,
            kept_last_valid,
            changed_models: changed.iter().map(|&i| i as u32).collect(),
            floors_held: outcome.floors_held.iter().map(|&i| i as u32).collect(),
            state_held,
        };
        // Nothing a tick records may end the daemon: a failed write is counted
        // and logged (once per run of failures), and the loop goes on.
        let written = self
            .log
            .scored_with(&scored_with)
            .and_then(|()| self.log.priced_with(tick, &self.problem.reconfig))
            .and_then(|()| {
                components
                    .iter()
                    .try_for_each(|(policy, identity)| self.log.describe(policy, identity))
            })
            .and_then(|()| {
                reconfigurations
                    .iter()
                    .try_for_each(|r| self.log.append_reconfig(r))
            })
            .and_then(|()| {
                if !learnt_from.iter().any(Option::is_some) {
                    return Ok(());
                }
                self.log.append_measured(&MeasuredRecord {
                    tick,
                    throughput: learnt_from,
                    correction: self.settings.correction.as_ref().map(|c| c.config()),
                })
            })
            .and_then(|()| self.log.append(&record));
        match written {
            Ok(()) => self.log_failing = false,
            Err(e) => {
                self.shared.metrics.log_write_failed();
                if !std::mem::replace(&mut self.log_failing, true) {
                    tracing::error!(
                        "decision log: tick {tick} not recorded: {e:#}; still deciding"
                    );
                }
            }
        }
        self.shared.metrics.tick(missed_before);
        self.shared.history.record(
            &self.problem,
            &record,
            utility,
            Measured {
                throughput: &measured_throughput,
                corrections: &self.corrections,
            },
            self.shared.deciding.reloads(),
            || self.shared.deciding.reload_events(),
        );
        *self.shared.last.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(record));
        *self
            .shared
            .last_at
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Instant::now();
        Ok(())
    }

    /// After the correction learnt from a tick: its gauges, and one log line
    /// per edge of a model's drift or of a run of failed steps.
    fn corrected(&mut self, tick: u64, learnt: Result<Vec<DriftEdge>, PredictError>) {
        let Some(correction) = &self.settings.correction else {
            return;
        };
        match learnt {
            Ok(edges) => {
                if std::mem::replace(&mut self.correction_failing, false) {
                    tracing::info!(tick, "correction: learning from measured throughput again");
                }
                for edge in edges {
                    match edge {
                        DriftEdge::Started {
                            model,
                            ratio,
                            bound,
                        } => {
                            let name = &self.problem.models[model].name;
                            self.shared.metrics.drift_alarm(name);
                            tracing::warn!(
                                tick,
                                model = %name,
                                "prediction drift: measured throughput is {ratio:.2}× the surrogate's prediction (recent mean), beyond its held-out error (±{:.0} %); decisions use corrected predictions — retrain on this card (profile --live, train)",
                                bound * 100.0
                            );
                        }
                        DriftEdge::Stopped { model, ratio } => {
                            tracing::info!(
                                tick,
                                model = %self.problem.models[model].name,
                                "prediction drift over: measured throughput is {ratio:.2}× the prediction (recent mean)"
                            );
                        }
                    }
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut self.correction_failing, true) {
                    tracing::warn!(
                        tick,
                        "correction: the running configuration could not be predicted ({}); predictions stay as last corrected",
                        mfsched_core::error_chain(&e)
                    );
                }
            }
        }
        self.corrections = correction.models(&self.problem.current);
        self.shared
            .metrics
            .correction(&self.problem, &self.corrections);
        self.shared
            .metrics
            .correction_rejected(correction.rejected());
    }

    /// One `info` line per configuration a floor forced out, which the
    /// correction now remembers (bounded by the changes the tick made), and
    /// its count; a failed prediction is said once per run of failures.
    fn forced_out(&mut self, tick: u64, forced_out: Result<Vec<ForcedOut>, PredictError>) {
        match forced_out {
            Ok(left) => {
                self.floor_memory_failing = false;
                for f in left {
                    let model = &self.problem.models[f.model];
                    self.shared.metrics.floor_forced_out(&model.name);
                    tracing::info!(
                        tick,
                        model = %model.name,
                        "floor forced out {}: predicted {:.2} there, under its floor of {:.2} (as this tick held it); predicted at most that for {} ticks while the load is {} or higher",
                        model.knobs(f.config as usize),
                        f.predicted,
                        f.floor,
                        f.ticks,
                        f.workload.as_str()
                    );
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut self.floor_memory_failing, true) {
                    tracing::warn!(
                        tick,
                        "correction: the configuration left could not be predicted ({}); nothing remembered of it",
                        mfsched_core::error_chain(&e)
                    );
                }
            }
        }
    }

    /// Counts the models whose floor this tick held at the edge of their
    /// reach, and says so once per spell: `warn` when a floor goes out of
    /// reach, `info` once it has been back for [`BACK_WITHIN_REACH_TICKS`].
    fn floors_held(&mut self, tick: u64, held: &[usize]) {
        for (m, spell) in self.out_of_reach.iter_mut().enumerate() {
            let name = &self.problem.models[m].name;
            if held.contains(&m) {
                self.shared.metrics.floor_held(name);
                if spell.replace(0).is_none() {
                    tracing::warn!(
                        tick,
                        model = %name,
                        "floor out of reach: no configuration is predicted to meet its floor of {:.2} at this state (or only within {:.0} % of its best, or under the candidate-aware field not beside the others' floors); deciding best-effort, the floor held at the edge of its reach, until it is back",
                        self.problem.sla_floors[m],
                        mfsched_core::FLOOR_REACH_BAND * 100.0
                    );
                }
            } else if let Some(within) = spell {
                *within += 1;
                if *within >= BACK_WITHIN_REACH_TICKS {
                    *spell = None;
                    tracing::info!(
                        tick,
                        model = %name,
                        "floor back within reach for {BACK_WITHIN_REACH_TICKS} ticks"
                    );
                }
            }
        }
    }

    /// One log line per edge of a policy's run of failures (never one per
    /// tick): `warn` with the reason, escaped and cut, when it starts failing;
    /// `info` with the count of failed ticks when it answers again.
    fn log_edges(&mut self, tick: u64, active: &PolicyRecord, shadows: &[PolicyRecord]) {
        use mfsched_core::printable;
        let asked =
            std::iter::once((active, "active")).chain(shadows.iter().map(|s| (s, "shadow")));
        for (record, role) in asked {
            let failure = record.outcome.as_ref().err();
            let policy = printable(&record.policy, 100);
            match (
                self.streaks.observe(&record.policy, failure.is_some()),
                failure,
            ) {
                (Some(Change::Failing), Some(f)) => {
                    let reason =
                        printable(&format!("{}: {}", f.kind.as_str(), f.message), REASON_BYTES);
                    let what = if role == "active" {
                        "the last valid configuration is kept until it answers again"
                    } else {
                        "recorded, never applied"
                    };
                    tracing::warn!(
                        tick = tick,
                        "{role} policy {policy} is failing ({what}): {reason}"
                    );
                }
                (Some(Change::Recovered { failed_ticks }), _) => tracing::info!(
                    tick = tick,
                    "{role} policy {policy} answers again after {failed_ticks} failed tick(s)"
                ),
                _ => {}
            }
        }
        let names: Vec<&str> = std::iter::once(active)
            .chain(shadows)
            .map(|r| r.policy.as_str())
            .collect();
        self.streaks.retain(|p| names.contains(&p));
    }

    /// The reconfigurations the actuators finished since the last tick. A
    /// failed one leaves the configuration that still serves as the current
    /// one (so the policies decide from what runs and the change is asked
    /// again when still wanted); measured downtimes become the
    /// reconfiguration costs when configured so.
    fn finished_reconfigurations(&mut self) -> Vec<ReconfigRecord> {
        let done = self.actuators.drain();
        self.settling.finished(&done, Instant::now());
        for r in &done {
            let i = r.model as usize;
            if r.error.is_some()
                && let Some(serving) = r.serving
                && let Some(current) = self.problem.current.get_mut(i)
                && *current == r.to
            {
                *current = serving;
            }
            self.downtime.record(self.problem.models.len(), r);
        }
        if let Some(horizon) = self.settings.downtime_cost_horizon
            && !done.is_empty()
        {
            self.undamped_costs = self.downtime.costs(horizon, &self.configured_costs);
        }
        self.problem.reconfig = match &self.reversals {
            Some(r) => r.priced(&self.undamped_costs),
            None => self.undamped_costs.clone(),
        };
        done
    }

    /// Notes this tick's changes in the reversal damping (the next tick
    /// decides with the costs it raises), one line for each model whose
    /// costs rose.
    fn note_reversals(&mut self, tick: u64, previous: &[u32], applied: &[u32]) {
        let Some(reversals) = &mut self.reversals else {
            return;
        };
        let window = reversals.window_ticks();
        for r in reversals.observe(tick, previous, applied) {
            let model = &self.problem.models[r.model];
            tracing::info!(
                model = %model.name,
                "tick {tick}: {} went back to {} {} ticks after leaving it: its reconfiguration costs ×{}, halved after each {window} ticks without going back (actuator.reversal_window_ticks)",
                model.name,
                model.knobs(r.config as usize),
                r.after_ticks,
                r.factor
            );
        }
    }

    /// Counts a policy's answer in the metrics.
    fn count(&self, record: &PolicyRecord, role: Role) {
        let latency = Duration::from_micros(record.latency_us);
        match &record.outcome {
            Ok(p) => {
                self.shared
                    .metrics
                    .decided(&record.policy, role, latency, p.predicted_utility)
            }
            Err(f) => self.shared.metrics.failed(&record.policy, f.kind, latency),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contention_average_follows_time_and_restarts_after_a_gap() {
        let window = Duration::from_secs(5);
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let mut avg = TimeAverage::default();
        assert_eq!(avg.update(at(0.0), Some(0.2), window), Some(0.2));
        // One window later a reading of 0.8 has moved it 1 − 1/e of the way.
        let moved = avg.update(at(5.0), Some(0.8), window).expect("a reading");
        let expected = 0.2 + 0.6 * (1.0 - (-1.0f64).exp());
        assert!((moved - expected).abs() < 1e-12, "{moved}");
        // A tick's spike moves it by a tick's share only.
        let spiked = avg.update(at(5.1), Some(1.0), window).expect("a reading");
        assert!(spiked - moved < 0.01, "{moved} -> {spiked}");
        // No reading: none carried over; the next one starts afresh.
        assert_eq!(avg.update(at(6.0), None, window), None);
        assert_eq!(avg.update(at(7.0), Some(0.5), window), Some(0.5));
        assert_eq!(avg.update(at(7.0), Some(f64::NAN), window), None);
        // A zero window is the raw reading.
        let mut raw = TimeAverage::default();
        raw.update(at(0.0), Some(0.1), Duration::ZERO);
        assert_eq!(raw.update(at(0.1), Some(0.9), Duration::ZERO), Some(0.9));
    }

    #[test]
    fn a_tick_over_a_reconfiguration_decides_on_the_last_steady_state_and_the_first_is_one() {
        let at = |utilization: f64, workload: WorkloadLevel| GpuState {
            workload,
            vram_used_mib: 500.0,
            utilization,
            contention: None,
        };
        let mut steady = None;
        // The first reading, over a reconfiguration: decided on, and steady.
        let first = at(0.3, WorkloadLevel::Low);
        assert_eq!(steady_state(&mut steady, first, false), (first, false));
        // Over a reconfiguration: the steady state at this tick's load.
        let (held, is_held) = steady_state(&mut steady, at(1.0, WorkloadLevel::High), false);
        assert!(is_held);
        assert_eq!(held, at(0.3, WorkloadLevel::High));
        // Settled: the reading, which becomes the steady one.
        let settled = at(0.8, WorkloadLevel::Medium);
        assert_eq!(steady_state(&mut steady, settled, true), (settled, false));
        assert_eq!(steady, Some(settled));
    }

    #[test]
    fn a_reading_is_unsettled_while_a_reconfiguration_is_in_flight_and_a_period_after() {
        let (period, longest) = (Duration::from_secs(1), Duration::from_secs(30));
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let done = |model: u32, tick: u64| ReconfigRecord {
            tick,
            ..reconfig(model, true, 3000.0, None)
        };
        let mut s = Settling::default();
        let none: Vec<usize> = Vec::new();
        assert_eq!(s.unsettled(at(0.0), period, longest), none, "nothing sent");
        s.sent(0, 5, at(0.0));
        assert_eq!(s.unsettled(at(3.0), period, longest), [0], "in flight");
        // A newer request for the model: the older one's record leaves it pending.
        s.sent(0, 7, at(3.0));
        s.finished(&[done(0, 5)], at(4.0));
        assert_eq!(s.unsettled(at(6.0), period, longest), [0], "tick 7's");
        s.finished(&[done(0, 7)], at(7.0));
        // The next reading covers the period it finished in; the one after does not.
        assert_eq!(s.unsettled(at(7.5), period, longest), [0]);
        assert_eq!(s.unsettled(at(8.0), period, longest), none);
        // Per model: one in flight, another finished just before.
        s.sent(1, 9, at(9.0));
        s.finished(&[done(2, 8)], at(9.0));
        assert_eq!(s.unsettled(at(9.5), period, longest), [1, 2]);
        // A request never reported stops counting past the longest reconfiguration.
        assert_eq!(s.unsettled(at(20.0), period, longest), [1]);
        assert_eq!(s.unsettled(at(41.0), period, longest), none);
    }

    #[test]
    fn the_correction_learns_a_reading_once_and_only_over_steady_service() {
        let (period, longest) = (Duration::from_secs(1), Duration::from_secs(30));
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let reading = |rate: f64, since: f64, read: f64, whole: bool| {
            Some(ThroughputReading {
                rate,
                since: at(since),
                at: at(read),
                whole,
            })
        };
        let mut s = Settling::default();
        // Nothing reconfigured: a whole reading is learnt, once, however
        // many ticks it stands in for; a partial one (a counter that just
        // restarted) is not.
        let steady = [
            reading(8.0, 0.0, 10.0, true),
            reading(3.0, 8.0, 10.0, false),
        ];
        assert_eq!(s.learnable(&steady), [Some(8.0), None]);
        assert_eq!(s.learnable(&steady), [None, None], "the same readings");
        // Model 0 restarts from 11 s to 15 s: a reading read meanwhile is
        // not learnt, nor one over a span reaching back into the restart
        // (a 10 s window read at 20 s), nor one read before it that still
        // stands in once it finished.
        s.sent(0, 11, at(11.0));
        assert_eq!(s.unsettled(at(12.0), period, longest), [0]);
        assert_eq!(s.learnable(&[reading(1.3, 2.0, 12.0, true)]), [None]);
        let restart = ReconfigRecord {
            tick: 11,
            ..reconfig(0, true, 4000.0, None)
        };
        s.finished(&[restart], at(15.0));
        for over_the_restart in [
            reading(1.3, 10.0, 20.0, true),
            reading(8.0, 0.0, 10.5, true),
        ] {
            assert_eq!(s.learnable(&[over_the_restart]), [None]);
        }
        // A span that began once it was up is the new configuration's.
        assert_eq!(s.learnable(&[reading(7.5, 15.5, 25.5, true)]), [Some(7.5)]);
    }

    fn reconfig(model: u32, variant_switch: bool, ms: f64, error: Option<&str>) -> ReconfigRecord {
        ReconfigRecord {
            model,
            tick: 0,
            actuator: "process".into(),
            from: Some(0),
            to: 1,
            variant_switch,
            downtime_ms: ms,
            error: error.map(str::to_owned),
            serving: Some(1),
        }
    }

    #[test]
    fn measured_downtime_becomes_each_models_cost_as_a_share_of_the_period() {
        let configured = [ReconfigCosts {
            variant_switch: 0.05,
            knob_change: 0.01,
        }; 2];
        let period = Duration::from_millis(1000);
        let mut book = DowntimeBook::default();
        assert_eq!(
            book.costs(period, &configured),
            configured,
            "nothing measured yet"
        );
        // Model 0: switches of 200 and 400 ms (mean 300); model 1: one of
        // 100 ms; a failed one does not count. No knob change measured: each
        // model's switches stand for them (the server reloads for either).
        book.record(2, &reconfig(0, true, 200.0, None));
        book.record(2, &reconfig(0, true, 400.0, None));
        book.record(2, &reconfig(1, true, 100.0, None));
        book.record(2, &reconfig(1, true, 9000.0, Some("not ready")));
        let costs = book.costs(period, &configured);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(
            near(costs[0].variant_switch, 0.3) && near(costs[0].knob_change, 0.3),
            "{costs:?}"
        );
        assert!(
            near(costs[1].variant_switch, 0.1) && near(costs[1].knob_change, 0.1),
            "{costs:?}"
        );
        // Model 1's knob change of 20 ms is its own price from then on.
        book.record(2, &reconfig(1, false, 20.0, None));
        let costs = book.costs(period, &configured);
        assert!(near(costs[1].knob_change, 0.02), "{costs:?}");
        assert!(near(costs[0].knob_change, 0.3), "{costs:?}");
        // A restart longer than the period costs the whole tick, no more.
        book.record(2, &reconfig(0, false, 50_000.0, None));
        assert_eq!(book.costs(period, &configured)[0].knob_change, 1.0);
        // A model never measured keeps what it was configured with.
        assert_eq!(book.costs(period, &[configured[0]; 3])[2], configured[0]);
        // Paid off over 20 periods, model 1's switch of 100 ms costs 0.005,
        // and model 0's mean knob change (50 s) still the whole tick.
        let costs = book.costs(20 * period, &configured);
        assert!(near(costs[1].variant_switch, 0.005), "{costs:?}");
        assert_eq!(costs[0].knob_change, 1.0);
    }
}
