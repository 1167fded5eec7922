//! `erf` in `f32`, branch-free so that a loop over a slice vectorises
//! (the exact GELU of a transformer's MLP calls it on every activation, and
//! its gradient again; libm's scalar `erff` was a seventh of a traced GPT
//! step).
//!
//! Two pieces, both least-squares fits (weighted to relative error) made
//! for this crate with numpy against `scipy.special.erf`, coefficients
//! rounded to `f32`:
//!
//! - `|x| < 1`: `x + x·P(x²)`, `P` of degree 6 (`P(0) = 2/√π − 1`: the
//!   leading `x` is exact, so small `x` keep full relative accuracy);
//! - `1 ≤ |x| < 3.92`: `1 − e^(−x²)·Q(u)`, `u = (|x| − 2.5)·2/3` in
//!   `[−1, 1]`, `Q` of degree 10 fitting `erfc(x)·e^(x²)`. The result is
//!   above 0.84 here, so the relative errors of `e^(−x²)` (the rounding of
//!   `x²` included) and of `Q` shrink by `erfc(x)` (below 0.16) into the
//!   result;
//! - above: `±1` (`erfc(3.92) < 2^-25`, half an ulp of 1).
//!
//! The exact GELU needs `1 + erf(x)`, which cancels for `x <= −1` (and is
//! 0 below −3.92): [`gelu_cdf`] gives it there as `erfc(|x|)` itself,
//! `e^(−x²)·Q` and, above 3.92, `e^(−x²)·S(z)/(|x|·√π)` with a third fit
//! `S` in `z = 1/(2x²)`, so the GELU and its slope keep their relative
//! accuracy down to where `e^(−x²)` leaves the normal numbers.
//!
//! Both pieces are computed and one is selected. The polynomials (and the
//! exact low part of a square) use fused multiply-adds (`mul_add`), which
//! round once by definition, so the bits are the same in every context
//! (eager, fused, folded) and on every instruction set: where the code is
//! not compiled for FMA, `mul_add` is a libm call, right but slower, as
//! in [`exp_f32`](super::math::exp_f32). (Separate multiplies and adds
//! had made the polynomials half again as long.) The GELU's derivative
//! takes `e^(−x²/2)` from its CDF's own exponential, one per element for
//! both (the second exponential was a third of the derivative's time). The
//! slice kernels check each block of 16 arguments first: where all are
//! below 1 in magnitude they compute the small piece alone (the same bits,
//! a quarter of the work); the GELU's, where all are below 5.5, its form
//! without the far tail's series and divisions (the same bits again: the
//! tail is selected only above), and where all are below 13, its form
//! without the far exponential and the special cases (the full form's
//! other half: `e^(−x²)` is a normal number there, see [`GELU_WIDE`]).
//! A normalised activation's blocks are mostly of the second kind (a
//! block of 16 normal values all below √2 is rare); a trained network's
//! can be mostly of the third (the traced transformer_step's were, after
//! its first steps: its GELU group took half again as long as on normal
//! values). `tests/ops/f32_accuracy.rs` checks that an element's bits
//! do not depend on its block.
//! Within 2 ulp of the exact value everywhere (1.34 the most seen;
//! `tests/sweeps/kernels_cpu_erf.rs` sweeps a dense sample of all
//! `f32`s, and the GELU and its slope on [−13, 13]).

use super::lockstep::{zip, zip3};
use super::math::{exp_f32, exp_normal, EXP_NORMAL};

/// `P`'s coefficients, from `(x²)⁰` up.
const SMALL: [f32; 7] = [
    0.128_379_17,
    -0.376_126_3,
    0.112_836_12,
    -0.026_854_793,
    0.005_190_028_3,
    -0.000_802_415_2,
    7.897_587e-5,
];

/// `Q`'s coefficients, from `u⁰` up.
const LARGE: [f32; 11] = [
    0.210_806_37,
    -0.111_521_33,
    0.056_110_06,
    -0.026_998_682,
    0.012_491_442,
    -0.005_608_488_3,
    0.002_404_656_3,
    -0.000_919_999_55,
    0.000_392_562_1,
    -0.000_243_507_28,
    8.638_995e-5,
];

