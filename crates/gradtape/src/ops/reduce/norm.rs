//! The Euclidean norm over any set of axes.

use super::*;
use crate::dispatch::vjp;
use crate::error::Result;
use crate::ops::desc::{Lazy, Op, Reduce, ReduceKind};
use crate::ops::{bind, expect_float, grads};
use crate::tensor::Tensor;

impl Tensor {
    /// Euclidean (L2) norm over `axes`: `√Σx²` (floats). d/dx = x / ‖x‖, and
    /// **0 where x is 0** (the minimal subgradient, as PyTorch;
    /// TensorFlow's composite gives NaN there). The value is TensorFlow's,
    /// `Σx²` included, so that `‖(1e-30, 1e-30)‖` is 0 in `f32`; the
    /// gradient there is still `x / ‖x‖` (0.707 each), from the norm of
    /// `x / max |x|` (TensorFlow's is infinite).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[3.0f64, 4.0]);
    /// assert_eq!(x.norm(&[0], false)?.to_scalar::<f64>()?, 5.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn norm(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        expect_float("norm", self)?;
        let ax = norm_axes("norm", axes, self.shape())?;
        // computed on an unwatched alias, untraced: nothing here is recorded
        // but the one `Norm` node
        let y = crate::dispatch::paused(crate::dispatch::Kind::Trace, || {
            self.stop_gradient().square()?.sum(&iaxes(&ax), keepdims)?.sqrt()
        })?;
        let x = self.clone();
        let desc = Lazy("Norm", || Op::Reduce(Reduce::new(ReduceKind::Norm, axes, keepdims)));
        Ok(bind(desc, &[self], y, move |y| {
            // the output itself (not a copy), so that the rule is differentiable
            let y = y.clone();
            vjp(move |g, _| {
                let yk = y.reshape(&kept_shape(x.shape(), &ax))?;
                // where the norm is 0 but x is not (Σx² underflowed: TF's
                // forward value, kept), x / ‖x‖ by the norm of x / max |x|
                // (LAPACK's scaling), and 1 where x is 0 (a 0 gradient)
                let one = yk.scalar_like(1.0)?;
                let m = x.abs()?.max(&iaxes(&ax), true)?;
                let m = Tensor::where_(&m.gt(&m.scalar_like(0.0)?)?, &m, &one)?;
                let rescaled = x.div(&m)?.square()?.sum(&iaxes(&ax), true)?.sqrt()?.mul(&m)?;
                let zero = yk.eq(&yk.scalar_like(0.0)?)?;
                let under = Tensor::where_(&rescaled.eq(&rescaled.scalar_like(0.0)?)?, &one, &rescaled)?;
                let safe = Tensor::where_(&zero, &under, &yk)?;
                let gx = unreduce(&g[0], x.shape(), &ax)?;
                Ok(grads![Some(gx.mul(&x.div(&safe)?)?)])
            })
        }))
    }
}
