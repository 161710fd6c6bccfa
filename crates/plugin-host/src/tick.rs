//! The tick: what one decision means, in one place. Every caller that decides
//! (the daemon, `decide`, `ab`/`repro`/`demo` through the lab's closed loop,
//! `bench policies`, `replay --policy`, `plugins check` and `plugins test`, hot
//! reload's self-check of a new policy) runs ticks through a [`Decider`]:
//!
//! 1. the problem is prepared once for every policy of the tick (under
//!    [`OutOfReach::BestEffort`], with each floor that no configuration is
//!    predicted to reach at the state held at its model's reach, and under
//!    the candidate-aware field those no configuration is found to meet
//!    together held where one misses them least), and the tick's inputs are kept as the checkpoint hot reload self-checks a new
//!    component on;
//! 2. the active policy and the shadows are asked through the one
//!    [`Pipeline`] (proposal, validation with the floors, scoring) under one
//!    deadline, in parallel on threads of their own when there are several or
//!    when the caller asked for isolation (a native policy that hangs then
//!    costs a thread, never the tick);
//! 3. the last-valid rule: the active policy's configuration runs when valid,
//!    else the last valid one while still feasible, else the running one, and
//!    that kept configuration is predicted and scored too;
//! 4. the result is one [`TickOutcome`]; [`PolicyRecord`] is each policy's
//!    answer in the serialisable form the decision log, `/v1/history`, the
//!    metrics and `replay` read.

use std::borrow::Cow;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mfsched_core::{Field, GpuState, JointConfig, OutOfReach, PredictError, Predictor, Problem};
use serde::{Deserialize, Serialize};

use crate::bindings::wit;
use crate::context::CallInputs;
use crate::engine::PluginEngine;
use crate::failure::PluginFailure;
use crate::pipeline::{Checked, DecisionFailure, Pipeline, PolicySource, Verdict};
use crate::registry::{LoadedPolicy, LoadedUtility, Slot};

/// A policy's valid proposal for one tick, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub joint: JointConfig,
    /// The utility the host scored `joint` with (`None` when the utility failed).
    pub predicted_utility: Option<f64>,
    /// Predicted throughput per model (the model's unit), the predictions the
    /// floors were checked on.
    pub predicted_throughput: Option<Vec<f64>>,
}

/// Why a policy gave no usable decision. The kind is a metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// It did not answer within the tick's deadline.
    Deadline,
    /// It answered with an error or trapped.
    Error,
    /// It answered with a configuration the validation rejected.
    Invalid,
    /// No policy of that name is loaded.
    UnknownPolicy,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Deadline => "deadline",
            FailureKind::Error => "error",
            FailureKind::Invalid => "invalid",
            FailureKind::UnknownPolicy => "unknown-policy",
        }
    }

    fn of(failure: &DecisionFailure) -> Self {
        match failure {
            DecisionFailure::Plugin(PluginFailure::Deadline) => FailureKind::Deadline,
            DecisionFailure::Plugin(PluginFailure::Unknown(_)) => FailureKind::UnknownPolicy,
            DecisionFailure::Plugin(_) => FailureKind::Error,
            DecisionFailure::Rejected(_) => FailureKind::Invalid,
        }
    }
}

/// A failure as recorded: its kind and the whole reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

/// What a policy produced in a tick: a proposal or a failure with its reason.
pub type DecideOutcome = Result<Proposal, Failure>;

/// One policy's answer in one tick, as the decision log records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRecord {
    pub policy: String,
    pub outcome: DecideOutcome,
    pub latency_us: u64,
    /// SHA-256 of the component that answered (none for `hold`, or when the
    /// call failed before it answered): which build decided, whatever its name.
    pub component: Option<String>,
}

impl From<&Verdict> for PolicyRecord {
    fn from(verdict: &Verdict) -> Self {
        Self {
            policy: verdict.policy.clone(),
            outcome: match &verdict.result {
                Ok(checked) => Ok(Proposal {
                    joint: checked.config.clone(),
                    predicted_utility: checked.utility,
                    predicted_throughput: Some(
                        checked.predictions.iter().map(|&t| f64::from(t)).collect(),
                    ),
                }),
                Err(failure) => Err(Failure {
                    kind: FailureKind::of(failure),
                    message: failure.to_string(),
                }),
            },
            latency_us: verdict.latency.as_micros() as u64,
            component: verdict.from.as_ref().map(|c| c.identity.sha256.clone()),
        }
    }
}

