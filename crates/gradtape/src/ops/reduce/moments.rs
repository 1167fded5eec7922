//! Moments over any set of axes: population `variance` and `std`.

use super::*;
use crate::error::Result;
use crate::ops::expect_float;
use crate::tensor::Tensor;

impl Tensor {
    /// Population variance over `axes` (floats; divides by n, as
    /// `tf.math.reduce_variance`). Built from differentiable ops. NaN over an
    /// empty set of elements.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]);
    /// assert_eq!(x.variance(&[0], false)?.to_scalar::<f64>()?, 1.25);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn variance(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        expect_float("variance", self)?;
        norm_axes("variance", axes, self.shape())?;
        let mu = self.mean(axes, true)?;
        self.sub(&mu)?.square()?.mean(axes, keepdims)
    }

    /// Population standard deviation over `axes`: `√variance` (floats). Its
    /// gradient is infinite where the variance is 0 (as TensorFlow).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1.0f64, 3.0]);
    /// assert_eq!(x.std(&[0], false)?.to_scalar::<f64>()?, 1.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn std(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        expect_float("std", self)?;
        self.variance(axes, keepdims).map_err(|e| e.for_op("std"))?.sqrt()
    }
}
