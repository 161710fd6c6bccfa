//! `mfsched sim serve`: the simulator as N model servers on loopback, so a
//! deployment can be rehearsed and the whole production chain tested (a
//! Prometheus server scraping them, the daemon reading Prometheus and
//! actuating them through its webhooks) without a GPU. Everything here is a
//! simulation and says so: the `/metrics` pages carry a `# simulated` comment and
//! an `mfsched_sim_info` series.
//!
//! Every tick (`tick`), the simulated card runs the servers' joint configuration
//! under the trace's workload level: one noisy [`Simulator::measure`], which
//! gives each model's throughput and the offered load ρ it drew. Each server
//! then counts, over the tick:
//!
//! - **requests**: ρ × its reference rate per second (the offered requests; the
//!   simulated servers keep up with them, so they complete at that rate);
//! - **items**: its simulated throughput per second, in the model's unit
//!   (generated tokens for an LLM, inferences for the others): what the joint
//!   configuration achieves.
//!
//! and reports ρ's excess over 1 as waiting requests (an oversubscribed server
//! queues). The exposition follows vLLM's metric names for `llm` models and
//! Triton's for the others (`--format` overrides), with the label each uses for
//! the model (`model_name`, `model`) set to the model's name.
//!
//! Each server answers on its own port:
//!
//! - `GET /metrics`: the exposition text;
//! - `GET /config`: its configuration (`{"model", "config", "index"}`);
//! - `POST /config`: a new configuration, the body the daemon's webhook
//!   actuator sends (`{"model", "tick", "config"}`); 400 with the reason if it
//!   names another model or a configuration off the model's grid;
//! - `GET /sim/state`: the whole simulation (tick, level, ρ, every model);
//! - `POST /sim/stop`: this server stops answering (a crashed server, for tests
//!   and rehearsals of failures).

use anyhow::{Context, Result, bail};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

use super::Simulator;
use mfsched_core::{KnobSetting, Problem, WorkloadLevel};
use mfsched_daemon::ModelUpdate;
use mfsched_daemon::escape_label_value;

/// Largest request body a simulated server reads (a configuration is a few hundred bytes).
const MAX_BODY_BYTES: usize = 16 << 10;

/// Which serving stack's metric names a simulated server reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    Vllm,
    Triton,
}

impl MetricsFormat {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "vllm" => Some(Self::Vllm),
            "triton" => Some(Self::Triton),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Triton => "triton",
        }
    }

    /// vLLM serves language models; Triton everything else.
    pub fn for_kind(kind: &str) -> Self {
        if kind == "llm" {
            Self::Vllm
        } else {
            Self::Triton
        }
    }
}

/// What `sim serve` runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub problem: Problem,
    /// The workload level of each tick, replayed cyclically.
    pub levels: Vec<WorkloadLevel>,
    pub tick: Duration,
    pub seed: u64,
    /// Per model: requests per second at offered load ρ = 1.
    pub reference_rates: Vec<f64>,
    /// Per model.
    pub formats: Vec<MetricsFormat>,
    pub listen: IpAddr,
    /// Model i listens on `port_base + i`; 0 picks free ports.
    pub port_base: u16,
}

/// One model server's counters and its configuration.
#[derive(Debug, Clone, Serialize)]
struct ServerState {
    name: String,
    config: u32,
    /// Simulated throughput of the last tick, model unit per second.
    throughput: f64,
    requests_total: f64,
    items_total: f64,
    waiting: f64,
    /// Configurations received through `POST /config`, and those refused.
    updates: u64,
    refused: u64,
    stopped: bool,
}

/// The whole simulation, as `GET /sim/state` shows it.
#[derive(Debug, Clone, Serialize)]
struct WorldView {
    simulated: &'static str,
    /// When the first tick ran (ms since the Unix epoch) and the tick length:
    /// trace step k runs from `started_unix_ms + k × tick_ms`.
    started_unix_ms: u64,
    tick_ms: u64,
    tick: u64,
    level: WorkloadLevel,
    offered_load: f64,
    vram_used_mib: f64,
    utilization: f64,
    /// The memory controller's busy share (`GpuState::contention`).
    contention: f64,
    joint: Vec<u32>,
    models: Vec<ServerState>,
}

#[derive(Debug)]
struct World {
    problem: Problem,
    sim: Simulator,
    options: ServeOptions,
    started_unix_ms: u64,
    tick: u64,
    level: WorkloadLevel,
    offered_load: f64,
    /// The simulated card's state in the last tick.
    vram_used_mib: f64,
    utilization: f64,
    contention: f64,
    servers: Vec<ServerState>,
    stop: Vec<watch::Sender<bool>>,
}