/// `erf(a)` for `0 <= a < 1` (`x2 = a²`): `a + a·P(a²)`.
#[inline(always)]
fn small_piece(a: f32, x2: f32) -> f32 {
    let (s, x4) = (&SMALL, x2 * x2);
    let (p01, p23, p45) = (s[1].mul_add(x2, s[0]), s[3].mul_add(x2, s[2]), s[5].mul_add(x2, s[4]));
    let p = x4.mul_add(x4.mul_add(x4.mul_add(s[6], p45), p23), p01);
    a.mul_add(p, a)
}

/// Elements whose magnitudes a slice function checks together: where all
/// of a block's arguments are below 1, [`erf_small`] gives them (the bits
/// of [`erf_f32`] without its large piece and its exponential, which are
/// most of its work). Normalised activations (a GELU's inputs) mostly are.
const BLOCK: usize = 16;

/// `erf(x)` for `|x| < 1`: [`erf_f32`]'s small piece alone.
#[inline(always)]
fn erf_small(x: f32) -> f32 {
    let a = x.abs();
    small_piece(a, a * a).copysign(x)
}

/// Runs `$body` on the blocks of `$x`, with `$k` the index of the block's
/// first element, `$xb` its elements and `$erf` the function that gives
/// the block's `erf` values (or the GELU's `(1 + erf, e^(−x²/2))`):
/// `$small` ([`erf_small`]) where every `|x|` of the block is below
/// `$limit` (a magnitude whose arguments `x·s` are below 1, `s` the
/// scale the body applies); `$mid` where every `|x|` is below
/// `$mid_limit` (the GELU's: no far tail, see [`GELU_MID`]; give `$limit`
/// again for none); `$wide` where every `|x|` is below `$wide_limit`
/// (the GELU's: no far exponential, see [`GELU_WIDE`]; again `$limit`
/// for none); `$full` ([`erf_f32`]) elsewhere and on the elements
/// past the last whole block (the same bits every way). Whole blocks are
/// arrays: over slices of a length the compiler does not know, loops mask
/// each step. A macro, not a function taking a closure: a closure was
/// compiled out of line, and its multiply-adds became library calls.
macro_rules! erf_blocks {
    (
        $x:expr,
        ($limit:expr, $small:expr),
        ($mid_limit:expr, $mid:expr),
        ($wide_limit:expr, $wide:expr),
        $full:expr,
        |$k:ident, $xb:ident, $erf:ident| $body:block
    ) => {{
        let x: &[f32] = $x;
        let (limit, mid_limit) = (f32::to_bits($limit), f32::to_bits($mid_limit));
        let wide_limit = f32::to_bits($wide_limit);
        let mut xs = x.chunks_exact(BLOCK);
        let mut $k = 0;
        for xb in &mut xs {
            let xb: &[f32; BLOCK] = xb.try_into().expect("chunks of BLOCK");
            // (NaN compares above every limit: the full form)
            let $xb = xb;
            let top = super::math::max_abs_bits($xb);
            if top < limit {
                let $erf = $small;
                $body
            } else if top < mid_limit {
                let $erf = $mid;
                $body
            } else if top < wide_limit {
                let $erf = $wide;
                $body
            } else {
                let $erf = $full;
                $body
            }
            $k += BLOCK;
        }
        let $xb = xs.remainder();
        let $erf = $full;
        $body
    }};
}

/// Below this magnitude `x/√2` rounds below 1 (a little under √2).
const GELU_SMALL: f32 = 1.414;

/// Below this magnitude `|x/√2|` rounds below 3.92 (5.5/√2 = 3.889), where
/// [`gelu_cdf`]'s far-tail series is never selected: [`gelu_cdf_mid`]
/// skips it and its two divisions (which the GELU of a normalised
/// activation's block spent most of its time waiting on, perf).
const GELU_MID: f32 = 5.5;

/// Below this magnitude [`gelu_cdf`] needs neither its far exponential
/// nor its special cases: `v²/2` and its rounded `x2` stay below 86
/// (13.115 would do), where `e^(−x2)` is a normal number and gives
/// `e^(−v²/2)` ([`half_square_exp`]) and the tail is never flushed to 0;
/// and no NaN or infinity compares below it. [`gelu_cdf_wide`] is the
/// full form without them (the exponential was a quarter of its work).
const GELU_WIDE: f32 = 13.0;

/// `erf(x)` in `f32`, within 2 ulp; `erf(±0) = ±0`, `erf(±inf) = ±1`,
/// NaN stays NaN.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let r = erf_parts(x.abs()).erf;
    if x.is_nan() {
        x
    } else {
        r.copysign(x)
    }
}

