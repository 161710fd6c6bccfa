//! {{name}}: an mfsched utility, the objective every policy maximises.
//!
//! Each model's term is the quality of its configuration (relative to the
//! model's best) times the share of its variant's profiled throughput range
//! it reaches, minus the reconfiguration cost when the configuration changes;
//! a configuration under its SLA floor is excluded. The utility is the sum of
//! the terms, so it is additive: `exact` can solve it, and every policy sums
//! terms instead of asking for a score per candidate. `Terms` derives both of
//! the world's exports (`score`, `terms`) from `term`, so they agree.

use mfsched_utility_sdk::Additive;
use mfsched_utility_sdk::types::Problem;

struct Utility;

impl Additive for Utility {
    fn name() -> String {
        "{{name}} (quality times throughput share)".into()
    }

    fn term(problem: &Problem, model: usize, config: u32, throughput: f32) -> f64 {
        let m = &problem.models[model];
        let local = &m.configs[config as usize];
        let throughput = f64::from(throughput);
        if throughput < problem.sla_floors[model] {
            return f64::NEG_INFINITY;
        }
        let best = m.configs.iter().map(|c| c.quality).fold(f64::MIN_POSITIVE, f64::max);
        let share = problem.throughput_ranges[model]
            .get(local.variant as usize)
            .filter(|r| r.max > r.min)
            .map_or(1.0, |r| ((throughput - r.min) / (r.max - r.min)).clamp(0.0, 1.0));
        let cost = match problem.current.get(model) {
            Some(&now) if now == config => 0.0,
            Some(&now) if m.configs[now as usize].variant != local.variant => {
                problem.reconfig.variant_switch
            }
            Some(_) => problem.reconfig.knob_change,
            None => 0.0,
        };
        local.quality / best * share - cost
    }
}

mfsched_utility_sdk::export_additive!(Utility);
