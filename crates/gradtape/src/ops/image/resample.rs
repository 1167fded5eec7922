//! Bicubic and area resizing: `tf.image.resize(images, size, method)` with
//! `"bicubic"` (antialiasing off) and `"area"`, NHWC.
//!
//! Both are separable linear maps of the image: each output row is a
//! weighted sum of a few input rows, each output column of a few input
//! columns. A table per axis lists, for every output index, the input
//! indices it reads and their weights (a fixed number of *taps*; unused
//! taps read index 0 with weight 0); the resize is then, per axis, one
//! `gather` per tap and a weighted sum over the taps (the columns through
//! a transposition, so that whole rows are gathered and weighed). Written with public
//! ops, the resize is differentiable to any order (the gradient of a
//! gather is its transpose, a scatter-add with the same weights, which is
//! TensorFlow's `ResizeBicubicGrad`), and traces as ordinary ops whose
//! tables are constants of the graph.
//!
//! The tables follow TensorFlow's CPU kernels:
//!
//! - **bicubic** (`ResizeBicubic` with half-pixel centers, which is what
//!   `tf.image.resize` runs): output pixel `i` is centred on input
//!   coordinate `(i + 0.5) * in / out - 0.5`; its four neighbours
//!   `floor - 1 ..= floor + 2` are weighed by Keys' cubic kernel with
//!   `a = -0.5`, a neighbour outside the image gets weight 0, and the
//!   weights are renormalised to sum to 1. TensorFlow reads the kernel
//!   from a table of 1025 entries: the fractional part of the coordinate
//!   is rounded to a multiple of 1/1024 (half to even) first. That
//!   rounding is kept here, in `f64` as well, so that the weights are
//!   TensorFlow's; they differ from the exact cubic by up to about 7e-4.
//! - **area** (`ResizeArea`, corners not aligned): output pixel `i` covers
//!   input interval `[i s, (i + 1) s)`, `s = in / out`; each input pixel
//!   is weighed by the length of its overlap with it, and the sum is
//!   divided by the area `s_h s_w`.
//!
//! With `f32` data the coordinates and weights are rounded to `f32` after
//! every operation, as TensorFlow computes them in `float`, so that the
//! same neighbours and table entries are picked; with `f64` data they are
//! computed in `f64`.
//!
//! **Departures from TensorFlow**: TensorFlow returns `float32` for both
//! methods whatever the input's dtype; here `f64` images stay `f64` and
//! `f16`/`bf16` images stay in their dtype (computed in `f32`, rounded
//! once); integer images give `f32`, as in TensorFlow. TensorFlow has no
//! gradient for `ResizeArea`; here the area resize is differentiable like
//! the others. An unused tap of the area table reads a pixel with weight
//! 0, so a non-finite pixel can make a neighbouring output NaN where
//! TensorFlow's would be finite.

use crate::error::Result;
use crate::ops::desc::ResizeAttrs;
use crate::tensor::layout::checked_numel;
use crate::tensor::{alloc, DType, Tensor};

use super::resize::{dims, ResizeMethod};

/// One axis of a separable resampling: for output index `i` and tap `t`,
/// the input index `idx[i * taps + t]` and its weight `w[i * taps + t]`.
struct Table {
    taps: usize,
    idx: Vec<i64>,
    w: Vec<f64>,
}

/// `v` rounded to `f32` when `single` (TensorFlow's `float` arithmetic:
/// each `f64` operation on `f32` values, rounded once, is the `f32`
/// operation).
fn r(v: f64, single: bool) -> f64 {
    if single {
        v as f32 as f64
    } else {
        v
    }
}

/// Keys' cubic convolution kernel with `a = -0.5`, for `|x| <= 1` and for
/// `1 <= |x| <= 2`.
fn keys_near(x: f64) -> f64 {
    const A: f64 = -0.5;
    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
}

fn keys_far(x: f64) -> f64 {
    const A: f64 = -0.5;
    ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
}

