//! What the differential tests against TensorFlow share (`tf_*.rs`): the
//! data files' numbers, the weighted loss whose gradients they compare,
//! and the comparison itself.

use gradtape::{Result, Tensor};

/// A list of floats (`,`-separated, as Python's `repr`), or `None` for
/// `none` (no gradient).
pub fn floats(s: &str) -> Option<Vec<f64>> {
    (s != "none").then(|| {
        s.split(',')
            .map(|v| v.parse().unwrap_or_else(|_| panic!("bad number {v}")))
            .collect()
    })
}

/// `Σ w[i] y[i]` over the flattened `y`, `w[i] = 1 + i/2`: the loss whose
/// gradients the reference scripts print.
pub fn weighted(y: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..y.numel()).map(|i| 1.0 + 0.5 * i as f64).collect();
    y.reshape(&[y.numel()])?
        .mul(&Tensor::vector(&w).cast(y.dtype())?)?
        .sum_all()
}

/// Whether `got` is TensorFlow's `want`: both NaN, equal (zeros of either
/// sign alike), or within `rel` of `|want|` or of `scale` (the magnitude
/// of a result whose near-zero elements carry its roundoff), whichever is
/// larger.
pub fn agrees(got: f64, want: f64, rel: f64, scale: f64) -> bool {
    (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= rel * want.abs().max(scale)
}
