//! What a plugin's store holds, and the host side of the WIT interfaces:
//! `surrogate` (served by the predictor) and `objective` (served by the active
//! utility component, in a store of its own).

use super::bindings::policy::mfsched::scheduler::{objective, space, surrogate, types};
use super::bindings::utility::Utility;
use super::bindings::{state_from_policy, wit};
use super::engine::{PluginEngine, arm_deadline};
use super::failure::{PluginFailure, classify, describe};
use super::output::OutputCapture;
use super::registry::LoadedUtility;
use mfsched_core::{GpuState, Problem};
use mfsched_core::{InSpace, Predictor, table_offsets};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::{
    HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

/// A locked-down WASI context: no preopened directories, no environment, no
/// arguments, no network, no stdin; the plugin's stdout and stderr go to the
/// call's capture (capped, logged tagged by the caller), or nowhere when the host
/// only asks a plugin to describe itself or a utility to score. Its clocks
/// read `clock_shift` ahead of the host's (zero: the host's own clocks).
fn locked_down_wasi(capture: Option<&OutputCapture>, clock_shift: Duration) -> WasiCtx {
    let capture = capture.cloned().unwrap_or_else(|| OutputCapture::new(0));
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(capture.stdout)
        .stderr(capture.stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    if !clock_shift.is_zero() {
        builder
            .wall_clock(ShiftedWallClock(clock_shift))
            .monotonic_clock(ShiftedMonotonicClock(clock_shift));
    }
    builder.build()
}

/// The wall clock a guest sees when its clocks are shifted: the host's, ahead
/// by a fixed duration (time still passes, so a guest waiting on it ends).
struct ShiftedWallClock(Duration);

impl HostWallClock for ShiftedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            + self.0
    }
}

/// The monotonic clock a guest sees when its clocks are shifted: nanoseconds
/// since the first shifted reading in this process, plus the shift.
struct ShiftedMonotonicClock(Duration);

impl HostMonotonicClock for ShiftedMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let since = ORIGIN.get_or_init(Instant::now).elapsed() + self.0;
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Caps each linear memory of an instance and remembers that the cap was hit,
/// so a trap can be reported as what it is.
#[derive(Debug)]
pub struct MemoryCap {
    max_bytes: usize,
    /// The size asked for when the cap refused a growth.
    refused: Option<usize>,
}

impl MemoryCap {
    fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            refused: None,
        }
    }

    pub fn refused(&self) -> Option<usize> {
        self.refused
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _: usize,
        desired: usize,
        _: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.refused = Some(desired);
            // An error traps the guest at the `memory.grow` itself (like
            // `trap_on_grow_failure`), instead of letting it limp on.
            wasmtime::bail!(
                "memory limit: the plugin asked for {} MiB, the limit is {} MiB",
                desired.div_ceil(1 << 20),
                self.max_bytes >> 20
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _: usize,
        desired: usize,
        _: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far beyond any real plugin.
        Ok(desired <= 1_000_000)
    }
}

/// Time and volume spent in host calls during one `decide`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallStats {
    /// In the predictor (`predict-table` and `predict`).
    pub predict: Duration,
    /// Predictions served (table entries plus N per candidate).
    pub predictions: u64,
    /// In the utility component (`evaluate`), including its instantiation.
    pub evaluate: Duration,
    /// Candidates scored through `evaluate`.
    pub evaluated: u64,
}

/// The store data of a policy instance.
pub struct PolicyCtx {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) memory: MemoryCap,
    /// The `decide` call in progress; `None` while the host only asks the
    /// plugin to describe itself (then the host interfaces refuse service).
    call: Option<CallState>,
    pub(super) stats: CallStats,
}

/// What a policy call is about: shared, read-only inputs.
#[derive(Clone)]
pub struct CallInputs {
    pub problem: Arc<Problem>,
    pub wit_problem: Arc<wit::Problem>,
    pub predictor: Arc<dyn Predictor>,
    pub utility: Arc<LoadedUtility>,
    pub engine: Arc<PluginEngine>,
    /// Where `space.feasible` is answered from (shared by every call of a
    /// pipeline).
    pub feasible: Arc<FeasibleCache>,
    /// How far ahead of the host's clocks the policy's WASI clocks read: zero
    /// in production; `plugins test` varies it between runs so that a policy
    /// whose answer depends on the time is caught.
    pub clock_shift: Duration,
}