/// What [`erf_f32`] computes of `a = |x|`, kept for [`gelu_cdf`]'s tail.
struct ErfParts {
    /// `a²`, rounded
    x2: f32,
    /// `Q` at `a` (meaningful for `1 <= a < 3.92`)
    q: f32,
    /// `e^(−x2)` (a normal number: the argument is kept in range)
    e: f32,
    /// `erf(a)`
    erf: f32,
}

#[inline(always)]
fn erf_parts(a: f32) -> ErfParts {
    erf_parts_in::<true>(a)
}

/// [`erf_parts`], for any `a` when `ALL`, else for `a <` 3.92 alone (the
/// same bits there, without the clamp of the exponential's argument and
/// the selection of 1 above).
#[inline(always)]
fn erf_parts_in<const ALL: bool>(a: f32) -> ErfParts {
    let x2 = a * a;
    // both polynomials in Estrin's scheme (pairs of terms, then pairs of
    // pairs): short dependency chains, where Horner's rule made one chain
    // of 20 operations per element that the loop waited on
    let small = small_piece(a, x2);
    let q = large_q(a);
    // (e^(-x²) is a normal number wherever it is used, |x| < 3.92: the
    // short form of exp, with the argument kept in its range elsewhere)
    let e = exp_normal(if ALL { (-x2).max(EXP_NORMAL.0) } else { -x2 });
    let large = (-e).mul_add(q, 1.0);
    let erf = if a < 1.0 {
        small
    } else if !ALL || a < 3.92 {
        large
    } else {
        1.0
    };
    ErfParts { x2, q, e, erf }
}

/// `Q(u)` at `u = (a − 2.5)·2/3`: `erfc(a)·e^(a²)` for `1 <= a < 3.92`.
#[inline(always)]
fn large_q(a: f32) -> f32 {
    let u = (a - 2.5) * (2.0f32 / 3.0);
    let (l, u2) = (&LARGE, u * u);
    let u4 = u2 * u2;
    let pair = |i: usize| l[i + 1].mul_add(u, l[i]);
    let lo = u2.mul_add(pair(2), pair(0));
    let mid = u2.mul_add(pair(6), pair(4));
    let hi = u2.mul_add(l[10], pair(8));
    u4.mul_add(u4.mul_add(hi, mid), lo)
}

/// `S(z)`'s coefficients, from `z⁰` up: `erfc(a)·e^(a²)·a·√π` as a
/// polynomial in `z = 1/(2a²)`, for `a >= 3.92` (`z <= 0.0326`), where
/// its asymptotic series is `1 − z + 3z² − 15z³ + ...`. A least-squares
/// fit made for this crate with numpy against mpmath's `erfc`, within an
/// ulp of `f32`.
const TAIL_S: [f32; 6] = [1.0, -0.999_994_04, 2.998_092_7, -14.749_31, 88.802_284, -393.122_65];

/// `1 + erf(v/√2)` (twice the standard normal CDF at `v`) in `f32`,
/// accurate relative to the result also where it is small: for
/// `v/√2 <= −1`, where `1 + erf_f32(v/√2)` cancels (to 0 below −3.92),
/// it is `erfc(a)`, `a = |v|/√2`, itself: `e^(−a²)` times `Q(a)` (below
/// 3.92) or `S(z)/(a·√π)` (above), with the exponent `v²/2` taken
/// exactly from `v` (the rounding of `v/√2` and of its square made the
/// far tail 170 ulps off); 0 where `e^(−v²/2)` is below the normal
/// numbers. Elsewhere the bits of `1 + erf_f32(v/√2)`. The exact GELU
/// and its derivative are made from it, so that their tails for `v ≪ 0`
/// are accurate, as TensorFlow's `erfc` form is.
#[inline(always)]
pub fn gelu_cdf(v: f32) -> f32 {
    gelu_cdf_in::<true, true>(v).0
}

/// `e^(−v²/2)` from `e = e^(−x2)`, `x2` the rounded square of `v/√2`
/// (with `x2 <= 86`, where `e` is a normal number), and `v² = 2(h + l)`
/// exactly: `e·e^(x2 − v²/2)`, the second factor to first order (`x2` is
/// within 1e-6 relative of `v²/2`, and `(x2 − h) − l` is their difference
/// to a rounding of its own). Within an ulp or so of the exponential's
/// own error; the GELU's tail and its derivative both take it.
#[inline(always)]
fn half_square_exp(e: f32, x2: f32, h: f32, l: f32) -> f32 {
    e * (1.0 + ((x2 - h) - l))
}

