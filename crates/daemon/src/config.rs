//! The daemon's configuration file (`mfsched run --config mfsched.toml`).
//!
//! Every key is documented in `examples/mfsched.toml` (embedded as
//! [`EXAMPLE`]: `mfsched run --print-config` prints it); unknown keys are
//! rejected so that a typo never silently falls back to a default.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::forecast::ForecastKind;

/// The documented example configuration, every key with its default or an
/// example value.
pub const EXAMPLE: &str = include_str!("../../../examples/mfsched.toml");

use mfsched_core::WorkloadLevel;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// A bundled scenario name or a path to a scenario `.toml` (the model set).
    pub scenario: String,
    /// Seed for everything random in the daemon (workload traces).
    #[serde(default)]
    pub seed: u64,
    #[serde(rename = "loop", default)]
    pub tick: TickConfig,
    pub policy: PolicyConfig,
    #[serde(default)]
    pub sampler: SamplerConfig,
    #[serde(default)]
    pub workload: WorkloadConfig,
    #[serde(default)]
    pub actuator: ActuatorConfig,
    pub log: LogConfig,
    #[serde(default)]
    pub api: ApiConfig,
    /// `[correction]`: the online correction of predictions from measured
    /// throughput (on by default; it learns only where throughput is measured).
    #[serde(default)]
    pub correction: mfsched_core::CorrectionConfig,
    /// `[floors]`: how decisions enforce the SLA floors.
    #[serde(default)]
    pub floors: FloorsConfig,
}

/// `[floors]`: with `miss_rate` α > 0 (by default 0.05, the value measured in
/// docs/production.md), decisions hold each floor on a split-conformal lower
/// bound of the prediction, so that measured throughput misses it in at most
/// a share α of ticks where the surrogate errs as it did on the bundle's
/// held-out rows (`mfsched_core::Floors`). A raised floor can sit above what
/// the running configuration gives; keeping it is still a valid decision
/// (`mfsched_plugin_host::validate`), so hold and a plugin's self-check on the
/// running state are not refused for it.
///
/// `out_of_reach` says what a tick does when some model's (enforced) floor
/// is above every prediction of its configurations at the tick's state:
/// `best-effort` (the default) holds that floor at the edge of what the model
/// is predicted to reach (`mfsched_core::floors_within_reach`), so the tick
/// decides with it given about its best and every other floor met; `keep`
/// refuses every decision, so whatever ran keeps running (the strict reading;
/// on the rig at N = 3 it refused 308 of 407 ticks).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FloorsConfig {
    /// α in [0, 0.5]; 0: floors on the point prediction.
    pub miss_rate: f64,
    pub out_of_reach: mfsched_core::OutOfReach,
}

impl Default for FloorsConfig {
    fn default() -> Self {
        Self {
            miss_rate: mfsched_core::DEFAULT_FLOOR_MISS_RATE,
            out_of_reach: mfsched_core::OutOfReach::BestEffort,
        }
    }
}

impl FloorsConfig {
    /// The miss rate margins are taken at; `None` for point floors (and for
    /// a value `check` refuses).
    pub fn margins_at(&self) -> Option<f64> {
        mfsched_core::floor_miss_rate(self.miss_rate).ok().flatten()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TickConfig {
    /// Decision period.
    #[serde(default = "default_period_ms")]
    pub period_ms: u64,
    /// Time a policy has to decide; must be shorter than the period.
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: u64,
}

fn default_period_ms() -> u64 {
    1000
}
fn default_deadline_ms() -> u64 {
    200
}

impl Default for TickConfig {
    fn default() -> Self {
        Self {
            period_ms: default_period_ms(),
            deadline_ms: default_deadline_ms(),
        }
    }
}

impl TickConfig {
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms)
    }
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The policy whose decisions are applied.
    pub active: String,
    /// Policies that decide on the same state every tick, recorded but never applied.
    #[serde(default)]
    pub shadows: Vec<String>,
    /// The utility component the policies optimise (resolved by the plugin host).
    #[serde(default)]
    pub utility: Option<String>,
    /// The utility's parameters (`{ throughput-weight = 0.5 }`: a TOML number or string), checked
    /// at start-up against what it declares; a hot-swapped build of the same
    /// utility gets them too.
    #[serde(default)]
    pub utility_params: BTreeMap<String, ParamValue>,
    /// Directory of on-disk policy components, watched for hot reload (plugin host).
    #[serde(default)]
    pub plugin_dir: Option<PathBuf>,
    /// Directory of trained surrogate bundles the policies predict with (plugin host).
    #[serde(default)]
    pub bundle_dir: Option<PathBuf>,
    /// The field the surrogate's joint predictions are made under.
    #[serde(default)]
    pub field: mfsched_core::Field,
    /// The configuration a model starts in, by its label as the dashboard
    /// and `/v1/history` show it (`fp32 max_batch_size=8 threads=1`): what
    /// its servers run when the daemon starts, so the first ticks decide from
    /// it (and the v2-repository and process actuators bring it up). A model
    /// not named starts in its least-memory configuration.
    #[serde(default)]
    pub start: BTreeMap<String, String>,
}

/// A component parameter's value as TOML writes it: components take text,
/// so a number or a boolean is passed as TOML prints it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    Text(String),
    Integer(i64),
    Real(f64),
    Bool(bool),
}

impl std::fmt::Display for ParamValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamValue::Text(s) => f.write_str(s),
            ParamValue::Integer(i) => write!(f, "{i}"),
            ParamValue::Real(r) => write!(f, "{r}"),
            ParamValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

