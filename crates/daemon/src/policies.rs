//! The daemon's policies: the plugin host's Wasm components (embedded ones and
//! `NAME.wasm` files of the plugin directory, hot-reloaded while the daemon
//! runs) beside the built-in `hold`, all deciding through the one pipeline.

use anyhow::{Context, Result};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mfsched_core::domain::Problem;
use mfsched_core::predict::Predictor;
use mfsched_plugin_host::bindings::wit;
use mfsched_plugin_host::precheck::ComponentIdentity;
use mfsched_plugin_host::registry::{self, Loaded, Registry};
use mfsched_plugin_host::reload::self_check;
use mfsched_plugin_host::{
    Call, Checkpoint, CompileCache, HotReload, Pipeline, PluginEngine, PluginFailure, PluginLimits,
    PolicySource, RawDecision, ReloadContext, ReloadCounts, ReloadEvent, setup,
};

/// The memory a policy instance may grow to.
const MEMORY_BYTES: usize = 256 << 20;

pub struct PluginPolicies {
    pipeline: Arc<Pipeline>,
    registry: Arc<Registry>,
    /// The parameters every policy gets.
    params: Vec<wit::Param>,
    /// The inputs of the latest decision, for reload self-checks.
    checkpoint: Arc<Mutex<Option<Checkpoint>>>,
    reload: Option<HotReload>,
}

impl std::fmt::Debug for PluginPolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginPolicies")
            .field("policies", &self.registry.policy_names())
            .field("hot_reload", &self.reload.is_some())
            .finish_non_exhaustive()
    }
}

impl PluginPolicies {
    /// Loads every embedded policy and every `.wasm` policy of `dir`, and
    /// watches `dir` for hot reload. A file from `dir` passes the same
    /// self-check as a hot reload (a valid decision on the problem) before it is
    /// offered; one that does not load or fails is reported in the returned
    /// notes and skipped. `deadline` bounds each policy call, host work included.
    pub fn new(
        problem: &Problem,
        predictor: Arc<dyn Predictor>,
        utility: &str,
        utility_params: &[(String, String)],
        dir: Option<&Path>,
        deadline: Duration,
        seed: u64,
    ) -> Result<(Self, Vec<String>)> {
        let engine = Arc::new(PluginEngine::new(
            PluginLimits {
                deadline,
                memory_bytes: MEMORY_BYTES,
                ..PluginLimits::default()
            },
            CompileCache::Default,
        )?);
        let registry = Arc::new(Registry::default());
        let params = vec![wit::Param {
            key: "seed".into(),
            value: seed.to_string(),
        }];
        let checkpoint = Arc::new(Mutex::new(None));
        // Components are loaded and self-checked on a thread of their own, as
        // hot reload does: off the caller's async runtime, where a guest's
        // stdout, stderr or stdin (WASI streams that block on tokio) panics
        // with "Cannot start a runtime from within a runtime". A panic there
        // is an error of this call, not of the process.
        let (reload_context, notes) = std::thread::scope(|s| {
            s.spawn(|| {
                load_and_check(
                    &engine,
                    &registry,
                    LoadInputs {
                        problem,
                        predictor,
                        utility,
                        utility_params,
                        dir,
                        params: &params,
                        checkpoint: &checkpoint,
                    },
                )
            })
            .join()
        })
        .map_err(|_| anyhow::anyhow!("loading the policy components panicked"))??;
        let utility = Arc::clone(&reload_context.utility);
        let predictor = Arc::clone(&reload_context.predictor);
        let reload = match dir {
            None => None,
            Some(dir) => Some(
                HotReload::watch(dir, reload_context)
                    .with_context(|| format!("hot reload of {}", dir.display()))?,
            ),
        };
        let pipeline = Arc::new(Pipeline::new(engine, utility, predictor));
        Ok((
            Self {
                pipeline,
                registry,
                params,
                checkpoint,
                reload,
            },
            notes,
        ))
    }

    /// The pipeline every policy of this set decides through.
    pub fn pipeline(&self) -> Arc<Pipeline> {
        Arc::clone(&self.pipeline)
    }

    /// The parameters every policy gets (the daemon's seed).
    pub fn params(&self) -> &[wit::Param] {
        &self.params
    }
}

/// What [`load_and_check`] needs besides the engine and the registry.
struct LoadInputs<'a> {
    problem: &'a Problem,
    predictor: Arc<dyn Predictor>,
    utility: &'a str,
    utility_params: &'a [(String, String)],
    dir: Option<&'a Path>,
    params: &'a [wit::Param],
    checkpoint: &'a Arc<Mutex<Option<Checkpoint>>>,
}

