//! What the dashboard charts: the newest ticks and events, in bounded rings.
//!
//! The tick loop builds each tick's [`TickPoint`] (the few numbers the page
//! draws, not the whole record) before it takes the lock, and only pushes an
//! `Arc` under it; the API copies `Arc`s out under the lock and serialises
//! after. So neither side holds the lock across anything slow, and memory stays
//! bounded however long the daemon runs or however many pages poll it.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::declog::{PolicyRecord, TickRecord};
use super::streak::{Change, Streaks};
use mfsched_core::short_digest;
use mfsched_core::{ModelCorrection, Problem, WorkloadLevel};
use mfsched_plugin_host::ReloadCounts;
use mfsched_plugin_host::{ReloadEvent, ReloadOutcome};

/// Ticks kept: a minute at 10 Hz, ten at the default 1 s period.
pub const TICKS_KEPT: usize = 600;
/// Events kept (policy switches, shadow changes, reloads, policies starting or
/// ceasing to fail).
pub const EVENTS_KEPT: usize = 200;
/// A failure reason is cut to this many characters (a plugin writes it).
const REASON_CHARS: usize = 300;

/// One tick as the dashboard draws it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickPoint {
    pub tick: u64,
    pub unix_ms: u64,
    pub vram_used_mib: f64,
    pub utilization: f64,
    /// The contention reading, where the sampler gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contention: Option<f64>,
    pub level: WorkloadLevel,
    pub load_observed: Option<f64>,
    pub load_forecast: Option<f64>,
    /// Per model, the configuration running after the tick (variant and knobs).
    pub running: Vec<String>,
    /// Per model, the throughput its server reported (none where the load
    /// source reads no throughput counter for it, or none recently).
    pub measured_throughput: Vec<Option<f64>>,
    /// Per model, the online correction's factor on the configuration that
    /// ran (none before the model's throughput was first measured, or with
    /// the correction off), and whether the model drifts.
    pub correction: Vec<Option<f64>>,
    pub drifting: Vec<bool>,
    /// Per model, whether the tick held its floor at the edge of its reach
    /// (no configuration predicted to meet it: `[floors] out_of_reach`).
    pub floors_held: Vec<bool>,
    /// The tick decided on the last steady state, a reconfiguration settling.
    pub state_held: bool,
    pub kept_last_valid: bool,
    pub missed_before: u64,
    /// The utility component every policy of the tick was scored with
    /// (`name@hash`, then its parameters in brackets when it has any: a hot
    /// swap shows as a new hash).
    pub utility: String,
    /// The active policy first, then the shadows in their configured order.
    pub policies: Vec<PolicyPoint>,
}

/// What the servers measured in a tick (per model; empty where nothing is
/// measured), and where the online correction stood on what ran.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured<'a> {
    pub throughput: &'a [Option<f64>],
    pub corrections: &'a [ModelCorrection],
}

/// One policy's answer in a tick.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyPoint {
    pub policy: String,
    pub utility: Option<f64>,
    /// Predicted throughput per model, in the model's unit.
    pub throughput: Option<Vec<f64>>,
    pub latency_us: u64,
    /// `kind: message` when it gave no usable decision.
    pub failure: Option<String>,
    /// Its proposal differs from the configuration the tick applied (the
    /// active policy's, or the last valid one when it failed); false for the
    /// active policy.
    pub differs: bool,
}

/// Something that happened between ticks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Increasing from 1, so a page asks only for what it has not seen.
    pub seq: u64,
    pub unix_ms: u64,
    /// `switch`, `shadow-added`, `shadow-removed`, `reload`,
    /// `reload-rejected`, `failing`, `recovered`.
    pub kind: &'static str,
    pub message: String,
}

/// Running totals per policy since the daemon started (the rings forget).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PolicyTotals {
    pub decisions: u64,
    pub cumulative_utility: f64,
    /// Ticks whose proposal differed from what was applied, while a shadow.
    pub differing: u64,
    pub failures: u64,
    pub last_failure: Option<String>,
}

/// What a page asks for: the ticks after `since`, the events after `events_since`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub ticks: Vec<Arc<TickPoint>>,
    pub events: Vec<Arc<Event>>,
    pub totals: BTreeMap<String, PolicyTotals>,
    pub dropped_ticks: bool,
}

#[derive(Debug, Default)]
struct Rings {
    ticks: VecDeque<Arc<TickPoint>>,
    events: VecDeque<Arc<Event>>,
    next_event: u64,
    totals: BTreeMap<String, PolicyTotals>,
    streaks: Streaks,
    reloads: ReloadCounts,
}

impl Rings {
    fn push_tick(&mut self, point: Arc<TickPoint>) {
        if self.ticks.len() == TICKS_KEPT {
            self.ticks.pop_front();
        }
        self.ticks.push_back(point);
    }

