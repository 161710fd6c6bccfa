//! `mfsched gpu-proxy`: a stand-in model server whose "inference" is a wgpu
//! compute kernel of tunable intensity, so that co-location on a real card
//! (or on lavapipe, the CPU's software Vulkan) can be profiled without model
//! weights or a serving stack: the `process` actuator starts one per model,
//! NVML (or the host sampler) measures the card, `profile --live` reads each
//! proxy's counters as it reads a real server's.
//!
//! Two kernel families (`proxy.wgsl`, driven by `kernel.rs`):
//!
//! - `memory`: streams a buffer of `batch` × 1 MiB, read-modify-write, so it
//!   is bound by memory bandwidth and holds `batch` MiB of device memory;
//! - `compute`: `batch` groups of 64 vec4 lanes, each running `iterations`
//!   steps of four independent chains of dependent FMAs in registers: compute
//!   bound, a few KiB.
//!
//! `workgroups` caps the workgroups of 64 invocations a dispatch runs (they
//! stride over the buffer): the proxy's share of the device. The loop waits
//! for each dispatch before the next; with a rate file it offers that many
//! dispatches per second (re-read every second; absent or 0: as fast as the
//! device allows), so a script holds a load regime as a load generator does.
//!
//! Over HTTP (the daemon's bounded accept loop: a connection cap, header and
//! connection timeouts, no request body read):
//!
//! - `GET /metrics`: dispatches (`mfsched_proxy_requests_total`) and items
//!   (`mfsched_proxy_items_total`), both labelled `model`, the buffer's bytes,
//!   the offered rate, and what runs where (`mfsched_proxy_info`);
//! - `GET /v2/models/{model}/ready`: 200 once the device is up and the first
//!   dispatch finished (the open inference protocol's readiness path).
//!
//! It says what it runs on: on a software adapter (lavapipe) the page and the
//! start-up line say the kernels run on the CPU.

mod kernel;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::fmt::Write as _;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kernel::Kernel;
pub use kernel::Shape;
use mfsched_daemon::{ApiLimits, Metrics, escape_label_value, serve_api};
use mfsched_surrogate::AdapterSummary;

/// Which kernel a proxy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Bandwidth bound: a `batch` MiB buffer read and written once per dispatch.
    Memory,
    /// Compute bound: FMA chains in registers, little memory traffic.
    Compute,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::Memory, Family::Compute];

    /// The argv word, and the shader's entry point.
    pub fn name(self) -> &'static str {
        match self {
            Family::Memory => "memory",
            Family::Compute => "compute",
        }
    }
}

/// The element type of the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F32,
    /// Needs the adapter's `SHADER_F16`; refused without it.
    F16,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::F16];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }
}

/// Longest `--model` name: it is a metric label and a URL path segment.
const MAX_MODEL_NAME: usize = 128;
/// Largest rate file read: one number.
const MAX_RATE_FILE_BYTES: u64 = 64;
/// Highest offered rate taken from the rate file, dispatches per second.
const MAX_RATE: f64 = 1e6;
/// How often the rate file is read again.
const RATE_REREAD: Duration = Duration::from_secs(1);
/// The longest the loop sleeps at once while pacing: it notices a stop or a
/// new rate within this.
const PACING_SLICE: Duration = Duration::from_millis(100);
/// How long a stopped proxy waits for the dispatch in flight before it exits
/// anyway (the process's exit releases the device).
const STOP_WAIT: Duration = Duration::from_secs(2);
/// The HTTP server's bounds: a scraper and a readiness poller at a time, a
/// few more for a person with curl.
const HTTP_LIMITS: ApiLimits = ApiLimits {
    max_connections: 16,
    header_timeout: Duration::from_secs(2),
    connection_lifetime: Duration::from_secs(5),
};

/// What the dispatch loop publishes and the HTTP handlers read.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    items: AtomicU64,
    /// The offered rate's bits (f64), 0 = closed loop.
    offered_rate: AtomicU64,
    /// The first dispatch finished.
    ready: AtomicBool,
    stop: AtomicBool,
}

/// A proxy whose device is open, not yet dispatching.
#[derive(Debug)]
pub struct GpuProxy {
    model: String,
    shape: Shape,
    kernel: Kernel,
    rate_file: Option<PathBuf>,
}

