//! Slicing and writing a block at a position held in a tensor (XLA's
//! `DynamicSlice` and `DynamicUpdateSlice`, JAX's `lax.dynamic_slice` and
//! `lax.dynamic_update_slice`, Keras's `ops.slice_update`).
//!
//! Why they exist beside [`Tensor::slice`]: a slice's `begin` is a
//! number, which a trace bakes into its graph, so a traced step that
//! writes at a moving position (a decoder's fixed-size key/value cache,
//! written at the index of the next token) would be traced again for
//! every position. Here the position is a tensor, an input of the traced
//! function like any other, and one graph serves every position.
//!
//! Unlike XLA, which clamps a start so that the block fits, a block that
//! does not fit is an error naming the op, the shapes and the start:
//! clamping would write a cache's new keys over its last ones without a
//! word. Each op is the other's adjoint: the gradient of a dynamic slice
//! writes the cotangent into zeros at the start, and that of an update
//! zeroes the written block (for the operand) and slices it (for the
//! update). The start is not differentiable.

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::index::int_values;
use crate::ops::desc::{Op, ShapeOp};
use crate::ops::{bind_jvp, expect_same_dtype, grads, only};
use crate::tensor::layout::contiguous_strides;
use crate::tensor::{with_dtype, Element, Tensor};

const SLICE: &str = "dynamic_slice";
const UPDATE: &str = "dynamic_update_slice";

/// The start `[rank]` (integers, on any device) of a block `size` in
/// `shape`, checked to fit.
fn start_of(op: &'static str, start: &Tensor, shape: &[usize], size: &[usize]) -> Result<Vec<usize>> {
    if start.rank() != 1 || start.shape()[0] != shape.len() || !start.dtype().is_int() {
        return Err(Error::invalid(
            op,
            format!(
                "the start must be a vector of {} integers (one per axis of {shape:?}), got {} {:?}",
                shape.len(),
                start.dtype(),
                start.shape()
            ),
        ));
    }
    let host = crate::kernels::gpu::to_host(op, start)?;
    let s = int_values(op, &host)?;
    let fits = s
        .iter()
        .zip(shape.iter().zip(size))
        .all(|(&b, (&d, &n))| b >= 0 && (b as u64).checked_add(n as u64).is_some_and(|end| end <= d as u64));
    if !fits {
        return Err(Error::invalid(
            op,
            format!("a block {size:?} at start {:?} does not fit in shape {shape:?}", &s[..]),
        ));
    }
    Ok(s.iter().map(|&b| b as usize).collect())
}

impl Tensor {
    /// The block of `sizes` starting at `start` (an integer vector, one
    /// entry per axis, read when the op runs: in a traced function an
    /// input, so one trace serves every start), as a view. A block that
    /// does not fit is an error (XLA would clamp the start). d/dx writes
    /// the cotangent into zeros at `start`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec((0..12).collect::<Vec<i32>>(), &[3, 4])?;
    /// let at = Tensor::vector(&[1i64, 2]);
    /// assert_eq!(x.dynamic_slice(&at, &[2, 2])?.to_vec::<i32>()?, vec![6, 7, 10, 11]);
    /// let err = x.dynamic_slice(&Tensor::vector(&[2i64, 0]), &[2, 2]).unwrap_err();
    /// assert!(err.to_string().contains("dynamic_slice"), "{err}");
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn dynamic_slice(&self, start: &Tensor, sizes: &[usize]) -> Result<Tensor> {
        if sizes.len() != self.rank() {
            return Err(Error::invalid(
                SLICE,
                format!("{} sizes given for shape {:?}", sizes.len(), self.shape()),
            ));
        }
        let begin = start_of(SLICE, start, self.shape(), sizes)?;
        let y = self.block_view(&begin, sizes);
        let (st, xshape) = (start.clone(), self.shape().to_vec());
        Ok(bind_jvp(
            Op::Shape(ShapeOp::DynamicSlice(sizes.into())),
            &[self, start],
            y,
            move |_| {
                vjp(move |g, _| {
                    let zeros = Tensor::try_zeros(&xshape, g[0].dtype())?.to(g[0].device())?;
                    Ok(grads![Some(zeros.dynamic_update_slice(&g[0], &st)?), None])
                })
            },
            |t, _| only(t)?.dynamic_slice(start, sizes),
        ))
    }

