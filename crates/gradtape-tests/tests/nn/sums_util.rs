//! Helpers shared by the fused-op test files (`attention.rs`,
//! `attention_dropout.rs`, `layer_norm.rs`): the bench's deterministic
//! inputs and two weighted sums that summarise a tensor for comparison
//! with reference values.
#![allow(dead_code)]

use gradtape::{DType, Tensor};

/// `scale · sin(0.37 i + k)` (the bench's `init`), in f64.
pub fn init(shape: &[usize], k: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| scale * (0.37 * i as f64 + k).sin()).collect(), shape).unwrap()
}

/// `(Σ o, Σ o[i] sin(0.1 i))`, in f64.
pub fn wsum(o: &Tensor) -> (f64, f64) {
    let v = o.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let w = v.iter().enumerate().map(|(i, x)| x * (0.1 * i as f64).sin()).sum();
    (v.iter().sum(), w)
}

/// Both sums within `tol` relative (plus `tol` absolute).
pub fn close_sums(got: (f64, f64), want: (f64, f64), tol: f64, what: &str) {
    assert!(
        (got.0 - want.0).abs() <= tol * (1.0 + want.0.abs()) && (got.1 - want.1).abs() <= tol * (1.0 + want.1.abs()),
        "{what}: got {got:?}, want {want:?}"
    );
}
