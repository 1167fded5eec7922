//! Half-precision elementwise kernels through `f32`, one block at a time.
//!
//! TensorFlow's half kernels compute most functions in `f32` and round
//! each result once to the half type. Computed as three whole-tensor
//! passes (halves to a new `f32` tensor, the `f32` kernel into another,
//! rounded back into a third), an op over halves cost several times its
//! `f32` form. Here each block of [`BLOCK`] elements is converted into an
//! `f32` stack buffer (F16C instructions for `f16`, vectorised bit
//! arithmetic for `bf16`), the `f32` slice function runs over the block,
//! and its results are rounded straight into the output: one pass, no
//! temporary tensors, the same bits (the `f32` function of the `f32`
//! value, rounded once; a signalling NaN comes out quiet, as from any
//! `f32` arithmetic).

use half::slice::HalfFloatSliceExt;

use super::lockstep::{self, chunks, chunks_mut, zip3};
use super::math::with_simd;
use crate::tensor::{bf16, f16, Float};

/// The elements a block holds: the `f32` buffers of a binary block
/// (`3 * BLOCK` floats) stay well within the L1 cache.
pub(crate) const BLOCK: usize = 512;

/// A half-precision element type, with vectorised slice conversions to
/// and from `f32`.
pub(crate) trait Half: Float {
    /// `dst[i] = src[i]` as `f32` (exact).
    fn to_f32s(src: &[Self], dst: &mut [f32]);
    /// `dst[i] = src[i]` rounded to the half type (to nearest, ties to
    /// even), as `Self::from_f32` rounds.
    fn from_f32s(src: &[f32], dst: &mut [Self]);
}

impl Half for f16 {
    #[inline]
    fn to_f32s(src: &[f16], dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        let (src, dst) = if super::math::wide_vectors() {
            // SAFETY: the CPU has AVX-512 (F16C's conversions 16 wide).
            unsafe { avx512::f16_to_f32(src, dst) }
        } else {
            (src, dst)
        };
        src.convert_to_f32_slice(dst)
    }
    #[inline]
    fn from_f32s(src: &[f32], dst: &mut [f16]) {
        #[cfg(target_arch = "x86_64")]
        let (src, dst) = if super::math::wide_vectors() {
            // SAFETY: as above.
            unsafe { avx512::f32_to_f16(src, dst) }
        } else {
            (src, dst)
        };
        dst.convert_from_f32_slice(src)
    }
}

/// The `f16` conversions 16 at a time (the `half` crate's convert 8 at a
/// time, through a call per 8 elements): each returns the tails it left,
/// fewer than 16 elements, for the `half` crate's conversion.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use crate::tensor::f16;

    /// `dst[i] = src[i]` (exact) for the whole 16s of `src`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn f16_to_f32<'a, 'b>(src: &'a [f16], dst: &'b mut [f32]) -> (&'a [f16], &'b mut [f32]) {
        let n = src.len().min(dst.len()) / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: `i + 16 <= n`, within both slices; unaligned loads
            // and stores.
            unsafe {
                let h = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
            }
        }
        (&src[n..], &mut dst[n..])
    }

    /// `dst[i] = src[i]` rounded to nearest, ties to even (as
    /// `f16::from_f32`, the same instruction 8 wide) for the whole 16s.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn f32_to_f16<'a, 'b>(src: &'a [f32], dst: &'b mut [f16]) -> (&'a [f32], &'b mut [f16]) {
        let n = src.len().min(dst.len()) / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: as above.
            unsafe {
                let v = _mm512_loadu_ps(src.as_ptr().add(i));
                let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
                _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), h);
            }
        }
        (&src[n..], &mut dst[n..])
    }
}

impl Half for bf16 {
    #[inline]
    fn to_f32s(src: &[bf16], dst: &mut [f32]) {
        with_simd(
            #[inline(always)]
            || {
                for (d, s) in lockstep::zip(dst, src) {
                    *d = f32::from_bits((s.to_bits() as u32) << 16);
                }
            },
        )
    }
    #[inline]
    fn from_f32s(src: &[f32], dst: &mut [bf16]) {
        with_simd(
            #[inline(always)]
            || {
                for (d, &s) in lockstep::zip(dst, src) {
                    *d = bf16::from_bits(f32_to_bf16_bits(s));
                }
            },
        )
    }
}

/// `bf16::from_f32(v).to_bits()` without branches (so that a loop of it
/// vectorises): a NaN keeps its top bits with the quiet bit set, anything
/// else rounds to nearest, ties to even.
#[inline(always)]
pub(crate) fn f32_to_bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let nan = x & 0x7FFF_FFFF > 0x7F80_0000;
    // (round half to even: add 0x7FFF plus the kept part's lowest bit)
    let rounded = (x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16) as u16;
    if nan {
        ((x >> 16) | 0x0040) as u16
    } else {
        rounded
    }
}

/// `out = f(x)` computed in `f32`: each block of `x` converted, `f` run
/// over it, its results rounded into `out` (as long as `x`).
#[inline]
pub(crate) fn unary<H: Half>(x: &[H], out: &mut [H], f: impl Fn(&[f32], &mut [f32])) {
    let (mut a, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
    for (x, out) in lockstep::zip(chunks(x, BLOCK), chunks_mut(out, BLOCK)) {
        let n = x.len();
        H::to_f32s(x, &mut a[..n]);
        f(&a[..n], &mut y[..n]);
        H::from_f32s(&y[..n], out);
    }
}

/// `out = f(x, y)` computed in `f32`, block by block as [`unary`] (`x`,
/// `y` and `out` of one length).
#[inline]
pub(crate) fn binary<H: Half>(x: &[H], y: &[H], out: &mut [H], f: impl Fn(&[f32], &[f32], &mut [f32])) {
    let (mut a, mut b, mut z) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
    for (x, y, out) in zip3(chunks(x, BLOCK), chunks(y, BLOCK), chunks_mut(out, BLOCK)) {
        let n = x.len();
        H::to_f32s(x, &mut a[..n]);
        H::to_f32s(y, &mut b[..n]);
        f(&a[..n], &b[..n], &mut z[..n]);
        H::from_f32s(&z[..n], out);
    }
}
