//! Vectorisable `f32` exp, sin, cos, tanh and sigmoid, and the CPU feature
//! dispatch that lets the compiler use wide vectors in hot loops.
//!
//! The standard library's `f32::exp`/`sin`/`cos` call libm one element at a
//! time; these are branch-free polynomial versions (after Cephes: Cody-Waite
//! range reduction, minimax polynomials, exponent arithmetic on the bits)
//! that the compiler vectorises when they are inlined into a loop. Their
//! polynomials use fused multiply-adds (`mul_add`), which round once by
//! definition, so every build and every instruction set gives the same bits;
//! where the code is not compiled for FMA (a CPU without it, x86_64 before
//! 2013, or an eager tensor of fewer than 64 elements, whose loop skips
//! [`with_simd`]) `mul_add` is a libm call, right but slower. Accuracy, checked against `f64` references in the tests below
//! (errors against the exact value, so 0.5 ulp is correct rounding): at most
//! 1 ulp for `exp` over all finite inputs (subnormal results included; 0.99
//! ulp was the worst seen over every 97th `f32`), at most 0.8 ulp for
//! `sin`/`cos` on `|x| <= SIN_COS_MAX` (0.77 seen over every 61st `f32` of
//! the range, subnormals included, and next to every multiple of pi/2
//! there); beyond that callers fall back to libm (see [`SIN_COS_MAX`]).
//! The sine and cosine reduce their argument in `f32` alone: `x - q pi/2`
//! with pi/2 in three parts, the first product exact by construction and
//! the rounding errors of the second kept as a low part, so the remainder
//! is a pair of `f32`s good to about 48 bits (an earlier version reduced in
//! `f64`, half the vector width and twice the time); [`sin_cos_f32`] gives
//! both from one reduction. On slices ([`sin_cos_slice`]) a block of 64
//! arguments of magnitude at most 3.75 skips a term of the reduction that
//! is zero there (the same bits, a tenth less work).
//! `tanh` and `sigmoid` are built on `exp` (and, for `tanh` near 0, an odd
//! polynomial): at most 1.5 and 2.5 ulp over all inputs (1.29 and 2.32
//! seen over every 89th `f32`). NaN and infinities follow IEEE (and libm).
//!
//! `exp` has a shorter form, [`exp_normal`], for arguments whose result is a
//! normal number; [`exp_slice`] uses it on blocks where every argument is
//! one and gives the bits of [`exp_f32`] everywhere.
//!
//! [`with_simd`] runs a closure compiled for AVX2+FMA (or AVX-512) when the
//! CPU has them, so that the default `x86_64` build (SSE2 only) still uses
//! the machine's full vector width. Dispatch costs one cached feature check.

use super::lockstep::{self, chunks, chunks_mut, zip, zip3};

/// `sin_f32`/`cos_f32` are accurate for `|x|` up to this; beyond it (and for
/// non-finite inputs) callers use libm.
pub const SIN_COS_MAX: f32 = 65536.0;

/// `1.5 * 2^23`: adding and subtracting it rounds an `f32` of magnitude below
/// `2^22` to the nearest integer (ties to even), and leaves that integer in
/// the low mantissa bits.
const ROUND_MAGIC: f32 = 12582912.0;

/// `2^n` for an integer `n` in `-126..=127`, built from its bits.
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// `exp_normal` is [`exp_f32`] (the same bits) for `x` in this range, where
/// `e^x` is a normal `f32` with room to spare: `n = round(x / ln 2)` lies
/// in `-125..=127`, and `y 2^n` (`y` within `2^±0.5`) is normal.
pub const EXP_NORMAL: (f32, f32) = (-86.0, 88.0);

/// `(y, n)` with `e^x = y 2^n` to within 1 ulp of `y`, for `x` clamped to
/// `[-104, 88.8]`: `n = round(x / ln 2)`, and `y = e^r` of the remainder
/// `r = x - n ln 2` by a minimax polynomial.
#[inline(always)]
fn exp_parts(x: f32) -> (f32, i32) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n * LN2_HI is exact
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // n = round(x / ln 2), as a float and as an integer
    let t = x.mul_add(LOG2E, ROUND_MAGIC);
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let nf = t - ROUND_MAGIC;
    // r = x - n ln 2, in [-ln2/2, ln2/2]
    let r = (-nf).mul_add(LN2_LO, (-nf).mul_add(LN2_HI, x));
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    (p.mul_add(r * r, r) + 1.0, n)
}

