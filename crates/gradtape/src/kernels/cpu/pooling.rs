//! 2-D max and average pooling on NHWC buffers, channel-vectorised, batches in parallel.

use std::mem::MaybeUninit;

use super::conv::Geom;
use super::lockstep::{chunks_mut, zip, zip3, zip4};
use crate::error::Result;
use crate::tensor::Float;

/// Max pool's gradient: `dx[arg[i]] += dy[i]` into a zero `[n, img]`
/// buffer, images in parallel (each window's maximum lies in its own image:
/// `arg` comes from [`max_pool`], which indexes the flat input).
pub(crate) fn max_pool_grad<T: Float>(op: &'static str, dy: &[T], arg: &[i64], n: usize, img: usize) -> Result<Vec<T>> {
    let mut dx = super::filled_vec(op, n * img, T::zero())?;
    if n == 0 || img == 0 || dy.is_empty() {
        return Ok(dx);
    }
    let per = dy.len() / n;
    super::workers::for_each_chunk_mut(&mut dx, img, |i, dxi| {
        let base = (i * img) as i64;
        let (dyi, ai) = (&dy[i * per..(i + 1) * per], &arg[i * per..(i + 1) * per]);
        for (&d, &a) in zip(dyi, ai) {
            if let Some(x) = dxi.get_mut(a.wrapping_sub(base) as usize) {
                *x = *x + d;
            }
        }
    });
    Ok(dx)
}

/// Max pool: the output \[n,oh,ow,c\] and, for each output element, the flat
/// index into `x` of its maximum (the first one in window order on ties;
/// padding never wins). NaN is skipped, as TensorFlow does: it is output
/// only by a window of NaN only.
pub fn max_pool<T: Float>(x: &[T], g: &Geom) -> Result<(Vec<T>, Vec<i64>)> {
    let row = g.ow * g.c;
    let rows = g.n * g.oh;
    let total = rows * row;
    let mut y = super::uninit_buf::<T>(g.op, total)?;
    let mut arg = super::uninit_buf::<i64>(g.op, total)?;
    if total > 0 {
        let (ys, args) = (&mut super::spare(&mut y)[..total], &mut super::spare(&mut arg)[..total]);
        // several output rows per task (a row of a small image is a few hundred elements)
        let per = (super::PAR_MIN / 4 / row).max(1) * row;
        super::workers::for_each_chunk2_mut(ys, per, args, per, |i, yr, ar| {
            super::math::with_simd(
                #[inline(always)]
                || {
                    for (j, yo, ao) in zip3(0.., chunks_mut(yr, row), chunks_mut(ar, row)) {
                        max_pool_row(x, g, i * per / row + j, yo, ao)
                    }
                },
            )
        });
    }
    // SAFETY: every output row was written whole by `max_pool_row`.
    unsafe {
        y.set_len(total);
        arg.set_len(total);
    }
    Ok((y.into_vec(), arg.into_vec()))
}

/// Output row `r` (one row of one image) of [`max_pool`], writing every
/// element (a window with no valid input gives -inf at index 0).
#[inline(always)]
fn max_pool_row<T: Float>(x: &[T], g: &Geom, r: usize, yr: &mut [MaybeUninit<T>], ar: &mut [MaybeUninit<i64>]) {
    let c = g.c;
    let img = g.h * g.w * c;
    let (n, oh) = (r / g.oh, r % g.oh);
    let base = n * img;
    for ow in 0..g.ow {
        let yo = &mut yr[ow * c..(ow + 1) * c];
        let ao = &mut ar[ow * c..(ow + 1) * c];
        let mut first = true;
        for kh in g.kh_range(oh) {
            let Some(ih) = g.ih(oh, kh) else { continue };
            for kw in g.kw_range(ow) {
                let Some(iw) = g.iw(ow, kw) else { continue };
                let off = base + (ih * g.w + iw) * c;
                let xr = &x[off..off + c];
                if first {
                    for (j, yv, av, &xv) in zip4(0.., &mut yo[..], &mut ao[..], xr) {
                        yv.write(xv);
                        av.write((off + j) as i64);
                    }
                    first = false;
                    continue;
                }
                // SAFETY: the first valid tap above initialised `yo` and `ao`.
                let (yo, ao) = unsafe { (init_mut(yo), init_mut(ao)) };
                for (j, yv, av, &xv) in zip4(0.., &mut yo[..], &mut ao[..], xr) {
                    // strictly greater: ties keep the first; a NaN never
                    // wins, and is replaced by the first number after it
                    // (branch-free, so it vectorises)
                    let take = xv > *yv || (yv.is_nan() & !xv.is_nan());
                    *yv = if take { xv } else { *yv };
                    *av = if take { (off + j) as i64 } else { *av };
                }
            }
        }
        if first {
            for (yv, av) in zip(&mut yo[..], &mut ao[..]) {
                yv.write(T::neg_infinity());
                av.write(0);
            }
        }
    }
}

