//! The op's CPU side: the fused CPU kernels (`kernels::cpu::attention`)
//! on host tensors, each read where it lies when its rows are strided
//! matrices (a head split, a transposed view of heads), the mask in its
//! own broadcast shape. A GPU's op runs them on host copies when the GPU is
//! emulated.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::hidden_rows::{add_mean_grads, write_means};
use super::{check_grad, HiddenRows, Shapes, Spec, OP};
use crate::error::Result;
use crate::kernels::cpu::attention::{self as kernel, Mask};
use crate::kernels::cpu::attention_gemm::{Batch, GradDest, Rows};
use crate::tensor::dtype::with_types;
use crate::tensor::{Float, Tensor};

/// The mask's layout for the kernel: its values (contiguous, in its own
/// shape, padded with leading 1s to the scores' rank) and strides, 0 along
/// broadcast dims.
fn mask_layout<'a, T: Float>(m: &'a [T], shape: &[usize], s: &Shapes) -> Mask<'a, T> {
    let r = s.batch.len() + 2;
    let mut dims: SmallVec<[usize; 6]> = smallvec::smallvec![1; r - shape.len()];
    dims.extend_from_slice(shape);
    let mut strides: SmallVec<[usize; 6]> = smallvec::smallvec![0; r];
    let mut acc = 1;
    for a in (0..r).rev() {
        strides[a] = if dims[a] == 1 { 0 } else { acc };
        acc *= dims[a];
    }
    Mask {
        data: m,
        // the batch dims, with the mask's strides (0 where it broadcasts)
        batch: Batch {
            dims: s.batch.iter().zip(&strides).map(|(&n, &st)| (n, st)).collect(),
            base: 0,
        },
        row: strides[r - 2],
        col: strides[r - 1],
    }
}

/// `t` (`[..., rows, width]`, host) as the kernels' batch of matrices
/// ([`Rows`]): where it lies when each row's elements are adjacent and no
/// stride is negative (a head split of a slice, a transposed view of
/// heads), else a packed copy. The data, each batch element's offset and
/// the row stride.
pub(super) fn rows_of<T: crate::tensor::Element>(t: &Tensor) -> Result<(Cow<'_, [T]>, Batch, usize)> {
    crate::kernels::gpu::expect_host(OP, t)?;
    let l = t.layout();
    let r = l.shape.len();
    let (rows, width) = (l.shape[r - 2], l.shape[r - 1]);
    let rs = if rows <= 1 {
        width
    } else {
        l.strides[r - 2].max(0) as usize
    };
    let strided = (width <= 1 || l.strides[r - 1] == 1)
        && rs >= width
        && l.strides.iter().zip(&l.shape).all(|(&s, &d)| s >= 0 || d <= 1);
    let batch: usize = l.shape[..r - 2].iter().product();
    if !strided || l.is_contiguous() || t.numel() == 0 {
        let packed = t.values::<T>(OP)?;
        return Ok((packed, Batch::even(batch, rows * width, 0), width));
    }
    // each batch dim's size and stride (a dim of one adds nothing, whatever its stride)
    let batch = Batch {
        dims: (0..r - 2).map(|a| (l.shape[a], l.strides[a].max(0) as usize)).collect(),
        base: l.offset,
    };
    Ok((Cow::Borrowed(t.buffer::<T>()), batch, rs))
}

