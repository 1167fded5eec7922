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

/// The values' bits (as `f64`), to compare bit for bit.
pub fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}