/// One tick's result: every policy's verdict and what runs after it.
#[derive(Debug, Clone, PartialEq)]
pub struct TickOutcome {
    pub tick: u64,
    pub active: Verdict,
    /// Decided on the same state beside the active policy, never applied.
    pub shadows: Vec<Verdict>,
    /// What runs after the tick, with its predictions and utility: the active
    /// policy's configuration when valid, else the kept one.
    pub applied: Checked,
    /// The active policy failed, so the last valid configuration was kept.
    pub kept_last_valid: bool,
    /// The models whose floor no configuration was predicted to reach at the
    /// tick's state (or only within the reach band of the best), held at the
    /// band's edge for it, and under the candidate-aware field those whose
    /// floors no configuration was found to meet together
    /// ([`OutOfReach::BestEffort`]).
    pub floors_held: Vec<usize>,
    /// Each model's floor as this tick decided with it: the enforced one, or
    /// for a model in `floors_held` the value it was held at.
    pub floors: Vec<f64>,
    /// Wall time of the tick: preparation, every policy, the kept
    /// configuration's description.
    pub latency: Duration,
}

impl TickOutcome {
    /// Why the active policy's answer was not used (`None` when it was).
    pub fn failure(&self) -> Option<&DecisionFailure> {
        self.active.result.as_ref().err()
    }

    /// The models whose predicted throughput under the applied configuration
    /// is below their floor. A valid proposal never has one (the validation
    /// enforced the floors on these predictions); a kept configuration can,
    /// when the state moved under it.
    pub fn floors_missed(&self, problem: &Problem) -> Vec<usize> {
        crate::validate::floor_misses(problem, &self.applied.predictions)
    }
}

/// The inputs of the latest tick, which hot reload self-checks a new plugin on.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub problem: Arc<Problem>,
    pub state: GpuState,
    pub params: Vec<wit::Param>,
}

/// The one fallback rule: a failed tick keeps the last valid decision while it
/// is still feasible for the problem at hand, else the running configuration.
#[derive(Debug, Clone, Default, PartialEq)]
struct LastValid(Option<JointConfig>);

impl LastValid {
    fn accept(&mut self, config: &[u32]) {
        self.0 = Some(config.to_vec());
    }

    /// What a failed tick runs.
    fn fallback(&self, problem: &Problem) -> JointConfig {
        self.0
            .clone()
            .filter(|c| problem.check_feasible(c).is_ok())
            .unwrap_or_else(|| problem.current.clone())
    }
}

/// Runs ticks: asks the policies of a source through the pipeline, validating
/// every answer and falling back to the last valid decision.
pub struct Decider {
    pipeline: Pipeline,
    source: Arc<dyn PolicySource>,
    /// The policy [`Decider::decide`] asks.
    policy: String,
    params: Vec<wit::Param>,
    last_valid: LastValid,
    tick: u64,
    kept_ticks: u64,
    /// Every policy on a thread of its own, even alone.
    isolated: bool,
    /// What a tick does with a floor out of every configuration's reach.
    out_of_reach: OutOfReach,
    /// How far ahead of the host's the guests' clocks read.
    clock_shift: Duration,
    checkpoint: Arc<Mutex<Option<Checkpoint>>>,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("policy", &self.policy)
            .field("pipeline", &self.pipeline)
            .field("tick", &self.tick)
            .finish_non_exhaustive()
    }
}

impl Decider {
    /// A decider for the component in `policy` (swappable), scored by `utility`.
    pub fn new(
        engine: Arc<PluginEngine>,
        policy: Arc<Slot<LoadedPolicy>>,
        utility: Arc<Slot<LoadedUtility>>,
        predictor: Arc<dyn Predictor>,
        params: Vec<(String, String)>,
    ) -> Self {
        let name = policy.load().info.name.clone();
        Self::with_source(
            Pipeline::new(engine, utility, predictor),
            policy,
            &name,
            params
                .into_iter()
                .map(|(key, value)| wit::Param { key, value })
                .collect(),
        )
    }

    /// A decider for `policy` of any source, every policy of it given `params`.
    pub fn with_source(
        pipeline: Pipeline,
        source: Arc<dyn PolicySource>,
        policy: &str,
        params: Vec<wit::Param>,
    ) -> Self {
        Self {
            pipeline,
            source,
            policy: policy.to_owned(),
            params,
            last_valid: LastValid::default(),
            tick: 0,
            kept_ticks: 0,
            isolated: false,
            out_of_reach: OutOfReach::Keep,
            clock_shift: Duration::ZERO,
            checkpoint: Arc::new(Mutex::new(None)),
        }
    }

    /// Asks every policy on a thread of its own and waits for it no longer
    /// than the deadline, even when it is alone: for a caller that must not
    /// stall on a native policy that hangs (the daemon).
    pub fn isolated(mut self) -> Self {
        self.isolated = true;
        self
    }

    /// What the ticks do with a floor no configuration is predicted to reach
    /// (by default [`OutOfReach::Keep`]: every decision is refused for it).
    pub fn floors_out_of_reach(mut self, out_of_reach: OutOfReach) -> Self {
        self.out_of_reach = out_of_reach;
        self
    }