/// Rounds to the nearest integer, halves to even (`lrintf`).
fn round_even(v: f64) -> f64 {
    let f = v.floor();
    let d = v - f;
    if d > 0.5 || (d == 0.5 && f % 2.0 != 0.0) {
        f + 1.0
    } else {
        f
    }
}

/// The bicubic table of one axis (see the module docs).
fn bicubic_table(op: &'static str, input: usize, output: usize, single: bool) -> Result<Table> {
    let s = r(input as f64 / output as f64, single);
    let last = input as i64 - 1;
    let mut idx = alloc::try_vec(op, output.saturating_mul(4))?;
    let mut w = alloc::try_vec(op, output.saturating_mul(4))?;
    for i in 0..output {
        let centre = r(r(i as f64 + 0.5, single) * s, single);
        let at = r(centre - 0.5, single);
        let base = at.floor();
        let q = round_even((at - base) * 1024.0) / 1024.0;
        let mut k = [keys_far(1.0 + q), keys_near(q), keys_near(1.0 - q), keys_far(2.0 - q)].map(|v| r(v, single));
        let mut sum = 0.0;
        for (t, kt) in k.iter_mut().enumerate() {
            let j = base as i64 - 1 + t as i64;
            let bounded = j.clamp(0, last.max(0));
            if bounded != j {
                *kt = 0.0;
            }
            sum = r(sum + *kt, single);
            idx.push(bounded);
        }
        if sum.abs() >= 1000.0 * f32::MIN_POSITIVE as f64 {
            let inv = r(1.0 / sum, single);
            k = k.map(|v| r(v * inv, single));
        }
        w.extend_from_slice(&k);
    }
    Ok(Table { taps: 4, idx, w })
}

/// The area table of one axis (see the module docs; the weights are the
/// overlaps, not yet divided by the scale).
fn area_table(op: &'static str, input: usize, output: usize, single: bool) -> Result<(Table, f64)> {
    let s = r(input as f64 / output as f64, single);
    let last = input as i64 - 1;
    // (the spans allocated first: a huge output fails here, not after a
    // long walk)
    let mut spans = alloc::try_vec(op, output)?;
    spans.extend((0..output).map(|i| {
        let lo = r(i as f64 * s, single);
        let hi = r((i + 1) as f64 * s, single);
        (lo, hi, lo.floor() as i64, hi.ceil() as i64)
    }));
    let taps = spans
        .iter()
        .map(|&(_, _, a, b)| (b - a).max(1) as usize)
        .max()
        .unwrap_or(1);
    let mut idx = alloc::try_vec(op, output.saturating_mul(taps))?;
    let mut w = alloc::try_vec(op, output.saturating_mul(taps))?;
    for &(lo, hi, a, b) in &spans {
        for t in 0..taps as i64 {
            let k = a + t;
            if k >= b {
                idx.push(0);
                w.push(0.0);
                continue;
            }
            let (kf, k1) = (k as f64, (k + 1) as f64);
            let weight = match (kf < lo, k1 > hi) {
                (true, true) => s,
                (true, false) => r(k1 - lo, single),
                (false, true) => r(hi - kf, single),
                (false, false) => 1.0,
            };
            idx.push(k.clamp(0, last.max(0)));
            w.push(weight);
        }
    }
    Ok((Table { taps, idx, w }, s))
}

/// A constant of `dtype` (`f32` or `f64`) from `f64` values.
fn constant(v: Vec<f64>, shape: &[usize], dtype: DType) -> Result<Tensor> {
    if dtype == DType::F32 {
        Tensor::from_vec(v.into_iter().map(|x| x as f32).collect::<Vec<_>>(), shape)
    } else {
        Tensor::from_vec(v, shape)
    }
}

