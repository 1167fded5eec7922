//! Elementary functions of complex elements beyond `exp` and `ln` (see
//! `complex.rs`): square roots, trigonometric and hyperbolic functions,
//! reciprocal, logistic sigmoid and powers, written from the real functions
//! of the parts (`num-complex` is built without `std`).
//!
//! The formulas are chosen to stay finite where the result is: `tanh` uses
//! Kahan's form and its limit `±1` for large real parts (where `sinh²`
//! would overflow), `sqrt` takes the root of the larger of `(|z| ± re) / 2`
//! (no cancellation; of `z / 4`, doubled, where `|z|` nears the top of the
//! range) and follows the sign of a zero imaginary part, as C99's `csqrt`. Powers are `exp(p · ln z)` as TensorFlow computes them
//! (so `(-4)^0.5` is `1.2e-16 + 2i`, `0^0` is NaN), with `exp(-∞ + iy) = 0`.

use super::elementwise::{map, zip};
use crate::error::{Error, Result};
use crate::tensor::{with_complex_dtype, Complex, Element, Float, Tensor};

use super::complex::{c_abs, c_exp, c_ln};

/// The principal square root (branch cut on the negative real axis; the
/// sign of the imaginary part follows that of `im`, zeros included).
#[inline]
pub fn c_sqrt<T: Float>(z: Complex<T>) -> Complex<T> {
    let zero = T::zero();
    if z.re == zero && z.im == zero {
        return Complex::new(zero, z.im);
    }
    if z.im.is_infinite() {
        return Complex::new(T::infinity(), z.im);
    }
    let half = T::from_f64(0.5);
    let r = c_abs(z);
    // (a NaN `r` has a NaN part: not finite)
    if r >= T::max_value() * half && z.re.is_finite() && z.im.is_finite() {
        // `|z|` (or `|z| + |re|`) past the range while the root is not
        // (`3e38 + 3e38i` in `C64` gave `inf`): the root of `z / 4`, doubled
        // (both exact, by powers of two)
        let (quarter, two) = (T::from_f64(0.25), T::from_f64(2.0));
        let w = c_sqrt(Complex::new(z.re * quarter, z.im * quarter));
        return Complex::new(w.re * two, w.im * two);
    }
    if z.re >= zero {
        let t = ((r + z.re) * half).sqrt();
        Complex::new(t, z.im / (t + t))
    } else {
        let t = ((r - z.re) * half).sqrt();
        Complex::new(z.im.abs() / (t + t), t.copysign(z.im))
    }
}

/// `h · c` for `h` = `sinh x` (`odd`) or `cosh x`, without `h`'s overflow
/// where the product is finite: past `|x|` ≈ 710.5 (89.4 in `f32`) `h` is
/// infinite while `sinh 711 · cos 1.5 = 2.1e307` is not. There `h` is
/// `±e^|x| / 2` to the last bit, multiplied in by halves (as `c_exp`).
#[inline]
fn hyp_times<T: Float>(h: T, x: T, c: T, odd: bool) -> T {
    if h.is_infinite() && x.is_finite() {
        let e = (x.abs() * T::from_f64(0.5)).exp();
        let half = e * (c * T::from_f64(0.5)) * e;
        return if odd && x < T::zero() { -half } else { half };
    }
    h * c
}

/// `sin z = sin x cosh y + i cos x sinh y`.
#[inline]
pub fn c_sin<T: Float>(z: Complex<T>) -> Complex<T> {
    let y = z.im;
    Complex::new(
        hyp_times(y.cosh(), y, z.re.sin(), false),
        hyp_times(y.sinh(), y, z.re.cos(), true),
    )
}

/// `cos z = cos x cosh y - i sin x sinh y`.
#[inline]
pub fn c_cos<T: Float>(z: Complex<T>) -> Complex<T> {
    let y = z.im;
    Complex::new(
        hyp_times(y.cosh(), y, z.re.cos(), false),
        -hyp_times(y.sinh(), y, z.re.sin(), true),
    )
}

/// `sinh z = sinh x cos y + i cosh x sin y`.
#[inline]
pub fn c_sinh<T: Float>(z: Complex<T>) -> Complex<T> {
    if z.im == T::zero() {
        // exact for real arguments (and no NaN from inf * 0)
        return Complex::new(z.re.sinh(), z.im);
    }
    let x = z.re;
    Complex::new(
        hyp_times(x.sinh(), x, z.im.cos(), true),
        hyp_times(x.cosh(), x, z.im.sin(), false),
    )
}

/// `cosh z = cosh x cos y + i sinh x sin y`.
#[inline]
pub fn c_cosh<T: Float>(z: Complex<T>) -> Complex<T> {
    if z.im == T::zero() {
        return Complex::new(z.re.cosh(), z.im * z.re.sinh().signum());
    }
    let x = z.re;
    Complex::new(
        hyp_times(x.cosh(), x, z.im.cos(), false),
        hyp_times(x.sinh(), x, z.im.sin(), true),
    )
}

