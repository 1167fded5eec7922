//! Gather along an axis and its adjoint, scatter-add; concatenation.

use std::borrow::{Borrow, Cow};

use super::lockstep::zip;
use crate::error::{Error, Result};
use crate::tensor::layout::{self, checked_numel};
use crate::tensor::{alloc, with_dtype, DType, Element, Num, Shape, Tensor};

/// Reads an integer tensor's elements as `i64` (an error for other
/// dtypes): borrowed where they are `i64` already and contiguous.
pub(crate) fn int_values<'a>(op: &'static str, indices: &'a Tensor) -> Result<Cow<'a, [i64]>> {
    match indices.dtype() {
        DType::I32 => Ok(Cow::Owned(alloc::try_collect(
            op,
            indices.values::<i32>(op)?.iter().map(|&v| v as i64),
        )?)),
        DType::I64 => indices.values::<i64>(op),
        d => Err(Error::UnsupportedDType {
            op,
            dtype: d,
            expected: "i32 or i64 indices",
        }),
    }
}

/// Reads integer indices as `i64`, checking each lies in `0..dim`.
pub(crate) fn checked_indices<'a>(
    op: &'static str,
    indices: &'a Tensor,
    dim: usize,
    shape: &[usize],
) -> Result<Cow<'a, [i64]>> {
    let idx = int_values(op, indices)?;
    if let Some(&bad) = idx.iter().find(|&&i| i < 0 || i as usize >= dim) {
        return Err(Error::IndexOutOfRange {
            op,
            index: bad,
            dim,
            shape: shape.to_vec(),
        });
    }
    Ok(idx)
}

/// [`checked_indices`] of a host copy of `indices`: a device kernel with
/// nothing to compute never reads them, and an index out of range is an
/// error on every device whether or not anything is read (TensorFlow's
/// CPU kernels check only the indices they read, its GPU ones none).
fn check_on_host(op: &'static str, indices: &Tensor, dim: usize, shape: &[usize]) -> Result<()> {
    if indices.numel() > 0 {
        checked_indices(op, &crate::kernels::gpu::to_host(op, indices)?, dim, shape)?;
    }
    Ok(())
}