    /// `self` with the block `update` written at `start` (an integer
    /// vector, one entry per axis, read when the op runs: in a traced
    /// function an input, so one trace serves every start), as Keras's
    /// `ops.slice_update` and XLA's `DynamicUpdateSlice`. A block that
    /// does not fit is an error (XLA would clamp the start). d/dself is
    /// the cotangent with the block zeroed, d/dupdate the cotangent's
    /// block.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let cache = Tensor::zeros(&[2, 4], gradtape::DType::F32);
    /// let new = Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1])?;
    /// let y = cache.dynamic_update_slice(&new, &Tensor::vector(&[0i64, 3]))?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0]);
    /// // past the end: an error, not a clamped write
    /// assert!(cache.dynamic_update_slice(&new, &Tensor::vector(&[0i64, 4])).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn dynamic_update_slice(&self, update: &Tensor, start: &Tensor) -> Result<Tensor> {
        expect_same_dtype(UPDATE, self, update)?;
        if update.rank() != self.rank() {
            return Err(Error::invalid(
                UPDATE,
                format!(
                    "the update {:?} must have the rank of the operand {:?}",
                    update.shape(),
                    self.shape()
                ),
            ));
        }
        let begin = start_of(UPDATE, start, self.shape(), update.shape())?;
        let host = |x: &Tensor, u: &Tensor| with_dtype!(x.dtype(), T => write_block::<T>(x, u, &begin));
        // on a GPU: a copy with the update's rows written at their offsets
        // (the kernel of `tensor_scatter_nd_update`)
        let gpu = crate::dispatch::device::offload(
            UPDATE,
            &[self, update],
            |_| {
                let (offsets, inner) = block_offsets(self.shape(), update.shape(), &begin);
                crate::kernels::cuda::scatter_update(UPDATE, self, update, &offsets, inner)
            },
            |h| host(&h[0], &h[1]),
        );
        let y = gpu.unwrap_or_else(|| host(self, update))?;
        let (st, ushape) = (start.clone(), update.shape().to_vec());
        Ok(bind_jvp(
            Op::Shape(ShapeOp::DynamicUpdateSlice),
            &[self, update, start],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let g = &g[0];
                    let dx = if needs[0] {
                        let zeros = Tensor::try_zeros(&ushape, g.dtype())?.to(g.device())?;
                        Some(g.dynamic_update_slice(&zeros, &st)?)
                    } else {
                        None
                    };
                    let du = if needs[1] {
                        Some(g.dynamic_slice(&st, &ushape)?)
                    } else {
                        None
                    };
                    Ok(grads![dx, du, None])
                })
            },
            |t, _| {
                let tx = crate::ops::tangent_or_zero(&t[0], self)?;
                let tu = crate::ops::tangent_or_zero(&t[1], update)?;
                tx.dynamic_update_slice(&tu, start)
            },
        ))
    }
}

/// Where a block `us` at `begin` of a row-major `shape` lies, as the
/// offsets of its slices of `inner` elements (in units of `inner`, in the
/// block's row-major order): its rows when they span the last axis, else
/// its elements.
fn block_offsets(shape: &[usize], us: &[usize], begin: &[usize]) -> (Vec<usize>, usize) {
    let r = shape.len();
    let n: usize = us.iter().product();
    if n == 0 || r == 0 {
        return ((0..n.min(1)).collect(), 1);
    }
    let strides = contiguous_strides(shape);
    let inner = if us[r - 1] == shape[r - 1] { us[r - 1] } else { 1 };
    let lead = if inner == 1 { r } else { r - 1 };
    let mut idx = vec![0usize; lead];
    let mut offsets = Vec::with_capacity(n / inner);
    for _ in 0..n / inner {
        let off: usize = (0..r)
            .map(|i| (begin[i] + idx.get(i).copied().unwrap_or(0)) * strides[i] as usize)
            .sum();
        offsets.push(off / inner);
        for i in (0..lead).rev() {
            idx[i] += 1;
            if idx[i] < us[i] {
                break;
            }
            idx[i] = 0;
        }
    }
    (offsets, inner)
}

/// A row-major copy of `x` with `u` written at `begin` (checked to fit),
/// slice by slice at [`block_offsets`] (the offsets the GPU kernel writes
/// at, so that they are checked on every host too).
fn write_block<T: Element>(x: &Tensor, u: &Tensor, begin: &[usize]) -> Result<Tensor> {
    let mut out = x.values::<T>(UPDATE)?.into_owned();
    let uv = u.values::<T>(UPDATE)?;
    let (offsets, inner) = block_offsets(x.shape(), u.shape(), begin);
    for (&o, slice) in offsets.iter().zip(uv.chunks_exact(inner)) {
        out[o * inner..(o + 1) * inner].copy_from_slice(slice);
    }
    Tensor::from_vec(out, x.shape())
}