/// The memory-feasible set of the last problem shape a pipeline was asked
/// about: problems of one scenario share it tick after tick (only `current`
/// and floors change), so it is enumerated once, on the first policy that
/// asks, not per tick and not inside every policy.
#[derive(Debug, Default)]
pub struct FeasibleCache(Mutex<Option<FeasibleSet>>);

#[derive(Debug)]
struct FeasibleSet {
    /// The card's memory, then every model's grid size and configurations' memory.
    key: Vec<u32>,
    /// `None` when there are more than one call may carry.
    indices: Option<Arc<Vec<u64>>>,
}

impl FeasibleCache {
    /// `problem`'s memory-feasible joint indices, ascending; `None` when
    /// there are more than `cap`.
    pub fn get(&self, problem: &Problem, cap: usize) -> Option<Arc<Vec<u64>>> {
        let mut key = vec![problem.card.vram_mib];
        for m in &problem.models {
            key.push(m.configs.len() as u32);
            key.extend(m.configs.iter().map(|c| c.vram_mib));
        }
        let mut cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match cached.as_ref() {
            Some(set) if set.key == key => set.indices.clone(),
            _ => {
                let indices = problem.feasible_indices_up_to(cap).map(Arc::new);
                *cached = Some(FeasibleSet {
                    key,
                    indices: indices.clone(),
                });
                indices
            }
        }
    }
}

impl std::fmt::Debug for CallInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallInputs")
            .field("utility", &self.utility.info.name)
            .finish_non_exhaustive()
    }
}

struct CallState {
    /// The state the decision is made for.
    state: GpuState,
    problem: Arc<Problem>,
    wit_problem: Arc<wit::Problem>,
    predictor: Arc<dyn Predictor>,
    feasible: Arc<FeasibleCache>,
    scorer: Scorer,
    deadline_at: Instant,
    max_candidates: usize,
    /// The table served for `state` (the latest, when asked again), and its terms.
    served: Option<ServedTable>,
}

/// The prediction table the host served a policy for the decision's own state,
/// and the terms the utility gave for exactly that table. Under the observed
/// field they are what the answer is validated and scored with: the table's
/// rows are the joint predictions (`predict-table` is exact there), and the
/// utility's contract makes a feasible candidate's score the sum of its
/// terms. So the host neither predicts nor scores the answer again.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedTable {
    pub table: Vec<f32>,
    pub terms: Option<Vec<f64>>,
}

impl ServedTable {
    /// Model i's prediction in `config`, one per model.
    pub fn predictions(&self, problem: &Problem, config: &[u32]) -> Option<Vec<f32>> {
        entries(problem, &self.table, config)
    }

    /// The sum of `config`'s terms in model order (the utility's own score of
    /// a feasible candidate, bit for bit when it sums its terms from zero).
    pub fn utility(&self, problem: &Problem, config: &[u32]) -> Option<f64> {
        let terms = entries(problem, self.terms.as_ref()?, config)?;
        Some(terms.iter().fold(0.0, |sum, t| sum + t))
    }
}

/// `config`'s entry for each model in a buffer laid out like a
/// `predict-table` answer; `None` when the buffer is not of the problem's.
fn entries<T: Copy>(problem: &Problem, buffer: &[T], config: &[u32]) -> Option<Vec<T>> {
    let offsets = table_offsets(problem);
    if offsets.last() != Some(&buffer.len()) {
        return None;
    }
    config
        .iter()
        .zip(&offsets)
        .map(|(&c, &offset)| buffer.get(offset + c as usize).copied())
        .collect()
}

/// Candidates predicted between two looks at the deadline: a few tens of
/// milliseconds of CPU work (MeanField, N = 5), more under the candidate-aware
/// field. Slicing changes no result: every candidate is predicted on its own.
pub const PREDICT_SLICE: usize = 8192;

