//! The load the model servers see, read from the serving stack
//! (`workload.source = "prometheus"`).
//!
//! Per model, the offered request rate comes either from a PromQL query
//! against a Prometheus server (`/api/v1/query`, the preset's
//! `sum(rate(counter{label="name"}[window]))` or the user's own expression) or
//! from a direct scrape of the model server's `/metrics` (the request counter,
//! its rate taken between two scrapes). Each model has a poller task of its own,
//! so a slow or dead server never holds a tick: the tick reads whatever the
//! pollers last stored.
//!
//! The tick's load ratio is the mean over the models of rate / reference rate;
//! the forecaster ([`crate::forecast`]) turns the ratios into the next period's,
//! and `thresholds` into a regime. A reading that fails is counted and logged
//! once per run of failures; the model's last reading stands in for `stale_ms`;
//! with no model read within that, the tick decides on `safe_level`. Every
//! fallback tick is counted by kind in `/metrics`. The first tick waits for
//! every model's first reading, for at most `stale_ms`
//! ([`LoadMonitor::first_readings`]): a rate needs two scrapes, and a decision
//! on the safe level before the load is known reconfigures servers the next
//! reading may send back.

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::{ModelLoadConfig, PrometheusConfig};
use super::forecast::{ForecastKind, Forecaster};
use super::metrics::{Metrics, escape_label_value};
use mfsched_core::{Problem, WorkloadLevel};

/// The plain-HTTP client every reading goes through (no TLS stack).
pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// The load a tick decides on, and the throughput the servers report.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReading {
    pub level: WorkloadLevel,
    /// Mean load ratio over the models read (none on the safe level).
    pub observed: Option<f64>,
    /// The forecast ratio the level was chosen from.
    pub forecast: Option<f64>,
    /// `held` (a stale reading stood in) or `safe` (nothing was read: the safe level).
    pub fallback: Option<&'static str>,
    /// Per scenario model, the throughput its server reports: a recent
    /// reading of its throughput counter (none where no counter is
    /// configured or none is recent).
    pub measured: Vec<Option<ThroughputReading>>,
}

impl LoadReading {
    /// Per scenario model, the throughput its server reports, in its unit per
    /// second.
    pub fn throughput(&self) -> Vec<Option<f64>> {
        self.measured.iter().map(|r| r.map(|r| r.rate)).collect()
    }
}

/// One reading of a counter (a model's throughput, or its requests): its
/// rate over the span of time it covers, which says what the rate can be
/// attributed to (a span over a reconfiguration measures the downtime, not
/// the configuration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputReading {
    /// In the model's unit per second.
    pub rate: f64,
    /// When the span began: the counter value the rate is taken from was read
    /// then (for a PromQL query, its rate window before `at`).
    pub since: Instant,
    /// When it was read.
    pub at: Instant,
    /// The span is as long as the configured rate window: a counter that
    /// went down (its server restarted) starts a shorter one, whose rate
    /// counts only what finished since (llama-server counts a completion's
    /// tokens when it ends), until the window has filled again.
    pub whole: bool,
}

/// A model's last reading, as its poller stored it.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    /// Load ratio (rate / reference rate).
    ratio: Option<f64>,
    at: Option<Instant>,
    /// The latest attempt failed.
    failing: bool,
    /// The throughput counter's last reading.
    throughput: Option<ThroughputReading>,
}

/// How one model's rate is read.
#[derive(Debug)]
enum Source {
    /// `GET {url}/api/v1/query?query=…`: a rate, already per second, taken
    /// over `window` (`rate_window`; a query of the user's own is taken to
    /// cover it too).
    Query {
        uri: hyper::Uri,
        query: String,
        window: Duration,
    },
    /// `GET /metrics`: a counter; the rate over the scrapes of the last
    /// `window` (at least the previous one).
    Scrape {
        uri: hyper::Uri,
        metric: String,
        label: String,
        name: String,
        scrapes: ScrapeWindow,
    },
}

