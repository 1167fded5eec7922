//! Kernels of the neural-network ops: softmax and log-softmax along an axis,
//! and the fused sparse softmax cross-entropy (loss and softmax in one pass).

use std::mem::MaybeUninit;

use super::build_rows;
use super::lockstep::{chunks, chunks_mut, fill, zip, zip3};
use crate::error::{Error, Result};
use crate::tensor::{alloc, Element, Float, Tensor};

/// `(outer, n, inner)`: the sizes before, at and after `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// Softmax (or log-softmax when `log`) of one contiguous row of length `n`
/// (inlined into its caller's `with_simd`: out of it, the `f32` exp's
/// fused multiply-adds become library calls).
#[inline(always)]
fn softmax_row<T: Float>(x: &[T], out: &mut [MaybeUninit<T>], log: bool) {
    let m = super::math::max_lanes(x);
    if !m.is_finite() {
        // all -inf (or +inf / NaN present): fall back to the plain formula's result
        if m == T::neg_infinity() {
            let fill = T::nan();
            for o in out.iter_mut() {
                o.write(fill);
            }
            return;
        }
    }
    for (o, &v) in zip(&mut out[..], x) {
        o.write(v - m);
    }
    // SAFETY: every element of `out` was written just above.
    let out: &mut [T] = unsafe { &mut *(out as *mut [MaybeUninit<T>] as *mut [T]) };
    let s = super::math::exp_in_place(out);
    finish_row(x, out, m, s, log);
}

/// A row `x`'s softmax from `e`, its exponentials `e^(x - m)`, which sum
/// to `s`: `e / s`, or for log-softmax `(x - m) - ln s` (TensorFlow's
/// order: near the maximum the result is small, and `x - (m + ln s)`
/// would carry the rounding of `m`).
#[inline(always)]
fn finish_row<T: Float>(x: &[T], e: &mut [T], m: T, s: T, log: bool) {
    if log {
        let ls = s.ln();
        for (o, &v) in zip(&mut e[..], x) {
            *o = (v - m) - ls;
        }
    } else {
        let r = T::one() / s;
        for o in e.iter_mut() {
            *o = *o * r;
        }
    }
}

/// Softmax or log-softmax of `x` along `axis` (already normalised), computed
/// stably (the row maximum is subtracted first).
pub(crate) fn softmax<T: Float>(op: &'static str, x: &Tensor, axis: usize, log: bool) -> Result<Tensor> {
    let (outer, n, inner) = split(x.shape(), axis);
    let src = x.values::<T>(op)?;
    if inner > 1 && n > 0 {
        // (not the last axis: the columns in place)
        let data = super::softmax_columns::softmax_columns(op, &src, outer, n, inner, log)?;
        return Ok(Tensor::from_storage(T::buf_into_storage(data), x.shape()));
    }
    let data = build_rows::<T>(op, outer, n * inner, |rows, out| {
        super::math::with_simd(
            #[inline(always)]
            || softmax_rows(&src, n, inner, rows, out, log),
        )
    })?;
    Ok(Tensor::from_storage(T::buf_into_storage(data), x.shape()))
}

/// The rows `rows` of [`softmax`] along a last axis (`inner` is 1 or the
/// tensor is empty) into `out`.
#[inline(always)]
fn softmax_rows<T: Float>(
    src: &[T],
    n: usize,
    inner: usize,
    rows: std::ops::Range<usize>,
    out: &mut [MaybeUninit<T>],
    log: bool,
) {
    if inner == 1 && n > 0 && n < SHORT_ROW {
        return short_softmax_rows(&src[rows.start * n..rows.end * n], n, out, log);
    }
    for (r, o) in zip(rows.clone(), chunks_mut(out, n.max(1))) {
        softmax_row(&src[r * n..(r + 1) * n], o, log);
    }
}

/// Rows shorter than this are exponentiated many at a time
/// ([`short_softmax_rows`]): the `f32` exponential runs vectorised over
/// whole blocks of 64 elements, and a row of fewer went through its
/// scalar remainder (a softmax over a last axis of 2 took 25 ns a row).
const SHORT_ROW: usize = 64;

