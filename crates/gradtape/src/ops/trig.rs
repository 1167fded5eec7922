//! Trigonometric and hyperbolic functions beyond `sin`, `cos` and `tanh`:
//! `tan`, `asin`, `acos`, `atan`, `sinh`, `cosh`, `asinh`, `acosh`,
//! `atanh` (floats). Every rule is elementwise, `g · f'(x)`, hence batched.
//! Outside its domain a function gives NaN, as in TensorFlow.

use super::desc::Unary;
use super::unary2::{elementwise, fmap};
use crate::error::Result;
use crate::tensor::Tensor;

/// `1 - x²`.
fn one_minus_sq(x: &Tensor) -> Result<Tensor> {
    x.square()?.neg()?.add_scalar(1.0)
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
        let y = fmap!("tan", self, |v| v.tan())?;
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
        let y = fmap!("asin", self, |v| v.asin())?;
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
        let y = fmap!("acos", self, |v| v.acos())?;
        Ok(elementwise(Unary::Acos, self, y, |x, _| one_minus_sq(x)?.rsqrt()?.neg()))
    }

    /// Arctangent. d/dx = 1 / (1 + x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1.0f64);
    /// assert_eq!(x.atan()?.to_scalar::<f64>()?, std::f64::consts::FRAC_PI_4);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn atan(&self) -> Result<Tensor> {
        let y = fmap!("atan", self, |v| v.atan())?;
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
        let y = fmap!("sinh", self, |v| v.sinh())?;
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
        let y = fmap!("cosh", self, |v| v.cosh())?;
        Ok(elementwise(Unary::Cosh, self, y, |x, _| x.sinh()))
    }

    /// Inverse hyperbolic sine. d/dx = 1 / √(x² + 1).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(0.0f64);
    /// assert_eq!(x.asinh()?.to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn asinh(&self) -> Result<Tensor> {
        let y = fmap!("asinh", self, |v| v.asinh())?;
        Ok(elementwise(Unary::Asinh, self, y, |x, _| {
            x.square()?.add_scalar(1.0)?.rsqrt()
        }))
    }

    /// Inverse hyperbolic cosine (NaN below 1). d/dx = 1 / √(x² - 1).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(1.0f64);
    /// assert_eq!(x.acosh()?.to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn acosh(&self) -> Result<Tensor> {
        let y = fmap!("acosh", self, |v| v.acosh())?;
        Ok(elementwise(Unary::Acosh, self, y, |x, _| {
            x.square()?.add_scalar(-1.0)?.rsqrt()
        }))
    }

    /// Inverse hyperbolic tangent (NaN outside `[-1, 1]`). d/dx = 1 / (1 - x²).
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(0.0f64);
    /// assert_eq!(x.atanh()?.to_scalar::<f64>()?, 0.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn atanh(&self) -> Result<Tensor> {
        let y = fmap!("atanh", self, |v| v.atanh())?;
        Ok(elementwise(Unary::Atanh, self, y, |x, _| one_minus_sq(x)?.reciprocal()))
    }
}
