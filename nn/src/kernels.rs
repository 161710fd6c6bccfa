//! Inner loops written so the compiler vectorises them without fast-math.
//!
//! A plain `iter().sum()` of products is a strict left-to-right chain of float
//! additions, which LLVM may not reorder, so it stays scalar. Eight independent
//! partial sums give it eight lanes to fill; the final combination order is fixed,
//! so results stay bit-reproducible.

/// Σ a[k]·b[k] over the shorter of the two slices.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// y[k] += alpha · x[k].
#[inline]
pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// `out[r][o] = bias[o] + Σ_k w[o][k] · x[r][k]` for `rows` rows; `w` row-major
/// `[outputs][inputs]` (PyTorch's `Linear.weight` layout).
pub fn dense_forward(x: &[f32], w: &[f32], bias: &[f32], inputs: usize, out: &mut [f32]) {
    let outputs = bias.len();
    for (xr, yr) in x.chunks_exact(inputs).zip(out.chunks_exact_mut(outputs)) {
        for ((y, wo), b) in yr.iter_mut().zip(w.chunks_exact(inputs)).zip(bias) {
            *y = b + dot(wo, xr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_plain_sum_on_every_length() {
        for n in 0..40 {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum();
            assert!((f64::from(dot(&a, &b)) - plain).abs() < 1e-5, "n = {n}");
        }
    }

    #[test]
    fn dense_forward_by_hand() {
        // Two rows, three inputs, two outputs.
        let x = [1.0, 2.0, 3.0, -1.0, 0.0, 1.0];
        let w = [1.0, 0.0, -1.0, 0.5, 0.5, 0.5];
        let mut out = [0.0; 4];
        dense_forward(&x, &w, &[0.1, -0.1], 3, &mut out);
        assert_eq!(out, [0.1 - 2.0, -0.1 + 3.0, 0.1 - 2.0, -0.1 + 0.0]);
    }
}