/// `e^x`. At most 1 ulp from the exact value for every finite `x`
/// (subnormal results included); `inf` above 88.72, `0` below -103.97.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // (a result of 0 is made from 0, not from -104, whose steps went
    // through a subnormal product, 2^-150: on Intel cores without
    // flush-to-zero, a microcode assist of some hundred cycles for the
    // vector; every -inf of a mask is such a lane)
    let xc = if x < -103.972_08 { 0.0 } else { x.clamp(-104.0, 88.8) };
    let (y, n) = exp_parts(xc);
    // y * 2^n in two steps, so that subnormal results and n = 128 work
    let n1 = n >> 1;
    let e = y * pow2i(n1) * pow2i(n - n1);
    let e = if x > 88.722_84 { f32::INFINITY } else { e };
    let e = if x < -103.972_08 { 0.0 } else { e };
    if x.is_nan() {
        x
    } else {
        e
    }
}

/// `e^x` for `x` in [`EXP_NORMAL`]: the bits of [`exp_f32`] there, with
/// `2^n` put straight into the exponent field (no clamping, no special
/// cases). Outside that range the result is meaningless.
#[inline(always)]
pub fn exp_normal(x: f32) -> f32 {
    let (y, n) = exp_parts(x);
    f32::from_bits(y.to_bits().wrapping_add((n as u32) << 23))
}

/// Elements per block of [`exp_slice`]'s range check.
const EXP_BLOCK: usize = 64;

/// Elements per vector of [`exp_slice`]'s tail (one AVX-512 vector).
const EXP_TAIL: usize = 16;

/// Whether every element of `xs` is in [`EXP_NORMAL`] (false for NaN):
/// the largest magnitude is at most 86 (a little inside the range, and
/// two vector operations per vector, where comparing with both ends took
/// four).
#[inline(always)]
pub fn exp_all_normal(xs: &[f32]) -> bool {
    max_abs_bits(xs) <= (-EXP_NORMAL.0).to_bits()
}

/// The bits of the largest `|x|` of `xs` (0 for none), compared as
/// integers: for finite values and infinities their order is that of the
/// magnitudes, and any NaN is larger than all of them. A vectorisable scan
/// of two operations per vector (mask, maximum).
#[inline(always)]
pub fn max_abs_bits(xs: &[f32]) -> u32 {
    xs.iter().fold(0, |m, &v| m.max(v.to_bits() & 0x7fff_ffff))
}

/// `out[i] = exp_f32(x[i])`, through [`exp_normal`] on the blocks where
/// that gives the same bits.
#[inline(always)]
pub fn exp_slice(x: &[f32], out: &mut [f32]) {
    // (whole blocks as arrays: fixed-length loops, no per-block remainder
    // handling, which had cost a fifth of the exp's time)
    let n = x.len().min(out.len());
    let whole = n - n % EXP_BLOCK;
    let (x, rest_x) = x[..n].split_at(whole);
    let (out, rest_out) = out[..n].split_at_mut(whole);
    for (o, x) in zip(chunks_mut(out, EXP_BLOCK), chunks(x, EXP_BLOCK)) {
        let (Ok(o), Ok(x)) = (<&mut [f32; EXP_BLOCK]>::try_from(o), <&[f32; EXP_BLOCK]>::try_from(x)) else {
            unreachable!("chunks_exact gives whole blocks")
        };
        if exp_all_normal(x) {
            for (o, &v) in zip(o, x) {
                *o = exp_normal(v);
            }
        } else {
            for (o, &v) in zip(o, x) {
                *o = exp_f32(v);
            }
        }
    }
    // the tail (under a block) in whole vectors of `EXP_TAIL` where it has
    // them: as one plain loop it ran scalar (the compiler vectorises it by
    // whole blocks only), and a causal attention's rows, of every length,
    // spent a large share of their exponentials' time in their tails
    for (o, x) in zip(chunks_mut(rest_out, EXP_TAIL), chunks(rest_x, EXP_TAIL)) {
        if let (Ok(o), Ok(x)) = (
            <&mut [f32; EXP_TAIL]>::try_from(&mut *o),
            <&[f32; EXP_TAIL]>::try_from(x),
        ) {
            if exp_all_normal(x) {
                for (o, &v) in zip(o, x) {
                    *o = exp_normal(v);
                }
            } else {
                for (o, &v) in zip(o, x) {
                    *o = exp_f32(v);
                }
            }
            continue;
        }
        for (o, &v) in zip(o, x) {
            *o = exp_f32(v);
        }
    }
}