impl Source {
    /// The offered requests per second of `model`: where they arrive when
    /// `arrivals` names a page, else the server's request counter.
    fn requests(model: &str, m: &ModelLoadConfig, p: &PrometheusConfig) -> Result<Self> {
        if let Some(a) = &m.arrivals {
            return Ok(Self::Scrape {
                uri: a.uri(model)?,
                metric: a.metric.clone(),
                label: a.label.clone(),
                name: a.name_on_page(model),
                scrapes: ScrapeWindow::new(Duration::from_millis(m.rate_window_ms)),
            });
        }
        let (metric, label) = m.request_metric_and_label();
        Self::counter(model, m, p, metric, label, m.query.as_deref())
    }

    /// The throughput `model`'s server reports (its unit per second), where a
    /// counter is configured (`throughput_metric`, or the preset's).
    fn throughput(model: &str, m: &ModelLoadConfig, p: &PrometheusConfig) -> Result<Option<Self>> {
        let Some(metric) = m.throughput_metric_name() else {
            return Ok(None);
        };
        let (_, label) = m.request_metric_and_label();
        Self::counter(model, m, p, metric, label, None).map(Some)
    }

    /// A counter's rate: scraped from the server, or `query` (by default the
    /// rate of `metric` for the model) asked of Prometheus.
    fn counter(
        model: &str,
        m: &ModelLoadConfig,
        p: &PrometheusConfig,
        metric: String,
        label: String,
        query: Option<&str>,
    ) -> Result<Self> {
        let name = m.name_on_server(model);
        if let Some(url) = &m.scrape {
            return Ok(Self::Scrape {
                uri: url
                    .parse()
                    .with_context(|| format!("workload.prometheus.models.{model}.scrape"))?,
                metric,
                label,
                name,
                scrapes: ScrapeWindow::new(Duration::from_millis(m.rate_window_ms)),
            });
        }
        let query = match query {
            Some(q) => q.to_owned(),
            None => format!(
                "sum(rate({metric}{{{label}=\"{}\"}}[{}]))",
                escape_label_value(&name),
                p.rate_window
            ),
        };
        let base = p.url.as_deref().context("workload.prometheus.url")?;
        let encoded: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
        let uri = format!(
            "{}/api/v1/query?query={encoded}",
            base.trim_end_matches('/')
        )
        .parse()
        .with_context(|| format!("workload.prometheus.models.{model}: the query URL"))?;
        let window = crate::config::promql_duration(&p.rate_window)
            .context("workload.prometheus.rate_window")?;
        Ok(Self::Query { uri, query, window })
    }

    fn describe(&self) -> String {
        match self {
            Self::Query { query, .. } => format!("PromQL {query}"),
            Self::Scrape { uri, metric, .. } => format!("{metric} from {uri}"),
        }
    }

