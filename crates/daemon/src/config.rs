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

/// The documented example configuration, every key with its default or an
/// example value.
pub const EXAMPLE: &str = include_str!("../../../examples/mfsched.toml");

use mfsched_core::domain::WorkloadLevel;

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
    /// Directory of on-disk policy components, watched for hot reload (plugin host).
    #[serde(default)]
    pub plugin_dir: Option<PathBuf>,
    /// Directory of trained surrogate bundles the policies predict with (plugin host).
    #[serde(default)]
    pub bundle_dir: Option<PathBuf>,
    /// The field the surrogate's joint predictions are made under.
    #[serde(default)]
    pub field: mfsched_core::predict::Field,
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
}

impl SamplerKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "nvml" => Some(Self::Nvml),
            "sim" => Some(Self::Sim),
            "footprint" => Some(Self::Footprint),
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

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            kind: default_sampler(),
            device: 0,
            allow_fallback: false,
            fallback: default_fallback(),
            unknown_utilization: default_unknown_utilization(),
        }
    }
}

/// Where each tick's workload level comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// A fixed level (`low`, `medium`, `high`, `burst`), used when `trace` is unset.
    #[serde(default = "default_level")]
    pub level: WorkloadLevel,
    /// A seeded dynamic trace (`steady`, `periodic`, …), replayed cyclically.
    #[serde(default)]
    pub trace: Option<String>,
    #[serde(default = "default_trace_ticks")]
    pub trace_ticks: usize,
}

fn default_level() -> WorkloadLevel {
    WorkloadLevel::Medium
}
fn default_trace_ticks() -> usize {
    mfsched_core::traces::DEFAULT_TICKS
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            level: default_level(),
            trace: None,
            trace_ticks: default_trace_ticks(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActuatorConfig {
    /// A JSON file rewritten atomically with every model's configuration on change.
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub webhook: Option<WebhookConfig>,
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
            return Ok(Some(t));
        }
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let meta = std::fs::metadata(path)
            .with_context(|| format!("api.token_file {}", path.display()))?;
        if !meta.is_file() || meta.len() > 4096 {
            bail!(
                "api.token_file {}: not a regular file of at most 4 KiB",
                path.display()
            );
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("api.token_file {}", path.display()))?;
        let token = text.lines().next().unwrap_or("").trim().to_owned();
        if token.is_empty() {
            bail!("api.token_file {}: the first line is empty", path.display());
        }
        Ok(Some(token))
    }
}

impl DaemonConfig {
    /// Reads and checks a config file. Relative paths in it are relative to the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        let mut config =
            Self::parse(&text).with_context(|| format!("config {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        Ok(config)
    }

    pub fn parse(text: &str) -> Result<Self> {
        let config: Self = toml::from_str(text).map_err(|e| {
            // One line: where, then toml's message (which names the key).
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            match line {
                Some(l) => anyhow::anyhow!("line {l}: {}", e.message().trim()),
                None => anyhow::anyhow!("{}", e.message().trim()),
            }
        })?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<()> {
        if self.tick.period_ms == 0 {
            bail!("loop.period_ms must be positive");
        }
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
        if self.sampler.fallback == SamplerKind::Nvml {
            bail!("sampler.fallback cannot be 'nvml': it is what the fallback replaces");
        }
        if let Some(trace) = &self.workload.trace
            && !mfsched_core::traces::TRACE_NAMES.contains(&trace.as_str())
        {
            bail!(
                "workload.trace '{trace}' is unknown: use one of {}",
                mfsched_core::traces::TRACE_NAMES.join(", ")
            );
        }
        if let Some(w) = &self.actuator.webhook {
            for (model, url) in &w.urls {
                if !url.starts_with("http://") {
                    bail!("actuator.webhook.urls.{model}: '{url}' must be a plain http:// URL");
                }
            }
        }
        Ok(())
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
        if let Some(p) = &mut self.policy.plugin_dir {
            fix(p);
        }
        if let Some(p) = &mut self.policy.bundle_dir {
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
}
