//! `mfsched profile --live`: profiling through the daemon's actuators and the
//! servers' own metrics, on the card the models run on.
//!
//! The sampling plan is the offline one (same points for the same seed). The
//! load regime is not the profiler's to set: a load generator holds it, so a
//! run profiles the plan's points of one regime (`--workload`) and checks, from
//! the servers' request counters, that the load it saw fell in that regime.
//! Each point: its joint configuration sent through the actuators; for the
//! models whose servers an actuator reconfigures and awaits (v2-repository,
//! process), the wait until they serve it (each reconfiguration's downtime is
//! kept for the summary); then `settle` for the servers to warm up, then a
//! `window` over which each model's throughput counter is read at both ends
//! (a direct scrape of its `/metrics`: a rate over an exact window, which a
//! PromQL `rate()` window would blur) and the GPU state is read at its start
//! (which only starts a host sampler's deltas: that reading covers the
//! reconfiguration), middle and end, the last two averaged. The profile is
//! rewritten atomically after every row, so an interrupted run loses at most
//! the row in progress, and a rerun skips the points already in the file.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mfsched_core::{GpuState, JointConfig, Problem, WorkloadLevel};
use mfsched_core::{Profile, ProfileRow, SamplingPlan};
use mfsched_core::{check_profile_row, write_profile};
use mfsched_daemon::Actuators;
use mfsched_daemon::Metrics;
use mfsched_daemon::ReconfigRecord;
use mfsched_daemon::Sampler;
use mfsched_daemon::build_sampler;
use mfsched_daemon::{DaemonConfig, ModelLoadConfig};
use mfsched_daemon::{HttpClient, http_client, http_get, read_dcgm_page, sample_sum, sample_sums};

/// Largest `/metrics` page read.
const MAX_PAGE_BYTES: usize = 4 << 20;

/// Where the GPU state comes from.
#[derive(Debug, Clone)]
pub enum StateSource {
    /// The config's sampler (NVML on a real card; the simulator; the footprint).
    Sampler,
    /// A DCGM exporter's `/metrics`, read for `sampler.device` as the daemon's
    /// `dcgm` sampler reads it (`mfsched_daemon::DcgmReading`); `sim serve`'s
    /// pages carry the fields too.
    Dcgm(String),
}

#[derive(Debug, Clone)]
pub struct LiveOptions {
    pub config: DaemonConfig,
    pub workload: WorkloadLevel,
    /// Seeds the config's sampler (the simulator's noise).
    pub seed: u64,
    pub settle: Duration,
    pub window: Duration,
    pub state: StateSource,
    pub out: PathBuf,
}

/// Reads of a `/metrics` page tried before a point fails.
const COUNTER_READS: u32 = 3;

/// One counter's samples of one model on a `/metrics` page.
#[derive(Debug, Clone)]
struct PageCounter {
    uri: hyper::Uri,
    metric: String,
    label: String,
    name: String,
}

/// How one model's counters are read: the requests (on its server's page, or
/// where they arrive: `arrivals`) and the throughput (on its server's page).
#[derive(Debug, Clone)]
struct ModelReader {
    throughput: PageCounter,
    /// The request counter where requests arrive, if not on the server's page
    /// (then `server_requests` names it there).
    arrivals: Option<PageCounter>,
    server_requests: String,
    reference_rate: f64,
}

impl ModelReader {
    fn new(model: &str, m: &ModelLoadConfig) -> Result<Self> {
        let at = format!("workload.prometheus.models.{model}");
        let scrape = m.scrape.as_deref().with_context(|| {
            format!("{at}: live profiling reads the server's /metrics directly: set scrape")
        })?;
        let (server_requests, label) = m.request_metric_and_label();
        let throughput = m
            .throughput_metric_name()
            .with_context(|| format!("{at}: set throughput_metric (or a preset)"))?;
        let arrivals = match &m.arrivals {
            Some(a) => Some(PageCounter {
                uri: a.uri(model)?,
                metric: a.metric.clone(),
                label: a.label.clone(),
                name: a.name_on_page(model),
            }),
            None => None,
        };
        Ok(Self {
            throughput: PageCounter {
                uri: scrape.parse().with_context(|| format!("{at}.scrape"))?,
                metric: throughput,
                label,
                name: m.name_on_server(model),
            },
            arrivals,
            server_requests,
            reference_rate: m.reference_rate,
        })
    }