/// `tanh z` by Kahan's formula: with `t = tan y`, `s = sinh x`,
/// `ρ = √(1 + s²)`, `tanh z = (ρ s (1 + t²) + i t) / (1 + (1 + t²) s²)`;
/// for `|x|` past the point where `s²` overflows in the formula's terms, the
/// limit `±1 + i·4 sin y cos y e^{-2|x|}`.
#[inline]
pub fn c_tanh<T: Float>(z: Complex<T>) -> Complex<T> {
    let (x, y) = (z.re, z.im);
    // beyond this |x|, tanh x rounds to ±1 in f64 (and f32)
    if x.abs() > T::from_f64(22.0) {
        let e = (T::from_f64(-2.0) * x.abs()).exp();
        let four = T::from_f64(4.0);
        return Complex::new(T::one().copysign(x), four * y.sin() * y.cos() * e);
    }
    let t = y.tan();
    let b = T::one() + t * t;
    let s = x.sinh();
    let rho = (T::one() + s * s).sqrt();
    let den = T::one() + b * s * s;
    Complex::new(b * rho * s / den, t / den)
}

/// `tan z = -i tanh(iz)`.
#[inline]
pub fn c_tan<T: Float>(z: Complex<T>) -> Complex<T> {
    let w = c_tanh(Complex::new(-z.im, z.re));
    Complex::new(w.im, -w.re)
}

/// `exp` that also gives `0` for a real part of `-∞` whatever the
/// imaginary part, and `∞ + i NaN` for `+∞` with a non-finite one (C99's
/// `cexp`, which TensorFlow's powers meet at `z = 0`).
#[inline]
fn c_exp_ext<T: Float>(z: Complex<T>) -> Complex<T> {
    if z.re == T::neg_infinity() {
        return Complex::new(T::zero(), T::zero());
    }
    if z.re == T::infinity() && !z.im.is_finite() {
        return Complex::new(T::infinity(), T::nan());
    }
    c_exp(z)
}

/// `z^p = exp(p · ln z)`, as TensorFlow computes complex powers.
#[inline]
pub(crate) fn c_pow<T: Float>(z: Complex<T>, p: Complex<T>) -> Complex<T> {
    c_exp_ext(p * c_ln(z))
}

/// `1 / z` (by Smith's division: no overflow or underflow of `|z|²`).
#[inline]
pub(crate) fn c_recip<T: Float>(z: Complex<T>) -> Complex<T> {
    super::complex::c_div(Complex::new(T::one(), T::zero()), z)
}

/// The logistic sigmoid `1 / (1 + e^{-z})`.
#[inline]
pub(crate) fn c_sigmoid<T: Float>(z: Complex<T>) -> Complex<T> {
    c_recip(Complex::new(T::one(), T::zero()) + c_exp(-z))
}

/// Which function [`unary`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fn1 {
    Sqrt,
    Rsqrt,
    Reciprocal,
    Sin,
    Cos,
    Tan,
    Sinh,
    Cosh,
    Tanh,
    Sigmoid,
}

fn expect_complex(op: &'static str, x: &Tensor) -> Result<()> {
    if x.dtype().is_complex() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            dtype: x.dtype(),
            expected: "complex64 or complex128",
        })
    }
}

/// `f(z)` on every element of a complex tensor.
pub(crate) fn unary(op: &'static str, x: &Tensor, f: Fn1) -> Result<Tensor> {
    expect_complex(op, x)?;
    with_complex_dtype!(x.dtype(), C => match f {
        Fn1::Sqrt => map::<C, C>(op, x, c_sqrt),
        Fn1::Rsqrt => map::<C, C>(op, x, |z| c_recip(c_sqrt(z))),
        Fn1::Reciprocal => map::<C, C>(op, x, c_recip),
        Fn1::Sin => map::<C, C>(op, x, c_sin),
        Fn1::Cos => map::<C, C>(op, x, c_cos),
        Fn1::Tan => map::<C, C>(op, x, c_tan),
        Fn1::Sinh => map::<C, C>(op, x, c_sinh),
        Fn1::Cosh => map::<C, C>(op, x, c_cosh),
        Fn1::Tanh => map::<C, C>(op, x, c_tanh),
        Fn1::Sigmoid => map::<C, C>(op, x, c_sigmoid),
    }, _ => unreachable!("checked"))
}

/// `z^c` for a real constant `c`.
pub(crate) fn pow_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    expect_complex("pow_scalar", x)?;
    with_complex_dtype!(x.dtype(), C => map::<C, C>("pow_scalar", x, |z: C| c_pow(z, C::from_f64(c))),
        _ => unreachable!("checked"))
}

/// `a^b` elementwise with broadcasting, two complex tensors of one dtype.
pub(crate) fn pow(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op: "pow",
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    expect_complex("pow", a)?;
    with_complex_dtype!(a.dtype(), C => zip::<C, C, C>("pow", a, b, c_pow), _ => unreachable!("checked"))
}