impl PolicyConfig {
    /// `policy.utility_params` as the key/value pairs a component gets.
    pub fn utility_params(&self) -> Vec<(String, String)> {
        self.utility_params
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SamplerKind {
    /// The GPU through NVML.
    Nvml,
    /// The shared-GPU simulator.
    Sim,
    /// No measurement: VRAM from the applied configuration's modelled footprint.
    Footprint,
    /// A CPU host: the servers' CPU time and the memory they hold (`[sampler.host]`).
    Host,
    /// A DCGM exporter's `/metrics` page (`[sampler.dcgm]`): DCGM's fields,
    /// profiling ones included, as a cluster's monitoring reads them.
    Dcgm,
}

impl SamplerKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "nvml" => Some(Self::Nvml),
            "sim" => Some(Self::Sim),
            "footprint" => Some(Self::Footprint),
            "host" => Some(Self::Host),
            "dcgm" => Some(Self::Dcgm),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplerConfig {
    #[serde(default = "default_sampler")]
    pub kind: SamplerKind,
    /// NVML device index.
    #[serde(default)]
    pub device: u32,
    /// When NVML is absent, run on the fallback sampler instead of failing.
    #[serde(default)]
    pub allow_fallback: bool,
    /// The sampler used when NVML is absent and `allow_fallback` is set.
    #[serde(default = "default_fallback")]
    pub fallback: SamplerKind,
    /// Utilisation assumed when the sampler cannot give one (footprint sampler).
    #[serde(default = "default_unknown_utilization")]
    pub unknown_utilization: f64,
    /// The time, ms, the contention reading is averaged over before a
    /// decision reads it (an exponential average with this time constant; 0:
    /// each tick's raw reading). A bundle learns the reading from profile rows,
    /// each a mean over a window (`profile --live --window-ms`, 5000 by
    /// default); decisions that follow a one-tick reading move with its noise.
    #[serde(default = "default_contention_window_ms")]
    pub contention_window_ms: u64,
    /// What the host sampler measures (`kind = "host"`).
    #[serde(default)]
    pub host: HostSamplerConfig,
    /// Where the DCGM sampler reads (`kind = "dcgm"`).
    #[serde(default)]
    pub dcgm: Option<DcgmSamplerConfig>,
}

/// `[sampler.dcgm]`: a DCGM exporter's page, read for card `sampler.device`
/// (its `gpu` label).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcgmSamplerConfig {
    /// The exporter's page, `http://HOST:PORT/metrics`.
    pub url: String,
    /// How often the page is read, ms.
    #[serde(default = "default_dcgm_poll_ms")]
    pub poll_ms: u64,
    /// How long one read may take, ms (at most `poll_ms`).
    #[serde(default = "default_dcgm_timeout_ms")]
    pub timeout_ms: u64,
    /// How old the newest reading may be for a tick to use it, ms.
    #[serde(default = "default_dcgm_stale_ms")]
    pub stale_ms: u64,
    /// The largest page read, bytes.
    #[serde(default = "default_dcgm_max_bytes")]
    pub max_bytes: usize,
}

fn default_dcgm_poll_ms() -> u64 {
    1000
}
fn default_dcgm_timeout_ms() -> u64 {
    800
}
fn default_dcgm_stale_ms() -> u64 {
    5000
}
fn default_dcgm_max_bytes() -> usize {
    4 << 20
}

impl DcgmSamplerConfig {
    /// Checks what parsing alone can: one line naming the key.
    pub fn check(&self) -> Result<()> {
        check_http_url("sampler.dcgm.url", &self.url)?;
        if self.poll_ms == 0 || self.timeout_ms == 0 || self.timeout_ms > self.poll_ms {
            bail!("sampler.dcgm: poll_ms must be positive and timeout_ms in 1..=poll_ms");
        }
        if self.stale_ms < self.poll_ms {
            bail!("sampler.dcgm.stale_ms must be at least poll_ms (every reading would be stale)");
        }
        if self.max_bytes == 0 || self.max_bytes > 64 << 20 {
            bail!("sampler.dcgm.max_bytes must be in 1..=67108864");
        }
        Ok(())
    }
}

/// Where the host sampler reads the servers' CPU use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostCpuSource {
    /// The selected processes' CPU time (`/proc/PID/stat`), over the `cpus` cores.
    Processes,
    /// The cgroup's CPU time (`cpu.stat` usage_usec, or v1 `cpuacct.usage`), over the `cpus` cores.
    Cgroup,
    /// The busy share of the `cpus` cores (`/proc/stat`), whoever runs there.
    Cpus,
}

/// Where the host sampler reads the memory the servers hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostMemorySource {
    /// The sum of the selected processes' resident set (`VmRSS` of `/proc/PID/status`).
    Processes,
    /// The cgroup's `memory.current` (v1: `memory.usage_in_bytes`).
    Cgroup,
}

/// `[sampler.host]`: the servers on a CPU box, observed as NVML observes a card.
/// The processes are `pids`, the PIDs in `pid_files` (re-read every sample, so a
/// restarted server is followed) and every process whose argv[0] or argv[1] has
/// a basename in `commands` (so `python …/mlserver start` matches `mlserver`);
/// with `include_children`, their descendants too (server workers).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSamplerConfig {
    #[serde(default = "default_host_cpu")]
    pub cpu: HostCpuSource,
    #[serde(default = "default_host_memory")]
    pub memory: HostMemorySource,
    /// The servers' cores, in Linux cpu-list syntax ("0-3,6"); unset: every core.
    #[serde(default)]
    pub cpus: Option<String>,
    /// A cgroup directory (v2 or v1), for `cpu`/`memory` = "cgroup".
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
    #[serde(default)]
    pub pids: Vec<u32>,
    #[serde(default)]
    pub pid_files: Vec<PathBuf>,
    #[serde(default)]
    pub commands: Vec<String>,
    #[serde(default = "default_true")]
    pub include_children: bool,
    /// The memory the servers may hold, MiB (the "total" a card reports); unset:
    /// the cgroup's limit when `memory = "cgroup"` sets one, else `MemTotal`.
    #[serde(default)]
    pub memory_total_mib: Option<f64>,
}

fn default_host_cpu() -> HostCpuSource {
    HostCpuSource::Processes
}
fn default_host_memory() -> HostMemorySource {
    HostMemorySource::Processes
}
fn default_true() -> bool {
    true
}

impl Default for HostSamplerConfig {
    fn default() -> Self {
        Self {
            cpu: default_host_cpu(),
            memory: default_host_memory(),
            cpus: None,
            cgroup: None,
            pids: Vec::new(),
            pid_files: Vec::new(),
            commands: Vec::new(),
            include_children: true,
            memory_total_mib: None,
        }
    }
}

impl HostSamplerConfig {
    /// Checks what parsing alone can: one line naming the key.
    pub fn check(&self) -> Result<()> {
        if let Some(list) = &self.cpus {
            crate::sampler::host::parse_cpu_list(list)
                .map_err(|e| anyhow::anyhow!("sampler.host.cpus: {e}"))?;
        }
        let uses_cgroup =
            self.cpu == HostCpuSource::Cgroup || self.memory == HostMemorySource::Cgroup;
        if uses_cgroup && self.cgroup.is_none() {
            bail!("sampler.host.cgroup must be set when sampler.host.cpu or .memory is \"cgroup\"");
        }
        let uses_processes =
            self.cpu == HostCpuSource::Processes || self.memory == HostMemorySource::Processes;
        if uses_processes
            && self.pids.is_empty()
            && self.pid_files.is_empty()
            && self.commands.is_empty()
        {
            bail!(
                "sampler.host selects no process: set pids, pid_files or commands (or use cpu/memory = \"cgroup\")"
            );
        }
        if self.pids.contains(&0) {
            bail!("sampler.host.pids: 0 is not a process");
        }
        if let Some(c) = self
            .commands
            .iter()
            .find(|c| c.is_empty() || c.contains('/'))
        {
            bail!("sampler.host.commands: '{c}' must be a program's base name (no '/')");
        }
        if let Some(m) = self.memory_total_mib
            && !(m.is_finite() && m > 0.0)
        {
            bail!("sampler.host.memory_total_mib must be a positive number of MiB");
        }
        Ok(())
    }
}

fn default_sampler() -> SamplerKind {
    SamplerKind::Nvml
}
fn default_fallback() -> SamplerKind {
    SamplerKind::Sim
}
fn default_unknown_utilization() -> f64 {
    0.5
}
fn default_contention_window_ms() -> u64 {
    5000
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            kind: default_sampler(),
            device: 0,
            allow_fallback: false,
            fallback: default_fallback(),
            unknown_utilization: default_unknown_utilization(),
            contention_window_ms: default_contention_window_ms(),
            host: HostSamplerConfig::default(),
            dcgm: None,
        }
    }
}

/// Where each tick's workload level comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadSourceKind {
    /// `workload.level`, every tick.
    Fixed,
    /// `workload.trace`, a seeded synthetic trace replayed cyclically.
    Trace,
    /// The load the model servers report, through Prometheus or their `/metrics`
    /// (`[workload.prometheus]`).
    Prometheus,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// `fixed`, `trace` or `prometheus`; unset: `trace` when `trace` is set, else `fixed`.
    #[serde(default)]
    pub source: Option<WorkloadSourceKind>,
    /// A fixed level (`low`, `medium`, `high`, `burst`), used when `trace` is unset.
    #[serde(default = "default_level")]
    pub level: WorkloadLevel,
    /// A seeded dynamic trace (`steady`, `periodic`, …), replayed cyclically.
    #[serde(default)]
    pub trace: Option<String>,
    #[serde(default = "default_trace_ticks")]
    pub trace_ticks: usize,
    /// How the next period's load is forecast from the readings (`last`, `ewma`, `holt`).
    #[serde(default = "default_forecast")]
    pub forecast: ForecastKind,
    #[serde(default)]
    pub prometheus: Option<PrometheusConfig>,
}

