//! Closed-loop runs of one policy over one workload trace on the simulator.
//!
//! Each tick the simulator runs the configuration decided at the previous tick
//! under the tick's workload level and reports the observed state; the policy
//! decides for that state through the real plugin host (Wasm policy, Wasm
//! utility, validation, last-valid fallback). A policy therefore lives with the
//! consequences of its own choices. Beside the decision, every tick records:
//!
//! - the best predicted utility over every VRAM-feasible joint configuration for
//!   the same state and running configuration (per-step exhaustive argmax on the
//!   surrogate landscape: the published reference);
//! - the realised utility: the same utility component scoring the decision with
//!   the simulator's noise-free throughput (beyond the paper), with floors lifted
//!   so a violation shows as a count instead of −∞;
//! - SLA violations, predicted and realised, reconfigurations and latency.
//!
//! [`Conditions`] change the card under the loop: a [`Perturbation`] makes
//! the simulated card give each model's configurations other throughputs than
//! the ones the surrogate was trained on (a calibration the bundle never saw),
//! an online [`Correction`] lets the loop learn from what it measures, as
//! the daemon does from its servers' counters, and [`Floors`] with margins
//! make decisions hold each floor on a lower bound of the prediction.

use crate::sim::Simulator;
use anyhow::{Context, Result};
use mfsched_core::Trace;
use mfsched_core::mean;
use mfsched_core::nearest_rank_sorted;
use mfsched_core::{
    Corrected, Correction, CorrectionConfig, Field, Floors, Predictor, table_offsets,
};
use mfsched_core::{GpuState, JointConfig, Problem, WorkloadLevel};
use mfsched_plugin_host::Scorer;
use mfsched_plugin_host::wit;
use mfsched_plugin_host::{Decider, LoadedPolicy, LoadedUtility, PluginEngine, Slot};
use mfsched_rng::Rng;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// A policy to evaluate: a label for reports, the loaded component, its parameters.
#[derive(Clone)]
pub struct PolicySpec {
    pub label: String,
    pub plugin: Arc<LoadedPolicy>,
    pub params: Vec<(String, String)>,
    /// The predictor this policy is served, when not the harness's (e.g. the
    /// same surrogate with the candidate-aware field, for a field A/B).
    pub predictor: Option<Arc<dyn Predictor>>,
}

impl std::fmt::Debug for PolicySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySpec")
            .field("label", &self.label)
            .field("plugin", &self.plugin.info.name)
            .field("params", &self.params)
            .field("field", &self.predictor.as_ref().map(|p| p.field().label()))
            .finish()
    }
}

/// A card that is not the one the surrogate learnt: every model's
/// throughput in each configuration scaled by a seeded factor, e^(σ_m·z_m +
/// σ_c·z_c) with z standard normal per model (z_m) and per configuration (z_c).
#[derive(Debug, Clone, PartialEq)]
pub struct Perturbation {
    /// Per model, per local configuration.
    factors: Vec<Vec<f64>>,
}

impl Perturbation {
    pub fn seeded(problem: &Problem, model_sigma: f64, config_sigma: f64, seed: u64) -> Self {
        let mut rng = Rng::derive(seed, 27);
        let factors = problem
            .models
            .iter()
            .map(|m| {
                let model = model_sigma * rng.normal();
                (0..m.grid_size())
                    .map(|_| (model + config_sigma * rng.normal()).exp())
                    .collect()
            })
            .collect();
        Self { factors }
    }

    /// `throughput` (per model, of `config`) as the perturbed card gives it.
    fn apply(&self, config: &[u32], throughput: &mut [f64]) {
        for ((t, &c), f) in throughput.iter_mut().zip(config).zip(&self.factors) {
            *t *= f[c as usize];
        }
    }

    /// Model `i`'s factors, one per local configuration.
    pub fn factors(&self, i: usize) -> &[f64] {
        &self.factors[i]
    }
}

