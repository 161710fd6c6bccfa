//! Goodness-of-fit measures.

/// Coefficient of determination, 1 − SS_res / SS_tot, in f64.
///
/// `None` when it is undefined: no rows, mismatched lengths, or a constant truth
/// (SS_tot = 0).
pub fn r2(predicted: &[f32], truth: &[f32]) -> Option<f64> {
    if truth.is_empty() || predicted.len() != truth.len() {
        return None;
    }
    let mean = truth.iter().map(|&t| f64::from(t)).sum::<f64>() / truth.len() as f64;
    let ss_tot: f64 = truth.iter().map(|&t| (f64::from(t) - mean).powi(2)).sum();
    let ss_res: f64 = predicted
        .iter()
        .zip(truth)
        .map(|(&p, &t)| (f64::from(p) - f64::from(t)).powi(2))
        .sum();
    (ss_tot > 0.0).then(|| 1.0 - ss_res / ss_tot)
}

/// Mean and (population) standard deviation.
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_perfect_mean_and_undefined() {
        let t = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(r2(&t, &t), Some(1.0));
        assert_eq!(r2(&[2.5; 4], &t), Some(0.0));
        assert_eq!(r2(&[1.0, 1.0], &[3.0, 3.0]), None);
        assert_eq!(r2(&[], &[]), None);
        assert_eq!(r2(&[1.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn mean_std_of_a_known_sample() {
        let (m, s) = mean_std(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert_eq!(s, 2.0);
    }
}