/// `v²/2 = h + l` exactly (`h` its rounding, `l` its rounding error: a
/// fused multiply-add's `(v/2)·v − h`), from `v/2`, which the GELU
/// multiplies by its CDF too (one multiply for both, where halving the
/// square and its error took two). The results have the bits of halving
/// `v·v` and its error (every `f32`'s GELU and slope were compared when
/// this was changed): the two differ only where `v²/2` leaves the normal
/// numbers
/// (`|v|` below `2^-62`, where `1 + ((x2 − h) − l)` is 1 either way, or
/// above `1.8e19`, where the tail is flushed to 0 and `e^(−h)` is 0).
#[inline(always)]
fn half_square(v: f32) -> (f32, f32) {
    let half = 0.5 * v;
    let h = half * v;
    (h, half.mul_add(v, -h))
}

/// `e^(−v²/2)` where [`half_square_exp`] does not apply (`x2 > 86`, NaN,
/// infinities): `e^(−h)·(1 − l)` with the full exponential, down to the
/// subnormal numbers (0 at ±inf).
#[inline(always)]
fn half_square_exp_far(h: f32, l: f32) -> f32 {
    let l = if h.is_finite() { l } else { 0.0 };
    exp_f32(-h) * (1.0 - l)
}

/// `(gelu_cdf(v), e^(−v²/2))` without the far tail's series (for
/// `|v| <` [`GELU_MID`]): their bits there.
#[inline(always)]
fn gelu_cdf_mid(v: f32) -> (f32, f32) {
    gelu_cdf_in::<false, false>(v)
}

/// `(gelu_cdf(v), e^(−v²/2))` with the far tail's series but without
/// the far exponential and the special cases (for `|v| <`
/// [`GELU_WIDE`]): their bits there.
#[inline(always)]
fn gelu_cdf_wide(v: f32) -> (f32, f32) {
    gelu_cdf_in::<true, false>(v)
}

/// `(gelu_cdf(v), e^(−v²/2))` for any `v`.
#[inline(always)]
fn gelu_cdf_full(v: f32) -> (f32, f32) {
    gelu_cdf_in::<true, true>(v)
}

/// `(gelu_cdf(v), e^(−v²/2))`, the CDF with its far tail
/// (`|v/√2| >= 3.92`) when `TAIL`; the exponential from the CDF's own
/// `e^(−x2)` wherever that is a normal number ([`half_square_exp`]),
/// and, when `FAR`, the full exponential beyond, the tail flushed to 0
/// where `e^(−v²/2)` leaves the normal numbers, and NaN kept (without
/// `FAR`, for `|v| <` [`GELU_WIDE`] alone, where none of them applies).
#[inline(always)]
fn gelu_cdf_in<const TAIL: bool, const FAR: bool>(v: f32) -> (f32, f32) {
    let x = v * std::f32::consts::FRAC_1_SQRT_2;
    let a = x.abs();
    let ErfParts { x2, q, e, erf: erf_a } = erf_parts_in::<TAIL>(a);
    let (h, l) = half_square(v);
    let ec = half_square_exp(e, x2, h, l);
    let (tail, gauss) = if TAIL {
        let z = 0.5 / x2;
        let t = &TAIL_S;
        let z2 = z * z;
        let s = z2.mul_add(
            z2.mul_add(t[5].mul_add(z, t[4]), t[3].mul_add(z, t[2])),
            t[1].mul_add(z, t[0]),
        );
        let sqrt_pi = (std::f64::consts::PI.sqrt()) as f32;
        let tail = if a < 3.92 { ec * q } else { ec * s / (a * sqrt_pi) };
        let gauss = if !FAR || x2 <= -EXP_NORMAL.0 {
            ec
        } else {
            half_square_exp_far(h, l)
        };
        (tail, gauss)
    } else {
        (ec * q, ec)
    };
    // (below GELU_WIDE, never: e^(−v²/2) is above the normal numbers)
    let tail = if FAR && -h < EXP_NORMAL.0 { 0.0 } else { tail };
    let r = if x >= 0.0 {
        1.0 + erf_a
    } else if a < 1.0 {
        1.0 - erf_a
    } else {
        tail
    };
    // (a NaN sends its block to the full form)
    (if FAR && v.is_nan() { v } else { r }, gauss)
}

