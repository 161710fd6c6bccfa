//! Actuators: how an applied decision reaches the inference servers.
//!
//! - file: one JSON document with every model's configuration, rewritten
//!   atomically (temp file + rename) whenever a model changes;
//! - webhook: per model, the new configuration POSTed as JSON over plain HTTP,
//!   with a timeout and retries. Each model has its own sender task fed through a
//!   `watch` channel, so a slow server never delays a tick and only the newest
//!   configuration is sent when several changes queue up.
//!
//! Only changed configurations are handed to the actuators. Delivery failures are
//! counted in the metrics; they never stop the loop.

use anyhow::{Context, Result, bail};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::{ActuatorConfig, WebhookConfig};
use super::metrics::Metrics;
use mfsched_core::domain::{KnobSetting, Problem};

/// What a webhook receives (the body of its POST, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelUpdate {
    pub model: String,
    pub tick: u64,
    pub config: KnobSetting,
}

/// What the file actuator writes.
#[derive(Debug, Serialize)]
struct FileDocument<'a> {
    tick: u64,
    models: BTreeMap<&'a str, KnobSetting>,
}

#[derive(Debug)]
pub struct Actuators {
    file: Option<PathBuf>,
    webhooks: BTreeMap<usize, watch::Sender<Option<ModelUpdate>>>,
    tasks: Vec<JoinHandle<()>>,
    metrics: Arc<Metrics>,
}

impl Actuators {
    /// Must be called inside a tokio runtime when webhooks are configured.
    pub fn new(config: &ActuatorConfig, problem: &Problem, metrics: Arc<Metrics>) -> Result<Self> {
        let mut webhooks = BTreeMap::new();
        let mut tasks = Vec::new();
        if let Some(w) = &config.webhook {
            let client: Client<HttpConnector, Full<Bytes>> =
                Client::builder(TokioExecutor::new()).build_http();
            for (model, url) in &w.urls {
                let Some(index) = problem.model_index(model) else {
                    bail!(
                        "actuator.webhook.urls names model '{model}', which the scenario does not have"
                    );
                };
                let uri: hyper::Uri = url
                    .parse()
                    .with_context(|| format!("actuator.webhook.urls.{model}: bad URL '{url}'"))?;
                let (tx, rx) = watch::channel(None);
                tasks.push(tokio::spawn(webhook_sender(
                    client.clone(),
                    uri,
                    w.clone(),
                    rx,
                    Arc::clone(&metrics),
                )));
                webhooks.insert(index, tx);
            }
        }
        Ok(Self {
            file: config.file.clone(),
            webhooks,
            tasks,
            metrics,
        })
    }

    /// Hands the changed models of `joint` to every actuator.
    pub fn apply(&self, problem: &Problem, tick: u64, joint: &[u32], changed: &[usize]) {
        if changed.is_empty() {
            return;
        }
        if let Some(path) = &self.file {
            let doc = FileDocument {
                tick,
                models: problem
                    .models
                    .iter()
                    .zip(joint)
                    .map(|(m, &c)| (m.name.as_str(), m.knobs(c as usize)))
                    .collect(),
            };
            let ok = write_json_atomically(path, &doc).is_ok();
            self.metrics.actuator_result("file", ok);
        }
        for &i in changed {
            if let Some(tx) = self.webhooks.get(&i) {
                let model = &problem.models[i];
                // send_replace never fails: the receiver lives in its task until shutdown.
                tx.send_replace(Some(ModelUpdate {
                    model: model.name.clone(),
                    tick,
                    config: model.knobs(joint[i] as usize),
                }));
            }
        }
    }

    /// Lets each webhook sender finish the update it holds, then stops them.
    pub async fn shutdown(self, grace: Duration) {
        drop(self.webhooks);
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(grace, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

async fn webhook_sender(
    client: Client<HttpConnector, Full<Bytes>>,
    uri: hyper::Uri,
    config: WebhookConfig,
    mut rx: watch::Receiver<Option<ModelUpdate>>,
    metrics: Arc<Metrics>,
) {
    // `changed` fails once the daemon drops the sender: that is the stop signal.
    while rx.changed().await.is_ok() {
        let Some(update) = rx.borrow_and_update().clone() else {
            continue;
        };
        let body = match serde_json::to_vec(&update) {
            Ok(b) => Bytes::from(b),
            Err(_) => {
                metrics.actuator_result("webhook", false);
                continue;
            }
        };
        let mut delivered = false;
        for attempt in 0..=config.retries {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
            if post(&client, &uri, body.clone(), config.timeout_ms).await {
                delivered = true;
                break;
            }
        }
        metrics.actuator_result("webhook", delivered);
    }
}

async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    uri: &hyper::Uri,
    body: Bytes,
    timeout_ms: u64,
) -> bool {
    let Ok(request) = hyper::Request::post(uri.clone())
        .header("content-type", "application/json")
        .body(Full::new(body))
    else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(timeout_ms), client.request(request)).await,
        Ok(Ok(response)) if response.status().is_success()
    )
}

/// Writes JSON to a temp file beside `path`, then renames it over `path`.
pub fn write_json_atomically(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_vec_pretty(value).context("encoding JSON")?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}