/// What the card does differently from the simulator the surrogate was
/// trained on, and whether the loop corrects for it. The default: the
/// simulator itself, no correction (the published closed loop).
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    pub perturbation: Option<Perturbation>,
    /// Decisions use predictions corrected online from each tick's measured
    /// throughput (the simulator's noisy measurement, perturbed alike).
    pub correction: Option<CorrectionConfig>,
    /// The floors decisions enforce (raised by split-conformal margins, say);
    /// realised violations are still counted against the declared ones.
    /// `None`: the problem's floors, on the point prediction.
    pub floors: Option<Floors>,
}

/// One tick of a closed-loop run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickRecord {
    pub tick: usize,
    pub workload: WorkloadLevel,
    pub state: GpuState,
    pub config: JointConfig,
    /// The policy's answer was valid and used (else the last valid one was kept).
    pub accepted: bool,
    pub failure: Option<String>,
    /// Predicted utility of the configuration used (−∞ when a floor is predicted broken).
    pub predicted_utility: f64,
    /// Exhaustive argmax of the predicted utility for the same state.
    pub best_predicted_utility: f64,
    /// Utility on the simulator's ground truth, floors lifted.
    pub realised_utility: f64,
    pub predicted_sla_violation: bool,
    pub realised_sla_violation: bool,
    pub reconfigured: bool,
    pub latency_ms: f64,
    pub candidates_evaluated: u64,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub policy: String,
    pub trace: String,
    pub seed: u64,
    pub ticks: Vec<TickRecord>,
}

/// What a set of ticks amounts to.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    pub ticks: usize,
    /// 100 · (Σ best − Σ chosen) / |Σ best| over ticks where both are finite: the
    /// published "utility relative to exhaustive" loss, in percent.
    pub utility_gap_pct: f64,
    /// Mean predicted utility over ticks where it is finite.
    pub mean_predicted_utility: f64,
    pub mean_realised_utility: f64,
    pub predicted_sla_violations: usize,
    pub realised_sla_violations: usize,
    pub reconfigurations: usize,
    /// Ticks whose policy answer was rejected or failed (last valid kept).
    pub failures: usize,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

impl Summary {
    pub fn of<'a>(ticks: impl IntoIterator<Item = &'a TickRecord>) -> Self {
        let ticks: Vec<&TickRecord> = ticks.into_iter().collect();
        let both_finite = || {
            ticks
                .iter()
                .filter(|t| t.predicted_utility.is_finite() && t.best_predicted_utility.is_finite())
        };
        let best: f64 = both_finite().map(|t| t.best_predicted_utility).sum();
        let chosen: f64 = both_finite().map(|t| t.predicted_utility).sum();
        let finite_pred: Vec<f64> = ticks
            .iter()
            .map(|t| t.predicted_utility)
            .filter(|u| u.is_finite())
            .collect();
        let mut latencies: Vec<f64> = ticks.iter().map(|t| t.latency_ms).collect();
        latencies.sort_by(f64::total_cmp);
        Self {
            ticks: ticks.len(),
            utility_gap_pct: if best.abs() > 0.0 {
                100.0 * (best - chosen) / best.abs()
            } else {
                0.0
            },
            mean_predicted_utility: mean(&finite_pred),
            mean_realised_utility: mean(
                &ticks
                    .iter()
                    .map(|t| t.realised_utility)
                    .filter(|u| u.is_finite())
                    .collect::<Vec<_>>(),
            ),
            predicted_sla_violations: ticks.iter().filter(|t| t.predicted_sla_violation).count(),
            realised_sla_violations: ticks.iter().filter(|t| t.realised_sla_violation).count(),
            reconfigurations: ticks.iter().filter(|t| t.reconfigured).count(),
            failures: ticks.iter().filter(|t| !t.accepted).count(),
            latency_p50_ms: nearest_rank_sorted(&latencies, 0.5),
            latency_p99_ms: nearest_rank_sorted(&latencies, 0.99),
        }
    }
}