fn default_level() -> WorkloadLevel {
    WorkloadLevel::Medium
}
fn default_trace_ticks() -> usize {
    mfsched_core::DEFAULT_TRACE_TICKS
}
fn default_forecast() -> ForecastKind {
    crate::forecast::DEFAULT_FORECAST
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            source: None,
            level: default_level(),
            trace: None,
            trace_ticks: default_trace_ticks(),
            forecast: default_forecast(),
            prometheus: None,
        }
    }
}

impl WorkloadConfig {
    pub fn source(&self) -> WorkloadSourceKind {
        self.source.unwrap_or(if self.trace.is_some() {
            WorkloadSourceKind::Trace
        } else {
            WorkloadSourceKind::Fixed
        })
    }
}

/// The load regime boundaries on the load ratio (offered rate over the model's
/// reference rate): the midpoints between the offered loads the bundled
/// profiles were measured at (low 0.45, medium 0.65, high 0.85, burst 1.15: the
/// simulator's regimes). A profile measured at other loads sets its own.
pub const DEFAULT_THRESHOLDS: [f64; 3] = [0.55, 0.75, 1.0];

/// `[workload.prometheus]`: per model, its offered request rate read from a
/// Prometheus server (PromQL) or scraped from the model server's `/metrics`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// The Prometheus server `query` entries (and presets without `scrape`) ask,
    /// `http://host:port`.
    #[serde(default)]
    pub url: Option<String>,
    /// Time between readings; default `loop.period_ms`.
    #[serde(default)]
    pub poll_ms: Option<u64>,
    /// Time one reading may take, connection to last byte.
    #[serde(default = "default_load_timeout_ms")]
    pub timeout_ms: u64,
    /// Largest answer read (a `/metrics` page or a query result), bytes.
    #[serde(default = "default_load_max_bytes")]
    pub max_bytes: usize,
    /// How long a model's last reading stands in once readings fail; after
    /// that, with no model read, the tick decides on `safe_level`.
    #[serde(default = "default_stale_ms")]
    pub stale_ms: u64,
    #[serde(default = "default_safe_level")]
    pub safe_level: WorkloadLevel,
    /// Load-ratio boundaries between low|medium, medium|high and high|burst.
    #[serde(default = "default_thresholds")]
    pub thresholds: [f64; 3],
    /// The PromQL `rate()` window of preset queries.
    #[serde(default = "default_rate_window")]
    pub rate_window: String,
    /// Per model (by the scenario's model name).
    pub models: BTreeMap<String, ModelLoadConfig>,
}

fn default_load_timeout_ms() -> u64 {
    500
}
fn default_load_max_bytes() -> usize {
    1 << 20
}
fn default_stale_ms() -> u64 {
    10_000
}
fn default_safe_level() -> WorkloadLevel {
    WorkloadLevel::High
}
fn default_thresholds() -> [f64; 3] {
    DEFAULT_THRESHOLDS
}
fn default_rate_window() -> String {
    "1m".to_owned()
}

/// The serving stacks whose metric names mfsched knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadPreset {
    /// vLLM: `vllm:request_success_total{model_name="…"}`.
    Vllm,
    /// Triton: `nv_inference_request_success{model="…"}`.
    Triton,
}

impl LoadPreset {
    /// The request counter and the label that names the model.
    pub fn metric_and_label(self) -> (&'static str, &'static str) {
        match self {
            Self::Vllm => ("vllm:request_success_total", "model_name"),
            Self::Triton => ("nv_inference_request_success", "model"),
        }
    }

    /// The counter of what the model produces, in its throughput unit
    /// (generated tokens; inferences): what live profiling measures.
    pub fn throughput_metric(self) -> &'static str {
        match self {
            Self::Vllm => "vllm:generation_tokens_total",
            Self::Triton => "nv_inference_count",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLoadConfig {
    /// The server's metric names (`vllm`, `triton`); or `metric` + `label`.
    #[serde(default)]
    pub preset: Option<LoadPreset>,
    /// A request counter (a rate is taken between readings).
    #[serde(default)]
    pub metric: Option<String>,
    /// The counter of what the model produces in its throughput unit, for
    /// `profile --live` (default: the preset's).
    #[serde(default)]
    pub throughput_metric: Option<String>,
    /// The label whose value names the model on its server; `""` with
    /// `scrape`: the page serves this model alone (llama.cpp names none).
    #[serde(default)]
    pub label: Option<String>,
    /// That label's value; default the scenario's model name.
    #[serde(default)]
    pub served_name: Option<String>,
    /// Read the counter from this `/metrics` URL directly, not through Prometheus.
    #[serde(default)]
    pub scrape: Option<String>,
    /// With `scrape`: the rates are taken over the last `rate_window_ms` of
    /// scrapes (0, the default: between two scrapes), as PromQL's `rate()`
    /// takes its window. A counter that moves in steps (llama-server counts a
    /// completion's tokens when it ends) reads 0 or twice its rate between
    /// two scrapes a second apart; a window of several steps reads its rate.
    #[serde(default)]
    pub rate_window_ms: u64,
    /// A PromQL expression giving the offered requests per second (overrides
    /// the preset's query; needs `url`).
    #[serde(default)]
    pub query: Option<String>,
    /// With `scrape`: the offered load read where requests arrive (a
    /// gateway's request counter) rather than from the server's counter of
    /// what it served. A saturated server serves what it can whatever it is
    /// offered, so its counter shows no load step above its capacity.
    #[serde(default)]
    pub arrivals: Option<ArrivalsConfig>,
    /// Requests per second at full load (load ratio 1).
    pub reference_rate: f64,
}

/// A counter of the requests that arrive for one model, on a page of its own
/// (HAProxy's `haproxy_frontend_http_requests_total{proxy="…"}`, an Envoy or
/// nginx exporter's request counter): counted as they arrive, before a server
/// queues, sheds or serves them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalsConfig {
    /// The `/metrics` URL that serves the counter.
    pub scrape: String,
    pub metric: String,
    /// The label whose value names the model there (`""`: the page's every
    /// sample of the metric is this model's).
    pub label: String,
    /// That label's value; default the scenario's model name.
    #[serde(default)]
    pub served_name: Option<String>,
}

impl ArrivalsConfig {
    /// The page's URL, for scenario model `model` (an error names the key).
    pub fn uri(&self, model: &str) -> Result<hyper::Uri> {
        self.scrape
            .parse()
            .with_context(|| format!("workload.prometheus.models.{model}.arrivals.scrape"))
    }

    /// The label value that names scenario model `model` on the page.
    pub fn name_on_page(&self, model: &str) -> String {
        self.served_name.clone().unwrap_or_else(|| model.to_owned())
    }
}

impl ModelLoadConfig {
    /// The request counter and the label naming the model: the preset's, or
    /// `metric` + `label` (the config check requires one of the two).
    pub fn request_metric_and_label(&self) -> (String, String) {
        match self.preset {
            Some(preset) => {
                let (metric, label) = preset.metric_and_label();
                (metric.to_owned(), label.to_owned())
            }
            None => (
                self.metric.clone().unwrap_or_default(),
                self.label.clone().unwrap_or_default(),
            ),
        }
    }

