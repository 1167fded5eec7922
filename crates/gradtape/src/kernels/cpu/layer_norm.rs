//! LayerNorm's row kernels, forward and backward, each one sweep over the
//! rows (a row stays in the L1 cache between its passes).
//!
//! Terms, per row of `n` values `x`: `mean`, the biased variance `var`
//! of `x − mean`, `rstd = 1 / sqrt(var + eps)`, the normalised row
//! `x̂ = (x − mean) · rstd`, and the output `y = x̂ · gamma + beta`
//! (`gamma`, `beta` optional: 1 and 0). The row statistics add in `f64`
//! (two passes: the mean, then the squares of the deviations, those a
//! short run of terms at a time in the row's type), so a long row of
//! `f32` loses no digits to cancellation; the row itself is computed in
//! its own type.
//!
//! The backward pass, from the output's cotangent `dy`, with
//! `g = dy · gamma`, `a = mean(g)` and `b = mean(g · x̂)`:
//!
//! ```text
//! dx = rstd · (g − a − x̂ · b)     dgamma = Σ_rows dy · x̂     dbeta = Σ_rows dy
//! ```
//!
//! It recomputes `mean` and `rstd` from `x` (the same bits as the
//! forward's) rather than storing them. The column sums `dgamma`, `dbeta`
//! add per block of rows, in `f64` (a band of a few rows at a time in the
//! row's type), then the blocks in order: the block
//! size depends on the shape alone, so the sums do not depend on the
//! number of threads.

use std::mem::MaybeUninit;

use super::lockstep::{chunks, chunks_mut, whole, zip, zip3};
use super::scratch;
use super::workers::{self, SendPtr};
use super::{build_rows, uninit_buf};
use crate::error::{Error, Result};
use crate::tensor::{Buf, Float};

/// Lanes of the row sums: independent accumulators, so that the sums
/// vectorise (one accumulator is one long chain of dependent adds).
const LANES: usize = 8;

/// Elements each lane adds in the row's type before its sum goes to its
/// `f64` lane: one conversion per run, where one per element had bounded
/// the statistics' loops (a run's few terms lose no more than the one
/// rounding of each).
const RUN: usize = 8;

/// Rows the backward pass's column sums add in the row's type before
/// their sums go to the block's `f64` sums (for the reason of [`RUN`]).
const BAND: usize = 8;

/// `Σ f(v)` over `x` in `f64`: [`LANES`] accumulators, each adding runs
/// of [`RUN`] elements of its residue in `T`, each run's sum then in
/// `f64`; the elements past the last whole block of runs, and the tail,
/// in `f64`.
#[inline(always)]
fn sum_lanes<T: Float>(x: &[T], f: impl Fn(T) -> T) -> f64 {
    let mut acc = [0.0f64; LANES];
    let mut blocks = x.chunks_exact(LANES * RUN);
    for b in &mut blocks {
        let mut t = [T::zero(); LANES];
        for c in b.chunks_exact(LANES) {
            for (a, &v) in zip(&mut t[..], c) {
                *a = *a + f(v);
            }
        }
        for (a, &v) in zip(&mut acc[..], &t) {
            *a += v.to_f64();
        }
    }
    let mut chunks = blocks.remainder().chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in zip(&mut acc[..], c) {
            *a += f(v).to_f64();
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f(v).to_f64()).sum();
    acc.iter().sum::<f64>() + tail
}

/// `Σ v` over `x` in `f64`, each element converted ([`LANES`]
/// accumulators, then the tail): the mean's sum, whose terms all have the
/// row's offset (runs of them in `T` would round at several times its
/// magnitude).
#[inline(always)]
fn sum_f64<T: Float>(x: &[T]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (runs, rest) = whole(x, LANES);
    // (whole arrays of LANES: over slices of a length the compiler did
    // not know, the loop masked each step and kept `acc` in memory, its
    // masked stores stalling the next step's loads: most of the row's
    // time, perf)
    for c in runs.chunks_exact(LANES) {
        let c: &[T; LANES] = c.try_into().expect("chunks of LANES");
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v.to_f64();
        }
    }
    let mut tail = 0.0f64;
    for &v in rest {
        tail += v.to_f64();
    }
    acc.iter().sum::<f64>() + tail
}