/// Everything runs share: the engine, the utility, the predictor, the problem
/// (floors and ranges filled) and the feasible space, enumerated once.
pub struct Harness {
    engine: Arc<PluginEngine>,
    utility: Arc<LoadedUtility>,
    predictor: Arc<dyn Predictor>,
    problem: Problem,
    feasible: Vec<u64>,
    /// Local indices of every feasible candidate, N per candidate.
    feasible_locals: Vec<u32>,
    offsets: Vec<usize>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("utility", &self.utility.info.name)
            .field("feasible", &self.feasible.len())
            .finish_non_exhaustive()
    }
}

impl Harness {
    pub fn new(
        engine: Arc<PluginEngine>,
        utility: Arc<LoadedUtility>,
        predictor: Arc<dyn Predictor>,
        problem: Problem,
    ) -> Self {
        let space = problem.space();
        let mut feasible = Vec::new();
        let mut feasible_locals = Vec::new();
        problem.for_each_feasible(|t| {
            feasible.extend(space.index(t));
            feasible_locals.extend_from_slice(t);
        });
        let offsets = table_offsets(&problem);
        Self {
            engine,
            utility,
            predictor,
            problem,
            feasible,
            feasible_locals,
            offsets,
        }
    }

    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    pub fn feasible_count(&self) -> usize {
        self.feasible.len()
    }

    /// Utilities of every feasible candidate under `state` as `predictor` sees
    /// them, for the problem as it stands (its `current` sets the
    /// reconfiguration penalty): from the table while the field is held fixed,
    /// else from every candidate's joint prediction.
    fn landscape(
        &self,
        predictor: &dyn Predictor,
        scorer: &mut Scorer,
        problem: &Problem,
        state: &GpuState,
    ) -> Result<Vec<f64>> {
        let predictions: Vec<f32> = match predictor.field() {
            Field::Observed => {
                let table = predictor.predict_table(state, &problem.current)?;
                let n = problem.models.len();
                self.feasible_locals
                    .chunks_exact(n)
                    .flat_map(|locals| {
                        locals
                            .iter()
                            .zip(&self.offsets)
                            .map(|(&c, &off)| table[off + c as usize])
                    })
                    .collect()
            }
            Field::CandidateAware => {
                predictor.predict_joint(state, &problem.current, &self.feasible)?
            }
        };
        let deadline = Instant::now() + self.engine.limits().deadline;
        scorer
            .score(
                &wit::Problem::from(problem),
                &self.feasible,
                &predictions,
                deadline,
            )
            .map_err(|e| anyhow::anyhow!("the utility failed on the exhaustive reference: {e}"))
    }

    /// The predictor `policy` is served.
    fn predictor_of(&self, policy: &PolicySpec) -> Arc<dyn Predictor> {
        Arc::clone(policy.predictor.as_ref().unwrap_or(&self.predictor))
    }

    fn decider(&self, policy: &PolicySpec, predictor: Arc<dyn Predictor>, seed: u64) -> Decider {
        Decider::new(
            Arc::clone(&self.engine),
            Arc::new(Slot::new(Arc::clone(&policy.plugin))),
            Arc::new(Slot::new(Arc::clone(&self.utility))),
            predictor,
            with_seed(&policy.params, seed),
        )
    }

    /// One closed-loop run of `active` over `trace`, the simulator seeded with
    /// `seed`. Each `shadow` decides on the same state in the same tick (online
    /// A/B) and is recorded, never applied. Returns the active run, then one run
    /// per shadow (labelled "NAME (shadow)"). `on_tick` is called after every tick.
    pub fn run(
        &self,
        active: &PolicySpec,
        shadows: &[PolicySpec],
        trace: &Trace,
        seed: u64,
        on_tick: impl FnMut(),
    ) -> Result<Vec<Run>> {
        self.run_under(
            &Conditions::default(),
            active,
            shadows,
            trace,
            seed,
            on_tick,
        )
    }

