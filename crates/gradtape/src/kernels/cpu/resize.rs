//! Image resizing on contiguous NHWC buffers: bilinear and nearest-neighbour
//! sampling and their transposes (the gradients), with TensorFlow's mapping
//! of output pixels to input coordinates.
//!
//! Both samplings are separable: each output row reads one or two input
//! rows and each output column one or two input columns, so one table per
//! axis ([`bilinear_axis`], [`nearest_axis`]) says which, and with what
//! weight. The forward kernels write output rows in parallel; the transposes
//! scatter into a zeroed input-shaped buffer, one image per task.

use super::lockstep::zip;
use super::workers;
use crate::error::Result;
use crate::tensor::{alloc, Element, Float};

/// The sizes of one resize: batch, input height and width, output height
/// and width, channels (all non-zero except the batch).
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Batch.
    pub n: usize,
    /// Input height.
    pub ih: usize,
    /// Input width.
    pub iw: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Channels.
    pub c: usize,
}

/// TensorFlow's two flags that map output to input coordinates.
#[derive(Clone, Copy, Debug)]
pub struct Coords {
    /// Corners aligned (TensorFlow 1's `align_corners`).
    pub align_corners: bool,
    /// Pixel centers at half-integers (`half_pixel_centers`).
    pub half_pixel_centers: bool,
}

/// One output index along an axis of a bilinear resize: it reads input
/// indices `lo` and `hi` with weights `1 - w` and `w`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lerp<T> {
    lo: usize,
    hi: usize,
    w: T,
}

/// `input / output` (or `(input - 1) / (output - 1)` with aligned corners),
/// TensorFlow's scale from output to input coordinates, in `T`.
pub(crate) fn scale<T: Float>(input: usize, output: usize, align_corners: bool) -> T {
    let f = |v: usize| T::from_f64(v as f64);
    if align_corners && output > 1 {
        f(input - 1) / f(output - 1)
    } else {
        f(input) / f(output)
    }
}

/// The bilinear table of one axis (`output` entries), coordinates computed
/// in `T` as TensorFlow computes them in `float`: `(i + 0.5) * scale - 0.5`
/// with half-pixel centers, `i * scale` otherwise; the two neighbours are
/// clamped into the image.
pub(crate) fn bilinear_axis<T: Float>(
    op: &'static str,
    input: usize,
    output: usize,
    co: Coords,
) -> Result<Vec<Lerp<T>>> {
    let s: T = scale(input, output, co.align_corners);
    let last = input.saturating_sub(1);
    let half = T::from_f64(0.5);
    let mut v = alloc::try_vec(op, output)?;
    v.extend((0..output).map(|i| {
        let i = T::from_f64(i as f64);
        let x = if co.half_pixel_centers {
            (i + half) * s - half
        } else {
            i * s
        };
        let fl = x.floor();
        let idx = |t: T| t.to_f64().max(0.0).min(last as f64) as usize;
        Lerp {
            lo: idx(fl),
            hi: idx(x.ceil()),
            w: x - fl,
        }
    }));
    Ok(v)
}

/// The nearest-neighbour table of one axis: the input index each output
/// index reads. Computed in `f32` whatever the data's dtype, as TensorFlow
/// does, so that the same pixels are picked: `floor((i + 0.5) * scale)` with
/// half-pixel centers, `round(i * scale)` (half away from zero) with aligned
/// corners, `floor(i * scale)` otherwise, clamped into the image.
pub(crate) fn nearest_axis(op: &'static str, input: usize, output: usize, co: Coords) -> Result<Vec<usize>> {
    let s: f32 = scale(input, output, co.align_corners);
    let last = input.saturating_sub(1) as f64;
    let mut v = alloc::try_vec(op, output)?;
    v.extend((0..output).map(|i| {
        let i = i as f32;
        let x = if co.half_pixel_centers { (i + 0.5) * s } else { i * s };
        let j = if co.align_corners { x.round() } else { x.floor() };
        (j as f64).max(0.0).min(last) as usize
    }));
    Ok(v)
}

/// Output rows per parallel task (at least one).
fn rows_per_task(row: usize) -> usize {
    (super::PAR_MIN / 2 / row.max(1)).max(1)
}

/// Bilinear resize of `x` (`[n, ih, iw, c]`) to `[n, oh, ow, c]`, each
/// output `top + (bottom - top) * wy` with `top = tl + (tr - tl) * wx` (and
/// `bottom` alike), TensorFlow's order of operations.
pub(crate) fn bilinear<T: Float>(op: &'static str, x: &[T], d: Dims, co: Coords) -> Result<Vec<T>> {
    let (ty, tx) = (
        bilinear_axis::<T>(op, d.ih, d.oh, co)?,
        bilinear_axis::<T>(op, d.iw, d.ow, co)?,
    );
    let row = d.ow * d.c;
    let mut y = super::filled_vec(op, d.n * d.oh * row, T::zero())?;
    if y.is_empty() {
        return Ok(y);
    }
    let per = rows_per_task(row);
    let (c, img, irow) = (d.c, d.ih * d.iw * d.c, d.iw * d.c);
    workers::for_each_chunk_mut(&mut y, per * row, |task, out| {
        for (k, yr) in out.chunks_exact_mut(row).enumerate() {
            let r = task * per + k;
            let (b, i) = (r / d.oh, r % d.oh);
            let ly = ty[i];
            let top = &x[b * img + ly.lo * irow..][..irow];
            let bot = &x[b * img + ly.hi * irow..][..irow];
            for (j, lx) in zip(0.., &tx[..]) {
                let yo = &mut yr[j * c..(j + 1) * c];
                let (l, rt) = (lx.lo * c, lx.hi * c);
                for ch in 0..c {
                    let t = top[l + ch] + (top[rt + ch] - top[l + ch]) * lx.w;
                    let bo = bot[l + ch] + (bot[rt + ch] - bot[l + ch]) * lx.w;
                    yo[ch] = t + (bo - t) * ly.w;
                }
            }
        }
    });
    Ok(y)
}

