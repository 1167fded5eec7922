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
//! Both pieces are computed and one is selected, with plain multiplies
//! and adds (never contracted into fused multiply-adds by the compiler),
//! so the bits are the same in every context (eager, fused, folded). The
//! slice kernels check each block of 16 arguments first: where all are
//! below 1 in magnitude they compute the small piece alone (the same bits,
//! a quarter of the work); the GELU's, where all are below 5.5, its form
//! without the far tail's series and divisions (the same bits again: the
//! tail is selected only above). A normalised activation's blocks are
//! mostly of the second kind (a block of 16 normal values all below √2
//! is rare). `tests/ops/f32_accuracy.rs` checks that an element's bits
//! do not depend on its block.
//! Within 2 ulp of the exact value everywhere (the test below sweeps a
//! dense sample of all `f32`s).

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
    let p = (s[0] + s[1] * x2) + x4 * ((s[2] + s[3] * x2) + x4 * ((s[4] + s[5] * x2) + x4 * s[6]));
    a + a * p
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
/// first element, `$xb` its elements, `$erf` the function that gives the
/// block's `erf` values (or `1 + erf`) and `$exp` its `e^(-x²/2)`:
/// `$small` ([`erf_small`]) and [`exp_normal`] where every `|x|` of the
/// block is below `$limit` (a magnitude whose arguments `x·s` are below
/// 1, `s` the scale the body applies, and below √2, where `-x²/2` is in
/// `exp_normal`'s range); `$mid` and [`exp_normal`] where every `|x|` is
/// below `$mid_limit` (the GELU's: no far tail, see [`GELU_MID`]; give
/// `$limit` again for none); `$full` ([`erf_f32`]) and [`exp_f32`]
/// elsewhere and on the elements past the last whole block (the same bits
/// every way). Whole blocks are arrays: over slices of a length the
/// compiler does not know, loops mask each step. A macro, not a function
/// taking a closure: a closure was compiled out of line, and its
/// multiply-adds became library calls.
macro_rules! erf_blocks {
    ($x:expr, ($limit:expr, $small:expr), ($mid_limit:expr, $mid:expr), $full:expr, |$k:ident, $xb:ident, $erf:ident, $exp:pat_param| $body:block) => {{
        let x: &[f32] = $x;
        let (limit, mid_limit) = (f32::to_bits($limit), f32::to_bits($mid_limit));
        let mut xs = x.chunks_exact(BLOCK);
        let mut $k = 0;
        for xb in &mut xs {
            let xb: &[f32; BLOCK] = xb.try_into().expect("chunks of BLOCK");
            // (NaN compares above every limit: the full form)
            let $xb = xb;
            let top = super::math::max_abs_bits($xb);
            if top < limit {
                let ($erf, $exp) = ($small, exp_normal);
                $body
            } else if top < mid_limit {
                let ($erf, $exp) = ($mid, exp_normal);
                $body
            } else {
                let ($erf, $exp) = ($full, exp_f32);
                $body
            }
            $k += BLOCK;
        }
        let $xb = xs.remainder();
        let ($erf, $exp) = ($full, exp_f32);
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
    let x2 = a * a;
    // both polynomials in Estrin's scheme (pairs of terms, then pairs of
    // pairs): short dependency chains, where Horner's rule made one chain
    // of 20 operations per element that the loop waited on
    let small = small_piece(a, x2);
    let q = large_q(a);
    // (e^(-x²) is a normal number wherever it is used, |x| < 3.92: the
    // short form of exp, with the argument kept in its range elsewhere)
    let e = exp_normal((-x2).max(EXP_NORMAL.0));
    let erf = if a < 1.0 {
        small
    } else if a < 3.92 {
        1.0 - e * q
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
    let lo = (l[0] + l[1] * u) + u2 * (l[2] + l[3] * u);
    let mid = (l[4] + l[5] * u) + u2 * (l[6] + l[7] * u);
    let hi = (l[8] + l[9] * u) + u2 * l[10];
    lo + u4 * (mid + u4 * hi)
}

/// `S(z)`'s coefficients, from `z⁰` up: `erfc(a)·e^(a²)·a·√π` as a
/// polynomial in `z = 1/(2a²)`, for `a >= 3.92` (`z <= 0.0326`), where
/// its asymptotic series is `1 − z + 3z² − 15z³ + ...`. A least-squares
/// fit made for this crate with numpy against mpmath's `erfc`, within an
/// ulp of `f32`.
const TAIL_S: [f32; 6] = [1.0, -0.999_994_04, 2.998_092_7, -14.749_31, 88.802_284, -393.122_65];

/// `x² = hi + lo` exactly (`hi` the rounded square), by splitting `x`
/// into its top 12 bits and the rest: each product of the halves is exact.
#[inline(always)]
fn square_parts(x: f32) -> (f32, f32) {
    let hi = x * x;
    let xh = f32::from_bits(x.to_bits() & 0xffff_f000);
    let xl = x - xh;
    (hi, ((xh * xh - hi) + 2.0 * xh * xl) + xl * xl)
}

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
    gelu_cdf_in::<true>(v)
}

/// [`gelu_cdf`] for `|v| <` [`GELU_MID`]: its bits there, without the far
/// tail's series.
#[inline(always)]
fn gelu_cdf_mid(v: f32) -> f32 {
    gelu_cdf_in::<false>(v)
}

/// [`gelu_cdf`], with its far tail (`|v/√2| >= 3.92`) when `TAIL`.
#[inline(always)]
fn gelu_cdf_in<const TAIL: bool>(v: f32) -> f32 {
    let x = v * std::f32::consts::FRAC_1_SQRT_2;
    let a = x.abs();
    let ErfParts { x2, q, e, erf: erf_a } = erf_parts(a);
    // e^(−v²/2) = e^(−x2)·e^(x2 − v²/2), the second factor to first order
    // (x2 is within 1e-6 relative of v²/2; their difference is exact)
    let (h, l) = square_parts(v);
    let (h, l) = (0.5 * h, 0.5 * l);
    let ec = e * (1.0 + ((x2 - h) - l));
    let tail = if TAIL {
        let z = 0.5 / x2;
        let t = &TAIL_S;
        let s = (t[0] + t[1] * z) + (z * z) * ((t[2] + t[3] * z) + (z * z) * (t[4] + t[5] * z));
        let sqrt_pi = (std::f64::consts::PI.sqrt()) as f32;
        if a < 3.92 {
            ec * q
        } else {
            ec * s / (a * sqrt_pi)
        }
    } else {
        ec * q
    };
    let tail = if -h < EXP_NORMAL.0 { 0.0 } else { tail };
    let r = if x >= 0.0 {
        1.0 + erf_a
    } else if a < 1.0 {
        1.0 - erf_a
    } else {
        tail
    };
    if v.is_nan() {
        v
    } else {
        r
    }
}

/// [`gelu_cdf`] for `|v/√2| < 1`: `1 + erf_small(v/√2)`, its bits there.
#[inline(always)]
fn gelu_cdf_small(v: f32) -> f32 {
    1.0 + erf_small(v * std::f32::consts::FRAC_1_SQRT_2)
}

/// `out[i] = erf_f32(x[i])`, inlined into the caller's loop (a call per
/// element, through a function pointer or an un-inlined closure, kept it
/// from vectorising and turned the fused multiply-adds of `exp` into
/// library calls).
#[inline(always)]
pub(crate) fn erf_slice(x: &[f32], out: &mut [f32]) {
    erf_blocks!(x, (1.0, erf_small), (1.0, erf_f32), erf_f32, |k, x, erf, _| {
        for (o, &v) in zip(&mut out[k..k + x.len()][..], x) {
            *o = erf(v);
        }
    });
}

/// The exact GELU `x/2 · (1 + erf(x/√2))` from `c = 1 + erf(x/√2)`.
#[inline(always)]
fn gelu_from(v: f32, c: f32) -> f32 {
    0.5 * v * c
}

/// The exact GELU's derivative `(1 + erf(x/√2))/2 + x · e^(-x²/2) / √(2π)`
/// from `c = 1 + erf(x/√2)`, with `exp` the exponential (one of the same
/// bits as [`exp_f32`] for the argument).
#[inline(always)]
fn gelu_grad_from(v: f32, c: f32, exp: impl Fn(f32) -> f32) -> f32 {
    let k = (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;
    // e^(−v²/2) with the rounding of v² taken back (to first order), for
    // the tail v ≪ 0, where this term is the derivative
    let (h, l) = square_parts(v);
    let l = if h.is_finite() { l } else { 0.0 };
    0.5 * c + v * k * (exp(-(0.5 * h)) * (1.0 - 0.5 * l))
}

/// The exact GELU of one element, `v/2 · gelu_cdf(v)`: the bits of the
/// slice kernels below.
pub fn gelu_f32(v: f32) -> f32 {
    gelu_from(v, gelu_cdf(v))
}

/// The exact GELU's derivative at one element: the bits of the slice
/// kernels below.
pub fn gelu_grad_f32(v: f32) -> f32 {
    gelu_grad_from(v, gelu_cdf(v), exp_f32)
}

/// `out[i] = gelu(x[i])`, the exact GELU, inlined into the caller's loop as
/// [`erf_slice`].
#[inline(always)]
pub(crate) fn gelu_slice(x: &[f32], out: &mut [f32]) {
    erf_blocks!(
        x,
        (GELU_SMALL, gelu_cdf_small),
        (GELU_MID, gelu_cdf_mid),
        gelu_cdf,
        |k, x, erf, _| {
            for (o, &v) in zip(&mut out[k..k + x.len()][..], x) {
                *o = gelu_from(v, erf(v));
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
        gelu_cdf,
        |k, x, erf, exp| {
            for (o, &v) in zip(&mut out[k..k + x.len()][..], x) {
                *o = gelu_grad_from(v, erf(v), exp);
            }
        }
    );
}

/// Both of the above with one `erf` per element (a traced GELU's forward
/// keeps its derivative for the backward pass): the same bits as each.
#[inline(always)]
pub(crate) fn gelu_and_grad_slice(x: &[f32], g: &mut [f32], d: &mut [f32]) {
    erf_blocks!(
        x,
        (GELU_SMALL, gelu_cdf_small),
        (GELU_MID, gelu_cdf_mid),
        gelu_cdf,
        |k, x, erf, exp| {
            let (g, d) = (&mut g[k..k + x.len()], &mut d[k..k + x.len()]);
            for (g, d, &v) in zip3(&mut g[..], &mut d[..], x) {
                let e = erf(v);
                (*g, *d) = (gelu_from(v, e), gelu_grad_from(v, e, exp));
            }
        }
    );
}