impl World {
    fn new(options: ServeOptions, stop: Vec<watch::Sender<bool>>) -> Result<Self> {
        let problem = options.problem.clone();
        let servers = problem
            .models
            .iter()
            .zip(&problem.current)
            .map(|(m, &c)| ServerState {
                name: m.name.clone(),
                config: c,
                throughput: 0.0,
                requests_total: 0.0,
                items_total: 0.0,
                waiting: 0.0,
                updates: 0,
                refused: 0,
                stopped: false,
            })
            .collect();
        Ok(Self {
            sim: Simulator::new(&problem, options.seed)?,
            level: options.levels[0],
            problem,
            options,
            started_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            tick: 0,
            offered_load: 0.0,
            vram_used_mib: 0.0,
            utilization: 0.0,
            contention: 0.0,
            servers,
            stop,
        })
    }

    fn joint(&self) -> Vec<u32> {
        self.servers.iter().map(|s| s.config).collect()
    }

    /// One tick of the simulated card: measure the running joint configuration
    /// under the trace's level and advance every counter by `dt`.
    fn advance(&mut self, dt: f64) {
        let level = self.options.levels[(self.tick % self.options.levels.len() as u64) as usize];
        let joint = self.joint();
        let m = self.sim.measure(&joint, level, 1);
        self.level = level;
        self.offered_load = m.offered_load;
        self.vram_used_mib = m.state.vram_used_mib;
        self.utilization = m.state.utilization;
        self.contention = m.state.contention.unwrap_or(0.0);
        for (i, s) in self.servers.iter_mut().enumerate() {
            let rate = m.offered_load * self.options.reference_rates[i];
            s.throughput = m.throughput[i];
            s.requests_total += rate * dt;
            s.items_total += m.throughput[i] * dt;
            s.waiting = ((m.offered_load - 1.0).max(0.0) * self.options.reference_rates[i]).round();
        }
        self.tick += 1;
    }

    fn view(&self) -> WorldView {
        WorldView {
            simulated: super::DEVICE_NAME,
            started_unix_ms: self.started_unix_ms,
            tick_ms: self.options.tick.as_millis() as u64,
            tick: self.tick,
            level: self.level,
            offered_load: self.offered_load,
            vram_used_mib: self.vram_used_mib,
            utilization: self.utilization,
            contention: self.contention,
            joint: self.joint(),
            models: self.servers.clone(),
        }
    }

    /// The exposition text of model `i`'s server.
    fn exposition(&self, i: usize) -> String {
        let s = &self.servers[i];
        let model = &self.problem.models[i];
        let mut out = String::new();
        // Metric names and label names are the serving stacks'; the values are simulated.
        writeln!(
            out,
            "# simulated: {} (mfsched sim serve), not a real server",
            super::DEVICE_NAME
        )
        .ok();
        let name = escape_label_value(&s.name);
        let (label, metrics): (&str, [(&str, &str, &str, f64); 4]) = match self.options.formats[i] {
            MetricsFormat::Vllm => (
                "model_name",
                [
                    (
                        "vllm:request_success_total",
                        "counter",
                        "Count of successfully processed requests.",
                        s.requests_total,
                    ),
                    (
                        "vllm:generation_tokens_total",
                        "counter",
                        "Number of generation tokens processed.",
                        s.items_total,
                    ),
                    (
                        "vllm:num_requests_running",
                        "gauge",
                        "Number of requests currently running on GPU.",
                        (self.offered_load.min(1.0) * self.options.reference_rates[i]).round(),
                    ),
                    (
                        "vllm:num_requests_waiting",
                        "gauge",
                        "Number of requests waiting to be processed.",
                        s.waiting,
                    ),
                ],
            ),
            MetricsFormat::Triton => (
                "model",
                [
                    (
                        "nv_inference_request_success",
                        "counter",
                        "Number of successful inference requests, all batch sizes",
                        s.requests_total,
                    ),
                    (
                        "nv_inference_count",
                        "counter",
                        "Number of inferences performed (does not include cached requests)",
                        s.items_total,
                    ),
                    (
                        "nv_inference_exec_count",
                        "counter",
                        "Number of model executions performed (does not include cached requests)",
                        s.requests_total,
                    ),
                    (
                        "nv_inference_pending_request_count",
                        "gauge",
                        "Instantaneous number of pending requests awaiting execution per-model.",
                        s.waiting,
                    ),
                ],
            ),
        };
        let version = match self.options.formats[i] {
            MetricsFormat::Vllm => String::new(),
            MetricsFormat::Triton => ",version=\"1\"".to_owned(),
        };
        for (metric, kind, help, value) in metrics {
            writeln!(out, "# HELP {metric} {help}").ok();
            writeln!(out, "# TYPE {metric} {kind}").ok();
            writeln!(out, "{metric}{{{label}=\"{name}\"{version}}} {value}").ok();
        }
        // The card itself, as NVIDIA's DCGM exporter names it (memory in MiB,
        // utilisation in percent, DRAM active as a fraction): every server of
        // the one card shows it.
        for (metric, help, value) in [
            (
                "DCGM_FI_DEV_FB_USED",
                "Framebuffer memory used (in MiB).",
                self.vram_used_mib,
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL",
                "GPU utilization (in %).",
                100.0 * self.utilization,
            ),
            (
                "DCGM_FI_PROF_DRAM_ACTIVE",
                "Ratio of cycles the device memory interface is active sending or receiving data.",
                self.contention,
            ),
        ] {
            writeln!(out, "# HELP {metric} {help}").ok();
            writeln!(out, "# TYPE {metric} gauge").ok();
            writeln!(
                out,
                "{metric}{{gpu=\"0\",modelName=\"{}\"}} {value}",
                super::DEVICE_NAME
            )
            .ok();
        }
        writeln!(
            out,
            "# HELP mfsched_sim_info The simulated server: its model, family and configuration index."
        )
        .ok();
        writeln!(out, "# TYPE mfsched_sim_info gauge").ok();
        writeln!(
            out,
            "mfsched_sim_info{{model=\"{name}\",family=\"{}\",config=\"{}\"}} 1",
            escape_label_value(&model.family),
            s.config
        )
        .ok();
        out
    }