/// Resamples axis 1 of `x` (`[n, h, w, c]`) with `t`, to `out` entries:
/// per tap, a gather of whole rows of `w c` values weighed by that tap's
/// weights, summed over the taps in order. (One gather of every tap and a
/// weighted sum over a tap axis took three to four times as long.)
fn apply_rows(x: &Tensor, t: Table, out: usize) -> Result<Tensor> {
    let mut acc: Option<Tensor> = None;
    for k in 0..t.taps {
        let idx: Vec<i64> = (0..out).map(|i| t.idx[i * t.taps + k]).collect();
        let w: Vec<f64> = (0..out).map(|i| t.w[i * t.taps + k]).collect();
        // (the table's constants made where x is)
        let term = x
            .gather(&Tensor::from_vec(idx, &[out])?.to(x.device())?, 1)?
            .mul(&constant(w, &[1, out, 1, 1], x.dtype())?.to(x.device())?)?;
        acc = Some(match acc {
            None => term,
            Some(a) => a.add(&term)?,
        });
    }
    acc.ok_or_else(|| crate::error::Error::invalid("resize_images", "a resampling table without taps"))
}

/// [`apply_rows`] on axis 2, through a transposition (gathering and
/// weighing whole rows is several times faster than single pixels).
fn apply_columns(x: &Tensor, t: Table, out: usize) -> Result<Tensor> {
    let xt = x.permute(&[0, 2, 1, 3])?.contiguous()?;
    apply_rows(&xt, t, out)?.permute(&[0, 2, 1, 3])?.contiguous()
}

/// `images` (`[n, h, w, c]`, `f32` or `f64`) resized to `size` by the
/// bicubic or area method, `dims` checked.
fn resample_float(x: &Tensor, size: [usize; 2], method: ResizeMethod) -> Result<Tensor> {
    let op = "resize_images";
    let s = x.shape();
    let (ih, iw) = (s[1], s[2]);
    let single = x.dtype() == DType::F32;
    match method {
        ResizeMethod::Bicubic => {
            let tw = bicubic_table(op, iw, size[1], single)?;
            let th = bicubic_table(op, ih, size[0], single)?;
            let y = apply_columns(x, tw, size[1])?;
            apply_rows(&y, th, size[0])
        }
        _ => {
            let (tw, sw) = area_table(op, iw, size[1], single)?;
            let (th, sh) = area_table(op, ih, size[0], single)?;
            let y = apply_columns(x, tw, size[1])?;
            let y = apply_rows(&y, th, size[0])?;
            let inv = r(1.0 / r(sh * sw, single), single);
            y.mul_scalar(inv)
        }
    }
}

/// [`ResizeMethod::Bicubic`] and [`ResizeMethod::Area`] of a batch
/// `[n, h, w, c]`, for `resize_images` (which has handled rank 3).
pub(super) fn resize_cubic_or_area(x: &Tensor, size: [usize; 2], method: ResizeMethod) -> Result<Tensor> {
    let op = "resize_images";
    let attrs = ResizeAttrs {
        size,
        align_corners: false,
        half_pixel_centers: true,
    };
    let d = dims(op, x.shape(), size, &attrs, false)?;
    // the dtype computed in, and the one returned
    let (wide, to) = match x.dtype() {
        dt @ (DType::F32 | DType::F64) => (dt, dt),
        dt if dt.is_half() => (DType::F32, dt),
        DType::I32 | DType::I64 => (DType::F32, DType::F32),
        dt => {
            return Err(crate::ops::unsupported(
                op,
                dt,
                "f32, f64, f16, bf16, i32 or i64 (bicubic and area resizing)",
            ))
        }
    };
    let x = if x.dtype() == wide { x.clone() } else { x.cast(wide)? };
    let out = [d.n, d.oh, d.ow, d.c];
    let y = if checked_numel(op, &out)? == 0 {
        // (an empty batch or no channels: no tables, however large the size)
        x.sum(&[0, 1, 2], true)?.broadcast_to(&out)?
    } else {
        resample_float(&x, size, method)?
    };
    if to == wide {
        Ok(y)
    } else {
        y.cast(to)
    }
}
