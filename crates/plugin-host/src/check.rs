//! `mfsched plugins check`: everything a plugin author needs to know about one
//! component before shipping it, as a list of findings. Loading covers the
//! WIT version, the world, linking in the sandbox and the self-description;
//! then the component runs on a real problem and its answer goes through the
//! same validation the decision path applies.

use super::bindings::{PACKAGE, wit};
use super::context::Scorer;
use super::engine::PluginEngine;
use super::registry::{self, Loaded, LoadedPolicy, LoadedUtility, Origin, Registry};
use super::tick::{Decider, TickOutcome};
use super::version::WitVersion;
use mfsched_core::{GpuState, Problem};
use mfsched_core::{Predictor, error_chain};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// One thing found about the component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub ok: bool,
    pub text: String,
}

impl Finding {
    fn ok(text: impl Into<String>) -> Self {
        Self {
            ok: true,
            text: text.into(),
        }
    }

    fn fail(text: impl Into<String>) -> Self {
        Self {
            ok: false,
            text: text.into(),
        }
    }
}

/// What the component is checked on.
pub struct CheckInputs<'a> {
    pub engine: Arc<PluginEngine>,
    pub predictor: Arc<dyn Predictor>,
    /// The problem, ready for plugins (ranges and floors filled in).
    pub problem: &'a Problem,
    /// Its name, for the findings.
    pub problem_name: &'a str,
    pub state: GpuState,
    /// The checked component's parameters (`seed` included, which only a
    /// policy gets).
    pub params: Vec<(String, String)>,
}

impl std::fmt::Debug for CheckInputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckInputs")
            .field("problem", &self.problem_name)
            .field("state", &self.state)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

/// Checks the component in `path`; stops at the first finding that makes the
/// rest meaningless (cannot read, cannot load).
pub fn check_file(inputs: &CheckInputs<'_>, path: &Path) -> Vec<Finding> {
    // The same name rule and capped, non-blocking read as every other load.
    let read = registry::file_name(path)
        .and_then(|name| Ok((name.to_owned(), super::precheck::read_component_file(path)?)));
    let (name, bytes) = match read {
        Ok(r) => r,
        Err(e) => return vec![Finding::fail(format!("{e:#}"))],
    };
    let started = Instant::now();
    let loaded = match registry::load(
        &inputs.engine,
        &name,
        Origin::File(path.to_path_buf()),
        &bytes,
    ) {
        Ok(l) => l,
        Err(e) => return vec![Finding::fail(format!("load: {e:#}"))],
    };
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let info = loaded.info();
    let host = WitVersion::host();
    let mut findings = vec![
        Finding::ok(format!(
            "{} world of {PACKAGE}@{} (this host is {PACKAGE}@{host} and accepts {})",
            info.world,
            info.wit_version,
            host.accepted_range()
        )),
        Finding::ok(format!(
            "compiled, linked and instantiated in the sandbox in {load_ms:.0} ms ({} KiB); it calls itself \"{}\"",
            bytes.len() / 1024,
            info.title
        )),
    ];
    match loaded {
        Loaded::Policy(policy) => check_policy(inputs, policy, &mut findings),
        Loaded::Utility(utility) => check_utility(inputs, utility, &mut findings),
    }
    findings
}

/// The finding on a component's parameter schema: every name once, listed
/// with its default and, where `--param` gave one, the value it is checked
/// with (`none` says what an empty schema means for its world).
fn schema_finding(
    params: &[registry::ParamInfo],
    none: &str,
    given: &[(String, String)],
) -> Finding {
    let mut names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    let duplicate = names.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
    if let Some(d) = duplicate {
        return Finding::fail(format!(
            "`parameters` lists `{d}` twice: each name must be unique"
        ));
    }
    let listed: Vec<String> = params
        .iter()
        .map(|p| match given.iter().find(|(k, _)| *k == p.name) {
            Some((_, v)) => format!("{}={} (checked with {v})", p.name, p.default_value),
            None => format!("{}={}", p.name, p.default_value),
        })
        .collect();
    Finding::ok(format!(
        "parameters: {}",
        if listed.is_empty() {
            none.to_string()
        } else {
            listed.join(", ")
        }
    ))
}

