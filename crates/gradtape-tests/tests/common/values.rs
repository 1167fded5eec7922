//! Deterministic test values, and their bits for exact comparisons.

use gradtape::Tensor;

/// `0.3 sin(0.37 i + k)` for the `i`-th element, as `f32`.
pub fn init(shape: &[usize], k: f64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(
        (0..n)
            .map(|i| (0.37 * i as f64 + k).sin() as f32 * 0.3)
            .collect::<Vec<_>>(),
        shape,
    )
    .unwrap()
}

/// `n` deterministic values in `[-1, 1)` (a linear congruential sequence
/// from `seed`).
pub fn uniform(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// `got` and `want` agree elementwise: NaN where `want` is NaN, the same
/// infinity where it is infinite, else within `rel` relative
/// (`|g - w| <= rel (1 + |w|)`).
pub fn agree(what: &str, got: &[f64], want: &[f64], rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= rel * (1.0 + w.abs())
        };
        assert!(ok, "{what}: {got:?} vs {want:?}");
    }
}

/// The values' bits (as `f64`), to compare bit for bit.
pub fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}
