//! Trigonometric and hyperbolic functions beyond `sin`, `cos` and `tanh`:
//! `tan`, `asin`, `acos`, `atan`, `sinh`, `cosh`, `asinh`, `acosh`,
//! `atanh` (floats), and `atan2` of two tensors (broadcasting). Every rule
//! is elementwise, `g · f'(x)`. Outside its domain a
//! function gives NaN, as in TensorFlow.

// (the half types take their math from `num_traits::Float`)
use super::elementary::elementwise;
use crate::dispatch::vjp;
use crate::error::Result;
use crate::ops::desc::{Binary, Unary};
use crate::ops::{bind, expect_float, expect_same_dtype, grads};
use crate::tensor::Tensor;
#[allow(unused_imports)]
use num_traits::Float as _;

/// `1 - x²` for the slopes of `asin`, `acos` and `atanh`: its value is
/// `(1 - x)(1 + x)` where `|x| < 2`, exact to an ulp beside `x = ±1`,
/// where `1 - x²` from a rounded `x²` cancels (f32 `asin`'s slope at
/// `1 - 2^-13` came out 64 for 64.002, 256 ulps off; TensorFlow's and
/// PyTorch's too); its derivative is `-2x`'s (the product's, `-(1 + x) +
/// (1 - x)`, cancels near 0 and is NaN at ±1, where the second
/// derivatives are ±inf).
fn one_minus_sq(x: &Tensor) -> Result<Tensor> {
    let sq = x.square()?.neg()?.add_scalar(1.0)?;
    let exact = x.neg()?.add_scalar(1.0)?.mul(&x.add_scalar(1.0)?)?;
    let near = x.abs()?.lt_scalar(2.0)?;
    let zeros = Tensor::zeros_on(x.shape(), x.dtype(), x.device())?;
    let correction = Tensor::where_(&near, &exact.sub(&sq)?, &zeros)?;
    sq.add(&correction.stop_gradient())
}

impl Tensor {
    /// Tangent. d/dx = 1 + tan²x.
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(std::f64::consts::FRAC_PI_4);
    /// assert!((x.tan()?.to_scalar::<f64>()? - 1.0).abs() < 1e-15);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn tan(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::tan(self);
        }
        let y = super::table::float_unary(Unary::Tan, "tan", self)?;
        Ok(elementwise(Unary::Tan, self, y, |_, y| y.square()?.add_scalar(1.0)))
    }

    /// Arcsine (NaN outside `[-1, 1]`). d/dx = 1 / √(1 - x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1.0f64);
    /// assert_eq!(x.asin()?.to_scalar::<f64>()?, std::f64::consts::FRAC_PI_2);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn asin(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Asin, "asin", self)?;
        Ok(elementwise(Unary::Asin, self, y, |x, _| one_minus_sq(x)?.rsqrt()))
    }

    /// Arccosine (NaN outside `[-1, 1]`). d/dx = -1 / √(1 - x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1.0f64);
    /// assert_eq!(x.acos()?.to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn acos(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Acos, "acos", self)?;
        Ok(elementwise(Unary::Acos, self, y, |x, _| {
            one_minus_sq(x)?.rsqrt()?.neg()
        }))
    }

    /// Arctangent. d/dx = 1 / (1 + x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1.0f64);
    /// assert_eq!(x.atan()?.to_scalar::<f64>()?, std::f64::consts::FRAC_PI_4);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn atan(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Atan, "atan", self)?;
        Ok(elementwise(Unary::Atan, self, y, |x, _| {
            x.square()?.add_scalar(1.0)?.reciprocal()
        }))
    }

    /// Hyperbolic sine. d/dx = cosh x.
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(0.0f32);
    /// assert_eq!(x.sinh()?.to_scalar::<f32>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sinh(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::sinh(self);
        }
        let y = super::table::float_unary(Unary::Sinh, "sinh", self)?;
        Ok(elementwise(Unary::Sinh, self, y, |x, _| x.cosh()))
    }

    /// Hyperbolic cosine. d/dx = sinh x.
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(0.0f32);
    /// assert_eq!(x.cosh()?.to_scalar::<f32>()?, 1.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cosh(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::cosh(self);
        }
        let y = super::table::float_unary(Unary::Cosh, "cosh", self)?;
        Ok(elementwise(Unary::Cosh, self, y, |x, _| x.sinh()))
    }

    /// Inverse hyperbolic sine. d/dx = 1 / √(x² + 1), computed as
    /// `1 / cosh(y)` (TensorFlow's `AsinhGrad`), which does not overflow
    /// where `x²` does (`1e-300` at `1e300`, not 0).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(0.0f64);
    /// assert_eq!(x.asinh()?.to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn asinh(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Asinh, "asinh", self)?;
        Ok(elementwise(Unary::Asinh, self, y, |_, y| y.cosh()?.reciprocal()))
    }

    /// Inverse hyperbolic cosine (NaN below 1). d/dx = 1 / sinh(acosh x)
    /// (= 1 / √(x² - 1) for x ≥ 1), NaN below 1 where the value is NaN,
    /// as TensorFlow's `AcoshGrad` (`1 / √(x² - 1)` alone gave a finite
    /// slope at -2, where there is no function to have one).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1.0f64);
    /// assert_eq!(x.acosh()?.to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn acosh(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Acosh, "acosh", self)?;
        Ok(elementwise(Unary::Acosh, self, y, |_, y| y.sinh()?.reciprocal()))
    }

    /// Inverse hyperbolic tangent (NaN outside `[-1, 1]`). d/dx = 1 / (1 - x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(0.0f64);
    /// assert_eq!(x.atanh()?.to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn atanh(&self) -> Result<Tensor> {
        let y = super::table::float_unary(Unary::Atanh, "atanh", self)?;
        Ok(elementwise(Unary::Atanh, self, y, |x, _| one_minus_sq(x)?.reciprocal()))
    }

    /// The angle of the point `(x, y)` = `(rhs, self)`: `atan2(self, rhs)` in
    /// `(-π, π]`, broadcasting (floats). d/dy = x / (x² + y²),
    /// d/dx = -y / (x² + y²).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::vector(&[1.0f64, 0.0]).atan2(&Tensor::vector(&[0.0f64, -1.0]))?;
    /// assert_eq!(a.to_vec::<f64>()?, vec![std::f64::consts::FRAC_PI_2, std::f64::consts::PI]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn atan2(&self, rhs: &Tensor) -> Result<Tensor> {
        expect_float("atan2", self)?;
        expect_same_dtype("atan2", self, rhs)?;
        let y = super::table::binary_or(Binary::Atan2, "atan2", self, rhs, || {
            unreachable!("atan2 of {}: checked above", self.dtype())
        })?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind(Binary::Atan2, &[self, rhs], y, move |_| {
            vjp(move |g, needs| {
                let r = g[0].div(&a.square()?.add(&b.square()?)?)?;
                let ga = needs[0].then(|| r.mul(&b)?.sum_to_shape(a.shape())).transpose()?;
                let gb = needs[1]
                    .then(|| r.mul(&a)?.neg()?.sum_to_shape(b.shape()))
                    .transpose()?;
                Ok(grads![ga, gb])
            })
        }))
    }
}