fn check_policy(inputs: &CheckInputs<'_>, policy: Arc<LoadedPolicy>, out: &mut Vec<Finding>) {
    out.push(schema_finding(
        &policy.info.params,
        "none besides seed",
        &inputs.params,
    ));
    let utility = match registry::resolve_utility(&inputs.engine, "utility", None) {
        Ok(u) => u,
        Err(e) => {
            out.push(Finding::fail(format!("the embedded utility: {e:#}")));
            return;
        }
    };
    // The parameters given must be ones the policy declares; the rest run at
    // their declared defaults, passed explicitly.
    let params = match super::setup::with_declared_params(&policy.info, inputs.params.clone()) {
        Ok(p) => p,
        Err(e) => {
            out.push(Finding::fail(e));
            return;
        }
    };
    let first = run_once(inputs, &policy, &utility, &params);
    match first.failure() {
        None => out.push(Finding::ok(format!(
            "decide on {}: {:?} accepted (VRAM {} of {} MiB, every SLA floor met), utility {}, {} candidates scored, {:.1} ms of the {} ms deadline",
            inputs.problem_name,
            first.applied.config,
            inputs.problem.vram_mib(&first.applied.config),
            inputs.problem.card.vram_mib,
            first
                .applied
                .utility
                .map_or("unavailable".to_string(), |u| format!("{u:.4}")),
            first.active.candidates_evaluated,
            first.latency.as_secs_f64() * 1e3,
            inputs.engine.limits().deadline.as_millis(),
        ))),
        Some(why) => {
            out.push(Finding::fail(format!(
                "decide on {}: {why}; the host would keep the running configuration",
                inputs.problem_name
            )));
            return;
        }
    }
    out.push(gap_to_optimum(inputs, &utility, first.applied.utility));
    let second = run_once(inputs, &policy, &utility, &params);
    if second.failure().is_none() && second.applied.config == first.applied.config {
        out.push(Finding::ok(
            "deterministic: a second run with the same seed gave the same decision",
        ));
    } else {
        out.push(Finding::fail(format!(
            "not deterministic: the same seed gave {:?} then {:?} ({}); draw randomness only from the `seed` parameter",
            first.applied.config,
            second.applied.config,
            second
                .failure()
                .map_or("accepted".to_string(), ToString::to_string)
        )));
    }
}

/// How far the decision's utility is from the optimum of the same problem,
/// which the embedded `exact` finds with an additive utility (the embedded one
/// is): an author reads the quality of a search beside its answer.
fn gap_to_optimum(
    inputs: &CheckInputs<'_>,
    utility: &Arc<LoadedUtility>,
    found: Option<f64>,
) -> Finding {
    let exact = match registry::resolve_policy(&inputs.engine, "exact", None) {
        Ok(p) => p,
        Err(e) => return Finding::fail(format!("the embedded exact policy: {e:#}")),
    };
    let seed: Vec<(String, String)> = inputs
        .params
        .iter()
        .filter(|(k, _)| k == "seed")
        .cloned()
        .collect();
    let params = super::setup::with_declared_params(&exact.info, seed).unwrap_or_default();
    let optimum = run_once(inputs, &exact, utility, &params);
    match (optimum.failure(), optimum.applied.utility, found) {
        (None, Some(best), Some(found)) => {
            let gap = (best - found) / best.abs().max(f64::MIN_POSITIVE) * 100.0;
            Finding::ok(format!(
                "optimum on {}: exact reaches utility {best:.4}; this decision is {gap:.2} % below it",
                inputs.problem_name
            ))
        }
        (Some(why), _, _) => Finding::ok(format!(
            "optimum on {}: not computed (exact: {why})",
            inputs.problem_name
        )),
        _ => Finding::ok(format!(
            "optimum on {}: not computed (a utility is unavailable)",
            inputs.problem_name
        )),
    }
}

