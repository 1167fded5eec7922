//! `argmax` and `argmin` along one axis: the first index of the row's
//! largest (smallest) element that is not NaN, 0 for a row of NaN only.
//!
//! Both passes vectorise: the row's extremum over the values that are not
//! NaN (a maximum does not depend on the order in which it is taken, and
//! NaN never wins a comparison), then the first index holding a value
//! equal to it. That is the index the fold in order returns (a later
//! element replaces the best only when strictly better, so the first of
//! equal values stays, `+0` and `-0` included; NaN is skipped). The fold
//! in order had been one dependent compare and branch per element: an
//! `argmax` over a last axis of 128 ran at 7 GB/s, where a sum runs at 60.
//! Over a middle axis (`[outer.., n, inner]`, the inner elements side by
//! side) the columns are read in place, a block of side-by-side columns
//! at a time ([`reduce::middle_map`](super::reduce::middle_map)), where
//! the rows had been gathered into a transposed copy first.

use std::cell::Cell;
use std::mem::MaybeUninit;

use super::lockstep::{zip, zip3};
use super::reduce::{middle_block, middle_map, Bounds, MIDDLE_W};
use crate::error::Result;
use crate::tensor::{Element, Num, Shape, Tensor};

thread_local! {
    /// Calls of [`in_place`] that read the columns in place, on this thread.
    static IN_PLACE: Cell<u64> = const { Cell::new(0) };
}

/// How many `argmax`/`argmin` calls this thread has taken over a middle
/// axis in place: the tests' check that a layout takes this path.
pub fn in_place_calls() -> u64 {
    IN_PLACE.with(Cell::get)
}

/// Whether `v` beats `best` (strictly: ties keep the earlier element).
#[inline(always)]
fn better<T: Num, const LARGEST: bool>(v: T, best: T) -> bool {
    if LARGEST {
        v > best
    } else {
        v < best
    }
}

/// The value every element that is not NaN beats or ties.
#[inline(always)]
fn worst<T: Num, const LARGEST: bool>() -> T {
    if LARGEST {
        T::min_value_or_neg_inf()
    } else {
        T::max_value_or_inf()
    }
}

/// Lanes of [`row`]'s first pass (a vector of sixteen `f32`).
const LANES: usize = 16;

/// The `argmax` (`LARGEST`) or `argmin` of one non-empty row.
#[inline(always)]
pub(crate) fn row<T: Num, const LARGEST: bool>(r: &[T]) -> i64 {
    let pick = |a: T, v: T| if better::<T, LARGEST>(v, a) { v } else { a };
    let mut acc = [worst::<T, LARGEST>(); LANES];
    let c = r.chunks_exact(LANES);
    let rest = c.remainder();
    for v in c {
        for l in 0..LANES {
            acc[l] = pick(acc[l], v[l]);
        }
    }
    let m = acc.iter().chain(rest).fold(worst::<T, LARGEST>(), |a, &v| pick(a, v));
    // the first block holding it, then the place in that block
    let mut at = 0;
    for c in r.chunks(LANES) {
        if c.iter().fold(false, |hit, &v| hit | (v == m)) {
            return (at + c.iter().position(|&v| v == m).unwrap_or(0)) as i64;
        }
        at += c.len();
    }
    // (a row of NaN only: no value equals the worst)
    0
}

/// The `argmax` (`LARGEST`) or `argmin` of each of `out.len()` (at most
/// [`MIDDLE_W`]) side-by-side columns of `rows` (> 0) elements, `stride`
/// apart, starting at `xs`: [`row`]'s two passes, vectorised across the
/// columns.
#[inline(always)]
fn columns<T: Num, const LARGEST: bool>(xs: &[T], rows: usize, stride: usize, out: &mut [MaybeUninit<i64>]) {
    let w = out.len();
    let col = |i: usize| &xs[i * stride..i * stride + w];
    let mut best = [worst::<T, LARGEST>(); MIDDLE_W];
    for i in 0..rows {
        for (b, &v) in zip(&mut best[..w], col(i)) {
            if better::<T, LARGEST>(v, *b) {
                *b = v;
            }
        }
    }
    // the first row holding each column's best: the last one met going up
    let mut at = [-1i64; MIDDLE_W];
    for i in (0..rows).rev() {
        for (a, &b, &v) in zip3(&mut at[..w], &best[..w], col(i)) {
            if v == b {
                *a = i as i64;
            }
        }
    }
    for (o, &a) in zip(out, &at[..w]) {
        // (-1: a column of NaN only)
        o.write(a.max(0));
    }
}

/// `argmax` (`LARGEST`) or `argmin` of `x` along its non-empty axis `a`
/// read in place, where the axis is followed by side-by-side elements
/// (see [`middle_block`]); `None` for the other layouts (the caller
/// reduces rows). Errors (allocation) name `op`.
pub(crate) fn in_place<T: Num, const LARGEST: bool>(op: &'static str, x: &Tensor, a: usize) -> Option<Result<Tensor>> {
    let l = x.layout();
    if x.numel() == 0 {
        return None;
    }
    let m = middle_block(l, &[a])?;
    IN_PLACE.with(|c| c.set(c.get() + 1));
    let shape: Shape = (0..l.shape.len()).filter(|&d| d != a).map(|d| l.shape[d]).collect();
    let n_out: usize = shape.iter().product();
    let out = middle_map(
        op,
        x.buffer::<T>(),
        l.offset,
        &m,
        n_out,
        #[inline(always)]
        |xs, out| columns::<T, LARGEST>(xs, m.row, m.row_stride, out),
    );
    Some(out.map(|out| Tensor::from_storage(i64::buf_into_storage(out), &shape)))
}
