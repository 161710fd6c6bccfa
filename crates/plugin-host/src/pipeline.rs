//! The decision pipeline, the one every caller drives (`decide`, `ab`, `repro`,
//! `demo`, `bench`, `plugins check`, hot-reload self-checks and the daemon):
//!
//! 1. the problem is converted to its WIT form once ([`Pipeline::prepare`]);
//! 2. a policy proposes, under one deadline that covers every host call it makes
//!    ([`PolicySource::propose`]: a Wasm component, or a native policy such as
//!    `hold`);
//! 3. the proposal is validated once (arity, ranges, VRAM, floors), with the one
//!    prediction of the chosen configuration that the report also uses: under
//!    the observed field, the rows of the table the host served the policy for
//!    the decision's state, else a joint prediction;
//! 4. it is scored once: the sum of its terms when the utility gave terms for
//!    that table (its contract makes them equal), else by the utility instance
//!    the policy already used when there is one, under the same deadline;
//! 5. a [`Decider`] keeps the last valid decision when the policy fails.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mfsched_core::domain::{GpuState, JointConfig, Problem};
use mfsched_core::predict::{Field, Predictor};
use wasmtime::Store;

use crate::bindings::wit;
use crate::context::{CallInputs, CallStats, FeasibleCache, PolicyCtx, Scorer, ServedTable};
use crate::engine::{PluginEngine, arm_deadline};
use crate::failure::{PluginFailure, classify, describe};
use crate::output::{MESSAGE_BYTES, OutputCapture, PluginOutput, printable};
use crate::precheck::{ComponentIdentity, ComponentMetadata};

/// Bytes of stdout, and as many of stderr, a policy may print in one call; the
/// rest is counted and dropped.
pub const OUTPUT_BYTES_PER_CALL: usize = 64 << 10;
use crate::registry::{LoadedPolicy, LoadedUtility, Registry, Slot};
use crate::validate::{Rejection, validate};

/// What a policy answered, before validation.
#[derive(Debug)]
pub struct RawDecision {
    pub config: JointConfig,
    pub candidates_evaluated: u64,
    pub stats: CallStats,
    /// The utility instance the policy scored with, reused for the final score.
    pub scorer: Option<Scorer>,
    /// The table served for the decision's state, and its terms.
    pub served: Option<ServedTable>,
}

impl RawDecision {
    /// A native policy's answer: a configuration and nothing else.
    pub fn native(config: JointConfig) -> Self {
        Self {
            config,
            candidates_evaluated: 0,
            stats: CallStats::default(),
            scorer: None,
            served: None,
        }
    }
}

/// One policy call: the prepared problem, the state, the parameters and the
/// instant by which every host call it makes must be done.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub inputs: &'a CallInputs,
    pub state: &'a GpuState,
    pub params: &'a [wit::Param],
    pub deadline_at: Instant,
    /// Where the plugin's stdout and stderr go (capped).
    pub output: &'a OutputCapture,
}

/// Where proposals come from: Wasm policy components, native policies (`hold`),
/// or a test's stand-ins. Implementations are called from several threads at
/// once (the daemon asks the active and shadow policies in parallel).
pub trait PolicySource: Send + Sync {
    /// The policies it can propose with, sorted.
    fn policies(&self) -> Vec<String>;

    /// What `policy` calls itself (its title), if it is known.
    fn title(&self, policy: &str) -> Option<String> {
        self.policies()
            .iter()
            .any(|p| p == policy)
            .then(|| policy.to_owned())
    }

