//! What a fused kernel does beside elementwise ops: reading broadcast
//! inputs by index arithmetic, and partial reductions (over the leading or
//! the trailing axes of the group's shape) as epilogues.
//!
//! **Broadcast inputs.** An input whose shape broadcasts to the group's
//! shape as `ones, equal dims, ones` (a row `[k]` or `[1, k]` into
//! `[n, k]`, a column `[n, 1]` into `[n, k]`, or both, as `[m, 1]` into
//! `[b, m, k]`) is read in place: element `j` of the group reads element
//! `(j / q) % p` of the input, where `q` is the size of the trailing
//! broadcast dims and `p` the input's size. No broadcast tensor is made.
//!
//! **Partial reductions, bit for bit.** They reproduce the eager kernels'
//! order (`kernels::cpu::reduce`) exactly, so they are not a
//! reassociation:
//! - over the *leading* axes (`[n, k] -> [k]`, a bias gradient), the eager
//!   kernel folds the rows into the output one after the other, in the
//!   element type; here each task owns a range of output columns and folds
//!   its rows in the same order (the sum starts from `-0.0`, which adds
//!   nothing to any value, `-0.0` included; `max` from `-inf`, `min` from
//!   `+inf`);
//! - over the *trailing* axes (`[n, k] -> [n]`, softmax's row max and
//!   sum), the eager sum adds each row in blocks of 4096 elements, eight
//!   interleaved lanes per block plus the remainder, blocks added in `f64`;
//!   here a row's elements stream through the same lanes, blocks and `f64`
//!   total (tasks hold whole rows), and `max`/`min` fold each row in order.
//!
//! **Blocked: the one reassociation.** A group too large for one thread
//! whose reduction over leading axes has at most a few thousand outputs
//! (a bias gradient: `[n, k] -> [k]`, `[n, h, w, c] -> [c]`) splits its
//! rows among the tasks instead, so that each task streams whole rows;
//! each task folds its rows into its own partial results, a band of
//! [`BAND`] rows at a time in the element type and the bands in `f64`,
//! and the tasks' results are combined in task order afterwards. `max`
//! and `min` stay exact (a fold over blocks, then over the blocks'
//! results in order, keeps the same element of a tie as the fold over
//! all); a sum adds in another order (each band's few terms in `T`, the
//! rest in `f64`, rounded once: closer to the exact sum than the eager
//! kernel's long fold in `T`).

use super::scratch;
use super::Lane;
use crate::kernels::cpu::lockstep::{chunks, zip};
use crate::tensor::Float;

/// What a partial reduction combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    Sum,
    Max,
    Min,
}

impl Fold {
    /// The value a fold starts from (adds nothing to the first element).
    #[inline(always)]
    pub fn init<T: Float>(self) -> T {
        match self {
            Fold::Sum => T::neg_zero(),
            Fold::Max => T::neg_infinity(),
            Fold::Min => T::infinity(),
        }
    }

    /// One step, as the eager reducers take it (a NaN always wins).
    #[inline(always)]
    pub fn combine<T: Float>(self, a: T, v: T) -> T {
        match self {
            Fold::Sum => a + v,
            Fold::Max => {
                if v > a || v.is_nan() {
                    v
                } else {
                    a
                }
            }
            Fold::Min => {
                if v < a || v.is_nan() {
                    v
                } else {
                    a
                }
            }
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fold::Sum => "sum",
            Fold::Max => "max",
            Fold::Min => "min",
        }
    }
}

/// Which axes a partial reduction removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// The leading ones: element `j` goes to output `j % p` (`p` outputs).
    Leading(usize),
    /// The trailing ones: element `j` goes to output `j / q` (rows of `q`).
    Trailing(usize),
    /// The leading ones, `p` outputs, with tasks owning rows (blocked).
    Blocked(usize),
}

