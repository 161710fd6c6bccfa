//! The daemon's policies: the plugin host's Wasm components (embedded ones and
//! `NAME.wasm` files of the plugin directory, hot-reloaded while the daemon
//! runs) beside the built-in `hold`, all deciding through the one pipeline.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mfsched_core::Predictor;
use mfsched_core::Problem;
use mfsched_plugin_host::reload_self_check;
use mfsched_plugin_host::run_component;
use mfsched_plugin_host::wit;
use mfsched_plugin_host::{
    Answer, Call, Checkpoint, CompileCache, Component, HotReload, Pipeline, PluginEngine,
    PluginFailure, PluginLimits, PolicySource, ReloadContext, ReloadCounts, ReloadEvent,
};
use mfsched_plugin_host::{Loaded, Registry};
use mfsched_plugin_host::{
    Origin, default_state, dir_plugins, embedded_plugin_names, load_plugin_file, resolve_plugin,
    resolve_utility, with_declared_params,
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
    let utility_name = utility;
    let loaded = resolve_utility(engine, utility, dir)
        .with_context(|| format!("policy.utility = '{utility}'"))?;
    let configured = loaded
        .configured(utility_params.to_vec())
        .map_err(|e| anyhow::anyhow!("policy.utility_params: {e}"))?;
    let configured = Arc::new(configured);
    let utility = registry.utility_slot(Arc::clone(&configured));
    // Embedded policies (a NAME.wasm in `dir` overrides one), then the
    // other files of `dir`.
    let mut candidates: Vec<(String, Result<Loaded>)> = embedded_plugin_names()
        .map(|name| (name.to_owned(), resolve_plugin(engine, name, dir)))
        .collect();
    if let Some(dir) = dir {
        for path in dir_plugins(dir)? {
            let loaded = load_plugin_file(engine, &path);
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
            state: default_state(problem),
            params: params.to_vec(),
        },
    };
    // The utility first, with its parameters: a utility that cannot score
    // would fail every policy's self-check below, each blamed in its name.
    if let Err(why) = reload_self_check(
        &reload_context,
        &Loaded::Utility(configured),
        &reload_context.fallback,
    ) {
        let given: Vec<String> = utility_params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if given.is_empty() {
            bail!(
                "policy.utility = '{utility_name}' cannot score the running configuration: {why}"
            );
        }
        bail!(
            "policy.utility_params ({}): utility '{utility_name}' cannot score with them: {why}",
            given.join(" ")
        );
    }
    let mut notes = Vec::new();
    for (name, loaded) in candidates {
        match loaded {
            Ok(Loaded::Policy(p)) => {
                let from_dir = matches!(p.info.origin, Origin::File(_));
                let checked = if from_dir {
                    reload_self_check(
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

impl PluginPolicies {
    /// The components loaded, by name: what each declares about itself.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// The inputs of the latest tick, which hot reload self-checks on: the
    /// tick's decider keeps them.
    pub fn checkpoint(&self) -> Arc<Mutex<Option<Checkpoint>>> {
        Arc::clone(&self.checkpoint)
    }

    /// How many times its policies were reloaded from disk, and how many
    /// reloads were rejected.
    pub fn reloads(&self) -> ReloadCounts {
        self.reload
            .as_ref()
            .map_or_else(ReloadCounts::default, HotReload::counts)
    }

    /// The newest reload attempts (bounded), oldest first.
    pub fn reload_events(&self) -> Vec<ReloadEvent> {
        self.reload
            .as_ref()
            .map(HotReload::events)
            .unwrap_or_default()
    }
}

impl PolicySource for PluginPolicies {
    fn policies(&self) -> Vec<String> {
        self.registry.policies()
    }

    fn propose(&self, policy: &str, call: &Call<'_>) -> Answer {
        let Some(slot) = self.registry.find_policy(policy) else {
            return self.registry.propose(policy, call);
        };
        // Every declared parameter not given is passed at its declared default.
        let loaded = slot.load();
        let given: Vec<(String, String)> = call
            .params
            .iter()
            .map(|p| (p.key.clone(), p.value.clone()))
            .collect();
        match with_declared_params(&loaded.info, given) {
            Ok(checked) => {
                let params: Vec<wit::Param> = checked
                    .into_iter()
                    .map(|(key, value)| wit::Param { key, value })
                    .collect();
                run_component(
                    &loaded,
                    &Call {
                        params: &params,
                        ..*call
                    },
                )
            }
            Err(why) => Answer {
                from: Some(Component::of(&loaded)),
                result: Err(PluginFailure::Misuse(why)),
            },
        }
    }
}
