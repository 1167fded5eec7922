//! Joining and splitting: concat, stack, unstack, split. concat is a kernel
//! whose rule slices the cotangent (a view per input); a split is views
//! whose rule, on a tape, is one concatenation (`split_recorded`); the
//! others are made of these, expand_dims, narrow and squeeze.

use crate::dispatch::{self, vjp, Grads, Kind, Operands};
use crate::error::{Error, Result};
use crate::kernels::cpu::index;
use crate::ops::bind;
use crate::ops::desc::{Lazy, Op, ShapeOp};
use crate::tensor::layout::{checked_numel, norm_axis};
use crate::tensor::{alloc, Shape, Tensor};
use std::borrow::Borrow;

const CONCAT: &str = "concat";

/// The axis and the shape of the concatenation of `tensors` along `axis`,
/// checked: a common dtype, rank and every other dimension.
fn concat_shape<B: Borrow<Tensor>>(tensors: &[B], axis: isize) -> Result<(usize, Shape)> {
    let Some(first) = tensors.first().map(Borrow::borrow) else {
        return Err(Error::invalid(CONCAT, "needs at least one tensor"));
    };
    let ax = norm_axis(CONCAT, axis, first.shape())?;
    for t in tensors {
        let t = t.borrow();
        crate::ops::expect_same_dtype(CONCAT, first, t)?;
        let ok = t.rank() == first.rank() && (0..t.rank()).all(|d| d == ax || t.shape()[d] == first.shape()[d]);
        if !ok {
            return Err(Error::ShapeMismatch {
                op: CONCAT,
                lhs: first.shape().to_vec(),
                rhs: t.shape().to_vec(),
            });
        }
    }
    let mut shape: Shape = first.shape().into();
    // (a saturated sum is refused just below)
    shape[ax] = tensors
        .iter()
        .fold(0usize, |a, t| a.saturating_add(t.borrow().shape()[ax]));
    checked_numel(CONCAT, &shape)?;
    Ok((ax, shape))
}

/// [`Tensor::concat`] of a slice of tensors, for a compiled graph's run
/// while nothing records (no tape, accumulator or trace): no list of the
/// operands and nothing kept for a gradient, so a run allocates only the
/// result (the `rnn_grad` bench's step joins 64 operands three times).
pub fn concat_unrecorded(tensors: &[Tensor], axis: isize) -> Result<Tensor> {
    let (ax, shape) = concat_shape(tensors, axis)?;
    index::concat(CONCAT, tensors, ax, &shape)
}