/// Fills `out` with elements `start..start + out.len()` of an input
/// broadcast to the group: element `j` is `src[(j / q) % p]`.
#[inline(always)]
pub fn gather<T: Copy>(src: &[T], q: usize, p: usize, start: usize, out: &mut [T]) {
    let n = out.len();
    let mut i = 0;
    if q == 1 {
        // a row repeated: the first period from the row (in two runs
        // where it wraps), then copies of what is written, doubling
        // (few long copies where a short row had taken one per row)
        let k = start % p;
        let head = (p - k).min(n);
        out[..head].copy_from_slice(&src[k..k + head]);
        let tail = (n - head).min(k);
        out[head..head + tail].copy_from_slice(&src[..tail]);
        i = head + tail;
        while i < n {
            // (`i` is a whole number of periods: each element repeats
            // the one `i` before it)
            let run = i.min(n - i);
            out.copy_within(..run, i);
            i += run;
        }
    } else {
        // each element repeated q times (and the whole repeated)
        let mut j = start;
        while i < n {
            let run = (q - j % q).min(n - i);
            out[i..i + run].fill(src[(j / q) % p]);
            i += run;
            j += run;
        }
    }
}

/// The longest period (`q * p` elements) of a broadcast input that a task
/// repeats once ([`periodic`]).
pub const PERIOD_MAX: usize = 1 << 14;

/// A broadcast input of a short period, repeated once for a task, so that
/// a register reads any `width` of its elements in place (at offset
/// `start % period` for elements from `start`), where [`gather`] had
/// copied them for every register: the repeats and the period, or `None`
/// for a long period.
pub fn periodic<T: Lane>(src: &[T], q: usize, p: usize, width: usize) -> Option<(Vec<T>, usize)> {
    let period = q.checked_mul(p).filter(|&n| n > 0 && n <= PERIOD_MAX)?;
    let mut v = scratch::take_written(period + width, T::zero());
    gather(src, q, p, 0, &mut v);
    Some((v, period))
}

/// Elements per block of the eager row sum.
const BLOCK: usize = 4096;

/// One partial reduction's state within one task.
pub enum State<T> {
    /// Leading axes: the task's output columns `c0..c0 + acc.len()`.
    Leading {
        fold: Fold,
        p: usize,
        c0: usize,
        acc: Vec<T>,
    },
    /// Leading axes, blocked: this task's partial results (in `f64`),
    /// and the fold of the rows since the last band's end (in `T`).
    Blocked {
        fold: Fold,
        p: usize,
        acc: Vec<f64>,
        band: Vec<T>,
    },
    /// Trailing axes: the row being reduced (rows never span tasks).
    Trailing {
        fold: Fold,
        q: usize,
        /// the eager sum's lanes, block remainder and total
        lanes: [T; 8],
        rem: T,
        total: f64,
        /// a max or min so far
        acc: T,
    },
}

impl<T: Lane> State<T> {
    /// A fresh state for a task owning output columns `cols` (leading
    /// axes) or whole rows (trailing); `all`: the task runs every element
    /// in order (it then owns all of a reduction's outputs).
    pub fn new(fold: Fold, axis: Axis, cols: std::ops::Range<usize>, all: bool) -> Self {
        match axis {
            Axis::Leading(p) => {
                let (c0, n) = if all { (0, p) } else { (cols.start, cols.len()) };
                State::Leading {
                    fold,
                    p,
                    c0,
                    acc: scratch::take(n, fold.init()),
                }
            }
            Axis::Blocked(p) => State::Blocked {
                fold,
                p,
                acc: scratch::take(p, fold.init_f64()),
                band: scratch::take(p, fold.init()),
            },
            Axis::Trailing(q) => State::Trailing {
                fold,
                q,
                lanes: [T::zero(); 8],
                rem: T::zero(),
                total: 0.0,
                acc: fold.init(),
            },
        }
    }