impl GpuProxy {
    /// Opens the device and allocates the working set: every failure (no
    /// adapter, f16 unsupported, a buffer past the adapter's limits) is here,
    /// before anything listens.
    pub fn new(model: &str, shape: Shape, rate_file: Option<PathBuf>) -> Result<Self> {
        if model.is_empty()
            || model.len() > MAX_MODEL_NAME
            || !model
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            bail!(
                "--model '{}' is not a model name (1 to {MAX_MODEL_NAME} letters, digits, '_', '-' or '.')",
                mfsched_core::printable(model, 80)
            );
        }
        let kernel = Kernel::new(shape)?;
        Ok(Self {
            model: model.to_owned(),
            shape,
            kernel,
            rate_file,
        })
    }

    pub fn adapter(&self) -> &AdapterSummary {
        self.kernel.adapter()
    }

    /// One line: what runs, and where.
    pub fn describe(&self) -> String {
        let s = self.shape;
        let work = match s.family {
            Family::Memory => format!("{} MiB streamed per dispatch", s.buffer_bytes() >> 20),
            Family::Compute => format!(
                "{} lanes × {} steps of 16 FMAs per dispatch",
                u64::from(s.batch) * 64,
                s.iterations
            ),
        };
        let software = if self.adapter().is_software() {
            "; a software adapter: the kernels run on the CPU, not on a GPU"
        } else {
            ""
        };
        format!(
            "gpu-proxy {}: {} kernel, {}, batch {}, {} workgroups of 64 ({work}), {} buffer bytes, on adapter {}{software}",
            self.model,
            s.family.name(),
            s.precision.name(),
            s.batch,
            self.kernel.groups(),
            s.buffer_bytes(),
            self.adapter()
        )
    }

    /// Dispatches in a loop (on a thread of its own: each dispatch blocks on
    /// the device) and serves `/metrics` and readiness on `listener` until
    /// `shutdown` resolves (`Ok`) or a dispatch fails (`Err`). Runs inside tokio.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<()> {
        let counters = Arc::new(Counters::default());
        let page = Arc::new(Page {
            model: self.model.clone(),
            shape: self.shape,
            groups: self.kernel.groups(),
            adapter: self.adapter().clone(),
            counters: Arc::clone(&counters),
        });
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/v2/models/{model}/ready", get(ready))
            .with_state(Arc::clone(&page));
        let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
        let http = tokio::spawn(serve_api(
            listener,
            app,
            HTTP_LIMITS,
            Arc::new(Metrics::default()),
            async move {
                let _ = http_stopped.await;
            },
        ));
        let (done_tx, mut done) = tokio::sync::oneshot::channel();
        let loop_counters = Arc::clone(&counters);
        let GpuProxy {
            shape,
            kernel,
            rate_file,
            ..
        } = self;
        std::thread::Builder::new()
            .name("gpu-proxy dispatch".into())
            .spawn(move || {
                let result = dispatch_loop(&kernel, shape, rate_file, &loop_counters);
                // The receiver is gone only once serve returned: nobody to tell.
                let _ = done_tx.send(result);
            })
            .context("cannot start the dispatch thread")?;
        let panicked = || anyhow::anyhow!("the dispatch thread ended without a word (it panicked)");
        let outcome = tokio::select! {
            () = shutdown => {
                counters.stop.store(true, Ordering::Relaxed);
                // The dispatch in flight finishes first; past STOP_WAIT the
                // process exits anyway.
                match tokio::time::timeout(STOP_WAIT, &mut done).await {
                    Ok(result) => result.unwrap_or_else(|_| Err(panicked())),
                    Err(_) => {
                        tracing::warn!(
                            "a dispatch was still running {} s after the stop; exiting without it",
                            STOP_WAIT.as_secs()
                        );
                        Ok(())
                    }
                }
            }
            result = &mut done => match result {
                Ok(result) => result.context("the dispatch loop failed"),
                Err(_) => Err(panicked()),
            },
        };
        let _ = stop_http.send(());
        let _ = http.await;
        outcome
    }
}