    /// Ticks are numbered from `first` on (the daemon continues its log's).
    pub fn numbered_from(mut self, first: u64) -> Self {
        self.tick = first;
        self
    }

    /// The guests of the next ticks read clocks `ahead` of the host's: `plugins
    /// test` decides each state under clocks that differ from run to run, so
    /// that a decision depending on the time shows.
    pub fn shift_clocks(&mut self, ahead: Duration) {
        self.clock_shift = ahead;
    }

    /// Keeps the latest tick's inputs in `checkpoint` (shared with hot reload).
    pub fn sharing_checkpoint(mut self, checkpoint: Arc<Mutex<Option<Checkpoint>>>) -> Self {
        self.checkpoint = checkpoint;
        self
    }

    /// The latest tick's inputs, shared with hot reload.
    pub fn checkpoint(&self) -> Arc<Mutex<Option<Checkpoint>>> {
        Arc::clone(&self.checkpoint)
    }

    /// Ticks that kept the previous decision.
    pub fn kept_ticks(&self) -> u64 {
        self.kept_ticks
    }

    /// One tick of this decider's policy alone, under the engine's per-call
    /// deadline.
    pub fn decide(&mut self, problem: &Problem, state: &GpuState) -> TickOutcome {
        let deadline = self.pipeline.engine().limits().deadline;
        let policy = self.policy.clone();
        self.tick(problem, state, &policy, &[], deadline)
    }

    /// One tick that must be done within `deadline`: `active` and each of
    /// `shadows` propose, the host validates and scores, and only the active
    /// policy's valid answer is applied.
    pub fn tick(
        &mut self,
        problem: &Problem,
        state: &GpuState,
        active: &str,
        shadows: &[String],
        deadline: Duration,
    ) -> TickOutcome {
        let tick = self.tick;
        self.tick += 1;
        let started = Instant::now();
        let (problem, floors_held) = self.within_reach(problem, state);
        let problem = problem.as_ref();
        let floors = problem.sla_floors.clone();
        let mut prepared = self.pipeline.prepare(problem);
        prepared.clock_shift = self.clock_shift;
        let inputs = Arc::new(prepared);
        *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(Checkpoint {
            problem: Arc::clone(&inputs.problem),
            state: *state,
            params: self.params.clone(),
        });
        let policies: Vec<&str> = std::iter::once(active)
            .chain(shadows.iter().map(String::as_str))
            .collect();
        let verdicts = if policies.len() == 1 && !self.isolated {
            vec![self.pipeline.evaluate(
                &inputs,
                self.source.as_ref(),
                active,
                state,
                &self.params,
                deadline,
            )]
        } else {
            self.ask_in_parallel(&inputs, &policies, *state, started + deadline)
        };
        let mut verdicts = verdicts.into_iter();
        let active = verdicts.next().expect("the active policy was asked");
        let shadows: Vec<Verdict> = verdicts.collect();
        for verdict in std::iter::once(&active).chain(&shadows) {
            verdict.output.log(&verdict.policy, tick);
        }
        let (applied, kept_last_valid) = match &active.result {
            Ok(checked) => {
                self.last_valid.accept(&checked.config);
                (checked.clone(), false)
            }
            Err(_) => {
                self.kept_ticks += 1;
                let kept = self.last_valid.fallback(problem);
                let described =
                    self.pipeline
                        .describe_kept(&inputs, state, &kept, started + deadline);
                (described, true)
            }
        };
        TickOutcome {
            tick,
            active,
            shadows,
            applied,
            kept_last_valid,
            floors_held,
            floors,
            latency: started.elapsed(),
        }
    }

