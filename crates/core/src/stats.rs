//! Quantiles and means: the one home for the summary statistics every report,
//! benchmark and floor uses.
//!
//! Two quantile definitions, each where it belongs:
//! - [`nearest_rank`] for latencies and gaps in reports and benchmarks: the
//!   value reported is always one that was measured.
//! - [`interpolated`] (the common "type 7": linear between order statistics)
//!   for SLA floors derived from profiles, where a smooth function of the data
//!   is wanted.

use std::time::Duration;

/// The `q` quantile of `values` by nearest rank (the ⌈q·n⌉-th smallest); NaN
/// when empty. `values` is sorted in place (total order: NaN last).
pub fn nearest_rank(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    nearest_rank_sorted(values, q)
}

/// [`nearest_rank`] of values already sorted ascending; NaN when empty.
pub fn nearest_rank_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The `q` quantile of `values` interpolated linearly between order statistics
/// ("type 7"); NaN when empty. `values` is sorted in place.
pub fn interpolated(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    values[lo] + (values[hi] - values[lo]) * (pos - lo as f64)
}

/// The `q` quantile (nearest rank) of durations, in milliseconds; NaN when empty.
pub fn quantile_ms(values: &[Duration], q: f64) -> f64 {
    let mut ms: Vec<f64> = values.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    nearest_rank(&mut ms, q)
}

/// The median (nearest rank) of durations; zero when empty.
pub fn median_duration(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = (sorted.len() as f64 * 0.5).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len().max(1)) - 1)
        .copied()
        .unwrap_or_default()
}

/// The arithmetic mean; 0 when empty.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_reports_a_measured_value() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(nearest_rank(&mut v, 0.5), 3.0);
        assert_eq!(nearest_rank(&mut v, 0.99), 5.0);
        assert_eq!(nearest_rank(&mut v, 0.0), 1.0);
        assert!(nearest_rank(&mut [], 0.5).is_nan());
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank_sorted(&sorted, 0.5), 50.0);
        assert_eq!(nearest_rank_sorted(&sorted, 0.99), 99.0);
        assert_eq!(nearest_rank_sorted(&sorted, 1.0), 100.0);
    }

    #[test]
    fn interpolated_is_linear_between_order_statistics() {
        let mut v = vec![40.0, 10.0, 30.0, 20.0, 50.0];
        assert_eq!(interpolated(&mut v, 0.0), 10.0);
        assert_eq!(interpolated(&mut v, 0.25), 20.0);
        assert_eq!(interpolated(&mut v, 0.625), 35.0);
        assert_eq!(interpolated(&mut v, 1.0), 50.0);
        assert!(interpolated(&mut [], 0.25).is_nan());
    }

    #[test]
    fn durations_and_means() {
        let ms = Duration::from_millis;
        assert_eq!(median_duration(&[ms(9), ms(1), ms(5)]), ms(5));
        assert_eq!(median_duration(&[]), Duration::ZERO);
        assert_eq!(quantile_ms(&[ms(2), ms(4)], 1.0), 4.0);
        assert_eq!(mean(&[1.0, 2.0, 3.0]), 2.0);
        assert_eq!(mean(&[]), 0.0);
    }
}
