//! The production decider: policies are the plugin host's Wasm components
//! (embedded ones and `NAME.wasm` files of the plugin directory, hot-reloaded
//! while the daemon runs), beside the built-in `hold`.

use anyhow::{Context, Result};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::decider::{
    BuiltinDecider, DecideOutcome, Decider, Failure, FailureKind, HOLD, Proposal,
};
use crate::domain::{GpuState, Problem};
use crate::plugin::bindings::wit;
use crate::plugin::registry::{self, Loaded, LoadedUtility, Registry, Slot};
use crate::plugin::{
    CallInputs, Checkpoint, CompileCache, HotReload, PluginEngine, PluginFailure, PluginLimits,
    ReloadContext, ReloadOutcome, run_policy, score_one, setup,
};
use crate::predict::Predictor;

/// The memory a policy instance may grow to.
const MEMORY_BYTES: usize = 256 << 20;

pub struct PluginDecider {
    engine: Arc<PluginEngine>,
    registry: Arc<Registry>,
    utility: Arc<Slot<LoadedUtility>>,
    predictor: Arc<dyn Predictor>,
    params: Vec<wit::Param>,
    /// Policies loaded at start; hot reload may add more.
    names: Vec<String>,
    /// The inputs of the latest decision, for reload self-checks.
    checkpoint: Arc<Mutex<Option<Checkpoint>>>,
    reload: Option<Mutex<HotReload>>,
}

impl std::fmt::Debug for PluginDecider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginDecider")
            .field("policies", &self.names)
            .field("hot_reload", &self.reload.is_some())
            .finish_non_exhaustive()
    }
}

impl PluginDecider {
    /// Loads every embedded policy and every `.wasm` policy of `dir` (a file that
    /// does not load is reported in the returned notes and skipped), and watches
    /// `dir` for hot reload. `deadline` bounds each policy call inside the guest.
    pub fn new(
        problem: &Problem,
        predictor: Arc<dyn Predictor>,
        utility: &str,
        dir: Option<&Path>,
        deadline: Duration,
        seed: u64,
    ) -> Result<(Self, Vec<String>)> {
        let engine = Arc::new(PluginEngine::new(
            PluginLimits {
                deadline,
                memory_bytes: MEMORY_BYTES,
            },
            CompileCache::Default,
        )?);
        let registry = Arc::new(Registry::default());
        let utility = registry.utility_slot(registry::resolve_utility(&engine, utility, dir)?);
        // Embedded policies (a NAME.wasm in `dir` overrides one), then the
        // other files of `dir`.
        let mut candidates: Vec<(String, Result<Loaded>)> = registry::embedded_names()
            .map(|name| (name.to_owned(), registry::resolve(&engine, name, dir)))
            .collect();
        if let Some(dir) = dir {
            for path in registry::dir_plugins(dir)? {
                let loaded = registry::load_file(&engine, &path);
                let name = match &loaded {
                    Ok(l) => l.info().name.clone(),
                    Err(_) => path.display().to_string(),
                };
                if !candidates.iter().any(|(n, _)| *n == name) {
                    candidates.push((name, loaded));
                }
            }
        }
        let mut names = Vec::new();
        let mut notes = Vec::new();
        for (name, loaded) in candidates {
            match loaded {
                Ok(Loaded::Policy(p)) => {
                    registry.policy_slot(p);
                    names.push(name);
                }
                Ok(Loaded::Utility(_)) => {}
                Err(e) => notes.push(format!("plugin {name} not loaded: {e:#}")),
            }
        }
        let params = vec![wit::Param {
            key: "seed".into(),
            value: seed.to_string(),
        }];
        let checkpoint = Arc::new(Mutex::new(None));
        let reload = match dir {
            None => None,
            Some(dir) => Some(Mutex::new(
                HotReload::watch(
                    dir,
                    ReloadContext {
                        engine: Arc::clone(&engine),
                        registry: Arc::clone(&registry),
                        predictor: Arc::clone(&predictor),
                        utility: Arc::clone(&utility),
                        checkpoint: Arc::clone(&checkpoint),
                        fallback: Checkpoint {
                            problem: problem.clone(),
                            state: setup::default_state(problem),
                            params: params.clone(),
                        },
                    },
                )
                .with_context(|| format!("hot reload of {}", dir.display()))?,
            )),
        };
        Ok((
            Self {
                engine,
                registry,
                utility,
                predictor,
                params,
                names,
                checkpoint,
                reload,
            },
            notes,
        ))
    }

