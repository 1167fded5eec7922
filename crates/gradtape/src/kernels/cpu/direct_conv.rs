//! Direct `f32` convolutions for CPUs with AVX-512, for stride 1 (any
//! dilation, padding and channel counts): the forward convolution, its
//! input gradient and its filter gradient, with no im2col matrix.
//!
//! Why: im2col copies every input element `kh * kw` times into a matrix and
//! the product reads it back. For the few-channel layers at the bottom of a
//! CNN that traffic costs more than the arithmetic (the bench's first layer
//! has one input channel: 9 multiply-adds per copied element). Here the input
//! is copied once, into a zero-padded buffer, and the kernels read each
//! window tap straight from it:
//!
//! - **Forward**: a register tile of `MR` output pixels by `16 * NV` output
//!   channels, summed over taps and input channels (an implicit GEMM whose
//!   `A` operand is read in place). Pixels are numbered on the padded grid,
//!   so `MR` consecutive pixels sit at `MR` consecutive input positions for
//!   every tap; the few that fall on padding columns are computed and not
//!   stored.
//! - **Input gradient**: a stride-1 transposed convolution is a convolution,
//!   of the padded output gradient with the filter flipped and its channel
//!   dims swapped, so it runs the forward kernel.
//! - **Filter gradient**: a tile of `MR` filter rows (tap, input channel) by
//!   `16 * NV` output channels, summed over every output pixel; parts of the
//!   batch run in parallel when the filter has too few tiles, and their
//!   partial sums are added.
//!
//! The tile sizes are the GEMM kernel's ([`super::sgemm`]), picked by the
//! output's channel count. Strided convolutions, other dtypes and CPUs
//! without AVX-512 keep the im2col path in [`super::conv`], as does every
//! convolution when `GRADTAPE_SCONV=0` (for comparisons; read once).

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::conv::Geom;
use super::lockstep::{self, zip};
use super::sgemm::mask;
use super::workers::{self, SendPtr};
use crate::tensor::Element;

/// Channel counts up to which the direct kernels beat im2col + GEMM. Past
/// them the filter no longer stays in L1 while a tile sums over it, and the
/// GEMM's cache blocking wins (measured: `docs/compiler-notes.md`).
const MAX_CHANNELS: usize = 64;
/// Input channels up to which the direct filter gradient is used.
const MAX_FILTER_GRAD_CHANNELS: usize = 32;
/// Output channels below which a tile's vectors are mostly idle lanes and
/// the direct forward and input gradient lose.
const MIN_OUT_CHANNELS: usize = 8;

/// Whether the direct kernels take geometry `g` at all.
fn suits(g: &Geom) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| super::sgemm::available() && std::env::var("GRADTAPE_SCONV").map_or(true, |v| v != "0"))
        && g.sh == 1
        && g.sw == 1
        // (grouped convolutions take im2col's per-group products)
        && g.groups == 1
        && [g.n, g.c, g.o, g.kh, g.kw, g.oh, g.ow].iter().all(|&d| d > 0)
        // stride 1: the padding before never exceeds the dilated window
        && g.pt <= (g.kh - 1) * g.dh
        && g.pl <= (g.kw - 1) * g.dw
        && padded_is_small(g)
}

/// Whether the padded copy the kernels make (of the input, or of the output
/// gradient) stays within a few times the larger of the two: a widely
/// dilated window with SAME padding would otherwise ask for a buffer of
/// mostly zeros far larger than either (im2col's matrix stays the size of
/// the output times the window).
fn padded_is_small(g: &Geom) -> bool {
    let big = |a: usize, k: usize, d: usize| a.saturating_add((k - 1).saturating_mul(d));
    let cs = if g.c.max(g.o) <= 64 {
        g.c.max(g.o).next_power_of_two()
    } else {
        g.c.max(g.o)
    };
    let padded = [big(g.oh.max(g.h), g.kh, g.dh), big(g.ow.max(g.w), g.kw, g.dw), g.n, cs]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d));
    let plain = [g.n, g.h.max(g.oh), g.w.max(g.ow), g.c.max(g.o)]
        .iter()
        .fold(1usize, |a, &d| a.saturating_mul(d));
    padded.is_some_and(|p| p <= plain.saturating_mul(4).saturating_add(1 << 16))
}

