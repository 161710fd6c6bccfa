//! Hot reload: watch a plugin directory, and when a `.wasm` file settles,
//! compile it off the decision path, self-check it on the current problem and
//! swap it in atomically; anything that fails leaves the running plugin in
//! place and is reported with the reason.
//!
//! Events on a path only mark it dirty; the path is reloaded once it has been
//! quiet for [`DEBOUNCE`], or at the latest [`MAX_WAIT`] after its first
//! event. `cp` over a file emits data events before the copy
//! is complete, an atomic rename emits one rename-to, cargo removes then
//! creates: all settle the same way. A file caught half-written fails to
//! compile, is reported, and its final write triggers another reload.

use super::bindings::wit;
use super::engine::PluginEngine;
use super::pipeline::{DecisionFailure, Pipeline};
use super::registry::{Loaded, Registry, Slot, World, load_file};
use super::tick::{Checkpoint, Decider};
use anyhow::{Context as _, Result};
use mfsched_core::{Predictor, error_chain};
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a path must stay quiet before it is reloaded.
pub const DEBOUNCE: Duration = Duration::from_millis(150);
/// The longest a path waits for quiet after its first event: a writer that
/// rewrites a file faster than [`DEBOUNCE`] cannot hold a reload off forever.
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// Whether a path dirty since `first`, last touched at `last`, is reloaded `now`.
fn settled(first: Instant, last: Instant, now: Instant) -> bool {
    now.duration_since(last) >= DEBOUNCE || now.duration_since(first) >= MAX_WAIT
}

/// What happened to one reload attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum ReloadOutcome {
    /// Replaced the plugin of that name; decisions now use the new one.
    Swapped {
        name: String,
        world: World,
        /// SHA-256 of the component now in use.
        sha256: String,
    },
    /// A plugin no one had loaded under that name: now available.
    Added {
        name: String,
        world: World,
        sha256: String,
    },
    /// Not installed. `running`: a plugin is loaded under the file's name and
    /// stays in use; else none was, and none is added.
    Rejected { reason: String, running: bool },
    /// The file went away; the loaded copy stays in use.
    Removed,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReloadEvent {
    pub path: PathBuf,
    pub outcome: ReloadOutcome,
}

/// What a reload needs to self-check and install a plugin.
#[derive(Clone)]
pub struct ReloadContext {
    pub engine: Arc<PluginEngine>,
    pub registry: Arc<Registry>,
    pub predictor: Arc<dyn Predictor>,
    /// The utility a new policy is self-checked with.
    pub utility: Arc<Slot<super::registry::LoadedUtility>>,
    /// The latest tick's inputs (see `Decider::checkpoint`); `fallback` until the first tick.
    pub checkpoint: Arc<Mutex<Option<Checkpoint>>>,
    pub fallback: Checkpoint,
}

impl std::fmt::Debug for ReloadContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadContext").finish_non_exhaustive()
    }
}

/// Reload events kept for inspection (the newest); older ones live on only in
/// the counts and the log lines written when they happened.
pub const HISTORY: usize = 64;

/// Hot reloads so far: plugins swapped in or added, and attempts rejected
/// (the running plugin kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReloadCounts {
    pub loaded: u64,
    pub rejected: u64,
}

/// Every reload attempt: the newest [`HISTORY`] events and running totals.
#[derive(Debug, Default)]
struct History {
    recent: std::collections::VecDeque<ReloadEvent>,
    loaded: u64,
    rejected: u64,
}

/// A running directory watch; dropping it stops the watch.
pub struct HotReload {
    watcher: Option<RecommendedWatcher>,
    worker: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<History>>,
}

impl std::fmt::Debug for HotReload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotReload")
            .field("events", &self.events().len())
            .finish_non_exhaustive()
    }
}

