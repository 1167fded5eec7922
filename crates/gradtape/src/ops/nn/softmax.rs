//! Softmax and log-softmax along an axis.
//!
//! Both have their own stable kernels (the maximum along the axis is
//! subtracted before exponentiating); their rules are written with public
//! ops, so they differentiate again. Half-precision tensors are computed
//! in `f32` and rounded once.

use super::super::desc::NnOp;
use super::super::{bind, expect_float, grads};
use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::elementwise::cast;
use crate::kernels::cpu::nn as k;
use crate::tensor::layout::norm_axis;
use crate::tensor::{with_float_dtype, DType, Tensor};

/// `kernel(x)`, for a half-precision `x` computed in `f32` and rounded
/// once: `x` converted to `f32`, the `f32` kernel, the result rounded back
/// (as the GPU's kernels compute the half types, and as Keras computes a
/// half softmax; reductions here accumulate in `f32`). The kernel's `f16`
/// instance had run every step in half arithmetic, each element converted
/// and rounded per operation, its row sums rounded to `f16` as they grew:
/// 7.6 ms for a softmax over [16, 64, 128], 140x its `f32` kernel.
fn half_in_f32(x: &Tensor, kernel: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    if !x.dtype().is_half() {
        return kernel(x);
    }
    // (the raw conversions: this runs inside the op, recorded as one)
    cast(&kernel(&cast(x, DType::F32)?)?, x.dtype())
}

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
        let cpu = |x: &Tensor| {
            half_in_f32(
                x,
                |x| with_float_dtype!(x.dtype(), T => k::softmax::<T>("softmax", x, ax, false), _ => unreachable!()),
            )
        };
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
        let cpu = |x: &Tensor| {
            half_in_f32(
                x,
                |x| with_float_dtype!(x.dtype(), T => k::softmax::<T>("log_softmax", x, ax, true), _ => unreachable!()),
            )
        };
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
