//! The regularised incomplete gamma functions `P(a, x)` and `Q(a, x)`,
//! in f64, for every finite `a > 0` and `x > 0` (the edges, NaN, 0 and
//! infinities, are `special.rs`'s).
//!
//! **Which sum where** (the regions of DiDonato and Morris, as Cephes and
//! SciPy choose them). `P` comes from its power series
//!
//! ```text
//! P(a, x) = x^a e^-x / Γ(a + 1) · Σ xⁿ / ((a + 1)…(a + n))
//! ```
//!
//! where `x <= 1` or `x <= a`, and as `1 - Q` elsewhere. `Q` comes from
//! the continued fraction where `x > 1.1` and `x >= a`; for `x <= 1.1`
//! and small `a` from its own series ([`upper_series`]), which keeps
//! `Q`'s relative precision when `P` is near 1 (at `a = 1e-300`, `Q` is
//! about `a (-ln x - γ)`, which `1 - P` rounds to 0 or to a negative
//! number: TensorFlow's `igammac(1e-300, 1e-5)` is -4.9e-14, mpmath's
//! 1.1e-299); elsewhere as `1 - P`. Near `x = a` for large `a`
//! (`a >= LARGE_A`, `|x - a| / a < TEMME_RATIO`) both come from Temme's
//! uniform expansion (`igamma_temme`) in a fixed number of steps. So no
//! `(a, x)` takes more than about a hundred steps: away from `x = a` the
//! sums converge fast, and for `a` beyond a few 1e4 their factor
//! underflows there, so they return at once.
//!
//! (Before, `statrs` gave the values below `a = 100`; it treats arguments
//! under about 1e-15 as 0, so `P(1e-20, 1e-16)` was 0 where it is
//! 1 - 3.6e-19.)
//!
//! **The factor** `x^a e^-x / Γ(a)`. For `a < LARGE_A` it is the product
//! of its three parts, or `exp(a ln x - x - lgamma(a))` where one of
//! them under- or overflows. For large `a` the latter is a difference of
//! numbers near `a ln a`, and its relative error grows like `a ε`
//! (`statrs`'s `P(1e15, 1e15)` was 0.0065 for 0.500000004); there its
//! logarithm is formed without that cancellation: with `t = (x - a) / a`
//! and Stirling's series for `lgamma(a)`,
//!
//! ```text
//! ln(x^a e^-x / Γ(a)) = a (ln(1 + t) - t) + ln(a) / 2 - ln(2π) / 2 - s(a)
//! ```
//!
//! (`s(a) = 1/(12a) - 1/(360a³) + …`, `ln(1 + t) - t` by its series for
//! small `t`). It also gives the `x`-derivative `x^(a-1) e^-x / Γ(a)`
//! (`special::igamma_dx`).

use super::igamma_temme::TEMME_RATIO;

/// From this `a` on, the factor comes from Stirling's series
/// ([`log_factor`]; below it the direct formula loses less than
/// `LARGE_A · ε`, about 1e-14), and Temme's expansion is used near `x = a`.
pub(crate) const LARGE_A: f64 = 100.0;

/// `ln(1 + t) - t`, accurate for small `t` too (the series up to
/// `|t| = 1/2`, as Cephes').
pub(crate) fn log1pmx(t: f64) -> f64 {
    if t.abs() >= 0.5 {
        return t.ln_1p() - t;
    }
    // -t²/2 + t³/3 - t⁴/4 + …
    let mut power = t * t;
    let mut sum = 0.0;
    let mut k = 2.0;
    let mut sign = -1.0;
    loop {
        let term = sign * power / k;
        sum += term;
        if term.abs() <= f64::EPSILON * sum.abs() || k > 200.0 {
            return sum;
        }
        power *= t;
        k += 1.0;
        sign = -sign;
    }
}

/// `ln(x^a e^-x / Γ(a + shift))` for `a >= LARGE_A`, `shift` 0 or 1.
pub fn log_factor(a: f64, x: f64, shift: f64) -> f64 {
    let t = (x - a) / a;
    let inv = 1.0 / a;
    let inv2 = inv * inv;
    // Stirling: lgamma(a) - ((a - 1/2) ln a - a + ln(2π)/2)
    let s = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0)));
    let log_a = a.ln();
    a * log1pmx(t) + 0.5 * log_a - 0.5 * (2.0 * std::f64::consts::PI).ln() - s - shift * log_a
}

/// `x^a e^-x / Γ(a + shift)` (`shift` 0 or 1): the leading factor of the
/// continued fraction (0) and of the series (1).
pub(crate) fn factor(a: f64, x: f64, shift: f64) -> f64 {
    if a >= LARGE_A {
        // (without the cancellation of `a ln x` against `lgamma(a)`)
        return log_factor(a, x, shift).exp();
    }
    // The three parts apart, where none under- or overflows: each is
    // within an ulp or so, where the exponential of the sum loses
    // `ε (|a ln x| + x)` (at `a = x = 99.9`, 1e-13; `P(0.5, 1e-200)` was
    // 2e-14 off, as TF's and SciPy's are).
    let (power, decay, gamma) = (x.powf(a), (-x).exp(), libm::tgamma(a + shift));
    let parts = power / gamma * decay;
    if [power, decay, gamma, parts].iter().all(|v| v.is_normal()) {
        return parts;
    }
    (a * x.ln() - x - libm::lgamma(a + shift)).exp()
}

