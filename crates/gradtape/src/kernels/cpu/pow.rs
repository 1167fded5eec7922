//! `x^c` for a constant `c` (the elementwise table's `PowScalar`), with
//! the exponents models use most computed without the C library's `pow`
//! (one call per element, 0.6-1.3 ms for `[32, 64, 128]` f32, where a
//! square or a square root takes 0.02): `x.pow_scalar(2.0)` in losses,
//! norms and RMS norms written by hand, `0.5` and `-0.5` for square roots,
//! `-1` for reciprocals, and `1`, `0` from the gradients of those
//! (`c·x^(c−1)`).
//!
//! Each form gives IEEE `pow`'s value at every input, special ones
//! included (`pow(−0, 0.5) = +0`, `pow(−inf, 0.5) = +inf`, `pow(x, 0) = 1`
//! even at NaN):
//! - `0`, `1`, `2`, `0.5` and `−1` are one correctly rounded operation
//!   (`1`, `x`, `x·x`, `√x`, `1/x`), in every type: the correctly rounded
//!   `pow`, which the C library's is to within its error (under 1 ulp);
//! - in `f32`, `3`, `−2`, `−0.5` and `1.5` are computed in `f64` from the
//!   exact square (or the square root, rounded once) and rounded to `f32`:
//!   within an `f32` rounding and a few `f64` ones of the exact power, so
//!   correctly rounded except within ~2⁻²⁸ ulp of a midpoint.
//!
//! Other exponents call the library's `powf`.

use crate::tensor::Float;

/// `out[i] = x[i]^c` (see the module docs).
#[inline(always)]
pub(crate) fn pow_scalar_slice<T: Float>(x: &[T], out: &mut [T], c: f64) {
    match c {
        0.0 => out.iter_mut().for_each(|o| *o = T::one()),
        1.0 => out.copy_from_slice(&x[..out.len()]),
        2.0 => map(x, out, |v| v * v),
        -1.0 => map(x, out, |v| T::one() / v),
        0.5 => map(x, out, sqrt_pow),
        _ => {
            let c = T::from(c).unwrap_or_else(T::nan);
            map(x, out, |v| v.powf(c))
        }
    }
}

/// `x^c` for `f32` (see the module docs): the forms of
/// [`pow_scalar_slice`], and those computed in `f64`.
#[inline(always)]
pub(crate) fn pow_scalar_f32(x: &[f32], out: &mut [f32], c: f64) {
    let wide = |v: f32| f64::from(v);
    match c {
        3.0 => map(x, out, |v| (wide(v) * wide(v) * wide(v)) as f32),
        -2.0 => map(x, out, |v| (1.0 / (wide(v) * wide(v))) as f32),
        -0.5 => map(x, out, |v| (1.0 / sqrt_pow(wide(v))) as f32),
        1.5 => map(x, out, |v| {
            let w = wide(v);
            // (−inf · NaN would be NaN: pow(−inf, 1.5) is +inf)
            if v == f32::NEG_INFINITY {
                f32::INFINITY
            } else {
                (w * w.sqrt()) as f32
            }
        }),
        _ => pow_scalar_slice(x, out, c),
    }
}

/// `pow(v, 0.5)`: `√v`, except `+0` at `−0` and `+inf` at `−inf` (where
/// `√` gives `−0` and NaN).
#[inline(always)]
fn sqrt_pow<T: Float>(v: T) -> T {
    if v == T::neg_infinity() {
        T::infinity()
    } else {
        // (−0 + 0 = +0; every other value unchanged)
        v.sqrt() + T::zero()
    }
}

#[inline(always)]
fn map<T: Copy>(x: &[T], out: &mut [T], f: impl Fn(T) -> T) {
    for (o, &v) in super::lockstep::zip(out, x) {
        *o = f(v);
    }
}