/// Views initialised slots as values.
///
/// # Safety
/// Every element of `s` must be initialised.
#[inline(always)]
unsafe fn init_mut<T>(s: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: the caller's contract; `MaybeUninit<T>` has `T`'s layout.
    unsafe { &mut *(s as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// The number of valid (non-padding) input positions of output (oh, ow).
#[inline]
fn count(g: &Geom, oh: usize, ow: usize) -> usize {
    let hs = g.kh_range(oh).filter(|&k| g.ih(oh, k).is_some()).count();
    let ws = g.kw_range(ow).filter(|&k| g.iw(ow, k).is_some()).count();
    hs * ws
}

/// Average pool: each output is the mean of the valid inputs of its window.
pub fn avg_pool<T: Float>(x: &[T], g: &Geom) -> Result<Vec<T>> {
    let c = g.c;
    let total = g.n * g.oh * g.ow * c;
    let mut y = super::filled_vec(g.op, total, T::zero())?;
    if total == 0 {
        return Ok(y);
    }
    let img = g.h * g.w * c;
    super::workers::for_each_chunk_mut(&mut y, g.ow * c, |r, yr| {
        let (n, oh) = (r / g.oh, r % g.oh);
        let xi = &x[n * img..(n + 1) * img];
        for ow in 0..g.ow {
            let yo = &mut yr[ow * c..(ow + 1) * c];
            for kh in g.kh_range(oh) {
                let Some(ih) = g.ih(oh, kh) else { continue };
                for kw in g.kw_range(ow) {
                    let Some(iw) = g.iw(ow, kw) else { continue };
                    let xr = &xi[(ih * g.w + iw) * c..(ih * g.w + iw + 1) * c];
                    for (yv, &xv) in zip(&mut yo[..], xr) {
                        *yv = *yv + xv;
                    }
                }
            }
            let inv = T::one() / T::from(count(g, oh, ow).max(1)).unwrap_or_else(T::one);
            for yv in yo.iter_mut() {
                *yv = *yv * inv;
            }
        }
    });
    Ok(y)
}

/// The adjoint of [`avg_pool`]: spreads each `dy` element evenly over the
/// valid inputs of its window; returns \[n,h,w,c\].
pub fn avg_pool_grad<T: Float>(dy: &[T], g: &Geom) -> Result<Vec<T>> {
    let c = g.c;
    let img = g.h * g.w * c;
    let mut dx = super::filled_vec(g.op, g.n * img, T::zero())?;
    if dx.is_empty() {
        return Ok(dx);
    }
    let orow = g.oh * g.ow * c;
    super::workers::for_each_chunk_mut(&mut dx, img, |n, dxi| {
        let dyi = &dy[n * orow..(n + 1) * orow];
        for oh in 0..g.oh {
            for ow in 0..g.ow {
                let inv = T::one() / T::from(count(g, oh, ow).max(1)).unwrap_or_else(T::one);
                let d = &dyi[(oh * g.ow + ow) * c..(oh * g.ow + ow + 1) * c];
                for kh in g.kh_range(oh) {
                    let Some(ih) = g.ih(oh, kh) else { continue };
                    for kw in g.kw_range(ow) {
                        let Some(iw) = g.iw(ow, kw) else { continue };
                        let xr = &mut dxi[(ih * g.w + iw) * c..(ih * g.w + iw + 1) * c];
                        for (xv, &dv) in zip(&mut xr[..], d) {
                            *xv = *xv + dv * inv;
                        }
                    }
                }
            }
        }
    });
    Ok(dx)
}