impl CallState {
    /// Refuses a batch over the per-call cap before any work is done for it.
    fn check_batch(&self, what: &str, candidates: usize) -> wasmtime::Result<()> {
        if candidates > self.max_candidates {
            return Err(wasmtime::Error::new(PluginFailure::Misuse(format!(
                "{what}: {candidates} candidates in one call, the most is {}",
                self.max_candidates
            ))));
        }
        Ok(())
    }
}

impl std::fmt::Debug for PolicyCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyCtx")
            .field("memory", &self.memory)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl PolicyCtx {
    /// For a `decide` call that must finish by `deadline_at`.
    pub(super) fn for_call(
        inputs: &CallInputs,
        state: &GpuState,
        deadline_at: Instant,
        capture: &OutputCapture,
    ) -> Self {
        let mut ctx = Self::describing(&inputs.engine);
        ctx.wasi = locked_down_wasi(Some(capture), inputs.clock_shift);
        ctx.call = Some(CallState {
            state: *state,
            problem: Arc::clone(&inputs.problem),
            wit_problem: Arc::clone(&inputs.wit_problem),
            predictor: Arc::clone(&inputs.predictor),
            feasible: Arc::clone(&inputs.feasible),
            scorer: Scorer::new(Arc::clone(&inputs.engine), Arc::clone(&inputs.utility)),
            deadline_at,
            max_candidates: inputs.engine.limits().max_candidates_per_call,
            served: None,
        });
        ctx
    }

    /// For asking a plugin its name and parameters only.
    pub(super) fn describing(engine: &PluginEngine) -> Self {
        Self {
            wasi: locked_down_wasi(None, Duration::ZERO),
            table: ResourceTable::new(),
            memory: MemoryCap::new(engine.limits().memory_bytes),
            call: None,
            stats: CallStats::default(),
        }
    }

    /// The utility instance the call scored with, for the host to reuse, and
    /// the table (and terms) it served for the decision's state.
    pub(crate) fn take_served(&mut self) -> (Option<Scorer>, Option<ServedTable>) {
        self.call
            .take()
            .map_or((None, None), |c| (Some(c.scorer), c.served))
    }

    fn call(&mut self, what: &str) -> wasmtime::Result<&mut CallState> {
        let Some(call) = self.call.as_mut() else {
            wasmtime::bail!("{what} is only served during decide");
        };
        if Instant::now() >= call.deadline_at {
            return Err(wasmtime::Error::new(PluginFailure::Deadline));
        }
        Ok(call)
    }
}

impl WasiView for PolicyCtx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for PolicyCtx {}

impl surrogate::Host for PolicyCtx {
    fn prediction_field(&mut self) -> wasmtime::Result<types::Field> {
        Ok(self.call("prediction-field")?.predictor.field().into())
    }

    fn predict_table(&mut self, state: types::GpuState) -> wasmtime::Result<Vec<f32>> {
        let call = self.call("predict-table")?;
        let started = Instant::now();
        let state = state_from_policy(state, &call.state);
        let table = call
            .predictor
            .predict_table(&state, &call.problem.current)
            .map_err(|e| wasmtime::Error::new(PluginFailure::Predict(e)))?;
        if state == call.state {
            call.served = Some(ServedTable {
                table: table.clone(),
                terms: None,
            });
        }
        self.stats.predict += started.elapsed();
        self.stats.predictions += table.len() as u64;
        Ok(table)
    }

    /// Joint predictions, computed in slices with the deadline checked between
    /// them: the host's work for a call ends within one slice of the deadline.
    fn predict(
        &mut self,
        state: types::GpuState,
        candidates: Vec<u64>,
    ) -> wasmtime::Result<Vec<f32>> {
        let call = self.call("predict")?;
        call.check_batch("predict", candidates.len())?;
        let failed = |e| wasmtime::Error::new(PluginFailure::Predict(e));
        // Checked once, before any slice is predicted.
        let checked = InSpace::check(call.predictor.joint_size(), &candidates).map_err(failed)?;
        let started = Instant::now();
        let state = state_from_policy(state, &call.state);
        let mut out = Vec::with_capacity(candidates.len() * call.problem.models.len());
        for slice in checked.chunks(PREDICT_SLICE) {
            if Instant::now() >= call.deadline_at {
                return Err(wasmtime::Error::new(PluginFailure::Deadline));
            }
            out.extend(
                call.predictor
                    .predict_in_space(&state, &call.problem.current, slice)
                    .map_err(failed)?,
            );
        }
        self.stats.predict += started.elapsed();
        self.stats.predictions += out.len() as u64;
        Ok(out)
    }
}

