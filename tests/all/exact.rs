//! The exact policy (multiple-choice knapsack over the per-model table) must
//! reach the same predicted utility as exhaustive search on every problem: many
//! random variations of the bundled scenarios (cap, floors, running
//! configuration, reconfiguration costs, state) and the eight dynamic workload
//! scenarios in closed loop.

use mfsched_core::Predictor;
use mfsched_core::TRACE_NAMES;
use mfsched_core::generate_trace;
use mfsched_core::{GpuState, Problem, ReconfigCosts, WorkloadLevel};
use mfsched_lab::AnalyticPredictor;
use mfsched_lab::{Harness, PolicySpec, Summary};
use mfsched_plugin_host::fill_defaults;
use mfsched_plugin_host::{CompileCache, Decider, PluginEngine, PluginLimits};
use mfsched_plugin_host::{Registry, resolve_policy, resolve_utility};
use mfsched_rng::Rng;
use std::sync::Arc;
use std::time::Duration;

fn engine() -> Arc<PluginEngine> {
    Arc::new(
        PluginEngine::new(
            PluginLimits {
                deadline: Duration::from_secs(5),
                memory_bytes: 256 << 20,
                ..PluginLimits::default()
            },
            CompileCache::Off,
        )
        .expect("engine"),
    )
}

/// A random variation of a bundled scenario and the analytic predictor of its
/// models on its card; `None` when it has no feasible start.
fn random_problem(rng: &mut Rng) -> Option<(Problem, Arc<dyn Predictor>)> {
    let name = ["paper-n2", "paper-n3", "paper-n4", "paper-n5"][rng.below(4) as usize];
    let scenario = mfsched_core::load_scenario(name).expect("bundled");
    let mut p = scenario.problem;
    // Caps from "almost nothing fits" to "everything fits".
    p.card.vram_mib = 8_000 + rng.below(20_000) as u32;
    let predictor = AnalyticPredictor::new(&p);
    fill_defaults(&mut p, &scenario.explicit_floors, &predictor).expect("predicts");
    // Floors between none and a strict quantile, per model.
    for f in &mut p.sla_floors {
        *f *= 2.0 * rng.next_f64();
    }
    // Per model: one reloads cheaply, another restarts dearly.
    for c in &mut p.reconfig {
        *c = ReconfigCosts {
            variant_switch: 0.2 * rng.next_f64(),
            knob_change: 0.05 * rng.next_f64(),
        };
    }
    // A random feasible running configuration.
    let feasible = p.feasible_indices();
    if feasible.is_empty() {
        return None;
    }
    let pick = feasible[rng.below(feasible.len() as u64) as usize];
    p.current = p.space().tuple(pick).expect("in range");
    Some((p, Arc::new(predictor)))
}

fn random_state(rng: &mut Rng, p: &Problem) -> GpuState {
    GpuState {
        workload: WorkloadLevel::from_ordinal(rng.below(4) as usize).expect("0..4"),
        vram_used_mib: rng.next_f64() * f64::from(p.card.vram_mib),
        utilization: rng.next_f64(),
        contention: None,
    }
}

#[test]
fn exact_equals_exhaustive_on_random_problems() {
    let engine = engine();
    let registry = Registry::default();
    let utility =
        registry.utility_slot(resolve_utility(&engine, "utility", None).expect("utility"));
    let slot = |name: &str| registry.policy_slot(resolve_policy(&engine, name, None).expect(name));
    let (exact_slot, exhaustive_slot) = (slot("exact"), slot("exhaustive"));
    // A predictor is bound to its problem's models: a decider per problem.
    let decider = |policy: &Arc<_>, predictor: &Arc<dyn Predictor>| {
        Decider::new(
            Arc::clone(&engine),
            Arc::clone(policy),
            Arc::clone(&utility),
            Arc::clone(predictor),
            vec![],
        )
    };
    let mut rng = Rng::new(2026);
    let (mut compared, mut both_refused) = (0, 0);
    while compared + both_refused < 60 {
        let Some((problem, predictor)) = random_problem(&mut rng) else {
            continue;
        };
        let mut exact = decider(&exact_slot, &predictor);
        let mut exhaustive = decider(&exhaustive_slot, &predictor);
        let state = random_state(&mut rng, &problem);
        let a = exact.decide(&problem, &state);
        let b = exhaustive.decide(&problem, &state);
        let ua = a.applied.utility.unwrap_or(f64::NEG_INFINITY);
        let ub = b.applied.utility.unwrap_or(f64::NEG_INFINITY);
        if b.failure().is_some() {
            // No floor-meeting configuration fits: exact must not claim one.
            assert!(
                a.failure().is_some(),
                "exact found {:?} where exhaustive found none",
                a.applied.config
            );
            both_refused += 1;
            continue;
        }
        assert_eq!(a.failure(), None);
        assert!(
            (ua - ub).abs() <= 1e-9 * ub.abs().max(1.0),
            "exact {ua} vs exhaustive {ub} on {} models, cap {}",
            problem.models.len(),
            problem.card.vram_mib
        );
        compared += 1;
    }
    assert!(compared >= 30, "too few comparable problems ({compared})");
}

#[test]
fn exact_has_no_gap_over_the_eight_dynamic_scenarios() {
    let engine = engine();
    let scenario = mfsched_core::load_scenario("paper-n5").expect("bundled");
    let mut problem = scenario.problem;
    let analytic = AnalyticPredictor::new(&problem);
    fill_defaults(&mut problem, &scenario.explicit_floors, &analytic).expect("predicts");
    let harness = Harness::new(
        Arc::clone(&engine),
        resolve_utility(&engine, "utility", None).expect("utility"),
        Arc::new(analytic),
        problem,
    );
    let exact = PolicySpec {
        label: "exact".into(),
        plugin: resolve_policy(&engine, "exact", None).expect("exact"),
        params: vec![],
        predictor: None,
    };
    for name in TRACE_NAMES {
        let trace = generate_trace(name, 12, 5).expect(name);
        let runs = harness.run(&exact, &[], &trace, 5, || {}).expect("run");
        let s = Summary::of(&runs[0].ticks);
        assert!(
            s.utility_gap_pct.abs() < 1e-7,
            "{name}: gap {}",
            s.utility_gap_pct
        );
        assert_eq!(s.failures, 0, "{name}");
    }
}
