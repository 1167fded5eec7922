//! Reductions (sum, max, min) over a set of axes.
//!
//! The view is permuted so that kept axes come first and reduced axes last;
//! then each output element reduces one contiguous row. Two layouts avoid the
//! copy that a non-contiguous permutation needs: reduced axes already last
//! (rows), and reduced axes first on a contiguous input (columns, e.g. a bias
//! gradient), which accumulates whole rows into the output.

use super::lockstep::{chunks_mut, copy, zip};
use super::math::with_simd_for;
use super::{build, gather_strided, PAR_MIN};
use crate::error::Result;
use crate::tensor::{alloc, with_num_dtype, Buf, Element, Layout, Num, Shape, Tensor};

/// Which reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceKind {
    Sum,
    Max,
    Min,
}

trait Reducer<T: Copy>: Copy + Sync {
    fn init(self) -> T;
    fn combine(self, a: T, b: T) -> T;
    /// Reduces a contiguous slice (may be specialised for speed/accuracy).
    fn slice(self, xs: &[T]) -> T {
        xs.iter().fold(self.init(), |a, &b| self.combine(a, b))
    }
}

#[derive(Clone, Copy)]
struct SumR;
#[derive(Clone, Copy)]
struct MaxR;
#[derive(Clone, Copy)]
struct MinR;

impl<T: Num> Reducer<T> for SumR {
    fn init(self) -> T {
        T::zero()
    }
    #[inline]
    fn combine(self, a: T, b: T) -> T {
        a.add_wrap(b)
    }
    /// Eight independent lanes in blocks of 4096, blocks added in f64: fast
    /// (vectorised) and accurate enough for millions of f32 terms. Integers
    /// are summed exactly (wrapping), not through f64.
    #[inline(always)]
    fn slice(self, xs: &[T]) -> T {
        if !T::DTYPE.is_float() {
            return xs.iter().fold(T::zero(), |a, &b| a.add_wrap(b));
        }
        if xs.len() < 8 {
            // (the loop below with no whole group of lanes: the same bits)
            return T::from_f64(0.0 + xs.iter().fold(T::zero(), |a, &b| a + b).to_f64());
        }
        let mut total = 0.0f64;
        for block in xs.chunks(4096) {
            let mut lanes = [T::zero(); 8];
            let mut it = block.chunks_exact(8);
            for c in &mut it {
                for k in 0..8 {
                    lanes[k] = lanes[k] + c[k];
                }
            }
            let mut s = it.remainder().iter().fold(T::zero(), |a, &b| a + b);
            for l in lanes {
                s = s + l;
            }
            total += s.to_f64();
        }
        T::from_f64(total)
    }
}

/// The smallest/largest value of a type: -inf/+inf for floats.
trait Bounds {
    fn min_value_or_neg_inf() -> Self;
    fn max_value_or_inf() -> Self;
}
impl<T: Num> Bounds for T {
    fn min_value_or_neg_inf() -> Self {
        if T::DTYPE.is_float() {
            T::from_f64(f64::NEG_INFINITY)
        } else if T::DTYPE == crate::DType::I32 {
            T::from_f64(i32::MIN as f64)
        } else {
            T::from_f64(i64::MIN as f64)
        }
    }
    fn max_value_or_inf() -> Self {
        if T::DTYPE.is_float() {
            T::from_f64(f64::INFINITY)
        } else if T::DTYPE == crate::DType::I32 {
            T::from_f64(i32::MAX as f64)
        } else {
            T::from_f64(i64::MAX as f64)
        }
    }
}

impl<T: Num> Reducer<T> for MaxR {
    fn init(self) -> T {
        T::min_value_or_neg_inf()
    }
    #[inline]
    fn combine(self, a: T, b: T) -> T {
        if b > a || b.partial_cmp(&b).is_none() {
            b
        } else {
            a
        }
    }
}

impl<T: Num> Reducer<T> for MinR {
    fn init(self) -> T {
        T::max_value_or_inf()
    }
    #[inline]
    fn combine(self, a: T, b: T) -> T {
        if b < a || b.partial_cmp(&b).is_none() {
            b
        } else {
            a
        }
    }
}

/// Reduces `x` over `axes` (normalised, sorted, unique). The output has the
/// kept dimensions only; keepdims is the caller's reshape. Bool is rejected by
/// the op layer before this is called. Errors (allocation failures) name `op`.
///
/// Half types are reduced through an `f32` copy, the result rounded once
/// (TensorFlow accumulates them in `f32` too): a sum of 4096 ones is 4096,
/// where an `f16` accumulator stops at 2048.
pub fn reduce(op: &'static str, x: &Tensor, axes: &[usize], kind: ReduceKind) -> Result<Tensor> {
    if x.dtype().is_half() {
        let y = reduce(op, &super::elementwise::cast(x, crate::DType::F32)?, axes, kind)?;
        return super::elementwise::cast(&y, x.dtype());
    }
    with_num_dtype!(x.dtype(), T => match kind {
        ReduceKind::Sum => reduce_with::<T, _>(op, x, axes, SumR),
        ReduceKind::Max => reduce_with::<T, _>(op, x, axes, MaxR),
        ReduceKind::Min => reduce_with::<T, _>(op, x, axes, MinR),
    }, _ => if kind == ReduceKind::Sum && x.dtype().is_complex() {
        super::complex::reduce_sum(op, x, axes)
    } else {
        unreachable!("reduce: bool, and complex max/min, rejected by the op layer")
    })
}

