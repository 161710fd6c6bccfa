//! The noise ceiling: how much of each model's throughput variance in a simulated
//! profile the measurement noise alone leaves unexplained.
//!
//! The best any predictor can do from the joint configuration and regime is the
//! simulator's noise-free expectation, so R² of the measurements against it bounds
//! a surrogate's R² from above (a MeanField predictor also sees the observed state,
//! which reveals part of a burst's load fluctuation, so it may come close).

use crate::sim::Simulator;
use mfsched_core::Problem;
use mfsched_core::Profile;

#[derive(Debug, Clone, PartialEq)]
pub struct Ceiling {
    pub model: String,
    pub rows: usize,
    /// R² of measured throughput against the noise-free expectation.
    pub r2: f64,
    /// The same on throughput relative to solo (interference only: the own
    /// configuration's speed, which dominates raw throughput, divided out).
    pub r2_relative: f64,
}

/// 1 − Σ(y − ŷ)² / Σ(y − ȳ)²; NaN when y has no variance.
pub fn r_squared(y: &[f64], predicted: &[f64]) -> f64 {
    let mean = y.iter().sum::<f64>() / y.len() as f64;
    let ss_total: f64 = y.iter().map(|v| (v - mean).powi(2)).sum();
    let ss_residual: f64 = y.iter().zip(predicted).map(|(v, p)| (v - p).powi(2)).sum();
    if ss_total > 0.0 {
        1.0 - ss_residual / ss_total
    } else {
        f64::NAN
    }
}

pub fn noise_ceiling(profile: &Profile, problem: &Problem, sim: &Simulator) -> Vec<Ceiling> {
    let expected: Vec<Vec<f64>> = profile
        .rows
        .iter()
        .map(|r| sim.expected_throughput(&r.joint, r.workload))
        .collect();
    problem
        .models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let solo = |r: &mfsched_core::ProfileRow| sim.solo_throughput(i, r.joint[i] as usize);
            let y: Vec<f64> = profile.rows.iter().map(|r| r.throughput[i]).collect();
            let e: Vec<f64> = expected.iter().map(|e| e[i]).collect();
            let y_rel: Vec<f64> = profile
                .rows
                .iter()
                .map(|r| r.throughput[i] / solo(r))
                .collect();
            let e_rel: Vec<f64> = profile
                .rows
                .iter()
                .zip(&e)
                .map(|(r, e)| e / solo(r))
                .collect();
            Ceiling {
                model: m.name.clone(),
                rows: y.len(),
                r2: r_squared(&y, &e),
                r2_relative: r_squared(&y_rel, &e_rel),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiling::run;
    use mfsched_core::load_scenario;
    use mfsched_core::{DEFAULT_PROFILE_REPEATS, SamplingPlan};

    #[test]
    fn r_squared_of_a_perfect_and_a_mean_prediction() {
        let y = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(r_squared(&y, &y), 1.0);
        assert_eq!(r_squared(&y, &[2.5; 4]), 0.0);
        assert!(r_squared(&[2.0; 3], &[2.0; 3]).is_nan());
    }

    #[test]
    fn noise_leaves_little_unexplained() {
        let problem = load_scenario("paper-n3").expect("bundled").problem;
        let mut sim = Simulator::new(&problem, 5).expect("physics");
        let plan = SamplingPlan::for_problem(&problem, Some(400));
        let profile = run(
            &mut sim,
            &problem,
            "paper-n3",
            &plan,
            DEFAULT_PROFILE_REPEATS,
            5,
            &mut |_, _| {},
        )
        .expect("profile");
        for c in noise_ceiling(&profile, &problem, &sim) {
            assert!(c.r2 >= 0.97, "{c:?}");
            assert!(c.r2_relative > 0.5 && c.r2_relative <= 1.0, "{c:?}");
        }
    }
}