/// `s` as `f32` when `T` is `f32`.
fn as_f32<T: Element>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: T is f32 (checked), so the slice is one of f32.
    (T::DTYPE == crate::DType::F32).then(|| unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len()) })
}

/// `v` as a `Vec<T>` (`T` must be `f32`, as [`as_f32`] checked).
fn from_f32<T: Element>(v: Vec<f32>) -> Vec<T> {
    assert!(T::DTYPE == crate::DType::F32);
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: T is f32: same size, alignment and allocation.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut T, v.len(), v.capacity()) }
}

/// `conv2d(x, f)` for `g` when the direct kernel takes it (`f32`, stride 1).
pub(crate) fn forward<T: Element>(x: &[T], f: &[T], g: &Geom) -> Option<Vec<T>> {
    let (x, f) = (as_f32(x)?, as_f32(f)?);
    if !suits(g) || g.c > MAX_CHANNELS || g.o > MAX_CHANNELS || g.o < MIN_OUT_CHANNELS {
        return None;
    }
    let d = Plan::new(g.n, [g.oh, g.ow], g.c, [g.kh, g.kw], [g.dh, g.dw], g.o);
    let xp = pad(x, [g.n, g.h, g.w, g.c], &d, [g.pt, g.pl])?;
    let y = conv(&xp, &d, f);
    super::recycle(xp);
    Some(from_f32(y?))
}

/// The input gradient of [`forward`]: `dy` [n,oh,ow,o] -> [n,h,w,c].
pub(crate) fn backprop_input<T: Element>(dy: &[T], f: &[T], g: &Geom) -> Option<Vec<T>> {
    let (dy, f) = (as_f32(dy)?, as_f32(f)?);
    if !suits(g) || g.h == 0 || g.w == 0 || g.c > MAX_CHANNELS || g.o > MAX_CHANNELS || g.c < MIN_OUT_CHANNELS {
        return None;
    }
    let (kh, kw, c, o) = (g.kh, g.kw, g.c, g.o);
    // dx[ih, iw] = sum dy[ih + pt - a*dh, iw + pl - b*dw] f[a, b]: with a
    // flipped, a convolution of dy padded by (k-1)*d - p before
    let pads = [(kh - 1) * g.dh - g.pt, (kw - 1) * g.dw - g.pl];
    let d = Plan::new(g.n, [g.h, g.w], o, [kh, kw], [g.dh, g.dw], c);
    if pads[0] + g.oh > d.hp || pads[1] + g.ow > d.wp {
        return None;
    }
    // the filter flipped in both spatial dims, [kh, kw, o, c]
    // (every element is written below; zeros first keep the loop safe)
    let mut ff = super::uninit_buf::<f32>("conv2d_backprop_input", kh * kw * o * c).ok()?;
    ff.resize(kh * kw * o * c, 0.0);
    for (t, dst) in ff.chunks_exact_mut(o * c).enumerate() {
        let (a, b) = (t / kw, t % kw);
        let src = &f[((kh - 1 - a) * kw + (kw - 1 - b)) * c * o..][..c * o];
        for ci in 0..c {
            for oc in 0..o {
                dst[oc * c + ci] = src[ci * o + oc];
            }
        }
    }
    let dyp = pad(dy, [g.n, g.oh, g.ow, o], &d, pads)?;
    let dx = conv(&dyp, &d, &ff);
    super::recycle(dyp);
    super::recycle_buf(ff);
    Some(from_f32(dx?))
}

/// The filter gradient of [`forward`]: `x` and `dy` -> [kh,kw,c,o].
pub(crate) fn backprop_filter<T: Element>(x: &[T], dy: &[T], g: &Geom) -> Option<Vec<T>> {
    let (x, dy) = (as_f32(x)?, as_f32(dy)?);
    if !suits(g) || g.c > MAX_FILTER_GRAD_CHANNELS || g.o > MAX_CHANNELS || g.kh * g.kw == 1 {
        return None;
    }
    let d = Plan::new(g.n, [g.oh, g.ow], g.c, [g.kh, g.kw], [g.dh, g.dw], g.o);
    let xp = pad(x, [g.n, g.h, g.w, g.c], &d, [g.pt, g.pl])?;
    let df = match tile_vectors(g.o) {
        1 => filter_grad::<16, 1>(&xp, &d, dy),
        2 => filter_grad::<12, 2>(&xp, &d, dy),
        _ => filter_grad::<8, 3>(&xp, &d, dy),
    };
    super::recycle(xp);
    Some(from_f32(df?))
}

