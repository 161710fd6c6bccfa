//! The v2-repository actuator: the open inference protocol's model-repository
//! extension (`POST /v2/repository/models/{m}/load` with a body,
//! `/unload`, `POST /v2/repository/index`) and its readiness
//! (`GET /v2/models/{m}/ready`, or `/versions/{v}/ready`).
//!
//! Per model, `[actuator.v2_repository.models.<model>]` maps a configuration
//! to the calls: the served name and version (templates: Triton serves one
//! model per variant, `"{model}_{variant}"`), the load body's `parameters`
//! and Triton's configuration override (`load_config`, sent as the JSON
//! string `parameters.config`), and a settings file rewritten atomically
//! before the load (MLServer ignores the body and re-reads its
//! `model-settings.json`).
//!
//! A change loads the new configuration, waits for it to answer ready, then
//! unloads the old one when it was served under another name; when both do not
//! fit in the memory cap together, the old one is unloaded first. A load or
//! readiness that fails puts back the settings file, makes sure the old
//! configuration still serves (loading it again if it stopped), and says why
//! in one line; the daemon is told which configuration serves.

use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use super::template::{self, Values};
use super::{BodyClient, FinishedQueue, Job, post_json, wait_ready};
use crate::config::{SettingsFileConfig, V2ModelConfig, V2RepositoryConfig};
use crate::metrics::Metrics;

pub(super) const NAME: &str = "v2-repository";

/// One model's mapping, checked against its knobs.
#[derive(Debug)]
pub(super) struct Model {
    pub(super) index: usize,
    name: String,
    key: String,
    base: String,
    config: V2ModelConfig,
    timeout: Duration,
    ready_timeout: Duration,
    poll: Duration,
    max_bytes: usize,
}

/// What a configuration is on the server.
#[derive(Debug, Clone, PartialEq)]
struct Served {
    config: u32,
    name: String,
    version: Option<String>,
    /// The settings file as it was written for it.
    settings: Option<Vec<u8>>,
}