    /// Folds in `xs`, elements `start..` of the group. A finished row (of
    /// trailing axes) is written to `out`, the output's buffer.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // (pub for the tests only: `out` is the output's buffer)
    #[inline(always)]
    pub fn feed(&mut self, start: usize, xs: &[T], out: *mut T) {
        match self {
            State::Leading { fold, p, c0, acc } => {
                let (fold, p, c0) = (*fold, *p, *c0);
                let mut k = start % p;
                let mut i = 0;
                if k == 0 && c0 == 0 && acc.len() == p {
                    // the task's columns are every column: its whole rows
                    // folded in one after the other, with no bookkeeping
                    // of where a row ends (the same order)
                    let whole = xs.len() / p * p;
                    for r in xs[..whole].chunks_exact(p) {
                        fold_into(fold, &mut acc[..], r);
                    }
                    i = whole;
                }
                while i < xs.len() {
                    let run = (p - k).min(xs.len() - i);
                    let a = &mut acc[k - c0..k - c0 + run];
                    fold_into(fold, a, &xs[i..i + run]);
                    i += run;
                    k = 0;
                }
            }
            State::Blocked { fold, p, acc, band } => {
                let (fold, p) = (*fold, *p);
                let mut k = start % p;
                let mut i = 0;
                if k == 0 {
                    // whole rows, the band's end found by counting rows
                    // rather than by a division per row
                    let whole = xs.len() / p * p;
                    let mut row = start / p;
                    for r in xs[..whole].chunks_exact(p) {
                        fold_into(fold, &mut band[..], r);
                        row += 1;
                        if row.is_multiple_of(BAND) {
                            end_band(fold, acc, band);
                        }
                    }
                    i = whole;
                }
                while i < xs.len() {
                    let run = (p - k).min(xs.len() - i);
                    fold_into(fold, &mut band[k..k + run], &xs[i..i + run]);
                    // a row that ends a band of the group's rows: the
                    // band's fold into the task's partial results
                    let row = (start + i) / p;
                    if k + run == p && (row + 1).is_multiple_of(BAND) {
                        end_band(fold, acc, band);
                    }
                    i += run;
                    k = 0;
                }
            }
            State::Trailing {
                fold,
                q,
                lanes,
                rem,
                total,
                acc,
            } => {
                let (fold, q) = (*fold, *q);
                if q < 8 {
                    return short_rows(fold, q, start, xs, rem, acc, out);
                }
                let mut j = start;
                let mut i = 0;
                while i < xs.len() {
                    let o = j % q;
                    if o == 0 && fold == Fold::Sum && q <= BLOCK && xs.len() - i >= q {
                        // whole rows of one block each, as the eager row
                        // sum adds them (see `whole_rows`)
                        let rows = (xs.len() - i) / q;
                        whole_rows(q, &xs[i..i + rows * q], out, j / q);
                        i += rows * q;
                        j += rows * q;
                        continue;
                    }
                    let run = (q - o).min(xs.len() - i);
                    let seg = &xs[i..i + run];
                    if fold == Fold::Sum {
                        row_sum(q, o, seg, lanes, rem, total);
                    } else {
                        for &v in seg {
                            *acc = fold.combine(*acc, v);
                        }
                    }
                    if o + run == q {
                        let y = if fold == Fold::Sum {
                            T::from_f64(std::mem::replace(total, 0.0))
                        } else {
                            std::mem::replace(acc, fold.init())
                        };
                        // SAFETY: row `j / q` is this task's (tasks own
                        // whole rows) and lies in the output's buffer.
                        unsafe { out.add(j / q).write(y) };
                    }
                    i += run;
                    j += run;
                }
            }
        }
    }

    /// Writes a task's folded columns (leading axes) to `out`; returns
    /// its partial results (blocked), which [`combine`] adds up.
    #[allow(clippy::not_unsafe_ptr_arg_deref)] // (pub for the tests only: `out` is the output's buffer)
    pub fn finish(self, out: *mut T) -> Option<Vec<f64>> {
        match self {
            State::Leading { c0, acc, .. } => {
                for (k, &a) in zip(0.., &acc[..]) {
                    // SAFETY: the task owns output columns `c0..c0 + acc.len()`.
                    unsafe { out.add(c0 + k).write(a) };
                }
                scratch::give(acc);
                None
            }
            State::Blocked {
                fold,
                mut acc,
                mut band,
                ..
            } => {
                end_band(fold, &mut acc, &mut band);
                scratch::give(band);
                Some(acc)
            }
            State::Trailing { .. } => None,
        }
    }
}

