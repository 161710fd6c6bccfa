//! Actuators: how an applied decision reaches the inference servers.
//!
//! - file ([`file`]): one JSON document with every model's configuration,
//!   rewritten atomically whenever a model changes;
//! - webhook ([`webhook`]): per model, the new configuration POSTed as JSON;
//! - v2-repository ([`v2`]): per model, the open inference protocol's
//!   model-repository extension (load with a configuration, unload, readiness),
//!   for Triton, KServe and MLServer;
//! - process ([`process`]): per model, one supervised server process whose argv
//!   is templated from the configuration, restarted on change.
//!
//! Only changed configurations are handed to the actuators, and none of them
//! holds a tick: each model of the webhook, v2-repository and process actuators
//! has a task of its own fed through a `watch` channel (only the newest
//! configuration is applied when several queue up). The v2-repository and
//! process actuators measure every reconfiguration's downtime, request to
//! ready, and hand a [`ReconfigRecord`] back ([`Actuators::drain`]): the daemon
//! logs it, and a failed one tells it which configuration still serves. A
//! webhook's delivery can be awaited ([`Actuators::webhook_delivered`]).
//! Delivery failures are counted in the metrics; they never stop the loop.

mod file;
mod process;
mod template;
mod v2;
mod webhook;

pub use file::write_atomically;

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::ActuatorConfig;
use super::declog::ReconfigRecord;
use super::metrics::Metrics;
use super::streak::{Change, Streaks};
use mfsched_core::{KnobSetting, Problem};

/// What a webhook receives (the body of its POST, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelUpdate {
    pub model: String,
    pub tick: u64,
    pub config: KnobSetting,
}

/// The plain-HTTP client of the actuators that send a body (no TLS stack).
pub(crate) type BodyClient = Client<HttpConnector, Full<Bytes>>;

fn body_client() -> BodyClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One configuration for a v2-repository or process task to apply.
#[derive(Debug, Clone)]
struct Job {
    tick: u64,
    /// The local configuration index, and what it is.
    config: u32,
    setting: KnobSetting,
    /// The configuration it replaces and whether that changes the variant.
    from: Option<u32>,
    variant_switch: bool,
    /// When the daemon asked: downtime is measured from here to ready.
    requested: Instant,
    /// Both configurations do not fit in the memory cap at once: the old one
    /// goes first (the v2-repository actuator otherwise loads the new first).
    unload_first: bool,
}

impl Job {
    /// What the decision log records of this job once it finished: its
    /// `downtime` (request to ready, or to the failure), the `error` when it
    /// did not take, and the configuration `serving` afterwards.
    fn record(
        &self,
        model: usize,
        actuator: &str,
        downtime: Duration,
        error: Option<String>,
        serving: Option<u32>,
    ) -> ReconfigRecord {
        ReconfigRecord {
            model: model as u32,
            tick: self.tick,
            actuator: actuator.to_owned(),
            from: self.from,
            to: self.config,
            variant_switch: self.variant_switch,
            downtime_ms: downtime.as_secs_f64() * 1e3,
            error,
            serving,
        }
    }
}

/// Finished reconfigurations waiting for the daemon, bounded: a caller that
/// never drains loses the oldest rather than growing without bound.
#[derive(Debug, Clone, Default)]
struct FinishedQueue(Arc<Mutex<Vec<ReconfigRecord>>>);

const MAX_FINISHED: usize = 1024;

/// How often [`Actuators::brought_up`] looks at the finished records.
const BRING_UP_POLL: Duration = Duration::from_millis(50);

impl FinishedQueue {
    fn push(&self, record: ReconfigRecord) {
        let mut f = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if f.len() >= MAX_FINISHED {
            f.remove(0);
        }
        f.push(record);
    }