/// A stride-1 convolution on a padded input `[n, hp, wp, cs]` (`c` channels
/// used of `cs`), giving `[n, oh, ow, o]`, where `hp = oh + (kh - 1) * dh`
/// (likewise `wp`).
#[derive(Debug)]
struct Plan {
    n: usize,
    hp: usize,
    wp: usize,
    c: usize,
    /// Elements per pixel of the padded input: `c` rounded up to a power of
    /// two up to 64, so that the kernels' pixel offsets are constants.
    cs: usize,
    oh: usize,
    ow: usize,
    o: usize,
    /// Offset of each window tap from its pixel in the padded input, in
    /// elements, in filter order (inline up to a 5x5 window: a plan is
    /// made per call, and a compiled step makes several).
    taps: smallvec::SmallVec<[usize; 25]>,
}

/// Zeros after the padded input, so that a tile's pixels past the last
/// image's end read zeros (at least the largest `MR` pixels).
const SLACK_PIXELS: usize = 16;

impl Plan {
    fn new(n: usize, [oh, ow]: [usize; 2], c: usize, [kh, kw]: [usize; 2], [dh, dw]: [usize; 2], o: usize) -> Plan {
        let (hp, wp) = (oh + (kh - 1) * dh, ow + (kw - 1) * dw);
        let cs = if c <= 64 { c.next_power_of_two() } else { c };
        let taps = (0..kh)
            .flat_map(|a| (0..kw).map(move |b| (a * dh * wp + b * dw) * cs))
            .collect();
        Plan {
            n,
            hp,
            wp,
            c,
            cs,
            oh,
            ow,
            o,
            taps,
        }
    }
}

/// `x` ([n, h, w, c]) in a zero-padded `[n, hp, wp, cs]` buffer, `pads`
/// rows and columns before each image's, with [`SLACK_PIXELS`] zero pixels
/// after; `None` when it cannot be allocated (the caller falls back to
/// im2col, whose own allocation failure is the op's error).
fn pad(x: &[f32], [n, h, w, c]: [usize; 4], d: &Plan, [pt, pl]: [usize; 2]) -> Option<Vec<f32>> {
    let cs = d.cs;
    let (img, line, row) = (d.hp * d.wp * cs, d.wp * cs, w * c);
    // input columns past the padded width are never read (stride 1)
    let cols = w.min(d.wp - pl);
    let total = n * img + SLACK_PIXELS * cs;
    let mut v = super::uninit_buf::<f32>("conv2d", total).ok()?;
    let s = &mut super::spare(&mut v)[..total];
    let (body, tail) = s.split_at_mut(n * img);
    // SAFETY (all writes below): zeros and copies into slots of `s`, each
    // range inside its chunk; every slot is written once.
    unsafe { std::ptr::write_bytes(tail.as_mut_ptr(), 0, tail.len()) };
    let per = (super::PAR_MIN / img.max(1)).max(1);
    workers::for_each_chunk_mut(body, per * img, |i, imgs| {
        for (k, dst) in imgs.chunks_exact_mut(img.max(1)).enumerate() {
            let src = &x[(i * per + k) * h * row..][..h * row];
            for (r, dl) in dst.chunks_exact_mut(line).enumerate() {
                let p = dl.as_mut_ptr() as *mut f32;
                match r.checked_sub(pt).filter(|&r| r < h) {
                    Some(r) => unsafe {
                        let (s, q) = (src[r * row..].as_ptr(), p.add(pl * cs));
                        std::ptr::write_bytes(p, 0, pl * cs);
                        if cs == c {
                            std::ptr::copy_nonoverlapping(s, q, cols * c);
                        } else {
                            for j in 0..cols {
                                std::ptr::copy_nonoverlapping(s.add(j * c), q.add(j * cs), c);
                                std::ptr::write_bytes(q.add(j * cs + c), 0, cs - c);
                            }
                        }
                        std::ptr::write_bytes(q.add(cols * cs), 0, line - (pl + cols) * cs);
                    },
                    None => unsafe { std::ptr::write_bytes(p, 0, line) },
                }
            }
        }
    });
    // SAFETY: body and tail cover all `total` slots, all written above.
    unsafe { v.set_len(total) };
    Some(v.into_vec())
}