/// The transpose of [`bilinear`]: `dy` (`[n, oh, ow, c]`) spread onto a
/// zero `[n, ih, iw, c]` with the forward's weights. Images in parallel.
pub(crate) fn bilinear_grad<T: Float>(op: &'static str, dy: &[T], d: Dims, co: Coords) -> Result<Vec<T>> {
    let (ty, tx) = (
        bilinear_axis::<T>(op, d.ih, d.oh, co)?,
        bilinear_axis::<T>(op, d.iw, d.ow, co)?,
    );
    let img = d.ih * d.iw * d.c;
    let mut dx = super::filled_vec(op, d.n * img, T::zero())?;
    if dx.is_empty() {
        return Ok(dx);
    }
    let (c, oimg, irow, one) = (d.c, d.oh * d.ow * d.c, d.iw * d.c, T::one());
    workers::for_each_chunk_mut(&mut dx, img, |b, dxi| {
        let g = &dy[b * oimg..(b + 1) * oimg];
        for (i, ly) in zip(0.., &ty[..]) {
            for (j, lx) in zip(0.., &tx[..]) {
                let go = &g[(i * d.ow + j) * c..][..c];
                let corners = [
                    (ly.lo, lx.lo, (one - ly.w) * (one - lx.w)),
                    (ly.lo, lx.hi, (one - ly.w) * lx.w),
                    (ly.hi, lx.lo, ly.w * (one - lx.w)),
                    (ly.hi, lx.hi, ly.w * lx.w),
                ];
                for (r, col, w) in corners {
                    let dst = &mut dxi[r * irow + col * c..][..c];
                    for (o, &v) in zip(&mut dst[..], go) {
                        *o = *o + v * w;
                    }
                }
            }
        }
    });
    Ok(dx)
}

/// Nearest-neighbour resize of `x` (`[n, ih, iw, c]`, any element type) to
/// `[n, oh, ow, c]`: each output pixel copies the input pixel of the tables.
pub(crate) fn nearest<T: Element + Default>(op: &'static str, x: &[T], d: Dims, co: Coords) -> Result<Vec<T>> {
    let (ty, tx) = (nearest_axis(op, d.ih, d.oh, co)?, nearest_axis(op, d.iw, d.ow, co)?);
    let row = d.ow * d.c;
    let mut y = super::filled_vec(op, d.n * d.oh * row, T::default())?;
    if y.is_empty() {
        return Ok(y);
    }
    let per = rows_per_task(row);
    let (c, img, irow) = (d.c, d.ih * d.iw * d.c, d.iw * d.c);
    workers::for_each_chunk_mut(&mut y, per * row, |task, out| {
        for (k, yr) in out.chunks_exact_mut(row).enumerate() {
            let r = task * per + k;
            let src = &x[(r / d.oh) * img + ty[r % d.oh] * irow..][..irow];
            for (j, &sx) in zip(0.., &tx[..]) {
                yr[j * c..(j + 1) * c].copy_from_slice(&src[sx * c..(sx + 1) * c]);
            }
        }
    });
    Ok(y)
}

/// The transpose of [`nearest`]: each element of `dy` added to the input
/// pixel it was copied from. Images in parallel.
pub(crate) fn nearest_grad<T: Float>(op: &'static str, dy: &[T], d: Dims, co: Coords) -> Result<Vec<T>> {
    let (ty, tx) = (nearest_axis(op, d.ih, d.oh, co)?, nearest_axis(op, d.iw, d.ow, co)?);
    let img = d.ih * d.iw * d.c;
    let mut dx = super::filled_vec(op, d.n * img, T::zero())?;
    if dx.is_empty() {
        return Ok(dx);
    }
    let (c, oimg, irow) = (d.c, d.oh * d.ow * d.c, d.iw * d.c);
    workers::for_each_chunk_mut(&mut dx, img, |b, dxi| {
        let g = &dy[b * oimg..(b + 1) * oimg];
        for (i, &sy) in zip(0.., &ty[..]) {
            for (j, &sx) in zip(0.., &tx[..]) {
                let go = &g[(i * d.ow + j) * c..][..c];
                let dst = &mut dxi[sy * irow + sx * c..][..c];
                for (o, &v) in zip(&mut dst[..], go) {
                    *o = *o + v;
                }
            }
        }
    });
    Ok(dx)
}
