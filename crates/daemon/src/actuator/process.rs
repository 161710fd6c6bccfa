//! The process actuator: one supervised server process per model, started
//! from an argv templated from the configuration (no shell), with an
//! environment of the allow-listed variables plus templated entries, and
//! optionally a settings file rendered before each start.
//!
//! A change stops the process (SIGTERM to its process group, `grace_ms`, then
//! SIGKILL), starts the new configuration and waits until `ready_url` answers
//! 2xx; the downtime is request to ready. A configuration that never gets
//! ready is stopped and the previous one started again.
//!
//! With `slots` (two or more values of the `{slot}` placeholder, a port for
//! instance, behind a router that sends requests to whichever answers), a
//! change starts the new configuration on a slot the running process does not
//! hold, waits until it is ready and only then stops the old one, as the
//! v2-repository actuator loads before it unloads: the old configuration
//! serves meanwhile, and one that never gets ready leaves it serving untouched.
//! When both do not fit in the memory cap together, the old one stops first.
//! The downtime recorded is request to ready either way. A process that exits
//! on its own is counted (`mfsched_actuator_restarts_total`), logged, and
//! started again after a back-off that doubles with each crash in a row.
//! Its stdout and stderr are logged line by line (tagged with the model and
//! the stream; a line longer than 1 KiB in pieces; `max_output_bytes` per start). Every process
//! is stopped when the actuators shut down, and killed if they are dropped.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

use super::template::{self, Values};
use super::{FinishedQueue, Job, printable, wait_ready};
use crate::config::{ProcessConfig, ProcessModelConfig};
use crate::metrics::Metrics;

pub(super) const NAME: &str = "process";

/// The placeholder each of `slots`' values stands in for.
const SLOT: &str = "slot";

/// Longest piece of an output line logged at once.
const MAX_LINE: usize = 1024;

#[derive(Debug)]
pub(super) struct Supervisor {
    pub(super) index: usize,
    name: String,
    key: String,
    config: ProcessModelConfig,
    common: ProcessConfig,
    /// The template constants of each slot: `vars` and, with `slots`, `slot`
    /// (one entry without slots).
    slot_vars: Vec<BTreeMap<String, String>>,
}

/// How often a supervisor looks whether its process exited (std's child
/// handle, polled: no second process-reaping runtime beside the std one).
const EXIT_POLL: Duration = Duration::from_millis(50);

/// A started process, in a process group of its own; SIGKILLed with its
/// group when dropped while still running (the daemon's exit, a panic).
#[derive(Debug)]
struct Child {
    child: std::process::Child,
    group: Option<rustix::process::Pid>,
}

impl Child {
    /// Resolves when the process exits (reaping it).
    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
    }

    fn signal(&self, signal: rustix::process::Signal) {
        if let Some(group) = self.group {
            // The group may be gone already: nothing left to signal.
            let _ = rustix::process::kill_process_group(group, signal);
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(rustix::process::Signal::KILL);
            let _ = self.child.wait();
        }
    }
}

/// A started process, the configuration it serves and the slot it holds.
#[derive(Debug)]
struct Running {
    child: Child,
    job: Job,
    slot: usize,
}

/// The outcome of a change: what runs afterwards, the error when the new
/// configuration did not take, and the downtime (request to ready, or to the
/// failure).
struct Switched {
    running: Option<Running>,
    error: Option<String>,
    downtime: Duration,
}

impl Switched {
    fn to(running: Running, downtime: Duration) -> Self {
        Self {
            running: Some(running),
            error: None,
            downtime,
        }
    }

    fn failed(running: Option<Running>, error: &anyhow::Error, downtime: Duration) -> Self {
        Self {
            running,
            error: Some(format!("{error:#}")),
            downtime,
        }
    }
}