    /// Asks `policy` for a configuration. Must return by `call.deadline_at`
    /// (the plugin host interrupts guests and bounds host calls).
    fn propose(&self, policy: &str, call: &Call<'_>) -> Result<RawDecision, PluginFailure>;

    /// The component behind `policy` now (`None` for a native one).
    fn identity(&self, _policy: &str) -> Option<ComponentIdentity> {
        None
    }

    /// SHA-256 of the component behind `policy` now (`None` for a native one).
    fn component(&self, policy: &str) -> Option<String> {
        self.identity(policy).map(|c| c.sha256)
    }

    /// What the component behind `policy` declares about itself (name,
    /// version, authors); `None` for a native one.
    fn metadata(&self, policy: &str) -> Option<ComponentMetadata> {
        self.identity(policy).map(|c| c.metadata)
    }

    /// How many times its policies were reloaded from disk (hot reload), and
    /// how many reloads were rejected.
    fn reloads(&self) -> crate::reload::ReloadCounts {
        crate::reload::ReloadCounts::default()
    }

    /// The newest reload attempts (bounded), oldest first: which file, and
    /// what became of it.
    fn reload_events(&self) -> Vec<crate::reload::ReloadEvent> {
        Vec::new()
    }
}

/// `hold` keeps the running configuration: the safe default while no search
/// policy is configured, and the "do nothing" baseline in comparisons.
pub const HOLD: &str = "hold";

/// The native policies, available without any plugin: [`HOLD`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Builtin;

impl PolicySource for Builtin {
    fn policies(&self) -> Vec<String> {
        vec![HOLD.to_owned()]
    }

    fn propose(&self, policy: &str, call: &Call<'_>) -> Result<RawDecision, PluginFailure> {
        match policy {
            HOLD => Ok(RawDecision::native(call.inputs.problem.current.clone())),
            other => Err(PluginFailure::Unknown(other.to_owned())),
        }
    }
}

/// Runs `policy.decide` once in a fresh instance, until `call.deadline_at`.
pub fn run_component(policy: &LoadedPolicy, call: &Call<'_>) -> Result<RawDecision, PluginFailure> {
    let inputs = call.inputs;
    let engine = &inputs.engine;
    let mut store = Store::new(
        engine.engine(),
        PolicyCtx::for_call(inputs, call.state, call.deadline_at, call.output),
    );
    store.limiter(|ctx| &mut ctx.memory);
    arm_deadline(&mut store, call.deadline_at);
    let instance = policy
        .pre
        .instantiate(&mut store)
        .map_err(|e| PluginFailure::Instantiate(describe(&e)))?;
    let answer = instance.call_decide(
        &mut store,
        &inputs.wit_problem,
        wit::GpuState::from(call.state),
        call.params,
    );
    let stats = store.data().stats;
    match answer {
        Ok(Ok(d)) => {
            let (scorer, served) = store.data_mut().take_served();
            Ok(RawDecision {
                config: d.config,
                candidates_evaluated: d.candidates_evaluated,
                stats,
                scorer,
                served,
            })
        }
        Ok(Err(why)) => Err(PluginFailure::Refused(printable(&why, MESSAGE_BYTES))),
        Err(e) => Err(classify(&e, store.data().memory.refused())),
    }
}

/// One component in a swappable slot, under its own name.
impl PolicySource for Slot<LoadedPolicy> {
    fn policies(&self) -> Vec<String> {
        vec![self.load().info.name.clone()]
    }

    fn title(&self, _policy: &str) -> Option<String> {
        Some(self.load().info.title.clone())
    }

    fn identity(&self, _policy: &str) -> Option<ComponentIdentity> {
        Some(self.load().info.identity())
    }

    fn propose(&self, _policy: &str, call: &Call<'_>) -> Result<RawDecision, PluginFailure> {
        run_component(&self.load(), call)
    }
}

/// Every policy component a registry holds, by name, beside [`Builtin`].
impl PolicySource for Registry {
    fn policies(&self) -> Vec<String> {
        let mut all = self.policy_names();
        all.push(HOLD.to_owned());
        all.sort();
        all.dedup();
        all
    }

    fn title(&self, policy: &str) -> Option<String> {
        match self.find_policy(policy) {
            Some(slot) => Some(slot.load().info.title.clone()),
            None => (policy == HOLD).then(|| HOLD.to_owned()),
        }
    }

    fn identity(&self, policy: &str) -> Option<ComponentIdentity> {
        self.find_policy(policy)
            .map(|slot| slot.load().info.identity())
    }

