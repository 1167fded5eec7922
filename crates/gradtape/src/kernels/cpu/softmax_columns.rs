//! Softmax and log-softmax over an axis that is not the last, read and
//! written in place: `x` seen as `[outer, n, inner]` (`inner > 1`), each
//! of its `outer · inner` columns of `n` elements, `inner` apart, is one
//! softmax.
//!
//! A block of up to [`COLS`] side-by-side columns is taken at once, each
//! step one vector operation across the block: the columns' maxima, the
//! shifted values written to the output row by row and exponentiated
//! there, their sums, then the scaling. Every column gets the bits of
//! [`nn::softmax_row`](super::nn) over that column copied out: the
//! maximum in `max_lanes`' eight lanes (element `k` to lane `k mod 8`),
//! the same exponentials (`exp_in_place` of an element does not depend
//! on where its block starts), their sum in `sum_lanes`' lanes and order,
//! the same finishing formulas. (Each column had been gathered into a
//! buffer, its softmax taken, and scattered back, all on one thread when
//! `outer` is 1: a log-softmax over the first axis of [32, 64, 128] took
//! 1.5 ms, ten times one over the last.)

use std::cell::Cell;
use std::mem::MaybeUninit;

use super::lockstep::{zip, zip3, zip4};
use super::math::{exp_slice, lanes_total, with_simd};
use super::workers::{parallel_for, SendPtr};
use super::{chunk_len, spare, PAR_MIN};
use crate::error::Result;
use crate::tensor::{alloc, Buf, Float};

/// Columns per block (the block's lanes stay in the first-level cache).
const COLS: usize = 128;

thread_local! {
    /// Calls of [`softmax_columns`] on this thread.
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How many softmaxes over a middle axis this thread has taken in place
/// (`softmax_columns`): the tests' check that a layout takes this path.
pub fn calls() -> u64 {
    CALLS.with(Cell::get)
}

/// Softmax (log-softmax when `log`) of `src`, `[outer, n, inner]` in row
/// major order with `n > 0` and `inner > 1`, along its middle axis; over
/// the compute threads by blocks of columns. Errors (allocation) name `op`.
pub(crate) fn softmax_columns<T: Float>(
    op: &'static str,
    src: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    log: bool,
) -> Result<Buf<T>> {
    CALLS.with(|c| c.set(c.get() + 1));
    let total = outer * n * inner;
    let cols = outer * inner;
    let mut data: Buf<T> = alloc::try_buf(op, total)?;
    if total == 0 {
        // (no columns: `outer` is 0)
        return Ok(data);
    }
    let out = SendPtr(spare(&mut data)[..total].as_mut_ptr());
    let per = match total >= PAR_MIN {
        true => (chunk_len(total) / n).max(COLS),
        false => cols,
    };
    parallel_for(cols.div_ceil(per), |t| {
        with_simd(
            #[inline(always)]
            || {
                let (mut j, end) = (t * per, ((t + 1) * per).min(cols));
                while j < end {
                    let (o, i) = (j / inner, j % inner);
                    let w = (inner - i).min(COLS).min(end - j);
                    let at = o * n * inner + i;
                    // SAFETY: the block's elements `at + k·inner + (0..w)`,
                    // `k < n`, lie in the output's `total` slots; the
                    // blocks of all tasks are disjoint sets of columns.
                    unsafe { block(&src[at..], out.get().add(at), n, inner, w, log) };
                    j += w;
                }
            },
        )
    });
    // SAFETY: the tasks' blocks cover every column, each writing all `n`
    // of its elements.
    unsafe { data.set_len(total) };
    Ok(data)
}

/// `out[i] = e^d[i]`: the values of `exp_in_place` (for `f32`, whose
/// argument is `1 · d − 0 = d` there, the same `exp_slice`), without its
/// copy of the arguments and its sum.
#[inline(always)]
fn exp_into<T: Float>(d: &[T], out: &mut [T]) {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: T is f32 (same layout).
        let (df, of) = unsafe {
            (
                std::slice::from_raw_parts(d.as_ptr().cast::<f32>(), d.len()),
                std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len()),
            )
        };
        exp_slice(df, of);
    } else {
        for (o, &v) in zip(out, d) {
            *o = v.exp();
        }
    }
}

/// The softmax of `w` (at most [`COLS`]) side-by-side columns of `n`
/// elements, `stride` apart, starting at `x`, into the same places from
/// `out`.
///
/// # Safety
/// `out + k·stride + c` for `k < n`, `c < w` must be valid for writes and
/// written by no one else meanwhile.
#[inline(always)]
unsafe fn block<T: Float>(x: &[T], out: *mut MaybeUninit<T>, n: usize, stride: usize, w: usize, log: bool) {
    let row = |k: usize| &x[k * stride..k * stride + w];
    // SAFETY: the caller's promise, for row `k` of the block.
    let out_row = |k: usize| unsafe { std::slice::from_raw_parts_mut(out.add(k * stride), w) };
    // the maxima, as `max_lanes` takes them
    let pick = |a: T, v: T| if v > a { v } else { a };
    let mut lanes = [[T::neg_infinity(); COLS]; 8];
    for k in 0..n {
        for (a, &v) in zip(&mut lanes[k % 8][..w], row(k)) {
            *a = pick(*a, v);
        }
    }
    let mut m = [T::neg_infinity(); COLS];
    for lane in &lanes {
        for (m, &a) in zip(&mut m[..w], &lane[..w]) {
            *m = pick(*m, a);
        }
    }
    // the exponentials, summed as `sum_lanes` sums a row
    let mut sums = [[T::zero(); COLS]; 8];
    for k in 0..n {
        let mut d = [T::zero(); COLS];
        let e = out_row(k);
        for (d, e, &v, &m) in zip4(&mut d[..w], &mut e[..], row(k), &m[..w]) {
            *d = v - m;
            e.write(*d);
        }
        // SAFETY: every element of `e` was written just above.
        let e: &mut [T] = unsafe { &mut *(e as *mut [MaybeUninit<T>] as *mut [T]) };
        exp_into(&d[..w], e);
        for (s, &e) in zip(&mut sums[k % 8][..w], &e[..]) {
            *s = *s + e;
        }
    }
    // per column: 1/s, or ln s for log-softmax; NaN for a column with no
    // maximum (all -inf or NaN), as `softmax_row` fills such a row
    let mut f = [T::zero(); COLS];
    for (c, f, &m) in zip3(0.., &mut f[..w], &m[..w]) {
        let s = lanes_total(&std::array::from_fn(|l| sums[l][c]));
        *f = match (m == T::neg_infinity(), log) {
            (true, _) => T::nan(),
            (false, true) => s.ln(),
            (false, false) => T::one() / s,
        };
    }
    for k in 0..n {
        // SAFETY: row `k` was written whole above.
        let e: &mut [T] = unsafe { &mut *(out_row(k) as *mut [MaybeUninit<T>] as *mut [T]) };
        if log {
            for (o, &v, &m, &ls) in zip4(&mut e[..], row(k), &m[..w], &f[..w]) {
                *o = (v - m) - ls;
            }
        } else {
            for (o, &r) in zip(&mut e[..], &f[..w]) {
                *o = *o * r;
            }
        }
    }
}