/// [`rows_of`]'s result as the kernels take it.
pub(super) fn rows<'a, T: Clone>((data, batch, rs): &'a (Cow<'_, [T]>, Batch, usize)) -> Rows<'a, T> {
    Rows {
        data,
        batch: batch.clone(),
        rs: *rs,
    }
}

/// The forward kernel on the CPU (host tensors): the packed rows.
pub(super) fn forward_host(s: &Shapes, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
    let d = &s.dims;
    with_types!(q.dtype(), T => {
        let (qv, kv, vv) = (rows_of::<T>(q)?, rows_of::<T>(k)?, rows_of::<T>(v)?);
        let mv = mask.map(|m| m.values::<T>(OP)).transpose()?;
        let ml = mv.as_deref().zip(mask).map(|(mv, m)| mask_layout(mv, m.shape(), s));
        let mut out = kernel::forward::<T>(OP, d, &rows(&qv), &rows(&kv), &rows(&vv), ml.as_ref())?;
        if s.hidden == HiddenRows::Mean {
            write_means(d, &mut out, &rows(&vv));
        }
        let shape: SmallVec<[usize; 6]> = s.batch.iter().copied().chain([d.tq, d.dv + 1]).collect();
        Tensor::from_vec(out, &shape).map_err(|e| e.for_op(OP))
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64 (halves run as f32)"))
}

/// The backward kernel on the CPU (host tensors): `dq`, `dk`, `dv` per
/// batch element.
pub(super) fn backward_host(
    s: &Shapes,
    [q, k, v]: [&Tensor; 3],
    mask: Option<&Tensor>,
    packed: &Tensor,
    dout: &Tensor,
) -> Result<Tensor> {
    let d = &s.dims;
    with_types!(q.dtype(), T => {
        let (qv, kv, vv, gv) = (rows_of::<T>(q)?, rows_of::<T>(k)?, rows_of::<T>(v)?, rows_of::<T>(dout)?);
        let mv = mask.map(|m| m.values::<T>(OP)).transpose()?;
        let ml = mv.as_deref().zip(mask).map(|(mv, m)| mask_layout(mv, m.shape(), s));
        let pv = packed.values::<T>(OP)?;
        let (q, k, v, g) = (rows(&qv), rows(&kv), rows(&vv), rows(&gv));
        let mut out = kernel::backward::<T>(OP, d, &q, &k, &v, ml.as_ref(), &pv, &g)?;
        if s.hidden == HiddenRows::Mean {
            add_mean_grads(d, &pv, &g, &mut out, &GradDest::packed(d));
        }
        let shape: SmallVec<[usize; 6]> = s.batch.iter().copied().chain([d.tq * d.d + d.tk * d.d + d.tk * d.dv]).collect();
        Tensor::from_vec(out, &shape).map_err(|e| e.for_op(OP))
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64 (halves run as f32)"))
}

/// Attention's backward pass on host tensors, `dq`, `dk` and `dv` written
/// where `dest` says in one tensor of `shape` (`dest.len` elements; 0
/// outside the parts): a compiled graph's node whose output is the
/// concatenation the three gradients were joined by
/// (`function::compile::grads_into_concat`). Not recorded on tapes (a
/// compiled graph's nodes only run).
///
/// # Safety
///
/// `dest`'s parts are pairwise disjoint (no element of the buffer in two
/// rows of one part or in two parts).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attention_grad_into(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    a: &Spec,
    packed: &Tensor,
    dout: &Tensor,
    shape: &[usize],
    dest: &GradDest,
) -> Result<Tensor> {
    let s = check_grad(q, k, v, a, packed, dout)?;
    let n: usize = shape.iter().product();
    if n != dest.len {
        return Err(crate::error::Error::invalid(
            OP,
            format!("a gradient layout of {} elements for the shape {shape:?}", dest.len),
        ));
    }
    let d = &s.dims;
    let mask = a.mask.as_ref();
    with_types!(q.dtype(), T => {
        let (qv, kv, vv, gv) = (rows_of::<T>(q)?, rows_of::<T>(k)?, rows_of::<T>(v)?, rows_of::<T>(dout)?);
        let mv = mask.map(|m| m.values::<T>(OP)).transpose()?;
        let ml = mv.as_deref().zip(mask).map(|(mv, m)| mask_layout(mv, m.shape(), &s));
        let pv = packed.values::<T>(OP)?;
        let (q, k, v, g) = (rows(&qv), rows(&kv), rows(&vv), rows(&gv));
        // SAFETY: the caller's (disjoint parts).
        let mut out = unsafe { kernel::backward_into::<T>(OP, d, &q, &k, &v, ml.as_ref(), &pv, &g, dest)? };
        if s.hidden == HiddenRows::Mean {
            add_mean_grads(d, &pv, &g, &mut out, dest);
        }
        Tensor::from_vec(out, shape).map_err(|e| e.for_op(OP))
    }, [F32: f32, F64: f64], _ => Err(crate::error::Error::invalid(OP, format!("the compiled gradient takes f32 or f64, got {}", q.dtype()))))
}