fn run_once(
    inputs: &CheckInputs<'_>,
    policy: &Arc<LoadedPolicy>,
    utility: &Arc<LoadedUtility>,
    params: &[(String, String)],
) -> TickOutcome {
    let registry = Registry::default();
    let mut decider = Decider::new(
        Arc::clone(&inputs.engine),
        registry.policy_slot(Arc::clone(policy)),
        registry.utility_slot(Arc::clone(utility)),
        Arc::clone(&inputs.predictor),
        params.to_vec(),
    );
    decider.decide(inputs.problem, &inputs.state)
}

/// A utility must score feasible candidates with finite values, exclude a
/// VRAM-infeasible one with −∞, and steer a real search to a valid decision.
fn check_utility(inputs: &CheckInputs<'_>, utility: Arc<LoadedUtility>, out: &mut Vec<Finding>) {
    out.push(schema_finding(&utility.info.params, "none", &inputs.params));
    // The parameters given (`--param`, `seed` aside: a utility gets none) are
    // the utility's; the rest run at their declared defaults.
    let given: Vec<(String, String)> = inputs
        .params
        .iter()
        .filter(|(k, _)| k != super::setup::SEED)
        .cloned()
        .collect();
    let utility = match utility.configured(given) {
        Ok(u) => Arc::new(u),
        Err(e) => {
            out.push(Finding::fail(e));
            return;
        }
    };
    let problem = inputs.problem;
    // A spread of feasible candidates must get at least one finite utility.
    let feasible = problem.feasible_indices();
    let step = (feasible.len() / 64).max(1);
    let sample: Vec<u64> = feasible.iter().step_by(step).copied().collect();
    match score_batch(inputs, &utility, problem, &sample) {
        Err(why) => {
            out.push(Finding::fail(why));
            return;
        }
        Ok(scores) => {
            let finite = scores.iter().filter(|s| s.is_finite()).count();
            out.push(if finite == 0 {
                Finding::fail(format!(
                    "score: none of {} VRAM-feasible candidates got a finite utility",
                    sample.len()
                ))
            } else {
                Finding::ok(format!(
                    "score: {finite} of {} VRAM-feasible candidates finite (the rest under an SLA floor)",
                    sample.len()
                ))
            });
        }
    }
    out.push(check_terms(inputs, &utility, &sample));
    // Every model at its largest configuration, on the same problem with a
    // card one MiB too small for it: the utility must exclude it.
    let largest: Vec<u32> = problem
        .models
        .iter()
        .map(|m| {
            (0..m.configs.len())
                .max_by_key(|&c| m.configs[c].vram_mib)
                .unwrap_or(0) as u32
        })
        .collect();
    let mut tight = problem.clone();
    let need = u32::try_from(problem.vram_mib(&largest)).unwrap_or(u32::MAX);
    tight.card.vram_mib = tight.card.vram_mib.min(need.saturating_sub(1));
    let over = problem.space().index(&largest).unwrap_or(0);
    match score_batch(inputs, &utility, &tight, &[over]) {
        Err(why) => out.push(Finding::fail(why)),
        Ok(scores) if scores[0] == f64::NEG_INFINITY => out.push(Finding::ok(
            "score: a candidate over the card's VRAM is excluded (negative infinity)",
        )),
        Ok(scores) => out.push(Finding::fail(format!(
            "score: a candidate over the card's VRAM scored {}, expected negative infinity",
            scores[0]
        ))),
    }
    let ga = match registry::resolve_policy(&inputs.engine, "ga", None) {
        Ok(p) => p,
        Err(e) => {
            out.push(Finding::fail(format!("the embedded ga policy: {e:#}")));
            return;
        }
    };
    // ga with its own defaults and the seed (the parameters given are the checked component's).
    let seed_only: Vec<(String, String)> = inputs
        .params
        .iter()
        .filter(|(k, _)| k == super::setup::SEED)
        .cloned()
        .collect();
    let ga_params = super::setup::with_declared_params(&ga.info, seed_only).unwrap_or_default();
    let report = run_once(inputs, &ga, &utility, &ga_params);
    match report.failure() {
        None => out.push(Finding::ok(format!(
            "ga decides with this utility on {}: {:?} accepted",
            inputs.problem_name, report.applied.config
        ))),
        Some(why) => out.push(Finding::fail(format!(
            "ga with this utility on {}: {why}",
            inputs.problem_name
        ))),
    }
}

