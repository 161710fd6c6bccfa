//! `mfsched plugins test`: a policy against many states (recorded by the
//! daemon or written as fixtures), several runs each. Every run is a tick of
//! the one tick runner (validated as the daemon validates it);
//! the runs of one state must agree although the clocks the guest sees differ
//! between them; and every decision must stay within a latency budget.
//! `plugins check` is the quick version: one state, two runs, real clocks.

use std::sync::Arc;
use std::time::Duration;

use mfsched_core::Predictor;
use mfsched_core::{GpuState, JointConfig, Problem};

use crate::engine::PluginEngine;
use crate::pipeline::{DecisionFailure, Pipeline, PolicySource};
use crate::registry::{LoadedPolicy, LoadedUtility, Slot};
use crate::reload::wit_params;
use crate::tick::Decider;

/// How much further ahead the guest's clocks read in each run than in the one
/// before: one hour, minute, second, millisecond, microsecond and nanosecond.
/// Every unit's count then moves by an odd number between consecutive runs, so
/// a policy that reads the parity (or any digit) of any unit sees it change;
/// real time carrying that unit over a boundary undoes the change for at most
/// one pair of runs in a test that lasts far less than the step, hence three
/// or more runs always expose such a policy.
pub const CLOCK_STEP: Duration = Duration::new(3661, 1_001_001);

/// The fewest runs per state: enough that a clock-reading policy cannot pass.
pub const MIN_RUNS: usize = 5;

/// One state to decide on: the problem (its `current` the configuration
/// running then) and the GPU state.
#[derive(Debug, Clone)]
pub struct Case {
    /// Where it came from, for people (`tick 12`, `line 3`).
    pub label: String,
    pub problem: Problem,
    pub state: GpuState,
}

/// What the harness runs and against what.
pub struct HarnessInputs {
    pub engine: Arc<PluginEngine>,
    pub predictor: Arc<dyn Predictor>,
    pub policy: Arc<LoadedPolicy>,
    pub utility: Arc<LoadedUtility>,
    /// Policy parameters, `seed` included, declared defaults filled in.
    pub params: Vec<(String, String)>,
    /// Runs per case (at least [`MIN_RUNS`] are made).
    pub runs: usize,
}

impl std::fmt::Debug for HarnessInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessInputs")
            .field("policy", &self.policy.info.name)
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

/// One run's answer: the validated configuration, or why there is none.
pub type RunAnswer = Result<JointConfig, DecisionFailure>;

/// Everything the runs of one case did.
#[derive(Debug, Clone)]
pub struct CaseReport {
    pub label: String,
    pub state: GpuState,
    /// One per run, in order (run k saw the clocks `k × CLOCK_STEP` ahead).
    pub answers: Vec<RunAnswer>,
    /// Latency of each run.
    pub latencies: Vec<Duration>,
}

/// What is wrong with one case; none for a case that passed.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// A run produced no valid decision.
    Invalid { run: usize, why: DecisionFailure },
    /// Runs disagreed (only reported when every run was valid).
    NotDeterministic { distinct: Vec<(JointConfig, usize)> },
    /// A run took longer than the budget.
    OverBudget { run: usize, latency: Duration },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Invalid { run, why } => write!(f, "run {}: {why}", run + 1),
            Finding::NotDeterministic { distinct } => {
                let answers: Vec<String> = distinct
                    .iter()
                    .map(|(c, n)| format!("{c:?} in {n} run(s)"))
                    .collect();
                write!(
                    f,
                    "not deterministic: the same seed gave {} while only the clocks it sees changed; \
                     draw randomness only from the `seed` parameter and read no clock",
                    answers.join(", ")
                )
            }
            Finding::OverBudget { run, latency } => write!(
                f,
                "run {}: {:.1} ms, over the latency budget",
                run + 1,
                latency.as_secs_f64() * 1e3
            ),
        }
    }
}

impl CaseReport {
    /// The first run's valid answer, if it had one.
    pub fn decision(&self) -> Option<&JointConfig> {
        self.answers.first().and_then(|a| a.as_ref().ok())
    }

    /// Whether every run was valid and all gave the same configuration.
    pub fn deterministic(&self) -> bool {
        self.distinct().is_some_and(|d| d.len() == 1)
    }

    /// The valid answers, each with how many runs gave it (first seen first);
    /// `None` when a run had none.
    fn distinct(&self) -> Option<Vec<(JointConfig, usize)>> {
        let mut distinct: Vec<(JointConfig, usize)> = Vec::new();
        for answer in &self.answers {
            let config = answer.as_ref().ok()?;
            match distinct.iter_mut().find(|(c, _)| c == config) {
                Some((_, n)) => *n += 1,
                None => distinct.push((config.clone(), 1)),
            }
        }
        Some(distinct)
    }