/// `Σ a·b` over two rows in `f64`, as [`sum_lanes`].
#[inline(always)]
fn dot_lanes<T: Float>(x: &[T], y: &[T]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let n = x.len().min(y.len());
    let ((bx, rx), (by, ry)) = (whole(&x[..n], LANES * RUN), whole(&y[..n], LANES * RUN));
    for (u, v) in zip(chunks(bx, LANES * RUN), chunks(by, LANES * RUN)) {
        let mut t = [T::zero(); LANES];
        for (cu, cv) in u.chunks_exact(LANES).zip(v.chunks_exact(LANES)) {
            for (a, &p, &q) in zip3(&mut t[..], cu, cv) {
                *a = *a + p * q;
            }
        }
        for (a, &v) in zip(&mut acc[..], &t) {
            *a += v.to_f64();
        }
    }
    let ((cx, tx), (cy, ty)) = (whole(rx, LANES), whole(ry, LANES));
    for (a8, b8) in zip(chunks(cx, LANES), chunks(cy, LANES)) {
        for (a, &u, &v) in zip3(&mut acc[..], a8, b8) {
            *a += (u * v).to_f64();
        }
    }
    let mut tail = 0.0f64;
    for (&u, &v) in zip(tx, ty) {
        tail += (u * v).to_f64();
    }
    acc.iter().sum::<f64>() + tail
}

/// A row's `(mean, rstd)`, in the row's type.
#[inline(always)]
fn stats<T: Float>(x: &[T], eps: f64) -> (T, T) {
    let n = x.len().max(1) as f64;
    let mean = T::from_f64(sum_f64(x) / n);
    // (the deviations from the mean in `T`, as the output takes them: the
    // rounding of the mean adds its square's share, far below a rounding
    // of the variance)
    let var = sum_lanes(x, |v| {
        let d = v - mean;
        d * d
    }) / n;
    (mean, T::from_f64(1.0 / (var + eps).sqrt()))
}

/// `(x − mean) · rstd · gamma + beta` of one row.
#[inline(always)]
fn forward_row<T: Float>(x: &[T], gamma: Option<&[T]>, beta: Option<&[T]>, eps: f64, out: &mut [MaybeUninit<T>]) {
    let (mean, rstd) = stats(x, eps);
    let xh = |v: T| (v - mean) * rstd;
    // (one loop per case, over zipped rows: a loop that indexed `gamma`
    // and tested the options at each element ran scalar, most of the
    // forward pass's time)
    match (gamma, beta) {
        (Some(g), Some(b)) => {
            for ((o, &v), (&g, &b)) in out.iter_mut().zip(x).zip(g.iter().zip(b)) {
                o.write(xh(v) * g + b);
            }
        }
        (Some(g), None) => {
            for (o, &v, &g) in zip3(&mut out[..], x, g) {
                o.write(xh(v) * g);
            }
        }
        (None, Some(b)) => {
            for (o, &v, &b) in zip3(&mut out[..], x, b) {
                o.write(xh(v) + b);
            }
        }
        (None, None) => {
            for (o, &v) in zip(&mut out[..], x) {
                o.write(xh(v));
            }
        }
    }
}

/// LayerNorm of the rows of `x` (`x.len() / n` rows of `n`), with `gamma`
/// and `beta` of `n` values.
pub fn forward<T: Float>(
    op: &'static str,
    x: &[T],
    n: usize,
    gamma: Option<&[T]>,
    beta: Option<&[T]>,
    eps: f64,
) -> Result<Buf<T>> {
    let rows = x.len().checked_div(n).unwrap_or(0);
    // (the rows' loops zip `gamma` and `beta` with each row: shorter, they
    // would leave elements unwritten)
    if let Some(p) = [gamma, beta].into_iter().flatten().find(|p| p.len() != n) {
        return Err(Error::invalid(
            op,
            format!("gamma and beta must have the {n} values of a row, got {}", p.len()),
        ));
    }
    build_rows::<T>(op, rows, n, |rs, out| {
        super::math::with_simd(
            #[inline(always)]
            || {
                for (r, o) in zip(rs.clone(), chunks_mut(out, n)) {
                    forward_row(&x[r * n..(r + 1) * n], gamma, beta, eps, o);
                }
            },
        )
    })
}

/// Rows per block of the column sums: about 64 blocks (at least 8 rows
/// each), from the shape alone.
fn block_rows(rows: usize) -> usize {
    rows.div_ceil(64).max(8)
}