/// The convolution of padded `xp` with `f` ([taps, c, o]); `None` when the
/// output cannot be allocated.
fn conv(xp: &[f32], d: &Plan, f: &[f32]) -> Option<Vec<f32>> {
    match tile_vectors(d.o) {
        1 => conv_strided::<16, 1>(xp, d, f),
        2 => conv_strided::<12, 2>(xp, d, f),
        _ => conv_strided::<8, 3>(xp, d, f),
    }
}

/// The vectors per tile row (`NV`) for `o` output channels: one for up to
/// 16; past that two or three, whichever leaves fewer idle lanes in the
/// last column block (both tiles hold 24 accumulators).
fn tile_vectors(o: usize) -> usize {
    match o {
        0..=16 => 1,
        _ if o.next_multiple_of(48) - o < o.next_multiple_of(32) - o => 3,
        _ => 2,
    }
}

/// [`conv_tiles`] with the pixel stride as a constant (0: not one).
fn conv_strided<const MR: usize, const NV: usize>(xp: &[f32], d: &Plan, f: &[f32]) -> Option<Vec<f32>> {
    match d.cs {
        1 => conv_tiles::<MR, NV, 1>(xp, d, f),
        2 => conv_tiles::<MR, NV, 2>(xp, d, f),
        4 => conv_tiles::<MR, NV, 4>(xp, d, f),
        8 => conv_tiles::<MR, NV, 8>(xp, d, f),
        16 => conv_tiles::<MR, NV, 16>(xp, d, f),
        32 => conv_tiles::<MR, NV, 32>(xp, d, f),
        64 => conv_tiles::<MR, NV, 64>(xp, d, f),
        _ => conv_tiles::<MR, NV, 0>(xp, d, f),
    }
}

fn conv_tiles<const MR: usize, const NV: usize, const PS: usize>(xp: &[f32], d: &Plan, f: &[f32]) -> Option<Vec<f32>> {
    const { assert!(MR <= SLACK_PIXELS) };
    let total = d.n * d.oh * d.ow * d.o;
    let mut out = super::uninit_buf::<f32>("conv2d", total).ok()?;
    let optr = SendPtr(super::spare(&mut out).as_mut_ptr() as *mut f32);
    let _flush = super::denormal::flush_guard();
    // padded-grid pixels of one image that hold all its outputs
    let span = (d.oh - 1) * d.wp + d.ow;
    let tiles = span.div_ceil(MR);
    // enough tasks to balance the threads, cut within images when few
    let groups = (4 * workers::threads()).div_ceil(d.n).clamp(1, tiles);
    let per = tiles.div_ceil(groups);
    let groups = tiles.div_ceil(per);
    let nr = 16 * NV;
    workers::parallel_for(d.n * groups, |t| {
        let (img, grp) = (t / groups, t % groups);
        for tile in grp * per..((grp + 1) * per).min(tiles) {
            let q0 = tile * MR;
            // output row of each tile pixel, or null on padding columns
            let dst: [*mut f32; MR] = lockstep::from_fn(|i| {
                let (r, col) = ((q0 + i) / d.wp, (q0 + i) % d.wp);
                if r < d.oh && col < d.ow {
                    optr.get().wrapping_add(((img * d.oh + r) * d.ow + col) * d.o)
                } else {
                    std::ptr::null_mut()
                }
            });
            let a = xp[(img * d.hp * d.wp + q0) * d.cs..].as_ptr();
            for jb in (0..d.o).step_by(nr) {
                // SAFETY: the tile reads pixels q0..q0+MR of image `img` at
                // every tap: inside the padded buffer and its slack (span +
                // taps stay within hp*wp, plus MR <= SLACK_PIXELS). The
                // filter has taps*c rows of o; `dst` rows are this tile's
                // own outputs, columns jb.. (masked to o).
                unsafe {
                    conv_tile::<MR, NV, PS>(
                        a,
                        d.cs,
                        d.c,
                        &d.taps,
                        f.as_ptr().add(jb),
                        d.o,
                        nr.min(d.o - jb),
                        &dst,
                        jb,
                    )
                }
            }
        }
    });
    // SAFETY: every output pixel lies in some tile of its image, and every
    // channel block was stored.
    unsafe { out.set_len(total) };
    Some(out.into_vec())
}