fn reduce_with<T: Num, R: Reducer<T>>(op: &'static str, x: &Tensor, axes: &[usize], r: R) -> Result<Tensor> {
    if let Some(out) = crate::kernels::gpu::hosted(op, &[x], |h| reduce_with(op, &h[0], axes, r)) {
        return out;
    }
    let l = x.layout();
    let rank = l.shape.len();
    let kept: Shape = (0..rank).filter(|d| !axes.contains(d)).collect();
    let out_shape: Shape = kept.iter().map(|&d| l.shape[d]).collect();
    let n_out: usize = out_shape.iter().product();
    let row: usize = axes.iter().map(|&d| l.shape[d]).product();
    let buf = x.buffer::<T>();

    let data: Buf<T> = if row == 0 || n_out == 0 {
        super::filled_buf(op, n_out, r.init())?
    } else if l.is_contiguous() && axes.iter().enumerate().all(|(i, &a)| a == i) && n_out > 1 {
        // reduced axes lead: accumulate rows of length n_out (columns)
        let src = &buf[l.offset..l.offset + row * n_out];
        columns(op, src, row, n_out, r)?
    } else {
        let perm: Shape = kept.iter().chain(axes).copied().collect();
        let pl = Layout {
            shape: perm.iter().map(|&d| l.shape[d]).collect(),
            strides: perm.iter().map(|&d| l.strides[d]).collect(),
            offset: l.offset,
        };
        let owned;
        let src: &[T] = if pl.is_contiguous() {
            &buf[pl.offset..pl.offset + row * n_out]
        } else {
            owned = gather_strided(op, buf, &pl)?;
            &owned
        };
        rows(op, src, row, n_out, r)?
    };
    Ok(Tensor::from_storage(T::buf_into_storage(data), &out_shape))
}

fn rows<T: Num, R: Reducer<T>>(op: &'static str, src: &[T], row: usize, n_out: usize, r: R) -> Result<Buf<T>> {
    if row == 1 {
        // nothing reduced (no axes, or axes of size 1): each element is
        // its own result, bit for bit (a -0.0 stays -0.0, as TensorFlow's)
        let mut out: Buf<T> = alloc::try_buf(op, n_out)?;
        out.extend_from_slice(&src[..n_out]);
        return Ok(out);
    }
    if n_out == 1 && row >= PAR_MIN {
        let parts: Vec<T> = super::workers::map(src.len().div_ceil(PAR_MIN), |i| {
            let c = &src[i * PAR_MIN..((i + 1) * PAR_MIN).min(src.len())];
            with_simd_for::<T, T, _>(
                #[inline(always)]
                || r.slice(c),
            )
        });
        return Ok(Buf::from_elem(r.slice(&parts), 1));
    }
    if n_out * row >= PAR_MIN && n_out > 1 {
        return map_rows(op, src, row, n_out, |c| {
            with_simd_for::<T, T, _>(
                #[inline(always)]
                || r.slice(c),
            )
        });
    }
    // small: on this thread, without the SIMD dispatch (and held inline,
    // with no allocation, for one or two outputs)
    map_rows(op, src, row, n_out, |c| r.slice(c))
}

/// `f` of each of the `n_out` rows of `row` elements of `src`, over the
/// compute threads in tasks of whole rows, a task's worth of input each
/// (one row per task when rows are long; many when short, as a sum over a
/// small last axis: a task per row had cost a dispatch per element
/// there); an input under `PAR_MIN` elements in one task, on this
/// thread. Errors (allocation) name `op`.
pub(crate) fn map_rows<T: Sync, O: Element>(
    op: &'static str,
    src: &[T],
    row: usize,
    n_out: usize,
    f: impl Fn(&[T]) -> O + Sync,
) -> Result<Buf<O>> {
    let per = match n_out * row >= PAR_MIN {
        true => (super::chunk_len(n_out * row) / row.max(1)).max(1),
        // (small: one task, on this thread)
        false => n_out.max(1),
    };
    let mut out: Buf<O> = alloc::try_buf(op, n_out)?;
    super::workers::for_each_chunk_mut(&mut super::spare(&mut out)[..n_out], per, |t, part| {
        for (k, o) in zip(0.., &mut part[..]) {
            let i = t * per + k;
            o.write(f(&src[i * row..(i + 1) * row]));
        }
    });
    // SAFETY: the chunks cover `0..n_out`, and each wrote all its slots.
    unsafe { out.set_len(n_out) };
    Ok(out)
}

fn columns<T: Num, R: Reducer<T>>(op: &'static str, src: &[T], row: usize, n_out: usize, r: R) -> Result<Buf<T>> {
    // split the output columns across threads; each walks all rows
    // (a block of columns at a time, folded in a buffer on the stack:
    // each column's rows in order, as one fold over all rows)
    const BLOCK: usize = 256;
    build(op, n_out, |start, out| {
        let mut acc = [T::default(); BLOCK];
        for (b, out) in zip(0.., chunks_mut(out, BLOCK)) {
            let (c0, w) = (start + b * BLOCK, out.len());
            let acc = &mut acc[..w];
            copy(acc, &src[c0..c0 + w]);
            for i in 1..row {
                let s = &src[i * n_out + c0..i * n_out + c0 + w];
                for (a, &v) in zip(&mut acc[..], s) {
                    *a = r.combine(*a, v);
                }
            }
            for (o, &a) in zip(&mut out[..], &acc[..]) {
                o.write(a);
            }
        }
    })
}