    /// Everything wrong with this case, against `budget`.
    pub fn findings(&self, budget: Duration) -> Vec<Finding> {
        let mut out: Vec<Finding> = self
            .answers
            .iter()
            .enumerate()
            .filter_map(|(run, a)| {
                a.as_ref().err().map(|why| Finding::Invalid {
                    run,
                    why: why.clone(),
                })
            })
            .collect();
        if let Some(distinct) = self.distinct().filter(|d| d.len() > 1) {
            out.push(Finding::NotDeterministic { distinct });
        }
        out.extend(
            self.latencies
                .iter()
                .enumerate()
                .filter(|(_, l)| **l > budget)
                .map(|(run, &latency)| Finding::OverBudget { run, latency }),
        );
        out
    }
}

/// Runs the policy `inputs.runs` times on every case, each run a tick of its
/// own with the guest's clocks `k × CLOCK_STEP` ahead in run k. Each run gets
/// the engine's deadline (a run past it is invalid); the budget is only
/// compared afterwards.
pub fn run(inputs: &HarnessInputs, cases: &[Case]) -> Vec<CaseReport> {
    let pipeline = Pipeline::new(
        Arc::clone(&inputs.engine),
        Arc::new(Slot::new(Arc::clone(&inputs.utility))),
        Arc::clone(&inputs.predictor),
    );
    let source: Arc<dyn PolicySource> = Arc::new(Slot::new(Arc::clone(&inputs.policy)));
    let params = wit_params(&inputs.params);
    let runs = inputs.runs.max(MIN_RUNS);
    cases
        .iter()
        .map(|case| {
            // Runs numbered from 1, so that what the policy prints is tagged
            // with the run as the daemon tags it with the tick.
            let mut decider = Decider::with_source(
                pipeline.clone(),
                Arc::clone(&source),
                &inputs.policy.info.name,
                params.clone(),
            )
            .numbered_from(1);
            let mut answers = Vec::with_capacity(runs);
            let mut latencies = Vec::with_capacity(runs);
            for k in 0..runs {
                decider.shift_clocks(CLOCK_STEP * k as u32);
                let active = decider.decide(&case.problem, &case.state).active;
                answers.push(active.result.map(|checked| checked.config));
                latencies.push(active.latency);
            }
            CaseReport {
                label: case.label.clone(),
                state: case.state,
                answers,
                latencies,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::PluginFailure;
    use mfsched_core::WorkloadLevel;

    fn report(answers: Vec<RunAnswer>, latency_ms: u64) -> CaseReport {
        CaseReport {
            label: "line 1".into(),
            state: GpuState {
                workload: WorkloadLevel::High,
                vram_used_mib: 1.0,
                utilization: 0.5,
                contention: None,
            },
            latencies: vec![Duration::from_millis(latency_ms); answers.len()],
            answers,
        }
    }

    #[test]
    fn agreeing_valid_runs_within_budget_have_no_findings() {
        let r = report(vec![Ok(vec![1, 2]); 5], 3);
        assert!(r.deterministic());
        assert_eq!(r.decision(), Some(&vec![1, 2]));
        assert!(r.findings(Duration::from_millis(10)).is_empty());
        let slow = r.findings(Duration::from_millis(2));
        assert_eq!(slow.len(), 5);
        assert!(slow[0].to_string().contains("over the latency budget"));
    }

    #[test]
    fn disagreeing_runs_are_counted_per_answer() {
        let r = report(
            vec![
                Ok(vec![1]),
                Ok(vec![2]),
                Ok(vec![1]),
                Ok(vec![1]),
                Ok(vec![2]),
            ],
            1,
        );
        assert!(!r.deterministic());
        let findings = r.findings(Duration::from_secs(1));
        assert_eq!(
            findings,
            vec![Finding::NotDeterministic {
                distinct: vec![(vec![1], 3), (vec![2], 2)]
            }]
        );
        assert!(
            findings[0]
                .to_string()
                .contains("[1] in 3 run(s), [2] in 2 run(s)")
        );
    }

    #[test]
    fn an_invalid_run_is_its_own_finding_not_a_disagreement() {
        let refused = DecisionFailure::Plugin(PluginFailure::Refused("no".into()));
        let r = report(vec![Ok(vec![1]), Err(refused.clone()), Ok(vec![1])], 1);
        assert!(!r.deterministic());
        assert_eq!(
            r.findings(Duration::from_secs(1)),
            vec![Finding::Invalid {
                run: 1,
                why: refused
            }]
        );
    }

    #[test]
    fn the_clock_step_moves_every_unit_by_an_odd_count() {
        let nanos = CLOCK_STEP.as_nanos();
        for unit in [
            3_600_000_000_000u128,
            60_000_000_000,
            1_000_000_000,
            1_000_000,
            1_000,
            1,
        ] {
            assert_eq!((nanos / unit) % 2, 1, "unit of {unit} ns");
        }
    }
}
