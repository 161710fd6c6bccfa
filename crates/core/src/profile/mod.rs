//! Profiles: measurements of joint configurations under the workload regimes, in
//! memory and on disk (`csv`, documented in
//! `docs/profile-format.md`).
//!
//! A profile row is one (joint configuration, workload regime) sample with the
//! throughput of every model and the observed aggregate state, `repeats`
//! measurements averaged (profiling runs themselves live in the lab, and, against
//! real servers, in live profiling). Which rows are measured is a [`SamplingPlan`]: the full
//! feasible grid for N ≤ 2 (the published N = 2 protocol), stratified sampling for
//! larger N (see [`sampling`]).

pub(crate) mod check;
pub(crate) mod csv;
pub(crate) mod sampling;

use crate::domain::{GpuState, JointConfig, Problem, ThroughputRange, WorkloadLevel};

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

/// One model measured alone (the others not running): its solo throughput in
/// one configuration, the reference of the relative-to-solo target.
#[derive(Debug, Clone, PartialEq)]
pub struct SoloRow {
    /// Index of the model in the scenario.
    pub model: usize,
    pub config: u32,
    pub state: GpuState,
    pub throughput: f64,
}

/// A profile of one scenario's models.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The scenario it was measured for (a bundled name or a scenario file path).
    pub scenario: String,
    /// Model instance names, in the scenario's order.
    pub models: Vec<String>,
    /// Co-location rows: every model running.
    pub rows: Vec<ProfileRow>,
    /// Solo rows: one model running alone (empty in simulator profiles).
    pub solo: Vec<SoloRow>,
}

/// Measurements averaged into one row unless asked otherwise.
pub const DEFAULT_REPEATS: u32 = 3;

impl Profile {
    /// Empirical quantile (e.g. 0.25 = P25, the default SLA floor) of model i's
    /// throughput: linear interpolation between order statistics (the common
    /// "type 7" definition). NaN for an empty profile; `q` is clamped to [0, 1].
    pub fn throughput_quantile(&self, i: usize, q: f64) -> f64 {
        let mut values: Vec<f64> = self.rows.iter().map(|r| r.throughput[i]).collect();
        crate::stats::interpolated(&mut values, q)
    }

    /// Per model, per configuration: the mean of its solo rows' throughput
    /// (over workloads and repeats), `None` where it was never measured alone.
    pub fn solo_table(&self, problem: &Problem) -> Vec<Vec<Option<f64>>> {
        let mut sums: Vec<Vec<(f64, u32)>> = problem
            .models
            .iter()
            .map(|m| vec![(0.0, 0); m.grid_size()])
            .collect();
        for row in &self.solo {
            if let Some(slot) = sums
                .get_mut(row.model)
                .and_then(|t| t.get_mut(row.config as usize))
            {
                slot.0 += row.throughput;
                slot.1 += 1;
            }
        }
        sums.into_iter()
            .map(|t| {
                t.into_iter()
                    .map(|(sum, n)| (n > 0).then(|| sum / f64::from(n)))
                    .collect()
            })
            .collect()
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