    /// `hold`, with the predictions and utility of the running configuration,
    /// so that it compares with the plugin policies in A/B records.
    fn score_hold(&self, problem: &Problem, state: &GpuState, deadline: Duration) -> DecideOutcome {
        let mut proposal = BuiltinDecider.decide(HOLD, problem, state, deadline)?;
        if let Some(index) = problem.space().index(&proposal.joint) {
            let predictions = self.predictor.predict_joint(problem, state, &[index]);
            let inputs = CallInputs::new(
                Arc::clone(&self.engine),
                problem,
                Arc::clone(&self.predictor),
                self.utility.load(),
            );
            proposal.predicted_utility = score_one(&inputs, &proposal.joint, &predictions).ok();
            proposal.predicted_throughput =
                Some(predictions.iter().map(|&t| f64::from(t)).collect());
        }
        Ok(proposal)
    }

    fn reload_events(&self) -> Vec<crate::plugin::ReloadEvent> {
        self.reload
            .as_ref()
            .map(|r| r.lock().unwrap_or_else(|p| p.into_inner()).events())
            .unwrap_or_default()
    }
}

fn plugin_failure(e: PluginFailure) -> Failure {
    let kind = match e {
        PluginFailure::Deadline => FailureKind::Deadline,
        _ => FailureKind::Error,
    };
    Failure {
        kind,
        message: format!("the policy {e}"),
    }
}

impl Decider for PluginDecider {
    fn policies(&self) -> Vec<String> {
        let mut all = self.names.clone();
        for event in self.reload_events() {
            if let ReloadOutcome::Added { name, .. } = event.outcome
                && self.registry.find_policy(&name).is_some()
            {
                all.push(name);
            }
        }
        all.push(HOLD.to_owned());
        all.sort();
        all.dedup();
        all
    }

    fn decide(
        &self,
        policy: &str,
        problem: &Problem,
        state: &GpuState,
        deadline: Duration,
    ) -> DecideOutcome {
        if policy == HOLD {
            return self.score_hold(problem, state, deadline);
        }
        let Some(slot) = self.registry.find_policy(policy) else {
            return Err(Failure {
                kind: FailureKind::UnknownPolicy,
                message: format!("no policy '{policy}' is loaded"),
            });
        };
        let policy = slot.load();
        // Under the candidate-aware field, a policy that can ask for joint
        // predictions is told to.
        let mut params = self.params.clone();
        if let Some((key, value)) = setup::field_param(
            &policy.info,
            self.predictor.field(),
            params.iter().map(|p| &p.key),
        ) {
            params.push(wit::Param { key, value });
        }
        // A reload's self-check runs another policy: only the common parameters.
        *self.checkpoint.lock().unwrap_or_else(|p| p.into_inner()) = Some(Checkpoint {
            problem: problem.clone(),
            state: *state,
            params: self.params.clone(),
        });
        let inputs = CallInputs::new(
            Arc::clone(&self.engine),
            problem,
            Arc::clone(&self.predictor),
            self.utility.load(),
        );
        let raw = run_policy(&inputs, &policy, state, &params).map_err(plugin_failure)?;
        let predictions =
            crate::plugin::validate(problem, state, self.predictor.as_ref(), &raw.config).map_err(
                |r| Failure {
                    kind: FailureKind::Invalid,
                    message: r.to_string(),
                },
            )?;
        let predicted_utility = score_one(&inputs, &raw.config, &predictions).ok();
        Ok(Proposal {
            joint: raw.config,
            predicted_utility,
            predicted_throughput: Some(predictions.iter().map(|&t| f64::from(t)).collect()),
        })
    }

    fn reloads(&self) -> u64 {
        self.reload_events()
            .iter()
            .filter(|e| {
                matches!(
                    e.outcome,
                    ReloadOutcome::Swapped { .. } | ReloadOutcome::Added { .. }
                )
            })
            .count() as u64
    }
}
