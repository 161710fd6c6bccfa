//! Every decision is checked before anyone uses it: arity, indices in range,
//! VRAM under the cap, and each model's predicted throughput at or above its
//! SLA floor.

use mfsched_core::{Infeasible, PredictError, Problem, error_chain};

/// Why a decision was not used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejection {
    #[error("{0}")]
    Infeasible(#[from] Infeasible),
    #[error("model {model} is predicted at {predicted:.2}, under its SLA floor of {floor:.2}")]
    Floor {
        model: String,
        predicted: f64,
        floor: f64,
    },
    #[error("the predictor returned {got} values for {expected} models")]
    Prediction { expected: usize, got: usize },
    /// The whole chain is in the message: a rejection is recorded as text.
    #[error("the decision could not be predicted: {}", error_chain(.0))]
    Unpredictable(PredictError),
}

/// Checks `config` against `problem` and returns its predictions (one per
/// model, from `predict` given its joint index) when it passes.
pub fn validate(
    problem: &Problem,
    config: &[u32],
    predict: impl FnOnce(u64) -> Result<Vec<f32>, PredictError>,
) -> Result<Vec<f32>, Rejection> {
    problem.check_feasible(config)?;
    let index = problem
        .space()
        .index(config)
        .expect("a feasible configuration has an index");
    let predicted = predict(index).map_err(Rejection::Unpredictable)?;
    if predicted.len() != problem.models.len() {
        return Err(Rejection::Prediction {
            expected: problem.models.len(),
            got: predicted.len(),
        });
    }
    if let Some(&m) = floor_misses(problem, &predicted).first() {
        return Err(Rejection::Floor {
            model: problem.models[m].name.clone(),
            predicted: f64::from(predicted[m]),
            floor: problem.sla_floors[m],
        });
    }
    Ok(predicted)
}

/// The models (indices) whose predicted throughput is under their SLA floor
/// (NaN counts as under). The one floor check: validation refuses a decision
/// with any, and a tick reports those of a configuration it kept.
pub fn floor_misses(problem: &Problem, predicted: &[f32]) -> Vec<usize> {
    predicted
        .iter()
        .zip(&problem.sla_floors)
        .enumerate()
        .filter(|&(_, (&thr, &floor))| {
            let thr = f64::from(thr);
            thr.is_nan() || thr < floor
        })
        .map(|(m, _)| m)
        .collect()
}