    fn take(&self) -> Vec<ReconfigRecord> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The line a v2-repository or process task logs when `job`'s
/// configuration serves: which, and how long after it was asked for.
fn log_served(model: &str, key: &str, job: &Job, downtime: Duration) {
    tracing::info!(
        model = %model,
        "{key}: {} serves, {:.1} ms after it was asked for",
        job.setting,
        downtime.as_secs_f64() * 1e3
    );
}

/// A model whose configurations go to a v2-repository or process task.
#[derive(Debug)]
struct Driven {
    actuator: &'static str,
    jobs: watch::Sender<Option<Job>>,
}

impl Driven {
    /// Hands model `i`'s configuration of `joint` (replacing `from`) to its task.
    fn send(
        &self,
        problem: &Problem,
        tick: u64,
        i: usize,
        joint: &[u32],
        from: Option<u32>,
        requested: Instant,
    ) {
        let model = &problem.models[i];
        let config = joint[i];
        let variant = |c: u32| model.configs.get(c as usize).map(|c| c.variant);
        let variant_switch = from.is_none_or(|f| variant(f) != variant(config));
        // Old and new side by side: the new joint's footprint plus the old
        // configuration's.
        let both = problem.vram_mib(joint)
            + from
                .and_then(|f| model.configs.get(f as usize))
                .map_or(0, |c| u64::from(c.vram_mib));
        // send_replace never fails: the receiver lives in its task until shutdown.
        self.jobs.send_replace(Some(Job {
            tick,
            config,
            setting: model.knobs(config as usize),
            from,
            variant_switch,
            requested,
            unload_first: both > u64::from(problem.card.vram_mib),
        }));
    }
}

/// One model's webhook sender: the updates it is handed and the outcome of
/// its latest delivery.
#[derive(Debug)]
struct Webhook {
    updates: watch::Sender<Option<ModelUpdate>>,
    delivered: watch::Receiver<Option<webhook::Delivery>>,
}

#[derive(Debug)]
pub struct Actuators {
    file: Option<PathBuf>,
    webhooks: BTreeMap<usize, Webhook>,
    /// The longest one webhook delivery can take, retries included.
    longest_delivery: Duration,
    driven: BTreeMap<usize, Driven>,
    finished: FinishedQueue,
    tasks: Vec<JoinHandle<()>>,
    /// Time the process actuator's supervisors need to stop their processes.
    stop_grace: Duration,
    /// The longest one reconfiguration can take, failure and fall-back included.
    longest_reconfiguration: Duration,
    metrics: Arc<Metrics>,
    /// The file actuator's run of failed writes (one line per edge).
    file_failures: Mutex<Streaks>,
}

/// The most bytes of a delivery failure's reason a log line repeats.
const REASON_BYTES: usize = 300;

/// One log line per edge of an actuator's run of failed deliveries, never one
/// per change: `warn` with the reason (escaped, cut) when `key` starts failing,
/// `info` with the count when it delivers again. `failure` is this delivery's
/// reason, `None` when it was delivered.
fn failure_edge(streaks: &mut Streaks, key: &str, failure: Option<&str>) {
    match (streaks.observe(key, failure.is_some()), failure) {
        (Some(Change::Failing), Some(why)) => tracing::warn!(
            "{key}: delivery failed: {}; the daemon goes on deciding, and logs again when a delivery succeeds",
            mfsched_core::printable(why, REASON_BYTES)
        ),
        (Some(Change::Recovered { failed_ticks }), _) => {
            tracing::info!("{key}: delivered again after {failed_ticks} failed deliveries")
        }
        _ => {}
    }
}

impl Actuators {
    /// Must be called inside a tokio runtime when any per-model actuator is
    /// configured. Every template is checked against the scenario's models
    /// and knobs first: a bad mapping starts nothing.
    pub fn new(config: &ActuatorConfig, problem: &Problem, metrics: Arc<Metrics>) -> Result<Self> {
        let model_index = |key: &str, model: &str| {
            problem.model_index(model).with_context(|| {
                format!("{key} names model '{model}', which the scenario does not have")
            })
        };
        let mut v2_models = Vec::new();
        if let Some(v) = &config.v2_repository {
            for (model, m) in &v.models {
                let index = model_index("actuator.v2_repository.models", model)?;
                v2_models.push(v2::Model::new(index, &problem.models[index], m, v)?);
            }
        }
        let mut process_models = Vec::new();
        if let Some(p) = &config.process {
            for (model, m) in &p.models {
                let index = model_index("actuator.process.models", model)?;
                process_models.push(process::Supervisor::new(
                    index,
                    &problem.models[index],
                    m,
                    p,
                )?);
            }
        }
        let mut webhooks = BTreeMap::new();
        let mut tasks = Vec::new();
        if let Some(w) = &config.webhook {
            let client = body_client();
            for (model, url) in &w.urls {
                let index = model_index("actuator.webhook.urls", model)?;
                let uri: hyper::Uri = url
                    .parse()
                    .with_context(|| format!("actuator.webhook.urls.{model}: bad URL '{url}'"))?;
                let (updates, rx) = watch::channel(None);
                let (outcomes, delivered) = watch::channel(None);
                tasks.push(tokio::spawn(webhook::sender(
                    client.clone(),
                    uri,
                    w.clone(),
                    rx,
                    outcomes,
                    Arc::clone(&metrics),
                )));
                webhooks.insert(index, Webhook { updates, delivered });
            }
        }
        let finished = FinishedQueue::default();
        let mut driven = BTreeMap::new();
        if !v2_models.is_empty() {
            let client = body_client();
            for m in v2_models {
                let (tx, rx) = watch::channel(None);
                let index = m.index;
                tasks.push(tokio::spawn(m.run(
                    rx,
                    client.clone(),
                    finished.clone(),
                    Arc::clone(&metrics),
                )));
                driven.insert(
                    index,
                    Driven {
                        actuator: v2::NAME,
                        jobs: tx,
                    },
                );
            }
        }
        for s in process_models {
            let (tx, rx) = watch::channel(None);
            let index = s.index;
            tasks.push(tokio::spawn(s.run(
                rx,
                finished.clone(),
                Arc::clone(&metrics),
            )));
            driven.insert(
                index,
                Driven {
                    actuator: process::NAME,
                    jobs: tx,
                },
            );
        }
        let stop_grace = config
            .process
            .as_ref()
            .map_or(Duration::ZERO, |p| Duration::from_millis(p.grace_ms));
        // v2-repository: the load call and the readiness wait, then on failure
        // the old configuration loaded and awaited again, and an unload call.
        let v2 = config.v2_repository.as_ref().map_or(Duration::ZERO, |v| {
            Duration::from_millis(3 * v.timeout_ms + 2 * v.ready_timeout_ms)
        });
        // process: the old process stopped, the new one awaited, then on
        // failure it stopped and the previous one awaited again.
        let process = config.process.as_ref().map_or(Duration::ZERO, |p| {
            Duration::from_millis(2 * p.grace_ms + 2 * p.ready_timeout_ms)
        });
        Ok(Self {
            file: config.file.clone(),
            webhooks,
            longest_delivery: config
                .webhook
                .as_ref()
                .map_or(Duration::ZERO, webhook::longest_delivery),
            driven,
            finished,
            tasks,
            stop_grace,
            longest_reconfiguration: v2.max(process),
            metrics,
            file_failures: Mutex::new(Streaks::default()),
        })
    }