/// Relative tolerance between a score and the sum of its terms (f64 sums of a
/// few terms in another order).
const TERMS_TOLERANCE: f64 = 1e-9;

/// A utility that hands over per-model terms must mean it: on the sampled
/// candidates, with predictions from one table, each score must equal the sum
/// of its models' terms (both −∞ where one is).
fn check_terms(inputs: &CheckInputs<'_>, utility: &Arc<LoadedUtility>, sample: &[u64]) -> Finding {
    let problem = inputs.problem;
    let table = match inputs
        .predictor
        .predict_table(&inputs.state, &problem.current)
    {
        Ok(table) => table,
        Err(e) => return Finding::fail(format!("predict-table: {}", error_chain(&e))),
    };
    let wit_problem = wit::Problem::from(problem);
    let mut scorer = Scorer::new(Arc::clone(&inputs.engine), Arc::clone(utility));
    let deadline_at = Instant::now() + inputs.engine.limits().deadline;
    let terms = match scorer.terms(&wit_problem, &table, deadline_at) {
        Err(e) => return Finding::fail(format!("terms: {e}")),
        Ok(None) => {
            return Finding::ok(
                "terms: none (not additive): policies score it through evaluate; exact refuses it",
            );
        }
        Ok(Some(terms)) => terms,
    };
    let offsets = mfsched_core::table_offsets(problem);
    let space = problem.space();
    let mut predictions = Vec::with_capacity(sample.len() * problem.models.len());
    let mut sums = Vec::with_capacity(sample.len());
    for &c in sample {
        let tuple = space.tuple(c).unwrap_or_default();
        let mut sum = 0.0;
        for (i, &l) in tuple.iter().enumerate() {
            predictions.push(table[offsets[i] + l as usize]);
            sum += terms[offsets[i] + l as usize];
        }
        sums.push(sum);
    }
    let scores = match scorer.score(&wit_problem, sample, &predictions, deadline_at) {
        Ok(scores) => scores,
        Err(e) => return Finding::fail(format!("score: {e}")),
    };
    let differs = |(score, sum): &(&f64, &f64)| {
        !(*score == *sum || (**score - **sum).abs() <= TERMS_TOLERANCE * score.abs().max(1.0))
    };
    match scores.iter().zip(&sums).position(|pair| differs(&pair)) {
        None => Finding::ok(format!(
            "terms: additive; the terms of {} VRAM-feasible candidates add up to their scores",
            sample.len()
        )),
        Some(k) => Finding::fail(format!(
            "terms: candidate {} scores {} but its models' terms add up to {}",
            sample[k], scores[k], sums[k]
        )),
    }
}

/// Scores `candidates` of `problem` with the utility, predictions from the
/// host's predictor; the error is a finding's text.
fn score_batch(
    inputs: &CheckInputs<'_>,
    utility: &Arc<LoadedUtility>,
    problem: &Problem,
    candidates: &[u64],
) -> Result<Vec<f64>, String> {
    let predictions = inputs
        .predictor
        .predict_joint(&inputs.state, &problem.current, candidates)
        .map_err(|e| format!("predict: {}", error_chain(&e)))?;
    let mut scorer = Scorer::new(Arc::clone(&inputs.engine), Arc::clone(utility));
    let deadline_at = Instant::now() + inputs.engine.limits().deadline;
    scorer
        .score(
            &wit::Problem::from(problem),
            candidates,
            &predictions,
            deadline_at,
        )
        .map_err(|e| format!("score: {e}"))
}