impl Supervisor {
    pub(super) fn new(
        index: usize,
        model: &mfsched_core::Model,
        config: &ProcessModelConfig,
        common: &ProcessConfig,
    ) -> Result<Self> {
        let key = format!("actuator.process.models.{}", model.name);
        let slot_vars = slot_vars(&key, config)?;
        let known = template::known_names(model, &slot_vars[0]);
        for (i, a) in config.argv.iter().enumerate() {
            template::check(&format!("{key}.argv[{i}]"), a, &known)?;
        }
        for (k, v) in &config.env {
            template::check(&format!("{key}.env.{k}"), v, &known)?;
        }
        template::check(&format!("{key}.ready_url"), &config.ready_url, &known)?;
        if let Some(f) = &config.settings_file {
            super::v2::check_settings(&format!("{key}.settings_file"), f, &known)?;
        }
        for vars in &slot_vars {
            for c in 0..model.grid_len() {
                let values = Values::new(&model.name, &model.knobs(c), vars);
                let url = template::render(&config.ready_url, &values);
                if !url.starts_with("http://") || url.parse::<hyper::Uri>().is_err() {
                    bail!(
                        "{key}.ready_url: configuration {} gives '{url}', not a plain http:// URL",
                        model.knobs(c)
                    );
                }
            }
        }
        Ok(Self {
            index,
            name: model.name.clone(),
            key,
            config: config.clone(),
            common: common.clone(),
            slot_vars,
        })
    }