impl HotReload {
    /// Watches `dir` (not recursively) until dropped.
    pub fn watch(dir: &Path, ctx: ReloadContext) -> Result<Self> {
        let (tx, rx) = channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            // The receiver only goes away when the watch stops.
            let _ = tx.send(event);
        })
        .context("cannot start the file watcher")?;
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .with_context(|| format!("cannot watch the plugin directory {}", dir.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(History::default()));
        let worker = {
            let stop = Arc::clone(&stop);
            let log = Arc::clone(&log);
            std::thread::Builder::new()
                .name("mfsched-reload".into())
                .spawn(move || {
                    // Per path: its first and its latest event since it was reloaded.
                    let mut dirty: HashMap<PathBuf, (Instant, Instant)> = HashMap::new();
                    while !stop.load(Ordering::Relaxed) {
                        match rx.recv_timeout(Duration::from_millis(25)) {
                            Ok(Ok(event)) if marks_dirty(&event.kind) => {
                                for p in event.paths {
                                    if p.extension().is_some_and(|e| e == "wasm") {
                                        let now = Instant::now();
                                        dirty
                                            .entry(p)
                                            .and_modify(|(_, last)| *last = now)
                                            .or_insert((now, now));
                                    }
                                }
                            }
                            Ok(Ok(_)) | Err(RecvTimeoutError::Timeout) => {}
                            Ok(Err(e)) => push(
                                &log,
                                ReloadEvent {
                                    path: PathBuf::new(),
                                    outcome: ReloadOutcome::Rejected {
                                        reason: format!("file watcher error: {e}"),
                                        running: false,
                                    },
                                },
                            ),
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                        let now = Instant::now();
                        let ready: Vec<PathBuf> = dirty
                            .iter()
                            .filter(|(_, (first, last))| settled(*first, *last, now))
                            .map(|(p, _)| p.clone())
                            .collect();
                        for path in ready {
                            dirty.remove(&path);
                            let outcome = reload(&ctx, &path);
                            push(&log, ReloadEvent { path, outcome });
                        }
                    }
                })
                .context("cannot start the reload thread")?
        };
        Ok(Self {
            watcher: Some(watcher),
            worker: Some(worker),
            stop,
            log,
        })
    }

    /// The newest reload attempts (at most [`HISTORY`]), oldest first.
    pub fn events(&self) -> Vec<ReloadEvent> {
        self.history().recent.iter().cloned().collect()
    }

    /// Reload attempts since the watch started, by outcome.
    pub fn counts(&self) -> ReloadCounts {
        let h = self.history();
        ReloadCounts {
            loaded: h.loaded,
            rejected: h.rejected,
        }
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for HotReload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the watcher closes the channel, which also ends the worker.
        drop(self.watcher.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Records a reload attempt: logged (every rejection with its reason), counted,
/// and kept among the newest [`HISTORY`].
fn push(log: &Mutex<History>, event: ReloadEvent) {
    let path = event.path.display().to_string();
    let mut h = log.lock().unwrap_or_else(|e| e.into_inner());
    match &event.outcome {
        ReloadOutcome::Swapped { name, sha256, .. } => {
            h.loaded += 1;
            tracing::info!(target: "mfsched::reload", %path, %sha256, "swapped in '{name}'");
        }
        ReloadOutcome::Added { name, sha256, .. } => {
            h.loaded += 1;
            tracing::info!(target: "mfsched::reload", %path, %sha256, "added '{name}'");
        }
        ReloadOutcome::Rejected { reason, running } => {
            h.rejected += 1;
            let kept = if *running {
                "the running plugin stays (until a restart, which loads the file as it is on disk)"
            } else {
                "no plugin of that name runs, none is added"
            };
            tracing::warn!(target: "mfsched::reload", %path, "rejected, {kept}: {reason}");
        }
        ReloadOutcome::Removed => {
            tracing::info!(target: "mfsched::reload", %path, "file removed; the loaded copy stays in use");
        }
    }
    if h.recent.len() == HISTORY {
        h.recent.pop_front();
    }
    h.recent.push_back(event);
}

/// Events that may change a file's content or presence.
fn marks_dirty(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Name(_) | ModifyKind::Any)
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
    )
}

/// Loads, self-checks and installs one file.
pub fn reload(ctx: &ReloadContext, path: &Path) -> ReloadOutcome {
    if !path.exists() {
        return ReloadOutcome::Removed;
    }
    // A plugin's registry name is its file stem (registry::load_file).
    let running = path
        .file_stem()
        .and_then(|s| s.to_str())
        .is_some_and(|name| {
            ctx.registry.find_policy(name).is_some() || ctx.registry.find_utility(name).is_some()
        });
    let loaded = match load_file(&ctx.engine, path) {
        Ok(l) => l,
        Err(e) => {
            return ReloadOutcome::Rejected {
                reason: format!("{e:#}"),
                running,
            };
        }
    };
    // A new build of a utility in use is called with the parameters the
    // running one was given, checked against the new build's schema.
    let loaded = match loaded {
        Loaded::Utility(u) => match ctx.registry.find_utility(&u.info.name) {
            Some(slot) => match u.configured(slot.load().given().to_vec()) {
                Ok(configured) => Loaded::Utility(Arc::new(configured)),
                Err(why) => {
                    return ReloadOutcome::Rejected {
                        reason: format!(
                            "{}: the parameters the running utility was given: {why}",
                            path.display()
                        ),
                        running,
                    };
                }
            },
            None => Loaded::Utility(u),
        },
        policy => policy,
    };
    let check = ctx
        .checkpoint
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_else(|| ctx.fallback.clone());
    if let Err(reason) = self_check(ctx, &loaded, &check) {
        return ReloadOutcome::Rejected {
            reason: format!("{}: self-check failed: {reason}", path.display()),
            running,
        };
    }
    let name = loaded.info().name.clone();
    let world = loaded.info().world;
    let sha256 = loaded.info().sha256.clone();
    let swapped = match loaded {
        Loaded::Policy(p) => match ctx.registry.find_policy(&name) {
            Some(slot) => {
                slot.swap(p);
                true
            }
            None => {
                ctx.registry.policy_slot(p);
                false
            }
        },
        Loaded::Utility(u) => match ctx.registry.find_utility(&name) {
            Some(slot) => {
                slot.swap(u);
                true
            }
            None => {
                ctx.registry.utility_slot(u);
                false
            }
        },
    };
    if swapped {
        ReloadOutcome::Swapped {
            name,
            world,
            sha256,
        }
    } else {
        ReloadOutcome::Added {
            name,
            world,
            sha256,
        }
    }
}

/// A policy must produce a valid decision on the checkpoint, asked in a tick
/// of its own as the daemon would ask it; a utility must score the running
/// configuration, as a tick scores (the pipeline's one scoring), so that its
/// own failure, not a fallback's, is the reason given. Both under the
/// engine's deadline.
pub fn self_check(ctx: &ReloadContext, loaded: &Loaded, check: &Checkpoint) -> Result<(), String> {
    match loaded {
        Loaded::Policy(p) => {
            let pipeline = Pipeline::new(
                Arc::clone(&ctx.engine),
                Arc::clone(&ctx.utility),
                Arc::clone(&ctx.predictor),
            );
            let source = Arc::new(Slot::new(Arc::clone(p)));
            let mut decider =
                Decider::with_source(pipeline, source, &p.info.name, check.params.clone());
            match decider.decide(&check.problem, &check.state).active.result {
                Ok(_) => Ok(()),
                Err(DecisionFailure::Plugin(f)) => Err(f.of_the_policy()),
                Err(DecisionFailure::Rejected(r)) => Err(format!("its decision was rejected: {r}")),
            }
        }
        Loaded::Utility(u) => {
            let pipeline = Pipeline::new(
                Arc::clone(&ctx.engine),
                Arc::new(Slot::new(Arc::clone(u))),
                Arc::clone(&ctx.predictor),
            );
            let inputs = pipeline.prepare(&check.problem);
            let current = &check.problem.current;
            let index = check
                .problem
                .space()
                .index(current)
                .ok_or("the running configuration is not in the joint space")?;
            let predictions = ctx
                .predictor
                .predict_joint(&check.state, &check.problem.current, &[index])
                .map_err(|e| error_chain(&e))?;
            pipeline
                .score(
                    &inputs,
                    current,
                    &predictions,
                    None,
                    Instant::now() + ctx.engine.limits().deadline,
                )
                .map(|_| ())
                .map_err(|f| f.to_string())
        }
    }
}

/// Parameters in the WIT form, for a checkpoint built by hand.
pub fn wit_params(params: &[(String, String)]) -> Vec<wit::Param> {
    params
        .iter()
        .map(|(key, value)| wit::Param {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file touched every 100 ms (faster than the debounce) is still
    /// reloaded once it has been dirty for the maximum wait.
    #[test]
    fn a_path_rewritten_faster_than_the_debounce_is_reloaded_by_the_max_wait() {
        let first = Instant::now();
        let step = Duration::from_millis(100);
        let mut last = first;
        let mut reloaded_at = None;
        for i in 1..100u32 {
            let now = first + step * i;
            if settled(first, last, now) {
                reloaded_at = Some(now.duration_since(first));
                break;
            }
            last = now;
        }
        assert_eq!(reloaded_at, Some(MAX_WAIT));
        assert!(
            settled(first, first, first + DEBOUNCE),
            "a quiet path settles"
        );
        assert!(!settled(first, first, first + DEBOUNCE / 2));
    }
}