/// [`softmax_row`] over consecutive rows of `n < SHORT_ROW` elements (`x`,
/// into `out`), a group of rows at a time: each row shifted by its
/// maximum, the group's values exponentiated as one slice, then each row
/// normalised by its own sum. The same bits as row by row: the same
/// maximum and lane sum per row, and the exponential of an element does
/// not depend on where its block starts (`math::exp_slice`: its vector
/// and scalar forms agree on normal arguments).
#[inline(always)]
fn short_softmax_rows<T: Float>(x: &[T], n: usize, out: &mut [MaybeUninit<T>], log: bool) {
    const GROUP: usize = 1024;
    let per = (GROUP / n).max(1);
    let mut maxes = [T::zero(); GROUP];
    for (xg, og) in zip(chunks(x, per * n), chunks_mut(out, per * n)) {
        for (xr, or, m) in zip3(chunks(xg, n), chunks_mut(og, n), &mut maxes[..]) {
            *m = super::math::max_lanes(xr);
            for (o, &v) in zip(&mut or[..], xr) {
                o.write(v - *m);
            }
        }
        // SAFETY: every element of `og` was written just above.
        let og: &mut [T] = unsafe { &mut *(og as *mut [MaybeUninit<T>] as *mut [T]) };
        super::math::exp_in_place(og);
        for (xr, or, &m) in zip3(chunks(xg, n), chunks_mut(og, n), &maxes[..]) {
            if m == T::neg_infinity() {
                // all -inf: NaN, as `softmax_row`
                fill(or, T::nan());
                continue;
            }
            let s = super::math::sum_lanes(or);
            finish_row(xr, or, m, s, log);
        }
    }
}

/// Checks labels of type `I` against `0..classes` (in place: a step's
/// labels are read, not copied).
pub(crate) fn checked_labels<I: Element>(op: &'static str, labels: &Tensor, classes: usize) -> Result<()> {
    let v = labels.values::<I>(op)?;
    if let Some(bad) = v
        .iter()
        .map(|l| l.to_f64() as i64)
        .find(|&l| l < 0 || l as usize >= classes)
    {
        return Err(Error::IndexOutOfRange {
            op,
            index: bad,
            dim: classes,
            shape: labels.shape().to_vec(),
        });
    }
    Ok(())
}