    /// Hands the changed models of `joint` to every actuator; `problem.current`
    /// is the configuration running before.
    pub fn apply(&self, problem: &Problem, tick: u64, joint: &[u32], changed: &[usize]) {
        if changed.is_empty() {
            return;
        }
        if let Some(path) = &self.file {
            let written = file::write(path, problem, tick, joint);
            self.metrics.actuator_result("file", written.is_ok());
            let failure = written.err().map(|e| format!("{e:#}"));
            failure_edge(
                &mut self.file_failures.lock().unwrap_or_else(|p| p.into_inner()),
                "actuator.file",
                failure.as_deref(),
            );
        }
        let requested = Instant::now();
        for &i in changed {
            let model = &problem.models[i];
            if let Some(w) = self.webhooks.get(&i) {
                // send_replace never fails: the receiver lives in its task until shutdown.
                w.updates.send_replace(Some(ModelUpdate {
                    model: model.name.clone(),
                    tick,
                    config: model.knobs(joint[i] as usize),
                }));
            }
            if let Some(d) = self.driven.get(&i) {
                let from = problem.current.get(i).copied();
                d.send(problem, tick, i, joint, from, requested);
            }
        }
    }

    /// Brings up what `problem.current` says runs on the models whose servers
    /// these actuators own (v2-repository and process): the daemon calls it
    /// once at start, so what it decides from is what serves.
    pub fn bring_up(&self, problem: &Problem) {
        let requested = Instant::now();
        for (&i, d) in &self.driven {
            d.send(problem, 0, i, &problem.current, None, requested);
        }
    }

    /// Waits until every model whose server these actuators own has finished
    /// its bring-up (serving, or failed and said why), for at most `within`;
    /// the models still coming up. Before the first [`Self::drain`] only:
    /// the bring-ups' records are what it looks for.
    pub async fn brought_up(&self, within: Duration) -> Vec<usize> {
        let deadline = Instant::now() + within;
        loop {
            let pending: Vec<usize> = {
                let finished = self.finished.0.lock().unwrap_or_else(|p| p.into_inner());
                self.driven
                    .keys()
                    .copied()
                    .filter(|&i| !finished.iter().any(|r| r.model as usize == i))
                    .collect()
            };
            if pending.is_empty() || Instant::now() >= deadline {
                return pending;
            }
            tokio::time::sleep(BRING_UP_POLL).await;
        }
    }

