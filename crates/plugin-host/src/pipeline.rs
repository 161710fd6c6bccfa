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
//! 5. the tick ([`crate::tick`]) asks every policy of a tick through it and
//!    keeps the last valid decision when the active one fails.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mfsched_core::{Field, PredictError, Predictor};
use mfsched_core::{GpuState, JointConfig, Problem};
use wasmtime::Store;

use crate::bindings::wit;
use crate::context::{CallInputs, CallStats, FeasibleCache, PolicyCtx, Scorer, ServedTable};
use crate::engine::{PluginEngine, arm_deadline};
use crate::failure::{PluginFailure, classify, describe};
use crate::output::{MESSAGE_BYTES, OutputCapture, PluginOutput, printable};
use crate::precheck::ComponentIdentity;
use crate::registry::{LoadedPolicy, LoadedUtility, Registry, Slot};
use crate::validate::{Rejection, validate};

/// Bytes of stdout, and as many of stderr, a policy may print in one call; the
/// rest is counted and dropped.
pub const OUTPUT_BYTES_PER_CALL: usize = 64 << 10;

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
/// or a test's stand-ins. It lists and proposes, nothing else: what a component
/// declares and how often it was reloaded are kept where it is loaded (the
/// [`Registry`], [`crate::HotReload`]). Implementations are called from several
/// threads at once (a tick asks the active and shadow policies in parallel).
pub trait PolicySource: Send + Sync {
    /// The policies it can propose with, sorted.
    fn policies(&self) -> Vec<String>;

    /// Asks `policy` for a configuration. Must return by `call.deadline_at`
    /// (the plugin host interrupts guests and bounds host calls).
    fn propose(&self, policy: &str, call: &Call<'_>) -> Answer;
}

/// A policy's answer to one call, and who gave it.
#[derive(Debug)]
pub struct Answer {
    /// The component behind the policy at the call (`None` for a native one).
    pub from: Option<Component>,
    pub result: Result<RawDecision, PluginFailure>,
}

impl Answer {
    /// A native policy's answer.
    pub fn native(result: Result<RawDecision, PluginFailure>) -> Self {
        Self { from: None, result }
    }
}

/// Which build answered, whatever its registry name: what it calls itself and
/// its identity (SHA-256 and declared metadata).
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub title: String,
    pub identity: ComponentIdentity,
}

impl Component {
    pub fn of(policy: &LoadedPolicy) -> Self {
        Self {
            title: policy.info.title.clone(),
            identity: policy.info.identity(),
        }
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

    fn propose(&self, policy: &str, call: &Call<'_>) -> Answer {
        Answer::native(match policy {
            HOLD => Ok(RawDecision::native(call.inputs.problem.current.clone())),
            other => Err(PluginFailure::Unknown(other.to_owned())),
        })
    }
}

/// Runs `policy.decide` once in a fresh instance, until `call.deadline_at`.
pub fn run_component(policy: &LoadedPolicy, call: &Call<'_>) -> Answer {
    Answer {
        from: Some(Component::of(policy)),
        result: decide_once(policy, call),
    }
}

fn decide_once(policy: &LoadedPolicy, call: &Call<'_>) -> Result<RawDecision, PluginFailure> {
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

    fn propose(&self, _policy: &str, call: &Call<'_>) -> Answer {
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

    fn propose(&self, policy: &str, call: &Call<'_>) -> Answer {
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
    #[error("{}", .0.of_the_policy())]
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
    /// The component that answered (`None` for a native policy).
    pub from: Option<Component>,
}

impl Verdict {
    /// A policy that gave no answer the caller could wait for.
    pub fn unanswered(policy: &str, failure: PluginFailure, latency: Duration) -> Self {
        Self {
            policy: policy.to_owned(),
            result: Err(DecisionFailure::Plugin(failure)),
            candidates_evaluated: 0,
            stats: CallStats::default(),
            latency,
            output: PluginOutput::default(),
            from: None,
        }
    }

    /// What the policy calls itself: its component's title, else its name.
    pub fn title(&self) -> &str {
        self.from.as_ref().map_or(&self.policy, |c| &c.title)
    }
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
                d.reconfig.clone_from(&problem.reconfig);
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
        let Answer { from, result } = source.propose(policy, &call);
        let (result, candidates_evaluated, stats) = match result {
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
            from,
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
            Some(served) => served.predictions(problem, config).ok_or_else(|| {
                PredictError::Mismatch("the served table does not fit the problem".to_owned())
            }),
            None => self
                .predictor
                .predict_joint(state, &problem.current, &[index]),
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
                    .predict_joint(state, &inputs.problem.current, &[i])
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