/// The result of a blocked reduction from its tasks' partial results, in
/// task order.
pub(crate) fn combine<T: Float>(fold: Fold, parts: &[&[f64]], out: &mut [T]) {
    for (k, o) in zip(0.., &mut out[..]) {
        let mut a = fold.init_f64();
        for part in parts {
            a = fold.combine_f64(a, part[k]);
        }
        *o = T::from_f64(a);
    }
}

impl Fold {
    /// [`init`](Self::init) in `f64` (where blocked reductions fold).
    fn init_f64(self) -> f64 {
        self.init::<f64>()
    }

    /// [`combine`](Self::combine) in `f64`: exact for a max or min of
    /// `f32` values (widening keeps order and signed zeros).
    fn combine_f64(self, a: f64, v: f64) -> f64 {
        self.combine(a, v)
    }
}

/// Rows per band of a blocked reduction: a task folds the rows of a band
/// in `T`, and the bands in `f64` (the group's bands, the same for any
/// split into tasks, which start on a band). Folding every element in
/// `f64` had cost as much as the elementwise op before it.
pub const BAND: usize = 8;

/// Folds a band's results into a task's partial results (exactly, for a
/// max or min: widening keeps order and signed zeros), and starts the
/// next band.
fn end_band<T: Float>(fold: Fold, acc: &mut [f64], band: &mut [T]) {
    for (a, b) in zip(&mut acc[..], &mut band[..]) {
        *a = fold.combine_f64(*a, b.to_f64());
        *b = fold.init();
    }
}

/// `a[i] = fold(a[i], x[i])`, one vectorisable loop per fold.
#[inline(always)]
fn fold_into<T: Float>(fold: Fold, a: &mut [T], x: &[T]) {
    match fold {
        Fold::Sum => {
            for (a, &v) in zip(&mut a[..], x) {
                *a = *a + v;
            }
        }
        Fold::Max => {
            for (a, &v) in zip(&mut a[..], x) {
                *a = Fold::Max.combine(*a, v);
            }
        }
        Fold::Min => {
            for (a, &v) in zip(&mut a[..], x) {
                *a = Fold::Min.combine(*a, v);
            }
        }
    }
}

/// [`State::feed`] over trailing rows shorter than a group of the eager
/// sum's lanes (`q < 8`): there every element of a row goes to the
/// block's remainder, folded in `T` from zero, and the row's sum is that
/// remainder added to zero lanes and to a zero `f64` total; here the
/// same bits with one division per call, not per row (a sum over a last
/// axis of 2 ran at half the eager kernel's speed through the lanes).
#[inline(always)]
fn short_rows<T: Float>(fold: Fold, q: usize, start: usize, xs: &[T], rem: &mut T, acc: &mut T, out: *mut T) {
    let (mut o, mut row) = (start % q, start / q);
    let put = |y: T, row: usize| {
        // SAFETY: as in `State::feed`: the task owns row `row`, which lies
        // in the output's buffer.
        unsafe { out.add(row).write(y) };
    };
    if fold == Fold::Sum && q == 1 {
        // a sum of one element is that element, -0.0 included (the eager
        // kernel copies: TensorFlow reshapes where nothing is reduced)
        for (k, &v) in zip(0.., xs) {
            put(v, row + k);
        }
    } else if fold == Fold::Sum {
        let mut xs = xs;
        if o == 0 {
            // whole rows, each folded on its own (a test per element of
            // where a row ends had cost more than the addition)
            let whole = xs.len() / q * q;
            for (k, r) in zip(0.., chunks(&xs[..whole], q)) {
                let s = r.iter().fold(T::zero(), |a, &v| a + v);
                put(T::from_f64(0.0 + s.to_f64()), row + k);
            }
            row += whole / q;
            xs = &xs[whole..];
        }
        for &v in xs {
            *rem = *rem + v;
            o += 1;
            if o == q {
                put(T::from_f64(0.0 + std::mem::replace(rem, T::zero()).to_f64()), row);
                (o, row) = (0, row + 1);
            }
        }
    } else {
        for &v in xs {
            *acc = fold.combine(*acc, v);
            o += 1;
            if o == q {
                put(std::mem::replace(acc, fold.init()), row);
                (o, row) = (0, row + 1);
            }
        }
    }
}