    /// Whether any model's server is owned (and brought up) by these actuators.
    pub fn drives_servers(&self) -> bool {
        !self.driven.is_empty()
    }

    /// The reconfigurations the v2-repository and process actuators finished
    /// since the last call, in the order they finished.
    pub fn drain(&self) -> Vec<ReconfigRecord> {
        self.finished.take()
    }

    /// The longest one reconfiguration through these actuators can take by
    /// their configured timeouts, a failure and its fall-back included.
    pub fn longest_reconfiguration(&self) -> Duration {
        self.longest_reconfiguration
    }

    /// Waits until model `i`'s webhook has delivered the configuration of
    /// `tick` (or a later one) or given up on it, no longer than its timeouts
    /// and retries allow: `Ok` when the server answered (or no webhook serves
    /// the model), else why not.
    pub async fn webhook_delivered(&self, i: usize, tick: u64) -> Result<(), String> {
        let Some(w) = self.webhooks.get(&i) else {
            return Ok(());
        };
        let mut delivered = w.delivered.clone();
        let limit = self.longest_delivery + Duration::from_secs(1);
        let waited = tokio::time::timeout(
            limit,
            delivered.wait_for(|d| d.as_ref().is_some_and(|d| d.tick >= tick)),
        )
        .await;
        match waited {
            Ok(Ok(outcome)) => match outcome.as_ref().and_then(|d| d.failure.clone()) {
                None => Ok(()),
                Some(why) => Err(why),
            },
            Ok(Err(_)) => Err("its webhook sender has stopped".to_owned()),
            Err(_) => Err(format!(
                "no delivery reported within {} ms",
                limit.as_millis()
            )),
        }
    }

    /// The actuator that reconfigures model `i` and measures its downtime, if any.
    pub fn measured_by(&self, i: usize) -> Option<&'static str> {
        self.driven.get(&i).map(|d| d.actuator)
    }

