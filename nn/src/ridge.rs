//! Ridge regression on standardised inputs: the linear field baseline of
//! `surrogate cv`, and the linear model a net with a linear skip
//! ([`crate::TrainConfig::linear_skip`]) learns its residual over.

/// Ridge penalty per training row, on standardised inputs: (ZᵀZ + λ·rows·I).
pub const RIDGE_PER_ROW: f64 = 1e-3;

/// A fitted linear model `y = intercept + Σ_j coef[j] · z[j]` of standardised
/// inputs `z`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ridge {
    pub coef: Vec<f64>,
    pub intercept: f64,
}

impl Ridge {
    /// Fits `y` on the `width`-wide rows of `z` (row-major; standardised, so
    /// that one penalty suits every column) with penalty
    /// `lambda_per_row · rows` on every coefficient but the intercept.
    pub fn fit(z: &[f64], y: &[f64], width: usize, lambda_per_row: f64) -> Self {
        let rows = y.len();
        let n = rows.max(1) as f64;
        let y_mean = y.iter().sum::<f64>() / n;
        let mut z_mean = vec![0.0; width];
        for zr in z.chunks_exact(width.max(1)) {
            for (m, v) in z_mean.iter_mut().zip(zr) {
                *m += v;
            }
        }
        z_mean.iter_mut().for_each(|m| *m /= n);
        // Normal equations of the centred columns:
        // (ZᵀZ + λ·rows·I) β = Zᵀ(y − ȳ).
        let mut a = vec![0.0; width * width];
        let mut b = vec![0.0; width];
        let mut zc = vec![0.0; width];
        for (zr, &yr) in z.chunks_exact(width.max(1)).zip(y) {
            for ((c, v), m) in zc.iter_mut().zip(zr).zip(&z_mean) {
                *c = v - m;
            }
            for (i, &zi) in zc.iter().enumerate() {
                b[i] += zi * (yr - y_mean);
                for (j, &zj) in zc.iter().enumerate() {
                    a[i * width + j] += zi * zj;
                }
            }
        }
        for i in 0..width {
            a[i * width + i] += lambda_per_row * rows as f64;
        }
        let coef = solve(a, b, width);
        let intercept = y_mean - coef.iter().zip(&z_mean).map(|(c, m)| c * m).sum::<f64>();
        Self { coef, intercept }
    }

    /// The penalty of `grid` (per row) whose fits predict held-out rows best:
    /// `folds`-fold cross-validation over `order` (a shuffled row order, its
    /// i-th row in fold i mod `folds`), each held-out row scored by
    /// `loss(row, prediction)`; ties go to the first.
    pub fn choose_penalty(
        z: &[f64],
        y: &[f64],
        width: usize,
        grid: &[f64],
        folds: usize,
        order: &[usize],
        loss: &dyn Fn(usize, f64) -> f64,
    ) -> f64 {
        let row = |r: usize| &z[r * width..(r + 1) * width];
        let mut best = (f64::INFINITY, grid[0]);
        for &lambda in grid {
            let mut total = 0.0;
            for k in 0..folds {
                let in_fold = |i: &usize| i % folds == k;
                let kept = || {
                    order
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !in_fold(i))
                        .map(|(_, &r)| r)
                };
                let zt: Vec<f64> = kept().flat_map(|r| row(r).iter().copied()).collect();
                let yt: Vec<f64> = kept().map(|r| y[r]).collect();
                let fit = Self::fit(&zt, &yt, width, lambda);
                total += order
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| in_fold(i))
                    .map(|(_, &r)| loss(r, fit.predict(row(r))))
                    .sum::<f64>();
            }
            if total < best.0 {
                best = (total, lambda);
            }
        }
        best.1
    }

    /// The prediction for one standardised row.
    pub fn predict(&self, z: &[f64]) -> f64 {
        self.intercept + self.coef.iter().zip(z).map(|(c, v)| c * v).sum::<f64>()
    }
}

/// Solves the symmetric positive-definite system `a x = b` (n × n, row-major)
/// by Gaussian elimination with partial pivoting (a zero pivot's unknown is 0).
pub fn solve(mut a: Vec<f64>, mut b: Vec<f64>, n: usize) -> Vec<f64> {
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .expect("non-empty");
        if pivot != col {
            for k in 0..n {
                a.swap(col * n + k, pivot * n + k);
            }
            b.swap(col, pivot);
        }
        let d = a[col * n + col];
        if d.abs() < 1e-300 {
            continue;
        }
        for row in col + 1..n {
            let f = a[row * n + col] / d;
            if f != 0.0 {
                for k in col..n {
                    a[row * n + k] -= f * a[col * n + k];
                }
                b[row] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let d = a[row * n + row];
        let s = b[row] - (row + 1..n).map(|k| a[row * n + k] * x[k]).sum::<f64>();
        x[row] = if d.abs() < 1e-300 { 0.0 } else { s / d };
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_recovers_a_known_solution() {
        let a = vec![4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 2.0];
        let x = [1.0, -2.0, 0.5];
        let b: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| a[i * 3 + j] * x[j]).sum())
            .collect();
        for (got, want) in solve(a, b, 3).iter().zip(x) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
    }

    #[test]
    fn a_light_penalty_recovers_a_linear_function() {
        // y = 3 + 2·z0 − z1 on a grid of centred inputs (35 rows: whole periods).
        let z: Vec<f64> = (0..35)
            .flat_map(|r| [f64::from(r % 7) - 3.0, f64::from(r % 5) - 2.0])
            .collect();
        let y: Vec<f64> = z.chunks_exact(2).map(|r| 3.0 + 2.0 * r[0] - r[1]).collect();
        let fit = Ridge::fit(&z, &y, 2, 1e-9);
        for (r, &want) in z.chunks_exact(2).zip(&y) {
            assert!((fit.predict(r) - want).abs() < 1e-3, "{r:?}");
        }
    }
}