impl space::Host for PolicyCtx {
    fn feasible(&mut self, limit: u64) -> wasmtime::Result<Option<Vec<u64>>> {
        let call = self.call("feasible")?;
        Ok(call
            .feasible
            .get(&call.problem, call.max_candidates)
            .filter(|set| set.len() as u64 <= limit)
            .map(|set| set.to_vec()))
    }
}

impl objective::Host for PolicyCtx {
    fn evaluate(
        &mut self,
        candidates: Vec<u64>,
        predictions: Vec<f32>,
    ) -> wasmtime::Result<Vec<f64>> {
        let call = self.call("evaluate")?;
        call.check_batch("evaluate", candidates.len())?;
        let started = Instant::now();
        let scores = call
            .scorer
            .score(
                &call.wit_problem,
                &candidates,
                &predictions,
                call.deadline_at,
            )
            .map_err(wasmtime::Error::new)?;
        self.stats.evaluate += started.elapsed();
        self.stats.evaluated += candidates.len() as u64;
        Ok(scores)
    }

    fn terms(&mut self, table: Vec<f32>) -> wasmtime::Result<Option<Vec<f64>>> {
        let call = self.call("terms")?;
        let started = Instant::now();
        let terms = call
            .scorer
            .terms(&call.wit_problem, &table, call.deadline_at)
            .map_err(wasmtime::Error::new)?;
        if let Some(served) = call.served.as_mut().filter(|s| s.table == table) {
            served.terms.clone_from(&terms);
        }
        self.stats.evaluate += started.elapsed();
        Ok(terms)
    }
}

/// The store data of a utility instance.
pub struct UtilityCtx {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryCap,
}

impl WasiView for UtilityCtx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl std::fmt::Debug for UtilityCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UtilityCtx")
            .field("memory", &self.memory)
            .finish_non_exhaustive()
    }
}

impl UtilityCtx {
    pub(super) fn new(engine: &PluginEngine) -> Self {
        Self {
            wasi: locked_down_wasi(None, Duration::ZERO),
            table: ResourceTable::new(),
            memory: MemoryCap::new(engine.limits().memory_bytes),
        }
    }

    pub(super) fn memory_mut(&mut self) -> &mut MemoryCap {
        &mut self.memory
    }
}

impl types::Host for UtilityCtx {}

/// A utility component instantiated on first use and reused for the rest of
/// one `decide` (instantiation is cheap, but GA calls `evaluate` per generation).
pub struct Scorer {
    engine: Arc<PluginEngine>,
    utility: Arc<LoadedUtility>,
    live: Option<(Store<UtilityCtx>, Utility)>,
}

impl std::fmt::Debug for Scorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scorer")
            .field("utility", &self.utility.info.name)
            .field("live", &self.live.is_some())
            .finish_non_exhaustive()
    }
}

impl Scorer {
    pub fn new(engine: Arc<PluginEngine>, utility: Arc<LoadedUtility>) -> Self {
        Self {
            engine,
            utility,
            live: None,
        }
    }

    /// The live instance, instantiated on first use, armed for `deadline_at`.
    fn instance(
        &mut self,
        deadline_at: Instant,
    ) -> Result<(&mut Store<UtilityCtx>, &mut Utility), PluginFailure> {
        let (store, utility) = match &mut self.live {
            Some(live) => live,
            empty => {
                let mut store = Store::new(self.engine.engine(), UtilityCtx::new(&self.engine));
                store.limiter(|ctx| &mut ctx.memory);
                arm_deadline(&mut store, deadline_at);
                let utility = self.utility.pre.instantiate(&mut store).map_err(|e| {
                    PluginFailure::Utility(format!("{}: {}", self.utility.info.name, describe(&e)))
                })?;
                empty.insert((store, utility))
            }
        };
        arm_deadline(store, deadline_at);
        Ok((store, utility))
    }

