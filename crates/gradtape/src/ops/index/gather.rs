//! Indexing: gather along an axis and its adjoint, scatter-add.

use crate::dispatch::{vjp, VjpFn};
use crate::dispatch::{Gradient, IndexedSlices};
use crate::error::{Error, Result};
use crate::kernels::cpu::index;
use crate::ops::desc::{Op, ShapeOp};
use crate::ops::{bind, bind_jvp, expect_same_dtype, grads, only};
use crate::tensor::layout::{checked_numel, norm_axis};
use crate::tensor::Tensor;
use smallvec::smallvec;

/// The rule of `gather` along axis 0: dense, it scatters the cotangent back;
/// sparse-aware, it returns the cotangent's rows as an [`IndexedSlices`] at
/// the gathered indices, and a sparse cotangent (a gather of this gather)
/// has its indices composed, staying one `IndexedSlices`.
fn gather_rows_rule(idx: Tensor, params_shape: Vec<usize>) -> VjpFn {
    let (idx2, shape2) = (idx.clone(), params_shape.clone());
    vjp(move |g, _| Ok(grads![Some(g[0].scatter_add(&idx, 0, params_shape[0])?), None])).with_sparse(move |g, _| {
        let rest = &shape2[1..];
        let flat = idx2.reshape(&[idx2.numel()])?;
        let densified;
        let cot = match &g[0] {
            // a scalar index drops the gathered axis: rows of the output
            // are not rows of indices
            Gradient::Sparse(s) if idx2.rank() == 0 => {
                densified = Gradient::Dense(s.to_dense()?);
                &densified
            }
            other => other,
        };
        let slices = match cot {
            Gradient::Dense(d) => {
                let mut vshape = vec![flat.numel()];
                vshape.extend_from_slice(rest);
                IndexedSlices::from_parts(d.reshape(&vshape)?, flat, shape2.clone())
            }
            Gradient::Sparse(s) => {
                // rows j of the output are the index tuples idx[j]; each
                // picks a params row
                let picked = idx2.gather(s.indices(), 0)?;
                let n = picked.numel();
                let mut vshape = vec![n];
                vshape.extend_from_slice(rest);
                IndexedSlices::from_parts(s.values().reshape(&vshape)?, picked.reshape(&[n])?, shape2.clone())
            }
        };
        Ok(smallvec![Some(Gradient::Sparse(slices)), None])
    })
}

