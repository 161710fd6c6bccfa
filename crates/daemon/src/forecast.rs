//! One-step-ahead forecasts of the offered load: the daemon decides for the
//! period to come, so it decides on the load it expects next, not the last one
//! it saw. Three forecasters, each a few lines, chosen by `workload.forecast`;
//! `mfsched bench forecast` measures them on the eight dynamic traces (the
//! default is the one that measured best there; docs/production.md has the table).

use serde::{Deserialize, Serialize};

/// Which forecaster; the parameters are fixed (measured, not tuned per deployment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForecastKind {
    /// The last observation.
    Last,
    /// Exponentially weighted moving average, α = [`EWMA_ALPHA`].
    Ewma,
    /// Holt's linear trend: level α = [`HOLT_ALPHA`], trend β = [`HOLT_BETA`],
    /// the trend damped by φ = [`HOLT_PHI`] so a ramp's end is not overshot for long.
    Holt,
}

impl ForecastKind {
    pub const ALL: [ForecastKind; 3] = [Self::Last, Self::Ewma, Self::Holt];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Last => "last",
            Self::Ewma => "ewma",
            Self::Holt => "holt",
        }
    }
}

/// The default forecaster (measured: `mfsched bench forecast`).
pub const DEFAULT_FORECAST: ForecastKind = ForecastKind::Last;

pub const EWMA_ALPHA: f64 = 0.5;
pub const HOLT_ALPHA: f64 = 0.6;
pub const HOLT_BETA: f64 = 0.2;
pub const HOLT_PHI: f64 = 0.8;

/// A forecaster's state: feed it each observation, ask for the next.
#[derive(Debug, Clone, PartialEq)]
pub struct Forecaster {
    kind: ForecastKind,
    level: Option<f64>,
    trend: f64,
}

impl Forecaster {
    pub fn new(kind: ForecastKind) -> Self {
        Self {
            kind,
            level: None,
            trend: 0.0,
        }
    }

    pub fn kind(&self) -> ForecastKind {
        self.kind
    }

    /// Takes one observation (non-finite ones are ignored).
    pub fn observe(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        let Some(level) = self.level else {
            self.level = Some(x);
            return;
        };
        match self.kind {
            ForecastKind::Last => self.level = Some(x),
            ForecastKind::Ewma => self.level = Some(EWMA_ALPHA * x + (1.0 - EWMA_ALPHA) * level),
            ForecastKind::Holt => {
                let next = HOLT_ALPHA * x + (1.0 - HOLT_ALPHA) * (level + HOLT_PHI * self.trend);
                self.trend = HOLT_BETA * (next - level) + (1.0 - HOLT_BETA) * HOLT_PHI * self.trend;
                self.level = Some(next);
            }
        }
    }

    /// The forecast of the next observation; `None` before the first.
    pub fn next(&self) -> Option<f64> {
        self.level.map(|l| match self.kind {
            ForecastKind::Holt => l + HOLT_PHI * self.trend,
            _ => l,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_forecaster_follows_a_constant_and_holt_follows_a_ramp() {
        for kind in ForecastKind::ALL {
            let mut f = Forecaster::new(kind);
            assert_eq!(f.next(), None);
            for _ in 0..20 {
                f.observe(0.65);
            }
            let next = f.next().expect("observed");
            assert!((next - 0.65).abs() < 1e-12, "{kind:?}: {next}");
            f.observe(f64::NAN);
            assert_eq!(f.next(), Some(next), "a NaN is ignored");
        }
        // On a ramp, the trend forecaster is ahead of the last value; EWMA lags it.
        let ramp: Vec<f64> = (0..30).map(|i| 0.4 + 0.02 * f64::from(i)).collect();
        let after = |kind| {
            let mut f = Forecaster::new(kind);
            ramp.iter().for_each(|&x| f.observe(x));
            f.next().expect("observed")
        };
        let last = *ramp.last().expect("ramp");
        assert!(after(ForecastKind::Holt) > last);
        assert!((after(ForecastKind::Last) - last).abs() < 1e-12);
        assert!(after(ForecastKind::Ewma) < last);
    }
}
