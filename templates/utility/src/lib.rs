//! {{name}}: an mfsched utility, the objective every policy maximises.
//!
//! Each model's term is the quality of its configuration (relative to the
//! model's best) times how much of it counts, minus the reconfiguration cost
//! when the configuration changes; a configuration under its SLA floor is
//! excluded. How much counts is set by the parameter `throughput-weight`
//! (w, in [0, 1]): `1 - w + w * share`, where share is the part of its
//! variant's profiled throughput range the configuration reaches. At the
//! default, w = 1, quality counts in proportion to the share; at w = 0
//! throughput beyond the floor earns nothing. The user sets it without a
//! rebuild: `--utility-param throughput-weight=0.5`, or in the daemon
//! `[policy] utility_params = { throughput-weight = "0.5" }`.
//!
//! The utility is the sum of the terms, so it is additive: `exact` can solve
//! it, and every policy sums terms instead of asking for a score per
//! candidate. `Terms` derives the world's exports (`parameters`, `score`,
//! `terms`) from this impl, so score and terms agree.

use mfsched_utility_sdk::Additive;
use mfsched_utility_sdk::params::{ParamError, Params, spec};
use mfsched_utility_sdk::types::{ParamSpec, Problem};

struct Utility {
    /// w of `1 - w + w * share`.
    throughput_weight: f64,
}

impl Additive for Utility {
    fn name() -> String {
        "{{name}} (quality times throughput share)".into()
    }

    fn parameters() -> Vec<ParamSpec> {
        vec![spec(
            "throughput-weight",
            "1.0",
            "how much of a configuration's quality depends on its throughput share, in [0, 1]",
        )]
    }

    fn new(params: &Params) -> Result<Self, ParamError> {
        Ok(Self {
            throughput_weight: params.f64_in("throughput-weight", 0.0, 1.0)?,
        })
    }

    fn term(&self, problem: &Problem, model: usize, config: u32, throughput: f32) -> f64 {
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
        // This model's reconfiguration costs (a list parallel to the models).
        let cost = match (problem.current.get(model), problem.reconfig.get(model)) {
            (Some(&now), _) if now == config => 0.0,
            (Some(&now), Some(c)) if m.configs[now as usize].variant != local.variant => {
                c.variant_switch
            }
            (Some(_), Some(c)) => c.knob_change,
            _ => 0.0,
        };
        let w = self.throughput_weight;
        local.quality / best * (1.0 - w + w * share) - cost
    }
}

mfsched_utility_sdk::export_additive!(Utility);
