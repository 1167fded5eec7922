//! Reductions over any set of axes, with or without kept dimensions.
//!
//! Axes may be negative. An empty axis list reduces nothing (as TensorFlow's
//! `axis=[]`); the `_all` forms reduce every axis.

use super::desc::{Lazy, Op, Reduce, ReduceKind as DescKind};
use super::{bind, bind_jvp, grads, only, unsupported};
use crate::autodiff::tape::vjp_batched;
use crate::error::{Error, Result};
use crate::kernels::cpu::reduce::{reduce, ReduceKind};
use crate::ops::ct;
use crate::tensor::layout::norm_axis;
use crate::tensor::{DType, Layout, Tensor};

/// Normalised, sorted axes; an error for out-of-range or repeated axes.
pub(crate) fn norm_axes(op: &'static str, axes: &[isize], shape: &[usize]) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = norm_axis(op, a, shape)?;
        if out.contains(&n) {
            return Err(Error::BadAxis {
                op,
                axis: a,
                shape: shape.to_vec(),
                repeated: true,
            });
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// The shape with reduced axes set to 1.
fn kept_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect()
}

fn raw_reduce(op: &'static str, x: &Tensor, axes: &[usize], keepdims: bool, kind: ReduceKind) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(unsupported(op, x.dtype(), "a numeric dtype"));
    }
    if x.dtype().is_complex() && kind != ReduceKind::Sum {
        return Err(unsupported(op, x.dtype(), "a real numeric dtype"));
    }
    let y = reduce(op, x, axes, kind)?;
    if keepdims {
        Ok(reshaped_raw(&y, &kept_shape(x.shape(), axes)))
    } else {
        Ok(y)
    }
}

/// `y` (a fresh kernel output, contiguous) viewed in another shape of the
/// same size, without recording a reshape: the caller binds the result as
/// its op's output.
pub(crate) fn reshaped_raw(y: &Tensor, shape: &[usize]) -> Tensor {
    debug_assert!(y.is_contiguous() && y.numel() == shape.iter().product::<usize>());
    y.view(Layout {
        offset: y.layout().offset,
        ..Layout::contiguous(shape)
    })
}

/// Broadcasts a tensor of a reduction's output shape back over the reduced axes.
fn unreduce(g: &Tensor, shape: &[usize], axes: &[usize]) -> Result<Tensor> {
    g.reshape(&kept_shape(shape, axes))?.broadcast_to(shape)
}

/// [`unreduce`] for a cotangent (batch dims kept in front).
fn unreduce_ct(g: &Tensor, shape: &[usize], axes: &[usize]) -> Result<Tensor> {
    ct::broadcast_to(&ct::reshape(g, &kept_shape(shape, axes))?, shape)
}

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
        let shape = self.shape().to_vec();
        Ok(bind_jvp(
            Lazy("Sum", || Op::Reduce(Reduce::new(DescKind::Sum, axes, keepdims))),
            &[self],
            y,
            move |_| vjp_batched(move |g, _| Ok(grads![Some(unreduce_ct(&g[0], &shape, &ax)?)])),
            |t, _| only(t)?.sum(axes, keepdims),
        ))
    }

    /// Sum of every element (a scalar).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(&all_axes(self), false)
    }

    /// Mean over `axes` (floats). d/dx = 1/n, broadcast back.
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::mean(self, axes, keepdims);
        }
        super::expect_float("mean", self)?;
        let ax = norm_axes("mean", axes, self.shape())?;
        let n: usize = ax.iter().map(|&a| self.shape()[a]).product();
        self.sum(axes, keepdims)?.div_scalar(n as f64)
    }

    /// Mean of every element (a scalar).
    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean(&all_axes(self), false)
    }

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
                vjp_batched(move |g, _| {
                    let shape = x.shape();
                    let hit = x.eq(&unreduce(&y, shape, &ax)?)?.cast(x.dtype())?;
                    let count = hit.sum(&ax.iter().map(|&a| a as isize).collect::<Vec<_>>(), true)?;
                    let share = hit.div(&count)?;
                    Ok(grads![Some(unreduce_ct(&g[0], shape, &ax)?.mul(&share)?)])
                })
            },
        ))
    }
}

fn all_axes(t: &Tensor) -> Vec<isize> {
    (0..t.rank() as isize).collect()
}
