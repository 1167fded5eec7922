//! Reductions (sum, max, min) over a set of axes.
//!
//! The view is permuted so that kept axes come first and reduced axes last;
//! then each output element reduces one contiguous row. Two layouts avoid the
//! copy that a non-contiguous permutation needs: reduced axes already last
//! (rows), and reduced axes first on a contiguous input (columns, e.g. a bias
//! gradient), which accumulates whole rows into the output. A run of
//! adjacent reduced axes followed by kept axes whose elements lie side by
//! side (the heads of a grouped key/value gradient, a mean over time of
//! `[batch, time, features]`, also as slices of wider buffers) is reduced
//! in place too, with the bits of the rows' order.

use std::mem::MaybeUninit;

use super::lockstep::{chunks_mut, copy, zip};
use super::math::with_simd_for;
use super::{gather_strided, PAR_MIN};
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
    /// Whether a long row may be reduced in parts over the threads, the
    /// parts' results then reduced (not for a product: its rounding
    /// depends on the order).
    const SPLITS: bool = true;
    /// Reduces a contiguous slice (may be specialised for speed/accuracy).
    fn slice(self, xs: &[T]) -> T {
        xs.iter().fold(self.init(), |a, &b| self.combine(a, b))
    }
    /// [`slice`](Self::slice) of each of `out.len()` side-by-side
    /// columns of `rows` rows, `stride` elements apart, starting at `xs`:
    /// the same bits, each column's terms in the same order.
    fn columns(self, xs: &[T], rows: usize, stride: usize, out: &mut [MaybeUninit<T>]) {
        let w = out.len();
        let mut acc = [self.init(); MIDDLE_W];
        for i in 0..rows {
            for (a, &v) in zip(&mut acc[..w], &xs[i * stride..i * stride + w]) {
                *a = self.combine(*a, v);
            }
        }
        for (o, &a) in zip(out, &acc[..w]) {
            o.write(a);
        }
    }
}

#[derive(Clone, Copy)]
struct SumR;
#[derive(Clone, Copy)]
struct MaxR;
#[derive(Clone, Copy)]
struct MinR;
/// A product: each output's terms multiplied in order, from one (the
/// order and the bits of a fold along the row, wherever its terms lie).
#[derive(Clone, Copy)]
struct ProdR;

impl<T: Num> Reducer<T> for ProdR {
    const SPLITS: bool = false;
    fn init(self) -> T {
        T::one()
    }
    #[inline]
    fn combine(self, a: T, b: T) -> T {
        a.mul_wrap(b)
    }
}

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
    /// [`slice`](Self::slice)'s sums, column by column, vectorised across
    /// the columns: the same lanes, blocks and order of additions.
    #[inline(always)]
    fn columns(self, xs: &[T], rows: usize, stride: usize, out: &mut [MaybeUninit<T>]) {
        let w = out.len();
        let col = |i: usize| &xs[i * stride..i * stride + w];
        let add = |acc: &mut [T; MIDDLE_W], i: usize| {
            for (a, &v) in zip(&mut acc[..w], col(i)) {
                *a = a.add_wrap(v);
            }
        };
        if !T::DTYPE.is_float() || rows < 8 {
            let mut acc = [T::zero(); MIDDLE_W];
            (0..rows).for_each(|i| add(&mut acc, i));
            for (o, &a) in zip(out, &acc[..w]) {
                o.write(if T::DTYPE.is_float() {
                    T::from_f64(0.0 + a.to_f64())
                } else {
                    a
                });
            }
            return;
        }
        let mut total = [0.0f64; MIDDLE_W];
        for b0 in (0..rows).step_by(4096) {
            let b1 = (b0 + 4096).min(rows);
            let whole = b0 + (b1 - b0) / 8 * 8;
            let mut lanes = [[T::zero(); MIDDLE_W]; 8];
            for g in (b0..whole).step_by(8) {
                for (k, lane) in zip(0.., &mut lanes[..]) {
                    add(lane, g + k);
                }
            }
            let mut sum = [T::zero(); MIDDLE_W];
            (whole..b1).for_each(|i| add(&mut sum, i));
            for lane in &lanes {
                for (a, &l) in zip(&mut sum[..w], &lane[..w]) {
                    *a = *a + l;
                }
            }
            for (t, &v) in zip(&mut total[..w], &sum[..w]) {
                *t += v.to_f64();
            }
        }
        for (o, &t) in zip(out, &total[..w]) {
            o.write(T::from_f64(t));
        }
    }
}