    fn propose(&self, policy: &str, call: &Call<'_>) -> Result<RawDecision, PluginFailure> {
        match self.find_policy(policy) {
            Some(slot) => run_component(&slot.load(), call),
            None => Builtin.propose(policy, call),
        }
    }
}

/// Bytes of a trapped guest's stderr (its end) its trap is reported with.
const TRAP_STDERR_BYTES: usize = 512;

/// A trap says little by itself (`wasm trap: unreachable`); what the guest
/// printed last usually says why: a Rust panic message, the end of a Python
/// traceback, the error a JavaScript engine printed before it aborted. Other
/// failures are reported as they are.
fn with_stderr_tail(failure: PluginFailure, capture: &OutputCapture) -> PluginFailure {
    match failure {
        PluginFailure::Trap(why) => {
            let tail = capture.stderr.tail(TRAP_STDERR_BYTES);
            if tail.is_empty() {
                PluginFailure::Trap(why)
            } else {
                PluginFailure::Trap(printable(
                    &format!("{why}; its stderr ended with: {tail}"),
                    MESSAGE_BYTES,
                ))
            }
        }
        other => other,
    }
}

/// Why a policy's answer was not used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecisionFailure {
    #[error("the policy {0}")]
    Plugin(PluginFailure),
    #[error("the decision was rejected: {0}")]
    Rejected(Rejection),
}

/// A validated configuration: its predictions (one per model, the ones the
/// floors were checked on) and its utility (`None` when the utility failed or
/// the deadline had passed).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub config: JointConfig,
    pub predictions: Vec<f32>,
    pub utility: Option<f64>,
}

/// One policy's answer on one problem, validated and scored: no fallback yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub policy: String,
    pub result: Result<Checked, DecisionFailure>,
    pub candidates_evaluated: u64,
    pub stats: CallStats,
    /// Proposal, validation and scoring.
    pub latency: Duration,
    /// What the policy printed (capped), for the caller to log with the tick.
    pub output: PluginOutput,
    /// The component asked (`None` for a native policy).
    pub component: Option<ComponentIdentity>,
}

/// The predictor and utility every policy is served, and the engine they run on.
/// A clone is the same pipeline (its caches shared), for another decider.
#[derive(Clone)]
pub struct Pipeline {
    engine: Arc<PluginEngine>,
    utility: Arc<Slot<LoadedUtility>>,
    predictor: Arc<dyn Predictor>,
    feasible: Arc<FeasibleCache>,
    /// The last problem prepared, in both forms: the ticks of one scenario
    /// differ only in floors, costs and the running configuration, so the next
    /// tick's are these updated in place rather than copied and converted
    /// afresh (a few hundred allocations).
    prepared: Arc<Mutex<Option<Prepared>>>,
}

