//! Helpers shared by the f16/bf16 test files (`half.rs`, `half_nn.rs`) and
//! the bit-for-bit checks of other files:
//! bit patterns, distances in ulps, and the check of half gradients against
//! f64 gradients.
#![allow(dead_code)]

use gradtape::{bf16, f16, DType, GradientTape, Result, Tensor};

/// An f16 tensor from bit patterns.
pub fn f16s(bits: &[u16], shape: &[usize]) -> Tensor {
    Tensor::from_vec(bits.iter().map(|&b| f16::from_bits(b)).collect(), shape).unwrap()
}

/// A bf16 tensor from bit patterns.
pub fn bf16s(bits: &[u16], shape: &[usize]) -> Tensor {
    Tensor::from_vec(bits.iter().map(|&b| bf16::from_bits(b)).collect(), shape).unwrap()
}

/// The bit patterns of a half tensor's elements.
pub fn bits(t: &Tensor) -> Vec<u16> {
    match t.dtype() {
        DType::F16 => t.to_vec::<f16>().unwrap().iter().map(|x| x.to_bits()).collect(),
        DType::BF16 => t.to_vec::<bf16>().unwrap().iter().map(|x| x.to_bits()).collect(),
        d => panic!("not a half dtype: {d}"),
    }
}

/// The bit patterns of any float tensor's elements, widened to f64 (exact
/// for every float dtype): for bit-for-bit comparisons across dtypes.
pub fn f64_bits(t: &Tensor) -> Vec<u64> {
    t.cast(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// The distance in units in the last place between two finite halves of
/// one sign class (bit patterns are ordered like the values within a sign).
pub fn ulps(a: u16, b: u16) -> u32 {
    let key = |x: u16| {
        if x & 0x8000 != 0 {
            -((x & 0x7fff) as i32)
        } else {
            x as i32
        }
    };
    key(a).abs_diff(key(b))
}

/// `n` values from `lo` to `hi`, evenly spaced, as an f64 tensor of `shape`.
pub fn lin(n: usize, lo: f64, hi: f64, shape: &[usize]) -> Tensor {
    let v: Vec<f64> = (0..n).map(|i| lo + (hi - lo) * i as f64 / (n - 1) as f64).collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// Checks half gradients against the f64 gradients of the same function
/// at the same (half) point, cast down: normwise, `|g_half - g64| <= tol ·
/// max|g64|`.
///
/// The tolerance: each half op rounds its result with relative error at
/// most the unit roundoff `u` (2^-11 for f16, 2^-8 for bf16); a gradient
/// here goes through at most about 8 rounded ops forward and back, so its
/// error is below `8u` relative to the largest component (`4ε` with `ε = 2u`
/// the machine epsilon: 3.9e-3 for f16, 3.1e-2 for bf16).
pub fn check_half_gradient(dtype: DType, f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    let eps = if dtype == DType::F16 {
        2f64.powi(-10)
    } else {
        2f64.powi(-7)
    };
    let tol = 4.0 * eps;
    let grads = |xs: Vec<Tensor>| -> Vec<Tensor> {
        let tape = GradientTape::new();
        let y = tape
            .record(|| {
                for x in &xs {
                    tape.watch(x);
                }
                f(&xs)
            })
            .unwrap();
        tape.gradient(&y, &xs)
            .unwrap()
            .into_iter()
            .map(Option::unwrap)
            .collect()
    };
    let half: Vec<Tensor> = inputs.iter().map(|x| x.cast(dtype).unwrap()).collect();
    let wide: Vec<Tensor> = half.iter().map(|x| x.cast(DType::F64).unwrap()).collect();
    for (k, (gh, g64)) in grads(half).into_iter().zip(grads(wide)).enumerate() {
        assert_eq!(gh.dtype(), dtype, "the gradient of a {dtype} input is {dtype}");
        let (gh, g64) = (gh.to_vec_f64(), g64.to_vec_f64());
        let scale = g64.iter().fold(0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "input {k}: the f64 gradient is zero, nothing is checked");
        for (a, b) in gh.iter().zip(&g64) {
            assert!(
                (a - b).abs() <= tol * scale,
                "{dtype} input {k}: {a} vs f64 {b} (scale {scale})"
            );
        }
    }
}