/// `P(a, x)` (or `Q(a, x)` when `upper`) for finite `a > 0` and `x > 0`.
pub fn igamma(a: f64, x: f64, upper: bool) -> f64 {
    if a >= LARGE_A && ((x - a) / a).abs() < TEMME_RATIO {
        return super::igamma_temme::igamma(a, x, upper);
    }
    by_sums(a, x, upper)
}

/// P (or Q when `upper`) by the series and the continued fraction.
pub fn by_sums(a: f64, x: f64, upper: bool) -> f64 {
    if upper {
        q(a, x)
    } else if x > 1.0 && x > a {
        1.0 - q(a, x)
    } else {
        series(a, x)
    }
}

/// `Q(a, x)` away from Temme's window, by the regions of the module doc.
fn q(a: f64, x: f64) -> f64 {
    let by_upper_series = if x > 1.1 {
        if x >= a {
            return fraction(a, x);
        }
        false
    } else if x <= 0.5 {
        // (`-0.4 / ln x` is in (0, 0.58] here)
        a <= -0.4 / x.ln()
    } else {
        a <= 1.1 * x
    };
    if by_upper_series {
        upper_series(a, x)
    } else {
        1.0 - series(a, x)
    }
}

/// A bound on the steps of the sums, never reached (the regions keep them
/// to at most about a hundred).
const MAX_STEPS: usize = 1000;

/// `P(a, x) = x^a e^-x / Γ(a + 1) · Σ xⁿ / ((a + 1)…(a + n))`.
fn series(a: f64, x: f64) -> f64 {
    let f = factor(a, x, 1.0);
    if f == 0.0 {
        return 0.0;
    }
    let (mut term, mut sum, mut ap) = (1.0, 1.0, a);
    for _ in 0..MAX_STEPS {
        ap += 1.0;
        term *= x / ap;
        sum += term;
        if term <= sum * f64::EPSILON / 2.0 {
            break;
        }
    }
    (f * sum).min(1.0)
}

/// `Q(a, x)` for `x <= 1.1` and `a` up to about `1.2`, without forming
/// `1 - P`: integrating `e^-t`'s power series term by term,
///
/// ```text
/// Q(a, x) = 1 - x^a / Γ(a + 1) - x^a / Γ(a) · Σₙ₌₁ (-x)ⁿ / (n! (a + n))
/// ```
///
/// with `1 - x^a / Γ(a + 1)` as `-expm1(a ln x - lgamma(1 + a))`, whose
/// argument keeps its relative precision for tiny `a` ([`lgamma_1p`]).
fn upper_series(a: f64, x: f64) -> f64 {
    let (mut power, mut sum) = (1.0, 0.0);
    for n in 1..MAX_STEPS {
        let n = n as f64;
        power *= -x / n;
        let term = power / (a + n);
        sum += term;
        if term.abs() <= f64::EPSILON / 2.0 * sum.abs() {
            break;
        }
    }
    let log_x = x.ln();
    let head = -(a * log_x - lgamma_1p(a)).exp_m1();
    (head - (a * log_x - libm::lgamma(a)).exp() * sum).clamp(0.0, 1.0)
}

/// Euler's constant γ.
pub const EULER: f64 = 0.5772156649015329;

/// ζ(2) … ζ(26) (mpmath, 40 digits, rounded to f64).
const ZETA: [f64; 25] = [
    1.6449340668482264,
    1.2020569031595942,
    1.0823232337111381,
    1.03692775514337,
    1.0173430619844492,
    1.008349277381923,
    1.0040773561979444,
    1.0020083928260821,
    1.000994575127818,
    1.0004941886041194,
    1.000246086553308,
    1.0001227133475785,
    1.0000612481350588,
    1.000030588236307,
    1.0000152822594086,
    1.0000076371976379,
    1.000003817293265,
    1.0000019082127165,
    1.0000009539620338,
    1.0000004769329869,
    1.0000002384505027,
    1.000000119219926,
    1.000000059608189,
    1.0000000298035034,
    1.0000000149015549,
];

/// `lgamma(1 + a)` to full relative precision for small `a` too: for
/// `|a| <= 0.2` its Taylor series `-γa + Σₖ₌₂ (-1)ᵏ ζ(k) aᵏ / k` (25 terms
/// leave under 1e-19), else `lgamma` of `1 + a` (whose rounding costs
/// less than ε there).
pub fn lgamma_1p(a: f64) -> f64 {
    if a.abs() > 0.2 {
        return libm::lgamma(1.0 + a);
    }
    // Horner from the highest power: Σ (-1)ᵏ ζ(k)/k aᵏ⁻²
    let mut acc = 0.0;
    for (i, z) in ZETA.iter().enumerate().rev() {
        let k = (i + 2) as f64;
        let sign = if (i + 2) % 2 == 0 { 1.0 } else { -1.0 };
        acc = acc * a + sign * z / k;
    }
    a * (-EULER + a * acc)
}

/// `Q(a, x) = x^a e^-x / Γ(a) · 1/(x + 1 - a - 1·(1 - a)/(x + 3 - a - …))`
/// by the modified Lentz method.
fn fraction(a: f64, x: f64) -> f64 {
    let f = factor(a, x, 0.0);
    if f == 0.0 {
        return 0.0;
    }
    const TINY: f64 = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..MAX_STEPS {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() <= f64::EPSILON {
            break;
        }
    }
    (f * h).min(1.0)
}