impl Tensor {
    /// Joins tensors along an existing `axis`; all must share dtype, rank
    /// and every other dimension. d/dxᵢ is the matching slice of the cotangent.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1i32, 2], &[1, 2])?;
    /// let b = Tensor::from_vec(vec![3i32, 4, 5, 6], &[2, 2])?;
    /// let c = Tensor::concat(&[&a, &b], 0)?;
    /// assert_eq!(c.shape(), &[3, 2]);
    /// assert_eq!(c.to_vec::<i32>()?, vec![1, 2, 3, 4, 5, 6]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn concat(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        let (ax, shape) = concat_shape(tensors, axis)?;
        // (kept for the gradient; inline up to 16 operands)
        let sizes: smallvec::SmallVec<[usize; 16]> = tensors.iter().map(|t| t.shape()[ax]).collect();
        let y = index::concat(CONCAT, tensors, ax, &shape)?;
        Ok(bind(Op::Shape(ShapeOp::Concat(axis)), tensors, y, move |_| {
            vjp(move |g, needs| {
                let mut start = 0;
                let mut out = Grads::new();
                for (i, &s) in sizes.iter().enumerate() {
                    out.push(needs[i].then(|| g[0].narrow(ax as isize, start, s)).transpose()?);
                    start += s;
                }
                Ok(out)
            })
        }))
    }

    /// Stacks tensors of one shape along a new `axis` (in `-(rank+1)..=rank`).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::vector(&[1.0f32, 2.0]);
    /// let b = Tensor::vector(&[3.0f32, 4.0]);
    /// let s = Tensor::stack(&[&a, &b], 1)?;
    /// assert_eq!(s.shape(), &[2, 2]);
    /// assert_eq!(s.to_vec::<f32>()?, vec![1.0, 3.0, 2.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn stack(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        const OP: &str = "stack";
        let Some(first) = tensors.first() else {
            return Err(Error::invalid(OP, "needs at least one tensor"));
        };
        let r = first.rank() as isize;
        if axis < -(r + 1) || axis > r {
            return Err(Error::BadAxis {
                op: OP,
                axis,
                shape: first.shape().to_vec(),
                repeated: false,
            });
        }
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: OP,
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
        }
        let ax = if axis < 0 { axis + r + 1 } else { axis };
        let expanded: Vec<Tensor> = tensors.iter().map(|t| t.expand_dims(ax)).collect::<Result<_>>()?;
        Tensor::concat(&expanded.iter().collect::<Vec<_>>(), ax)
    }

    /// Splits along `axis` into its slices, each without that dimension (views).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[3, 2])?;
    /// let rows = x.unstack(0)?;
    /// assert_eq!(rows.len(), 3);
    /// assert_eq!(rows[2].to_vec::<i64>()?, vec![5, 6]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn unstack(&self, axis: isize) -> Result<Vec<Tensor>> {
        let ax = norm_axis("unstack", axis, self.shape())?;
        let d = self.shape()[ax];
        // (one part per row: a huge dim is an OutOfMemory error, not an abort)
        let ones = alloc::try_filled("unstack", d, 1usize)?;
        let mut out = alloc::try_vec("unstack", d)?;
        for part in self.split_sizes(&ones, ax as isize)? {
            out.push(part.squeeze(&[ax as isize])?);
        }
        Ok(out)
    }

    /// Splits along `axis` into `count` equal parts (views); `count` must
    /// divide the dimension.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0, gradtape::DType::F32)?;
    /// let parts = x.split(3, 0)?;
    /// assert_eq!(parts[1].to_vec::<f32>()?, vec![2.0, 3.0]);
    /// assert!(x.split(4, 0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn split(&self, count: usize, axis: isize) -> Result<Vec<Tensor>> {
        let ax = norm_axis("split", axis, self.shape())?;
        let d = self.shape()[ax];
        if count == 0 || !d.is_multiple_of(count) {
            return Err(Error::invalid(
                "split",
                format!(
                    "cannot split dimension {axis} of shape {:?} into {count} equal parts",
                    self.shape()
                ),
            ));
        }
        self.split_sizes(&alloc::try_filled("split", count, d / count)?, axis)
    }

    /// Splits along `axis` into parts of the given sizes (views); the sizes
    /// must add up to the dimension.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::arange(0.0, 5.0, 1.0, gradtape::DType::F64)?;
    /// let p = x.split_sizes(&[1, 4], 0)?;
    /// assert_eq!(p[1].to_vec::<f64>()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn split_sizes(&self, sizes: &[usize], axis: isize) -> Result<Vec<Tensor>> {
        let ax = norm_axis("split_sizes", axis, self.shape())?;
        let d = self.shape()[ax];
        let total = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
        if total != Some(d) {
            return Err(Error::invalid(
                "split_sizes",
                format!(
                    "sizes {sizes:?} do not add up to dimension {axis} of shape {:?}",
                    self.shape()
                ),
            ));
        }
        if sizes.len() > 1 && dispatch::differentiating() && !dispatch::listens(Kind::Forward) {
            return Ok(split_recorded(self, ax, sizes));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&s| {
                let part = self.narrow(ax as isize, start, s);
                start += s;
                part
            })
            .collect()
    }
}

