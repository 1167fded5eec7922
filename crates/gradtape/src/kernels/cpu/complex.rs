//! Kernels for the complex dtypes (`C64` = `Complex<f32>`, `C128` =
//! `Complex<f64>`).
//!
//! Data movement (views, copies, gather, select, broadcasting maps and zips)
//! is generic over [`Element`] and needs nothing here. What does: the
//! elementary functions (`num-complex` is built without `std`, so `exp`,
//! `ln`, `abs` and `arg` are written here from the real ones), the parts
//! (`re`, `im`) and their inverse, sums (done on the real and imaginary
//! parts with the real reduction kernel, which sums in blocks accumulated in
//! `f64`), scatter-add, and casts to and from complex.

use num_traits::Zero;

use super::elementwise::{map, zip};
use super::reduce::{reduce, ReduceKind};
use crate::error::{Error, Result};
use crate::tensor::{with_complex_dtype, with_dtype, Complex, DType, Element, Float, Shape, Tensor};

/// `e^z = e^re (cos im + i sin im)`.
#[inline]
pub(crate) fn c_exp<T: Float>(z: Complex<T>) -> Complex<T> {
    let r = z.re.exp();
    if z.im == T::zero() {
        // exact for real arguments (and no NaN from inf * 0)
        return Complex::new(r, z.im);
    }
    if r.is_infinite() && z.re.is_finite() {
        // e^re overflows where e^re·cos(im) or e^re·sin(im) may not (e^710
        // · cos 1.5 = 1.6e307): by halves, (e^(re/2)·cos im)·e^(re/2)
        let h = (z.re * T::from_f64(0.5)).exp();
        return Complex::new(h * z.im.cos() * h, h * z.im.sin() * h);
    }
    Complex::new(r * z.im.cos(), r * z.im.sin())
}

/// The principal logarithm `ln|z| + i arg z` (branch cut on the negative
/// real axis, as TensorFlow and NumPy). Where `|z|` overflows with finite
/// parts (`3e38 + 3e38i` in `C64`), `ln|z/2| + ln 2`: the logarithm is
/// finite (88.94 there, not infinite).
#[inline]
pub(crate) fn c_ln<T: Float>(z: Complex<T>) -> Complex<T> {
    let r = c_abs(z);
    if r.is_infinite() && z.re.is_finite() && z.im.is_finite() {
        let half = T::from_f64(0.5);
        let re = c_abs(Complex::new(z.re * half, z.im * half)).ln() + T::from_f64(std::f64::consts::LN_2);
        return Complex::new(re, c_arg(z));
    }
    Complex::new(r.ln(), c_arg(z))
}

/// `|z|`, without overflow for large parts.
#[inline]
pub(crate) fn c_abs<T: Float>(z: Complex<T>) -> T {
    z.re.hypot(z.im)
}

/// `x / y` by Smith's algorithm: the quotient of the larger part of `y`
/// first, so that moduli near the ends of the range neither overflow nor
/// underflow (`1 / (1e-200 + 1e-200i)` is `5e199 − 5e199i`, where the
/// textbook `conj(y) / |y|²` gives `inf − inf·i`, and `1 / (inf + 0i)` is
/// 0). A zero `y` gives C99's (Annex G) infinities, as XLA (JAX) and
/// C's `__divdc3` do: each part of `x` times an infinity of the sign of
/// `y`'s real part, so `(1 + i) / 0` is `inf + inf·i`, `1 / 0` is `inf +
/// NaN·i` and `0 / 0` is NaN (num-complex's textbook form gave NaN for
/// all three, and TensorFlow's kernels give varying signs).
#[inline]
pub(crate) fn c_div<T: Float>(x: Complex<T>, y: Complex<T>) -> Complex<T> {
    let (a, b, c, d) = (x.re, x.im, y.re, y.im);
    if c == T::zero() && d == T::zero() {
        let inf = T::infinity().copysign(c);
        return Complex::new(inf * a, inf * b);
    }
    if c.abs() >= d.abs() {
        let r = d / c;
        let den = c + d * r;
        Complex::new((a + b * r) / den, (b - a * r) / den)
    } else {
        let r = c / d;
        let den = c * r + d;
        Complex::new((a * r + b) / den, (b * r - a) / den)
    }
}