/// Dispatches until `counters.stop`: back to back without a rate, else paced
/// at the rate file's dispatches per second.
fn dispatch_loop(
    kernel: &Kernel,
    shape: Shape,
    rate_file: Option<PathBuf>,
    counters: &Counters,
) -> Result<()> {
    let mut rate = RateFile::new(rate_file);
    let mut next = Instant::now();
    let mut seq: u32 = 0;
    while !counters.stop.load(Ordering::Relaxed) {
        let offered = rate.current();
        counters
            .offered_rate
            .store(offered.to_bits(), Ordering::Relaxed);
        if offered > 0.0 {
            let now = Instant::now();
            // A backlog of more than a second (a slow device, a stretch of
            // closed loop) is dropped, not burst through.
            if next + Duration::from_secs(1) < now {
                next = now;
            }
            if next > now {
                std::thread::sleep((next - now).min(PACING_SLICE));
                continue;
            }
            next += Duration::from_secs_f64(1.0 / offered);
        }
        kernel.dispatch(seq)?;
        seq = seq.wrapping_add(1);
        counters.requests.fetch_add(1, Ordering::Relaxed);
        counters
            .items
            .fetch_add(u64::from(shape.batch), Ordering::Relaxed);
        if !counters.ready.swap(true, Ordering::Relaxed) {
            tracing::info!("first dispatch done: ready");
        }
    }
    Ok(())
}

/// The offered rate from `--rate-file`, read at most once per [`RATE_REREAD`].
#[derive(Debug)]
struct RateFile {
    path: Option<PathBuf>,
    rate: f64,
    read_at: Option<Instant>,
    /// The last complaint, so a bad file is reported once, not every second.
    complaint: Option<String>,
}

impl RateFile {
    fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            rate: 0.0,
            read_at: None,
            complaint: None,
        }
    }

    /// Dispatches per second now, 0 for as fast as the device allows.
    fn current(&mut self) -> f64 {
        let Some(path) = &self.path else { return 0.0 };
        if self.read_at.is_some_and(|t| t.elapsed() < RATE_REREAD) {
            return self.rate;
        }
        self.read_at = Some(Instant::now());
        match read_rate(path) {
            Ok(rate) => {
                if rate != self.rate {
                    tracing::info!("offered rate {rate} dispatches/s (0: closed loop)");
                }
                self.rate = rate;
                self.complaint = None;
            }
            Err(e) => {
                let e = format!("{e:#}");
                if self.complaint.as_ref() != Some(&e) {
                    tracing::warn!("--rate-file: {e}; keeping {} dispatches/s", self.rate);
                    self.complaint = Some(e);
                }
            }
        }
        self.rate
    }
}

/// The rate in `path`: absent is 0 (closed loop); otherwise one number in
/// `[0, MAX_RATE]`.
fn read_rate(path: &std::path::Path) -> Result<f64> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0.0),
        _ => {}
    }
    let text = mfsched_core::read_capped_to_string(path, MAX_RATE_FILE_BYTES, "the rate file")?;
    let word = text.trim();
    match word.parse::<f64>() {
        Ok(rate) if (0.0..=MAX_RATE).contains(&rate) => Ok(rate),
        _ => bail!(
            "{}: '{}' is not a rate (dispatches per second, 0 to {MAX_RATE})",
            mfsched_core::printable_path(path),
            mfsched_core::printable(word, 40)
        ),
    }
}

/// What the HTTP handlers show.
#[derive(Debug)]
struct Page {
    model: String,
    shape: Shape,
    groups: u32,
    adapter: AdapterSummary,
    counters: Arc<Counters>,
}

impl Page {
    fn exposition(&self) -> String {
        let c = &self.counters;
        let model = escape_label_value(&self.model);
        let mut out = String::new();
        let on = if self.adapter.is_software() {
            "a software adapter: the kernels run on the CPU, not on a GPU"
        } else {
            "a hardware adapter"
        };
        writeln!(
            out,
            "# mfsched gpu-proxy: a compute kernel standing in for a model server, on {on}"
        )
        .ok();
        let samples: [(&str, &str, &str, f64); 4] = [
            (
                "mfsched_proxy_requests_total",
                "counter",
                "Dispatches completed (one request each).",
                c.requests.load(Ordering::Relaxed) as f64,
            ),
            (
                "mfsched_proxy_items_total",
                "counter",
                "Items processed, batch per dispatch (memory: 1 MiB chunks read and written; compute: groups of 64 vec4 lanes of FMA chains).",
                c.items.load(Ordering::Relaxed) as f64,
            ),
            (
                "mfsched_proxy_buffer_bytes",
                "gauge",
                "Bytes of device memory the proxy's buffer holds (its working set).",
                self.shape.buffer_bytes() as f64,
            ),
            (
                "mfsched_proxy_offered_rate",
                "gauge",
                "Dispatches per second offered by the rate file; 0 = as fast as the device allows.",
                f64::from_bits(c.offered_rate.load(Ordering::Relaxed)),
            ),
        ];
        for (name, kind, help, value) in samples {
            writeln!(out, "# HELP {name} {help}").ok();
            writeln!(out, "# TYPE {name} {kind}").ok();
            writeln!(out, "{name}{{model=\"{model}\"}} {value}").ok();
        }
        writeln!(
            out,
            "# HELP mfsched_proxy_info What the proxy runs, and on which adapter."
        )
        .ok();
        writeln!(out, "# TYPE mfsched_proxy_info gauge").ok();
        writeln!(
            out,
            "mfsched_proxy_info{{model=\"{model}\",family=\"{}\",precision=\"{}\",batch=\"{}\",workgroups=\"{}\",iterations=\"{}\",adapter=\"{}\",device_type=\"{:?}\"}} 1",
            self.shape.family.name(),
            self.shape.precision.name(),
            self.shape.batch,
            self.groups,
            self.shape.iterations,
            escape_label_value(&self.adapter.name),
            self.adapter.device_type
        )
        .ok();
        out
    }
}