/// `x` split along `ax` into parts of `sizes` (checked), for a tape: one
/// op with a part per output, whose rule concatenates the parts'
/// cotangents (zeros for those that got none) in one pass. Recorded as
/// one slice per part, each rule would pad its cotangent to `x`'s shape,
/// and the tape add the padded cotangents: a sequence unstacked over `T`
/// steps cost `T` passes over the whole sequence, `O(T²)`. A trace sees
/// the parts as the slices they are (its graphs' gradients become one
/// concatenation in the compiler: `pads_to_concat`). Forward mode takes
/// the slices' own JVPs (the caller's other path).
fn split_recorded(x: &Tensor, ax: usize, sizes: &[usize]) -> Vec<Tensor> {
    let mut begin = vec![0; x.rank()];
    let mut parts = Vec::with_capacity(sizes.len());
    for &s in sizes {
        let mut size = x.shape().to_vec();
        size[ax] = s;
        let part = x.block_view(&begin, &size);
        if dispatch::listens(Kind::Trace) {
            let (b, z) = (begin.clone(), size);
            dispatch::announce(
                &Lazy("Slice", || Op::Shape(ShapeOp::Slice(b[..].into(), z[..].into()))),
                &[x],
                std::slice::from_ref(&part),
            );
        }
        begin[ax] += s;
        parts.push(part);
    }
    let (shape, dtype, device) = (x.shape().to_vec(), x.dtype(), x.device());
    let sizes = sizes.to_vec();
    let mut make = move || {
        let (shape, sizes) = (shape.clone(), sizes.clone());
        let dense = move |g: &[Tensor], _: &[bool]| -> Result<Grads> {
            let parts: Vec<&Tensor> = g.iter().collect();
            Ok(crate::ops::grads![Some(Tensor::concat(&parts, ax as isize)?)])
        };
        vjp(dense).with_optional(move |g, _| {
            let parts = g
                .iter()
                .zip(&sizes)
                .map(|(c, &s)| match c {
                    Some(c) => Ok(c.clone()),
                    None => {
                        let mut part = shape.clone();
                        part[ax] = s;
                        crate::kernels::gpu::filled("split", &part, 0.0, dtype, device)
                    }
                })
                .collect::<Result<Vec<Tensor>>>()?;
            let refs: Vec<&Tensor> = parts.iter().collect();
            Ok(crate::ops::grads![Some(Tensor::concat(&refs, ax as isize)?)])
        })
    };
    dispatch::bind_untraced("Split", Operands::Tensors(&[x]), &parts, &mut make, None);
    parts
}

/// Stacks tensors of one shape and dtype along a new axis 0 (recorded: row
/// `i` of the cotangent goes to input `i`).
pub(crate) fn stack(rows: &[Tensor]) -> Result<Tensor> {
    let first = rows
        .first()
        .ok_or_else(|| Error::invalid("stack", "nothing to stack"))?;
    let row_shape = first.shape().to_vec();
    for r in rows {
        if r.shape() != first.shape() || r.dtype() != first.dtype() {
            return Err(Error::invalid(
                "stack",
                format!(
                    "rows differ: {} {:?} and {} {:?}",
                    first.dtype(),
                    first.shape(),
                    r.dtype(),
                    r.shape()
                ),
            ));
        }
    }
    let mut shape = vec![rows.len()];
    shape.extend_from_slice(&row_shape);
    crate::tensor::layout::checked_numel("stack", &shape)?;
    let inputs: Vec<&Tensor> = rows.iter().collect();
    let y = crate::kernels::cpu::index::concat("stack", &inputs, 0, &shape)?;
    let n = rows.len();
    Ok(bind(Op::Shape(ShapeOp::Stack), &inputs, y, move |_| {
        vjp(move |g, needs| {
            let g = &g[0];
            let mut out = Grads::with_capacity(n);
            for (i, &need) in needs.iter().enumerate().take(n) {
                out.push(need.then(|| g.narrow(0, i, 1)?.reshape(&row_shape)).transpose()?);
            }
            Ok(out)
        })
    }))
}