/// The sums of the whole rows of `q` (`8 <= q <= BLOCK`, one block each)
/// that make up `xs`, written to outputs `row..` of `out`: each row as
/// [`row_sum`] adds it from a fresh start (whole groups of eight into
/// zero lanes, the rest into a zero remainder, then the remainder plus
/// the lanes in order, widened and added to a zero `f64`), the eager row
/// sum's bits, with none of `row_sum`'s bookkeeping per row. Rows of a
/// few dozen elements (a loss over ten classes, a norm over a narrow last
/// axis) had spent more time in that bookkeeping than in the additions,
/// and the fused kernel had run slower than the eager ops it replaces.
#[inline(always)]
fn whole_rows<T: Float>(q: usize, xs: &[T], out: *mut T, row: usize) {
    for k in 0..xs.len() / q {
        let r = &xs[k * q..(k + 1) * q];
        let mut lanes = [T::zero(); 8];
        let mut groups = r.chunks_exact(8);
        for c in &mut groups {
            for l in 0..8 {
                lanes[l] = lanes[l] + c[l];
            }
        }
        let mut s = T::zero();
        for &v in groups.remainder() {
            s = s + v;
        }
        for l in lanes {
            s = s + l;
        }
        // SAFETY: as in `State::feed`: the task owns these rows, which lie
        // in the output's buffer.
        unsafe { out.add(row + k).write(T::from_f64(0.0 + s.to_f64())) };
    }
}

/// Adds `xs`, elements `o..o + xs.len()` of a row of `q`, as the eager
/// row sum does: blocks of [`BLOCK`]; in each, element `b` goes to lane
/// `b % 8` while a whole group of eight remains, the rest to `rem` in
/// order; a finished block adds `rem + lanes[0] + ... + lanes[7]` to the
/// `f64` total.
#[inline(always)]
fn row_sum<T: Float>(q: usize, mut o: usize, mut xs: &[T], lanes: &mut [T; 8], rem: &mut T, total: &mut f64) {
    while !xs.is_empty() {
        let b0 = o / BLOCK * BLOCK;
        let blen = (q - b0).min(BLOCK);
        let full = blen - blen % 8;
        let bo = o - b0;
        let take = (blen - bo).min(xs.len());
        let (part, rest) = xs.split_at(take);
        let nl = full.saturating_sub(bo).min(take);
        let (in_lanes, tail) = part.split_at(nl);
        // lanes: a head up to a multiple of eight, then whole groups
        let head = ((8 - bo % 8) % 8).min(in_lanes.len());
        for (i, &v) in zip(0.., &in_lanes[..head][..]) {
            let l = (bo + i) % 8;
            lanes[l] = lanes[l] + v;
        }
        let mut groups = in_lanes[head..].chunks_exact(8);
        for c in &mut groups {
            for k in 0..8 {
                lanes[k] = lanes[k] + c[k];
            }
        }
        for (k, &v) in groups.remainder().iter().enumerate() {
            lanes[k] = lanes[k] + v;
        }
        for &v in tail {
            *rem = *rem + v;
        }
        if bo + take == blen {
            let mut s = *rem;
            for l in lanes.iter() {
                s = s + *l;
            }
            *total += s.to_f64();
            *lanes = [T::zero(); 8];
            *rem = T::zero();
        }
        o += take;
        xs = rest;
    }
}