/// One forward tile: for pixels `i < MR` (at `a + i * cs`, where `cs` is
/// `PS` when that is not 0) and channels `jb..jb + nr`, sums `a[i * cs +
/// tap + ci] * b[(t * c + ci) * ldb + j]` over taps `t` and channels `ci`;
/// stores pixel `i` at `dst[i] + jb` unless null.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn conv_tile<const MR: usize, const NV: usize, const PS: usize>(
    a: *const f32,
    cs: usize,
    c: usize,
    taps: &[usize],
    b: *const f32,
    ldb: usize,
    nr: usize,
    dst: &[*mut f32; MR],
    jb: usize,
) {
    unsafe {
        let cs = if PS == 0 { cs } else { PS };
        let masks: [__mmask16; NV] = lockstep::from_fn(|v| mask(nr, v));
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        let mut bt = b;
        for &t in taps {
            let at = a.add(t);
            for ci in 0..c {
                let mut bv = [_mm512_setzero_ps(); NV];
                for (v, x) in zip(0.., &mut bv[..]) {
                    *x = _mm512_maskz_loadu_ps(masks[v], bt.add(16 * v));
                }
                for (i, row) in zip(0.., &mut acc[..]) {
                    let av = _mm512_set1_ps(*at.add(i * cs + ci));
                    for v in 0..NV {
                        row[v] = _mm512_fmadd_ps(av, bv[v], row[v]);
                    }
                }
                bt = bt.add(ldb);
            }
        }
        for (row, &p) in zip(&acc[..], dst) {
            if !p.is_null() {
                for v in 0..NV {
                    _mm512_mask_storeu_ps(p.add(jb + 16 * v), masks[v], row[v]);
                }
            }
        }
    }
}

/// The filter gradient on padded `xp`: `[taps * c, o]`, summed over
/// pixels; `None` when a buffer cannot be allocated.
fn filter_grad<const MR: usize, const NV: usize>(xp: &[f32], d: &Plan, dy: &[f32]) -> Option<Vec<f32>> {
    let (c, o) = (d.c, d.o);
    let kd = d.taps.len() * c;
    let nr = 16 * NV;
    // each filter row's offset from its pixel in the padded input
    // (inline up to a 3x3 window over 16 channels: the `cnn_step` bench)
    let offs: smallvec::SmallVec<[usize; 144]> = d.taps.iter().flat_map(|&t| (0..c).map(move |ci| t + ci)).collect();
    let offs: &[usize] = &offs; // (a slice: `SmallVec`'s indexing is not inlined)
    let (row_tiles, col_tiles) = (kd.div_ceil(MR), o.div_ceil(nr));
    let tiles = row_tiles * col_tiles;
    // too few tiles for the threads: split the batch too, and add up
    let parts = (4 * workers::threads()).div_ceil(tiles).clamp(1, d.n);
    let per = d.n.div_ceil(parts);
    let parts = d.n.div_ceil(per);
    let mut partial = super::uninit_buf::<f32>("conv2d_backprop_filter", parts * kd * o).ok()?;
    partial.resize(parts * kd * o, 0.0);
    let pp = SendPtr(partial.as_mut_ptr());
    let _flush = super::denormal::flush_guard();
    workers::parallel_for(parts * tiles, |t| {
        let (part, tile) = (t / tiles, t % tiles);
        let (r0, jb) = ((tile / col_tiles) * MR, (tile % col_tiles) * nr);
        let off: [usize; MR] = lockstep::from_fn(|i| offs[(r0 + i).min(kd - 1)]);
        let imgs = part * per..((part + 1) * per).min(d.n);
        // SAFETY: pixels of images `imgs` at each row's offset lie inside
        // `xp` (their taps stay within the padded image), `dy` rows are
        // [n*oh*ow, o], and this task alone writes rows r0.. (at most
        // kd) and columns jb..jb+nr of its part's partial sum.
        unsafe {
            filter_tile::<MR, NV>(
                xp.as_ptr(),
                dy.as_ptr().add(jb),
                d,
                imgs,
                &off,
                nr.min(o - jb),
                pp.get().add(part * kd * o + r0 * o + jb),
                MR.min(kd - r0),
            )
        }
    });
    let (first, rest) = partial.split_at_mut(kd * o);
    for p in rest.chunks_exact(kd * o) {
        for (a, b) in zip(&mut first[..], p) {
            *a += b;
        }
    }
    if parts == 1 {
        return Some(partial.into_vec());
    }
    // the sum in a buffer of its own size (which the next step's is then),
    // the partial sums back to the scratch buffers
    let mut df = super::uninit_buf::<f32>("conv2d_backprop_filter", kd * o).ok()?;
    df.extend_from_slice(&partial[..kd * o]);
    super::recycle_buf(partial);
    Some(df.into_vec())
}