    fn event(&mut self, unix_ms: u64, kind: &'static str, message: String) {
        self.next_event += 1;
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(Arc::new(Event {
            seq: self.next_event,
            unix_ms,
            kind,
            message,
        }));
    }
}

/// The dashboard's history, shared by the tick loop and the API.
#[derive(Debug)]
pub struct History {
    /// When this daemon started: tick numbers start over with a new decision
    /// log, so a page that sees another value starts its charts over.
    pub run_started_ms: u64,
    rings: Mutex<Rings>,
}

impl History {
    pub fn new(run_started_ms: u64) -> Self {
        Self {
            run_started_ms,
            rings: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rings> {
        // Each change is a few pushes and sums: a panic cannot leave the rings
        // in a state worth refusing to show.
        self.rings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a finished tick, scored with `utility`, with the throughput the
    /// servers reported (per model, as the load source read it). `reloads` are the policy
    /// source's totals now; when they grew, `recent_reloads` (asked only
    /// then) gives the newest attempts, oldest first, which become events
    /// naming the file and what became of it.
    pub fn record(
        &self,
        problem: &Problem,
        record: &TickRecord,
        utility: String,
        measured: Measured<'_>,
        reloads: ReloadCounts,
        recent_reloads: impl FnOnce() -> Vec<ReloadEvent>,
    ) {
        let point = Arc::new(TickPoint::of(problem, record, utility, measured));
        let new_reloads = {
            let seen = self.lock().reloads;
            let n = (reloads.loaded + reloads.rejected).saturating_sub(seen.loaded + seen.rejected);
            if n == 0 {
                Vec::new()
            } else {
                // The attempts the counters count (a removed file is not one),
                // the newest `n` of them.
                let mut counted: Vec<ReloadEvent> = recent_reloads()
                    .into_iter()
                    .filter(|e| !matches!(e.outcome, ReloadOutcome::Removed))
                    .collect();
                counted.drain(..counted.len().saturating_sub(n as usize));
                counted
            }
        };
        let mut rings = self.lock();
        let at = record.unix_ms;
        for e in &new_reloads {
            let file = e.path.file_name().map_or_else(
                || e.path.display().to_string(),
                |f| f.to_string_lossy().into_owned(),
            );
            let (kind, message) = match &e.outcome {
                ReloadOutcome::Swapped { name, sha256, .. } => (
                    "reload",
                    cut(&format!(
                        "hot reload: {name} replaced by {file} ({})",
                        short_digest(sha256)
                    )),
                ),
                ReloadOutcome::Added { name, sha256, .. } => (
                    "reload",
                    cut(&format!(
                        "hot reload: {name} added from {file} ({})",
                        short_digest(sha256)
                    )),
                ),
                ReloadOutcome::Rejected { reason, running } => (
                    "reload-rejected",
                    cut(&format!(
                        "hot reload: {file} rejected, {}: {reason}",
                        if *running {
                            "the running plugin kept"
                        } else {
                            "nothing added"
                        }
                    )),
                ),
                ReloadOutcome::Removed => continue,
            };
            rings.event(at, kind, message);
        }
        rings.reloads = reloads;
        for p in &point.policies {
            let totals = rings.totals.entry(p.policy.clone()).or_default();
            match &p.failure {
                Some(reason) => {
                    totals.failures += 1;
                    totals.last_failure = Some(reason.clone());
                }
                None => {
                    totals.decisions += 1;
                    totals.cumulative_utility += p.utility.unwrap_or(0.0);
                    totals.differing += u64::from(p.differs);
                }
            }
            let change = match (
                rings.streaks.observe(&p.policy, p.failure.is_some()),
                &p.failure,
            ) {
                (Some(Change::Failing), Some(reason)) => {
                    Some(("failing", format!("{} failed: {reason}", p.policy)))
                }
                (Some(Change::Recovered { failed_ticks }), _) => Some((
                    "recovered",
                    format!("{} answers again after {failed_ticks} failure(s)", p.policy),
                )),
                _ => None,
            };
            if let Some((kind, message)) = change {
                rings.event(at, kind, message);
            }
        }
        let asked: Vec<&str> = point.policies.iter().map(|p| p.policy.as_str()).collect();
        rings.streaks.retain(|p| asked.contains(&p));
        rings.push_tick(point);
    }

    /// Records a switch of the active policy.
    pub fn switched(&self, unix_ms: u64, from: &str, to: &str) {
        self.lock()
            .event(unix_ms, "switch", format!("active policy: {from} → {to}"));
    }

    /// Records a shadow added (or removed) through the API.
    pub fn shadow_changed(&self, unix_ms: u64, policy: &str, added: bool) {
        let (kind, message) = if added {
            ("shadow-added", format!("shadow added: {policy}"))
        } else {
            ("shadow-removed", format!("shadow removed: {policy}"))
        };
        self.lock().event(unix_ms, kind, message);
    }

    /// The ticks after `since` and the events after `events_since` (all that
    /// are kept when `None`). `dropped_ticks` says ticks after `since` were
    /// already forgotten (the page fell behind by more than the ring).
    pub fn since(&self, since: Option<u64>, events_since: u64) -> Snapshot {
        let rings = self.lock();
        let start = since.map_or(0, |s| rings.ticks.partition_point(|t| t.tick <= s));
        let dropped_ticks = match (since, rings.ticks.front()) {
            (Some(s), Some(first)) => first.tick > s.saturating_add(1),
            _ => false,
        };
        Snapshot {
            ticks: rings.ticks.range(start..).cloned().collect(),
            events: rings
                .events
                .iter()
                .filter(|e| e.seq > events_since)
                .cloned()
                .collect(),
            totals: rings.totals.clone(),
            dropped_ticks,
        }
    }
}

impl TickPoint {
    fn of(
        problem: &Problem,
        record: &TickRecord,
        utility: String,
        Measured {
            throughput: measured_throughput,
            corrections,
        }: Measured<'_>,
    ) -> Self {
        let policy = |r: &PolicyRecord| match &r.outcome {
            Ok(p) => PolicyPoint {
                policy: r.policy.clone(),
                utility: p.predicted_utility,
                throughput: p.predicted_throughput.clone(),
                latency_us: r.latency_us,
                failure: None,
                differs: p.joint != record.applied,
            },
            Err(f) => PolicyPoint {
                policy: r.policy.clone(),
                utility: None,
                throughput: None,
                latency_us: r.latency_us,
                failure: Some(cut(&format!("{}: {}", f.kind.as_str(), f.message))),
                differs: false,
            },
        };
        Self {
            tick: record.tick,
            unix_ms: record.unix_ms,
            vram_used_mib: record.state.vram_used_mib,
            utilization: record.state.utilization,
            contention: record.state.contention,
            level: record.state.workload,
            load_observed: record.load.observed,
            load_forecast: record.load.forecast,
            running: problem
                .models
                .iter()
                .zip(&record.applied)
                .map(|(m, &c)| m.knobs(c as usize).to_string())
                .collect(),
            measured_throughput: (0..problem.models.len())
                .map(|i| measured_throughput.get(i).copied().flatten())
                .collect(),
            correction: (0..problem.models.len())
                .map(|i| {
                    let c = corrections.get(i)?;
                    (c.observations > 0).then_some(c.running_factor)
                })
                .collect(),
            drifting: (0..problem.models.len())
                .map(|i| corrections.get(i).is_some_and(|c| c.drifting))
                .collect(),
            floors_held: (0..problem.models.len())
                .map(|i| record.floors_held.contains(&(i as u32)))
                .collect(),
            state_held: record.state_held,
            kept_last_valid: record.kept_last_valid,
            missed_before: record.missed_before,
            utility,
            policies: std::iter::once(&record.active)
                .chain(&record.shadows)
                .map(policy)
                .collect(),
        }
    }
}

/// `text` cut to [`REASON_CHARS`] characters, marked when cut.
/// Served to the dashboard: control characters escaped (file names and
/// reasons come from outside), then cut.
fn cut(text: &str) -> String {
    let text = &mfsched_core::printable(text, usize::MAX);
    match text.char_indices().nth(REASON_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rings_with(ticks: u64) -> Rings {
        let mut rings = Rings::default();
        for tick in 0..ticks {
            rings.push_tick(Arc::new(TickPoint {
                tick,
                unix_ms: tick,
                vram_used_mib: 1.0,
                utilization: 0.5,
                contention: None,
                level: WorkloadLevel::Low,
                load_observed: None,
                load_forecast: None,
                running: Vec::new(),
                measured_throughput: Vec::new(),
                correction: Vec::new(),
                drifting: Vec::new(),
                floors_held: Vec::new(),
                state_held: false,
                kept_last_valid: false,
                missed_before: 0,
                utility: "utility@abc".into(),
                policies: Vec::new(),
            }));
        }
        rings
    }

    #[test]
    fn the_rings_stay_bounded_and_answer_only_what_is_new() {
        let history = History {
            run_started_ms: 1,
            rings: Mutex::new(rings_with(TICKS_KEPT as u64 + 50)),
        };
        for i in 0..EVENTS_KEPT + 10 {
            history.switched(i as u64, "a", "b");
        }
        let all = history.since(None, 0);
        assert_eq!(all.ticks.len(), TICKS_KEPT);
        assert_eq!(all.events.len(), EVENTS_KEPT);
        assert_eq!(all.ticks[0].tick, 50);
        assert!(!all.dropped_ticks);
        let newest = history.since(Some(TICKS_KEPT as u64 + 47), EVENTS_KEPT as u64 + 8);
        assert_eq!(
            newest.ticks.iter().map(|t| t.tick).collect::<Vec<_>>(),
            [TICKS_KEPT as u64 + 48, TICKS_KEPT as u64 + 49]
        );
        assert_eq!(newest.events.len(), 2);
        assert!(
            history.since(Some(10), 0).dropped_ticks,
            "ticks 11..49 are gone"
        );
        assert!(history.since(Some(10_000), 0).ticks.is_empty());
    }

    #[test]
    fn a_tick_shows_the_floors_and_the_state_it_held() {
        use crate::declog::tests::record;
        let problem = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        let history = History::new(1);
        let mut held = record(1);
        held.floors_held = vec![1];
        held.state_held = true;
        for r in [record(0), held] {
            history.record(
                &problem,
                &r,
                "utility@0123456789ab".into(),
                Measured::default(),
                ReloadCounts::default(),
                Vec::new,
            );
        }
        let ticks = history.since(None, 0).ticks;
        let shown: Vec<(Vec<bool>, bool)> = ticks
            .iter()
            .map(|t| (t.floors_held.clone(), t.state_held))
            .collect();
        assert_eq!(
            shown,
            [(vec![false, false], false), (vec![false, true], true)]
        );
    }

    #[test]
    fn failures_recoveries_and_reloads_become_events_and_totals() {
        use crate::declog::tests::record;
        use mfsched_plugin_host::Proposal;
        let problem = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        let history = History::new(1);
        // The shadow misses its deadline, then proposes another configuration.
        let utility = || "utility@0123456789ab".to_owned();
        history.record(
            &problem,
            &record(0),
            utility(),
            Measured::default(),
            ReloadCounts::default(),
            Vec::new,
        );
        let mut answered = record(1);
        answered.shadows[0].outcome = Ok(Proposal {
            joint: vec![0, 2],
            predicted_utility: Some(0.5),
            predicted_throughput: None,
        });
        let reloads = ReloadCounts {
            loaded: 1,
            rejected: 2,
        };
        // Four attempts are kept, three counted (a removed file is not a
        // reload): the newest three are the events, oldest first.
        let attempts = || {
            let event = |file: &str, outcome| ReloadEvent {
                path: std::path::PathBuf::from("/plugins").join(file),
                outcome,
            };
            vec![
                event(
                    "old.wasm",
                    ReloadOutcome::Rejected {
                        reason: "before this tick".into(),
                        running: true,
                    },
                ),
                event(
                    "live.wasm",
                    ReloadOutcome::Swapped {
                        name: "live".into(),
                        world: mfsched_plugin_host::World::Policy,
                        sha256: "ab".repeat(32),
                    },
                ),
                event("gone.wasm", ReloadOutcome::Removed),
                event(
                    "broken.wasm",
                    ReloadOutcome::Rejected {
                        reason: "not a component".into(),
                        running: false,
                    },
                ),
                event(
                    "live.wasm",
                    ReloadOutcome::Rejected {
                        reason: "its self-check failed".into(),
                        running: true,
                    },
                ),
            ]
        };
        history.record(
            &problem,
            &answered,
            utility(),
            Measured::default(),
            reloads,
            attempts,
        );
        history.record(
            &problem,
            &answered,
            utility(),
            Measured::default(),
            reloads,
            || unreachable!("the counters did not grow"),
        );
        let all = history.since(None, 0);
        let kinds: Vec<&str> = all.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                "failing",
                "reload",
                "reload-rejected",
                "reload-rejected",
                "recovered"
            ]
        );
        assert!(all.events[0].message.contains("deadline: over 5 ms"));
        assert_eq!(
            all.events[1].message,
            "hot reload: live replaced by live.wasm (abababababab)"
        );
        assert_eq!(
            all.events[2].message,
            "hot reload: broken.wasm rejected, nothing added: not a component"
        );
        assert_eq!(
            all.events[3].message,
            "hot reload: live.wasm rejected, the running plugin kept: its self-check failed"
        );
        let other = &all.totals["other"];
        assert_eq!(
            (other.decisions, other.failures, other.differing),
            (2, 1, 2)
        );
        assert_eq!(other.cumulative_utility, 1.0);
        assert_eq!(all.totals["hold"].decisions, 3);
        assert!(all.ticks[1].policies[1].differs && !all.ticks[1].policies[0].differs);
        assert_eq!(all.ticks[0].running.len(), problem.models.len());
        assert_eq!(all.ticks[0].utility, "utility@0123456789ab");
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character_boundary() {
        let long = "é".repeat(REASON_CHARS + 5);
        let cut = cut(&long);
        assert_eq!(cut.chars().count(), REASON_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(super::cut("short"), "short");
    }
}