pub(crate) use super::exp_rows::{exp_affine, exp_affine_each, exp_in_place, max_exp_sum};

/// `Σ x` in eight interleaved partial sums (independent lanes, which
/// vectorise, where one dependent chain of adds takes the adds' latency per
/// element), added pairwise.
#[inline(always)]
pub fn sum_lanes<T: crate::tensor::Float>(x: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    add_to_lanes(&mut acc, x);
    lanes_total(&acc)
}

/// Adds `x` into [`sum_lanes`]' lanes, element `i` to lane `i mod 8` in
/// order: a row summed a block at a time (each block but the last a
/// multiple of 8 long) gets the bits of [`sum_lanes`] of the whole row.
#[inline(always)]
pub(crate) fn add_to_lanes<T: crate::tensor::Float>(acc: &mut [T; 8], x: &[T]) {
    let c = x.chunks_exact(8);
    let rest = c.remainder();
    for v in c {
        for l in 0..8 {
            acc[l] = acc[l] + v[l];
        }
    }
    for (l, &v) in zip(0..8, rest) {
        acc[l] = acc[l] + v;
    }
}

/// The lanes' total, added pairwise as [`sum_lanes`] adds them.
#[inline(always)]
pub(crate) fn lanes_total<T: crate::tensor::Float>(acc: &[T; 8]) -> T {
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// The largest element of `x` that is not NaN (`-inf` if none), in eight
/// interleaved lanes: the same element as a fold in order, since a maximum
/// does not depend on the order (NaN never wins a `>`).
#[inline(always)]
pub fn max_lanes<T: crate::tensor::Float>(x: &[T]) -> T {
    let pick = |a: T, b: T| if b > a { b } else { a };
    let mut acc = [T::neg_infinity(); 8];
    let c = x.chunks_exact(8);
    let rest = c.remainder();
    for v in c {
        for l in 0..8 {
            acc[l] = pick(acc[l], v[l]);
        }
    }
    for (l, &v) in zip(0..8, rest) {
        acc[l] = pick(acc[l], v);
    }
    let mut m = T::neg_infinity();
    for &a in &acc {
        m = pick(m, a);
    }
    m
}

/// `tanh x`, within 1.5 ulp for every `x`. For `|x| < 0.625` the odd Cephes
/// polynomial `x + x³ P(x²)`; above, `1 - 2 / (e^{2|x|} + 1)` (where the
/// cancellation costs little: the result is above 0.55; `2|x|` is capped
/// at 88, where the result is already 1, so `exp_normal` serves); the sign
/// of `x` is put back last, so `tanh(-0) = -0`.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    // (`min` of NaN is 88: `small` below is picked for NaN)
    let big = 1.0 - 2.0 / (exp_normal((2.0 * a).min(EXP_NORMAL.1)) + 1.0);
    let z = a * a;
    let p = (-5.704_988_7e-3f32)
        .mul_add(z, 2.063_909e-2)
        .mul_add(z, -5.373_971_6e-2)
        .mul_add(z, 1.333_144_2e-1)
        .mul_add(z, -3.333_328e-1);
    let small = (p * z).mul_add(a, a);
    let t = if a >= 0.625 { big } else { small };
    f32::from_bits(t.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// The constants of GELU's tanh form: `1/2`, `√(2/π)` and the cube's
/// factor `0.044715`.
pub(crate) const GELU_TANH: [f64; 3] = [0.5, 0.797_884_560_802_865_4, 0.044715];

/// Where GELU's tanh form is saturated: beyond ±30, `σ(2u)·σ(−2u)`
/// underflows to 0 in `f32` and `f64`, so its derivative is exactly 1 or
/// 0; the derivative kernels clamp `x` there, which changes no value and
/// keeps `x³` from overflowing (`x · 0 · inf` was NaN at 5e30 in `f32`);
/// at ±inf they give NaN, as TensorFlow's and JAX's.
pub(crate) const GELU_TANH_SATURATED: f64 = 30.0;

/// The Taylor coefficients of `x − tanh x = x³ · Σ c[k] x^(2k)` (from
/// tanh's, with the Bernoulli numbers): below |x| = 0.3 twelve terms are
/// below either float type's rounding (each about 0.036 of the one
/// before). The CUDA C of `ops::math::cuda_expr` writes the same numbers.
pub(crate) const TANH_SHRINK_SERIES: [f64; 12] = [
    0.333_333_333_333_333_3,
    -0.133_333_333_333_333_33,
    0.053_968_253_968_253_97,
    -0.021_869_488_536_155_203,
    0.008_863_235_529_902_197,
    -0.003_592_128_036_572_481,
    0.001_455_834_387_051_318_3,
    -0.000_590_027_440_945_586,
    0.000_239_129_114_243_552_48,
    -9.691_537_956_929_451e-5,
    3.927_832_388_331_683e-5,
    -1.591_890_506_932_896_4e-5,
];

/// Where `x − tanh x` switches from its series to the difference (which
/// loses about 3/x² ulps there: 33).
pub(crate) const TANH_SHRINK_SMALL: f64 = 0.3;

/// Mish, `x · tanh(softplus x)`, with `tanh(softplus x) = n/(n + 2)`,
/// `n = eˣ(eˣ + 2)`: no tanh of a softplus, and no overflow with `x`
/// capped (the factor is 1 in both types from x = 20 on).
#[inline(always)]
pub(crate) fn mish_of<T: num_traits::Float>(v: T) -> T {
    let two = T::one() + T::one();
    if v > T::from(20.0).unwrap() {
        v
    } else {
        let e = v.exp();
        let n = e * (e + two);
        v * (n / (n + two))
    }
}

/// Mish's derivative `t + x·σ(x)·(1 − t)(1 + t)` with `t` as in
/// [`mish_of`] and `1 − t = 2/(n + 2)`, never `1 − t²` (which cancels for
/// x ≫ 0); `eˣ` capped at x = 40, `1 − t` taken as 0 beyond, where
/// `4x·e^(−2x)` is below every type's rounding of `t = 1`.
#[inline(always)]
pub(crate) fn mish_grad_of<T: num_traits::Float>(v: T) -> T {
    let (two, cap) = (T::one() + T::one(), T::from(40.0).unwrap());
    let e = (if v > cap { cap } else { v }).exp();
    let n = e * (e + two);
    let t = n / (n + two);
    let u = if v > cap { T::zero() } else { two / (n + two) };
    t + v * sigmoid_of(v) * u * (T::one() + t)
}

/// `x − tanh x`: below [`TANH_SHRINK_SMALL`] its series `x³·P(x²)`
/// ([`TANH_SHRINK_SERIES`]), where the difference cancels.
#[inline(always)]
pub(crate) fn tanh_shrink_of<T: num_traits::Float>(v: T) -> T {
    if v.abs() < T::from(TANH_SHRINK_SMALL).unwrap() {
        let z = v * v;
        let c = &TANH_SHRINK_SERIES;
        let mut p = T::from(c[c.len() - 1]).unwrap();
        for &ck in c[..c.len() - 1].iter().rev() {
            p = p * z + T::from(ck).unwrap();
        }
        v * z * p
    } else {
        v - v.tanh()
    }
}

/// `1 / (1 + e^-z)` without overflow (`e^-|z|` only), for the elementwise
/// table's generic kernels (GELU's tanh form, SiLU).
#[inline(always)]
pub(crate) fn sigmoid_of<T: num_traits::Float>(z: T) -> T {
    let e = (-z.abs()).exp();
    if z >= T::zero() {
        T::one() / (T::one() + e)
    } else {
        e / (T::one() + e)
    }
}

/// GELU's tanh form, `x/2 · (1 + tanh u)` with `u = √(2/π)·(x + 0.044715
/// x³)`, as `x · σ(2u)` on [`sigmoid_f32`] (the same function, without the
/// cancellation of `1 + tanh u` where `u ≪ 0`: at x = -5.2 it was 0), as
/// the table's `f64` kernel writes it (`ops::math::table`, `GeluTanh`).
#[inline(always)]
pub fn gelu_tanh_f32(x: f32) -> f32 {
    let [_, c, a] = gelu_tanh_consts();
    x * sigmoid_f32(2.0 * c * (x + a * (x * x * x)))
}

/// The derivative of [`gelu_tanh_f32`], `s + 2x · s · σ(−2u) · u'` with
/// `s = σ(2u)` and `u' = √(2/π)·(1 + 3·0.044715 x²)`, as the table's `f64`
/// kernel writes it (`GeluTanhGrad`).
#[inline(always)]
pub fn gelu_tanh_grad_f32(x: f32) -> f32 {
    let [_, c, a] = gelu_tanh_consts();
    let a3 = (3.0 * GELU_TANH[2]) as f32;
    // (NaN at ±inf, as TensorFlow's and JAX's derivative there)
    let bound = GELU_TANH_SATURATED as f32;
    let x = if x.is_infinite() {
        f32::NAN
    } else {
        x.clamp(-bound, bound)
    };
    let u2 = 2.0 * c * (x + a * (x * x * x));
    let (s, sn) = (sigmoid_f32(u2), sigmoid_f32(-u2));
    s + 2.0 * x * s * sn * c * (1.0 + a3 * (x * x))
}

/// `1/2`, `√(2/π)` and `0.044715` in `f32`.
#[inline(always)]
fn gelu_tanh_consts() -> [f32; 3] {
    lockstep::map(GELU_TANH, |c| c as f32)
}

/// The logistic sigmoid `1 / (1 + e^-x)`, within 2.5 ulp for every `x`:
/// with `e = e^-|x|` (never overflowing), `1 / (1 + e)` for `x >= 0` and
/// `e / (1 + e)` below.
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    let e = exp_f32(-x.abs());
    let d = 1.0 + e;
    if x >= 0.0 {
        1.0 / d
    } else if x < 0.0 {
        e / d
    } else {
        x
    }
}

/// SiLU, `x · σ(x)`, on [`sigmoid_f32`] (vectorised: the generic
/// table's form called the C library's `expf` per element).
#[inline(always)]
pub fn silu_f32(x: f32) -> f32 {
    x * sigmoid_f32(x)
}

/// SiLU's derivative `σ(x) + x · σ(x) · σ(−x)`, both sigmoids as
/// [`sigmoid_f32`] gives them, from one `e^-|x|`.
#[inline(always)]
pub fn silu_grad_f32(x: f32) -> f32 {
    let e = exp_f32(-x.abs());
    let d = 1.0 + e;
    let (up, down) = (1.0 / d, e / d);
    // (NaN takes the second arm: NaN, as the sum below)
    let (s, sn) = if x >= 0.0 { (up, down) } else { (down, up) };
    s + x * s * sn
}

/// Mish, `mish_of`'s form on [`exp_f32`] (the generic form called the
/// C library's `expf` per element): `x` above 20, `x · n/(n + 2)` with
/// `n = eˣ(eˣ + 2)` elsewhere (the exponential taken at `min(x, 20)`, so
/// every lane computes one).
#[inline(always)]
pub fn mish_f32(x: f32) -> f32 {
    let e = exp_f32(x.min(20.0));
    let n = e * (e + 2.0);
    if x > 20.0 {
        x
    } else {
        x * (n / (n + 2.0))
    }
}

/// Mish's derivative `t + x·σ(x)·(1 − t)(1 + t)`, `mish_grad_of`'s
/// form from one [`exp_f32`]: `σ(x) = eˣ/(1 + eˣ)` from the same `eˣ`
/// (taken at `min(x, 40)`; above, `1 − t` is 0), and `t`, `1 − t` from
/// one reciprocal of `n + 2`.
#[inline(always)]
pub fn mish_grad_f32(x: f32) -> f32 {
    let e = exp_f32(x.min(40.0));
    let n = e * (e + 2.0);
    let r = 1.0 / (n + 2.0);
    let t = n * r;
    let u = if x > 40.0 { 0.0 } else { 2.0 * r };
    let s = e / (1.0 + e);
    t + x * s * u * (1.0 + t)
}

/// [`mish_f32`] of each element (a loop of its own: through the table's
/// generic loop, the derivative's was not inlined, 13 ms for `[32, 64,
/// 128]`).
#[inline(always)]
pub fn mish_slice(x: &[f32], out: &mut [f32]) {
    for (o, &v) in super::lockstep::zip(out, x) {
        *o = mish_f32(v);
    }
}

/// [`mish_grad_f32`] of each element, as [`mish_slice`].
#[inline(always)]
pub fn mish_grad_slice(x: &[f32], out: &mut [f32]) {
    for (o, &v) in super::lockstep::zip(out, x) {
        *o = mish_grad_f32(v);
    }
}

/// `sin r` and `cos r` for `r = hi + lo`, `|hi| <= pi/4` (a little more
/// where `q` rounded the other way) and `|lo|` about `ulp(hi) / 2` or less,
/// in `f32` (the Cephes `f32` minimax polynomials in `hi`, corrected to
/// first order for `lo`: `sin r ~ sin hi + lo cos hi`, `cos r ~ cos hi -
/// lo hi`). The `1 - z/2` of the cosine is kept exactly (its rounding
/// error is added back), which keeps its error near half an ulp.
#[inline(always)]
fn sin_cos_poly(hi: f32, lo: f32) -> (f32, f32) {
    let z = hi * hi;
    let p = (-1.951_529_6e-4f32)
        .mul_add(z, 8.332_161e-3)
        .mul_add(z, -1.666_665_5e-1);
    let q = (2.443_315_7e-5f32)
        .mul_add(z, -1.388_731_6e-3)
        .mul_add(z, 4.166_664_6e-2)
        * (z * z);
    // w = 1 - z/2 rounded, and its rounding error `(1 - w) - z/2` (exact:
    // `1 - w` is, and z/2 is a multiply-add's exact product)
    let w = z.mul_add(-0.5, 1.0);
    let c = w + (z.mul_add(-0.5, 1.0 - w) + (-hi).mul_add(lo, q));
    let s = hi + (hi * z).mul_add(p, lo * c);
    (s, c)
}

/// `(hi, lo, q)` with `x = q pi/2 + hi + lo` to about 48 bits, `|hi| <=
/// pi/4` (a hair more at the rounding boundaries of `q`), for `|x| <=
/// SIN_COS_MAX`, all in `f32`. pi/2 is `C1 + C2 + C3` (`PIO2_C1`, ...).
/// `x - q C1` is exact: both terms are multiples of `2^-24` (of `ulp(x)`
/// below 1) and the difference is below 1. `q C2` is
/// taken as a product and its exact error (a fused multiply-add), and the
/// subtraction's error by Fast2Sum; they and `q C3` make the low part.
///
/// With `SMALL` (for `|x| <= SIN_COS_SMALL`, where `|q| <= 2`) the product
/// error `pe` is left out: `C2` has 23 significant bits and such a `q` one,
/// so `q C2` is exact and `pe` is `+0`, and `e - (+0)` is `e` (signed zeros
/// included): the same bits, two operations fewer.
#[inline(always)]
fn reduce_pio2<const SMALL: bool>(x: f32) -> (f32, f32, i32) {
    let t = x.mul_add(std::f32::consts::FRAC_2_PI, ROUND_MAGIC);
    let q = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let qf = t - ROUND_MAGIC;
    let r1 = (-qf).mul_add(PIO2_C1, x);
    let p = qf * PIO2_C2;
    let hi = r1 - p;
    let e = (r1 - hi) - p;
    let e = if SMALL { e } else { e - qf.mul_add(PIO2_C2, -p) };
    let lo = (-qf).mul_add(PIO2_C3, e);
    (hi, lo, q)
}

/// pi/2 as `C1 + C2 + C3`, each the `f32` nearest what is left
/// (`0x3fc90fdb`, `0xb33bbd2e`, `0xa6f72ced`).
const PIO2_C1: f32 = 1.570_796_4;
pub const PIO2_C2: f32 = -4.371_139e-8;
const PIO2_C3: f32 = -1.715_124_5e-15;

/// Arguments up to this magnitude reduce with `|q| <= 2` (3.75 * 2/pi is
/// 2.39), where `reduce_pio2` may skip its product error.
pub const SIN_COS_SMALL: f32 = 3.75;

/// `(sin x, cos x)` for `|x| <= SIN_COS_MAX` (at most 1 ulp each, see the
/// module docs), sharing one range reduction and one pair of polynomials.
/// The tests' `sin_f32` and `cos_f32` are its halves, so they give the same bits.
#[inline(always)]
pub fn sin_cos_f32(x: f32) -> (f32, f32) {
    sin_cos_with::<false>(x)
}

/// [`sin_cos_f32`] for `|x| <= SIN_COS_SMALL` (its bits, a cheaper
/// reduction).
#[inline(always)]
pub fn sin_cos_small(x: f32) -> (f32, f32) {
    sin_cos_with::<true>(x)
}

#[inline(always)]
fn sin_cos_with<const SMALL: bool>(x: f32) -> (f32, f32) {
    let (hi, lo, q) = reduce_pio2::<SMALL>(x);
    let (s, c) = sin_cos_poly(hi, lo);
    // sin(x) = sin r, cos r, -sin r, -cos r for q = 0, 1, 2, 3 (mod 4);
    // cos(x) = cos r, -sin r, -cos r, sin r
    let (vs, vc) = if q & 1 == 0 { (s, c) } else { (c, s) };
    let ys = f32::from_bits(vs.to_bits() ^ (((q & 2) as u32) << 30));
    let yc = f32::from_bits(vc.to_bits() ^ ((((q + 1) & 2) as u32) << 30));
    // keep the sign of zero (sin -0 = -0)
    (if x == 0.0 { x } else { ys }, yc)
}

/// Whether every element of `xs` is in the range where [`sin_cos_f32`]
/// are accurate (a vectorisable scan, no early exit).
#[inline(always)]
pub fn sin_cos_in_range(xs: &[f32]) -> bool {
    xs.iter().fold(true, |ok, &v| ok & in_sin_cos_range(v))
}

/// Puts libm's value `slow(x[i])` in `out[i]` wherever `x[i]` is outside
/// the range of the vectorised `sin_f32`/`cos_f32` (beyond `SIN_COS_MAX`,
/// infinite or NaN), after `out` was filled by them. So each element's
/// value depends on it alone, never on its neighbours: eager kernels and
/// fused ones, which cut the data into other blocks, give the same bits.
#[inline(always)]
pub(crate) fn patch_out_of_range(x: &[f32], out: &mut [f32], slow: impl Fn(f32) -> f32) {
    if !sin_cos_in_range(x) {
        for (o, &v) in zip(out, x) {
            if !in_sin_cos_range(v) {
                *o = slow(v);
            }
        }
    }
}

/// Whether `sin_f32`/`cos_f32` are accurate at `v` (false for NaN).
#[inline(always)]
fn in_sin_cos_range(v: f32) -> bool {
    v.abs() <= SIN_COS_MAX
}

/// Elements per block of [`sin_cos_slice`].
const SIN_COS_BLOCK: usize = 64;

/// `s[i] = sin x[i]` and `c[i] = cos x[i]`: the bits of [`sin_cos_f32`]
/// where `|x| <= SIN_COS_MAX`, libm's elsewhere (each element on its own,
/// as `patch_out_of_range`). Blocks of 64 elements: the block's largest
/// magnitude ([`max_abs_bits`], one scan) picks the cheaper reduction of
/// [`sin_cos_small`] (the same bits) and tells whether any element needs
/// libm.
#[inline(always)]
pub fn sin_cos_slice(x: &[f32], s: &mut [f32], c: &mut [f32]) {
    let n = x.len().min(s.len()).min(c.len());
    let (x, s, c) = (&x[..n], &mut s[..n], &mut c[..n]);
    let whole = n - n % SIN_COS_BLOCK;
    let (x, rest_x) = x.split_at(whole);
    let (s, rest_s) = s.split_at_mut(whole);
    let (c, rest_c) = c.split_at_mut(whole);
    for (x, s, c) in zip3(
        chunks(x, SIN_COS_BLOCK),
        chunks_mut(s, SIN_COS_BLOCK),
        chunks_mut(c, SIN_COS_BLOCK),
    ) {
        let (Ok(x), Ok(s), Ok(c)) = (
            <&[f32; SIN_COS_BLOCK]>::try_from(x),
            <&mut [f32; SIN_COS_BLOCK]>::try_from(s),
            <&mut [f32; SIN_COS_BLOCK]>::try_from(c),
        ) else {
            unreachable!("chunks_exact gives whole blocks")
        };
        sin_cos_block(x, s, c);
    }
    sin_cos_block(rest_x, rest_s, rest_c);
}

/// [`sin_cos_slice`] of one block (`s` and `c` as long as `x`).
#[inline(always)]
fn sin_cos_block<X, O>(x: &X, s: &mut O, c: &mut O)
where
    X: AsRef<[f32]> + ?Sized,
    O: AsMut<[f32]> + ?Sized,
{
    let (x, s, c) = (x.as_ref(), s.as_mut(), c.as_mut());
    let m = max_abs_bits(x);
    if m <= SIN_COS_SMALL.to_bits() {
        for (s, c, &v) in zip3(&mut *s, &mut *c, x) {
            (*s, *c) = sin_cos_small(v);
        }
    } else {
        for (s, c, &v) in zip3(&mut *s, &mut *c, x) {
            (*s, *c) = sin_cos_f32(v);
        }
        if m > SIN_COS_MAX.to_bits() {
            patch_out_of_range(x, s, f32::sin);
            patch_out_of_range(x, c, f32::cos);
        }
    }
}

/// `out[i] = sin x[i]` (`COS` false) or `cos x[i]` (true), the values of
/// [`sin_cos_slice`], a block at a time (the other half goes to a local block and is
/// dropped).
#[inline(always)]
pub fn sin_or_cos_slice<const COS: bool>(x: &[f32], out: &mut [f32]) {
    let mut other = [0.0f32; SIN_COS_BLOCK];
    for (x, o) in zip(chunks(x, SIN_COS_BLOCK), chunks_mut(out, SIN_COS_BLOCK)) {
        let other = &mut other[..x.len()];
        match COS {
            false => sin_cos_slice(x, o, other),
            true => sin_cos_slice(x, other, o),
        }
    }
}

/// Whether [`with_simd`] runs its AVX-512 copy: 32 vector registers of 16
/// `f32`s, where AVX2 has 16 of 8 (a kernel keeping a block of sums in
/// registers sizes the block by it).
pub(crate) fn wide_vectors() -> bool {
    #[cfg(target_arch = "x86_64")]
    return level() == Level::Avx512;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Which vector extensions [`with_simd`] compiles for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[allow(dead_code)]
enum Level {
    Base,
    Avx2,
    Avx512,
}

#[cfg(target_arch = "x86_64")]
fn level() -> Level {
    use std::sync::atomic::{AtomicU8, Ordering};
    static LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);
    match LEVEL.load(Ordering::Relaxed) {
        0 => Level::Base,
        1 => Level::Avx2,
        2 => Level::Avx512,
        _ => {
            let l = if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512dq")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("fma")
            {
                Level::Avx512
            } else if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                Level::Avx2
            } else {
                Level::Base
            };
            LEVEL.store(l as u8, Ordering::Relaxed);
            l
        }
    }
}