/// `out[a.., i.., b..] = params[a.., indices[i..], b..]` with `axis` the
/// position of the gathered dimension.
pub fn gather(params: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor> {
    let ps = params.shape();
    let gpu = crate::kernels::gpu::offload_in(
        "gather",
        &[params, indices],
        |_| {
            // (an index out of range is the kernel's to find: the error of
            // the next read of a value, see `kernels::cuda::index`; with
            // nothing to read, a host copy's, as on the CPU)
            let mut shape: Shape = ps[..axis].into();
            shape.extend_from_slice(indices.shape());
            shape.extend_from_slice(&ps[axis + 1..]);
            if checked_numel("gather", &shape)? == 0 {
                check_on_host("gather", indices, ps[axis], ps)?;
            }
            crate::kernels::cuda::gather("gather", params, indices, axis, &shape)
        },
        |h| gather(&h[0], &h[1], axis),
    );
    if let Some(r) = gpu {
        return r;
    }
    let idx = checked_indices("gather", indices, ps[axis], ps)?;
    let outer: usize = ps[..axis].iter().product();
    let inner: usize = ps[axis + 1..].iter().product();
    let dim = ps[axis];
    let mut shape: Shape = ps[..axis].into();
    shape.extend_from_slice(indices.shape());
    shape.extend_from_slice(&ps[axis + 1..]);
    let n = checked_numel("gather", &shape)?;
    Ok(with_dtype!(params.dtype(), T => {
        let src = params.values::<T>("gather")?;
        // (from the buffer cache: a step's lookups free and ask for the
        // same sizes each time)
        let mut out = alloc::try_buf::<T>("gather", n)?;
        // (an empty result is not walked, however many empty rows it has)
        let outer = if n == 0 { 0 } else { outer };
        for o in 0..outer {
            for &i in idx.iter() {
                let start = (o * dim + i as usize) * inner;
                out.extend_from_slice(&src[start..start + inner]);
            }
        }
        Tensor::from_storage(T::buf_into_storage(out), &shape)
    }))
}

/// The adjoint of [`gather`]: zeros of `[a.., dim, b..]` with each slice of
/// `updates` added at its index (duplicates accumulate).
pub fn scatter_add(updates: &Tensor, indices: &Tensor, axis: usize, dim: usize) -> Result<Tensor> {
    let us = updates.shape();
    let ir = indices.rank();
    if us.len() < axis + ir || us[axis..axis + ir] != *indices.shape() {
        return Err(Error::ShapeMismatch {
            op: "scatter_add",
            lhs: us.to_vec(),
            rhs: indices.shape().to_vec(),
        });
    }
    let mut shape: Shape = us[..axis].into();
    shape.push(dim);
    shape.extend_from_slice(&us[axis + ir..]);
    let n = checked_numel("scatter_add", &shape)?;
    let outer: usize = us[..axis].iter().product();
    let inner: usize = us[axis + ir..].iter().product();
    let gpu = crate::kernels::gpu::offload_in(
        "scatter_add",
        &[updates, indices],
        |_| {
            // (an index out of range: see `gather`)
            if n == 0 || updates.numel() == 0 {
                check_on_host("scatter_add", indices, dim, &shape)?;
            }
            crate::kernels::cuda::scatter_add(
                "scatter_add",
                updates,
                indices,
                outer,
                indices.numel(),
                inner,
                dim,
                &shape,
                Some(&shape),
            )
        },
        |h| scatter_add(&h[0], &h[1], axis, dim),
    );
    if let Some(r) = gpu {
        return r;
    }
    let idx = checked_indices("scatter_add", indices, dim, &shape)?;
    fn run<T: Num>(u: &[T], idx: &[i64], outer: usize, inner: usize, dim: usize, n: usize) -> Result<Vec<T>> {
        let mut out = super::filled_vec("scatter_add", n, T::zero())?;
        let outer = if n == 0 || u.is_empty() { 0 } else { outer };
        for o in 0..outer {
            for (j, &i) in zip(0.., idx) {
                let src = &u[(o * idx.len() + j) * inner..][..inner];
                let dst = &mut out[(o * dim + i as usize) * inner..][..inner];
                for (d, &s) in zip(&mut dst[..], src) {
                    *d = d.add_wrap(s);
                }
            }
        }
        Ok(out)
    }
    crate::tensor::with_num_dtype!(updates.dtype(), T => {
        let u = updates.values::<T>("scatter_add")?;
        Ok(Tensor::from_storage(T::into_storage(run::<T>(&u, &idx, outer, inner, dim, n)?), &shape))
    }, _ => super::complex::scatter_add(updates, &idx, &shape, outer, inner, dim))
}

/// `base[indices[j]] = f(base[indices[j]], updates[j])`, row by row along
/// axis 0 (a repeated index is updated once per occurrence, so additions
/// accumulate). Written over `base`'s buffer when nothing else references
/// it, so the cost is the rows', not the table's; otherwise into a copy that
/// replaces `base` (copy-on-write: a tensor sharing the old buffer keeps its
/// value). Indices are checked here; shapes and dtypes by the caller.
pub(crate) fn update_rows<T: Num>(
    op: &'static str,
    base: &mut Tensor,
    updates: &Tensor,
    indices: &Tensor,
    f: impl Fn(T, T) -> T,
) -> Result<()> {
    let shape: Shape = base.shape().into();
    let rows = shape.first().copied().unwrap_or(0);
    let idx = checked_indices(op, indices, rows, &shape)?;
    let inner: usize = shape[1..].iter().product();
    let u = updates.values::<T>(op)?;
    let apply = |out: &mut [T]| {
        for (j, &i) in zip(0.., &idx[..]) {
            let src = &u[j * inner..][..inner];
            let dst = &mut out[i as usize * inner..][..inner];
            for (d, &s) in zip(&mut dst[..], src) {
                *d = f(*d, s);
            }
        }
    };
    if let Some(out) = base.unique_values_mut::<T>() {
        apply(out);
        return Ok(());
    }
    let mut out = base.owned_values::<T>(op)?;
    apply(&mut out);
    *base = Tensor::from_storage(T::into_storage(out), &shape);
    Ok(())
}

/// The output of a concatenation of contiguous operands, `parts` (each
/// operand's elements from its first, and `c`, its block of a row of the
/// output: its elements from the joined axis on), over the compute
/// threads by equal runs of the output: each run copies the blocks, or
/// their pieces, that fall in it. (Copied row by row on the calling
/// thread, the gradient of a fused QKV projection's `split`, a
/// `[1024, 768]` output, was a serial copy of 3 MiB while the other
/// threads waited.) Every element is written once; a copy, so the bits
/// do not depend on the split.
fn concat_rows<T: Element>(parts: &[(&[T], usize)], out: &mut [std::mem::MaybeUninit<T>]) {
    let row: usize = parts.iter().map(|p| p.1).sum();
    if row == 0 {
        return;
    }
    let chunk = super::chunk_len(out.len());
    super::workers::for_each_chunk_mut(out, chunk, |i, dst| {
        let (mut p, end) = (i * chunk, i * chunk + dst.len());
        while p < end {
            let (o, mut q) = (p / row, p % row);
            // the operand whose block holds column `q` of row `o`
            let mut t = 0;
            while q >= parts[t].1 {
                q -= parts[t].1;
                t += 1;
            }
            let (src, c) = parts[t];
            let take = (c - q).min(end - p);
            let from = &src[o * c + q..o * c + q + take];
            let to = &mut dst[p - i * chunk..p - i * chunk + take];
            // SAFETY: both runs hold `take` elements (sliced above), and
            // the output is a fresh buffer, no operand's
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), to.as_mut_ptr() as *mut T, take) };
            p += take;
        }
    });
}