/// The argument `atan2(im, re)`, in `(-pi, pi]`.
#[inline]
pub(crate) fn c_arg<T: Float>(z: Complex<T>) -> T {
    z.im.atan2(z.re)
}

/// Fails unless `x` is complex.
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

/// `f(z)` on every element of a complex tensor, complex result.
macro_rules! cmap {
    ($op:expr, $x:expr, |$z:ident| $body:expr) => {{
        expect_complex($op, $x)?;
        with_complex_dtype!($x.dtype(), C => map::<C, C>($op, $x, |$z: C| $body), _ => unreachable!("checked"))
    }};
}

/// `f(z)` on every element of a complex tensor, real result (the parts' type).
macro_rules! rmap {
    ($op:expr, $x:expr, |$z:ident| $body:expr) => {{
        expect_complex($op, $x)?;
        match $x.dtype() {
            DType::C64 => map::<Complex<f32>, f32>($op, $x, |$z: Complex<f32>| $body),
            _ => map::<Complex<f64>, f64>($op, $x, |$z: Complex<f64>| $body),
        }
    }};
}

/// `e^z` elementwise.
pub(crate) fn exp(x: &Tensor) -> Result<Tensor> {
    cmap!("exp", x, |z| c_exp(z))
}

/// Principal `ln z` elementwise.
pub(crate) fn log(x: &Tensor) -> Result<Tensor> {
    cmap!("log", x, |z| c_ln(z))
}

/// `-z` elementwise.
pub(crate) fn neg(x: &Tensor) -> Result<Tensor> {
    cmap!("neg", x, |z| -z)
}

/// `conj z` elementwise.
pub(crate) fn conj(x: &Tensor) -> Result<Tensor> {
    cmap!("conj", x, |z| z.conj())
}

/// `z²` elementwise.
pub(crate) fn square(x: &Tensor) -> Result<Tensor> {
    cmap!("square", x, |z| z * z)
}

/// `z · c` for a real constant `c`: the complex product by `c + 0i`, with
/// C99's (Annex G) recovery of infinities, as TensorFlow: `(inf + inf i) · 2`
/// is `inf + inf i` (the plain product is NaN + NaN i), `(inf + i) · 2` is
/// `inf + NaN i`.
pub(crate) fn mul_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    cmap!("mul_scalar", x, |z| by_real(z, C::from_f64(c), false))
}

/// `z / c` for a real constant `c` (see [`mul_scalar`]).
pub(crate) fn div_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    cmap!("div_scalar", x, |z| by_real(z, C::from_f64(c), true))
}

/// `z · k` or `z / k` for `k = c + 0i`, where a result that is NaN in both
/// parts from an infinite `z` and a finite non-zero `c` is infinite in the
/// infinite parts of `z` (signs multiplied), NaN in the others.
fn by_real<F: num_traits::Float>(z: Complex<F>, k: Complex<F>, div: bool) -> Complex<F> {
    let p = if div { z / k } else { z * k };
    let c = k.re;
    let recover =
        p.re.is_nan() && p.im.is_nan() && (z.re.is_infinite() || z.im.is_infinite()) && c.is_finite() && c != F::zero();
    if !recover {
        return p;
    }
    let part = |v: F| {
        if v.is_infinite() {
            if (v < F::zero()) == (c < F::zero()) {
                F::infinity()
            } else {
                F::neg_infinity()
            }
        } else {
            F::nan()
        }
    };
    Complex::new(part(z.re), part(z.im))
}

/// `z + c` for a real constant `c`.
pub(crate) fn add_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    cmap!("add_scalar", x, |z| z + C::from_f64(c))
}

/// `|z|` elementwise (real result).
pub(crate) fn abs(x: &Tensor) -> Result<Tensor> {
    rmap!("abs", x, |z| c_abs(z))
}

/// `arg z` elementwise (real result).
pub(crate) fn angle(x: &Tensor) -> Result<Tensor> {
    rmap!("angle", x, |z| c_arg(z))
}

/// The real parts.
pub(crate) fn re(x: &Tensor) -> Result<Tensor> {
    rmap!("real", x, |z| z.re)
}

/// The imaginary parts.
pub(crate) fn im(x: &Tensor) -> Result<Tensor> {
    rmap!("imag", x, |z| z.im)
}