    pub(super) async fn run(
        self,
        mut rx: watch::Receiver<Option<Job>>,
        finished: FinishedQueue,
        metrics: Arc<Metrics>,
    ) {
        let mut running: Option<Running> = None;
        let mut crashes_in_a_row: u32 = 0;
        loop {
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let Some(job) = rx.borrow_and_update().clone() else { continue };
                    let switched = match running.take() {
                        Some(old) if self.slot_vars.len() > 1 && !job.unload_first => {
                            self.switch_beside(old, &job).await
                        }
                        previous => self.switch_in_turn(previous, &job).await,
                    };
                    let (error, downtime) = (switched.error, switched.downtime);
                    running = switched.running;
                    if error.is_none() {
                        crashes_in_a_row = 0;
                        super::log_served(&self.name, &self.key, &job, downtime);
                    }
                    metrics.reconfigured(&self.name, NAME, downtime, error.is_none());
                    finished.push(job.record(self.index, NAME, downtime, error, running.as_ref().map(|r| r.job.config)));
                }
                status = exited(&mut running) => {
                    let Some(r) = running.take() else { continue };
                    let (job, slot) = (r.job, r.slot);
                    tracing::warn!(model = %self.name, "{}: the process exited on its own ({})", self.key, describe(status));
                    // Restart it with a back-off that doubles with every crash
                    // (or failed start) in a row; a new configuration, or the
                    // stop, ends the wait.
                    loop {
                        crashes_in_a_row = crashes_in_a_row.saturating_add(1);
                        metrics.process_restarted(&self.name);
                        let backoff = Duration::from_millis(
                            self.common
                                .backoff_ms
                                .saturating_mul(1u64 << (crashes_in_a_row - 1).min(20))
                                .min(self.common.backoff_max_ms),
                        );
                        tracing::warn!(model = %self.name, "{}: restart {crashes_in_a_row} in a row in {} ms", self.key, backoff.as_millis());
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            changed = rx.changed() => {
                                if changed.is_err() {
                                    return;
                                }
                                // The outer loop applies it.
                                rx.mark_changed();
                                break;
                            }
                        }
                        match self.start_ready(&job, slot).await {
                            Ok(child) => {
                                running = Some(Running { child, job, slot });
                                break;
                            }
                            Err(e) => tracing::warn!(model = %self.name, "{}: restart failed: {e:#}", self.key),
                        }
                    }
                }
            }
        }
        if let Some(r) = running {
            self.stop(r.child).await;
        }
    }

    /// The slot after `slot`: every change moves to it, beside or in turn,
    /// so a new server never needs the port the running one holds.
    fn next_slot(&self, slot: usize) -> usize {
        (slot + 1) % self.slot_vars.len()
    }

    /// Starts `job` on the slot after the one `old` holds and stops `old`
    /// once it is ready; when it never gets ready, `old` serves on untouched.
    async fn switch_beside(&self, old: Running, job: &Job) -> Switched {
        let slot = self.next_slot(old.slot);
        match self.start_timed(job, slot).await {
            (Ok(new), downtime) => {
                self.stop(old.child).await;
                Switched::to(new, downtime)
            }
            (Err(e), downtime) => {
                tracing::warn!(
                    model = %self.name,
                    "{}: configuration {} not applied ({e:#}); {} goes on serving",
                    self.key, job.setting, old.job.setting
                );
                Switched::failed(Some(old), &e, downtime)
            }
        }
    }

    /// Stops what runs (`previous`), then starts `job` (on the next slot);
    /// when it never gets ready, starts the previous configuration again.
    async fn switch_in_turn(&self, previous: Option<Running>, job: &Job) -> Switched {
        let (previous, slot) = match previous {
            Some(r) => {
                let slot = self.next_slot(r.slot);
                self.stop(r.child).await;
                (Some(r.job), slot)
            }
            None => (None, 0),
        };
        match self.start_timed(job, slot).await {
            (Ok(new), downtime) => Switched::to(new, downtime),
            (Err(e), downtime) => {
                tracing::warn!(
                    model = %self.name,
                    "{}: configuration {} not applied ({e:#}); starting the previous one again",
                    self.key, job.setting
                );
                let mut back = None;
                if let Some(p) = previous {
                    match self.start_ready(&p, slot).await {
                        Ok(child) => {
                            back = Some(Running {
                                child,
                                job: p,
                                slot,
                            })
                        }
                        Err(e) => {
                            tracing::warn!(model = %self.name, "{}: the previous configuration does not start either: {e:#}", self.key)
                        }
                    }
                }
                Switched::failed(back, &e, downtime)
            }
        }
    }

    /// Starts `job` on `slot`: the process once ready (or why not) and the
    /// downtime, from the request to then.
    async fn start_timed(&self, job: &Job, slot: usize) -> (Result<Running>, Duration) {
        let started = self.start_ready(job, slot).await.map(|child| Running {
            child,
            job: job.clone(),
            slot,
        });
        (started, job.requested.elapsed())
    }

    /// What the placeholders of `job`'s templates stand for on `slot`.
    fn values(&self, job: &Job, slot: usize) -> Values {
        Values::new(&self.name, &job.setting, &self.slot_vars[slot])
    }

    /// Starts `job`'s process on `slot` and waits until it answers ready;
    /// stops it when it does not within `ready_timeout_ms` or exits first.
    async fn start_ready(&self, job: &Job, slot: usize) -> Result<Child> {
        let values = self.values(job, slot);
        let ready: hyper::Uri = template::render(&self.config.ready_url, &values)
            .parse()
            .with_context(|| format!("{}.ready_url", self.key))?;
        let mut child = self.start(&values)?;
        let client = crate::load::http_client();
        let timeout = Duration::from_millis(self.common.ready_timeout_ms);
        let outcome = tokio::select! {
            r = wait_ready(&client, &ready, timeout, Duration::from_millis(self.common.ready_poll_ms), 64 << 10) => r,
            status = child.wait() => Err(anyhow::anyhow!("the process exited before it was ready ({})", describe(status))),
        };
        match outcome {
            Ok(()) => Ok(child),
            Err(e) => {
                self.stop(child).await;
                Err(e)
            }
        }
    }

    /// Renders the settings file, argv and environment of a configuration's
    /// `values` and spawns it in a process group of its own, its output
    /// drained into the log.
    fn start(&self, values: &Values) -> Result<Child> {
        if let Some(f) = &self.config.settings_file {
            let text = super::v2::render_settings(f, values)?;
            super::write_atomically(&f.path, &text)
                .with_context(|| format!("{}.settings_file", self.key))?;
        }
        let argv: Vec<String> = self
            .config
            .argv
            .iter()
            .map(|a| template::render(a, values))
            .collect();
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for name in &self.config.env_allow {
            if let Some(v) = std::env::var_os(name) {
                command.env(name, v);
            }
        }
        for (k, v) in &self.config.env {
            command.env(k, template::render(v, values));
        }
        if let Some(dir) = &self.config.cwd {
            command.current_dir(dir);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("{}.argv: cannot start {}", self.key, argv[0]))?;
        let pid = child.id();
        tracing::info!(model = %self.name, pid, "{}: started {}", self.key, argv.join(" "));
        let budget = Arc::new(std::sync::atomic::AtomicUsize::new(
            self.common.max_output_bytes,
        ));
        let streams: [(&'static str, Option<Box<dyn Read + Send>>); 2] = [
            (
                "stdout",
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
            ),
            (
                "stderr",
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
            ),
        ];
        for (which, stream) in streams {
            let Some(stream) = stream else { continue };
            let (model, budget) = (self.name.clone(), Arc::clone(&budget));
            // A blocking reader per pipe: it ends when the process closes it.
            std::thread::Builder::new()
                .name(format!("mfsched-{which}"))
                .spawn(move || drain(stream, &model, which, &budget))
                .with_context(|| format!("{}: cannot start the output reader", self.key))?;
        }
        Ok(Child {
            child,
            group: i32::try_from(pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw),
        })
    }

    /// SIGTERM to the process group, `grace_ms` to exit, then SIGKILL.
    async fn stop(&self, mut child: Child) {
        if matches!(child.child.try_wait(), Ok(Some(_))) {
            // Already exited; what it left in its group goes too.
            child.signal(rustix::process::Signal::KILL);
            return;
        }
        child.signal(rustix::process::Signal::TERM);
        let grace = Duration::from_millis(self.common.grace_ms);
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            tracing::warn!(model = %self.name, "{}: no exit within grace_ms ({} ms) of SIGTERM: SIGKILL", self.key, grace.as_millis());
            child.signal(rustix::process::Signal::KILL);
            let _ = child.wait().await;
        } else {
            // The server may have left children in its group (worker pools).
            child.signal(rustix::process::Signal::KILL);
        }
    }
}