    /// Lets each sender finish the update it holds and each supervisor stop
    /// its process (SIGTERM, its grace, SIGKILL), then stops them.
    pub async fn shutdown(self, grace: Duration) {
        drop(self.webhooks);
        drop(self.driven);
        let grace = grace.max(self.stop_grace + Duration::from_secs(1));
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(grace, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// One POST of a JSON body within `timeout`, the answer capped at `max_bytes`.
async fn post_json(
    client: &BodyClient,
    uri: &hyper::Uri,
    body: Vec<u8>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Bytes> {
    let request = hyper::Request::post(uri.clone())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .with_context(|| format!("{uri}: cannot build the request"))?;
    let call = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| anyhow::anyhow!("{uri}: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("{uri}: {e} (more than {max_bytes} bytes?)"))?
            .to_bytes();
        if !status.is_success() {
            bail!(
                "{uri}: HTTP {status}: {}",
                printable(&String::from_utf8_lossy(&body), 200)
            );
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| anyhow::anyhow!("{uri}: no answer within {} ms", timeout.as_millis()))?
}

/// Polls `uri` until it answers 2xx, within `timeout`; the last error otherwise.
async fn wait_ready(
    client: &crate::load::HttpClient,
    uri: &hyper::Uri,
    timeout: Duration,
    poll: Duration,
    max_bytes: usize,
) -> Result<()> {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let err = match crate::load::get(client, uri, left.max(Duration::from_millis(1)), max_bytes)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if tokio::time::Instant::now() + poll >= until {
            bail!("not ready within {} ms ({err:#})", timeout.as_millis());
        }
        tokio::time::sleep(poll).await;
    }
}

/// At most `max` characters of `s`, on one line, without control characters.
fn printable(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::DaemonConfig;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn problem() -> Problem {
        mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem
    }

    fn actuator_config(extra: &str) -> Result<ActuatorConfig> {
        let text = format!(
            "scenario = \"paper-n2\"\n[policy]\nactive = \"hold\"\n[log]\npath = \"l\"\n{extra}"
        );
        Ok(DaemonConfig::parse(&text)?.actuator)
    }

    fn start(extra: &str) -> Result<Actuators> {
        Actuators::new(
            &actuator_config(extra)?,
            &problem(),
            Arc::new(Metrics::default()),
        )
    }

    /// A plain-HTTP stand-in for a server: `answer(method, path)` gives the
    /// status and body of every request.
    pub(crate) async fn fake_server(
        answer: impl Fn(&str, &str) -> (u16, String) + Send + Sync + 'static,
    ) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let answer = Arc::clone(&answer);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        let Ok(n) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    while buf.len() < head_end + length {
                        let Ok(n) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let mut first = head.split_whitespace();
                    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
                    let (status, body) = answer(method, path);
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        addr
    }

    /// Waits (bounded) for the next finished reconfiguration.
    async fn next_record(a: &Actuators) -> ReconfigRecord {
        for _ in 0..200 {
            if let Some(r) = a.drain().into_iter().next() {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no reconfiguration finished within 5 s");
    }

    #[test]
    fn a_bad_mapping_is_one_line_naming_its_key_and_nothing_starts() {
        for (extra, says) in [
            (
                "[actuator.v2_repository.models.nobody]\nurl = \"http://127.0.0.1:1\"\n",
                "actuator.v2_repository.models names model 'nobody'",
            ),
            (
                "[actuator.v2_repository.models.yolo-a]\nurl = \"http://127.0.0.1:1\"\nversion = \"{variant}-{imagesize}\"\n",
                "actuator.v2_repository.models.yolo-a.version: the template '{variant}-{imagesize}' names '{imagesize}'",
            ),
            (
                "[actuator.v2_repository.models.yolo-a]\nurl = \"http://127.0.0.1:1\"\n[actuator.v2_repository.models.yolo-a.load_config]\ninstance_group = [{ count = \"{instances}\" }]\n",
                "actuator.v2_repository.models.yolo-a.load_config.instance_group[0].count:",
            ),
            (
                "[actuator.v2_repository.models.yolo-a]\nurl = \"http://127.0.0.1:1\"\nmodel_name = \"{model} {variant}\"\n",
                "actuator.v2_repository.models.yolo-a.model_name: configuration",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\", \"--size\", \"{image-size}\"]\nready_url = \"http://127.0.0.1:1/\"\n",
                "actuator.process.models.yolo-a.argv[2]:",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\"]\nready_url = \"http://127.0.0.1:{port}/\"\n",
                "actuator.process.models.yolo-a.ready_url:",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\"]\nready_url = \"http://127.0.0.1:1/\"\nenv = { SIZE = \"{size}\" }\n",
                "actuator.process.models.yolo-a.env.SIZE:",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\"]\nready_url = \"http://127.0.0.1:1/\"\n[actuator.process.models.yolo-a.settings_file]\npath = \"/nonexistent-dir/s.json\"\ncontent = { name = \"{model}\" }\n",
                "actuator.process.models.yolo-a.settings_file.path /nonexistent-dir/s.json: its folder does not exist",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = []\nready_url = \"http://127.0.0.1:1/\"\n",
                "actuator.process.models.yolo-a.argv must name a program",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\"]\nready_url = \"http://127.0.0.1:{slot}/\"\nslots = [\"1\"]\n",
                "actuator.process.models.yolo-a.slots: two or more, or none",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\"]\nready_url = \"http://127.0.0.1:{slot}/\"\nslots = [\"1\", \"2\", \"1\"]\n",
                "actuator.process.models.yolo-a.slots[2]: '1' is there twice",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\"]\nready_url = \"http://127.0.0.1:1/\"\nslots = [\"1\", \"2\"]\n",
                "actuator.process.models.yolo-a.ready_url: with slots it names {slot}",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\"]\nready_url = \"http://127.0.0.1:{slot}/\"\nslots = [\"1\", \"2\"]\nvars = { slot = \"3\" }\n",
                "actuator.process.models.yolo-a.vars.slot: the name is taken by actuator.process.models.yolo-a.slots",
            ),
            (
                "[actuator.process.models.yolo-a]\nargv = [\"server\", \"{slot}\"]\nready_url = \"http://127.0.0.1:1/\"\n",
                "actuator.process.models.yolo-a.argv[1]: the template '{slot}' names '{slot}'",
            ),
            (
                "[actuator.v2_repository.models.yolo-a]\nurl = \"https://x:1\"\n",
                "actuator.v2_repository.models.yolo-a.url: 'https://x:1' must be a plain http:// URL",
            ),
        ] {
            // No runtime: a mapping that starts anything would panic here.
            let err = format!("{:#}", start(extra).expect_err(says));
            assert!(err.contains(says), "{says}\n{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }

    /// The commented block of examples/mfsched.toml that starts with `header`,
    /// its keys and tables uncommented (its prose left as comments).
    fn example_with(header: &str) -> String {
        let mut lines: Vec<String> = crate::config::EXAMPLE.lines().map(str::to_owned).collect();
        let start = lines
            .iter()
            .position(|l| l == &format!("# {header}"))
            .unwrap_or_else(|| panic!("the example has {header}"));
        for line in lines[start..].iter_mut().take_while(|l| l.starts_with('#')) {
            let rest = line[1..].trim_start();
            let is_key = rest.split_once(" = ").is_some_and(|(k, _)| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            });
            if rest.starts_with('[') || is_key {
                *line = rest.to_owned();
            }
        }
        lines.join("\n")
    }

    #[tokio::test]
    async fn the_examples_real_server_actuators_parse_and_map_onto_its_scenario() {
        for header in ["[actuator.v2_repository]", "[actuator.process]"] {
            let text = example_with(header);
            let c = DaemonConfig::parse(&text).unwrap_or_else(|e| panic!("{header}: {e:#}"));
            assert!(!c.actuator.downtime_as_cost);
            let a = Actuators::new(&c.actuator, &problem(), Arc::new(Metrics::default()))
                .unwrap_or_else(|e| panic!("{header}: {e:#}"));
            match header {
                "[actuator.v2_repository]" => {
                    let v = c.actuator.v2_repository.as_ref().expect("section");
                    assert_eq!(
                        (
                            v.timeout_ms,
                            v.ready_timeout_ms,
                            v.ready_poll_ms,
                            v.max_bytes
                        ),
                        (5000, 60000, 50, 1 << 20)
                    );
                    assert_eq!(v.models["llama3b"].model_name, "{model}_{variant}");
                    assert!(v.models["yolo-a"].settings_file.is_some());
                    assert_eq!(
                        (a.measured_by(0), a.measured_by(1)),
                        (Some(v2::NAME), Some(v2::NAME))
                    );
                }
                _ => {
                    let p = c.actuator.process.as_ref().expect("section");
                    assert_eq!(
                        (
                            p.grace_ms,
                            p.backoff_ms,
                            p.backoff_max_ms,
                            p.max_output_bytes
                        ),
                        (5000, 500, 30000, 65536)
                    );
                    assert_eq!(p.models["llama3b"].env_allow, ["PATH", "HOME"]);
                    assert_eq!(a.measured_by(0), Some(process::NAME));
                }
            }
            a.shutdown(Duration::from_secs(1)).await;
        }
    }

    #[tokio::test]
    async fn v2_loads_with_the_mapped_body_and_a_never_ready_one_keeps_what_serves() {
        let requests = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = Arc::clone(&requests);
        // Loads answer; only variant n gets ready.
        let addr = fake_server(move |method, path| {
            seen.lock().expect("lock").push(format!("{method} {path}"));
            if path.ends_with("/ready") {
                if path.contains("/versions/n/") {
                    (200, String::new())
                } else {
                    (503, "loading".to_owned())
                }
            } else {
                (200, "{}".to_owned())
            }
        })
        .await;
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = dir.path().join("model-settings.json");
        let a = start(&format!(
            "[actuator.v2_repository]\nready_timeout_ms = 300\nready_poll_ms = 20\n\
             [actuator.v2_repository.models.yolo-a]\nurl = \"http://{addr}\"\nversion = \"{{variant}}\"\n\
             [actuator.v2_repository.models.yolo-a.settings_file]\npath = {settings:?}\n\
             [actuator.v2_repository.models.yolo-a.settings_file.content]\nname = \"{{model}}\"\n\
             parameters = {{ version = \"{{variant}}\", extra = {{ size = \"{{image_size}}\" }} }}\n"
        ))
        .expect("a valid mapping");
        assert_eq!(a.measured_by(1), Some(v2::NAME));
        let mut problem = problem();
        let model = &problem.models[1];
        let n = (0..model.grid_len())
            .find(|&c| model.knobs(c).variant == "n")
            .expect("variant n") as u32;
        let s = (0..model.grid_len())
            .find(|&c| model.knobs(c).variant == "s")
            .expect("variant s") as u32;
        problem.current[1] = n;
        assert_eq!(
            a.brought_up(Duration::from_millis(60)).await,
            vec![1],
            "not brought up yet: the wait ends at its bound"
        );
        a.bring_up(&problem);
        assert_eq!(
            a.brought_up(Duration::from_secs(30)).await,
            Vec::<usize>::new()
        );
        // The wait leaves the bring-up's record for the first tick to log.
        let up = next_record(&a).await;
        assert_eq!(
            (up.error.as_deref(), up.serving, up.from),
            (None, Some(n), None)
        );
        assert!(up.downtime_ms > 0.0);
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&settings).expect("settings")).expect("JSON");
        let size = match &model.knobs(n as usize).knobs["image_size"] {
            mfsched_core::KnobValue::Integer(i) => *i,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            written,
            serde_json::json!({"name": "yolo-a", "parameters": {"version": "n", "extra": {"size": size}}})
        );
        // A change to s never gets ready: the old settings are put back and n serves.
        let mut joint = problem.current.clone();
        joint[1] = s;
        a.apply(&problem, 5, &joint, &[1]);
        let failed = next_record(&a).await;
        let error = failed.error.clone().expect("a failure");
        assert!(error.contains("not ready within 300 ms"), "{error}");
        assert!(
            error.contains("actuator.v2_repository.models.yolo-a"),
            "{error}"
        );
        assert_eq!((failed.tick, failed.to, failed.serving), (5, s, Some(n)));
        let back: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&settings).expect("settings")).expect("JSON");
        assert_eq!(back, written, "the settings of what serves");
        let log = requests.lock().expect("lock").clone();
        assert!(
            log.iter()
                .any(|r| r == "POST /v2/repository/models/yolo-a/load"),
            "{log:?}"
        );
        // Same name: swapped in place, never unloaded.
        assert!(!log.iter().any(|r| r.contains("/unload")), "{log:?}");
        a.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn a_process_is_supervised_restarted_when_it_dies_and_stopped_at_shutdown() {
        // Always ready: readiness is the process's own business here.
        let addr = fake_server(|_, _| (200, String::new())).await;
        let metrics = Arc::new(Metrics::default());
        let config = actuator_config(&format!(
            "[actuator.process]\nbackoff_ms = 50\ngrace_ms = 500\nready_timeout_ms = 2000\n\
             [actuator.process.models.yolo-a]\nargv = [\"/bin/sleep\", \"{{secs}}\"]\n\
             ready_url = \"http://{addr}/{{variant}}/{{image_size}}\"\nvars = {{ secs = \"0.3\" }}\n"
        ))
        .expect("config");
        let a = Actuators::new(&config, &problem(), Arc::clone(&metrics)).expect("valid");
        a.bring_up(&problem());
        let up = next_record(&a).await;
        assert_eq!(up.error, None, "{up:?}");
        // sleep exits on its own after 0.3 s: restarted and counted, twice.
        let mut restarts = 0.0;
        for _ in 0..200 {
            let page = metrics.render(Default::default());
            restarts = page
                .lines()
                .find_map(|l| l.strip_prefix("mfsched_actuator_restarts_total{model=\"yolo-a\"} "))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if restarts >= 2.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(restarts >= 2.0, "restarts: {restarts}");
        assert!(metrics
            .render(Default::default())
            .contains("mfsched_reconfiguration_downtime_seconds_count{model=\"yolo-a\",actuator=\"process\"} 1"));
        a.shutdown(Duration::from_secs(1)).await;
    }

    /// PIDs of the running processes whose argv is exactly `argv`.
    fn pids_running(argv: &[&str]) -> Vec<u32> {
        let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
        std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
            .filter(|pid| {
                // A stopped child waits in the zombie state until it is reaped.
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit_once(") ")
                        .is_some_and(|(_, r)| !r.starts_with('Z'))
                })
            })
            .collect()
    }

    #[tokio::test]
    async fn with_slots_the_old_process_serves_until_the_new_one_is_ready() {
        // Readiness per slot: slot 7001's answers 200 unless closed, slot
        // 7002's only once opened.
        let first_ready = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let second_ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (first, second) = (Arc::clone(&first_ready), Arc::clone(&second_ready));
        let addr = fake_server(move |_, path| {
            use std::sync::atomic::Ordering::SeqCst;
            let ready = if path.starts_with("/7001/") {
                first.load(SeqCst)
            } else {
                second.load(SeqCst)
            };
            (if ready { 200 } else { 503 }, String::new())
        })
        .await;
        // A nonce keeps other tests' sleeps out of the count.
        let nonce = format!("0.000{}", std::process::id());
        let config = actuator_config(&format!(
            "[actuator.process]\nready_timeout_ms = 1000\nready_poll_ms = 20\ngrace_ms = 500\n\
             [actuator.process.models.yolo-a]\nargv = [\"/bin/sleep\", \"60\", \"{{slot}}\", \"{nonce}\"]\n\
             ready_url = \"http://{addr}/{{slot}}/{{variant}}\"\nslots = [\"7001\", \"7002\"]\n"
        ))
        .expect("config");
        let on = |slot: &'static str| {
            let nonce = nonce.clone();
            move || pids_running(&["/bin/sleep", "60", slot, &nonce])
        };
        let (on_first, on_second) = (on("7001"), on("7002"));
        const YOLO: usize = 1;
        let mut problem = problem();
        assert_eq!(problem.models[YOLO].name, "yolo-a");
        let a = Actuators::new(&config, &problem, Arc::new(Metrics::default())).expect("valid");
        a.bring_up(&problem);
        let up = next_record(&a).await;
        assert_eq!(
            (up.error.as_deref(), up.serving),
            (None, Some(problem.current[YOLO]))
        );
        let old = on_first();
        assert_eq!(old.len(), 1, "the first slot's process runs");
        assert!(on_second().is_empty());

        // A change: the new configuration starts on the other slot while the
        // old one keeps running, and the old one stops once the new is ready.
        let mut joint = problem.current.clone();
        joint[YOLO] = (joint[YOLO] + 1) % problem.models[YOLO].grid_len() as u32;
        a.apply(&problem, 3, &joint, &[YOLO]);
        let mut both = false;
        for _ in 0..200 {
            if on_second().len() == 1 {
                both = on_first() == old;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(both, "the new process started beside the old one");
        second_ready.store(true, std::sync::atomic::Ordering::SeqCst);
        let switched = next_record(&a).await;
        assert_eq!(
            (switched.error.as_deref(), switched.serving),
            (None, Some(joint[YOLO]))
        );
        let mut old_gone = false;
        for _ in 0..200 {
            if on_first().is_empty() {
                old_gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            old_gone,
            "the old process stopped once the new one was ready"
        );
        let serving = on_second();
        assert_eq!(serving.len(), 1);

        // A change that never gets ready (back on the first slot, now closed):
        // the process serving was never stopped.
        first_ready.store(false, std::sync::atomic::Ordering::SeqCst);
        problem.current = joint.clone();
        let mut next = joint.clone();
        next[YOLO] = (next[YOLO] + 1) % problem.models[YOLO].grid_len() as u32;
        a.apply(&problem, 4, &next, &[YOLO]);
        let failed = next_record(&a).await;
        assert!(
            failed
                .error
                .as_deref()
                .is_some_and(|e| e.contains("not ready within 1000 ms")),
            "{failed:?}"
        );
        assert_eq!(failed.serving, Some(joint[YOLO]));
        assert_eq!(on_second(), serving, "the same process serves on");
        assert!(
            on_first().is_empty(),
            "the one that never got ready was stopped"
        );
        a.shutdown(Duration::from_secs(2)).await;
        assert!(on_second().is_empty(), "stopped at shutdown");
    }

    #[tokio::test]
    async fn a_process_that_never_gets_ready_is_stopped_and_reported() {
        let metrics = Arc::new(Metrics::default());
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a port");
        let config = actuator_config(&format!(
            "[actuator.process]\nready_timeout_ms = 300\nready_poll_ms = 20\ngrace_ms = 200\n\
             [actuator.process.models.yolo-a]\nargv = [\"/bin/sleep\", \"30\"]\n\
             ready_url = \"http://{closed}/ready\"\n"
        ))
        .expect("config");
        let a = Actuators::new(&config, &problem(), Arc::clone(&metrics)).expect("valid");
        a.bring_up(&problem());
        let r = next_record(&a).await;
        let error = r.error.expect("never ready");
        assert!(error.contains("not ready within 300 ms"), "{error}");
        assert_eq!(r.serving, None);
        assert!(metrics.render(Default::default()).contains(
            "mfsched_reconfiguration_failures_total{model=\"yolo-a\",actuator=\"process\"} 1"
        ));
        a.shutdown(Duration::from_secs(1)).await;
    }
}
