//! Reductions over any set of axes and scans along one.
//!
//! Axes may be negative and must not repeat. An empty axis list reduces
//! nothing (as TensorFlow's `axis=[]`); the `_all` forms reduce every axis;
//! `keepdims` keeps reduced dims as 1.
//!
//! - `sum.rs`: `sum`, `mean`
//! - `extrema.rs`: `max`, `min`, `logsumexp`, `argmax`, `argmin`
//! - `product.rs`: `prod`
//! - `moments.rs`: `variance`, `std`
//! - `norm.rs`: `norm`
//! - `logical.rs`: `all`, `any`
//! - `scan.rs`: `cumsum`, `cumprod`
//!
//! Below: the helpers they share (axes, shapes, row-wise reduction).

mod extrema;
mod logical;
mod moments;
mod norm;
mod product;
mod scan;
mod sum;

use crate::error::{Error, Result};
use crate::kernels::cpu::reduce::{reduce, ReduceKind};
use crate::ops::unsupported;
use crate::tensor::layout::norm_axis;
use crate::tensor::{alloc, DType, Element, Layout, Shape, Tensor};

/// Normalised, sorted axes; an error for out-of-range or repeated axes.
pub(crate) fn norm_axes(op: &'static str, axes: &[isize], shape: &[usize]) -> Result<Shape> {
    let mut out = Shape::with_capacity(axes.len());
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
fn kept_shape(shape: &[usize], axes: &[usize]) -> Shape {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect()
}

fn raw_reduce(op: &'static str, x: &Tensor, axes: &[usize], keepdims: bool, kind: ReduceKind) -> Result<Tensor> {
    crate::ops::expect_numeric(op, x)?;
    if x.dtype().is_complex() && kind != ReduceKind::Sum {
        return Err(unsupported(op, x.dtype(), "a real numeric dtype"));
    }
    let y = match crate::dispatch::device::offload(
        op,
        &[x],
        |_| {
            let name = match kind {
                ReduceKind::Sum => "sum",
                ReduceKind::Max => "max",
                ReduceKind::Min => "min",
            };
            crate::kernels::cuda::reduce(op, name, x, axes)
        },
        |h| reduce(op, &h[0], axes, kind),
    ) {
        Some(r) => r?,
        None => reduce(op, x, axes, kind)?,
    };
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
    // (an empty result may carry any strides: no element is read)
    debug_assert!((y.is_contiguous() || y.numel() == 0) && y.numel() == shape.iter().product::<usize>());
    y.view(Layout {
        offset: y.layout().offset,
        ..Layout::contiguous(shape)
    })
}

/// Broadcasts a tensor of a reduction's output shape back over the reduced axes.
fn unreduce(g: &Tensor, shape: &[usize], axes: &[usize]) -> Result<Tensor> {
    g.reshape(&kept_shape(shape, axes))?.broadcast_to(shape)
}

fn all_axes(t: &Tensor) -> smallvec::SmallVec<[isize; 4]> {
    (0..t.rank() as isize).collect()
}

/// The shape without the reduced axes.
fn out_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Shape {
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

/// `x` viewed with its kept axes first and reduced axes last, with the
/// row length (product of the reduced dims): each run of `row` elements
/// of its values is one output element's inputs.
fn reduced_last(x: &Tensor, axes: &[usize]) -> (Tensor, usize) {
    let l = x.layout();
    let kept = (0..l.shape.len()).filter(|d| !axes.contains(d));
    let perm: Vec<usize> = kept.chain(axes.iter().copied()).collect();
    let view = x.view(Layout {
        shape: perm.iter().map(|&d| l.shape[d]).collect(),
        strides: perm.iter().map(|&d| l.strides[d]).collect(),
        offset: l.offset,
    });
    let row: usize = axes.iter().map(|&d| l.shape[d]).product();
    (view, row)
}

/// One output per row of [`reduced_last`] (read in place when its rows
/// are already contiguous, else from a copy); `f` gets each row, over the
/// compute threads for a large input.
fn reduce_rows<T: Element, O: Element>(
    op: &'static str,
    x: &Tensor,
    axes: &[usize],
    keepdims: bool,
    f: impl Fn(&[T]) -> O + Sync,
) -> Result<Tensor> {
    let shape = out_shape(x.shape(), axes, keepdims);
    let n_out: usize = shape.iter().product();
    if x.numel() == 0 {
        // no rows to read (or empty ones: `n_out` may be large)
        return Tensor::from_vec(alloc::try_filled(op, n_out, f(&[]))?, &shape);
    }
    let (view, row) = reduced_last(x, axes);
    let vals = view.values::<T>(op)?;
    let out = crate::kernels::cpu::reduce::map_rows(op, &vals, row, n_out, f)?;
    Ok(Tensor::from_storage(O::buf_into_storage(out), &shape))
}

fn iaxes(axes: &[usize]) -> Vec<isize> {
    axes.iter().map(|&a| a as isize).collect()
}