    fn apply(&mut self, i: usize, update: &ModelUpdate) -> Result<u32, String> {
        let model = &self.problem.models[i];
        if update.model != model.name {
            return Err(format!(
                "this simulated server runs model '{}', not '{}'",
                model.name, update.model
            ));
        }
        let index = model.find_config(&update.config).ok_or_else(|| {
            format!(
                "'{}' is not a configuration of {}",
                update.config, model.name
            )
        })?;
        let index = u32::try_from(index).map_err(|_| "configuration index out of range")?;
        let s = &mut self.servers[i];
        s.config = index;
        s.updates += 1;
        Ok(index)
    }
}

#[derive(Clone)]
struct ServerCtx {
    world: Arc<Mutex<World>>,
    index: usize,
}

impl ServerCtx {
    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The configuration a server reports (`GET /config`).
#[derive(Debug, Serialize)]
struct ConfigView {
    model: String,
    config: KnobSetting,
    index: u32,
}

async fn metrics(State(ctx): State<ServerCtx>) -> Response {
    let text = ctx.world().exposition(ctx.index);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn get_config(State(ctx): State<ServerCtx>) -> Response {
    let w = ctx.world();
    let s = &w.servers[ctx.index];
    Json(ConfigView {
        model: s.name.clone(),
        config: w.problem.models[ctx.index].knobs(s.config as usize),
        index: s.config,
    })
    .into_response()
}

async fn post_config(State(ctx): State<ServerCtx>, body: axum::body::Bytes) -> Response {
    let update: ModelUpdate = match serde_json::from_slice(&body) {
        Ok(u) => u,
        Err(e) => {
            ctx.world().servers[ctx.index].refused += 1;
            return (
                StatusCode::BAD_REQUEST,
                format!("bad configuration body: {e}\n"),
            )
                .into_response();
        }
    };
    let result = ctx.world().apply(ctx.index, &update);
    match result {
        Ok(index) => {
            tracing::info!(
                model = %update.model,
                tick = update.tick,
                "simulated server: configuration {} ({index})",
                update.config
            );
            StatusCode::NO_CONTENT.into_response()
        }
        Err(reason) => {
            ctx.world().servers[ctx.index].refused += 1;
            (StatusCode::BAD_REQUEST, format!("{reason}\n")).into_response()
        }
    }
}

async fn sim_state(State(ctx): State<ServerCtx>) -> Response {
    Json(ctx.world().view()).into_response()
}

async fn sim_stop(State(ctx): State<ServerCtx>) -> Response {
    let mut w = ctx.world();
    w.servers[ctx.index].stopped = true;
    w.stop[ctx.index].send_replace(true);
    tracing::warn!(
        model = %w.servers[ctx.index].name,
        "simulated server stopped on request (POST /sim/stop)"
    );
    StatusCode::NO_CONTENT.into_response()
}

/// The running simulated servers.
#[derive(Debug)]
pub struct Servers {
    /// Model name → the address its server listens on.
    pub addresses: BTreeMap<String, SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Servers {
    /// Binds every model's listener and starts the simulated card's ticks. Must
    /// be called inside a tokio runtime.
    pub async fn start(options: ServeOptions) -> Result<Self> {
        let problem = options.problem.clone();
        let n = problem.models.len();
        if options.levels.is_empty() {
            bail!("sim serve needs at least one workload level");
        }
        if options.reference_rates.len() != n || options.formats.len() != n {
            bail!("sim serve needs a reference rate and a format per model");
        }
        if let Some(r) = options
            .reference_rates
            .iter()
            .find(|r| !(r.is_finite() && **r > 0.0))
        {
            bail!("reference rates must be positive, got {r}");
        }
        if options.tick.is_zero() {
            bail!("the simulated tick must be positive");
        }
        let (stop, stop_rx): (Vec<_>, Vec<_>) = (0..n).map(|_| watch::channel(false)).unzip();
        let mut world = World::new(options.clone(), stop)?;
        // The first tick runs before anyone can scrape: no page is ever empty.
        world.advance(0.0);
        let world = Arc::new(Mutex::new(world));
        let mut addresses = BTreeMap::new();
        let mut tasks = Vec::with_capacity(n + 1);
        for (i, mut stop_rx) in stop_rx.into_iter().enumerate() {
            let port = if options.port_base == 0 {
                0
            } else {
                options
                    .port_base
                    .checked_add(i as u16)
                    .context("--port-base leaves no room for every model")?
            };
            let addr = SocketAddr::new(options.listen, port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let bound = listener.local_addr().context("listener address")?;
            addresses.insert(problem.models[i].name.clone(), bound);
            let app = Router::new()
                .route("/metrics", get(metrics))
                .route("/config", get(get_config).post(post_config))
                .route("/sim/state", get(sim_state))
                .route("/sim/stop", post(sim_stop))
                .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
                .with_state(ServerCtx {
                    world: Arc::clone(&world),
                    index: i,
                });
            tasks.push(tokio::spawn(async move {
                let stopped = async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                };
                if let Err(e) = axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await
                {
                    tracing::error!("simulated server {bound}: {e}");
                }
            }));
        }
        let ticker = Arc::clone(&world);
        let period = options.tick;
        tasks.push(tokio::spawn(async move {
            let mut interval = tokio::time::interval(period);
            interval.tick().await;
            loop {
                interval.tick().await;
                ticker
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .advance(period.as_secs_f64());
            }
        }));
        Ok(Self { addresses, tasks })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(problem: Problem) -> ServeOptions {
        let n = problem.models.len();
        ServeOptions {
            formats: problem
                .models
                .iter()
                .map(|m| MetricsFormat::for_kind(&m.kind))
                .collect(),
            problem,
            levels: vec![WorkloadLevel::Low, WorkloadLevel::Burst],
            tick: Duration::from_secs(1),
            seed: 3,
            reference_rates: vec![10.0; n],
            listen: IpAddr::from([127, 0, 0, 1]),
            port_base: 0,
        }
    }

    #[test]
    fn counters_follow_the_offered_load_and_the_simulated_throughput() {
        let problem = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        let mut w = World::new(options(problem.clone()), Vec::new()).expect("physics");
        w.advance(2.0);
        assert_eq!(w.level, WorkloadLevel::Low);
        let low = w.offered_load;
        assert!((0.3..0.6).contains(&low), "{low}");
        for s in &w.servers {
            assert!((s.requests_total - low * 10.0 * 2.0).abs() < 1e-9);
            assert!((s.items_total - s.throughput * 2.0).abs() < 1e-9);
            assert_eq!(s.waiting, 0.0, "a low load queues nothing");
        }
        w.advance(1.0);
        assert_eq!(w.level, WorkloadLevel::Burst);
        // The pages carry each stack's names, the model label, and say they are simulated.
        let llm = problem
            .models
            .iter()
            .position(|m| m.kind == "llm")
            .expect("an llm");
        let page = w.exposition(llm);
        assert!(page.starts_with("# simulated:"), "{page}");
        let name = &problem.models[llm].name;
        assert!(
            page.contains(&format!(
                "vllm:request_success_total{{model_name=\"{name}\"}}"
            )),
            "{page}"
        );
        let vision = problem
            .models
            .iter()
            .position(|m| m.kind != "llm")
            .expect("a detector");
        let page = w.exposition(vision);
        assert!(
            page.contains("nv_inference_request_success{model=\""),
            "{page}"
        );
        // A configuration for another model, or off the grid, is refused.
        let other = ModelUpdate {
            model: "nobody".into(),
            tick: 1,
            config: problem.models[0].knobs(0),
        };
        assert!(
            w.apply(0, &other)
                .expect_err("another model")
                .contains("not 'nobody'")
        );
        let last = problem.models[0].configs.len() - 1;
        let good = ModelUpdate {
            model: problem.models[0].name.clone(),
            tick: 2,
            config: problem.models[0].knobs(last),
        };
        assert_eq!(w.apply(0, &good), Ok(last as u32));
        assert_eq!(w.joint()[0], last as u32);
    }
}