/// The smallest/largest value of a type: -inf/+inf for floats.
pub(crate) trait Bounds {
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
    #[inline(always)]
    fn slice(self, xs: &[T]) -> T {
        extremum_lanes(self, xs)
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
    #[inline(always)]
    fn slice(self, xs: &[T]) -> T {
        extremum_lanes(self, xs)
    }
}

/// Lanes of [`extremum_lanes`] (a vector of sixteen `f32`).
const EXTREMUM_LANES: usize = 16;

/// A maximum's or minimum's fold over `xs` (`r`'s `combine`, in order),
/// in [`EXTREMUM_LANES`] interleaved lanes: one compare and select per
/// vector, where the fold in order was a chain of dependent scalar
/// selects (a maximum over a last axis of 128 ran at 6 GB/s, its sum at
/// 60). The result is the fold's bits: any value but a zero or a NaN is
/// the same bits whichever of its equal elements gave it, and a row
/// whose lanes end at a zero (`+0` and `-0` tie: the fold keeps the
/// first) or a NaN (the fold keeps the last) is folded again in order.
#[inline(always)]
fn extremum_lanes<T: Num, R: Reducer<T>>(r: R, xs: &[T]) -> T {
    let fold = || xs.iter().fold(r.init(), |a, &b| r.combine(a, b));
    if xs.len() < 2 * EXTREMUM_LANES {
        return fold();
    }
    let mut acc = [r.init(); EXTREMUM_LANES];
    let c = xs.chunks_exact(EXTREMUM_LANES);
    let rest = c.remainder();
    for v in c {
        for l in 0..EXTREMUM_LANES {
            acc[l] = r.combine(acc[l], v[l]);
        }
    }
    let m = acc.iter().chain(rest).fold(r.init(), |a, &b| r.combine(a, b));
    #[allow(clippy::eq_op)] // (NaN is the value unequal to itself)
    let redo = T::DTYPE.is_float() && (m == T::zero() || m != m);
    if redo {
        return fold();
    }
    m
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

/// The product of `x` (a real numeric dtype other than the half types)
/// over `axes` (normalised, sorted, unique), each output's terms
/// multiplied in order from one (integers wrap): as [`reduce`] lays out
/// a sum, so a product over a middle or leading axis reads its columns in
/// place, many at once. (Gathered into rows and folded one by one, a
/// product over the middle axis of [32, 64, 128] took 6x a sum.) Errors
/// (allocation) name `op`.
pub fn prod(op: &'static str, x: &Tensor, axes: &[usize]) -> Result<Tensor> {
    with_num_dtype!(x.dtype(), T => reduce_with::<T, _>(op, x, axes, ProdR),
        _ => unreachable!("prod: the op layer passes real numeric dtypes only"))
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
    } else if let Some(m) = middle_block(l, axes) {
        // reduced axes in the middle: [outer.., row, inner], no copy
        middle(op, buf, l.offset, &m, n_out, r)?
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
    if R::SPLITS && n_out == 1 && row >= PAR_MIN {
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

/// Columns per block of [`middle`] (the accumulators of a block stay in
/// registers or the L1 cache).
pub(crate) const MIDDLE_W: usize = 64;

/// A view reduced over a run of adjacent axes followed by kept ones, as
/// `[outer.., row, inner]`: the kept axes before the run (any strides),
/// the run's elements `row_stride` apart, and the `inner` elements after
/// it side by side in the buffer.
pub(crate) struct Middle {
    outer_shape: Shape,
    outer_strides: Vec<isize>,
    pub(crate) row: usize,
    pub(crate) row_stride: usize,
    inner: usize,
}

/// [`Middle`]'s view of `l` reduced over `axes`, where the run's axes
/// merge into one step and the axes after it into one contiguous run of
/// more than one element (a slice of a wider buffer qualifies: the third
/// of attention's joined gradient, regrouped by key/value head).
pub(crate) fn middle_block(l: &Layout, axes: &[usize]) -> Option<Middle> {
    let (&first, &last) = (axes.first()?, axes.last()?);
    if last - first + 1 != axes.len() || last + 1 >= l.shape.len() {
        return None;
    }
    // the step of one merged run of dims, or None (size-1 dims skipped)
    let merged = |dims: std::ops::Range<usize>| -> Option<(usize, isize)> {
        let (mut n, mut step) = (1usize, None::<isize>);
        for d in dims.rev() {
            let (size, stride) = (l.shape[d], l.strides[d]);
            if size == 1 {
                continue;
            }
            match step {
                None => step = Some(stride),
                Some(s) if stride == s * n as isize => {}
                Some(_) => return None,
            }
            n *= size;
        }
        Some((n, step.unwrap_or(1)))
    };
    let (inner, inner_step) = merged(last + 1..l.shape.len())?;
    let (row, row_step) = merged(first..last + 1)?;
    (inner > 1 && inner_step == 1 && row > 1 && row_step > 0).then(|| Middle {
        outer_shape: l.shape[..first].iter().copied().collect(),
        outer_strides: l.strides[..first].to_vec(),
        row,
        row_stride: row_step as usize,
        inner,
    })
}

/// The reduction of a [`Middle`] view of `buf` (from `offset`) over its
/// run, as [`rows`] reduces each output's row (the same bits), read in
/// place: a block of an outer slice's columns at a time, over the threads
/// by a task's worth of input. (Gathered into rows first, grouped
/// key/value heads' gradient `[16, 2, 2, 64, 32]` over its third axis took
/// 30 times as long as a sum over its first.)
fn middle<T: Num, R: Reducer<T>>(
    op: &'static str,
    buf: &[T],
    offset: usize,
    m: &Middle,
    n_out: usize,
    r: R,
) -> Result<Buf<T>> {
    middle_map(
        op,
        buf,
        offset,
        m,
        n_out,
        #[inline(always)]
        |xs, out| r.columns(xs, m.row, m.row_stride, out),
    )
}

/// One output per column of a [`Middle`] view of `buf` (from `offset`):
/// `cols(xs, out)` writes the `out.len()` (at most [`MIDDLE_W`]) side by
/// side columns that start at `xs` (each `m.row` elements,
/// `m.row_stride` apart), a block of an outer slice's columns at a time,
/// over the threads by a task's worth of input, inside the SIMD dispatch.
pub(crate) fn middle_map<T: Element, O: Element>(
    op: &'static str,
    buf: &[T],
    offset: usize,
    m: &Middle,
    n_out: usize,
    cols: impl Fn(&[T], &mut [MaybeUninit<O>]) + Sync,
) -> Result<Buf<O>> {
    let (row, inner) = (m.row, m.inner);
    let per = match n_out * row >= PAR_MIN {
        true => (super::chunk_len(n_out * row) / row).max(MIDDLE_W),
        false => n_out,
    };
    // where outer slice `o` starts
    let base = |mut o: usize| -> usize {
        let mut at = offset as isize;
        for (&size, &stride) in m.outer_shape.iter().zip(&m.outer_strides).rev() {
            at += (o % size) as isize * stride;
            o /= size;
        }
        at as usize
    };
    let mut out: Buf<O> = alloc::try_buf(op, n_out)?;
    super::workers::for_each_chunk_mut(&mut super::spare(&mut out)[..n_out], per, |t, part| {
        with_simd_for::<T, O, _>(
            #[inline(always)]
            || {
                let (mut j, mut rest) = (t * per, part);
                while !rest.is_empty() {
                    let (o, i) = (j / inner, j % inner);
                    let w = (inner - i).min(MIDDLE_W).min(rest.len());
                    let (now, later) = rest.split_at_mut(w);
                    cols(&buf[base(o) + i..], now);
                    (j, rest) = (j + w, later);
                }
            },
        )
    });
    // SAFETY: the chunks cover `0..n_out`, and each wrote all its slots.
    unsafe { out.set_len(n_out) };
    Ok(out)
}

fn columns<T: Num, R: Reducer<T>>(op: &'static str, src: &[T], row: usize, n_out: usize, r: R) -> Result<Buf<T>> {
    // split the output columns across threads; each walks all rows
    // (a block of columns at a time, folded in a buffer on the stack:
    // each column's rows in order, as one fold over all rows). The block
    // is wide (4 KiB of f32) so that each row's stretch is long enough for
    // the hardware prefetcher: a column sum reads rows `n_out` apart, and
    // 256-column blocks (6-16 cache lines a row) waited on memory at
    // every row (see `column_chunk`)
    const BLOCK: usize = 1024;
    let mut out: Buf<T> = alloc::try_buf(op, n_out)?;
    let per = column_chunk(row, n_out);
    super::workers::for_each_chunk_mut(&mut super::spare(&mut out)[..n_out], per, |t, out| {
        let start = t * per;
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
    });
    // SAFETY: the chunks cover `0..n_out`, and each wrote all its slots.
    unsafe { out.set_len(n_out) };
    Ok(out)
}

/// The columns a task of `columns` sums, of `n_out` columns of `row`
/// rows: all of them below `PAR_MIN` elements in all, else one share per
/// thread, by the elements read rather than the outputs written (a bias
/// gradient, `[1024, 1024]` summed to `[1024]`, is a million additions
/// for a thousand outputs, and ran on one thread while the others
/// waited), at least 16 columns (a 64-byte line of `f32`s) a task. Each
/// column is summed whole by one task, in the rows' order: the bits do
/// not depend on the split.
///
/// One share per thread, not several: a task reads its columns' stretch
/// of every row, rows `n_out` apart, and the wider the stretch the
/// better the hardware prefetcher follows it. On the Xeon (2 threads,
/// warm operands, median of 200 calls in one run), four tasks per
/// thread against one: `[1024, 768]` 150-190 against 120 µs,
/// `[1024, 1024]` 242-285 against 142-183, `[4096, 256]` 244-362
/// against 126-160, `[8192, 128]` 336-427 against 132-213 (a contiguous
/// `sum_all` of the same: 56-79 µs).
///
/// ```
/// use gradtape::__internals::kernels::cpu::{reduce::column_chunk, workers::threads};
/// assert_eq!(column_chunk(8, 100), 100);
/// assert_eq!(column_chunk(1024, 1024) < 1024, threads() > 1);
/// ```
pub fn column_chunk(row: usize, n_out: usize) -> usize {
    let threads = super::workers::threads();
    if threads < 2 || row.saturating_mul(n_out) < PAR_MIN {
        return n_out.max(1);
    }
    n_out.div_ceil(threads).max(16).next_multiple_of(16)
}
