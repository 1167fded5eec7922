//! More reductions over any set of axes (negative allowed, `keepdims`
//! either way): `prod`, `logsumexp`, `variance`, `std`, `norm`, `all`,
//! `any`; and `argmax`/`argmin` along one axis.

use super::reduce::norm_axes;
use super::{bind, ct, expect_float, grads, unsupported};
use crate::autodiff::tape::{vjp, vjp_batched};
use crate::error::{Error, Result};
use crate::tensor::layout::norm_axis;
use crate::tensor::{alloc, with_num_dtype, DType, Element, Layout, Num, Tensor};
use num_traits::One;

/// The shape with reduced axes set to 1.
pub(crate) fn kept_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect()
}

/// The shape without the reduced axes.
fn out_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    if keepdims {
        return kept_shape(shape, axes);
    }
    shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect()
}

/// The elements of `x` in the order kept axes first, reduced axes last,
/// with the row length (product of the reduced dims). Each chunk of `row`
/// elements is one output element's inputs.
fn reduced_last<T: Element>(op: &'static str, x: &Tensor, axes: &[usize]) -> Result<(Vec<T>, usize)> {
    let l = x.layout();
    let kept = (0..l.shape.len()).filter(|d| !axes.contains(d));
    let perm: Vec<usize> = kept.chain(axes.iter().copied()).collect();
    let view = x.view(Layout {
        shape: perm.iter().map(|&d| l.shape[d]).collect(),
        strides: perm.iter().map(|&d| l.strides[d]).collect(),
        offset: l.offset,
    });
    let row: usize = axes.iter().map(|&d| l.shape[d]).product();
    Ok((view.owned_values::<T>(op)?, row))
}

/// One output per row of [`reduced_last`]; `f` gets each row.
fn reduce_rows<T: Element, O: Element>(
    op: &'static str,
    x: &Tensor,
    axes: &[usize],
    keepdims: bool,
    f: impl Fn(&[T]) -> O,
) -> Result<Tensor> {
    let shape = out_shape(x.shape(), axes, keepdims);
    let n_out: usize = shape.iter().product();
    let out: Vec<O> = if x.numel() == 0 {
        // no rows to read (or empty ones: `n_out` may be large)
        alloc::try_filled(op, n_out, f(&[]))?
    } else {
        let (vals, row) = reduced_last::<T>(op, x, axes)?;
        alloc::try_collect(op, vals.chunks(row).map(f))?
    };
    Tensor::from_vec(out, &shape)
}

/// Broadcasts a (batched) cotangent of a reduction back over the reduced axes.
fn unreduce(g: &Tensor, shape: &[usize], axes: &[usize]) -> Result<Tensor> {
    ct::broadcast_to(&ct::reshape(g, &kept_shape(shape, axes))?, shape)
}

fn iaxes(axes: &[usize]) -> Vec<isize> {
    axes.iter().map(|&a| a as isize).collect()
}

