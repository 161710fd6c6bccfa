//! Every decision is checked before anyone uses it: arity, indices in range,
//! VRAM under the cap, and each model's predicted throughput at or above its
//! SLA floor.

use mfsched_core::domain::{GpuState, Infeasible, Problem};
use mfsched_core::predict::Predictor;

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
/// model) when it passes.
pub fn validate(
    problem: &Problem,
    state: &GpuState,
    predictor: &dyn Predictor,
    config: &[u32],
) -> Result<Vec<f32>, Rejection> {
    problem.check_feasible(config)?;
    let index = problem
        .space()
        .index(config)
        .expect("a feasible configuration has an index");
    let predicted = predictor
        .predict_joint(problem, state, &[index])
        .map_err(|e| Rejection::Unpredictable(e.to_string()))?;
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