    /// (requests, throughput) counters now.
    async fn counters(&self, client: &HttpClient, timeout: Duration) -> Result<(f64, f64)> {
        let t = &self.throughput;
        let text = read_page(client, &t.uri, timeout, &t.name).await?;
        if let Some(a) = &self.arrivals {
            let throughput = sample_sum(&text, &t.metric, &t.label, &t.name)?;
            let arrivals = read_page(client, &a.uri, timeout, &a.name).await?;
            return Ok((
                sample_sum(&arrivals, &a.metric, &a.label, &a.name)?,
                throughput,
            ));
        }
        let [requests, throughput] = sample_sums(
            &text,
            [self.server_requests.as_str(), t.metric.as_str()],
            &t.label,
            &t.name,
        )?;
        Ok((requests?, throughput?))
    }
}

/// A `/metrics` page's text. A server busy at full load can miss one read's
/// timeout (llama-server on a saturated core does): the read is tried
/// [`COUNTER_READS`] times before the point fails.
async fn read_page(
    client: &HttpClient,
    uri: &hyper::Uri,
    timeout: Duration,
    model: &str,
) -> Result<String> {
    let mut attempt = 1;
    let body = loop {
        match http_get(client, uri, timeout, MAX_PAGE_BYTES).await {
            Ok(body) => break body,
            Err(e) if attempt < COUNTER_READS => {
                tracing::warn!(model = %model, "reading {uri} (attempt {attempt} of {COUNTER_READS}): {e:#}");
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    String::from_utf8(body.to_vec()).context("the /metrics page is not UTF-8")
}

/// The plan's points of one regime not yet in `existing`, in plan order.
pub fn remaining_points(
    problem: &Problem,
    plan: &SamplingPlan,
    seed: u64,
    workload: WorkloadLevel,
    existing: Option<&Profile>,
) -> Result<Vec<JointConfig>> {
    let done = |joint: &JointConfig| {
        existing.is_some_and(|p| {
            p.rows
                .iter()
                .any(|r| r.workload == workload && &r.joint == joint)
        })
    };
    Ok(plan
        .points(problem, seed)?
        .into_iter()
        .filter(|(joint, w)| *w == workload && !done(joint))
        .map(|(joint, _)| joint)
        .collect())
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSummary {
    pub measured: usize,
    pub rows_in_file: usize,
    /// Rows whose observed load fell in another regime than `--workload`.
    pub off_regime: usize,
    /// Points whose readings were not a valid row (not written).
    pub skipped: usize,
    /// Every reconfiguration's downtime (request to ready), ms, per actuator.
    pub downtime_ms: std::collections::BTreeMap<String, Vec<f64>>,
}

/// Measures `points` (from [`remaining_points`]) and appends them to `existing`
/// in `opts.out`. `on_row(done, total)` after each row. Runs inside tokio.
pub async fn run(
    opts: &LiveOptions,
    problem: &Problem,
    points: &[JointConfig],
    existing: Option<Profile>,
    mut on_row: impl FnMut(usize, usize),
) -> Result<LiveSummary> {
    let load = opts.config.workload.prometheus.as_ref().context(
        "live profiling reads the servers' metrics: the config needs a [workload.prometheus] section",
    )?;
    let mut readers = Vec::with_capacity(problem.models.len());
    for m in &problem.models {
        let entry = load.models.get(&m.name).with_context(|| {
            format!(
                "workload.prometheus.models has no entry for model '{}'",
                m.name
            )
        })?;
        readers.push(ModelReader::new(&m.name, entry)?);
    }
    let thresholds = load.thresholds;
    let timeout = Duration::from_millis(load.timeout_ms);
    let client = http_client();
    let metrics = Arc::new(Metrics::default());
    let actuators = Actuators::new(&opts.config.actuator, problem, Arc::clone(&metrics))?;
    let mut state = StateReader {
        sampler: None,
        dcgm: None,
        client: client.clone(),
        timeout,
        device: opts.config.sampler.device.to_string(),
    };
    match &opts.state {
        StateSource::Sampler => {
            state.sampler = Some(
                build_sampler(
                    &opts.config.sampler,
                    problem,
                    opts.seed,
                    Some(&crate::sim::sampler::simulated_gpu),
                )?
                .0,
            )
        }
        StateSource::Dcgm(url) => state.dcgm = Some(url.parse().context("--gpu-metrics")?),
    }
    let mut profile = existing.unwrap_or_else(|| Profile {
        scenario: opts.config.scenario.clone(),
        models: problem.models.iter().map(|m| m.name.clone()).collect(),
        rows: Vec::new(),
        solo: Vec::new(),
    });
    let mut running: Option<JointConfig> = None;
    let mut off_regime = 0;
    let mut downtime_ms = std::collections::BTreeMap::<String, Vec<f64>>::new();
    let mut skipped = 0;
    for (k, joint) in points.iter().enumerate() {
        let changed: Vec<usize> = match &running {
            Some(r) => (0..joint.len()).filter(|&i| r[i] != joint[i]).collect(),
            None => (0..joint.len()).collect(),
        };
        let failures_before = metrics.actuator_failures_total();
        actuators.apply(problem, k as u64, joint, &changed);
        running = Some(joint.clone());
        let awaited: Vec<usize> = changed
            .iter()
            .copied()
            .filter(|&i| actuators.measured_by(i).is_some())
            .collect();
        for r in await_reconfigurations(&actuators, k as u64, &awaited).await? {
            if let Some(e) = &r.error {
                bail!(
                    "point {}: {} did not take configuration {joint:?}: {e}; the {} rows before it are in {}",
                    k + 1,
                    problem.models[r.model as usize].name,
                    profile.rows.len(),
                    opts.out.display()
                );
            }
            downtime_ms
                .entry(r.actuator)
                .or_default()
                .push(r.downtime_ms);
        }
        // A webhook's server took the configuration when it answered the POST:
        // measuring before then (its timeouts and retries can outlast the
        // settle time) would write a point the server never took.
        for &i in &changed {
            if let Err(why) = actuators.webhook_delivered(i, k as u64).await {
                bail!(
                    "point {}: {} did not take configuration {joint:?}: {why}; the {} rows before it are in {}",
                    k + 1,
                    problem.models[i].name,
                    profile.rows.len(),
                    opts.out.display()
                );
            }
        }
        tokio::time::sleep(opts.settle).await;
        if metrics.actuator_failures_total() > failures_before {
            bail!(
                "point {}: a model server did not take configuration {joint:?} (an actuator failed: see the log); the {} rows before it are in {}",
                k + 1,
                profile.rows.len(),
                opts.out.display()
            );
        }
        // The window: counters at both ends (its length is between the two
        // readings), the state at its middle and end. A host sampler's
        // reading is a delta since its previous one, so the reading at the
        // window's start covers the reconfiguration and the settle time
        // before it (a restarted server's threads neither run nor wait):
        // it only starts the window's deltas and is not the row's. The
        // daemon's readings, one a tick under steady serving, never include
        // such a stretch, and a row that did would skew what bundles learn.
        let mut first = Vec::with_capacity(readers.len());
        for r in &readers {
            first.push(r.counters(&client, timeout).await?);
        }
        let start = Instant::now();
        state.read(problem, joint, opts.workload).await?;
        tokio::time::sleep(opts.window / 2).await;
        let mut states = vec![state.read(problem, joint, opts.workload).await?];
        let remaining = opts.window.saturating_sub(start.elapsed());
        tokio::time::sleep(remaining).await;
        let mut last = Vec::with_capacity(readers.len());
        for r in &readers {
            last.push(r.counters(&client, timeout).await?);
        }
        let seconds = start.elapsed().as_secs_f64();
        if seconds <= 0.0 {
            bail!("point {}: an empty measurement window", k + 1);
        }
        states.push(state.read(problem, joint, opts.workload).await?);
        let mut throughput = Vec::with_capacity(readers.len());
        let mut ratio = 0.0;
        for ((r, a), b) in readers.iter().zip(&first).zip(&last) {
            if b.0 < a.0 || b.1 < a.1 {
                bail!(
                    "point {}: a counter of {} went down during the window (the server restarted?)",
                    k + 1,
                    r.throughput.name
                );
            }
            throughput.push((b.1 - a.1) / seconds);
            ratio += (b.0 - a.0) / seconds / r.reference_rate;
        }
        ratio /= readers.len() as f64;
        if WorkloadLevel::of_ratio(ratio, &thresholds) != opts.workload {
            off_regime += 1;
        }
        let n = states.len() as f64;
        let row = ProfileRow {
            joint: joint.clone(),
            workload: opts.workload,
            state: GpuState {
                workload: opts.workload,
                vram_used_mib: states.iter().map(|s| s.0).sum::<f64>() / n,
                utilization: states.iter().map(|s| s.1).sum::<f64>() / n,
                // The mean of the readings that have one: a reading is a
                // delta since the previous, and the first after a server's
                // restart (one that crashed inside the window) has no
                // earlier reading of its processes.
                contention: {
                    let readings: Vec<f64> = states.iter().filter_map(|s| s.2).collect();
                    (!readings.is_empty()).then(|| mfsched_core::mean(&readings))
                },
            },
            throughput,
        };
        // A window whose readings the profile's reader would refuse (a counter
        // of ±1e308, a memory reading above the card) is reported and not
        // written: the file stays readable, so a rerun resumes and measures
        // the point again.
        if let Err(e) = check_profile_row(&row, problem) {
            tracing::warn!(
                "point {}: its readings are not a profile row, skipped: {e:#}",
                k + 1
            );
            skipped += 1;
            on_row(k + 1, points.len());
            continue;
        }
        profile.rows.push(row);
        write_profile(&profile, problem, &opts.out)?;
        on_row(k + 1, points.len());
    }
    actuators.shutdown(Duration::from_secs(2)).await;
    Ok(LiveSummary {
        measured: points.len() - skipped,
        rows_in_file: profile.rows.len(),
        off_regime,
        skipped,
        downtime_ms,
    })
}

/// Waits until the actuators report the reconfigurations of point `tick` for
/// the models `awaited` finished (served, or failed and fallen back), bounded
/// by the longest their configured timeouts allow: a point is measured only
/// once its servers serve it, however long a restart took.
async fn await_reconfigurations(
    actuators: &Actuators,
    tick: u64,
    awaited: &[usize],
) -> Result<Vec<ReconfigRecord>> {
    let deadline = Instant::now() + actuators.longest_reconfiguration() + Duration::from_secs(5);
    let mut done: Vec<ReconfigRecord> = Vec::with_capacity(awaited.len());
    while done.len() < awaited.len() {
        // Records of earlier points (a restart finishing late) are not this point's.
        done.extend(actuators.drain().into_iter().filter(|r| r.tick == tick));
        if done.len() >= awaited.len() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "point {}: the actuators reported {} of {} reconfigurations within their own timeouts",
                tick + 1,
                done.len(),
                awaited.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(done)
}

/// Reads the GPU state: from a DCGM exporter's page or the config's sampler.
struct StateReader {
    sampler: Option<Box<dyn Sampler>>,
    dcgm: Option<hyper::Uri>,
    client: HttpClient,
    timeout: Duration,
    /// The `gpu` label of the card (`sampler.device`).
    device: String,
}

impl StateReader {
    /// (VRAM used MiB, utilisation 0..1, contention 0..1 where the source
    /// gives it) now.
    async fn read(
        &mut self,
        problem: &Problem,
        joint: &[u32],
        workload: WorkloadLevel,
    ) -> Result<(f64, f64, Option<f64>)> {
        if let Some(uri) = &self.dcgm {
            let r = read_dcgm_page(
                &self.client,
                uri,
                &self.device,
                self.timeout,
                MAX_PAGE_BYTES,
            )
            .await?;
            return Ok((r.vram_used_mib, r.utilization, r.contention));
        }
        let sampler = self.sampler.as_mut().context("no GPU state source")?;
        let s = sampler.sample(problem, joint, workload)?;
        let footprint = problem.vram_mib(joint) as f64;
        Ok((
            s.vram_used_mib.unwrap_or(footprint),
            s.utilization.context(
                "the sampler gives no utilisation (footprint): profile with nvml, sim or --gpu-metrics",
            )?,
            s.contention,
        ))
    }
}