    /// The utility's per-model terms for a prediction table, checked: one
    /// value per local configuration, none NaN or +∞; `None` when the utility
    /// says it is not additive.
    pub fn terms(
        &mut self,
        problem: &wit::Problem,
        table: &[f32],
        deadline_at: Instant,
    ) -> Result<Option<Vec<f64>>, PluginFailure> {
        let rows: usize = problem.models.iter().map(|m| m.configs.len()).sum();
        if table.len() != rows {
            return Err(PluginFailure::Misuse(format!(
                "terms: a table of {} predictions, the problem's has {rows} (one per local configuration)",
                table.len()
            )));
        }
        let loaded = Arc::clone(&self.utility);
        let name = &loaded.info.name;
        let (store, utility) = self.instance(deadline_at)?;
        let terms = utility
            .call_terms(&mut *store, problem, &loaded.params, table)
            .map_err(|e| utility_failure(name, &e, store))?
            .map_err(|why| refused(name, "terms", &why))?;
        let Some(terms) = terms else {
            return Ok(None);
        };
        if terms.len() != rows {
            return Err(PluginFailure::Utility(format!(
                "{name} returned {} terms for {rows} local configurations",
                terms.len()
            )));
        }
        if let Some(i) = terms.iter().position(|t| t.is_nan() || *t == f64::INFINITY) {
            return Err(PluginFailure::Utility(format!(
                "{name} gave local configuration {i} the term {} (terms are finite or −∞)",
                terms[i]
            )));
        }
        Ok(Some(terms))
    }

    /// Scores a batch, checking the utility's answer has one finite-or-−∞
    /// value per candidate. Runs under what is left of `deadline_at`.
    pub fn score(
        &mut self,
        problem: &wit::Problem,
        candidates: &[u64],
        predictions: &[f32],
        deadline_at: Instant,
    ) -> Result<Vec<f64>, PluginFailure> {
        let n = problem.models.len();
        if predictions.len() != candidates.len() * n {
            return Err(PluginFailure::Misuse(format!(
                "evaluate: {} predictions for {} candidates of {n} models (expected {})",
                predictions.len(),
                candidates.len(),
                candidates.len() * n
            )));
        }
        let loaded = Arc::clone(&self.utility);
        let name = &loaded.info.name;
        let (store, utility) = self.instance(deadline_at)?;
        let scores = utility
            .call_score(
                &mut *store,
                problem,
                &loaded.params,
                candidates,
                predictions,
            )
            .map_err(|e| utility_failure(name, &e, store))?
            .map_err(|why| refused(name, "score", &why))?;
        if scores.len() != candidates.len() {
            return Err(PluginFailure::Utility(format!(
                "{name} returned {} scores for {} candidates",
                scores.len(),
                candidates.len()
            )));
        }
        if let Some(i) = scores.iter().position(|s| s.is_nan()) {
            return Err(PluginFailure::Utility(format!(
                "{name} scored candidate {} as NaN",
                candidates[i]
            )));
        }
        Ok(scores)
    }
}

/// A utility's refusal (an error string from `score` or `terms`, e.g. a
/// parameter's value it cannot use), escaped and bounded like its output.
fn refused(name: &str, call: &str, why: &str) -> PluginFailure {
    PluginFailure::Utility(format!(
        "{name}: `{call}` refused: {}",
        super::output::printable(why, super::output::MESSAGE_BYTES)
    ))
}

/// What a failed call into the utility component was: a trap is the
/// utility's fault and says so with its name; a deadline or memory cap stays
/// what it is.
fn utility_failure(name: &str, e: &wasmtime::Error, store: &Store<UtilityCtx>) -> PluginFailure {
    match classify(e, store.data().memory.refused()) {
        PluginFailure::Trap(why) => PluginFailure::Utility(format!("{name}: {why}")),
        other => other,
    }
}