/// The backward pass: `dx` (as `x`, rows of `n`), then `dgamma` and
/// `dbeta` (`n` each), in one buffer of `x.len() + 2n`. With `add` (as
/// `x`), `dx + add` in place of `dx`, in the same pass (a residual
/// connection's gradient joining the normalisation's: the sum of each
/// element rounded once, as the separate addition).
pub fn backward<T: Float>(
    op: &'static str,
    x: &[T],
    n: usize,
    gamma: Option<&[T]>,
    dy: &[T],
    eps: f64,
    add: Option<&[T]>,
) -> Result<Buf<T>> {
    let rows = x.len().checked_div(n).unwrap_or(0);
    if gamma.is_some_and(|g| g.len() != n) || dy.len() != x.len() || add.is_some_and(|a| a.len() != x.len()) {
        return Err(Error::invalid(
            op,
            format!(
                "gamma must have the {n} values of a row, dy and the added gradient the {} of x, got {:?}, {} and {:?}",
                x.len(),
                gamma.map(<[T]>::len),
                dy.len(),
                add.map(<[T]>::len)
            ),
        ));
    }
    let len = x.len() + 2 * n;
    let mut out = uninit_buf::<T>(op, len)?;
    let spare = &mut super::spare(&mut out)[..len];
    let per = block_rows(rows);
    let blocks = rows.div_ceil(per);
    let dx = SendPtr(spare.as_mut_ptr());
    // each block's column sums (dgamma's `n`, then dbeta's `n`), side by
    // side; the vectors of the tasks are the threads' kept scratch
    let mut partial = scratch::take(blocks * 2 * n, 0.0f64);
    workers::for_each_chunk_mut(&mut partial, 2 * n, |blk, sums| {
        // the column sums of the band of rows, in `T`
        let mut band = scratch::take(2 * n, T::zero());
        // the row's `x̂` and `g = dy · gamma`
        let mut row = scratch::take(2 * n, T::zero());
        super::math::with_simd(
            #[inline(always)]
            || {
                let first = blk * per;
                for r in first..((blk + 1) * per).min(rows) {
                    let (xr, gr) = (&x[r * n..(r + 1) * n], &dy[r * n..(r + 1) * n]);
                    // SAFETY: rows are disjoint between blocks, and `out`
                    // holds `x.len()` values before the sums.
                    let o = unsafe { std::slice::from_raw_parts_mut(dx.get().add(r * n), n) };
                    let ar = add.map(|a| &a[r * n..(r + 1) * n]);
                    backward_row(xr, gamma, gr, eps, ar, o, &mut band, &mut row);
                    if (r + 1 - first).is_multiple_of(BAND) {
                        end_band(sums, &mut band);
                    }
                }
                end_band(sums, &mut band);
            },
        );
    });
    // the blocks' sums added in block order (a block at a time over all
    // the columns: a column at a time over the blocks, its terms `2n`
    // apart, was one chain of cache misses, as long as the row kernels)
    let mut total = scratch::take(2 * n, 0.0f64);
    for p in partial.chunks(2 * n) {
        for (t, &v) in zip(&mut total[..], p) {
            *t += v;
        }
    }
    for (o, &t) in zip(&mut spare[x.len()..][..], &total[..]) {
        o.write(T::from_f64(t));
    }
    // SAFETY: every row's `dx` was written by its block, and the sums just above.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// Adds a band's column sums to the block's, and starts the next band.
#[inline(always)]
fn end_band<T: Float>(sums: &mut [f64], band: &mut [T]) {
    for (s, b) in zip(&mut sums[..], &mut band[..]) {
        *s += b.to_f64();
        *b = T::zero();
    }
}

/// One row of [`backward`]: its `dx` (plus `add`'s row) into `out`, and
/// `dy · x̂`, `dy` added to the band's column sums (`scratch`: `2n` values).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn backward_row<T: Float>(
    x: &[T],
    gamma: Option<&[T]>,
    dy: &[T],
    eps: f64,
    add: Option<&[T]>,
    out: &mut [MaybeUninit<T>],
    band: &mut [T],
    scratch: &mut [T],
) {
    let n = x.len();
    let (mean, rstd) = stats(x, eps);
    let (sg, sb) = band.split_at_mut(n);
    let (xh, g) = scratch.split_at_mut(n);
    for ((h, &v), (s, &d)) in xh.iter_mut().zip(x).zip(sg.iter_mut().zip(dy)) {
        *h = (v - mean) * rstd;
        *s = *s + d * *h;
    }
    for (s, &d) in zip(&mut sb[..], dy) {
        *s = *s + d;
    }
    match gamma {
        Some(gm) => {
            for (o, &d, &w) in zip3(&mut g[..], dy, gm) {
                *o = d * w;
            }
        }
        None => g.copy_from_slice(dy),
    }
    let nf = n.max(1) as f64;
    let a = T::from_f64(sum_lanes(g, |v| v) / nf);
    let b = T::from_f64(dot_lanes(g, xh) / nf);
    match add {
        Some(ad) => {
            for ((o, &ar), (&gv, &h)) in out.iter_mut().zip(ad).zip(g.iter().zip(&*xh)) {
                o.write(rstd * (gv - a - h * b) + ar);
            }
        }
        None => {
            for (o, &gv, &h) in zip3(&mut out[..], &*g, &*xh) {
                o.write(rstd * (gv - a - h * b));
            }
        }
    }
}