/// Joins tensors of one dtype along `axis` into a new tensor of `shape`
/// (their shapes agree off `axis`, and `shape[axis]` is the sum; the caller
/// checks both, and that `shape` is valid). Tensors one rank lower are the
/// rows of a stack along `axis` (each a new dim of one there).
pub(crate) fn concat<B: std::borrow::Borrow<Tensor>>(
    op: &'static str,
    tensors: &[B],
    axis: usize,
    shape: &[usize],
) -> Result<Tensor> {
    let outer: usize = shape[..axis].iter().product();
    let n: usize = shape.iter().product();
    let dtype = tensors.first().map_or(DType::F32, |t| t.borrow().dtype());
    let tensors = || tensors.iter().map(Borrow::borrow);
    // (the list of operands only for device tensors: a traced step
    // concatenates at every call, and host tensors need no list)
    if tensors().any(|t| t.device_buffer().is_some()) {
        let all: Vec<&Tensor> = tensors().collect();
        if let Some(r) = crate::kernels::gpu::offload_in(
            op,
            &all,
            |_| crate::kernels::cuda::concat(op, &all, axis, shape),
            |h| concat(op, h, axis, shape),
        ) {
            return r;
        }
    }
    for t in tensors() {
        crate::kernels::gpu::expect_host(op, t)?;
    }
    with_dtype!(dtype, T => {
        // (from the buffer cache when a large one of this size is free: a
        // compiled graph's joined products concatenate the same sizes every
        // run, and fresh pages cost more than the copy)
        let mut out = alloc::try_buf::<T>(op, n)?;
        let outer = if n == 0 { 0 } else { outer };
        if tensors().all(|t| t.is_contiguous()) {
            // (read in place: no list of the operands' elements)
            if n < super::PAR_MIN || super::workers::threads() < 2 {
                for o in 0..outer {
                    for t in tensors() {
                        let c: usize = t.shape()[axis..].iter().product();
                        let at = t.layout().offset + o * c;
                        out.extend_from_slice(&t.buffer::<T>()[at..at + c]);
                    }
                }
            } else {
                let parts: smallvec::SmallVec<[(&[T], usize); 4]> = tensors()
                    .map(|t| (&t.buffer::<T>()[t.layout().offset..], t.shape()[axis..].iter().product()))
                    .collect();
                concat_rows(&parts, &mut super::spare(&mut out)[..n]);
                // SAFETY: `concat_rows` wrote all `n` elements.
                unsafe { out.set_len(n) };
            }
            return Ok(Tensor::from_storage(T::buf_into_storage(out), shape));
        }
        // each operand copied from where it lies straight into its block of
        // the output (one walk of two layouts, its rows spread over the
        // compute threads; a strided operand gathered first was copied
        // twice)
        if n > 0 {
            let dst = super::workers::SendPtr(super::spare(&mut out)[..n].as_mut_ptr() as *mut T);
            let out_strides = layout::contiguous_strides(shape);
            let mut at = 0;
            for t in tensors() {
                let mut l = t.layout().clone();
                if l.shape.len() < shape.len() {
                    // a row of a stack: a new dim of one at `axis`
                    l.shape.insert(axis, 1);
                    l.strides.insert(axis, 0);
                }
                let (buf, base) = (t.buffer::<T>(), at * out_strides[axis] as usize);
                at += l.shape[axis];
                if l.numel() == 0 {
                    continue;
                }
                let (sh, [ss, ds]) = layout::coalesce(&l.shape, [&l.strides, &out_strides]);
                let (len, si, di) = (sh[sh.len() - 1], ss[sh.len() - 1], ds[sh.len() - 1]);
                let rows = l.numel() / len;
                let per = (super::chunk_len(l.numel()) / len).max(1);
                let strides = [ss, ds];
                super::workers::parallel_for(rows.div_ceil(per), |c| {
                    let range = c * per..((c + 1) * per).min(rows);
                    layout::for_rows(&sh, &strides, [l.offset, base], range, |_, [s, d]| {
                        let (s, d) = (s as usize, d as usize);
                        // the row lies inside the operand's buffer and the
                        // output's (the layouts fit them)
                        let last = |at: usize, step: isize| at as isize + (len as isize - 1) * step;
                        assert!(last(s, si) < buf.len() as isize && last(d, di) < n as isize && (si >= 0 || last(s, si) >= 0));
                        if si == 1 && di == 1 {
                            // SAFETY: both rows are in bounds (above); the
                            // rows of distinct (operand, row) pairs are
                            // disjoint blocks of the output, which is not
                            // an operand's buffer.
                            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(s), dst.get().add(d), len) };
                        } else {
                            for j in 0..len as isize {
                                // SAFETY: as above, element by element.
                                unsafe { *dst.get().offset(d as isize + j * di) = buf[(s as isize + j * si) as usize] };
                            }
                        }
                    });
                });
            }
        }
        // SAFETY: the operands' blocks tile the output (their extents
        // along `axis` sum to its extent, and they agree elsewhere), so
        // every one of its `n` elements was written above.
        unsafe { out.set_len(n) };
        Ok(Tensor::from_storage(T::buf_into_storage(out), shape))
    })
}
