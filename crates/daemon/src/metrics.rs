//! Daemon metrics and their Prometheus text exposition (format 0.0.4), written by
//! hand: a few counters, gauges and one histogram family need no crate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use mfsched_core::Problem;
use mfsched_plugin_host::FailureKind;
use mfsched_plugin_host::ReloadCounts;

/// Upper bounds of the decision-latency histogram, seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Upper bounds of the reconfiguration-downtime histogram, seconds.
const DOWNTIME_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Active,
    Shadow,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Shadow => "shadow",
        }
    }
}

#[derive(Debug, Clone)]
struct Histogram<const N: usize = { LATENCY_BUCKETS.len() }> {
    bounds: &'static [f64; N],
    counts: [u64; N],
    count: u64,
    sum: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new(&LATENCY_BUCKETS)
    }
}

impl<const N: usize> Histogram<N> {
    fn new(bounds: &'static [f64; N]) -> Self {
        Self {
            bounds,
            counts: [0; N],
            count: 0,
            sum: 0.0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        for (bound, c) in self.bounds.iter().zip(&mut self.counts) {
            if seconds <= *bound {
                *c += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }
}

#[derive(Debug, Default)]
struct Inner {
    ticks: u64,
    missed_ticks: u64,
    decisions: BTreeMap<(String, Role), u64>,
    failures: BTreeMap<(String, FailureKind), u64>,
    latency: BTreeMap<String, Histogram>,
    predicted_utility: BTreeMap<String, f64>,
    sla_violations: BTreeMap<String, u64>,
    floors_held: BTreeMap<String, u64>,
    state_held: u64,
    kept_last_valid: u64,
    model_changes: u64,
    actuator_sent: BTreeMap<String, u64>,
    actuator_failures: BTreeMap<String, u64>,
    /// Per (model, actuator): request-to-ready time of each reconfiguration.
    downtime: BTreeMap<(String, String), Histogram<{ DOWNTIME_BUCKETS.len() }>>,
    reconfig_failures: BTreeMap<(String, String), u64>,
    process_restarts: BTreeMap<String, u64>,
    policy_swaps: u64,
    log_write_failures: u64,
    api_connections_refused: u64,
    api_connections_evicted: u64,
    load_read_failures: BTreeMap<String, u64>,
    load_fallback_ticks: BTreeMap<&'static str, u64>,
    /// The last tick's load: level ordinal, observed ratio, forecast ratio.
    workload_level: Option<usize>,
    load_ratio: Option<f64>,
    load_forecast: Option<f64>,
    /// The last tick's throughput each model's server reported, where it did.
    measured_throughput: BTreeMap<String, f64>,
    /// Per model: the online correction of the running configuration
    /// (factor, recent measured / predicted ratio, drifting).
    correction: BTreeMap<String, mfsched_core::ModelCorrection>,
    /// Readings the correction skipped as not positive and finite, this run.
    correction_rejected: u64,
    drift_alarms: BTreeMap<String, u64>,
    /// Per model: configurations its floor forced out and the correction remembered.
    floor_forced_out: BTreeMap<String, u64>,
    /// Per model: its floor as declared and as decisions enforce it.
    floors: Vec<(String, f64, f64)>,
    /// Per model: ticks whose measured throughput was under its declared floor.
    measured_floor_misses: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// A consistent copy of the counters tests and the API read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub ticks: u64,
    pub missed_ticks: u64,
    pub kept_last_valid: u64,
    pub policy_swaps: u64,
    pub log_write_failures: u64,
    pub api_connections_refused: u64,
    pub api_connections_evicted: u64,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the counters inconsistent
        // in a way worth refusing to report, so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn tick(&self, missed_before: u64) {
        let mut m = self.lock();
        m.ticks += 1;
        m.missed_ticks += missed_before;
    }

    pub fn decided(&self, policy: &str, role: Role, latency: Duration, utility: Option<f64>) {
        let mut m = self.lock();
        *m.decisions.entry((policy.to_owned(), role)).or_default() += 1;
        m.latency
            .entry(policy.to_owned())
            .or_default()
            .observe(latency.as_secs_f64());
        if let Some(u) = utility {
            m.predicted_utility.insert(policy.to_owned(), u);
        }
    }

    pub fn failed(&self, policy: &str, kind: FailureKind, latency: Duration) {
        let mut m = self.lock();
        *m.failures.entry((policy.to_owned(), kind)).or_default() += 1;
        m.latency
            .entry(policy.to_owned())
            .or_default()
            .observe(latency.as_secs_f64());
    }

    pub fn kept_last_valid(&self) {
        self.lock().kept_last_valid += 1;
    }

    pub fn sla_violation(&self, model: &str) {
        *self
            .lock()
            .sla_violations
            .entry(model.to_owned())
            .or_default() += 1;
    }

    /// A tick decided on the last steady state (its reading was a
    /// reconfiguration's).
    pub fn state_held(&self) {
        self.lock().state_held += 1;
    }

    /// A tick decided with `model`'s floor held at the edge of its reach.
    pub fn floor_held(&self, model: &str) {
        *self.lock().floors_held.entry(model.to_owned()).or_default() += 1;
    }

    pub fn model_changes(&self, n: usize) {
        self.lock().model_changes += n as u64;
    }

    pub fn actuator_result(&self, actuator: &str, ok: bool) {
        let mut m = self.lock();
        let map = if ok {
            &mut m.actuator_sent
        } else {
            &mut m.actuator_failures
        };
        *map.entry(actuator.to_owned()).or_default() += 1;
    }

    /// An API connection closed on accept: the connection cap was reached.
    /// A reconfiguration finished (`ok`: the new configuration serves),
    /// `downtime` after it was asked for.
    pub fn reconfigured(&self, model: &str, actuator: &str, downtime: Duration, ok: bool) {
        let mut m = self.lock();
        let key = (model.to_owned(), actuator.to_owned());
        if ok {
            m.downtime
                .entry(key)
                .or_insert_with(|| Histogram::new(&DOWNTIME_BUCKETS))
                .observe(downtime.as_secs_f64());
        } else {
            *m.reconfig_failures.entry(key).or_default() += 1;
        }
        drop(m);
        self.actuator_result(actuator, ok);
    }

    /// A supervised process exited on its own and is being started again.
    pub fn process_restarted(&self, model: &str) {
        *self
            .lock()
            .process_restarts
            .entry(model.to_owned())
            .or_default() += 1;
    }

    pub fn api_connection_refused(&self) {
        self.lock().api_connections_refused += 1;
    }

    pub fn api_connection_evicted(&self) {
        self.lock().api_connections_evicted += 1;
    }

    /// A tick record the decision log could not take (the tick itself went on).
    pub fn log_write_failed(&self) {
        self.lock().log_write_failures += 1;
    }

    /// A load reading that failed (unreachable, timed out, too large, unparsable).
    pub fn load_read_failed(&self, model: &str) {
        *self
            .lock()
            .load_read_failures
            .entry(model.to_owned())
            .or_default() += 1;
    }

    /// The load a tick decided on: its level, the observed and forecast load
    /// ratios when the source measures one, and the fallback it used, if any.
    pub fn load(
        &self,
        level: mfsched_core::WorkloadLevel,
        observed: Option<f64>,
        forecast: Option<f64>,
        fallback: Option<&'static str>,
    ) {
        let mut m = self.lock();
        m.workload_level = Some(level.ordinal());
        m.load_ratio = observed;
        m.load_forecast = forecast;
        if let Some(kind) = fallback {
            *m.load_fallback_ticks.entry(kind).or_default() += 1;
        }
    }

    /// The throughput the servers reported for the tick (per scenario model;
    /// a model without a recent reading drops out of the gauge).
    pub fn measured_throughput(&self, problem: &Problem, measured: &[Option<f64>]) {
        self.lock().measured_throughput = problem
            .models
            .iter()
            .zip(measured)
            .filter_map(|(m, t)| Some((m.name.clone(), (*t)?)))
            .collect();
    }

    /// Every model's floor, declared and enforced (set once at start-up).
    pub fn floors(&self, problem: &Problem, floors: &mfsched_core::Floors) {
        self.lock().floors = problem
            .models
            .iter()
            .zip(floors.declared.iter().zip(floors.enforced()))
            .map(|(m, (&declared, &enforced))| (m.name.clone(), declared, enforced))
            .collect();
    }

    /// A tick measured these models under their declared floors.
    pub fn measured_floor_misses(&self, problem: &Problem, models: &[usize]) {
        let mut m = self.lock();
        for &i in models {
            *m.measured_floor_misses
                .entry(problem.models[i].name.clone())
                .or_default() += 1;
        }
    }

    /// Where the online correction stands for each model (see
    /// `mfsched_core::Corrected`).
    pub fn correction(&self, problem: &Problem, models: &[mfsched_core::ModelCorrection]) {
        self.lock().correction = problem
            .models
            .iter()
            .zip(models)
            .filter(|(_, c)| c.observations > 0)
            .map(|(m, c)| (m.name.clone(), *c))
            .collect();
    }

    /// Readings the online correction skipped so far (a server that served
    /// nothing, a prediction that was not a positive number).
    pub fn correction_rejected(&self, readings: u64) {
        self.lock().correction_rejected = readings;
    }

    /// A model's floor forced it out of a configuration, which the correction
    /// now remembers.
    pub fn floor_forced_out(&self, model: &str) {
        *self
            .lock()
            .floor_forced_out
            .entry(model.to_owned())
            .or_default() += 1;
    }

    /// A model started drifting.
    pub fn drift_alarm(&self, model: &str) {
        *self
            .lock()
            .drift_alarms
            .entry(model.to_owned())
            .or_default() += 1;
    }

    pub fn load_fallback_ticks(&self, kind: &str) -> u64 {
        self.lock()
            .load_fallback_ticks
            .get(kind)
            .copied()
            .unwrap_or(0)
    }

    pub fn policy_swapped(&self) {
        self.lock().policy_swaps += 1;
    }

    pub fn counts(&self) -> Counts {
        let m = self.lock();
        Counts {
            ticks: m.ticks,
            missed_ticks: m.missed_ticks,
            kept_last_valid: m.kept_last_valid,
            policy_swaps: m.policy_swaps,
            log_write_failures: m.log_write_failures,
            api_connections_refused: m.api_connections_refused,
            api_connections_evicted: m.api_connections_evicted,
        }
    }

    /// Failed deliveries and reconfigurations of every actuator.
    pub fn actuator_failures_total(&self) -> u64 {
        self.lock().actuator_failures.values().sum()
    }

    pub fn actuator_failures(&self, actuator: &str) -> u64 {
        self.lock()
            .actuator_failures
            .get(actuator)
            .copied()
            .unwrap_or(0)
    }

    /// The Prometheus text exposition. `reloads` comes from the decider.
    pub fn render(&self, reloads: ReloadCounts) -> String {
        let m = self.lock();
        let mut out = String::new();
        let section = |out: &mut String, name: &str, kind: &str, help: &str, body: Vec<String>| {
            writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}").ok();
            for line in body {
                writeln!(out, "{line}").ok();
            }
        };
        section(
            &mut out,
            "mfsched_ticks_total",
            "counter",
            "Decision ticks run.",
            vec![format!("mfsched_ticks_total {}", m.ticks)],
        );
        section(
            &mut out,
            "mfsched_missed_ticks_total",
            "counter",
            "Ticks that could not start on time.",
            vec![format!("mfsched_missed_ticks_total {}", m.missed_ticks)],
        );
        section(
            &mut out,
            "mfsched_decisions_total",
            "counter",
            "Valid decisions per policy and role (active or shadow).",
            m.decisions
                .iter()
                .map(|((p, r), c)| {
                    format!(
                        "mfsched_decisions_total{{policy=\"{}\",role=\"{}\"}} {c}",
                        escape_label_value(p),
                        r.as_str()
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_decision_failures_total",
            "counter",
            "Failed decisions per policy and reason.",
            m.failures
                .iter()
                .map(|((p, k), c)| {
                    format!(
                        "mfsched_decision_failures_total{{policy=\"{}\",reason=\"{}\"}} {c}",
                        escape_label_value(p),
                        k.as_str()
                    )
                })
                .collect(),
        );
        let mut hist = Vec::new();
        for (p, h) in &m.latency {
            let p = escape_label_value(p);
            for (bound, c) in LATENCY_BUCKETS.iter().zip(&h.counts) {
                hist.push(format!(
                    "mfsched_decision_latency_seconds_bucket{{policy=\"{p}\",le=\"{bound}\"}} {c}"
                ));
            }
            hist.push(format!(
                "mfsched_decision_latency_seconds_bucket{{policy=\"{p}\",le=\"+Inf\"}} {}",
                h.count
            ));
            hist.push(format!(
                "mfsched_decision_latency_seconds_sum{{policy=\"{p}\"}} {}",
                h.sum
            ));
            hist.push(format!(
                "mfsched_decision_latency_seconds_count{{policy=\"{p}\"}} {}",
                h.count
            ));
        }
        section(
            &mut out,
            "mfsched_decision_latency_seconds",
            "histogram",
            "Time from asking a policy to its answer (or to the deadline).",
            hist,
        );
        section(
            &mut out,
            "mfsched_predicted_utility",
            "gauge",
            "The utility each policy last predicted for its own decision.",
            m.predicted_utility
                .iter()
                .map(|(p, u)| {
                    format!(
                        "mfsched_predicted_utility{{policy=\"{}\"}} {}",
                        escape_label_value(p),
                        number(*u)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_kept_last_valid_total",
            "counter",
            "Ticks where the active policy failed and the last valid configuration was kept.",
            vec![format!(
                "mfsched_kept_last_valid_total {}",
                m.kept_last_valid
            )],
        );
        section(
            &mut out,
            "mfsched_api_connections_refused_total",
            "counter",
            "API connections closed on accept: api.max_connections were open, each in the middle of a request.",
            vec![format!(
                "mfsched_api_connections_refused_total {}",
                m.api_connections_refused
            )],
        );
        section(
            &mut out,
            "mfsched_api_connections_evicted_total",
            "counter",
            "API connections closed before their request's headers had arrived, to make room for a newer one at api.max_connections.",
            vec![format!(
                "mfsched_api_connections_evicted_total {}",
                m.api_connections_evicted
            )],
        );
        section(
            &mut out,
            "mfsched_log_write_failures_total",
            "counter",
            "Tick records the decision log could not write (the daemon kept deciding).",
            vec![format!(
                "mfsched_log_write_failures_total {}",
                m.log_write_failures
            )],
        );
        section(
            &mut out,
            "mfsched_sla_violations_total",
            "counter",
            "Ticks that kept a configuration (the active policy failed) predicted under a model's floor: a valid decision never is.",
            m.sla_violations
                .iter()
                .map(|(model, c)| {
                    format!(
                        "mfsched_sla_violations_total{{model=\"{}\"}} {c}",
                        escape_label_value(model)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_state_held_ticks_total",
            "counter",
            "Ticks that decided on the last state read while no reconfiguration was in flight: their own reading was taken during one (a server reloading or restarting), or over a period in which one finished.",
            vec![format!("mfsched_state_held_ticks_total {}", m.state_held)],
        );
        section(
            &mut out,
            "mfsched_floor_out_of_reach_ticks_total",
            "counter",
            "Ticks at whose state no configuration of a model was predicted to meet its (enforced) floor, or only within the reach band of its best, decided with that floor held at the band's edge ([floors] out_of_reach = \"best-effort\").",
            m.floors_held
                .iter()
                .map(|(model, c)| {
                    format!(
                        "mfsched_floor_out_of_reach_ticks_total{{model=\"{}\"}} {c}",
                        escape_label_value(model)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_model_changes_total",
            "counter",
            "Model configurations changed and handed to the actuators.",
            vec![format!("mfsched_model_changes_total {}", m.model_changes)],
        );
        section(
            &mut out,
            "mfsched_actuator_sent_total",
            "counter",
            "Configurations an actuator delivered.",
            m.actuator_sent
                .iter()
                .map(|(a, c)| {
                    format!(
                        "mfsched_actuator_sent_total{{actuator=\"{}\"}} {c}",
                        escape_label_value(a)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_actuator_failures_total",
            "counter",
            "Configurations an actuator failed to deliver (after retries).",
            m.actuator_failures
                .iter()
                .map(|(a, c)| {
                    format!(
                        "mfsched_actuator_failures_total{{actuator=\"{}\"}} {c}",
                        escape_label_value(a)
                    )
                })
                .collect(),
        );
        let mut hist = Vec::new();
        for ((model, actuator), h) in &m.downtime {
            let labels = format!(
                "model=\"{}\",actuator=\"{}\"",
                escape_label_value(model),
                escape_label_value(actuator)
            );
            for (bound, c) in h.bounds.iter().zip(&h.counts) {
                hist.push(format!(
                    "mfsched_reconfiguration_downtime_seconds_bucket{{{labels},le=\"{bound}\"}} {c}"
                ));
            }
            hist.push(format!(
                "mfsched_reconfiguration_downtime_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                h.count
            ));
            hist.push(format!(
                "mfsched_reconfiguration_downtime_seconds_sum{{{labels}}} {}",
                h.sum
            ));
            hist.push(format!(
                "mfsched_reconfiguration_downtime_seconds_count{{{labels}}} {}",
                h.count
            ));
        }
        section(
            &mut out,
            "mfsched_reconfiguration_downtime_seconds",
            "histogram",
            "Request-to-ready time of each reconfiguration that took, per model and actuator (v2-repository, process).",
            hist,
        );
        section(
            &mut out,
            "mfsched_reconfiguration_failures_total",
            "counter",
            "Reconfigurations that did not take (the previous configuration kept), per model and actuator.",
            m.reconfig_failures
                .iter()
                .map(|((model, a), c)| {
                    format!(
                        "mfsched_reconfiguration_failures_total{{model=\"{}\",actuator=\"{}\"}} {c}",
                        escape_label_value(model),
                        escape_label_value(a)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_actuator_restarts_total",
            "counter",
            "Supervised server processes that exited on their own and were started again, per model.",
            m.process_restarts
                .iter()
                .map(|(model, c)| {
                    format!(
                        "mfsched_actuator_restarts_total{{model=\"{}\"}} {c}",
                        escape_label_value(model)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_policy_swaps_total",
            "counter",
            "Active-policy swaps through the API.",
            vec![format!("mfsched_policy_swaps_total {}", m.policy_swaps)],
        );
        section(
            &mut out,
            "mfsched_plugin_reloads_total",
            "counter",
            "Policies reloaded from the plugin directory.",
            vec![format!("mfsched_plugin_reloads_total {}", reloads.loaded)],
        );
        section(
            &mut out,
            "mfsched_plugin_reload_rejections_total",
            "counter",
            "Reloads from the plugin directory rejected (the running plugin kept).",
            vec![format!(
                "mfsched_plugin_reload_rejections_total {}",
                reloads.rejected
            )],
        );
        section(
            &mut out,
            "mfsched_workload_level",
            "gauge",
            "The load regime the last tick decided for (0 low, 1 medium, 2 high, 3 burst).",
            m.workload_level
                .map(|l| format!("mfsched_workload_level {l}"))
                .into_iter()
                .collect(),
        );
        section(
            &mut out,
            "mfsched_load_ratio",
            "gauge",
            "Offered load over the reference rate, mean over the models, as last read.",
            m.load_ratio
                .map(|r| format!("mfsched_load_ratio {}", number(r)))
                .into_iter()
                .collect(),
        );
        section(
            &mut out,
            "mfsched_load_forecast_ratio",
            "gauge",
            "The load ratio forecast for the next period (what the regime is chosen from).",
            m.load_forecast
                .map(|r| format!("mfsched_load_forecast_ratio {}", number(r)))
                .into_iter()
                .collect(),
        );
        section(
            &mut out,
            "mfsched_measured_throughput",
            "gauge",
            "Throughput a model's server reports (its throughput counter's rate, in the model's unit per second), as last read.",
            m.measured_throughput
                .iter()
                .map(|(model, t)| {
                    format!(
                        "mfsched_measured_throughput{{model=\"{}\"}} {}",
                        escape_label_value(model),
                        number(*t)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_sla_floor",
            "gauge",
            "A model's throughput floor: as declared (kind=\"declared\", what measurements are held to) and as decisions enforce it on the prediction (kind=\"enforced\": raised by the split-conformal margin of [floors] miss_rate).",
            m.floors
                .iter()
                .flat_map(|(model, declared, enforced)| {
                    let model = escape_label_value(model);
                    [
                        format!(
                            "mfsched_sla_floor{{model=\"{model}\",kind=\"declared\"}} {}",
                            number(*declared)
                        ),
                        format!(
                            "mfsched_sla_floor{{model=\"{model}\",kind=\"enforced\"}} {}",
                            number(*enforced)
                        ),
                    ]
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_measured_floor_misses_total",
            "counter",
            "Ticks whose measured throughput (what ran since the tick before) was under the model's declared floor.",
            m.measured_floor_misses
                .iter()
                .map(|(model, n)| {
                    format!(
                        "mfsched_measured_floor_misses_total{{model=\"{}\"}} {n}",
                        escape_label_value(model)
                    )
                })
                .collect(),
        );
        let per_model = |value: &dyn Fn(&mfsched_core::ModelCorrection) -> Option<f64>,
                         name: &str| {
            m.correction
                .iter()
                .filter_map(|(model, c)| {
                    Some(format!(
                        "{name}{{model=\"{}\"}} {}",
                        escape_label_value(model),
                        number(value(c)?)
                    ))
                })
                .collect::<Vec<_>>()
        };
        section(
            &mut out,
            "mfsched_prediction_correction",
            "gauge",
            "The factor the online correction multiplies the running configuration's predictions by, per model (1: none).",
            per_model(&|c| Some(c.running_factor), "mfsched_prediction_correction"),
        );
        section(
            &mut out,
            "mfsched_measured_over_predicted",
            "gauge",
            "The recent mean ratio of measured to (uncorrected) predicted throughput, per model.",
            per_model(&|c| c.recent_ratio, "mfsched_measured_over_predicted"),
        );
        section(
            &mut out,
            "mfsched_prediction_drift",
            "gauge",
            "1 while a model's measurements disagree with the surrogate beyond twice its held-out error, else 0.",
            per_model(
                &|c| Some(f64::from(u8::from(c.drifting))),
                "mfsched_prediction_drift",
            ),
        );
        section(
            &mut out,
            "mfsched_correction_rejected_readings_total",
            "counter",
            "Readings the online correction skipped: a measured or predicted throughput that was not positive and finite (a server that served nothing).",
            vec![format!(
                "mfsched_correction_rejected_readings_total {}",
                m.correction_rejected
            )],
        );
        section(
            &mut out,
            "mfsched_prediction_drift_alarms_total",
            "counter",
            "Times a model started drifting.",
            m.drift_alarms
                .iter()
                .map(|(model, n)| {
                    format!(
                        "mfsched_prediction_drift_alarms_total{{model=\"{}\"}} {n}",
                        escape_label_value(model)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_floor_forced_out_total",
            "counter",
            "Times a model left a configuration while its floor was predicted unmet there, which the online correction then predicts at most that while the load stays as high ([correction] forced_out_ticks).",
            m.floor_forced_out
                .iter()
                .map(|(model, n)| {
                    format!(
                        "mfsched_floor_forced_out_total{{model=\"{}\"}} {n}",
                        escape_label_value(model)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_load_read_failures_total",
            "counter",
            "Load readings that failed, per model (unreachable, timed out, too large, unparsable, no series).",
            m.load_read_failures
                .iter()
                .map(|(model, c)| {
                    format!(
                        "mfsched_load_read_failures_total{{model=\"{}\"}} {c}",
                        escape_label_value(model)
                    )
                })
                .collect(),
        );
        section(
            &mut out,
            "mfsched_load_fallback_ticks_total",
            "counter",
            "Ticks decided on a fallback load: held (a stale reading within workload.prometheus.stale_ms) or safe (workload.prometheus.safe_level).",
            m.load_fallback_ticks
                .iter()
                .map(|(kind, c)| {
                    format!("mfsched_load_fallback_ticks_total{{kind=\"{kind}\"}} {c}")
                })
                .collect(),
        );
        out
    }
}

/// Sample values as the exposition format spells them (`+Inf`, `-Inf`, `NaN`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        v.to_string()
    }
}

/// A label value as the exposition format writes it: backslash, double quote
/// and newline escaped. A double-quoted PromQL string takes the same escapes.
pub fn escape_label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_histogram_buckets_failures_and_escaped_labels() {
        let m = Metrics::default();
        m.tick(0);
        m.tick(2);
        m.decided("ga", Role::Active, Duration::from_micros(700), Some(0.8));
        m.failed("we\"ird", FailureKind::Deadline, Duration::from_millis(6));
        let text = m.render(ReloadCounts {
            loaded: 3,
            rejected: 2,
        });
        assert!(text.contains("mfsched_ticks_total 2\n"), "{text}");
        assert!(text.contains("mfsched_missed_ticks_total 2\n"), "{text}");
        assert!(text.contains("mfsched_decisions_total{policy=\"ga\",role=\"active\"} 1"));
        assert!(
            text.contains("mfsched_decision_latency_seconds_bucket{policy=\"ga\",le=\"0.0005\"} 0")
        );
        assert!(
            text.contains("mfsched_decision_latency_seconds_bucket{policy=\"ga\",le=\"0.001\"} 1")
        );
        assert!(
            text.contains(
                "mfsched_decision_failures_total{policy=\"we\\\"ird\",reason=\"deadline\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("mfsched_predicted_utility{policy=\"ga\"} 0.8"));
        m.decided(
            "hold",
            Role::Shadow,
            Duration::ZERO,
            Some(f64::NEG_INFINITY),
        );
        assert!(
            m.render(ReloadCounts::default())
                .contains("mfsched_predicted_utility{policy=\"hold\"} -Inf")
        );
        assert!(text.contains("mfsched_plugin_reloads_total 3"));
        assert!(text.contains("mfsched_plugin_reload_rejections_total 2"));
        // Every sample line belongs to a family announced by a TYPE line.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().expect("name");
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(text.contains(&format!("# TYPE {base} ")), "{line}");
        }
    }
}