    /// The counter of the model's throughput (`throughput_metric`, else the
    /// preset's), if any.
    pub fn throughput_metric_name(&self) -> Option<String> {
        self.throughput_metric
            .clone()
            .or_else(|| self.preset.map(|p| p.throughput_metric().to_owned()))
    }

    /// The label value that names scenario model `model` on its server.
    pub fn name_on_server(&self, model: &str) -> String {
        self.served_name.clone().unwrap_or_else(|| model.to_owned())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActuatorConfig {
    /// A JSON file rewritten atomically with every model's configuration on change.
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub webhook: Option<WebhookConfig>,
    /// Per model, the open inference protocol's model-repository extension
    /// (Triton, KServe, MLServer): load, unload, readiness.
    #[serde(default)]
    pub v2_repository: Option<V2RepositoryConfig>,
    /// Per model, one supervised server process started from a templated argv.
    #[serde(default)]
    pub process: Option<ProcessConfig>,
    /// Use each model's measured mean downtime per reconfiguration (as a
    /// fraction of `downtime_horizon_ms`, capped at 1) as that model's
    /// reconfiguration cost, once it has been reconfigured.
    #[serde(default)]
    pub downtime_as_cost: bool,
    /// With `downtime_as_cost`: how long a new configuration is expected to
    /// serve, over which its downtime is paid off (a restart of 3 s costs
    /// 0.1 of the model's reward per tick over 30 s). Default: one tick
    /// period, so a change must pay within the tick that makes it.
    #[serde(default)]
    pub downtime_horizon_ms: Option<u64>,
    /// A model that goes back to the configuration it left at most this many
    /// ticks before doubles its reconfiguration costs (up to
    /// `reversal_max_factor`); as many ticks without a reversal halve them
    /// again. 0: off.
    #[serde(default = "default_reversal_window_ticks")]
    pub reversal_window_ticks: u64,
    #[serde(default = "default_reversal_max_factor")]
    pub reversal_max_factor: f64,
}

fn default_reversal_window_ticks() -> u64 {
    30
}
fn default_reversal_max_factor() -> f64 {
    16.0
}

impl Default for ActuatorConfig {
    /// As an `[actuator]` table with no keys.
    fn default() -> Self {
        Self {
            file: None,
            webhook: None,
            v2_repository: None,
            process: None,
            downtime_as_cost: false,
            downtime_horizon_ms: None,
            reversal_window_ticks: default_reversal_window_ticks(),
            reversal_max_factor: default_reversal_max_factor(),
        }
    }
}

/// The largest `actuator.reversal_max_factor`.
const MAX_REVERSAL_FACTOR: f64 = 1024.0;

impl ActuatorConfig {
    /// How reversals are damped; `None` when `reversal_window_ticks` is 0.
    pub fn reversal_damping(&self) -> Option<crate::reversals::ReversalDamping> {
        (self.reversal_window_ticks > 0).then_some(crate::reversals::ReversalDamping {
            window_ticks: self.reversal_window_ticks,
            max_factor: self.reversal_max_factor,
        })
    }

    /// The horizon measured downtimes are paid off over, when they are the
    /// reconfiguration costs.
    pub fn downtime_cost_horizon(&self, period_ms: u64) -> Option<Duration> {
        self.downtime_as_cost
            .then(|| Duration::from_millis(self.downtime_horizon_ms.unwrap_or(period_ms)))
    }
}

/// A settings file an actuator renders from the configuration and rewrites
/// atomically before it loads or starts the model (MLServer re-reads its
/// `model-settings.json` on load; its load body is ignored).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsFileConfig {
    pub path: PathBuf,
    /// The document, as a TOML table written as JSON; its strings are templates.
    pub content: toml::Table,
}

/// `[actuator.v2_repository]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct V2RepositoryConfig {
    /// Time one HTTP call may take, connection to last byte.
    #[serde(default = "default_v2_timeout_ms")]
    pub timeout_ms: u64,
    /// Time from the load request until the model must answer ready.
    #[serde(default = "default_ready_timeout_ms")]
    pub ready_timeout_ms: u64,
    /// Time between two readiness polls.
    #[serde(default = "default_ready_poll_ms")]
    pub ready_poll_ms: u64,
    /// Largest answer read from a server, bytes.
    #[serde(default = "default_v2_max_bytes")]
    pub max_bytes: usize,
    /// Per scenario model.
    pub models: BTreeMap<String, V2ModelConfig>,
}

/// How one model's configuration becomes repository calls. Every string is a
/// template: `{model}`, `{variant}`, `{<knob name>}` and the `vars` names.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct V2ModelConfig {
    /// The server, `http://host:port`.
    pub url: String,
    /// The name the server serves the configuration under (Triton: one model
    /// per variant, e.g. `"{model}_{variant}"`); default `"{model}"`.
    #[serde(default = "default_model_name")]
    pub model_name: String,
    /// A version to wait for (`/v2/models/{m}/versions/{v}/ready`) and to find
    /// in the repository index.
    #[serde(default)]
    pub version: Option<String>,
    /// `parameters` of the load request's JSON body.
    #[serde(default)]
    pub load_parameters: Option<toml::Table>,
    /// A model configuration sent as the JSON string `parameters.config` of
    /// the load request (Triton's configuration override).
    #[serde(default)]
    pub load_config: Option<toml::Table>,
    /// A settings file rewritten before each load (MLServer).
    #[serde(default)]
    pub settings_file: Option<SettingsFileConfig>,
    /// Constants the templates may name.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

fn default_model_name() -> String {
    "{model}".to_owned()
}
fn default_v2_timeout_ms() -> u64 {
    5_000
}
fn default_ready_timeout_ms() -> u64 {
    60_000
}
fn default_ready_poll_ms() -> u64 {
    50
}
fn default_v2_max_bytes() -> usize {
    1 << 20
}

/// `[actuator.process]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessConfig {
    /// Time a process has between SIGTERM and SIGKILL.
    #[serde(default = "default_grace_ms")]
    pub grace_ms: u64,
    /// Time from the start until `ready_url` must answer 2xx.
    #[serde(default = "default_ready_timeout_ms")]
    pub ready_timeout_ms: u64,
    #[serde(default = "default_ready_poll_ms")]
    pub ready_poll_ms: u64,
    /// Wait before restarting a process that exited on its own; doubled on
    /// every crash in a row, up to `backoff_max_ms`.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Bytes of a process's stdout and stderr logged per start (then dropped, counted).
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: usize,
    /// Per scenario model.
    pub models: BTreeMap<String, ProcessModelConfig>,
}

/// One model's server process. Every string is a template (as for
/// `v2_repository`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessModelConfig {
    /// The program and its arguments, run without a shell.
    pub argv: Vec<String>,
    /// Variables of the daemon's environment the process inherits; nothing else is.
    #[serde(default)]
    pub env_allow: Vec<String>,
    /// Environment entries set for the process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Answers 2xx once the server serves the new configuration.
    pub ready_url: String,
    /// A settings file rewritten before each start.
    #[serde(default)]
    pub settings_file: Option<SettingsFileConfig>,
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// Values of the `{slot}` placeholder (ports, say), two or more: a change
    /// starts the new configuration on a slot the running process does not
    /// hold and stops the old one once the new one is ready. Empty: stop, then
    /// start.
    #[serde(default)]
    pub slots: Vec<String>,
}

