//! Extrema: `max` and `min` over any set of axes (ties share the
//! gradient), their smooth form `logsumexp`, and `argmax`/`argmin` along
//! one axis.

use super::*;
use crate::dispatch::vjp;
use crate::ops::desc::{Lazy, Op, Reduce, ReduceKind as DescKind};
use crate::ops::{bind, bind_nondiff, expect_float, grads};
use crate::tensor::with_num_dtype;

impl Tensor {
    /// Maximum over `axes`. The gradient is split evenly among tied maxima
    /// (as TensorFlow).
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        self.extremum("max", axes, keepdims, ReduceKind::Max)
    }

    /// Maximum of every element (a scalar).
    pub fn max_all(&self) -> Result<Tensor> {
        self.max(&all_axes(self), false)
    }

    /// Minimum over `axes`; ties split the gradient evenly.
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        self.extremum("min", axes, keepdims, ReduceKind::Min)
    }

    /// Minimum of every element (a scalar).
    pub fn min_all(&self) -> Result<Tensor> {
        self.min(&all_axes(self), false)
    }

    fn extremum(&self, op: &'static str, axes: &[isize], keepdims: bool, kind: ReduceKind) -> Result<Tensor> {
        let ax = norm_axes(op, axes, self.shape())?;
        let y = raw_reduce(op, self, &ax, keepdims, kind)?;
        let x = self.clone();
        let desc_kind = if kind == ReduceKind::Max {
            DescKind::Max
        } else {
            DescKind::Min
        };
        Ok(bind(
            Lazy(if kind == ReduceKind::Max { "Max" } else { "Min" }, || {
                Op::Reduce(Reduce::new(desc_kind, axes, keepdims))
            }),
            &[self],
            y,
            move |y| {
                let y = y.clone();
                vjp(move |g, _| {
                    let shape = x.shape();
                    let hit = x.eq(&unreduce(&y, shape, &ax)?)?.cast(x.dtype())?;
                    let count = hit.sum(&ax.iter().map(|&a| a as isize).collect::<Vec<_>>(), true)?;
                    let share = hit.div(&count)?;
                    Ok(grads![Some(unreduce(&g[0], shape, &ax)?.mul(&share)?)])
                })
            },
        ))
    }

    /// `ln Σ eˣ` over `axes` (floats), computed stably by subtracting the
    /// maximum (an infinite maximum is not subtracted). Built from
    /// differentiable ops: the gradient is `softmax(x) · g`.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[1000.0f64, 1000.0]);
    /// let y = x.logsumexp(&[0], false)?.to_scalar::<f64>()?;
    /// assert!((y - (1000.0 + std::f64::consts::LN_2)).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn logsumexp(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        expect_float("logsumexp", self)?;
        norm_axes("logsumexp", axes, self.shape())?;
        let m = self.stop_gradient().max(axes, true)?;
        let finite = m.sub(&m)?.eq(&m.scalar_like(0.0)?)?; // false for ±inf and NaN
        let m = Tensor::where_(&finite, &m, &m.scalar_like(0.0)?)?;
        let s = self.sub(&m)?.exp()?.sum(axes, true)?.log()?.add(&m)?;
        if keepdims {
            Ok(s)
        } else {
            let ax = norm_axes("logsumexp", axes, self.shape())?;
            s.reshape(&out_shape(self.shape(), &ax, false))
        }
    }

    /// Index of the largest element along `axis` (i64, the axis removed);
    /// the first index on ties. Numeric dtypes; an empty axis is an error.
    /// NaN is skipped, as TensorFlow does (NumPy returns the first NaN
    /// instead); a row of NaN only gives 0.
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![1.0f32, 3.0, 3.0, 0.0], &[2, 2])?;
    /// assert_eq!(x.argmax(1)?.to_vec::<i64>()?, vec![1, 0]);
    /// assert_eq!(x.argmax(0)?.to_vec::<i64>()?, vec![1, 0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn argmax(&self, axis: isize) -> Result<Tensor> {
        self.arg_extremum("argmax", axis, true)
    }

    /// Index of the smallest element along `axis` (i64, the axis removed);
    /// the first index on ties. Numeric dtypes; an empty axis is an error.
    /// NaN is skipped (as TensorFlow); a row of NaN only gives 0.
    pub fn argmin(&self, axis: isize) -> Result<Tensor> {
        self.arg_extremum("argmin", axis, false)
    }

    fn arg_extremum(&self, op: &'static str, axis: isize, largest: bool) -> Result<Tensor> {
        if self.dtype() == DType::Bool || self.dtype().is_complex() {
            return Err(unsupported(op, self.dtype(), "a real numeric dtype"));
        }
        let a = norm_axis(op, axis, self.shape())?;
        if self.shape()[a] == 0 {
            return Err(Error::invalid(
                op,
                format!("axis {axis} of shape {:?} is empty: no index to return", self.shape()),
            ));
        }
        let kind = if largest { DescKind::ArgMax } else { DescKind::ArgMin };
        let desc = Lazy(if largest { "ArgMax" } else { "ArgMin" }, || {
            Op::Reduce(Reduce::new(kind, &[axis], false))
        });
        let y = match crate::dispatch::device::offload(
            op,
            &[self],
            |_| crate::kernels::cuda::arg_extremum(op, self, a, largest),
            |h| arg_kernel(op, &h[0], a, largest),
        ) {
            Some(r) => r?,
            None => arg_kernel(op, self, a, largest)?,
        };
        Ok(bind_nondiff(desc, &[self], y))
    }
}

/// The CPU kernel of [`Tensor::argmax`] and [`Tensor::argmin`] along the
/// (non-empty) axis `a` (`kernels::cpu::arg_extremum`): in place over a
/// middle axis, else row by row.
fn arg_kernel(op: &'static str, x: &Tensor, a: usize, largest: bool) -> Result<Tensor> {
    use crate::kernels::cpu::arg_extremum::{in_place, row};
    use crate::kernels::cpu::math::with_simd_for;
    with_num_dtype!(x.dtype(), T => match largest {
        true => in_place::<T, true>(op, x, a).unwrap_or_else(|| {
            reduce_rows::<T, i64>(op, x, &[a], false, |r| with_simd_for::<T, i64, _>(
                #[inline(always)]
                || row::<T, true>(r),
            ))
        }),
        false => in_place::<T, false>(op, x, a).unwrap_or_else(|| {
            reduce_rows::<T, i64>(op, x, &[a], false, |r| with_simd_for::<T, i64, _>(
                #[inline(always)]
                || row::<T, false>(r),
            ))
        }),
    }, _ => unreachable!())
}
