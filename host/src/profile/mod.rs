//! Profiling: measuring joint configurations under the four workload regimes, and
//! the profile itself, in memory and on disk (`csv`, documented in
//! `docs/profile-format.md`).
//!
//! A profile row is one (joint configuration, workload regime) sample with the
//! throughput of every model and the observed aggregate state, `repeats`
//! measurements averaged. Which rows are measured is a [`SamplingPlan`]: the full
//! feasible grid for N ≤ 2 (the published N = 2 protocol), stratified sampling for
//! larger N (see [`sampling`]).

pub mod check;
pub mod csv;
pub mod sampling;

use crate::domain::{GpuState, JointConfig, ModelKind, Problem, ThroughputRange, WorkloadLevel};
use crate::sim::Simulator;
use anyhow::Result;

pub use self::csv::{read_csv, write_csv};
pub use sampling::SamplingPlan;

/// One (joint configuration, workload) sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRow {
    pub joint: JointConfig,
    pub workload: WorkloadLevel,
    /// The aggregate state observed while measuring (repeats averaged).
    pub state: GpuState,
    /// Per model, in the model's unit (tokens/s, FPS).
    pub throughput: Vec<f64>,
}

/// A profile of one scenario's models.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The scenario it was measured for (a bundled name or a scenario file path).
    pub scenario: String,
    /// Model instance names, in the scenario's order.
    pub models: Vec<String>,
    pub rows: Vec<ProfileRow>,
}

/// The unit a model kind's throughput is measured in.
pub fn throughput_unit(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Llm => "tokens/s",
        ModelKind::Vision => "FPS",
    }
}

/// Measurements averaged into one row unless asked otherwise.
pub const DEFAULT_REPEATS: u32 = 3;

impl Profile {
    /// Empirical quantile (e.g. 0.25 = P25, the default SLA floor) of model i's
    /// throughput: linear interpolation between order statistics (the common
    /// "type 7" definition). NaN for an empty profile; `q` is clamped to [0, 1].
    pub fn throughput_quantile(&self, i: usize, q: f64) -> f64 {
        let mut values: Vec<f64> = self.rows.iter().map(|r| r.throughput[i]).collect();
        if values.is_empty() {
            return f64::NAN;
        }
        values.sort_by(f64::total_cmp);
        let pos = q.clamp(0.0, 1.0) * (values.len() - 1) as f64;
        let lo = pos.floor() as usize;
        let hi = pos.ceil() as usize;
        values[lo] + (values[hi] - values[lo]) * (pos - lo as f64)
    }

    /// Per model, per variant min/max throughput (fills `Problem::throughput_ranges`).
    /// A variant the profile never measured gets its model's overall range, and a
    /// model without rows gets [0, 0], so the ranges are always defined.
    pub fn throughput_ranges(&self, problem: &Problem) -> Vec<Vec<ThroughputRange>> {
        problem
            .models
            .iter()
            .enumerate()
            .map(|(i, model)| {
                let range = |variant: Option<usize>| {
                    let mut values = self
                        .rows
                        .iter()
                        .filter(|r| {
                            variant.is_none_or(|v| model.configs[r.joint[i] as usize].variant == v)
                        })
                        .map(|r| r.throughput[i])
                        .peekable();
                    values.peek()?;
                    Some(values.fold(
                        ThroughputRange {
                            min: f64::INFINITY,
                            max: f64::NEG_INFINITY,
                        },
                        |acc, t| ThroughputRange {
                            min: acc.min.min(t),
                            max: acc.max.max(t),
                        },
                    ))
                };
                let overall = range(None).unwrap_or(ThroughputRange { min: 0.0, max: 0.0 });
                (0..model.variants.len())
                    .map(|v| range(Some(v)).unwrap_or(overall))
                    .collect()
            })
            .collect()
    }
}

/// Measures every point of `plan` on the simulator, `repeats` measurements averaged
/// per row. `progress(done, total)` is called after each row.
pub fn run(
    sim: &mut Simulator,
    problem: &Problem,
    scenario: &str,
    plan: &SamplingPlan,
    repeats: u32,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Profile> {
    let points = plan.points(problem, seed)?;
    let total = points.len();
    let mut rows = Vec::with_capacity(total);
    for (done, (joint, workload)) in points.into_iter().enumerate() {
        let m = sim.measure(&joint, workload, repeats);
        rows.push(ProfileRow {
            joint,
            workload,
            state: m.state,
            throughput: m.throughput,
        });
        progress(done + 1, total);
    }
    Ok(Profile {
        scenario: scenario.to_string(),
        models: problem.models.iter().map(|m| m.name.clone()).collect(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;

    fn paper_n2_profile(seed: u64) -> (Problem, Profile) {
        let problem = scenario::load("paper-n2").expect("bundled").problem;
        let mut sim = Simulator::new(&problem, seed).expect("physics");
        let profile = run(
            &mut sim,
            &problem,
            "paper-n2",
            &SamplingPlan::for_problem(&problem, None),
            DEFAULT_REPEATS,
            seed,
            &mut |_, _| {},
        )
        .expect("profile");
        (problem, profile)
    }

    #[test]
    fn paper_n2_profiles_to_the_published_648_rows() {
        let (_, profile) = paper_n2_profile(1);
        assert_eq!(profile.rows.len(), 648);
        for w in WorkloadLevel::ALL {
            assert_eq!(profile.rows.iter().filter(|r| r.workload == w).count(), 162);
        }
        assert_eq!(profile.models, ["llama3b", "yolo-a"]);
    }

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let row = |t: f64| ProfileRow {
            joint: vec![0],
            workload: WorkloadLevel::Low,
            state: GpuState {
                workload: WorkloadLevel::Low,
                vram_used_mib: 0.0,
                utilization: 0.0,
            },
            throughput: vec![t],
        };
        let profile = Profile {
            scenario: "x".into(),
            models: vec!["m".into()],
            rows: [40.0, 10.0, 30.0, 20.0, 50.0].map(row).to_vec(),
        };
        assert_eq!(profile.throughput_quantile(0, 0.0), 10.0);
        assert_eq!(profile.throughput_quantile(0, 0.25), 20.0);
        assert_eq!(profile.throughput_quantile(0, 0.5), 30.0);
        assert_eq!(profile.throughput_quantile(0, 0.625), 35.0);
        assert_eq!(profile.throughput_quantile(0, 1.0), 50.0);
        let empty = Profile {
            rows: vec![],
            ..profile
        };
        assert!(empty.throughput_quantile(0, 0.25).is_nan());
    }

    #[test]
    fn throughput_ranges_are_per_variant() {
        let (problem, profile) = paper_n2_profile(2);
        let ranges = profile.throughput_ranges(&problem);
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[0].len(), 2, "llama3b: fp16, awq");
        assert_eq!(ranges[1].len(), 3, "yolo-a: n, s, m");
        for (i, model) in problem.models.iter().enumerate() {
            for (v, range) in ranges[i].iter().enumerate() {
                let values: Vec<f64> = profile
                    .rows
                    .iter()
                    .filter(|r| model.configs[r.joint[i] as usize].variant == v)
                    .map(|r| r.throughput[i])
                    .collect();
                assert_eq!(
                    range.min,
                    values.iter().copied().fold(f64::INFINITY, f64::min)
                );
                assert_eq!(range.max, values.iter().copied().fold(0.0, f64::max));
                assert!(range.min < range.max);
            }
        }
        // YOLO11n is faster than YOLO11m in every sense.
        assert!(ranges[1][0].max > ranges[1][2].max);
    }
}