/// Loads the utility, the embedded policies and those of `dir`, and offers
/// each policy file that passes the self-check a hot reload makes; returns
/// the reload context and one note per component not loaded. Runs WASI
/// guests: never on an async runtime's thread.
fn load_and_check(
    engine: &Arc<PluginEngine>,
    registry: &Arc<Registry>,
    inputs: LoadInputs<'_>,
) -> Result<(ReloadContext, Vec<String>)> {
    let LoadInputs {
        problem,
        predictor,
        utility,
        utility_params,
        dir,
        params,
        checkpoint,
    } = inputs;
    let loaded = registry::resolve_utility(engine, utility, dir)
        .with_context(|| format!("policy.utility = '{utility}'"))?;
    let configured = loaded
        .configured(utility_params.to_vec())
        .map_err(|e| anyhow::anyhow!("policy.utility_params: {e}"))?;
    let utility = registry.utility_slot(Arc::new(configured));
    // Embedded policies (a NAME.wasm in `dir` overrides one), then the
    // other files of `dir`.
    let mut candidates: Vec<(String, Result<Loaded>)> = registry::embedded_names()
        .map(|name| (name.to_owned(), registry::resolve(engine, name, dir)))
        .collect();
    if let Some(dir) = dir {
        for path in registry::dir_plugins(dir)? {
            let loaded = registry::load_file(engine, &path);
            let name = match &loaded {
                Ok(l) => l.info().name.clone(),
                Err(_) => path.display().to_string(),
            };
            if !candidates.iter().any(|(n, _)| *n == name) {
                candidates.push((name, loaded));
            }
        }
    }
    let reload_context = ReloadContext {
        engine: Arc::clone(engine),
        registry: Arc::clone(registry),
        predictor,
        utility,
        checkpoint: Arc::clone(checkpoint),
        fallback: Checkpoint {
            problem: Arc::new(problem.clone()),
            state: setup::default_state(problem),
            params: params.to_vec(),
        },
    };
    let mut notes = Vec::new();
    for (name, loaded) in candidates {
        match loaded {
            Ok(Loaded::Policy(p)) => {
                let from_dir = matches!(p.info.origin, registry::Origin::File(_));
                let checked = if from_dir {
                    self_check(
                        &reload_context,
                        &Loaded::Policy(Arc::clone(&p)),
                        &reload_context.fallback,
                    )
                } else {
                    Ok(())
                };
                match checked {
                    Ok(()) => {
                        registry.policy_slot(p);
                    }
                    Err(why) => notes.push(format!(
                        "plugin {name} not loaded: self-check failed: {why}"
                    )),
                }
            }
            Ok(Loaded::Utility(_)) => {}
            Err(e) => notes.push(format!("plugin {name} not loaded: {e:#}")),
        }
    }
    Ok((reload_context, notes))
}

impl PolicySource for PluginPolicies {
    fn policies(&self) -> Vec<String> {
        self.registry.policies()
    }

    fn title(&self, policy: &str) -> Option<String> {
        self.registry.title(policy)
    }

    fn identity(&self, policy: &str) -> Option<ComponentIdentity> {
        self.registry.identity(policy)
    }

    fn propose(&self, policy: &str, call: &Call<'_>) -> Result<RawDecision, PluginFailure> {
        // A reload's self-check runs another policy: only the common parameters.
        *self.checkpoint.lock().unwrap_or_else(|p| p.into_inner()) = Some(Checkpoint {
            problem: Arc::clone(&call.inputs.problem),
            state: *call.state,
            params: self.params.clone(),
        });
        // Every declared parameter not given is passed at its declared default.
        let mut params = call.params.to_vec();
        if let Some(slot) = self.registry.find_policy(policy) {
            let info = &slot.load().info;
            let given: Vec<(String, String)> = params
                .iter()
                .map(|p| (p.key.clone(), p.value.clone()))
                .collect();
            let checked =
                setup::with_declared_params(info, given).map_err(PluginFailure::Misuse)?;
            params = checked
                .into_iter()
                .map(|(key, value)| wit::Param { key, value })
                .collect();
        }
        self.registry.propose(
            policy,
            &Call {
                params: &params,
                ..*call
            },
        )
    }

    fn reloads(&self) -> ReloadCounts {
        self.reload
            .as_ref()
            .map_or_else(ReloadCounts::default, HotReload::counts)
    }

    fn reload_events(&self) -> Vec<ReloadEvent> {
        self.reload
            .as_ref()
            .map(HotReload::events)
            .unwrap_or_default()
    }
}
