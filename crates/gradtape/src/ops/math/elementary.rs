//! Special elementwise functions of one float tensor: `expm1`, `log1p`,
//! `rsqrt`, `reciprocal`, `erf`, `erfc`.
//!
//! `erf`, `erfc`, `expm1` and `log1p` come from the `libm` crate (accurate
//! to an ulp or so in both precisions, which the gradient checker needs),
//! except `erf` in `f32` (and the half types), which is the crate's own
//! vectorisable `kernels::cpu::erf` (within 2 ulp).
//! Every rule here is elementwise, `g · f'(x)`.

use crate::dispatch::vjp;
use crate::error::Result;
use crate::ops::desc::Unary;
use crate::ops::{bind, grads};
use crate::tensor::Tensor;

/// `f(v)` on every element of a float tensor; `v: T` is `f32` or `f64`.
macro_rules! fmap {
    ($op:expr, $x:expr, |$v:ident| $body:expr) => {
        $crate::tensor::with_float_dtype!($x.dtype(), T => {
            #[allow(unused_imports)]
            use $crate::ops::math::elementary::LibmExt as _;
            #[allow(unused_imports)]
            use num_traits::{Float as _, One as _, Zero as _};
            #[allow(unused_imports)]
            use $crate::tensor::Element as _;
            $crate::kernels::cpu::elementwise::map::<T, T>($op, $x, |$v: T| $body)
        }, _ => Err($crate::ops::unsupported($op, $x.dtype(), "a float dtype")))
    };
}
pub(crate) use fmap;

/// The `libm` functions that `std` lacks (or computes less portably), for
/// both float types.
pub trait LibmExt: Sized {
    fn erf_(self) -> Self;
    fn erfc_(self) -> Self;
    fn expm1_(self) -> Self;
    fn log1p_(self) -> Self;
    /// `asinh` and `acosh` as libm computes them: `ln|x| + ln 2` where
    /// `x² + 1` is `x²` (std's forms overflow to inf above half the
    /// largest float, where the value is still ~710, or ~89 in f32).
    fn asinh_(self) -> Self;
    fn acosh_(self) -> Self;
    /// `atanh` as libm computes it, from `|x|` with the sign put back:
    /// std's `0.5·ln_1p(2x / (1 − x))` cancels for `x` near −1, where
    /// `1 + 2x/(1 − x)` is tiny (f32 `atanh(−0.999999)` came out −7.2192
    /// for −7.2477, 0.4 % off).
    fn atanh_(self) -> Self;
    /// The nearest integer, halves to even.
    fn round_even_(self) -> Self;
}

impl LibmExt for f64 {
    #[inline]
    fn erf_(self) -> f64 {
        libm::erf(self)
    }
    #[inline]
    fn erfc_(self) -> f64 {
        libm::erfc(self)
    }
    #[inline]
    fn expm1_(self) -> f64 {
        libm::expm1(self)
    }
    #[inline]
    fn log1p_(self) -> f64 {
        libm::log1p(self)
    }
    #[inline]
    fn asinh_(self) -> f64 {
        libm::asinh(self)
    }
    #[inline]
    fn acosh_(self) -> f64 {
        if self < 1.0 {
            f64::NAN
        } else {
            libm::acosh(self)
        }
    }
    #[inline]
    fn atanh_(self) -> f64 {
        libm::atanh(self)
    }
    #[inline]
    fn round_even_(self) -> f64 {
        self.round_ties_even()
    }
}

impl LibmExt for f32 {
    #[inline]
    fn erf_(self) -> f32 {
        crate::kernels::cpu::erf::erf_f32(self)
    }
    #[inline]
    fn erfc_(self) -> f32 {
        libm::erfcf(self)
    }
    #[inline]
    fn expm1_(self) -> f32 {
        libm::expm1f(self)
    }
    #[inline]
    fn log1p_(self) -> f32 {
        libm::log1pf(self)
    }
    #[inline]
    fn asinh_(self) -> f32 {
        libm::asinhf(self)
    }
    #[inline]
    fn acosh_(self) -> f32 {
        // (libm's acoshf is finite at some x < 1: -3.12 at -90)
        if self < 1.0 {
            f32::NAN
        } else {
            libm::acoshf(self)
        }
    }
    #[inline]
    fn atanh_(self) -> f32 {
        libm::atanhf(self)
    }
    #[inline]
    fn round_even_(self) -> f32 {
        self.round_ties_even()
    }
}

/// The half types: the `f32` function, rounded back (as TensorFlow's
/// half kernels compute in `f32`).
macro_rules! libm_half {
    ($($t:ty),*) => {$(
        impl LibmExt for $t {
            #[inline]
            fn erf_(self) -> $t {
                <$t>::from_f32(crate::kernels::cpu::erf::erf_f32(self.to_f32()))
            }
            #[inline]
            fn erfc_(self) -> $t {
                <$t>::from_f32(libm::erfcf(self.to_f32()))
            }
            #[inline]
            fn expm1_(self) -> $t {
                <$t>::from_f32(libm::expm1f(self.to_f32()))
            }
            #[inline]
            fn log1p_(self) -> $t {
                <$t>::from_f32(libm::log1pf(self.to_f32()))
            }
            #[inline]
            fn asinh_(self) -> $t {
                <$t>::from_f32(libm::asinhf(self.to_f32()))
            }
            #[inline]
            fn acosh_(self) -> $t {
                <$t>::from_f32(self.to_f32().acosh_())
            }
            #[inline]
            fn atanh_(self) -> $t {
                <$t>::from_f32(libm::atanhf(self.to_f32()))
            }
            #[inline]
            fn round_even_(self) -> $t {
                <$t>::from_f32(self.to_f32().round_ties_even())
            }
        }
    )*};
}
libm_half!(crate::tensor::f16, crate::tensor::bf16);

