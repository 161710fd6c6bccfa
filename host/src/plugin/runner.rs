//! Running a policy for one decision tick and keeping the last valid decision
//! when it fails: the decision path.

use super::bindings::wit;
use super::context::{CallInputs, CallStats, PolicyCtx, Scorer};
use super::engine::{PluginEngine, arm_deadline};
use super::failure::{PluginFailure, classify, describe};
use super::registry::{LoadedPolicy, LoadedUtility, Slot};
use super::validate::{Rejection, validate};
use crate::domain::{GpuState, JointConfig, Problem};
use crate::predict::Predictor;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::Store;

/// What a policy answered, before validation.
#[derive(Debug, Clone, PartialEq)]
pub struct RawDecision {
    pub config: JointConfig,
    pub candidates_evaluated: u64,
    pub stats: CallStats,
}

/// Runs `policy.decide` once in a fresh instance, under the engine's deadline
/// and memory limit.
pub fn run_policy(
    inputs: &CallInputs,
    policy: &LoadedPolicy,
    state: &GpuState,
    params: &[wit::Param],
) -> Result<RawDecision, PluginFailure> {
    let engine = &inputs.engine;
    let deadline_at = Instant::now() + engine.limits().deadline;
    let mut store = Store::new(engine.engine(), PolicyCtx::for_call(inputs, deadline_at));
    store.limiter(|ctx| &mut ctx.memory);
    arm_deadline(&mut store, deadline_at);
    let instance = policy
        .pre
        .instantiate(&mut store)
        .map_err(|e| PluginFailure::Instantiate(describe(&e)))?;
    let answer = instance.call_decide(
        &mut store,
        &inputs.wit_problem,
        wit::GpuState::from(state),
        params,
    );
    let stats = store.data().stats;
    match answer {
        Ok(Ok(d)) => Ok(RawDecision {
            config: d.config,
            candidates_evaluated: d.candidates_evaluated,
            stats,
        }),
        Ok(Err(why)) => Err(PluginFailure::Refused(why)),
        Err(e) => Err(classify(&e, store.data().memory.refused())),
    }
}

/// The utility of one configuration with its predictions, scored by the
/// utility component in a fresh instance.
pub fn score_one(
    inputs: &CallInputs,
    config: &[u32],
    predictions: &[f32],
) -> Result<f64, PluginFailure> {
    let index =
        inputs.problem.space().index(config).ok_or_else(|| {
            PluginFailure::Misuse(format!("{config:?} is not a joint configuration"))
        })?;
    let mut scorer = Scorer::new(Arc::clone(&inputs.engine), Arc::clone(&inputs.utility));
    let deadline_at = Instant::now() + inputs.engine.limits().deadline;
    let scores = scorer.score(&inputs.wit_problem, &[index], predictions, deadline_at)?;
    Ok(scores[0])
}

/// Why a tick kept the previous decision.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecisionFailure {
    #[error("the policy {0}")]
    Plugin(PluginFailure),
    #[error("the decision was rejected: {0}")]
    Rejected(Rejection),
}

/// Whether the policy's answer was used.
#[derive(Debug, Clone, PartialEq)]
pub enum DecisionOutcome {
    Accepted,
    /// The last valid decision (or, before any, the running configuration) was kept.
    Kept(DecisionFailure),
}

/// One tick's result.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionReport {
    pub tick: u64,
    /// Registry name of the policy that ran.
    pub policy: String,
    /// What that policy calls itself (tells two builds under one name apart).
    pub policy_title: String,
    pub outcome: DecisionOutcome,
    /// The configuration to run: the policy's when accepted, else the last valid one.
    pub config: JointConfig,
    /// Predicted throughput of each model in `config`.
    pub predictions: Vec<f32>,
    /// Predicted utility of `config` (`None` when the utility failed).
    pub utility: Option<f64>,
    pub candidates_evaluated: u64,
    /// Wall time of the tick: instantiation, search and validation.
    pub latency: Duration,
    pub stats: CallStats,
}

/// A tick that kept the previous decision, for the event log.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionEvent {
    pub tick: u64,
    pub policy: String,
    pub failure: DecisionFailure,
}