    /// [`Harness::run`] under `conditions`.
    pub fn run_under(
        &self,
        conditions: &Conditions,
        active: &PolicySpec,
        shadows: &[PolicySpec],
        trace: &Trace,
        seed: u64,
        mut on_tick: impl FnMut(),
    ) -> Result<Vec<Run>> {
        let mut sim = Simulator::new(&self.problem, seed).context("starting the simulator")?;
        let specs: Vec<&PolicySpec> = std::iter::once(active).chain(shadows).collect();
        // Under a correction, each distinct predictor is wrapped once, and
        // every wrapper learns from what the active policy's choice measured.
        let mut corrected: Vec<(Arc<dyn Predictor>, Arc<Corrected>)> = Vec::new();
        let mut served = |raw: Arc<dyn Predictor>| -> Arc<dyn Predictor> {
            let Some(config) = &conditions.correction else {
                return raw;
            };
            if let Some((_, c)) = corrected.iter().find(|(r, _)| Arc::ptr_eq(r, &raw)) {
                return Arc::clone(c) as Arc<dyn Predictor>;
            }
            let correction = Correction::new(&self.problem, config.clone(), &[]);
            let c = Arc::new(Corrected::new(Arc::clone(&raw), &self.problem, correction));
            corrected.push((raw, Arc::clone(&c)));
            c
        };
        // Each decider's gap is measured on its own predictor's landscape;
        // deciders sharing a predictor share one reference per tick.
        let predictors: Vec<Arc<dyn Predictor>> =
            specs.iter().map(|p| served(self.predictor_of(p))).collect();
        let out_of_reach = conditions
            .floors
            .as_ref()
            .map_or(mfsched_core::OutOfReach::Keep, |f| f.out_of_reach);
        let mut deciders: Vec<Decider> = specs
            .iter()
            .zip(&predictors)
            .map(|(p, predictor)| {
                self.decider(p, Arc::clone(predictor), seed)
                    .floors_out_of_reach(out_of_reach)
            })
            .collect();
        let perturb = |config: &[u32], throughput: &mut Vec<f64>| {
            if let Some(p) = &conditions.perturbation {
                p.apply(config, throughput);
            }
        };
        let mut scorer = Scorer::new(Arc::clone(&self.engine), Arc::clone(&self.utility));
        let declared = self.problem.sla_floors.clone();
        let mut problem = self.problem.clone();
        if let Some(floors) = &conditions.floors {
            problem.sla_floors = floors.enforced().to_vec();
        }
        let mut lifted = problem.clone();
        lifted.sla_floors.iter_mut().for_each(|f| *f = 0.0);
        let mut runs: Vec<Run> = std::iter::once(active.label.clone())
            .chain(shadows.iter().map(|s| format!("{} (shadow)", s.label)))
            .map(|policy| Run {
                policy,
                trace: trace.name.clone(),
                seed,
                ticks: Vec::with_capacity(trace.levels.len()),
            })
            .collect();
        for (tick, &workload) in trace.levels.iter().enumerate() {
            let mut measured = sim.measure(&problem.current, workload, 1);
            let state = measured.state;
            // What ran since the last tick, as its servers measured it.
            if tick > 0 && !corrected.is_empty() {
                perturb(&problem.current, &mut measured.throughput);
                let measured: Vec<Option<f64>> =
                    measured.throughput.iter().map(|&t| Some(t)).collect();
                for (_, c) in &corrected {
                    c.observe(&state, &problem.current, &measured)
                        .context("the correction's prediction of the running configuration")?;
                }
            }
            let mut best: Vec<f64> = Vec::with_capacity(predictors.len());
            for (k, predictor) in predictors.iter().enumerate() {
                let shared = (0..k).find(|&j| Arc::ptr_eq(&predictors[j], predictor));
                best.push(match shared {
                    Some(j) => best[j],
                    None => self
                        .landscape(predictor.as_ref(), &mut scorer, &problem, &state)?
                        .into_iter()
                        .fold(f64::NEG_INFINITY, f64::max),
                });
            }
            lifted.current.clone_from(&problem.current);
            let wit_lifted = wit::Problem::from(&lifted);
            let mut applied: Option<(Vec<u32>, Vec<f64>)> = None;
            for ((decider, run), &best) in deciders.iter_mut().zip(&mut runs).zip(&best) {
                let report = decider.decide(&problem, &state);
                let config = &report.applied.config;
                let mut truth = sim.expected_throughput(config, workload);
                perturb(config, &mut truth);
                let index = problem
                    .space()
                    .index(config)
                    .context("the host returned a configuration outside the joint space")?;
                let truth_f32: Vec<f32> = truth.iter().map(|&t| t as f32).collect();
                let deadline = Instant::now() + self.engine.limits().deadline;
                let realised = scorer
                    .score(&wit_lifted, &[index], &truth_f32, deadline)
                    .map_err(|e| {
                        anyhow::anyhow!("the utility failed on the realised throughput: {e}")
                    })?[0];
                let failure = report.failure().map(ToString::to_string);
                run.ticks.push(TickRecord {
                    tick,
                    workload,
                    state,
                    predicted_utility: report.applied.utility.unwrap_or(f64::NEG_INFINITY),
                    best_predicted_utility: best,
                    realised_utility: realised,
                    predicted_sla_violation: !report.floors_missed(&problem).is_empty(),
                    realised_sla_violation: truth.iter().zip(&declared).any(|(&t, &f)| t < f),
                    reconfigured: *config != problem.current,
                    latency_ms: report.latency.as_secs_f64() * 1e3,
                    candidates_evaluated: report.active.candidates_evaluated,
                    accepted: failure.is_none(),
                    failure,
                    config: config.clone(),
                });
                // Only the active policy's decision runs on the card.
                applied.get_or_insert((report.applied.config, report.floors));
            }
            if let Some((config, floors)) = applied {
                // What a floor forced out, remembered for the ticks after.
                for (_, c) in &corrected {
                    c.forced_out(&state, &problem.current, &config, &floors)
                        .context("the correction's prediction of the configuration left")?;
                }
                problem.current = config;
            }
            on_tick();
        }
        Ok(runs)
    }
}