/// Fused sparse softmax cross-entropy over the last axis of `logits`
/// (`[rows.., classes]`) with labels of type `I` (checked by
/// [`checked_labels`]): returns the per-row losses (shape `out_shape`)
/// and, with `keep`, the softmax (logits' shape), for the backward pass.
///
/// One exponential per element: a row's loss is `ln s − (x[label] − m)`
/// with `m` its maximum and `s = Σ e^(x − m)`, and its softmax is those
/// exponentials times `1 / s` (where the log-softmax and the softmax each
/// took one: 1.9 ms of `[2048, 1000]` `f32` logits on one thread). Without
/// `keep` (nothing records the op, e.g. a compiled step, whose gradient
/// is an op of the logits) the exponentials are summed as they are made
/// and nothing of the logits' size is written. The losses are the bits of
/// `−log_softmax(x)[label]` either way; the softmax is the one
/// [`softmax`] and [`sparse_xent_grad`] compute (`e^(x − m) · (1 / s)`).
/// A row of only `-inf` gives NaN (loss and softmax), as the log-softmax.
pub(crate) fn sparse_xent<T: Float, I: Element>(
    op: &'static str,
    logits: &Tensor,
    labels: &Tensor,
    out_shape: &[usize],
    keep: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let c = *logits.shape().last().unwrap_or(&1);
    let labels = labels.values::<I>(op)?;
    let rows = labels.len();
    let src = logits.values::<T>(op)?;
    let label = |r: usize| labels[r].to_f64() as i64 as usize;
    // `(x[label] − m) − ln s`, the log-softmax at the label (its order)
    let loss_of = |x: &[T], l: usize, m: T, s: T| -((x[l] - m) - s.ln());
    let mut loss = alloc::try_buf(op, rows)?;
    loss.resize(rows, T::zero());
    let losses = super::workers::SendPtr(loss.as_mut_ptr());
    if !keep {
        // (tasks of rows by the logits they read, as `build_rows` splits
        // the softmax's output)
        let n = rows * c;
        let per = match n >= super::PAR_MIN && rows > 1 {
            true => (super::chunk_len(n) / c.max(1)).max(1),
            false => rows.max(1),
        };
        super::workers::parallel_for(rows.div_ceil(per), |t| {
            super::math::with_simd(
                #[inline(always)]
                || {
                    for r in t * per..((t + 1) * per).min(rows) {
                        let x = &src[r * c..(r + 1) * c];
                        let (m, s) = super::math::max_exp_sum(x);
                        let lr = if m == T::neg_infinity() {
                            T::nan()
                        } else {
                            loss_of(x, label(r), m, s)
                        };
                        // SAFETY: `r < rows`, each row in one task; `loss`
                        // outlives the call
                        unsafe { *losses.get().add(r) = lr };
                    }
                },
            )
        });
        return Ok((Tensor::from_storage(T::buf_into_storage(loss), out_shape), None));
    }
    // each task: its rows' exponentials, losses and softmax, while the
    // rows are in cache
    let p = build_rows::<T>(op, rows, c, |rs, out| {
        super::math::with_simd(
            #[inline(always)]
            || {
                for (r, o) in zip(rs.clone(), chunks_mut(out, c.max(1))) {
                    let x = &src[r * c..(r + 1) * c];
                    let m = super::math::max_lanes(x);
                    let lr = if m == T::neg_infinity() {
                        fill_uninit(o, T::nan());
                        T::nan()
                    } else {
                        for (o, &v) in zip(&mut o[..], x) {
                            o.write(v - m);
                        }
                        // SAFETY: every element of `o` was written just above.
                        let row: &mut [T] = unsafe { &mut *(o as *mut [MaybeUninit<T>] as *mut [T]) };
                        let s = super::math::exp_in_place(row);
                        finish_row(x, row, m, s, false);
                        loss_of(x, label(r), m, s)
                    };
                    // SAFETY: `r < rows`, and each row (so each loss) is
                    // handed to one task; `loss` outlives the call
                    unsafe { *losses.get().add(r) = lr };
                }
            },
        )
    })?;
    Ok((
        Tensor::from_storage(T::buf_into_storage(loss), out_shape),
        Some(Tensor::from_storage(T::buf_into_storage(p), logits.shape())),
    ))
}

/// Writes `v` to every element of `o`.
#[inline(always)]
fn fill_uninit<T: Copy>(o: &mut [MaybeUninit<T>], v: T) {
    for o in o.iter_mut() {
        o.write(v);
    }
}