/// `(gelu_cdf(v), e^(−v²/2))` for `|v/√2| < 1`: `1 + erf_small(v/√2)`
/// and [`half_square_exp`], their bits there.
#[inline(always)]
fn gelu_cdf_small(v: f32) -> (f32, f32) {
    let x = v * std::f32::consts::FRAC_1_SQRT_2;
    let a = x.abs();
    let x2 = a * a;
    let c = 1.0 + small_piece(a, x2).copysign(x);
    let (h, l) = half_square(v);
    (c, half_square_exp(exp_normal(-x2), x2, h, l))
}

/// `out[i] = erf_f32(x[i])`, inlined into the caller's loop (a call per
/// element, through a function pointer or an un-inlined closure, kept it
/// from vectorising and turned the fused multiply-adds of `exp` into
/// library calls).
#[inline(always)]
pub(crate) fn erf_slice(x: &[f32], out: &mut [f32]) {
    erf_blocks!(
        x,
        (1.0, erf_small),
        (1.0, erf_f32),
        (1.0, erf_f32),
        erf_f32,
        |k, x, erf| {
            for (o, &v) in zip(&mut out[k..k + x.len()][..], x) {
                *o = erf(v);
            }
        }
    );
}

/// The exact GELU `x/2 · (1 + erf(x/√2))` from `c = 1 + erf(x/√2)`.
#[inline(always)]
fn gelu_from(v: f32, c: f32) -> f32 {
    0.5 * v * c
}

/// The exact GELU's derivative `(1 + erf(x/√2))/2 + x · e^(-x²/2) / √(2π)`
/// from `c = 1 + erf(x/√2)` and `g = e^(−x²/2)` (which the CDF's tail
/// computed: one exponential per element for both).
#[inline(always)]
fn gelu_grad_from(v: f32, c: f32, g: f32) -> f32 {
    let k = (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;
    (v * k).mul_add(g, 0.5 * c)
}

/// The exact GELU of one element, `v/2 · gelu_cdf(v)`: the bits of the
/// slice kernels below.
pub fn gelu_f32(v: f32) -> f32 {
    gelu_from(v, gelu_cdf(v))
}

/// The exact GELU's derivative at one element: the bits of the slice
/// kernels below.
pub fn gelu_grad_f32(v: f32) -> f32 {
    let (c, g) = gelu_cdf_full(v);
    gelu_grad_from(v, c, g)
}

/// `out[i] = gelu(x[i])`, the exact GELU, inlined into the caller's loop as
/// [`erf_slice`].
#[inline(always)]
pub(crate) fn gelu_slice(x: &[f32], out: &mut [f32]) {
    erf_blocks!(
        x,
        (GELU_SMALL, gelu_cdf_small),
        (GELU_MID, gelu_cdf_mid),
        (GELU_WIDE, gelu_cdf_wide),
        gelu_cdf_full,
        |k, x, erf| {
            for (o, &v) in zip(&mut out[k..k + x.len()][..], x) {
                *o = gelu_from(v, erf(v).0);
            }
        }
    );
}

/// `out[i]` = the exact GELU's derivative at `x[i]`, inlined as
/// [`erf_slice`].
#[inline(always)]
pub(crate) fn gelu_grad_slice(x: &[f32], out: &mut [f32]) {
    erf_blocks!(
        x,
        (GELU_SMALL, gelu_cdf_small),
        (GELU_MID, gelu_cdf_mid),
        (GELU_WIDE, gelu_cdf_wide),
        gelu_cdf_full,
        |k, x, erf| {
            for (o, &v) in zip(&mut out[k..k + x.len()][..], x) {
                let (c, g) = erf(v);
                *o = gelu_grad_from(v, c, g);
            }
        }
    );
}

/// Both of the above with one `erf` and one exponential per element (a
/// traced GELU's forward keeps its derivative for the backward pass): the
/// same bits as each.
#[inline(always)]
pub(crate) fn gelu_and_grad_slice(x: &[f32], g: &mut [f32], d: &mut [f32]) {
    erf_blocks!(
        x,
        (GELU_SMALL, gelu_cdf_small),
        (GELU_MID, gelu_cdf_mid),
        (GELU_WIDE, gelu_cdf_wide),
        gelu_cdf_full,
        |k, x, erf| {
            let (g, d) = (&mut g[k..k + x.len()], &mut d[k..k + x.len()]);
            for (g, d, &v) in zip3(&mut g[..], &mut d[..], x) {
                let (c, e) = erf(v);
                (*g, *d) = (gelu_from(v, c), gelu_grad_from(v, c, e));
            }
        }
    );
}