async fn metrics(State(page): State<Arc<Page>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        page.exposition(),
    )
        .into_response()
}

async fn ready(State(page): State<Arc<Page>>, Path(model): Path<String>) -> StatusCode {
    if model != page.model {
        StatusCode::NOT_FOUND
    } else if page.counters.ready.load(Ordering::Relaxed) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

#[cfg(test)]
mod tests {
    use super::kernel::CHUNK_BYTES;
    use super::*;

    #[test]
    fn the_rate_file_is_one_bounded_number_and_absent_means_closed_loop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rate");
        assert_eq!(read_rate(&path).expect("absent"), 0.0);
        for (text, want) in [("12.5\n", 12.5), ("0", 0.0), (" 3 ", 3.0)] {
            std::fs::write(&path, text).expect("write");
            assert_eq!(read_rate(&path).expect(text), want);
        }
        for bad in ["-1", "NaN", "inf", "1e9", "fast", ""] {
            std::fs::write(&path, bad).expect("write");
            let e = format!("{:#}", read_rate(&path).expect_err(bad));
            assert!(e.contains("is not a rate"), "{bad}: {e}");
        }
        // Past the cap: refused by the capped reader, not read whole.
        std::fs::write(&path, "1".repeat(1000)).expect("write");
        assert!(read_rate(&path).is_err());
        // A bad file keeps the last good rate.
        std::fs::write(&path, "7").expect("write");
        let mut rate = RateFile::new(Some(path.clone()));
        assert_eq!(rate.current(), 7.0);
        std::fs::write(&path, "oops").expect("write");
        rate.read_at = None;
        assert_eq!(rate.current(), 7.0);
        assert!(rate.complaint.is_some());
    }

    #[test]
    fn the_page_names_the_model_and_says_a_software_adapter_is_the_cpu() {
        let page = Page {
            model: "mem\"a".into(),
            shape: Shape {
                family: Family::Memory,
                precision: Precision::F32,
                batch: 4,
                workgroups: 8,
                iterations: 1,
            },
            groups: 8,
            adapter: AdapterSummary {
                name: "llvmpipe (LLVM 19.1.7, 256 bits)".into(),
                device_type: wgpu::DeviceType::Cpu,
                backend: wgpu::Backend::Vulkan,
                driver: String::new(),
            },
            counters: Arc::new(Counters::default()),
        };
        page.counters.requests.store(3, Ordering::Relaxed);
        page.counters.items.store(12, Ordering::Relaxed);
        let text = page.exposition();
        assert!(text.contains("the kernels run on the CPU"), "{text}");
        assert!(
            text.contains("mfsched_proxy_requests_total{model=\"mem\\\"a\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("mfsched_proxy_items_total{model=\"mem\\\"a\"} 12"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "mfsched_proxy_buffer_bytes{{model=\"mem\\\"a\"}} {}",
                4 * CHUNK_BYTES
            )),
            "{text}"
        );
    }

    #[test]
    fn a_model_name_that_is_no_label_or_path_segment_is_refused_before_the_device() {
        let shape = Shape {
            family: Family::Compute,
            precision: Precision::F32,
            batch: 1,
            workgroups: 1,
            iterations: 1,
        };
        for bad in ["", "a/b", "a b", &"x".repeat(200)] {
            let e = format!("{:#}", GpuProxy::new(bad, shape, None).expect_err(bad));
            assert!(e.contains("is not a model name"), "{e}");
        }
    }
}