/// A problem in its domain and WIT forms.
type Prepared = (Arc<Problem>, Arc<wit::Problem>);

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("utility", &self.utility.load().info.name)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    pub fn new(
        engine: Arc<PluginEngine>,
        utility: Arc<Slot<LoadedUtility>>,
        predictor: Arc<dyn Predictor>,
    ) -> Self {
        Self {
            engine,
            utility,
            predictor,
            feasible: Arc::default(),
            prepared: Arc::default(),
        }
    }

    pub fn engine(&self) -> &Arc<PluginEngine> {
        &self.engine
    }

    pub fn predictor(&self) -> &Arc<dyn Predictor> {
        &self.predictor
    }

    pub fn utility(&self) -> &Arc<Slot<LoadedUtility>> {
        &self.utility
    }

    /// The problem as every policy of a tick sees it (converted to WIT once).
    pub fn prepare(&self, problem: &Problem) -> CallInputs {
        let (problem, wit_problem) = self.forms(problem);
        CallInputs {
            problem,
            wit_problem,
            predictor: Arc::clone(&self.predictor),
            utility: self.utility.load(),
            engine: Arc::clone(&self.engine),
            feasible: Arc::clone(&self.feasible),
            clock_shift: Duration::ZERO,
        }
    }

    /// `problem` shared, in its domain and WIT forms: the last tick's updated
    /// in place when only per-tick fields changed (copied first if a caller
    /// still holds them), else made afresh.
    fn forms(&self, problem: &Problem) -> Prepared {
        let mut last = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((domain, wit_problem)) = last.as_mut()
            && domain.card == problem.card
            && domain.models == problem.models
        {
            if **domain != *problem {
                let d = Arc::make_mut(domain);
                d.sla_floors.clone_from(&problem.sla_floors);
                d.reconfig = problem.reconfig;
                d.throughput_ranges.clone_from(&problem.throughput_ranges);
                d.current.clone_from(&problem.current);
                crate::bindings::set_per_tick(Arc::make_mut(wit_problem), problem);
            }
            // A field added to `Problem` and not updated above fails this
            // and is converted afresh: never a stale form.
            if **domain == *problem {
                return (Arc::clone(domain), Arc::clone(wit_problem));
            }
        }
        let forms = (
            Arc::new(problem.clone()),
            Arc::new(wit::Problem::from(problem)),
        );
        *last = Some((Arc::clone(&forms.0), Arc::clone(&forms.1)));
        forms
    }

    /// Asks `policy` of `source`, validates its answer and scores it, all
    /// within `deadline` from now.
    pub fn evaluate(
        &self,
        inputs: &CallInputs,
        source: &dyn PolicySource,
        policy: &str,
        state: &GpuState,
        params: &[wit::Param],
        deadline: Duration,
    ) -> Verdict {
        let started = Instant::now();
        let capture = OutputCapture::new(OUTPUT_BYTES_PER_CALL);
        let call = Call {
            inputs,
            state,
            params,
            deadline_at: started + deadline,
            output: &capture,
        };
        let component = source.identity(policy);
        let (result, candidates_evaluated, stats) = match source.propose(policy, &call) {
            // An answer after the deadline failed it, whatever it says: a guest
            // is interrupted there, but a native policy can only be timed, and
            // whether its late answer counted must not depend on when the
            // caller got round to reading it.
            Ok(raw) if Instant::now() > call.deadline_at => (
                Err(DecisionFailure::Plugin(PluginFailure::Deadline)),
                raw.candidates_evaluated,
                raw.stats,
            ),
            Ok(raw) => {
                let (candidates_evaluated, stats) = (raw.candidates_evaluated, raw.stats);
                let result = self
                    .check(inputs, state, raw, call.deadline_at)
                    .map_err(DecisionFailure::Rejected);
                (result, candidates_evaluated, stats)
            }
            Err(failure) => (
                Err(DecisionFailure::Plugin(with_stderr_tail(failure, &capture))),
                0,
                CallStats::default(),
            ),
        };
        Verdict {
            policy: policy.to_owned(),
            result,
            candidates_evaluated,
            stats,
            latency: started.elapsed(),
            output: capture.take(),
            component,
        }
    }

    /// Validates the answer (the one validation) and scores it, by
    /// `deadline_at`. Under the observed field, with the table served for this
    /// state, its rows are the predictions and, when the utility gave terms
    /// for it, their sum is the utility; otherwise the predictor predicts the
    /// answer and the policy's utility instance (or a fresh one) scores it.
    fn check(
        &self,
        inputs: &CallInputs,
        state: &GpuState,
        raw: RawDecision,
        deadline_at: Instant,
    ) -> Result<Checked, Rejection> {
        let config = &raw.config;
        let problem = &inputs.problem;
        // The table was served for this call's state (`predict_table` keeps
        // no other).
        let served = raw
            .served
            .as_ref()
            .filter(|_| self.predictor.field() == Field::Observed);
        let predictions = validate(problem, config, |index| match served {
            Some(served) => served
                .predictions(problem, config)
                .ok_or_else(|| "the served table does not fit the problem".to_owned()),
            None => self
                .predictor
                .predict_joint(problem, state, &[index])
                .map_err(|e| e.to_string()),
        })?;
        let utility = match served.and_then(|s| s.utility(problem, config)) {
            Some(sum) => Some(sum),
            None => self
                .score(inputs, config, &predictions, raw.scorer, deadline_at)
                .ok(),
        };
        Ok(Checked {
            config: config.to_vec(),
            predictions,
            utility,
        })
    }

    /// The predictions and utility of a configuration that is kept, not chosen
    /// (the last valid one): what a report shows for a tick that fell back.
    pub fn describe_kept(
        &self,
        inputs: &CallInputs,
        state: &GpuState,
        config: &[u32],
        deadline_at: Instant,
    ) -> Checked {
        let predictions = inputs
            .problem
            .space()
            .index(config)
            .and_then(|i| {
                self.predictor
                    .predict_joint(&inputs.problem, state, &[i])
                    .ok()
            })
            .unwrap_or_default();
        let utility = self
            .score(inputs, config, &predictions, None, deadline_at)
            .ok();
        Checked {
            config: config.to_vec(),
            predictions,
            utility,
        }
    }

    /// The utility of one configuration with its predictions, by `deadline_at`.
    pub fn score(
        &self,
        inputs: &CallInputs,
        config: &[u32],
        predictions: &[f32],
        scorer: Option<Scorer>,
        deadline_at: Instant,
    ) -> Result<f64, PluginFailure> {
        let index = inputs.problem.space().index(config).ok_or_else(|| {
            PluginFailure::Misuse(format!("{config:?} is not a joint configuration"))
        })?;
        let mut scorer = scorer
            .unwrap_or_else(|| Scorer::new(Arc::clone(&self.engine), Arc::clone(&inputs.utility)));
        Ok(scorer.score(&inputs.wit_problem, &[index], predictions, deadline_at)?[0])
    }
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
    pub problem: Arc<Problem>,
    pub state: GpuState,
    pub params: Vec<wit::Param>,
}

