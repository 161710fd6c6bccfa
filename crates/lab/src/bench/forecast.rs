//! `mfsched bench forecast`: the daemon's load forecasters on the eight dynamic
//! traces. Each trace step draws the offered load the simulator would (ρ ~
//! Normal(ρ̄(level), σ(level)), clamped: the physics' own regimes), the
//! forecaster sees the loads up to tick t and forecasts tick t + 1, and the
//! forecast is scored by the regime it falls in against the regime tick t + 1
//! was in (what the decision for t + 1 is made for), and by its absolute error.

use anyhow::Result;
use mfsched_core::{TRACE_NAMES, WorkloadLevel, generate_trace};
use mfsched_daemon::DEFAULT_THRESHOLDS;
use mfsched_daemon::{ForecastKind, Forecaster};
use mfsched_rng::Rng;

use crate::sim::physics::PhysicsFile;

/// One forecaster on one trace, over every seed.
#[derive(Debug, Clone, PartialEq)]
pub struct ForecastScore {
    pub trace: &'static str,
    pub kind: ForecastKind,
    /// Ticks whose forecast regime was the next tick's regime.
    pub hits: usize,
    pub ticks: usize,
    /// Sum of |forecast − next load|.
    pub abs_error: f64,
}

impl ForecastScore {
    pub fn accuracy(&self) -> f64 {
        self.hits as f64 / self.ticks.max(1) as f64
    }
    pub fn mae(&self) -> f64 {
        self.abs_error / self.ticks.max(1) as f64
    }
}

/// Every forecaster on every trace, `seeds` seeds from `seed` on, `ticks` ticks each.
pub fn run(seed: u64, seeds: u64, ticks: usize) -> Result<Vec<ForecastScore>> {
    let workload = PhysicsFile::bundled()?.workload;
    let mut scores: Vec<ForecastScore> = TRACE_NAMES
        .iter()
        .flat_map(|&trace| {
            ForecastKind::ALL
                .into_iter()
                .map(move |kind| ForecastScore {
                    trace,
                    kind,
                    hits: 0,
                    ticks: 0,
                    abs_error: 0.0,
                })
        })
        .collect();
    for s in seed..seed + seeds {
        for (t, &name) in TRACE_NAMES.iter().enumerate() {
            let Some(trace) = generate_trace(name, ticks, s) else {
                continue;
            };
            let mut rng = Rng::derive(s, 1000 + t as u64);
            let loads: Vec<f64> = trace
                .levels
                .iter()
                .map(|&level| {
                    let l = workload.load(level);
                    workload.clamp(l.offered_load + l.spread * rng.normal())
                })
                .collect();
            for score in scores.iter_mut().filter(|sc| sc.trace == name) {
                let mut f = Forecaster::new(score.kind);
                for i in 0..loads.len() - 1 {
                    f.observe(loads[i]);
                    let next = f.next().unwrap_or(loads[i]);
                    if WorkloadLevel::of_ratio(next, &DEFAULT_THRESHOLDS) == trace.levels[i + 1] {
                        score.hits += 1;
                    }
                    score.abs_error += (next - loads[i + 1]).abs();
                    score.ticks += 1;
                }
            }
        }
    }
    Ok(scores)
}

/// Each forecaster's totals over every trace: (kind, accuracy, MAE).
pub fn overall(scores: &[ForecastScore]) -> Vec<(ForecastKind, f64, f64)> {
    ForecastKind::ALL
        .into_iter()
        .map(|kind| {
            let mine = scores.iter().filter(|s| s.kind == kind);
            let (hits, ticks, err) = mine.fold((0, 0, 0.0), |(h, t, e), s| {
                (h + s.hits, t + s.ticks, e + s.abs_error)
            });
            (
                kind,
                hits as f64 / ticks.max(1) as f64,
                err / ticks.max(1) as f64,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mfsched_core::DEFAULT_TRACE_TICKS;

    #[test]
    fn the_default_thresholds_are_the_midpoints_of_the_simulated_regimes() {
        let w = PhysicsFile::bundled().expect("physics").workload;
        let loads: Vec<f64> = WorkloadLevel::ALL
            .iter()
            .map(|&l| w.load(l).offered_load)
            .collect();
        for (k, t) in DEFAULT_THRESHOLDS.iter().enumerate() {
            let mid = (loads[k] + loads[k + 1]) / 2.0;
            assert!((t - mid).abs() < 1e-9, "boundary {k}: {t} vs {mid}");
        }
    }

    #[test]
    fn scores_are_reproducible_and_the_default_forecaster_is_the_most_accurate() {
        // The measurement `mfsched bench forecast` makes by default.
        let a = run(1, 5, DEFAULT_TRACE_TICKS).expect("run");
        assert_eq!(
            a,
            run(1, 5, DEFAULT_TRACE_TICKS).expect("run"),
            "same seeds, same scores"
        );
        assert_eq!(a.len(), TRACE_NAMES.len() * ForecastKind::ALL.len());
        assert!(a.iter().all(|s| s.ticks == 5 * (DEFAULT_TRACE_TICKS - 1)));
        let totals = overall(&a);
        let best = totals
            .iter()
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .expect("three forecasters");
        assert_eq!(
            best.0,
            mfsched_daemon::DEFAULT_FORECAST,
            "the default must be the one that measures best: {totals:?}"
        );
    }
}