/// `2/√π`.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// Records a one-input elementwise op whose rule is `g · d(x, y)`.
pub(crate) fn elementwise(
    op: Unary,
    x: &Tensor,
    y: Tensor,
    d: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Tensor {
    let xc = x.clone();
    bind(op, &[x], y, move |y| {
        let y = y.clone();
        vjp(move |g, _| Ok(grads![Some(g[0].mul(&d(&xc, &y)?)?)]))
    })
}

/// [`elementwise`] with a derivative of the output `y` whose product with
/// a zero cotangent is 0 even where the derivative is infinite or NaN
/// (`√x`, `1/√x`, `1/x` at 0, below 0, at NaN): TensorFlow's `SqrtGrad`,
/// `RsqrtGrad` and `ReciprocalGrad` kernels, so that a branch a `where`
/// or a clip leaves out adds no NaN to the gradient.
pub(crate) fn guarded_elementwise(
    op: Unary,
    x: &Tensor,
    y: Tensor,
    d: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Tensor {
    // (forward mode has a rule of its own: one derived from the reverse
    // rule at a zero cotangent would be 0)
    let d = std::sync::Arc::new(d);
    let dj = d.clone();
    crate::ops::bind_jvp(
        op,
        &[x],
        y,
        move |y| {
            let y = y.clone();
            vjp(move |g, _| Ok(grads![Some(zero_cotangent_is_zero(&g[0], g[0].mul(&d(&y)?)?)?)]))
        },
        move |t, y| crate::ops::only(t)?.mul(&dj(y)?),
    )
}

/// `v` (= `g · d`), but 0 where the cotangent `g` is 0 and `v` is NaN
/// (`0 · inf`, `0 · NaN`, `0 / 0`). Only there: selecting 0 wherever `g`
/// is 0 also zeroed the derivative of the rule w.r.t. `g` there (which is
/// `d`), so second derivatives through a zero cotangent were wrong in
/// both modes (`x · rsqrt(Σx²)` at `x = (c, -c)`, whose reduced
/// cotangent is exactly 0: random_programs seed 61's program 9590).
pub(crate) fn zero_cotangent_is_zero(g: &Tensor, v: Tensor) -> Result<Tensor> {
    let undefined = g.eq(&g.scalar_like(0.0)?)?.logical_and(&v.is_nan()?)?;
    Tensor::where_(&undefined, &v.scalar_like(0.0)?, &v)
}

impl Tensor {
    /// `eˣ - 1`, accurate near 0. d/dx = eˣ.
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1e-10f64);
    /// assert!((x.expm1()?.to_scalar::<f64>()? - 1.00000000005e-10).abs() < 1e-24);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn expm1(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Expm1, "expm1", self)?;
        Ok(elementwise(Unary::Expm1, self, y, |x, _| x.exp()))
    }

    /// `ln(1 + x)`, accurate near 0. d/dx = 1 / (1 + x).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1e-10f64);
    /// assert!((x.log1p()?.to_scalar::<f64>()? - 0.99999999995e-10).abs() < 1e-24);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn log1p(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Log1p, "log1p", self)?;
        Ok(elementwise(Unary::Log1p, self, y, |x, _| {
            x.add_scalar(1.0)?.reciprocal()
        }))
    }

    /// `1 / √x`. d/dx = -y³ / 2.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[4.0f32, 0.25]);
    /// assert_eq!(x.rsqrt()?.to_vec::<f32>()?, vec![0.5, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn rsqrt(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::rsqrt(self);
        }
        let y = super::table::float_unary(Unary::Rsqrt, "rsqrt", self)?;
        // (-y/2 · y · y: y³ first would overflow f32 where the slope,
        // up to 2.3e38 at 1.7e-26, does not)
        Ok(guarded_elementwise(Unary::Rsqrt, self, y, |y| {
            y.mul_scalar(-0.5)?.mul(y)?.mul(y)
        }))
    }

    /// `1 / x`. d/dx = -y².
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[4.0f64, -0.5]);
    /// assert_eq!(x.reciprocal()?.to_vec::<f64>()?, vec![0.25, -2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn reciprocal(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::reciprocal(self);
        }
        let y = super::table::float_unary(Unary::Reciprocal, "reciprocal", self)?;
        Ok(guarded_elementwise(Unary::Reciprocal, self, y, |y| y.square()?.neg()))
    }

    /// The error function. d/dx = 2/√π · e^(-x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.0f64, 1.0]);
    /// let y = x.erf()?.to_vec::<f64>()?;
    /// assert!(y[0] == 0.0 && (y[1] - 0.8427007929497149).abs() < 1e-15);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn erf(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Erf, "erf", self)?;
        Ok(elementwise(Unary::Erf, self, y, |x, _| {
            x.square()?.neg()?.exp()?.mul_scalar(TWO_OVER_SQRT_PI)
        }))
    }

    /// The complementary error function `1 - erf(x)`, accurate for large x.
    /// d/dx = -2/√π · e^(-x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(0.0f32);
    /// assert_eq!(x.erfc()?.to_scalar::<f32>()?, 1.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn erfc(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Erfc, "erfc", self)?;
        Ok(elementwise(Unary::Erfc, self, y, |x, _| {
            x.square()?.neg()?.exp()?.mul_scalar(-TWO_OVER_SQRT_PI)
        }))
    }
}