/// The one fallback rule: a failed tick keeps the last valid decision while it
/// is still feasible for the problem at hand, else the running configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LastValid(Option<JointConfig>);

impl LastValid {
    pub fn get(&self) -> Option<&JointConfig> {
        self.0.as_ref()
    }

    pub fn accept(&mut self, config: &[u32]) {
        self.0 = Some(config.to_vec());
    }

    /// What a failed tick runs.
    pub fn fallback(&self, problem: &Problem) -> JointConfig {
        self.0
            .clone()
            .filter(|c| problem.check_feasible(c).is_ok())
            .unwrap_or_else(|| problem.current.clone())
    }
}

/// Runs ticks with one policy (of a source) and the pipeline's utility,
/// validating every answer and falling back to the last valid decision.
pub struct Decider {
    pipeline: Pipeline,
    source: Arc<dyn PolicySource>,
    policy: String,
    params: Vec<wit::Param>,
    last_valid: LastValid,
    tick: u64,
    events: Vec<DecisionEvent>,
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
            params,
        )
    }

    /// A decider for `policy` of any source.
    pub fn with_source(
        pipeline: Pipeline,
        source: Arc<dyn PolicySource>,
        policy: &str,
        params: Vec<(String, String)>,
    ) -> Self {
        Self {
            pipeline,
            source,
            policy: policy.to_owned(),
            params: params
                .into_iter()
                .map(|(key, value)| wit::Param { key, value })
                .collect(),
            last_valid: LastValid::default(),
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
        self.last_valid.get()
    }

    /// One tick under the engine's per-call deadline.
    pub fn decide(&mut self, problem: &Problem, state: &GpuState) -> DecisionReport {
        let deadline = self.pipeline.engine.limits().deadline;
        self.decide_within(problem, state, deadline)
    }

    /// One tick that must be done within `deadline`: the policy proposes, the
    /// host validates and scores, and the answer is used only if valid.
    pub fn decide_within(
        &mut self,
        problem: &Problem,
        state: &GpuState,
        deadline: Duration,
    ) -> DecisionReport {
        self.tick += 1;
        let started = Instant::now();
        let inputs = self.pipeline.prepare(problem);
        *self.checkpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(Checkpoint {
            problem: Arc::clone(&inputs.problem),
            state: *state,
            params: self.params.clone(),
        });
        let verdict = self.pipeline.evaluate(
            &inputs,
            self.source.as_ref(),
            &self.policy,
            state,
            &self.params,
            deadline,
        );
        verdict.output.log(&self.policy, self.tick);
        let (outcome, checked) = match verdict.result {
            Ok(checked) => {
                self.last_valid.accept(&checked.config);
                (DecisionOutcome::Accepted, checked)
            }
            Err(failure) => {
                self.events.push(DecisionEvent {
                    tick: self.tick,
                    policy: self.policy.clone(),
                    failure: failure.clone(),
                });
                let kept = self.last_valid.fallback(problem);
                let checked =
                    self.pipeline
                        .describe_kept(&inputs, state, &kept, started + deadline);
                (DecisionOutcome::Kept(failure), checked)
            }
        };
        DecisionReport {
            tick: self.tick,
            policy: self.policy.clone(),
            policy_title: self
                .source
                .title(&self.policy)
                .unwrap_or_else(|| self.policy.clone()),
            outcome,
            config: checked.config,
            predictions: checked.predictions,
            utility: checked.utility,
            candidates_evaluated: verdict.candidates_evaluated,
            latency: started.elapsed(),
            stats: verdict.stats,
        }
    }
}
