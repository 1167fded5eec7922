//! What the tests against Keras's attention and Transformer layers share
//! with their scripts (`tests/reference/transformer.py`,
//! `keras_attention_masks.py`, `keras_hub_blocks.py`,
//! `keras_dot_attention.py`): the inputs and weights `fill(shape, k)`, the
//! loss `weighted(out)` whose gradients they compare, and the comparison.

use gradtape::{DType, Result, Tensor};

/// `0.5 sin(0.7 i + k)` over the row-major index `i`, in `dtype`.
pub fn fill(shape: &[usize], k: f64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| 0.5 * (0.7 * i as f64 + k).sin()).collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// `Σ o[i] sin(0.1 i)`, the scripts' `weighted`.
pub fn weighted(o: &Tensor) -> Result<Tensor> {
    let n = o.shape().iter().product::<usize>();
    let w: Vec<f64> = (0..n).map(|i| (0.1 * i as f64).sin()).collect();
    o.mul(&Tensor::from_vec(w, o.shape())?.cast(o.dtype())?)?.sum_all()
}

/// Every element of `got` within `tol · max(|want|, 1)` of `want`'s.
pub fn assert_close(name: &str, got: &Tensor, want: &[f64], tol: f64) {
    let got = got.to_vec_f64();
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{name}[{i}]: got {g}, want {w}"
        );
    }
}