/// One filter-gradient tile: rows `i < rows` (input element at offset
/// `off[i]` from each pixel) by columns `..nr` of `dy`, summed over every
/// output pixel of images `imgs`, written to `dst` (row stride `o`).
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn filter_tile<const MR: usize, const NV: usize>(
    xp: *const f32,
    dy: *const f32,
    d: &Plan,
    imgs: std::ops::Range<usize>,
    off: &[usize; MR],
    nr: usize,
    dst: *mut f32,
    rows: usize,
) {
    unsafe {
        let masks: [__mmask16; NV] = lockstep::from_fn(|v| mask(nr, v));
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        // the tile's sum so far, in `dst`, takes the registers' sum of each
        // block of `BLOCK` pixels: one running sum over all the pixels of
        // a large batch lost f32 digits that the im2col product, which
        // adds slices of its shared dimension, keeps
        let first = std::cell::Cell::new(true);
        let flush = |acc: &mut [[__m512; NV]; MR]| {
            for (i, row) in acc.iter_mut().enumerate() {
                if i < rows {
                    for v in 0..NV {
                        let p = dst.add(i * d.o + 16 * v);
                        let x = match first.get() {
                            true => row[v],
                            false => _mm512_add_ps(row[v], _mm512_maskz_loadu_ps(masks[v], p)),
                        };
                        _mm512_mask_storeu_ps(p, masks[v], x);
                    }
                }
                *row = [_mm512_setzero_ps(); NV];
            }
            first.set(false);
        };
        let mut pending = 0;
        for n in imgs {
            for r in 0..d.oh {
                let mut a = xp.add((n * d.hp + r) * d.wp * d.cs);
                let mut b = dy.add((n * d.oh + r) * d.ow * d.o);
                for _ in 0..d.ow {
                    let mut bv = [_mm512_setzero_ps(); NV];
                    for (v, x) in zip(0.., &mut bv[..]) {
                        *x = _mm512_maskz_loadu_ps(masks[v], b.add(16 * v));
                    }
                    for (row, &k) in zip(&mut acc[..], off) {
                        let av = _mm512_set1_ps(*a.add(k));
                        for v in 0..NV {
                            row[v] = _mm512_fmadd_ps(av, bv[v], row[v]);
                        }
                    }
                    a = a.add(d.cs);
                    b = b.add(d.o);
                    pending += 1;
                    if pending == BLOCK {
                        flush(&mut acc);
                        pending = 0;
                    }
                }
            }
        }
        if pending > 0 || first.get() {
            flush(&mut acc);
        }
    }
}

/// Pixels a filter-gradient tile sums in its registers before it adds
/// them to its sum so far (the GEMM's slice of the shared dimension).
const BLOCK: usize = 256;