fn default_grace_ms() -> u64 {
    5_000
}
fn default_backoff_ms() -> u64 {
    500
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_max_output_bytes() -> usize {
    64 << 10
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Model instance name → `http://host:port/path` that receives its configuration.
    pub urls: BTreeMap<String, String>,
    #[serde(default = "default_webhook_timeout_ms")]
    pub timeout_ms: u64,
    /// Attempts after the first failed one.
    #[serde(default = "default_webhook_retries")]
    pub retries: u32,
}

fn default_webhook_timeout_ms() -> u64 {
    2000
}
fn default_webhook_retries() -> u32 {
    2
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// The append-only decision log.
    pub path: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// A file holding the bearer token the API requires (its first line);
    /// `MFSCHED_API_TOKEN` in the environment wins. Without a token the
    /// mutating endpoints refuse, and only a loopback `listen` is allowed.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Require the token on reads (`GET`) too, not only on changes.
    #[serde(default)]
    pub auth_reads: bool,
    /// Host names a request's `Host` header may carry besides loopback ones and
    /// the `listen` address (a browser tricked by DNS rebinding sends another).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Open connections at most; more are closed on accept and counted.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Time a client has to send a request's headers.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// Time a request may take, body and answer included.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Largest request body, bytes.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9464))
}

fn default_max_connections() -> usize {
    64
}

fn default_header_timeout_ms() -> u64 {
    5_000
}

fn default_request_timeout_ms() -> u64 {
    10_000
}

fn default_max_body_bytes() -> usize {
    16 << 10
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            token_file: None,
            auth_reads: false,
            allowed_hosts: Vec::new(),
            max_connections: default_max_connections(),
            header_timeout_ms: default_header_timeout_ms(),
            request_timeout_ms: default_request_timeout_ms(),
            max_body_bytes: default_max_body_bytes(),
        }
    }
}

/// The environment variable that holds the API token (it wins over `token_file`).
pub const TOKEN_ENV: &str = "MFSCHED_API_TOKEN";

impl ApiConfig {
    /// The bearer token from the environment or `token_file`, if any. A token
    /// file that cannot be read, or an empty token, is an error.
    pub fn token(&self) -> Result<Option<String>> {
        if let Ok(t) = std::env::var(TOKEN_ENV) {
            let t = t.trim().to_owned();
            if t.is_empty() {
                bail!("{TOKEN_ENV} is set but empty");
            }
            check_token(TOKEN_ENV, &t)?;
            return Ok(Some(t));
        }
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let text = mfsched_core::read_capped_to_string(path, 4096, "api.token_file")?;
        let token = text.lines().next().unwrap_or("").trim().to_owned();
        if token.is_empty() {
            bail!("api.token_file {}: the first line is empty", path.display());
        }
        check_token(&format!("api.token_file {}", path.display()), &token)?;
        warn_if_readable_by_others(path);
        Ok(Some(token))
    }
}

/// A token a client can send: an HTTP header value carries visible ASCII
/// only (`Authorization: Bearer <token>`), so any other character would make
/// a token that can never match.
fn check_token(source: &str, token: &str) -> Result<()> {
    // The character itself is not shown: it is part of a secret.
    if !token.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        bail!(
            "{source}: the token holds a character no Authorization header can carry (a client could never send it): use visible ASCII only"
        );
    }
    Ok(())
}

/// A token file others can read leaks the token: said once at start-up, not
/// refused (a group may be meant to read it).
fn warn_if_readable_by_others(path: &Path) {
    if let Some(warning) = readable_by_others(path) {
        tracing::warn!("{warning}");
    }
}

/// The warning for a token file its group or everyone can read, if it is one.
fn readable_by_others(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o044 != 0).then(|| {
        format!(
            "api.token_file {} is readable by its group or by everyone (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o777
        )
    })
}

impl PrometheusConfig {
    /// Time between readings.
    pub fn poll(&self, period_ms: u64) -> Duration {
        Duration::from_millis(self.poll_ms.unwrap_or(period_ms))
    }