/// The sparse softmax cross-entropy's gradient with respect to the logits,
/// one pass per row: `g[r] · (p − one_hot(labels[r]))`, with `p` the
/// softmax of the row of `src` (`probs` false: `src` holds the logits) or
/// the row itself (`probs` true: `src` holds the softmax the forward pass
/// kept). Labels of type `I` checked by [`checked_labels`]; `g` has one
/// value per row. The same bits as the composite `(softmax(x) − one_hot)
/// · g` (the same softmax rows, then one subtraction at the label and one
/// product per element).
pub(crate) fn sparse_xent_grad<T: Float, I: Element>(
    op: &'static str,
    src: &Tensor,
    labels: &Tensor,
    g: &Tensor,
    probs: bool,
) -> Result<Tensor> {
    let c = *src.shape().last().unwrap_or(&1);
    let labels = labels.values::<I>(op)?;
    let gv = g.values::<T>(op)?;
    let rows = labels.len();
    if gv.len() != rows || src.numel() != rows * c {
        return Err(Error::invalid(
            op,
            format!(
                "{rows} labels need {rows} upstream gradients and {rows} rows of logits, got {} and shape {:?}",
                gv.len(),
                src.shape()
            ),
        ));
    }
    let x = src.values::<T>(op)?;
    let label = |r: usize| labels[r].to_f64() as i64 as usize;
    let data = build_rows::<T>(op, rows, c, |rs, out| {
        super::math::with_simd(
            #[inline(always)]
            || {
                if !probs && c < SHORT_ROW {
                    // short rows: their softmax many rows at a time, then
                    // the label and the product
                    softmax_rows(&x, c, 1, rs.clone(), out, false);
                    // SAFETY: every element of `out` was written just above.
                    let out: &mut [T] = unsafe { &mut *(out as *mut [MaybeUninit<T>] as *mut [T]) };
                    for (r, row) in zip(rs.clone(), chunks_mut(out, c.max(1))) {
                        let l = label(r);
                        row[l] = row[l] - T::one();
                        let gr = gv[r];
                        for v in row.iter_mut() {
                            *v = *v * gr;
                        }
                    }
                    return;
                }
                // one pass after the exponentials: `(p · g)`, and `(p − 1) · g`
                // at the label, each rounding as the two passes of the
                // composite's order did
                for (r, o) in zip(rs.clone(), chunks_mut(out, c.max(1))) {
                    let xr = &x[r * c..(r + 1) * c];
                    let (l, gr) = (label(r), gv[r]);
                    if probs {
                        for (o, &p) in zip(&mut o[..], xr) {
                            o.write(p * gr);
                        }
                        o[l].write((xr[l] - T::one()) * gr);
                        continue;
                    }
                    let m = super::math::max_lanes(xr);
                    if m == T::neg_infinity() {
                        // (the softmax of only -inf is NaN)
                        fill_uninit(o, T::nan());
                        continue;
                    }
                    for (o, &v) in zip(&mut o[..], xr) {
                        o.write(v - m);
                    }
                    // SAFETY: every element of `o` was written just above.
                    let row: &mut [T] = unsafe { &mut *(o as *mut [MaybeUninit<T>] as *mut [T]) };
                    let rs = T::one() / super::math::exp_in_place(row);
                    let pl = row[l] * rs;
                    for v in row.iter_mut() {
                        *v = (*v * rs) * gr;
                    }
                    row[l] = (pl - T::one()) * gr;
                }
            },
        )
    })?;
    Ok(Tensor::from_storage(T::buf_into_storage(data), src.shape()))
}

/// [`sparse_xent_grad`] from the softmax (`probs`), written over the
/// softmax's own buffer: `p · g` per element and `(p − 1) · g` at the
/// label, the bits of the out-of-place kernel, with no new buffer of the
/// logits' size (`[1024, 32768]` `f32`: 128 MiB a step, whose fresh pages
/// cost more than the pass). `false` (nothing done) when something else
/// shares `p`'s buffer. Labels of type `I` checked by [`checked_labels`];
/// `g` has one value per row of `p`.
pub(crate) fn sparse_xent_grad_in_place<T: Float, I: Element>(
    op: &'static str,
    p: &mut Tensor,
    labels: &Tensor,
    g: &Tensor,
) -> Result<bool> {
    let c = *p.shape().last().unwrap_or(&1);
    let labels = labels.values::<I>(op)?;
    let gv = g.values::<T>(op)?;
    let rows = labels.len();
    if gv.len() != rows || p.numel() != rows * c || c == 0 {
        return Ok(false);
    }
    let Some(ps) = p.unique_values_mut::<T>() else {
        return Ok(false);
    };
    let label = |r: usize| labels[r].to_f64() as i64 as usize;
    // tasks of whole rows
    let per = (super::chunk_len(ps.len()) / c).max(1) * c;
    super::workers::for_each_chunk_mut(ps, per, |i, out| {
        super::math::with_simd(
            #[inline(always)]
            || {
                for (r, row) in zip(i * per / c.., chunks_mut(out, c)) {
                    let (l, gr) = (label(r), gv[r]);
                    let pl = row[l];
                    for v in row.iter_mut() {
                        *v = *v * gr;
                    }
                    row[l] = (pl - T::one()) * gr;
                }
            },
        )
    });
    Ok(true)
}