impl Model {
    pub(super) fn new(
        index: usize,
        model: &mfsched_core::Model,
        config: &V2ModelConfig,
        common: &V2RepositoryConfig,
    ) -> Result<Self> {
        let key = format!("actuator.v2_repository.models.{}", model.name);
        let known = template::known_names(model, &config.vars);
        template::check(&format!("{key}.model_name"), &config.model_name, &known)?;
        if config.model_name.trim().is_empty() {
            bail!("{key}.model_name is empty");
        }
        if let Some(v) = &config.version {
            template::check(&format!("{key}.version"), v, &known)?;
        }
        if let Some(t) = &config.load_parameters {
            template::check_table(&format!("{key}.load_parameters"), t, &known)?;
            if t.contains_key("config") && config.load_config.is_some() {
                bail!(
                    "{key}: load_parameters.config and load_config both set the configuration: give one"
                );
            }
        }
        if let Some(t) = &config.load_config {
            template::check_table(&format!("{key}.load_config"), t, &known)?;
        }
        if let Some(f) = &config.settings_file {
            check_settings(&format!("{key}.settings_file"), f, &known)?;
        }
        // Every configuration's names must make a URL path segment.
        for c in 0..model.grid_len() {
            let values = Values::new(&model.name, &model.knobs(c), &config.vars);
            let name = template::render(&config.model_name, &values);
            let version = config
                .version
                .as_ref()
                .map(|v| template::render(v, &values));
            for (what, s) in [("model_name", Some(&name)), ("version", version.as_ref())] {
                if let Some(s) = s
                    && (s.is_empty()
                        || !s
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
                {
                    bail!(
                        "{key}.{what}: configuration {} gives '{s}', not a name of letters, digits, '-', '_' and '.'",
                        model.knobs(c)
                    );
                }
            }
        }
        Ok(Self {
            index,
            name: model.name.clone(),
            key,
            base: config.url.trim_end_matches('/').to_owned(),
            config: config.clone(),
            timeout: Duration::from_millis(common.timeout_ms),
            ready_timeout: Duration::from_millis(common.ready_timeout_ms),
            poll: Duration::from_millis(common.ready_poll_ms),
            max_bytes: common.max_bytes,
        })
    }

    fn uri(&self, path: &str) -> Result<hyper::Uri> {
        format!("{}{path}", self.base)
            .parse()
            .with_context(|| format!("{}.url: cannot make a URL of {}{path}", self.key, self.base))
    }

    fn ready_uri(&self, name: &str, version: Option<&str>) -> Result<hyper::Uri> {
        match version {
            Some(v) => self.uri(&format!("/v2/models/{name}/versions/{v}/ready")),
            None => self.uri(&format!("/v2/models/{name}/ready")),
        }
    }

    /// The load request's body for `values`.
    fn load_body(&self, values: &Values) -> Result<Vec<u8>> {
        let mut parameters = match &self.config.load_parameters {
            Some(t) => match template::render_table(t, values) {
                serde_json::Value::Object(o) => o,
                _ => serde_json::Map::new(),
            },
            None => serde_json::Map::new(),
        };
        if let Some(t) = &self.config.load_config {
            let config = serde_json::to_string(&template::render_table(t, values))?;
            parameters.insert("config".to_owned(), config.into());
        }
        let body = if parameters.is_empty() {
            serde_json::json!({})
        } else {
            serde_json::json!({ "parameters": parameters })
        };
        Ok(serde_json::to_vec(&body)?)
    }

    pub(super) async fn run(
        self,
        mut rx: watch::Receiver<Option<Job>>,
        client: BodyClient,
        finished: FinishedQueue,
        metrics: Arc<Metrics>,
    ) {
        let get = crate::load::http_client();
        let mut serving: Option<Served> = None;
        while rx.changed().await.is_ok() {
            let Some(job) = rx.borrow_and_update().clone() else {
                continue;
            };
            let outcome = self
                .reconfigure(&client, &get, &job, serving.as_ref())
                .await;
            let downtime = job.requested.elapsed();
            let error = match outcome {
                Ok(new) => {
                    serving = Some(new);
                    super::log_served(&self.name, &self.key, &job, downtime);
                    None
                }
                Err(e) => {
                    let kept = serving.as_ref().map_or("nothing".to_owned(), |s| {
                        format!("{} {}", s.name, s.version.as_deref().unwrap_or(""))
                    });
                    tracing::warn!(
                        model = %self.name,
                        "{}: configuration {} not applied, still serving {}: {e:#}",
                        self.key,
                        job.setting,
                        kept.trim()
                    );
                    Some(format!("{e:#}"))
                }
            };
            metrics.reconfigured(&self.name, NAME, downtime, error.is_none());
            finished.push(job.record(
                self.index,
                NAME,
                downtime,
                error,
                serving.as_ref().map(|s| s.config),
            ));
        }
    }

    async fn reconfigure(
        &self,
        client: &BodyClient,
        get: &crate::load::HttpClient,
        job: &Job,
        old: Option<&Served>,
    ) -> Result<Served> {
        let values = Values::new(&self.name, &job.setting, &self.config.vars);
        let name = template::render(&self.config.model_name, &values);
        let version = self
            .config
            .version
            .as_ref()
            .map(|v| template::render(v, &values));
        let body = self.load_body(&values)?;
        let settings = match &self.config.settings_file {
            Some(f) => {
                let text = render_settings(f, &values)?;
                super::write_atomically(&f.path, &text)
                    .with_context(|| format!("{}.settings_file", self.key))?;
                Some(text)
            }
            None => None,
        };
        let new = Served {
            config: job.config,
            name: name.clone(),
            version: version.clone(),
            settings,
        };
        // Under the same name the server swaps the model in place (MLServer
        // and Triton reload a loaded model): nothing to unload.
        let other_old = old.filter(|o| o.name != name);
        let mut unloaded_first = false;
        if let Some(o) = other_old
            && job.unload_first
        {
            self.unload(client, &o.name).await?;
            unloaded_first = true;
        }
        let loaded = async {
            let uri = self.uri(&format!("/v2/repository/models/{name}/load"))?;
            post_json(client, &uri, body, self.timeout, self.max_bytes)
                .await
                .context("load")?;
            let ready = self.ready_uri(&name, version.as_deref())?;
            wait_ready(get, &ready, self.ready_timeout, self.poll, self.max_bytes)
                .await
                .with_context(|| format!("{}: {name} after its load", self.key))
        }
        .await;
        if let Err(e) = loaded {
            self.keep_serving(client, get, old, unloaded_first).await;
            return Err(e);
        }
        if let Some(o) = other_old
            && !unloaded_first
            && let Err(e) = self.unload(client, &o.name).await
        {
            // The new configuration serves; the old one only holds memory.
            tracing::warn!(model = %self.name, "{}: {} serves, but unloading {} failed: {e:#}", self.key, name, o.name);
        }
        Ok(new)
    }

    async fn unload(&self, client: &BodyClient, name: &str) -> Result<()> {
        let uri = self.uri(&format!("/v2/repository/models/{name}/unload"))?;
        post_json(client, &uri, b"{}".to_vec(), self.timeout, self.max_bytes)
            .await
            .map(|_| ())
            .with_context(|| format!("unload {name}"))
    }

    /// After a failed change: the old settings file back, and the old
    /// configuration loaded again unless it still answers ready.
    async fn keep_serving(
        &self,
        client: &BodyClient,
        get: &crate::load::HttpClient,
        old: Option<&Served>,
        unloaded: bool,
    ) {
        let Some(old) = old else { return };
        if let (Some(f), Some(text)) = (&self.config.settings_file, &old.settings)
            && let Err(e) = super::write_atomically(&f.path, text)
        {
            tracing::warn!(model = %self.name, "{}.settings_file: cannot put the old settings back: {e:#}", self.key);
        }
        let ready = match self.ready_uri(&old.name, old.version.as_deref()) {
            Ok(u) => u,
            Err(_) => return,
        };
        if !unloaded
            && crate::load::get(get, &ready, self.timeout, self.max_bytes)
                .await
                .is_ok()
        {
            return;
        }
        let reload = async {
            let uri = self.uri(&format!("/v2/repository/models/{}/load", old.name))?;
            let values_body = b"{}".to_vec();
            post_json(client, &uri, values_body, self.timeout, self.max_bytes).await?;
            wait_ready(get, &ready, self.ready_timeout, self.poll, self.max_bytes).await
        };
        if let Err(e) = reload.await {
            tracing::warn!(model = %self.name, "{}: the old configuration does not serve either: {e:#}", self.key);
        }
    }
}

/// Checks a settings file's templates and that its folder exists.
pub(super) fn check_settings(key: &str, f: &SettingsFileConfig, known: &[String]) -> Result<()> {
    template::check_table(&format!("{key}.content"), &f.content, known)?;
    let dir = f.path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir
        && !dir.is_dir()
    {
        bail!("{key}.path {}: its folder does not exist", f.path.display());
    }
    Ok(())
}

/// The settings file's text for `values` (pretty JSON).
pub(super) fn render_settings(f: &SettingsFileConfig, values: &Values) -> Result<Vec<u8>> {
    let mut text = serde_json::to_vec_pretty(&template::render_table(&f.content, values))?;
    text.push(b'\n');
    Ok(text)
}