    /// The problem this tick decides: `problem` itself, or under
    /// [`OutOfReach::BestEffort`] with each floor at the edge of its model's
    /// reach at `state` held there, or at the prediction of the configuration
    /// it runs within the keep band (`mfsched_core::floors_within_reach`), and
    /// those models. One table of predictions, the others' configurations
    /// as they run, predicted as validation predicts them (under the
    /// candidate-aware field, each model's configurations as joint
    /// candidates: the observed field's table would hold a floor at a reach
    /// it is then not checked against). Under the observed field a model's
    /// predictions follow its own configuration only, so each model's best
    /// meets every floor so held together; under the candidate-aware field
    /// one model's best can take another under its floor, and floors no
    /// configuration is found to meet together are held where one misses
    /// them least (`mfsched_core::floors_met_together`). A predictor that
    /// cannot give the predictions leaves the floors as they are (the
    /// policies meet the same failure and say so).
    fn within_reach<'p>(
        &self,
        problem: &'p Problem,
        state: &GpuState,
    ) -> (Cow<'p, Problem>, Vec<usize>) {
        if self.out_of_reach == OutOfReach::Keep {
            return (Cow::Borrowed(problem), Vec::new());
        }
        let predictor = self.pipeline.predictor();
        let offsets = mfsched_core::table_offsets(problem);
        let field = predictor.field();
        let table = match field {
            Field::Observed => predictor.predict_table(state, &problem.current),
            Field::CandidateAware => {
                one_model_at_a_time(predictor.as_ref(), problem, state, &offsets)
            }
        };
        let Ok(table) = table else {
            return (Cow::Borrowed(problem), Vec::new());
        };
        let (floors, mut held) = mfsched_core::floors_within_reach(
            &problem.sla_floors,
            &table,
            &offsets,
            &problem.current,
        );
        let floors = match field {
            Field::Observed => floors,
            Field::CandidateAware => {
                let together = mfsched_core::floors_met_together(problem, &floors, |candidates| {
                    predictor.predict_joint(state, &problem.current, candidates)
                });
                match together {
                    Ok((together, also)) => {
                        held.extend(also);
                        held.sort_unstable();
                        held.dedup();
                        together
                    }
                    Err(_) => floors,
                }
            }
        };
        if held.is_empty() {
            return (Cow::Borrowed(problem), held);
        }
        let mut within = problem.clone();
        within.sla_floors = floors;
        (Cow::Owned(within), held)
    }

    /// Asks each policy on a thread of its own and waits for each until
    /// `deadline_at`. One that overruns is a deadline failure; its thread is
    /// left to finish on its own (the plugin host interrupts guests and bounds
    /// host calls, so only a misbehaving native policy can hold one for long).
    fn ask_in_parallel(
        &self,
        inputs: &Arc<CallInputs>,
        policies: &[&str],
        state: GpuState,
        deadline_at: Instant,
    ) -> Vec<Verdict> {
        let budget = deadline_at.saturating_duration_since(Instant::now());
        let answers: Vec<_> = policies
            .iter()
            .map(|&policy| {
                let (tx, rx) = mpsc::sync_channel(1);
                let (pipeline, source) = (self.pipeline.clone(), Arc::clone(&self.source));
                let (inputs, params) = (Arc::clone(inputs), self.params.clone());
                let name = policy.to_owned();
                std::thread::Builder::new()
                    .name(format!("decide {}", crate::output::printable(policy, 40)))
                    .spawn(move || {
                        let verdict = pipeline.evaluate(
                            &inputs,
                            source.as_ref(),
                            &name,
                            &state,
                            &params,
                            budget,
                        );
                        // The tick may have stopped waiting: nobody to tell.
                        let _ = tx.send(verdict);
                    })
                    .map(|_| rx)
                    .map_err(|e| PluginFailure::Host(format!("cannot start its thread: {e}")))
            })
            .collect();
        policies
            .iter()
            .zip(answers)
            .map(|(&policy, answer)| {
                let waited = answer.and_then(|rx| {
                    rx.recv_timeout(deadline_at.saturating_duration_since(Instant::now()))
                        .map_err(|e| match e {
                            mpsc::RecvTimeoutError::Timeout => PluginFailure::Deadline,
                            mpsc::RecvTimeoutError::Disconnected => {
                                PluginFailure::Host("its decision panicked".to_owned())
                            }
                        })
                });
                waited.unwrap_or_else(|failure| Verdict::unanswered(policy, failure, budget))
            })
            .collect()
    }
}

/// [`Predictor::predict_table`]'s layout (model-major, every model's grid,
/// at `offsets`) from joint predictions: each model's configurations with the
/// others as they run in `problem.current`, as candidates of the predictor's
/// own field. Candidate k is the table's entry k, so model i's prediction in
/// it is the table's value.
fn one_model_at_a_time(
    predictor: &dyn Predictor,
    problem: &Problem,
    state: &GpuState,
    offsets: &[usize],
) -> Result<Vec<f32>, PredictError> {
    let space = problem.space();
    let n = problem.models.len();
    let mut candidates = Vec::with_capacity(offsets[n]);
    for (i, m) in problem.models.iter().enumerate() {
        let mut joint = problem.current.clone();
        for c in 0..m.grid_size() as u32 {
            joint[i] = c;
            let index = space.index(&joint).ok_or_else(|| {
                PredictError::Mismatch(format!(
                    "the running configuration {:?} is not in the joint space",
                    problem.current
                ))
            })?;
            candidates.push(index);
        }
    }
    let joint = predictor.predict_joint(state, &problem.current, &candidates)?;
    let joint = &joint;
    Ok((0..n)
        .flat_map(|i| (offsets[i]..offsets[i + 1]).map(move |k| joint[k * n + i]))
        .collect())
}
