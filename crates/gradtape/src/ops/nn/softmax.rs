//! Softmax and log-softmax along an axis.
//!
//! Both have their own stable kernels (the maximum along the axis is
//! subtracted before exponentiating); their rules are written with public
//! ops, so they differentiate again.

use super::super::desc::NnOp;
use super::super::{bind, expect_float, grads};
use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::nn as k;
use crate::tensor::layout::norm_axis;
use crate::tensor::{with_float_dtype, Tensor};

impl Tensor {
    /// `exp(x) / sum(exp(x))` along `axis` (negative counts from the end),
    /// computed stably. Rule: `(g − Σ g·y) · y`, the sum along `axis`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let y = Tensor::vector(&[0.0f64, 0.0]).softmax(-1)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![0.5, 0.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        expect_float("softmax", self)?;
        let ax = norm_axis("softmax", axis, self.shape())?;
        let cpu = |x: &Tensor| with_float_dtype!(x.dtype(), T => k::softmax::<T>("softmax", x, ax, false), _ => unreachable!());
        let y = match crate::dispatch::device::offload(
            "softmax",
            &[self],
            |_| crate::kernels::cuda::softmax("softmax", self, ax, false),
            |h| cpu(&h[0]),
        ) {
            Some(r) => r?,
            None => cpu(self)?,
        };
        Ok(bind(NnOp::Softmax(ax as isize), &[self], y, move |y| {
            let y = y.clone();
            vjp(move |g, _| {
                // (g − Σ g·y) · y: one rounding of the difference, where
                // g·y − (Σ g·y)·y cancels two rounded products (in f32 the
                // second derivative was off by 1.6e-4 at rows [0, 1])
                let a = ax as isize;
                let s = g[0].mul(&y)?.sum(&[a], false)?.expand_dims(a)?;
                Ok(grads![Some(g[0].sub(&s)?.mul(&y)?)])
            })
        }))
    }

    /// `x − log Σ exp(x)` along `axis`, computed stably. Rule:
    /// `g − softmax(x) · Σ g` along `axis`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let y = Tensor::vector(&[1000.0f64, 1000.0]).log_softmax(0)?;
    /// assert!((y.to_vec::<f64>()?[0] + 2f64.ln()).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        expect_float("log_softmax", self)?;
        let ax = norm_axis("log_softmax", axis, self.shape())?;
        let cpu = |x: &Tensor| with_float_dtype!(x.dtype(), T => k::softmax::<T>("log_softmax", x, ax, true), _ => unreachable!());
        let y = match crate::dispatch::device::offload(
            "log_softmax",
            &[self],
            |_| crate::kernels::cuda::softmax("log_softmax", self, ax, true),
            |h| cpu(&h[0]),
        ) {
            Some(r) => r?,
            None => cpu(self)?,
        };
        Ok(bind(NnOp::LogSoftmax(ax as isize), &[self], y, move |y| {
            let y = y.clone();
            vjp(move |g, _| {
                let a = ax as isize;
                let s = g[0].sum(&[a], false)?.expand_dims(a)?;
                Ok(grads![Some(g[0].sub(&s.mul(&y.exp()?)?)?)])
            })
        }))
    }
}