/// The template constants of each of the model's slots (`vars` plus `slot`),
/// or `vars` alone without slots; a slot list that cannot work is an error
/// naming its key.
fn slot_vars(key: &str, config: &ProcessModelConfig) -> Result<Vec<BTreeMap<String, String>>> {
    if config.slots.is_empty() {
        return Ok(vec![config.vars.clone()]);
    }
    if config.slots.len() < 2 {
        bail!(
            "{key}.slots: two or more, or none (a new configuration starts on a slot the running one does not hold)"
        );
    }
    if config.vars.contains_key(SLOT) {
        bail!("{key}.vars.{SLOT}: the name is taken by {key}.slots");
    }
    if let Some((i, v)) = config
        .slots
        .iter()
        .enumerate()
        .find(|(i, v)| config.slots[..*i].contains(v))
    {
        bail!("{key}.slots[{i}]: '{v}' is there twice (two processes would share a slot)");
    }
    if !config.ready_url.contains(&format!("{{{SLOT}}}")) {
        bail!(
            "{key}.ready_url: with slots it names {{{SLOT}}} (each slot's process answers its own readiness)"
        );
    }
    Ok(config
        .slots
        .iter()
        .map(|v| {
            let mut vars = config.vars.clone();
            vars.insert(SLOT.to_owned(), v.clone());
            vars
        })
        .collect())
}

/// Resolves when the running process exits; never while none runs.
async fn exited(running: &mut Option<Running>) -> std::io::Result<ExitStatus> {
    match running {
        Some(r) => r.child.wait().await,
        None => std::future::pending().await,
    }
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("cannot wait for it: {e}"),
    }
}

/// Logs a stream's lines (in pieces of at most [`MAX_LINE`] bytes) while the
/// shared budget lasts, then reads the rest unlogged so the process never
/// blocks on a full pipe.
fn drain(
    stream: Box<dyn Read + Send>,
    model: &str,
    which: &'static str,
    budget: &std::sync::atomic::AtomicUsize,
) {
    use std::sync::atomic::Ordering;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::with_capacity(256);
    let mut dropped = 0usize;
    loop {
        line.clear();
        let n = match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let left = budget.load(Ordering::Relaxed);
        if left >= n {
            budget.fetch_sub(n, Ordering::Relaxed);
            let text = printable(&String::from_utf8_lossy(&line), MAX_LINE);
            if !text.is_empty() {
                tracing::info!(target: "mfsched::process", model = %model, stream = which, "{text}");
            }
        } else {
            dropped += n;
        }
    }
    if dropped > 0 {
        tracing::info!(target: "mfsched::process", model = %model, stream = which,
            "{dropped} more bytes not logged (actuator.process.max_output_bytes)");
    }
}