/// The inputs of the latest tick, which hot reload self-checks a new plugin on.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub problem: Problem,
    pub state: GpuState,
    pub params: Vec<wit::Param>,
}

/// Runs ticks with one policy and one utility (each swappable), validating
/// every answer and falling back to the last valid decision.
pub struct Decider {
    engine: Arc<PluginEngine>,
    policy: Arc<Slot<LoadedPolicy>>,
    utility: Arc<Slot<LoadedUtility>>,
    predictor: Arc<dyn Predictor>,
    params: Vec<wit::Param>,
    last_valid: Option<JointConfig>,
    tick: u64,
    events: Vec<DecisionEvent>,
    checkpoint: Arc<Mutex<Option<Checkpoint>>>,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("policy", &self.policy.load().info.name)
            .field("utility", &self.utility.load().info.name)
            .field("tick", &self.tick)
            .finish_non_exhaustive()
    }
}

impl Decider {
    pub fn new(
        engine: Arc<PluginEngine>,
        policy: Arc<Slot<LoadedPolicy>>,
        utility: Arc<Slot<LoadedUtility>>,
        predictor: Arc<dyn Predictor>,
        params: Vec<(String, String)>,
    ) -> Self {
        Self {
            engine,
            policy,
            utility,
            predictor,
            params: params
                .into_iter()
                .map(|(key, value)| wit::Param { key, value })
                .collect(),
            last_valid: None,
            tick: 0,
            events: Vec::new(),
            checkpoint: Arc::new(Mutex::new(None)),
        }
    }

    /// The latest tick's inputs, shared with hot reload.
    pub fn checkpoint(&self) -> Arc<Mutex<Option<Checkpoint>>> {
        Arc::clone(&self.checkpoint)
    }

    /// Ticks that kept the previous decision, with their reasons.
    pub fn events(&self) -> &[DecisionEvent] {
        &self.events
    }

    pub fn last_valid(&self) -> Option<&JointConfig> {
        self.last_valid.as_ref()
    }

    /// Runs one tick: the policy decides, the host validates, and the answer
    /// is used only if valid.
    pub fn decide(&mut self, problem: &Problem, state: &GpuState) -> DecisionReport {
        self.tick += 1;
        *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(Checkpoint {
            problem: problem.clone(),
            state: *state,
            params: self.params.clone(),
        });
        let policy = self.policy.load();
        let inputs = CallInputs::new(
            Arc::clone(&self.engine),
            problem,
            Arc::clone(&self.predictor),
            self.utility.load(),
        );
        let started = Instant::now();
        let answer = run_policy(&inputs, &policy, state, &self.params);
        let (stats, candidates_evaluated) = answer
            .as_ref()
            .map(|r| (r.stats, r.candidates_evaluated))
            .unwrap_or_default();
        let checked = answer.map_err(DecisionFailure::Plugin).and_then(|raw| {
            validate(problem, state, self.predictor.as_ref(), &raw.config)
                .map(|predictions| (raw.config, predictions))
                .map_err(DecisionFailure::Rejected)
        });
        let latency = started.elapsed();
        let (outcome, config, predictions) = match checked {
            Ok((config, predictions)) => {
                self.last_valid = Some(config.clone());
                (DecisionOutcome::Accepted, config, predictions)
            }
            Err(failure) => {
                self.events.push(DecisionEvent {
                    tick: self.tick,
                    policy: policy.info.name.clone(),
                    failure: failure.clone(),
                });
                let config = self
                    .last_valid
                    .clone()
                    .filter(|c| problem.check_feasible(c).is_ok())
                    .unwrap_or_else(|| problem.current.clone());
                let predictions = problem
                    .space()
                    .index(&config)
                    .map(|i| self.predictor.predict_joint(problem, state, &[i]))
                    .unwrap_or_default();
                (DecisionOutcome::Kept(failure), config, predictions)
            }
        };
        let utility = score_one(&inputs, &config, &predictions).ok();
        DecisionReport {
            tick: self.tick,
            policy: policy.info.name.clone(),
            policy_title: policy.info.title.clone(),
            outcome,
            config,
            predictions,
            utility,
            candidates_evaluated,
            latency,
            stats,
        }
    }
}