    fn check(&self, period_ms: u64) -> Result<()> {
        let p = "workload.prometheus";
        if self.models.is_empty() {
            bail!("{p}.models names no model");
        }
        if self.poll_ms == Some(0) || self.timeout_ms == 0 || self.max_bytes == 0 {
            bail!("{p}.poll_ms, timeout_ms and max_bytes must be positive");
        }
        if self.timeout_ms >= self.poll(period_ms).as_millis() as u64 {
            bail!(
                "{p}.timeout_ms ({}) must be shorter than the poll period ({} ms)",
                self.timeout_ms,
                self.poll(period_ms).as_millis()
            );
        }
        let t = self.thresholds;
        if !(t.iter().all(|x| x.is_finite() && *x > 0.0) && t[0] < t[1] && t[1] < t[2]) {
            bail!("{p}.thresholds must be three increasing positive load ratios, got {t:?}");
        }
        if promql_duration(&self.rate_window).is_none() {
            bail!(
                "{p}.rate_window '{}' is not a PromQL duration (e.g. 30s, 1m, 5m)",
                self.rate_window
            );
        }
        if let Some(url) = &self.url {
            check_http_url(&format!("{p}.url"), url)?;
        }
        for (model, m) in &self.models {
            let at = format!("{p}.models.{model}");
            if !(m.reference_rate.is_finite() && m.reference_rate > 0.0) {
                bail!("{at}.reference_rate must be a positive number of requests per second");
            }
            if m.preset.is_some() && (m.metric.is_some() || m.label.is_some()) {
                bail!("{at}: give a preset or metric + label, not both");
            }
            if m.preset.is_none() && m.query.is_none() && (m.metric.is_none() || m.label.is_none())
            {
                bail!("{at}: needs a preset (vllm, triton), metric + label, or a query");
            }
            if m.label.as_deref() == Some("") && m.scrape.is_none() {
                bail!(
                    "{at}.label is empty (the page's every sample of the metric): that needs scrape, a page of this model alone"
                );
            }
            if m.rate_window_ms > MAX_RATE_WINDOW_MS {
                bail!("{at}.rate_window_ms must be at most {MAX_RATE_WINDOW_MS} (10 minutes)");
            }
            if m.rate_window_ms > 0 && m.scrape.is_none() {
                bail!(
                    "{at}.rate_window_ms is for scraped counters; through Prometheus, {p}.rate_window is the window"
                );
            }
            if let Some(a) = &m.arrivals {
                if m.scrape.is_none() {
                    bail!(
                        "{at}.arrivals is for scraped counters; through Prometheus, query is the offered load"
                    );
                }
                check_http_url(&format!("{at}.arrivals.scrape"), &a.scrape)?;
                if a.metric.is_empty() {
                    bail!("{at}.arrivals.metric is empty");
                }
            }
            match (&m.scrape, &m.query) {
                (Some(_), Some(_)) => bail!("{at}: give scrape or query, not both"),
                (Some(url), None) => check_http_url(&format!("{at}.scrape"), url)?,
                (None, _) if self.url.is_none() => {
                    bail!("{at} reads through Prometheus: set {p}.url, or scrape for a direct read")
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The longest `actuator.downtime_horizon_ms`: a day.
pub const MAX_DOWNTIME_HORIZON_MS: u64 = 86_400_000;

/// The longest `rate_window_ms` of a scraped counter: the scrapes it keeps
/// are bounded by it over the poll period.
pub const MAX_RATE_WINDOW_MS: u64 = 600_000;

fn check_http_url(key: &str, url: &str) -> Result<()> {
    if !url.starts_with("http://") || url.parse::<hyper::Uri>().is_err() {
        bail!("{key}: '{url}' must be a plain http:// URL");
    }
    Ok(())
}

/// `30s`, `1m`, `1m30s`, … (PromQL's units; no spaces).
/// A PromQL duration (`30s`, `1m30s`, `250ms`; units ms, s, m, h, d, w, y),
/// `None` where it is not one.
pub(crate) fn promql_duration(s: &str) -> Option<Duration> {
    const UNITS: [(&str, u64); 7] = [
        ("ms", 1),
        ("s", 1_000),
        ("m", 60_000),
        ("h", 3_600_000),
        ("d", 86_400_000),
        ("w", 604_800_000),
        ("y", 31_536_000_000),
    ];
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let count: u64 = rest.get(..digits)?.parse().ok()?;
        rest = &rest[digits..];
        let &(unit, scale) = UNITS.iter().find(|(u, _)| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        ms = ms.checked_add(count.checked_mul(scale)?)?;
    }
    Some(Duration::from_millis(ms))
}

impl DaemonConfig {
    /// Reads and checks a config file. Relative paths in it are relative to the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            mfsched_core::read_capped_to_string(path, mfsched_core::MAX_CONFIG_BYTES, "config")?;
        let mut config =
            Self::parse(&text).with_context(|| format!("config {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        Ok(config)
    }

    pub fn parse(text: &str) -> Result<Self> {
        let config: Self = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}", mfsched_core::toml_error_line(&e, text)))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<()> {
        if self.tick.period_ms == 0 {
            bail!("loop.period_ms must be positive");
        }
        self.correction
            .check()
            .map_err(|e| anyhow::anyhow!("correction.{e}"))?;
        let alpha = self.floors.miss_rate;
        mfsched_core::floor_miss_rate(alpha)
            .map_err(|e| anyhow::anyhow!("floors.miss_rate = {alpha}: {e}"))?;
        if self.tick.deadline_ms == 0 || self.tick.deadline_ms >= self.tick.period_ms {
            bail!(
                "loop.deadline_ms ({}) must be positive and shorter than loop.period_ms ({})",
                self.tick.deadline_ms,
                self.tick.period_ms
            );
        }
        if self.policy.shadows.contains(&self.policy.active) {
            bail!(
                "policy '{}' is both active and a shadow: list it once",
                self.policy.active
            );
        }
        if self.api.max_connections == 0
            || self.api.header_timeout_ms == 0
            || self.api.request_timeout_ms == 0
            || self.api.max_body_bytes == 0
        {
            bail!(
                "api.max_connections, api.header_timeout_ms, api.request_timeout_ms and api.max_body_bytes must be positive"
            );
        }
        if !(0.0..=1.0).contains(&self.sampler.unknown_utilization) {
            bail!("sampler.unknown_utilization must be in [0, 1]");
        }
        if self.sampler.contention_window_ms > 3_600_000 {
            bail!("sampler.contention_window_ms must be at most 3600000 (an hour)");
        }
        if self.sampler.fallback == SamplerKind::Nvml {
            bail!("sampler.fallback cannot be 'nvml': it is what the fallback replaces");
        }
        if self.workload.trace_ticks > mfsched_core::MAX_TRACE_TICKS {
            bail!(
                "workload.trace_ticks {} is over the {} ticks a trace may have",
                self.workload.trace_ticks,
                mfsched_core::MAX_TRACE_TICKS
            );
        }
        if self.sampler.kind == SamplerKind::Host || self.sampler.fallback == SamplerKind::Host {
            self.sampler.host.check()?;
        }
        if self.sampler.kind == SamplerKind::Dcgm || self.sampler.fallback == SamplerKind::Dcgm {
            match &self.sampler.dcgm {
                Some(d) => d.check()?,
                None => bail!("sampler.kind or fallback is \"dcgm\": set [sampler.dcgm] url"),
            }
        }
        if let Some(trace) = &self.workload.trace
            && !mfsched_core::TRACE_NAMES.contains(&trace.as_str())
        {
            bail!(
                "workload.trace '{trace}' is unknown: use one of {}",
                mfsched_core::TRACE_NAMES.join(", ")
            );
        }
        self.check_workload()?;
        if let Some(w) = &self.actuator.webhook {
            for (model, url) in &w.urls {
                check_http_url(&format!("actuator.webhook.urls.{model}"), url)?;
            }
        }
        self.check_actuators()?;
        Ok(())
    }

    /// What can be checked without the scenario (the templates are checked
    /// against its models and knobs when the actuators start).
    fn check_actuators(&self) -> Result<()> {
        let a = &self.actuator;
        if let Some(h) = a.downtime_horizon_ms {
            if !a.downtime_as_cost {
                bail!(
                    "actuator.downtime_horizon_ms is set but actuator.downtime_as_cost is not: the horizon pays off measured downtimes"
                );
            }
            if h < self.tick.period_ms || h > MAX_DOWNTIME_HORIZON_MS {
                bail!(
                    "actuator.downtime_horizon_ms ({h}) must be at least loop.period_ms ({}) and at most {MAX_DOWNTIME_HORIZON_MS} (a day)",
                    self.tick.period_ms
                );
            }
        }
        if !(1.0..=MAX_REVERSAL_FACTOR).contains(&a.reversal_max_factor) {
            bail!(
                "actuator.reversal_max_factor ({}) must be at least 1 and at most {MAX_REVERSAL_FACTOR}",
                a.reversal_max_factor
            );
        }
        if let Some(v) = &a.v2_repository {
            let p = "actuator.v2_repository";
            if v.timeout_ms == 0
                || v.ready_timeout_ms == 0
                || v.ready_poll_ms == 0
                || v.max_bytes == 0
            {
                bail!(
                    "{p}.timeout_ms, ready_timeout_ms, ready_poll_ms and max_bytes must be positive"
                );
            }
            for (model, m) in &v.models {
                check_http_url(&format!("{p}.models.{model}.url"), &m.url)?;
                if a.process
                    .as_ref()
                    .is_some_and(|pr| pr.models.contains_key(model))
                {
                    bail!("{p}.models.{model}: the model also has a process actuator: give it one");
                }
            }
        }
        if let Some(pr) = &a.process {
            let p = "actuator.process";
            if pr.ready_timeout_ms == 0 || pr.ready_poll_ms == 0 || pr.backoff_ms == 0 {
                bail!("{p}.ready_timeout_ms, ready_poll_ms and backoff_ms must be positive");
            }
            if pr.backoff_max_ms < pr.backoff_ms {
                bail!("{p}.backoff_max_ms must be at least backoff_ms");
            }
            for (model, m) in &pr.models {
                if m.argv.is_empty() || m.argv[0].is_empty() {
                    bail!("{p}.models.{model}.argv must name a program");
                }
            }
        }
        Ok(())
    }

    fn check_workload(&self) -> Result<()> {
        let w = &self.workload;
        match (w.source(), &w.prometheus) {
            (WorkloadSourceKind::Prometheus, None) => {
                bail!("workload.source = \"prometheus\" needs a [workload.prometheus] section")
            }
            (WorkloadSourceKind::Trace, _) if w.trace.is_none() => {
                bail!("workload.source = \"trace\" needs workload.trace")
            }
            (WorkloadSourceKind::Prometheus, Some(p)) => p.check(self.tick.period_ms),
            _ => Ok(()),
        }
    }

    fn resolve_paths(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut self.log.path);
        if let Some(p) = &mut self.api.token_file {
            fix(p);
        }
        if let Some(p) = &mut self.actuator.file {
            fix(p);
        }
        if let Some(v) = &mut self.actuator.v2_repository {
            for m in v.models.values_mut() {
                if let Some(f) = &mut m.settings_file {
                    fix(&mut f.path);
                }
            }
        }
        if let Some(pr) = &mut self.actuator.process {
            for m in pr.models.values_mut() {
                if let Some(f) = &mut m.settings_file {
                    fix(&mut f.path);
                }
                if let Some(c) = &mut m.cwd {
                    fix(c);
                }
            }
        }
        if let Some(p) = &mut self.policy.plugin_dir {
            fix(p);
        }
        if let Some(p) = &mut self.policy.bundle_dir {
            fix(p);
        }
        if let Some(p) = &mut self.sampler.host.cgroup {
            fix(p);
        }
        for p in &mut self.sampler.host.pid_files {
            fix(p);
        }
        if self.scenario.ends_with(".toml") {
            let mut p = PathBuf::from(&self.scenario);
            fix(&mut p);
            self.scenario = p.to_string_lossy().into_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses_with_documented_defaults() {
        let c = DaemonConfig::parse(EXAMPLE).expect("the example is valid");
        assert_eq!(c.scenario, "paper-n2");
        assert_eq!(c.tick.period_ms, 1000);
        assert_eq!(c.sampler.kind, SamplerKind::Nvml);
        assert!(c.sampler.allow_fallback);
        assert_eq!(c.api.listen, default_listen());
        assert!(c.api.listen.ip().is_loopback());
        assert_eq!(c.correction, mfsched_core::CorrectionConfig::default());
        assert_eq!(c.floors, FloorsConfig::default());
        assert_eq!(
            c.floors.margins_at(),
            Some(mfsched_core::DEFAULT_FLOOR_MISS_RATE)
        );
    }

    #[test]
    fn floor_miss_rates_outside_zero_to_a_half_are_refused_naming_the_key() {
        let base = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n";
        for bad in ["0.7", "-0.1", "nan"] {
            let err = DaemonConfig::parse(&format!("{base}[floors]\nmiss_rate = {bad}\n"))
                .expect_err("refused");
            assert!(err.to_string().contains("floors.miss_rate"), "{bad}: {err}");
        }
        let c = DaemonConfig::parse(&format!("{base}[floors]\nmiss_rate = 0.1\n")).expect("valid");
        assert_eq!(c.floors.margins_at(), Some(0.1));
        let c = DaemonConfig::parse(&format!("{base}[floors]\nmiss_rate = 0\n")).expect("valid");
        assert_eq!(c.floors.margins_at(), None, "0: point floors");
        let c = DaemonConfig::parse(base).expect("valid");
        assert_eq!(c.floors.margins_at(), Some(0.05), "margins by default");
    }

    #[test]
    fn nonsense_correction_settings_are_refused_naming_the_key() {
        let base = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n";
        let err = DaemonConfig::parse(&format!("{base}[correction]\nhalf_life = -1.0\n"))
            .expect_err("refused");
        assert!(
            err.to_string().contains("correction.half_life = -1"),
            "{err}"
        );
        let err = DaemonConfig::parse(&format!("{base}[correction]\nhalf_lif = 3.0\n"))
            .expect_err("refused");
        assert!(err.to_string().contains("half_lif"), "{err}");
    }

    #[test]
    fn the_kubernetes_example_configs_parse() {
        let yaml = include_str!("../../../examples/deploy/daemonset.yaml");
        for (gpu, file) in ["gpu0.toml: |", "gpu1.toml: |"].into_iter().enumerate() {
            let body: String = yaml
                .split_once(file)
                .expect("the config is in the ConfigMap")
                .1
                .lines()
                .skip(1)
                .take_while(|l| l.starts_with("    "))
                .map(|l| format!("{}\n", &l[4..]))
                .collect();
            let c = DaemonConfig::parse(&body).unwrap_or_else(|e| panic!("{file} {e:#}\n{body}"));
            assert_eq!(c.sampler.device, gpu as u32);
            assert_eq!(c.workload.source(), WorkloadSourceKind::Prometheus);
        }
    }

    #[test]
    fn prometheus_load_configs_are_checked_field_by_field() {
        let base = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n[workload]\nsource = \"prometheus\"\n";
        let parse = |extra: &str| DaemonConfig::parse(&format!("{base}{extra}"));
        let ok = parse("[workload.prometheus]\nurl = \"http://127.0.0.1:9090\"\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 10\n")
            .expect("valid");
        let p = ok.workload.prometheus.expect("section");
        assert_eq!(p.thresholds, DEFAULT_THRESHOLDS);
        assert_eq!(p.poll(1000), Duration::from_secs(1));
        for (extra, says) in [
            ("", "needs a [workload.prometheus] section"),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\nmodels = {}\n",
                "names no model",
            ),
            (
                "[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 10\n",
                "set workload.prometheus.url",
            ),
            (
                "[workload.prometheus]\nurl = \"https://x:1\"\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\n",
                "plain http://",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 0\n",
                "reference_rate must be a positive",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\n[workload.prometheus.models.llm]\nreference_rate = 1\n",
                "needs a preset",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\nrate_window_ms = 5000\n",
                "rate_window_ms is for scraped counters",
            ),
            (
                "[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\nscrape = \"http://x:1/metrics\"\nrate_window_ms = 600001\n",
                "rate_window_ms must be at most 600000",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\n[workload.prometheus.models.llm.arrivals]\nscrape = \"http://g:1/metrics\"\nmetric = \"r\"\nlabel = \"proxy\"\n",
                "llm.arrivals is for scraped counters",
            ),
            (
                "[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\nscrape = \"http://x:1/metrics\"\n[workload.prometheus.models.llm.arrivals]\nscrape = \"https://g:1/metrics\"\nmetric = \"r\"\nlabel = \"proxy\"\n",
                "llm.arrivals.scrape: 'https://g:1/metrics' must be a plain http:// URL",
            ),
            (
                "[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\nscrape = \"http://x:1/metrics\"\n[workload.prometheus.models.llm.arrivals]\nscrape = \"http://g:1/metrics\"\nmetric = \"\"\nlabel = \"proxy\"\n",
                "llm.arrivals.metric is empty",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\nthresholds = [0.8, 0.7, 1.0]\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\n",
                "three increasing",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\nrate_window = \"1 minute\"\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\n",
                "not a PromQL duration",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\ntimeout_ms = 1000\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nreference_rate = 1\n",
                "shorter than the poll period",
            ),
            (
                "[workload.prometheus]\n[workload.prometheus.models.llm]\npreset = \"vllm\"\nscrape = \"http://x:1/metrics\"\nquery = \"up\"\nreference_rate = 1\n",
                "scrape or query, not both",
            ),
            (
                "[workload.prometheus]\nurl = \"http://x:1\"\n[workload.prometheus.models.llm]\nmetric = \"llamacpp:tokens_predicted_total\"\nlabel = \"\"\nreference_rate = 1\n",
                "label is empty",
            ),
        ] {
            let err = format!("{:#}", parse(extra).expect_err(says));
            assert!(err.contains(says), "{says}: {err}");
        }
        let ms = |s: &str| promql_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("1m30s"), Some(90_000));
        assert_eq!(ms("250ms"), Some(250));
        assert_eq!(ms("1h5m"), Some(3_900_000));
        for bad in ["", "m", "5", "5x", "1.5s", "99999999999999999999y"] {
            assert_eq!(ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn host_sampler_configs_are_checked_key_by_key() {
        let base = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n[sampler]\nkind = \"host\"\n";
        let parse = |extra: &str| DaemonConfig::parse(&format!("{base}{extra}"));
        let ok = parse("[sampler.host]\ncpus = \"0-1\"\ncommands = [\"llama-server\"]\n")
            .expect("valid");
        assert_eq!(ok.sampler.kind, SamplerKind::Host);
        assert_eq!(ok.sampler.host.cpu, HostCpuSource::Processes);
        assert!(ok.sampler.host.include_children);
        for (extra, says) in [
            ("", "selects no process"),
            (
                "[sampler.host]\ncpus = \"1-0\"\npids = [1]\n",
                "sampler.host.cpus",
            ),
            (
                "[sampler.host]\ncpu = \"cgroup\"\npids = [1]\n",
                "sampler.host.cgroup must be set",
            ),
            ("[sampler.host]\ncommands = [\"/usr/bin/x\"]\n", "base name"),
            ("[sampler.host]\npids = [0]\n", "0 is not a process"),
            (
                "[sampler.host]\npids = [1]\nmemory_total_mib = -1\n",
                "memory_total_mib",
            ),
            (
                "[sampler.host]\npids = [1]\ncpu = \"gpu\"\n",
                "unknown variant",
            ),
        ] {
            let err = format!("{:#}", parse(extra).expect_err(says));
            assert!(err.contains(says), "{says}: {err}");
        }
        // Only a host sampler's section is checked: an nvml config may carry one.
        let nvml = DaemonConfig::parse("scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n[sampler.host]\n")
            .expect("unused section");
        assert_eq!(nvml.sampler.kind, SamplerKind::Nvml);
        assert_eq!(SamplerKind::parse("host"), Some(SamplerKind::Host));
    }

    #[test]
    fn measured_downtime_is_paid_off_over_the_period_or_the_horizon_given() {
        let base = "scenario = \"paper-n2\"\n[loop]\nperiod_ms = 500\ndeadline_ms = 400\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n[actuator]\n";
        let parse = |extra: &str| DaemonConfig::parse(&format!("{base}{extra}"));
        let horizon = |extra: &str| {
            let c = parse(extra).expect("valid");
            c.actuator.downtime_cost_horizon(c.tick.period_ms)
        };
        assert_eq!(horizon(""), None, "configured costs");
        assert_eq!(
            horizon("downtime_as_cost = true\n"),
            Some(Duration::from_millis(500)),
            "one period"
        );
        assert_eq!(
            horizon("downtime_as_cost = true\ndowntime_horizon_ms = 30000\n"),
            Some(Duration::from_secs(30))
        );
        for (extra, says) in [
            (
                "downtime_horizon_ms = 30000\n",
                "actuator.downtime_as_cost is not",
            ),
            (
                "downtime_as_cost = true\ndowntime_horizon_ms = 499\n",
                "actuator.downtime_horizon_ms (499) must be at least loop.period_ms (500)",
            ),
            (
                "downtime_as_cost = true\ndowntime_horizon_ms = 86400001\n",
                "at most 86400000",
            ),
        ] {
            let err = format!("{:#}", parse(extra).expect_err(says));
            assert!(err.contains(says), "{says}: {err}");
        }
    }

    #[test]
    fn reversal_damping_is_on_by_default_off_at_zero_ticks_and_its_factor_bounded() {
        let base = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n";
        let parse = |extra: &str| DaemonConfig::parse(&format!("{base}{extra}"));
        let damping = |extra: &str| parse(extra).expect("valid").actuator.reversal_damping();
        let default = Some(crate::reversals::ReversalDamping {
            window_ticks: 30,
            max_factor: 16.0,
        });
        assert_eq!(damping(""), default, "no [actuator] table");
        assert_eq!(damping("[actuator]\n"), default);
        assert_eq!(damping("[actuator]\nreversal_window_ticks = 0\n"), None);
        for factor in ["0.5", "1025.0", "nan"] {
            let err = format!(
                "{:#}",
                parse(&format!("[actuator]\nreversal_max_factor = {factor}\n")).expect_err(factor)
            );
            assert!(
                err.contains("actuator.reversal_max_factor") && err.contains("at least 1"),
                "{factor}: {err}"
            );
        }
    }

    #[test]
    fn dcgm_sampler_configs_are_checked_key_by_key() {
        let base = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n[sampler]\nkind = \"dcgm\"\n";
        let parse = |extra: &str| DaemonConfig::parse(&format!("{base}{extra}"));
        let ok = parse("[sampler.dcgm]\nurl = \"http://127.0.0.1:9400/metrics\"\n").expect("valid");
        assert_eq!(ok.sampler.kind, SamplerKind::Dcgm);
        let d = ok.sampler.dcgm.expect("the section");
        assert_eq!((d.poll_ms, d.timeout_ms, d.stale_ms), (1000, 800, 5000));
        let url = "[sampler.dcgm]\nurl = \"http://127.0.0.1:9400/metrics\"\n";
        for (extra, says) in [
            ("", "set [sampler.dcgm] url"),
            (
                "[sampler.dcgm]\nurl = \"https://x/metrics\"\n",
                "sampler.dcgm.url",
            ),
            (
                &format!("{url}timeout_ms = 2000\n"),
                "timeout_ms in 1..=poll_ms",
            ),
            (&format!("{url}poll_ms = 0\n"), "poll_ms must be positive"),
            (
                &format!("{url}stale_ms = 10\n"),
                "stale_ms must be at least poll_ms",
            ),
            (&format!("{url}max_bytes = 0\n"), "sampler.dcgm.max_bytes"),
            (&format!("{url}device = 1\n"), "unknown field"),
        ] {
            let err = format!("{:#}", parse(extra).expect_err(says));
            assert!(err.contains(says), "{says}: {err}");
        }
        assert_eq!(SamplerKind::parse("dcgm"), Some(SamplerKind::Dcgm));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected_with_the_line() {
        let text = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\nactiv = \"x\"\n[log]\npath = \"l\"\n";
        let err = DaemonConfig::parse(text).expect_err("typo").to_string();
        assert!(err.starts_with("line 4:"), "{err}");
        assert!(err.contains("activ"), "{err}");
        let text = "scenario = \"paper-n2\"\n[loop]\nperiod_ms = 10\ndeadline_ms = 10\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n";
        let err = DaemonConfig::parse(text).expect_err("deadline").to_string();
        assert!(err.contains("shorter than loop.period_ms"), "{err}");
    }

    #[test]
    fn a_token_that_can_never_match_is_refused_and_an_open_file_warned() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        let api = ApiConfig {
            token_file: Some(path.clone()),
            ..ApiConfig::default()
        };
        std::fs::write(&path, "s\u{e9}cret\n").expect("write");
        let err = format!("{:#}", api.token().expect_err("non-ASCII"));
        assert!(err.contains("no Authorization header can carry"), "{err}");
        assert!(!err.contains('\u{e9}'), "the secret is not shown: {err}");
        std::fs::write(&path, "abc def-123\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let warning = readable_by_others(&path).expect("a world-readable file is warned");
        assert!(
            warning.contains("mode 644") && warning.contains("chmod 600"),
            "{warning}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(readable_by_others(&path), None);
        assert_eq!(api.token().expect("valid").as_deref(), Some("abc def-123"));
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let api = ApiConfig {
            token_file: Some(fifo),
            ..ApiConfig::default()
        };
        let err = format!("{:#}", api.token().expect_err("a FIFO"));
        assert!(err.contains("a FIFO"), "{err}");
    }

    #[test]
    fn a_trace_past_the_limit_is_refused_before_it_is_made() {
        let text = "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n[workload]\ntrace = \"steady\"\ntrace_ticks = 1000000000000\n";
        let err = DaemonConfig::parse(text).expect_err("too long").to_string();
        assert!(err.contains("workload.trace_ticks"), "{err}");
    }
}
