//! Every decision is checked before anyone uses it: arity, indices in range,
//! VRAM under the cap, and each model's predicted throughput at or above its
//! SLA floor.

use mfsched_core::domain::{Infeasible, Problem};

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
    #[error("the decision could not be predicted: {0}")]
    Unpredictable(String),
}

/// Checks `config` against `problem` and returns its predictions (one per
/// model, from `predict` given its joint index) when it passes.
pub fn validate(
    problem: &Problem,
    config: &[u32],
    predict: impl FnOnce(u64) -> Result<Vec<f32>, String>,
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
    for ((model, &thr), &floor) in problem
        .models
        .iter()
        .zip(&predicted)
        .zip(&problem.sla_floors)
    {
        let thr = f64::from(thr);
        // NaN counts as under the floor.
        if thr.is_nan() || thr < floor {
            return Err(Rejection::Floor {
                model: model.name.clone(),
                predicted: thr,
                floor,
            });
        }
    }
    Ok(predicted)
}
