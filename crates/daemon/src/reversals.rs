//! Reversal damping: a model that goes back to the configuration it left,
//! within a window of ticks of leaving it, pays more for its next changes.
//!
//! A prediction read from the state a configuration makes can favour the
//! other configuration from either side (from A's state B looks better, from
//! B's state A does): the model flips every few ticks, each flip a reload or a
//! restart that its small predicted gain pays for on paper only. Every
//! reversal doubles the model's reconfiguration costs (up to `max_factor`);
//! each `window` ticks without one halves them again. A change that keeps
//! paying survives the higher price, a flip does not. The utility sees the
//! damped costs as it sees the measured ones, and the decision log records
//! them, so `replay` decides with the prices the daemon decided with.

use mfsched_core::ReconfigCosts;

/// How reversals are damped (`actuator.reversal_window_ticks`,
/// `actuator.reversal_max_factor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReversalDamping {
    /// A change back to the configuration left at most this many ticks
    /// before is a reversal; this many ticks without one halve the factor.
    pub window_ticks: u64,
    /// The largest factor (a power of two at most).
    pub max_factor: f64,
}

/// One model's last change and its current doublings.
#[derive(Debug, Clone, Default)]
struct ModelReversals {
    /// The tick of its last change and the configuration it left then.
    last_change: Option<(u64, u32)>,
    doublings: u32,
    /// The tick its doublings last rose or fell.
    since: u64,
}

/// A model whose costs rose: it went back to `config` `after_ticks` after
/// leaving it, and its costs are now `factor` times the undamped ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reversal {
    pub model: usize,
    pub config: u32,
    pub after_ticks: u64,
    pub factor: f64,
}

/// Every model's reversals.
#[derive(Debug, Clone)]
pub struct Reversals {
    damping: ReversalDamping,
    max_doublings: u32,
    models: Vec<ModelReversals>,
}

impl Reversals {
    pub fn new(damping: ReversalDamping, models: usize) -> Self {
        let max_doublings = damping.max_factor.max(1.0).log2().floor() as u32;
        Self {
            damping,
            max_doublings,
            models: vec![ModelReversals::default(); models],
        }
    }

    /// Notes tick `tick`'s change from `previous` to `applied`; the models
    /// whose costs rose at it.
    pub fn observe(&mut self, tick: u64, previous: &[u32], applied: &[u32]) -> Vec<Reversal> {
        let window = self.damping.window_ticks;
        let mut rose = Vec::new();
        for (i, m) in self.models.iter_mut().enumerate() {
            let (Some(&from), Some(&to)) = (previous.get(i), applied.get(i)) else {
                continue;
            };
            if from != to {
                if let Some((at, left)) = m.last_change
                    && left == to
                    && tick.saturating_sub(at) <= window
                {
                    // At the cap a reversal keeps the factor where it is.
                    m.since = tick;
                    if m.doublings < self.max_doublings {
                        m.doublings += 1;
                        rose.push(Reversal {
                            model: i,
                            config: to,
                            after_ticks: tick - at,
                            factor: f64::from(1u32 << m.doublings),
                        });
                    }
                }
                m.last_change = Some((tick, from));
            }
            if m.doublings > 0 && tick.saturating_sub(m.since) >= window {
                m.doublings -= 1;
                m.since = tick;
            }
        }
        rose
    }

    /// The window: a change back within it is a reversal, and this many
    /// ticks without one halve the factor.
    pub fn window_ticks(&self) -> u64 {
        self.damping.window_ticks
    }

    /// Model `i`'s factor now.
    pub fn factor(&self, i: usize) -> f64 {
        self.models
            .get(i)
            .map_or(1.0, |m| f64::from(1u32 << m.doublings))
    }

    /// `base` (each model's undamped costs) times each model's factor, at
    /// most 1: a change never costs more than the model's whole reward.
    pub fn priced(&self, base: &[ReconfigCosts]) -> Vec<ReconfigCosts> {
        base.iter()
            .enumerate()
            .map(|(i, c)| {
                let f = self.factor(i);
                let damped = |cost: f64| (cost * f).min(1.0).max(cost);
                ReconfigCosts {
                    variant_switch: damped(c.variant_switch),
                    knob_change: damped(c.knob_change),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reversals() -> Reversals {
        Reversals::new(
            ReversalDamping {
                window_ticks: 10,
                max_factor: 4.0,
            },
            2,
        )
    }

    #[test]
    fn going_back_within_the_window_doubles_the_costs_up_to_the_cap() {
        let mut r = reversals();
        assert!(r.observe(0, &[0, 0], &[1, 0]).is_empty(), "a first change");
        let rose = r.observe(3, &[1, 0], &[0, 0]);
        assert_eq!(
            rose,
            vec![Reversal {
                model: 0,
                config: 0,
                after_ticks: 3,
                factor: 2.0
            }]
        );
        assert_eq!(r.factor(1), 1.0, "the other model is untouched");
        assert_eq!(r.observe(5, &[0, 0], &[1, 0])[0].factor, 4.0);
        // At the cap: flips go on at most 4×, say nothing more, and keep it
        // there as long as they go on.
        for tick in (6..30).step_by(5) {
            assert!(r.observe(tick, &[1, 0], &[0, 0]).is_empty());
            assert!(r.observe(tick + 1, &[0, 0], &[1, 0]).is_empty());
        }
        assert_eq!(r.factor(0), 4.0);
        let base = [ReconfigCosts {
            variant_switch: 0.05,
            knob_change: 0.3,
        }; 2];
        let priced = r.priced(&base);
        assert_eq!(
            (priced[0].variant_switch, priced[0].knob_change),
            (0.2, 1.0),
            "times 4, at most 1"
        );
        assert_eq!(priced[1], base[1]);
    }

    #[test]
    fn a_change_that_does_not_go_back_or_comes_back_late_is_no_reversal() {
        let mut r = reversals();
        r.observe(0, &[0, 0], &[1, 0]);
        assert!(
            r.observe(2, &[1, 0], &[2, 0]).is_empty(),
            "onwards, not back"
        );
        assert!(
            r.observe(13, &[2, 0], &[1, 0]).is_empty(),
            "back to 1, 11 ticks after leaving it"
        );
        assert_eq!(r.factor(0), 1.0);
    }

    #[test]
    fn each_window_without_a_reversal_halves_the_factor() {
        let mut r = reversals();
        r.observe(0, &[0, 0], &[1, 0]);
        r.observe(1, &[1, 0], &[0, 0]);
        r.observe(2, &[0, 0], &[1, 0]);
        assert_eq!(r.factor(0), 4.0);
        for tick in 3..12 {
            r.observe(tick, &[1, 0], &[1, 0]);
        }
        assert_eq!(r.factor(0), 4.0, "9 quiet ticks");
        r.observe(12, &[1, 0], &[1, 0]);
        assert_eq!(r.factor(0), 2.0, "10 quiet ticks");
        for tick in 13..=22 {
            r.observe(tick, &[1, 0], &[1, 0]);
        }
        assert_eq!(r.factor(0), 1.0);
    }
}
