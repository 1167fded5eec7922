//! Sums and means over any set of axes.

use super::*;
use crate::dispatch::vjp;
use crate::ops::desc::{Lazy, Op, Reduce, ReduceKind as DescKind};
use crate::ops::{bind_jvp, grads, only};

impl Tensor {
    /// Sum over `axes`. d/dx = 1, broadcast back.
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(x.sum(&[0], false)?.to_vec::<f32>()?, vec![4.0, 6.0]);
    /// assert_eq!(x.sum(&[-1], true)?.shape(), &[2, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        let ax = norm_axes("sum", axes, self.shape())?;
        let y = raw_reduce("sum", self, &ax, keepdims, ReduceKind::Sum)?;
        let shape: crate::tensor::Shape = self.shape().into();
        Ok(bind_jvp(
            Lazy("Sum", || Op::Reduce(Reduce::new(DescKind::Sum, axes, keepdims))),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(unreduce(&g[0], &shape, &ax)?)])),
            |t, _| only(t)?.sum(axes, keepdims),
        ))
    }

    /// Sum of every element (a scalar).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(&all_axes(self), false)
    }

    /// Mean over `axes`. d/dx = 1/n, broadcast back. Integers as
    /// TensorFlow's: the sum (`i32`s summed in `i64`, `i64`s wrapping)
    /// divided by the count, truncated toward zero; an empty mean is 0.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// assert_eq!(Tensor::vector(&[-1i32, -2, -4]).mean(&[0], false)?.to_vec::<i32>()?, vec![-2]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return crate::ops::math::complex::mean(self, axes, keepdims);
        }
        if self.dtype().is_int() {
            let ax = norm_axes("mean", axes, self.shape())?;
            let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
            // (an empty sum is 0, and 0 / 1 is TensorFlow's 0)
            let n = n.max(1) as f64;
            return match self.dtype() {
                DType::I32 => self
                    .cast(DType::I64)?
                    .sum(axes, keepdims)?
                    .div_scalar(n)?
                    .cast(DType::I32),
                _ => self.sum(axes, keepdims)?.div_scalar(n),
            };
        }
        crate::ops::expect_float("mean", self)?;
        if self.dtype().is_half() {
            // sum and divide in f32, round once (TensorFlow's mean of half
            // types): no overflow of a large sum, no second rounding
            return self.cast(DType::F32)?.mean(axes, keepdims)?.cast(self.dtype());
        }
        let ax = norm_axes("mean", axes, self.shape())?;
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        self.sum(axes, keepdims)?.div_scalar(n as f64)
    }

    /// Mean of every element (a scalar).
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean(&all_axes(self), false)
    }
}