/// `re + i im` with broadcasting; both real parts of one float dtype.
pub(crate) fn from_parts(op: &'static str, re: &Tensor, im: &Tensor) -> Result<Tensor> {
    if re.dtype() != im.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: re.dtype(),
            rhs: im.dtype(),
        });
    }
    crate::tensor::dtype::with_types!(re.dtype(), T => zip::<T, T, Complex<T>>(op, re, im, |a: T, b: T| Complex::new(a, b)),
        [F32: f32, F64: f64],
        _ => Err(Error::UnsupportedDType { op, dtype: re.dtype(), expected: "f32 or f64 parts" }))
}

/// `a ∘ b` elementwise with broadcasting, for two complex tensors of one dtype.
pub(crate) fn binary(op: &'static str, a: &Tensor, b: &Tensor, kind: BinKind) -> Result<Tensor> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    expect_complex(op, a)?;
    with_complex_dtype!(a.dtype(), C => match kind {
        BinKind::Add => zip::<C, C, C>(op, a, b, |x, y| x + y),
        BinKind::Sub => zip::<C, C, C>(op, a, b, |x, y| x - y),
        BinKind::Mul => zip::<C, C, C>(op, a, b, |x, y| x * y),
        BinKind::Div => zip::<C, C, C>(op, a, b, c_div),
    }, _ => unreachable!("checked"))
}

/// The elementwise arithmetic of [`binary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinKind {
    Add,
    Sub,
    Mul,
    Div,
}

/// Sum of a complex tensor over `axes` (normalised, sorted, unique): the
/// real reduction of each part. Only [`ReduceKind::Sum`] is defined; the op
/// layer rejects the others (complex numbers are not ordered).
pub(crate) fn reduce_sum(op: &'static str, x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    let (r, i) = (re(x)?, im(x)?);
    let (sr, si) = (
        reduce(op, &r, axes, ReduceKind::Sum)?,
        reduce(op, &i, axes, ReduceKind::Sum)?,
    );
    from_parts(op, &sr, &si)
}

/// The complex case of scatter-add (see `index::scatter_add`): zeros of
/// `shape` with each inner slice of `updates` added at its index.
pub(crate) fn scatter_add(
    updates: &Tensor,
    idx: &[i64],
    shape: &Shape,
    outer: usize,
    inner: usize,
    dim: usize,
) -> Result<Tensor> {
    fn run<C: Element + Zero>(u: &[C], idx: &[i64], outer: usize, inner: usize, dim: usize) -> Result<Vec<C>> {
        // (the caller checked the shape `[outer, dim, inner]`)
        let mut out = super::filled_vec("scatter_add", outer * dim * inner, C::zero())?;
        let outer = if out.is_empty() || u.is_empty() { 0 } else { outer };
        for o in 0..outer {
            for (j, &i) in idx.iter().enumerate() {
                let src = &u[(o * idx.len() + j) * inner..][..inner];
                let dst = &mut out[(o * dim + i as usize) * inner..][..inner];
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = *d + s;
                }
            }
        }
        Ok(out)
    }
    with_complex_dtype!(updates.dtype(), C => {
        let u = updates.values::<C>("scatter_add")?;
        Ok(Tensor::from_storage(C::into_storage(run::<C>(&u, idx, outer, inner, dim)?), shape))
    }, _ => Err(Error::UnsupportedDType { op: "scatter_add", dtype: updates.dtype(), expected: "a numeric dtype" }))
}

/// Converts to `to` where either side is complex: real to complex gives
/// imaginary part 0, complex to complex converts both parts. Complex to real
/// is refused (it would drop the imaginary part; take `real` instead).
pub(crate) fn cast(x: &Tensor, to: DType) -> Result<Tensor> {
    if x.dtype().is_complex() && !to.is_complex() {
        return Err(Error::invalid(
            "cast",
            format!(
                "cannot cast {} {:?} to the real dtype {to}: it would drop the imaginary part \
                 (take `real`, `imag` or `abs` instead)",
                x.dtype(),
                x.shape()
            ),
        ));
    }
    if (x.dtype(), to) == (DType::I64, DType::C64) {
        // one rounding, to f32 (not two, through f64): see the real cast
        return cast(&super::elementwise::cast(x, DType::F32)?, to);
    }
    with_dtype!(x.dtype(), S => with_complex_dtype!(to, D => map::<S, D>("cast", x, |v| D::from_c128(v.to_c128())),
        _ => unreachable!("checked")))
}
