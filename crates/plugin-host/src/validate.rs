//! Every decision is checked before anyone uses it: arity, indices in range,
//! VRAM under the cap, and each model's predicted throughput at or above its
//! SLA floor, except where the decision keeps the running configuration.

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
///
/// A decision to keep the running configuration (`problem.current`) is not
/// refused for its floors: a refusal would keep that configuration anyway
/// (the fallback never runs something new), and a policy that holds, or a
/// plugin's self-check on the running state, must not fail because the
/// floors were raised above what runs (conformal margins). Its shortfall is
/// still reported: [`floor_misses`] of the applied predictions
/// (`TickOutcome::floors_missed`).
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
    let keeps_running = config == problem.current.as_slice();
    if let Some(&m) = floor_misses(problem, &predicted).first()
        && !keeps_running
    {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// With a floor no configuration reaches, keeping the running
    /// configuration passes (its miss is reported by `floor_misses`) and any
    /// other configuration is refused for the floor.
    #[test]
    fn only_the_running_configuration_passes_under_an_unreachable_floor() {
        let mut problem = mfsched_core::load_scenario("paper-n2")
            .expect("bundled")
            .problem;
        problem.sla_floors = vec![1e9, 0.0];
        let predict = |_| Ok(vec![10.0, 20.0]);
        let running = problem.current.clone();
        let kept = validate(&problem, &running, predict).expect("kept");
        assert_eq!(floor_misses(&problem, &kept), vec![0]);
        let mut other = running.clone();
        other[0] = u32::from(other[0] == 0);
        assert!(matches!(
            validate(&problem, &other, predict),
            Err(Rejection::Floor { .. })
        ));
    }
}