/// `a` and `b` joined along axis 0 (same dtype, same trailing dims), a
/// differentiable op used to concatenate sparse gradients.
pub(crate) fn concat_rows(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    const OP: &str = "concat_rows";
    expect_same_dtype(OP, a, b)?;
    if a.rank() == 0 || a.rank() != b.rank() || a.shape()[1..] != b.shape()[1..] {
        return Err(Error::ShapeMismatch {
            op: OP,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    let (na, nb) = (a.shape()[0], b.shape()[0]);
    let mut shape = a.shape().to_vec();
    shape[0] = na.saturating_add(nb); // (a saturated dim is refused below)
    checked_numel(OP, &shape)?;
    let y = index::concat(OP, &[a, b], 0, &shape)?;
    Ok(bind(Op::Shape(ShapeOp::ConcatRows), &[a, b], y, move |_| {
        vjp(move |g, needs| {
            Ok(grads![
                if needs[0] { Some(g[0].narrow(0, 0, na)?) } else { None },
                if needs[1] { Some(g[0].narrow(0, na, nb)?) } else { None },
            ])
        })
    }))
}

impl Tensor {
    /// Slices of `self` along `axis` picked by integer `indices`: the output
    /// shape is `shape[..axis] + indices.shape + shape[axis+1..]`. An index
    /// outside `0..shape[axis]` is an error. d/dparams scatters the cotangent
    /// back; along axis 0 the gradient is sparse, an
    /// [`IndexedSlices`] of the gathered rows (see
    /// [`GradientTape::sparse_gradient`](crate::GradientTape::sparse_gradient)).
    /// Indices get no gradient.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// let rows = x.gather(&Tensor::vector(&[2i64, 0]), 0)?;
    /// assert_eq!(rows.to_vec::<f32>()?, vec![5.0, 6.0, 1.0, 2.0]);
    /// assert!(x.gather(&Tensor::vector(&[3i64]), 0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gather(&self, indices: &Tensor, axis: isize) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("gather", &[("params", self), ("indices", indices)]);
        let ax = norm_axis("gather", axis, self.shape())?;
        let y = match row_view(self, indices, ax) {
            Some(row) => row,
            None => index::gather(self, indices, ax)?,
        };
        let (idx, dim) = (indices.clone(), self.shape()[ax]);
        if ax == 0 && self.rank() >= 1 {
            let shape: crate::tensor::Shape = self.shape().into();
            return Ok(bind_jvp(
                Op::Shape(ShapeOp::Gather(axis)),
                &[self, indices],
                y,
                move |_| gather_rows_rule(idx, shape.to_vec()),
                |t, _| only(t)?.gather(indices, axis),
            ));
        }
        Ok(bind_jvp(
            Op::Shape(ShapeOp::Gather(axis)),
            &[self, indices],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].scatter_add(&idx, ax as isize, dim)?), None])),
            |t, _| only(t)?.gather(indices, axis),
        ))
    }

    /// The adjoint of [`gather`](Self::gather): zeros of shape
    /// `shape[..axis] + [dim] + shape[axis + indices.rank()..]` with each
    /// slice of `self` added at its index (repeated indices accumulate).
    /// `axis` is the position of the scattered dimension in that output, of
    /// rank `self.rank() - indices.rank() + 1`; a negative one counts from
    /// its end (so `gather(i, a)` and `scatter_add(i, a, ..)` take the same
    /// `a`, also for a scalar index).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let u = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    /// let s = u.scatter_add(&Tensor::vector(&[0i32, 2, 0]), 0, 3)?;
    /// assert_eq!(s.to_vec::<f64>()?, vec![4.0, 0.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scatter_add(&self, indices: &Tensor, axis: isize, dim: usize) -> Result<Tensor> {
        let _site = crate::dispatch::site::user_op("scatter_add", &[("updates", self), ("indices", indices)]);
        const OP: &str = "scatter_add";
        let Some(out_rank) = (self.rank() + 1).checked_sub(indices.rank()) else {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: indices.shape().to_vec(),
            });
        };
        let a = if axis < 0 { axis + out_rank as isize } else { axis };
        if a < 0 || a as usize >= out_rank {
            return Err(Error::BadAxis {
                op: OP,
                axis,
                shape: self.shape().to_vec(),
                repeated: false,
            });
        }
        let ax = a as usize;
        let y = index::scatter_add(self, indices, ax, dim)?;
        let idx = indices.clone();
        Ok(bind_jvp(
            Op::Shape(ShapeOp::ScatterAdd(axis, dim)),
            &[self, indices],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].gather(&idx, ax as isize)?), None])),
            |t, _| only(t)?.scatter_add(indices, axis, dim),
        ))
    }
}

/// `gather(x, j, 0)` for a scalar index `j` in range, on the host: a view of
/// row `j` (as [`row_at`]'s), not a copy. An RNN written as a loop reads
/// its input row so at every step, and a traced loop's gradient reads it
/// again in the backward loop (see `function/control/residuals`). `None`
/// where the kernel gathers (another axis, an index tensor of rank > 0, a
/// device, an index out of range, which the kernel reports).
fn row_view(x: &Tensor, indices: &Tensor, axis: usize) -> Option<Tensor> {
    if axis != 0 || indices.rank() != 0 || x.device_buffer().is_some() || indices.device_buffer().is_some() {
        return None;
    }
    let j = *index::int_values("gather", indices).ok()?.first()?;
    let rows = x.shape()[0];
    let j = usize::try_from(j).ok().filter(|&j| j < rows)?;
    let l = x.layout();
    Some(x.view(crate::tensor::layout::Layout {
        shape: l.shape[1..].into(),
        strides: l.strides[1..].into(),
        // (an empty row stays at the buffer's start, as an empty block view)
        offset: match l.shape[1..].contains(&0) {
            true => l.offset,
            false => (l.offset as isize + j as isize * l.strides[0]) as usize,
        },
    }))
}