/// The policy's parameters with the run's seed (a user-given seed wins).
fn with_seed(params: &[(String, String)], seed: u64) -> Vec<(String, String)> {
    let mut out = params.to_vec();
    if !out.iter().any(|(k, _)| k == "seed") {
        out.push(("seed".into(), seed.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(pred: f64, best: f64, latency_ms: f64) -> TickRecord {
        TickRecord {
            tick: 0,
            workload: WorkloadLevel::Medium,
            state: GpuState {
                workload: WorkloadLevel::Medium,
                vram_used_mib: 0.0,
                utilization: 0.5,
                contention: None,
            },
            config: vec![0],
            accepted: true,
            failure: None,
            predicted_utility: pred,
            best_predicted_utility: best,
            realised_utility: pred,
            predicted_sla_violation: !pred.is_finite(),
            realised_sla_violation: false,
            reconfigured: false,
            latency_ms,
            candidates_evaluated: 1,
        }
    }

    #[test]
    fn summary_gap_latency_and_violations() {
        let ticks = [
            tick(1.0, 1.0, 10.0),
            tick(0.9, 1.0, 20.0),
            tick(f64::NEG_INFINITY, 1.0, 30.0),
            tick(2.0, 2.0, 40.0),
        ];
        let s = Summary::of(&ticks);
        // Over the three finite ticks: best 4.0, chosen 3.9.
        assert!(
            (s.utility_gap_pct - 2.5).abs() < 1e-9,
            "{}",
            s.utility_gap_pct
        );
        assert_eq!(s.predicted_sla_violations, 1);
        assert_eq!(s.latency_p50_ms, 20.0);
        assert_eq!(s.latency_p99_ms, 40.0);
        assert!((s.mean_predicted_utility - 3.9 / 3.0).abs() < 1e-12);
    }
}
