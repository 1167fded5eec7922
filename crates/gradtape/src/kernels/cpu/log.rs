//! The natural logarithm, `ln(1 + x)` and `eˣ − 1` of `f32` (and the
//! activations made of them), branch-free (selects only), so that loops
//! over slices of them vectorise: the C library's `logf`, `log1pf` and
//! `expm1f` are a call per element (0.37, 0.9 and 1.4 ms for a `[32, 64,
//! 128]` tensor on two threads, against 0.03 ms for `exp`).
//!
//! `ln x` for `x = m · 2^e`, `m` in `[√½, √2)`: with `f = m − 1` (exact),
//! `ln(1 + f) = f − f²/2 + f³·P(f)` (the Cephes single-precision minimax
//! polynomial of degree 8), and `e · ln 2` added in two parts (a high
//! part with few bits, exact in its product with `e`, and the rest).
//! Subnormal inputs are scaled by `2^23` first. Within 2 ulps of the exact
//! value for every positive finite `x` (1 on every 13th `f32`;
//! `tests/ops/f32_accuracy.rs` checks every binade); `ln 0 = −∞`,
//! `ln ∞ = ∞`, NaN below 0 and for NaN.
//!
//! `ln(1 + x)` as `ln u · x / (u − 1)` with `u = 1 + x` rounded (the
//! rounding error of `u` divides out), or `x` where `u` rounds to 1:
//! within 2 ulps; softplus on it within 3 (both checked on every 13th
//! `f32`).

/// `√2` rounded down: the top of the mantissa's interval.
const SQRT2: f32 = std::f32::consts::SQRT_2;
/// `ln 2` in two parts: `LN2_HI · e` is exact for every exponent.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `ln x` (see the module's docs).
#[inline(always)]
pub fn log_f32(x: f32) -> f32 {
    // subnormals (and 0) scaled into the normal range
    let tiny = x < f32::MIN_POSITIVE;
    let xs = if tiny { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits() as i32;
    let e0 = ((bits >> 23) & 0xff) - 127 - if tiny { 23 } else { 0 };
    let m0 = f32::from_bits(((bits & 0x007f_ffff) | 0x3f80_0000) as u32);
    // m in [√½, √2)
    let high = m0 > SQRT2;
    let m = if high { m0 * 0.5 } else { m0 };
    let e = (e0 + i32::from(high)) as f32;
    let f = m - 1.0;
    let z = f * f;
    let p = 7.037_683_6e-2f32
        .mul_add(f, -1.151_461e-1)
        .mul_add(f, 1.167_699_9e-1)
        .mul_add(f, -1.242_014_1e-1)
        .mul_add(f, 1.424_932_3e-1)
        .mul_add(f, -1.666_805_8e-1)
        .mul_add(f, 2.000_071_5e-1)
        .mul_add(f, -2.499_999_4e-1)
        .mul_add(f, 3.333_333e-1);
    let y = (f * z).mul_add(p, e * LN2_LO);
    let y = (-0.5f32).mul_add(z, y);
    let r = e.mul_add(LN2_HI, f + y);
    // the special values: 0 (and -0), infinity, negatives and NaN
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    let r = if x == f32::INFINITY { x } else { r };
    if x < 0.0 || x.is_nan() {
        f32::NAN
    } else {
        r
    }
}

/// `ln(1 + x)` (see the module's docs).
#[inline(always)]
pub fn log1p_f32(x: f32) -> f32 {
    let u = 1.0 + x;
    let d = u - 1.0;
    // (d = 0: x below half an ulp of 1, ln(1 + x) = x to within its ulp;
    // u = ∞: x = ∞ or beyond f32's range, the quotient is NaN)
    let r = log_f32(u) * (x / d);
    let r = if d == 0.0 { x } else { r };
    if u == f32::INFINITY {
        u
    } else {
        r
    }
}

/// `ln(1 + eˣ)` as the generic form computes it, `max(x, 0) + ln(1 +
/// e^−|x|)` (no overflow), on [`exp_f32`](super::math::exp_f32) and
/// [`log1p_f32`].
#[inline(always)]
pub fn softplus_f32(x: f32) -> f32 {
    x.max(0.0) + log1p_f32(super::math::exp_f32(-x.abs()))
}

/// `eˣ − 1`: below 1 in magnitude its Taylor series to the 12th power
/// (the next term is under 2⁻³² of the sum), which keeps the digits that
/// `eˣ − 1` cancels near 0; above, [`exp_f32`](super::math::exp_f32)
/// minus 1, whose cancellation costs at most a factor e/(e − 1) of its
/// error. Within 2 ulps (every 13th `f32`); −0 for −0.
#[inline(always)]
pub fn expm1_f32(x: f32) -> f32 {
    let mut q = 1.0f32 / 479_001_600.0;
    for c in [
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
    ] {
        q = q.mul_add(x, c);
    }
    let near = (x * x).mul_add(q, x);
    let far = super::math::exp_f32(x) - 1.0;
    let r = if x.abs() < 1.0 { near } else { far };
    // (±0 kept; NaN is NaN either way)
    if x == 0.0 {
        x
    } else {
        r
    }
}

/// ELU, `x` above 0 and `eˣ − 1` below ([`expm1_f32`]), as the table's
/// generic form.
#[inline(always)]
pub fn elu_f32(x: f32) -> f32 {
    if x > 0.0 {
        x
    } else {
        expm1_f32(x)
    }
}

/// SELU of each element, `scale · x` above 0 and `scale_alpha · (eˣ −
/// 1)` below (the op layer's constants), as the table's generic form.
#[inline(always)]
pub fn selu_slice(x: &[f32], out: &mut [f32], scale: f32, scale_alpha: f32) {
    for (o, &v) in super::lockstep::zip(out, x) {
        *o = if v > 0.0 { scale * v } else { scale_alpha * expm1_f32(v) };
    }
}

/// `out[i] = f(x[i])` for each function of this module, the call direct:
/// handed to a generic loop as a function value, softplus's call went
/// through a shim the compiler did not inline, compiled for the baseline
/// CPU, whose fused multiply-adds were C library calls (7 ms for `[32,
/// 64, 128]`, against 0.1 ms).
macro_rules! slice_fns {
    ($($name:ident: $f:ident),*) => {$(
        #[doc = concat!("[`", stringify!($f), "`] of each element.")]
        #[inline(always)]
        pub fn $name(x: &[f32], out: &mut [f32]) {
            for (o, &v) in super::lockstep::zip(out, x) {
                *o = $f(v);
            }
        }
    )*};
}
slice_fns!(
    log_slice: log_f32,
    log1p_slice: log1p_f32,
    softplus_slice: softplus_f32,
    expm1_slice: expm1_f32,
    elu_slice: elu_f32
);
