//! The served predictor, composed in one place: bundle → MeanField → inference
//! backend → field. Every command and the daemon build what policies are
//! served through [`serve`], so they cannot disagree on the backend or the field.

use anyhow::{Result, bail};
use mfsched_core::Problem;
use mfsched_core::Scenario;
use mfsched_core::{Field, Floors, Predictor};
use std::path::Path;
use std::sync::Arc;

use crate::backend::BackendChoice;
use crate::bundled;
use crate::field::CandidateAware;

/// What to serve for a scenario.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions<'a> {
    /// A bundle directory, or a directory of `<scenario>/` bundles; `None`: the
    /// bundle embedded for the scenario.
    pub models: Option<&'a Path>,
    pub backend: BackendChoice,
    pub field: Field,
}

/// The served predictor, the problem it fills in (the bundle's profiled SLA
/// floors where the scenario sets none, and per-variant throughput ranges), and
/// how to name both in logs and reports.
pub struct Served {
    pub predictor: Arc<dyn Predictor>,
    pub problem: Problem,
    /// Where the predictions come from, without the field: the surrogate, the
    /// backend it got and why, the bundle.
    pub origin: String,
    /// `origin` with the field.
    pub name: String,
    /// SHA-256 of the MeanField bundle ([`crate::bundle::Bundle::digest`]);
    /// `None` for a stand-in predictor.
    pub bundle_sha256: Option<String>,
    /// Per model, the surrogate's held-out relative error (the bundle's MAPE
    /// / 100) where the bundle measured one: what an online correction's
    /// drift alarm compares measurements with.
    pub relative_error: Vec<Option<f64>>,
    /// Per model, measured / predicted throughput on the bundle's held-out
    /// rows, where it kept them: what [`Served::floors`] takes margins from.
    pub held_out_ratios: Vec<Option<Vec<f32>>>,
    /// Whether every prediction needs the state's contention reading (a
    /// bundle trained on the contention field).
    pub needs_contention: bool,
    /// The same surrogate under the other field, when the bundle supports it.
    other_field: Option<(Field, Arc<dyn Predictor>)>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Served {
    /// A predictor that is not the MeanField surrogate (a stand-in), served as is.
    pub fn other(predictor: Arc<dyn Predictor>, problem: Problem, name: &str) -> Self {
        Self {
            relative_error: vec![None; problem.models.len()],
            held_out_ratios: vec![None; problem.models.len()],
            predictor,
            problem,
            origin: name.to_owned(),
            name: name.to_owned(),
            bundle_sha256: None,
            needs_contention: false,
            other_field: None,
        }
    }

    /// The problem's floors as declared, enforced on the split-conformal lower
    /// bound at `miss_rate` (`None`: on the point prediction). A model whose
    /// bundle kept no held-out ratios keeps its floor on the point prediction
    /// ([`Floors::uncalibrated`] names it).
    pub fn floors(&self, miss_rate: Option<f64>) -> Floors {
        let declared = self.problem.sla_floors.clone();
        match miss_rate {
            Some(alpha) => Floors::conformal(declared, &self.held_out_ratios, alpha),
            None => Floors::point(declared),
        }
    }

    /// The predictor under `field`: the served one or the same surrogate under
    /// the other field.
    pub fn under(&self, field: Field) -> Result<Arc<dyn Predictor>> {
        if self.predictor.field() == field {
            return Ok(Arc::clone(&self.predictor));
        }
        match &self.other_field {
            Some((f, p)) if *f == field => Ok(Arc::clone(p)),
            _ => bail!(
                "the {} is not available from {}",
                field.label(),
                self.origin
            ),
        }
    }
}

/// Serves the MeanField surrogate of `scenario` as `options` ask. The
/// candidate-aware field needs the bundle's training profile: a bundle without
/// one still serves the observed field, and asking it for the other fails in
/// one line.
pub fn serve(scenario: &Scenario, options: ServeOptions<'_>) -> Result<Served> {
    let mut problem = scenario.problem.clone();
    let bundle = bundled::load(scenario, options.models)?;
    let bundle_sha256 = Some(bundle.digest()?);
    bundle.apply(&mut problem, &scenario.explicit_floors);
    let meanfield = Arc::new(bundle.meanfield_on(&problem, options.backend)?);
    let source = match options.models {
        Some(dir) => format!(
            "bundle {}",
            bundled::bundle_dir(dir, &scenario.name).display()
        ),
        None => format!("embedded bundle {}", scenario.name),
    };
    let origin = format!(
        "MeanField surrogate, {} ({source})",
        meanfield.backend_label()
    );
    tracing::debug!("inference backend: {}", meanfield.backend_reason());
    let candidate_aware = bundled::training_profile(scenario, options.models, &bundle)
        .and_then(|profile| CandidateAware::new(Arc::clone(&meanfield), &problem, &profile));
    let observed: Arc<dyn Predictor> = meanfield;
    let (predictor, other_field) = match (options.field, candidate_aware) {
        (Field::Observed, Ok(ca)) => (
            observed,
            Some((Field::CandidateAware, Arc::new(ca) as Arc<dyn Predictor>)),
        ),
        (Field::Observed, Err(_)) => (observed, None),
        (Field::CandidateAware, Ok(ca)) => (
            Arc::new(ca) as Arc<dyn Predictor>,
            Some((Field::Observed, observed)),
        ),
        (Field::CandidateAware, Err(e)) => return Err(e.context("the candidate-aware field")),
    };
    let relative_error = bundle
        .meta
        .models
        .iter()
        .map(|m| m.metrics.mape_holdout.map(|mape| mape / 100.0))
        .collect();
    let held_out_ratios = bundle
        .meta
        .models
        .iter()
        .map(|m| m.metrics.holdout_ratios.clone())
        .collect();
    Ok(Served {
        held_out_ratios,
        needs_contention: bundle.meta.field_features.uses_contention(),
        name: format!("{origin}, {}", predictor.field().label()),
        bundle_sha256,
        relative_error,
        origin,
        predictor,
        problem,
        other_field,
    })
}