/// Runs `f`, compiled for the widest vector extension the CPU has (AVX-512
/// or AVX2+FMA on `x86_64`). `f` and what it calls must be inlinable for
/// this to matter: mark element functions `#[inline(always)]`.
#[inline(always)]
pub fn with_simd<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        match level() {
            // SAFETY: `level` checked that the CPU has these features.
            Level::Avx512 => unsafe { avx512(f) },
            Level::Avx2 => unsafe { avx2(f) },
            Level::Base => baseline(f),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    f()
}

/// Whether loops over elements of `dtype` get [`with_simd`]'s wide copies:
/// f32 and f64, whose arithmetic and functions the model's hot loops run.
/// Loops over the other dtypes (integers, bools, halves, complex) run as
/// compiled for the baseline CPU (still vectorised, with SSE2): an AVX2
/// and an AVX-512 copy of each of their kernels tripled the library's
/// kernel code, and so its build time, for loops that are rarely hot.
const fn wide(dtype: crate::tensor::DType) -> bool {
    use crate::tensor::DType;
    matches!(dtype, DType::F32 | DType::F64)
}

/// [`with_simd`] for a loop over `A`s giving `O`s, or [`baseline`] when
/// neither is [`wide`]. The choice is made when the function is
/// instantiated: the other branch's copies of `f` are never compiled.
#[inline(always)]
pub(crate) fn with_simd_for<A: crate::tensor::Element, O: crate::tensor::Element, R>(f: impl FnOnce() -> R) -> R {
    if const { wide(A::DTYPE) || wide(O::DTYPE) } {
        with_simd(f)
    } else {
        baseline(f)
    }
}

/// Runs `f` as compiled for the baseline CPU, in one copy that every
/// caller shares (never inlined: inlined, each call site of a generic
/// kernel held one more copy of its loop, beside [`with_simd`]'s AVX2 and
/// AVX-512 ones). For loops too short to be worth the feature check, and
/// for CPUs without AVX2.
#[inline(never)]
pub(crate) fn baseline<R>(f: impl FnOnce() -> R) -> R {
    f()
}