/// Row `j` (an integer scalar tensor) of `x` along axis 0, and its adjoint
/// [`row_into`]: the pair a loop's gradient reads its history with. The
/// adjoint takes the number of rows from a tensor when it runs (not from a
/// shape fixed when it was traced), so a traced loop's gradient follows
/// histories of any length.
///
/// `j` is clamped into the rows, and a history with no rows gives a row of
/// zeros: the backward loop's body is traced at its entry values, which,
/// for a loop that did not iterate, are an empty history and `j` = -1
/// (where it runs, `0 <= j < rows`). A graph traced there must serve the
/// calls whose loops iterate, so this is the same node either way.
pub(crate) fn row_at(x: &Tensor, j: &Tensor) -> Result<Tensor> {
    if x.rank() == 0 || j.rank() != 0 {
        return Err(Error::invalid(
            "row_at",
            format!(
                "needs a tensor of rank >= 1 and a scalar index, got {:?} and {:?}",
                x.shape(),
                j.shape()
            ),
        ));
    }
    // (a view of the row, not a copy: a loop's gradient reads each row of
    // its history once per iteration)
    let y = match row_index("row_at", j, x.shape()[0])? {
        Some(row) => {
            let l = x.layout();
            x.view(crate::tensor::layout::Layout {
                shape: l.shape[1..].into(),
                strides: l.strides[1..].into(),
                // (an empty row stays at the buffer's start, as an empty
                // block view)
                offset: match l.shape[1..].contains(&0) {
                    true => l.offset,
                    false => (l.offset as isize + row as isize * l.strides[0]) as usize,
                },
            })
        }
        None => Tensor::zeros_on(&x.shape()[1..], x.dtype(), x.device())?,
    };
    let (xc, jc) = (x.clone(), j.clone());
    Ok(bind(Op::Shape(ShapeOp::RowAt), &[x, j], y, move |_| {
        vjp(move |g, _| Ok(grads![Some(row_into(&g[0], &jc, &xc)?), None]))
    }))
}

/// `j` (an integer scalar) clamped into `0..rows`; `None` when there are
/// no rows.
fn row_index(op: &'static str, j: &Tensor, rows: usize) -> Result<Option<usize>> {
    let j = index::int_values(op, &crate::kernels::gpu::to_host(op, j)?)?
        .first()
        .copied()
        .unwrap_or(0);
    Ok((rows > 0).then(|| j.clamp(0, rows as i64 - 1) as usize))
}

/// `j` (an integer scalar) clamped into `0..rows`, as an i64 scalar;
/// `None` when there are no rows (see [`row_at`]).
fn clamped_row(op: &'static str, j: &Tensor, rows: usize, device: crate::Device) -> Result<Option<Tensor>> {
    let j = index::int_values(op, &crate::kernels::gpu::to_host(op, j)?)?
        .first()
        .copied()
        .unwrap_or(0);
    if rows == 0 {
        return Ok(None);
    }
    crate::kernels::gpu::upload(op, &Tensor::scalar(j.clamp(0, rows as i64 - 1)), device).map(Some)
}

/// Zeros shaped like `like` with row `j` set to `g` (the adjoint of
/// [`row_at`]; `j` clamped as there).
pub(crate) fn row_into(g: &Tensor, j: &Tensor, like: &Tensor) -> Result<Tensor> {
    expect_same_dtype("row_into", g, like)?;
    if like.rank() == 0 || g.shape() != &like.shape()[1..] {
        return Err(Error::ShapeMismatch {
            op: "row_into",
            lhs: g.shape().to_vec(),
            rhs: like.shape().to_vec(),
        });
    }
    let mut one = vec![1];
    one.extend_from_slice(g.shape());
    let y = match clamped_row("row_into", j, like.shape()[0], g.device())? {
        Some(row) => index::scatter_add(&g.reshape(&one)?, &row.reshape(&[1])?, 0, like.shape()[0])?,
        None => like.try_zeros_like()?,
    };
    let jc = j.clone();
    Ok(bind(Op::Shape(ShapeOp::RowInto), &[g, j, like], y, move |_| {
        vjp(move |gg, _| Ok(grads![Some(row_at(&gg[0], &jc)?), None, None]))
    }))
}