impl Tensor {
    /// Product over `axes` (numeric dtypes; integers wrap). The gradient is
    /// right when inputs contain zeros: it is the product of the other
    /// elements, computed with exclusive cumulative products from both sides
    /// (as TensorFlow), never by dividing by `x`.
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(x.prod(&[1], false)?.to_vec::<f64>()?, vec![2.0, 12.0]);
    /// assert_eq!(x.prod(&[0, 1], true)?.shape(), &[1, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn prod(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        let ax = norm_axes("prod", axes, self.shape())?;
        let y = with_num_dtype!(self.dtype(), T => reduce_rows::<T, T>("prod", self, &ax, keepdims,
            |r| r.iter().fold(T::one(), |a, &b| a.mul_wrap(b))),
            _ => Err(unsupported("prod", self.dtype(), "a numeric dtype")))?;
        let x = self.clone();
        Ok(bind("Prod", &[self], y, move |_| {
            vjp(move |g, _| {
                let shape = x.shape();
                let kept: Vec<usize> = (0..shape.len()).filter(|d| !ax.contains(d)).collect();
                let perm: Vec<usize> = kept.iter().chain(&ax).copied().collect();
                let mut inv = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p] = i;
                }
                let pshape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
                let n_red: usize = ax.iter().map(|&d| shape[d]).product();
                let n_kept: usize = kept.iter().map(|&d| shape[d]).product();
                let xt = x.permute(&perm)?.reshape(&[n_kept, n_red])?;
                let left = xt.cumprod(1, true, false)?;
                let right = xt.cumprod(1, true, true)?;
                let others = left.mul(&right)?.reshape(&pshape)?.permute(&inv)?;
                let gx = g[0].reshape(&kept_shape(shape, &ax))?.broadcast_to(shape)?;
                Ok(grads![Some(gx.mul(&others)?)])
            })
        }))
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

    /// Euclidean (L2) norm over `axes`: `√Σx²` (floats). d/dx = x / ‖x‖, and
    /// **0 where the norm is 0** (the minimal subgradient, as PyTorch;
    /// TensorFlow's composite gives NaN there).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[3.0f64, 4.0]);
    /// assert_eq!(x.norm(&[0], false)?.to_scalar::<f64>()?, 5.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn norm(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        expect_float("norm", self)?;
        let ax = norm_axes("norm", axes, self.shape())?;
        // computed on an unwatched alias: nothing here is recorded
        let y = self.stop_gradient().square()?.sum(&iaxes(&ax), keepdims)?.sqrt()?;
        let x = self.clone();
        Ok(bind("Norm", &[self], y, move |y| {
            // the output itself (not a copy), so that the rule is differentiable
            let y = y.clone();
            vjp_batched(move |g, _| {
                let yk = y.reshape(&kept_shape(x.shape(), &ax))?;
                let zero = yk.eq(&yk.scalar_like(0.0)?)?;
                let safe = Tensor::where_(&zero, &yk.scalar_like(1.0)?, &yk)?;
                let gx = unreduce(&g[0], x.shape(), &ax)?;
                Ok(grads![Some(gx.mul(&x.div(&safe)?)?)])
            })
        }))
    }

    /// Index of the largest element along `axis` (i64, the axis removed);
    /// the first index on ties. Real numeric dtypes (not bool or complex); an empty axis is an error.
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
    /// the first index on ties. Real numeric dtypes (not bool or complex); an empty axis is an error.
    /// NaN is skipped (as TensorFlow); a row of NaN only gives 0.
    pub fn argmin(&self, axis: isize) -> Result<Tensor> {
        self.arg_extremum("argmin", axis, false)
    }

    fn arg_extremum(&self, op: &'static str, axis: isize, largest: bool) -> Result<Tensor> {
        // (complex numbers have no order: TensorFlow has no complex ArgMax)
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
        with_num_dtype!(self.dtype(), T => reduce_rows::<T, i64>(op, self, &[a], false, |r| {
            // NaN never wins; the first non-NaN element starts
            let mut best: Option<usize> = None;
            for (i, &v) in r.iter().enumerate() {
                if super::binary::is_nan(v) {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some(b) if largest => v > r[b],
                    Some(b) => v < r[b],
                };
                if better {
                    best = Some(i);
                }
            }
            best.unwrap_or(0) as i64
        }), _ => unreachable!())
    }

    /// Logical AND over `axes` of a bool tensor (true over no elements).
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![true, false, true, true], &[2, 2])?;
    /// assert_eq!(x.all(&[1], false)?.to_vec::<bool>()?, vec![false, true]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn all(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        self.bool_reduce("all", axes, keepdims, true)
    }

    /// Logical OR over `axes` of a bool tensor (false over no elements).
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![true, false, false, false], &[2, 2])?;
    /// assert_eq!(x.any(&[1], false)?.to_vec::<bool>()?, vec![true, false]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn any(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        self.bool_reduce("any", axes, keepdims, false)
    }

    fn bool_reduce(&self, op: &'static str, axes: &[isize], keepdims: bool, all: bool) -> Result<Tensor> {
        if self.dtype() != DType::Bool {
            return Err(unsupported(op, self.dtype(), "bool"));
        }
        let ax = norm_axes(op, axes, self.shape())?;
        reduce_rows::<bool, bool>(op, self, &ax, keepdims, |r| {
            if all {
                r.iter().all(|&b| b)
            } else {
                r.iter().any(|&b| b)
            }
        })
    }
}
