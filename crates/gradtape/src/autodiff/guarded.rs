//! The guarded products and quotients `xlogy`, `xlog1py` (0 where `x` is
//! 0) and `divide_no_nan` (0 where `y` is 0), with TensorFlow's gradients.
//!
//! The values are composites (the operand made safe where the guard
//! holds, then the result selected); the gradients are given as custom
//! rules, because a composite's `where` would *select* a zero cotangent
//! where TensorFlow's (and JAX's) rules *multiply* the cotangent by a
//! partial that is 0 there: `d/dy xlogy = g · xdivy(x, y)` is `0 · g`
//! at `x = 0`, NaN for an infinite or NaN cotangent `g`, not 0. The rules
//! are written with ops (these same functions among them), so they
//! differentiate again. (Ops, but here in `autodiff` beside
//! [`custom_gradient`], which they use: the op layer sits below it.)

use super::custom::custom_gradient;
use crate::error::{Error, Result};
use crate::ops::expect_float;
use crate::tensor::Tensor;

/// `x / y`, 0 where `x` is 0 (even for `y` 0 or NaN; TensorFlow's
/// `xdivy`): the partial of `xlogy` in `y`.
fn xdivy(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let zero = x.eq(&x.scalar_like(0.0)?)?;
    let safe = Tensor::where_(&zero, &y.scalar_like(1.0)?, y)?;
    let q = x.div(&safe)?;
    Tensor::where_(&zero, &q.scalar_like(0.0)?, &q)
}

/// `x · log(y)` (`log1p` when `log1p`), 0 where `x` is 0: the value.
fn guarded_value(x: &Tensor, y: &Tensor, log1p: bool) -> Result<Tensor> {
    let zero = x.eq(&x.scalar_like(0.0)?)?;
    let y_safe = Tensor::where_(&zero, &y.scalar_like(1.0)?, y)?;
    let f = if log1p { y_safe.log1p()? } else { y_safe.log()? };
    let p = x.mul(&f)?;
    Tensor::where_(&zero, &p.scalar_like(0.0)?, &p)
}

/// `xlogy` or `xlog1py` with TensorFlow's gradients: `d/dx = g ·
/// xlogy(x ≠ 0, y)` (so `0 · g` where `x` is 0) and `d/dy = g · xdivy(x,
/// y)` (`y + 1` for `xlog1py`).
fn guarded(op: &'static str, x: &Tensor, y: &Tensor, log1p: bool) -> Result<Tensor> {
    expect_float(op, x)?;
    let run = || {
        let out = custom_gradient(op, &[x.clone(), y.clone()], |xs| {
            let (x, y) = (xs[0].clone(), xs[1].clone());
            let value = guarded_value(&x, &y, log1p)?;
            let backward = move |g: &[Tensor]| {
                let nonzero = x.ne(&x.scalar_like(0.0)?)?.cast(x.dtype())?;
                let dx = g[0].mul(&guarded(op, &nonzero, &y, log1p)?)?;
                let y1 = if log1p { y.add_scalar(1.0)? } else { y.clone() };
                let dy = g[0].mul(&xdivy(&x, &y1)?)?;
                Ok(vec![
                    Some(dx.sum_to_shape(x.shape())?),
                    Some(dy.sum_to_shape(y.shape())?),
                ])
            };
            Ok((vec![value], backward))
        })?;
        out.into_iter().next().ok_or_else(|| Error::invalid(op, "no output"))
    };
    run().map_err(|e| e.for_op(op))
}

impl Tensor {
    /// `x · log(y)`, 0 where `x` is 0 (even for `y = 0`; `tf.math.xlogy`).
    /// Differentiable in both, with TensorFlow's gradients: `g · log(y)`
    /// and `g · x / y`, each `0 · g` where `x` is 0 (NaN for an infinite
    /// or NaN cotangent there, as TensorFlow's and JAX's).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let z = Tensor::xlogy(&Tensor::vector(&[0.0f64, 2.0]), &Tensor::vector(&[0.0f64, 1.0]))?;
    /// assert_eq!(z.to_vec::<f64>()?, vec![0.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn xlogy(x: &Tensor, y: &Tensor) -> Result<Tensor> {
        guarded("xlogy", x, y, false)
    }

    /// `x · log(1 + y)`, 0 where `x` is 0 (`tf.math.xlog1py`; gradients
    /// as [`xlogy`](Self::xlogy)'s, with `1 + y`).
    pub fn xlog1py(x: &Tensor, y: &Tensor) -> Result<Tensor> {
        guarded("xlog1py", x, y, true)
    }

    /// `x / y`, 0 where `y` is 0 (`tf.math.divide_no_nan`).
    /// Differentiable in both, with TensorFlow's gradients:
    /// `divide_no_nan(g, y)` (0 where `y` is 0, whatever `g`) and `g ·
    /// divide_no_nan(-x / y, y)` (`0 · g` where `y` is 0: NaN for an
    /// infinite or NaN cotangent there).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let z = Tensor::divide_no_nan(&Tensor::vector(&[1.0f32, 3.0]), &Tensor::vector(&[0.0f32, 2.0]))?;
    /// assert_eq!(z.to_vec::<f32>()?, vec![0.0, 1.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn divide_no_nan(x: &Tensor, y: &Tensor) -> Result<Tensor> {
        const OP: &str = "divide_no_nan";
        expect_float(OP, x)?;
        let run = || {
            let out = custom_gradient(OP, &[x.clone(), y.clone()], |xs| {
                let (x, y) = (xs[0].clone(), xs[1].clone());
                let zero = y.eq(&y.scalar_like(0.0)?)?;
                let safe = Tensor::where_(&zero, &y.scalar_like(1.0)?, &y)?;
                let q = x.div(&safe)?;
                let value = Tensor::where_(&zero, &q.scalar_like(0.0)?, &q)?;
                let backward = move |g: &[Tensor]| {
                    let dx = Tensor::divide_no_nan(&g[0], &y)?;
                    let dy = g[0].mul(&Tensor::divide_no_nan(&Tensor::divide_no_nan(&x.neg()?, &y)?, &y)?)?;
                    Ok(vec![
                        Some(dx.sum_to_shape(x.shape())?),
                        Some(dy.sum_to_shape(y.shape())?),
                    ])
                };
                Ok((vec![value], backward))
            })?;
            out.into_iter().next().ok_or_else(|| Error::invalid(OP, "no output"))
        };
        run().map_err(|e| e.for_op(OP))
    }
}