    /// Per second, and the span it covers; `None` while a scrape has no
    /// earlier counter value to take a rate from (the first scrape, or after
    /// the counter reset).
    async fn rate(
        &mut self,
        client: &HttpClient,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Option<ThroughputReading>> {
        let reading = self.raw_rate(client, timeout, max_bytes).await?;
        sane_rate(reading.map(|r| r.rate))?;
        Ok(reading)
    }

    async fn raw_rate(
        &mut self,
        client: &HttpClient,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Option<ThroughputReading>> {
        match self {
            Self::Query { uri, window, .. } => {
                let body = get(client, uri, timeout, max_bytes).await?;
                let now = Instant::now();
                Ok(Some(ThroughputReading {
                    rate: query_value(&body)?,
                    since: now.checked_sub(*window).unwrap_or(now),
                    at: now,
                    whole: true,
                }))
            }
            Self::Scrape {
                uri,
                metric,
                label,
                name,
                scrapes,
            } => {
                let body = get(client, uri, timeout, max_bytes).await?;
                let text = std::str::from_utf8(&body).context("the /metrics page is not UTF-8")?;
                let value = sample_sum(text, metric, label, name)?;
                scrapes
                    .rate(value, Instant::now())
                    .map_err(|e| anyhow::anyhow!("{metric} {e}: the server restarted?"))
            }
        }
    }
}

/// A scraped counter's readings over a rate window.
#[derive(Debug)]
struct ScrapeWindow {
    window: Duration,
    /// (value, when read), oldest first: the newest reading at least
    /// `window` old, then every later one.
    readings: std::collections::VecDeque<(f64, Instant)>,
}

impl ScrapeWindow {
    fn new(window: Duration) -> Self {
        Self {
            window,
            readings: std::collections::VecDeque::new(),
        }
    }

    /// Records `value` read `now`; the rate since the oldest reading kept
    /// (`None` on the first). A counter that went down restarted with its
    /// server (or is not a counter): an error, and the rate starts again
    /// from this reading.
    fn rate(&mut self, value: f64, now: Instant) -> Result<Option<ThroughputReading>> {
        if let Some(&(last, _)) = self.readings.back()
            && value < last
        {
            self.readings.clear();
            self.readings.push_back((value, now));
            bail!("went down from {last} to {value}");
        }
        self.readings.push_back((value, now));
        while self.readings.len() > 2 && now.duration_since(self.readings[1].1) >= self.window {
            self.readings.pop_front();
        }
        let &(first, since) = self.readings.front().expect("just pushed");
        let span = now.duration_since(since);
        let dt = span.as_secs_f64();
        Ok((dt > 0.0).then(|| ThroughputReading {
            rate: (value - first) / dt,
            since,
            at: now,
            whole: span >= self.window,
        }))
    }
}

/// A negative or non-finite rate (a finite sum that overflows, a difference
/// of ±1.7e308 counters, a negative PromQL answer) is a failed reading, not a
/// load: it is counted and falls back like any other failure.
fn sane_rate(rate: Option<f64>) -> Result<Option<f64>> {
    match rate {
        Some(r) if !(r.is_finite() && r >= 0.0) => {
            bail!("the rate read is {r}, not a non-negative number")
        }
        _ => Ok(rate),
    }
}

/// One GET within `timeout`, the answer's body capped at `max_bytes`.
pub async fn get(
    client: &HttpClient,
    uri: &hyper::Uri,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Bytes> {
    let fetch = async {
        let response = client
            .get(uri.clone())
            .await
            .map_err(|e| anyhow::anyhow!("{uri}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            bail!("{uri}: HTTP {status}");
        }
        let body = Limited::new(response.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("{uri}: {e} (more than {max_bytes} bytes?)"))?;
        Ok(body.to_bytes())
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| anyhow::anyhow!("{uri}: no answer within {} ms", timeout.as_millis()))?
}

/// The sum of a query's result: an instant vector (summed) or a scalar.
fn query_value(body: &[u8]) -> Result<f64> {
    #[derive(Deserialize)]
    struct Answer {
        status: String,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        data: Option<Data>,
    }
    #[derive(Deserialize)]
    #[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
    enum Data {
        Vector(Vec<VectorSample>),
        Scalar((f64, String)),
        Matrix(serde::de::IgnoredAny),
        String(serde::de::IgnoredAny),
    }
    #[derive(Deserialize)]
    struct VectorSample {
        value: (f64, String),
    }
    let answer: Answer =
        serde_json::from_slice(body).context("the query answer is not Prometheus API JSON")?;
    if answer.status != "success" {
        bail!(
            "Prometheus refused the query: {}",
            answer.error.unwrap_or_else(|| answer.status.clone())
        );
    }
    let parse = |s: &str| {
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .with_context(|| format!("the query gave '{s}', not a finite number"))
    };
    match answer.data.context("the query answer has no data")? {
        Data::Vector(samples) if samples.is_empty() => {
            bail!("the query returned no series (is the server scraped yet?)")
        }
        Data::Vector(samples) => samples.iter().map(|s| parse(&s.value.1)).sum(),
        Data::Scalar((_, v)) => parse(&v),
        Data::Matrix(_) | Data::String(_) => {
            bail!("the query must give an instant vector or a scalar, not a range or a string")
        }
    }
}

/// The sum of `metric`'s samples whose `label` is `name` on a `/metrics` page
/// (a counter, or a gauge such as a DCGM exporter's). An empty `label` takes
/// every sample of the metric: a server that serves one model and names none
/// (llama.cpp's `llama-server`).
pub fn sample_sum(text: &str, metric: &str, label: &str, name: &str) -> Result<f64> {
    let [sum] = sample_sums(text, [metric], label, name)?;
    sum
}

/// [`sample_sum`] of each of `metrics` (with the same `label` and `name`),
/// from one parse of the page: an error for a page that does not parse, and
/// per metric its sum or why there is none.
pub fn sample_sums<const K: usize>(
    text: &str,
    metrics: [&str; K],
    label: &str,
    name: &str,
) -> Result<[Result<f64>; K]> {
    // The text format ignores comment lines other than HELP and TYPE; the
    // parser refuses them, so they are dropped first.
    let page: String = text
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with('#') || l.starts_with("# HELP ") || l.starts_with("# TYPE ")
        })
        .flat_map(|l| [l, "\n"])
        .collect();
    let (_, families) = nom_openmetrics::parser::prometheus(&page).map_err(|e| {
        anyhow::anyhow!(
            "the /metrics page does not parse: {}",
            first_line(&e.to_string())
        )
    })?;
    let mut found = [None; K];
    for sample in families.iter().flat_map(|f| &f.samples) {
        if !(label.is_empty()
            || sample
                .labels()
                .iter()
                .any(|l| l.name == label && l.value == name))
        {
            continue;
        }
        // A metric asked for twice (one counter read as requests and as
        // throughput) sums into both.
        for (k, &m) in metrics.iter().enumerate() {
            if sample.name() == m {
                *found[k].get_or_insert(0.0) += sample.number();
            }
        }
    }
    Ok(std::array::from_fn(|k| {
        let metric = metrics[k];
        let value = found[k]
            .with_context(|| format!("no sample {metric}{{{label}=\"{name}\"}} on the page"))?;
        if !value.is_finite() {
            bail!("{metric}{{{label}=\"{name}\"}} is {value}");
        }
        Ok(value)
    }))
}

fn first_line(s: &str) -> &str {
    let line = s.lines().next().unwrap_or("");
    &line[..line.len().min(200)]
}

/// The pollers' readings and what the ticks make of them.
#[derive(Debug)]
pub struct LoadMonitor {
    readings: Arc<Mutex<Vec<Reading>>>,
    /// The scenario model each reading is of.
    model_of_slot: Vec<usize>,
    /// Models in the scenario.
    models: usize,
    forecaster: Forecaster,
    thresholds: [f64; 3],
    stale: Duration,
    safe_level: WorkloadLevel,
    /// The previous tick fell back to the safe level (logged on the change).
    on_safe_level: bool,
    /// How many models have had a first reading (each poller counts its own once).
    first_read: watch::Receiver<usize>,
    tasks: Vec<JoinHandle<()>>,
}

impl LoadMonitor {
    /// Starts one poller per configured model. Must be called inside tokio.
    pub fn start(
        config: &PrometheusConfig,
        forecast: ForecastKind,
        period_ms: u64,
        problem: &Problem,
        metrics: Arc<Metrics>,
    ) -> Result<Self> {
        let client = http_client();
        let readings = Arc::new(Mutex::new(vec![Reading::default(); config.models.len()]));
        let mut model_of_slot = Vec::with_capacity(config.models.len());
        let poll = config.poll(period_ms);
        let timeout = Duration::from_millis(config.timeout_ms);
        let mut tasks = Vec::with_capacity(config.models.len());
        let (first_read_tx, first_read) = watch::channel(0);
        let first_read_tx = Arc::new(first_read_tx);
        for (slot, (model, m)) in config.models.iter().enumerate() {
            let Some(index) = problem.model_index(model) else {
                bail!(
                    "workload.prometheus.models names model '{model}', which the scenario does not have"
                );
            };
            model_of_slot.push(index);
            let source = Source::requests(model, m, config)?;
            tracing::info!(model = %model, "load: {} (reference {} requests/s)", source.describe(), m.reference_rate);
            let throughput = Source::throughput(model, m, config)?;
            if let Some(t) = &throughput {
                tracing::info!(model = %model, "throughput: {}", t.describe());
            }
            tasks.push(tokio::spawn(poller(
                Poller {
                    model: model.clone(),
                    slot,
                    reference: m.reference_rate,
                    source,
                    throughput,
                    client: client.clone(),
                    poll,
                    timeout,
                    max_bytes: config.max_bytes,
                },
                Arc::clone(&readings),
                Arc::clone(&metrics),
                Arc::clone(&first_read_tx),
            )));
        }
        Ok(Self {
            readings,
            model_of_slot,
            models: problem.models.len(),
            forecaster: Forecaster::new(forecast),
            thresholds: config.thresholds,
            stale: Duration::from_millis(config.stale_ms),
            safe_level: config.safe_level,
            on_safe_level: false,
            first_read,
            tasks,
        })
    }

    /// How long a reading stands in (`stale_ms`), and the first tick waits.
    pub fn stale(&self) -> Duration {
        self.stale
    }

    /// Waits until every model has been read once, or `stale_ms` has passed
    /// (then the first ticks hold what was read, or decide on the safe
    /// level), and says which in one line. Returns the models read.
    pub async fn first_readings(&mut self) -> usize {
        let models = self.model_of_slot.len();
        tracing::info!(
            "load: waiting up to {} ms for every model's first reading before the first tick",
            self.stale.as_millis()
        );
        let started = Instant::now();
        let all = tokio::time::timeout(self.stale, self.first_read.wait_for(|&n| n >= models))
            .await
            .is_ok_and(|read| read.is_ok());
        let read = *self.first_read.borrow();
        if all {
            tracing::info!(
                "load: every model read after {} ms; deciding",
                started.elapsed().as_millis()
            );
        } else {
            tracing::warn!(
                "load: {read} of {models} models read within {} ms; deciding on {}",
                self.stale.as_millis(),
                if read == 0 {
                    "the safe level"
                } else {
                    "those read"
                }
            );
        }
        read
    }

    /// The load for the tick starting now.
    pub fn read(&mut self) -> LoadReading {
        let now = Instant::now();
        let readings = self
            .readings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut measured = vec![None; self.models];
        for (r, &model) in readings.iter().zip(&self.model_of_slot) {
            measured[model] = r
                .throughput
                .filter(|t| now.duration_since(t.at) <= self.stale);
        }
        let usable: Vec<&Reading> = readings
            .iter()
            .filter(|r| {
                r.ratio.is_some() && r.at.is_some_and(|at| now.duration_since(at) <= self.stale)
            })
            .collect();
        if usable.is_empty() {
            if !std::mem::replace(&mut self.on_safe_level, true) {
                tracing::warn!(
                    "load: no model's load read within {} ms: deciding on the safe level ({})",
                    self.stale.as_millis(),
                    self.safe_level
                );
            }
            return LoadReading {
                level: self.safe_level,
                observed: None,
                forecast: None,
                fallback: Some("safe"),
                measured,
            };
        }
        if std::mem::replace(&mut self.on_safe_level, false) {
            tracing::info!("load: readings are back; deciding on the measured load again");
        }
        let observed = usable.iter().filter_map(|r| r.ratio).sum::<f64>() / usable.len() as f64;
        self.forecaster.observe(observed);
        let forecast = self.forecaster.next().unwrap_or(observed);
        let held = readings.iter().any(|r| r.failing) || usable.len() < readings.len();
        LoadReading {
            level: WorkloadLevel::of_ratio(forecast, &self.thresholds),
            observed: Some(observed),
            forecast: Some(forecast),
            fallback: held.then_some("held"),
            measured,
        }
    }
}

impl Drop for LoadMonitor {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct Poller {
    model: String,
    slot: usize,
    reference: f64,
    source: Source,
    throughput: Option<Source>,
    client: HttpClient,
    poll: Duration,
    timeout: Duration,
    max_bytes: usize,
}

/// Reads one model's rate (and its throughput, where a counter is configured)
/// every `poll`, forever (aborted with the monitor).
async fn poller(
    mut p: Poller,
    readings: Arc<Mutex<Vec<Reading>>>,
    metrics: Arc<Metrics>,
    first_read: Arc<watch::Sender<usize>>,
) {
    let mut interval = tokio::time::interval(p.poll);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut read_once = false;
    let mut failing = false;
    let mut throughput_failing = false;
    loop {
        interval.tick().await;
        let result = p.source.rate(&p.client, p.timeout, p.max_bytes).await;
        let throughput = match &mut p.throughput {
            Some(source) => Some(source.rate(&p.client, p.timeout, p.max_bytes).await),
            None => None,
        };
        let mut r = readings.lock().unwrap_or_else(|e| e.into_inner());
        match throughput {
            Some(Ok(rate)) => {
                throughput_failing = false;
                if let Some(reading) = rate {
                    r[p.slot].throughput = Some(reading);
                }
            }
            Some(Err(e)) => {
                metrics.load_read_failed(&p.model);
                if !std::mem::replace(&mut throughput_failing, true) {
                    tracing::warn!(model = %p.model, "throughput: {e:#}; shown as not measured once its last reading is stale");
                }
            }
            None => {}
        }
        let reading = &mut r[p.slot];
        match result {
            Ok(rate) => {
                if std::mem::replace(&mut failing, false) {
                    tracing::info!(model = %p.model, "load: reading again");
                }
                reading.failing = false;
                if let Some(rate) = rate {
                    // Finite: the rate is, and the reference is positive and finite.
                    reading.ratio = Some((rate.rate / p.reference).min(f64::MAX));
                    reading.at = Some(Instant::now());
                    if !std::mem::replace(&mut read_once, true) {
                        first_read.send_modify(|n| *n += 1);
                    }
                }
            }
            Err(e) => {
                metrics.load_read_failed(&p.model);
                reading.failing = true;
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(
                        model = %p.model,
                        "load: {e:#}; its last reading stands in while it is recent, then the safe level"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_tick_waits_for_every_models_first_reading_at_most_stale_ms() {
        let problem = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        // A `/metrics` page whose counter grows by one per scrape.
        let scrapes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let live = crate::actuator::tests::fake_server(move |_, _| {
            let n = scrapes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            (200, format!("requests_total {n}\n"))
        })
        .await
        .port();
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a port")
            .port();
        let config = |ports: &[u16]| -> PrometheusConfig {
            let mut text = "poll_ms = 20\ntimeout_ms = 200\nstale_ms = 1500\n".to_owned();
            for (model, port) in problem.models.iter().zip(ports) {
                text.push_str(&format!(
                    "[models.{}]\nmetric = \"requests_total\"\nlabel = \"\"\n\
                     scrape = \"http://127.0.0.1:{port}/metrics\"\nreference_rate = 10\n",
                    model.name
                ));
            }
            toml::from_str(&text).expect("a load configuration")
        };
        let start = |ports: &[u16]| {
            LoadMonitor::start(
                &config(ports),
                ForecastKind::Last,
                1000,
                &problem,
                Arc::new(Metrics::default()),
            )
            .expect("started")
        };

        // Every model read (a rate needs two scrapes): the first tick decides on it.
        let mut both = start(&[live, live]);
        assert_eq!(both.first_readings().await, 2);
        let reading = both.read();
        assert_eq!(reading.fallback, None, "{reading:?}");
        assert!(reading.observed.is_some_and(|r| r > 0.0), "{reading:?}");

        // One model never read: the wait ends at stale_ms with the one read,
        // and the tick holds what was read.
        let mut one = start(&[live, dead]);
        assert_eq!(one.first_readings().await, 1);
        assert_eq!(one.read().fallback, Some("held"));

        // Nothing read: the safe level, after stale_ms.
        let mut none = start(&[dead, dead]);
        assert_eq!(none.first_readings().await, 0);
        let reading = none.read();
        assert_eq!(
            (reading.fallback, reading.level),
            (Some("safe"), WorkloadLevel::High),
            "{reading:?}"
        );
    }

    #[test]
    fn ratios_fall_in_the_regime_between_the_thresholds() {
        let t = crate::config::DEFAULT_THRESHOLDS;
        assert_eq!(WorkloadLevel::of_ratio(0.45, &t), WorkloadLevel::Low);
        assert_eq!(WorkloadLevel::of_ratio(0.55, &t), WorkloadLevel::Medium);
        assert_eq!(WorkloadLevel::of_ratio(0.8, &t), WorkloadLevel::High);
        assert_eq!(WorkloadLevel::of_ratio(1.15, &t), WorkloadLevel::Burst);
        assert_eq!(
            WorkloadLevel::of_ratio(f64::INFINITY, &t),
            WorkloadLevel::Burst
        );
    }

    #[test]
    fn counters_are_read_from_vllm_and_triton_pages() {
        // The shape real servers write: HELP/TYPE lines, `_created` samples, several models.
        let vllm = "# vLLM 0.6, a comment the format ignores\n\
# HELP vllm:request_success_total Count of successfully processed requests.\n\
# TYPE vllm:request_success_total counter\n\
vllm:request_success_total{finished_reason=\"stop\",model_name=\"llm\"} 10.0\n\
vllm:request_success_total{finished_reason=\"length\",model_name=\"llm\"} 2.5\n\
vllm:request_success_total{finished_reason=\"stop\",model_name=\"other\"} 99.0\n\
# HELP vllm:request_success_created Count of successfully processed requests.\n\
# TYPE vllm:request_success_created gauge\n\
vllm:request_success_created{finished_reason=\"stop\",model_name=\"llm\"} 1.7e9\n";
        let v =
            sample_sum(vllm, "vllm:request_success_total", "model_name", "llm").expect("vllm page");
        assert!((v - 12.5).abs() < 1e-12, "{v}");
        let triton = "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n\
# TYPE nv_inference_request_success counter\n\
nv_inference_request_success{model=\"yolo\",version=\"1\"} 42\n";
        assert_eq!(
            sample_sum(triton, "nv_inference_request_success", "model", "yolo")
                .expect("triton page"),
            42.0
        );
        let missing = sample_sum(triton, "nv_inference_request_success", "model", "llm")
            .expect_err("another model");
        assert!(missing.to_string().contains("no sample"), "{missing}");
        // llama.cpp's llama-server (the rig's build): one model, no labels.
        let llama = "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens\n\
# TYPE llamacpp:prompt_tokens_total counter\n\
llamacpp:prompt_tokens_total 8\n\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed\n\
# TYPE llamacpp:tokens_predicted_total counter\n\
llamacpp:tokens_predicted_total 592\n\
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s\n\
# TYPE llamacpp:predicted_tokens_seconds gauge\n\
llamacpp:predicted_tokens_seconds 33.3397\n";
        assert_eq!(
            sample_sum(llama, "llamacpp:tokens_predicted_total", "", "gemma").expect("llama page"),
            592.0
        );
        assert!(
            sample_sum(llama, "llamacpp:tokens_predicted_total", "model", "gemma").is_err(),
            "a label it does not have"
        );
        let garbage =
            sample_sum("this is { not a page\n", "x", "model", "y").expect_err("not a page");
        assert!(garbage.to_string().contains("does not parse"), "{garbage}");
    }

    #[test]
    fn prometheus_answers_give_a_rate_or_one_clear_reason() {
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"6.5"]},{"metric":{"a":"b"},"value":[1700000000.1,"1"]}]}}"#;
        assert_eq!(query_value(vector).expect("vector"), 7.5);
        let scalar =
            br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000.1,"2"]}}"#;
        assert_eq!(query_value(scalar).expect("scalar"), 2.0);
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(
            query_value(empty)
                .expect_err("empty")
                .to_string()
                .contains("no series")
        );
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        assert!(
            query_value(refused)
                .expect_err("refused")
                .to_string()
                .contains("parse error at char 4")
        );
        let nan = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#;
        assert!(query_value(nan).is_err());
        assert!(query_value(b"<html>").is_err());
    }

    #[test]
    fn a_metric_asked_for_twice_is_read_for_both() {
        let page = "m_total{model=\"a\"} 3\nm_total{model=\"b\"} 4\nn_total{model=\"a\"} 1\n";
        let [x, y, z] =
            sample_sums(page, ["m_total", "n_total", "m_total"], "model", "a").expect("a page");
        assert_eq!(
            (x.expect("m"), y.expect("n"), z.expect("m again")),
            (3.0, 1.0, 3.0)
        );
    }

    #[test]
    fn a_scraped_counter_rate_covers_its_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let per_second = |r: Result<Option<ThroughputReading>>| r.expect("a value").map(|r| r.rate);
        // No window: the rate between two scrapes, 0 between two steps.
        let mut plain = ScrapeWindow::new(Duration::ZERO);
        assert_eq!(per_second(plain.rate(0.0, at(0))), None);
        assert_eq!(per_second(plain.rate(8.0, at(1000))), Some(8.0));
        let between = plain.rate(8.0, at(2000)).expect("a value");
        assert_eq!(
            between,
            Some(ThroughputReading {
                rate: 0.0,
                since: at(1000),
                at: at(2000),
                whole: true
            })
        );
        // A 4 s window over a counter stepping 8 every 2 s reads 4 a second
        // once the window is full, and keeps what the window needs only.
        let mut w = ScrapeWindow::new(Duration::from_secs(4));
        let mut last = None;
        for k in 0..=10u64 {
            last = w.rate(8.0 * (k / 2) as f64, at(1000 * k)).expect("a value");
            assert!(w.readings.len() <= 6, "{} readings kept", w.readings.len());
            if let Some(r) = last {
                // Whole once 4 s are covered, and from then on.
                assert_eq!(r.whole, k >= 4, "at {k} s");
            }
        }
        assert_eq!(
            last,
            Some(ThroughputReading {
                rate: 4.0,
                since: at(6000),
                at: at(10_000),
                whole: true
            })
        );
        // A counter that went down is an error, and the rate restarts from
        // it, over a span short of the window until that has filled.
        let e = w.rate(1.0, at(11_000)).expect_err("an error").to_string();
        assert!(e.contains("went down from 40 to 1"), "{e}");
        assert_eq!(
            w.rate(3.0, at(12_000)).expect("a value"),
            Some(ThroughputReading {
                rate: 2.0,
                since: at(11_000),
                at: at(12_000),
                whole: false
            })
        );
        let filled = w.rate(9.0, at(15_000)).expect("a value").expect("a rate");
        assert!(filled.whole && filled.since == at(11_000), "{filled:?}");
    }

    #[test]
    fn negative_or_non_finite_rates_are_failed_readings() {
        let answer = |v: &str| {
            format!(
                r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1,"{v}"]}},{{"metric":{{}},"value":[1,"{v}"]}}]}}}}"#
            )
        };
        let negative = query_value(answer("-25").as_bytes()).expect("parses");
        let err = sane_rate(Some(negative)).expect_err("negative");
        assert!(err.to_string().contains("-50"), "{err}");
        let overflow = query_value(answer("1.7e308").as_bytes()).expect("each finite");
        assert!(
            sane_rate(Some(overflow)).is_err(),
            "a sum of finite samples reaching inf"
        );
        assert_eq!(sane_rate(Some(2.5)).expect("fine"), Some(2.5));
        assert_eq!(sane_rate(None).expect("no rate yet"), None);
    }
}
