//! The published utility: throughput-weighted quality with per-variant min-max
//! normalisation, minus a reconfiguration penalty, with SLA floors and the VRAM
//! cap as hard constraints.
//!
//! For a candidate λ with predicted throughputs T:
//!
//! ```text
//! J(λ) = Σᵢ qᵢ(λᵢ)/qᵢ,max · clamp((Tᵢ − minᵢ,v)/(maxᵢ,v − minᵢ,v), 0, 1) − Σᵢ rᵢ(λᵢ)
//! ```
//!
//! where v is λᵢ's variant and (min, max) its profiled throughput range, so a
//! fast small variant does not dominate a slow large one; quality is scaled by
//! the model's best configuration so every model weighs the same; rᵢ is the
//! variant-switch cost when λᵢ changes variant against `problem.current`, the
//! (smaller) knob-change cost when only a runtime knob changes, else 0.
//! J = −∞ when some Tᵢ is under its SLA floor, when λ needs more VRAM than the
//! card has, or when the index is not a joint configuration.
//!
//! J is additive across models (each term reads only its own model's
//! configuration and throughput), so `terms` hands the host the per-model
//! terms of a prediction table: policies sum them instead of calling `score`
//! per candidate, and `exact` solves the knapsack over them.

/// The generated `utility` world. wit-bindgen's glue is FFI, hence unsafe; its
/// lowered exports may take their flattened arguments as many scalars.
#[allow(unsafe_code, clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "utility",
        path: "../../wit",
    });

    use super::PublishedUtility;
    export!(PublishedUtility);
}

use bindings::Guest;
use bindings::mfsched::scheduler::types::{Param, ParamSpec, Problem, ThroughputRange};

struct PublishedUtility;

impl Guest for PublishedUtility {
    fn name() -> String {
        "throughput-weighted quality (published)".into()
    }

    /// The published utility has no parameters: its weights are the paper's.
    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    fn score(
        problem: Problem,
        _: Vec<Param>,
        candidates: Vec<u64>,
        predictions: Vec<f32>,
    ) -> Result<Vec<f64>, String> {
        let n = problem.models.len();
        assert!(
            predictions.len() == candidates.len() * n,
            "score: {} predictions for {} candidates of {n} models",
            predictions.len(),
            candidates.len()
        );
        let terms = ModelTerms::new(&problem);
        let radices: Vec<u64> = problem
            .models
            .iter()
            .map(|m| m.configs.len() as u64)
            .collect();
        let mut strides = vec![1u64; n];
        for i in (0..n.saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * radices[i + 1];
        }
        let size = strides.first().map_or(0, |s| s * radices[0]);
        let cap = u64::from(problem.card.vram_mib);
        Ok(candidates
            .iter()
            .zip(predictions.chunks_exact(n.max(1)))
            .map(|(&c, t)| {
                if c >= size {
                    return f64::NEG_INFINITY;
                }
                let mut vram = 0u64;
                let mut j = 0.0;
                for i in 0..n {
                    let local = ((c / strides[i]) % radices[i]) as usize;
                    vram += u64::from(problem.models[i].configs[local].vram_mib);
                    let term = terms.value(&problem, i, local, f64::from(t[i]));
                    if term == f64::NEG_INFINITY {
                        return f64::NEG_INFINITY;
                    }
                    j += term;
                }
                if vram > cap { f64::NEG_INFINITY } else { j }
            })
            .collect())
    }

    fn terms(problem: Problem, _: Vec<Param>, table: Vec<f32>) -> Result<Option<Vec<f64>>, String> {
        let terms = ModelTerms::new(&problem);
        let mut out = Vec::with_capacity(table.len());
        let mut rows = table.iter();
        for (i, model) in problem.models.iter().enumerate() {
            for local in 0..model.configs.len() {
                let thr = f64::from(*rows.next().expect("one prediction per local configuration"));
                out.push(terms.value(&problem, i, local, thr));
            }
        }
        Ok(Some(out))
    }
}

/// Per-model constants of the utility, computed once per batch.
struct ModelTerms {
    best_quality: Vec<f64>,
}

impl ModelTerms {
    fn new(problem: &Problem) -> Self {
        assert!(
            problem.throughput_ranges.len() == problem.models.len()
                && problem
                    .throughput_ranges
                    .iter()
                    .zip(&problem.models)
                    .all(|(r, m)| r.len() == m.variants.len()),
            "the problem needs one throughput range per model variant"
        );
        assert!(
            problem.sla_floors.len() == problem.models.len(),
            "the problem needs one SLA floor per model"
        );
        Self {
            best_quality: problem
                .models
                .iter()
                .map(|m| m.configs.iter().map(|c| c.quality).fold(0.0, f64::max))
                .collect(),
        }
    }

    /// Model i's contribution in local configuration `local` at throughput
    /// `thr`: negative infinity under its SLA floor (or for a throughput that
    /// is not a number), which excludes every candidate holding it.
    fn value(&self, problem: &Problem, i: usize, local: usize, thr: f64) -> f64 {
        if thr < problem.sla_floors[i] || !thr.is_finite() {
            return f64::NEG_INFINITY;
        }
        let model = &problem.models[i];
        let config = &model.configs[local];
        let range = problem.throughput_ranges[i][config.variant as usize];
        let quality = if self.best_quality[i] > 0.0 {
            config.quality / self.best_quality[i]
        } else {
            1.0
        };
        let reward = quality * normalise(thr, range);
        let now = problem.current.get(i).map(|&c| c as usize);
        let costs = problem.reconfig.get(i);
        let penalty = match (now.and_then(|c| model.configs.get(c)), costs) {
            (Some(_), _) if now == Some(local) => 0.0,
            (Some(cur), Some(c)) if cur.variant != config.variant => c.variant_switch,
            (Some(_), Some(c)) => c.knob_change,
            _ => 0.0,
        };
        reward - penalty
    }
}

/// Min-max normalisation into [0, 1]; a degenerate range counts as full marks.
fn normalise(thr: f64, range: ThroughputRange) -> f64 {
    let span = range.max - range.min;
    if span <= 0.0 {
        1.0
    } else {
        ((thr - range.min) / span).clamp(0.0, 1.0)
    }
}
