//! The regularised incomplete gamma functions `P(a, x)` and `Q(a, x)` for
//! large `a` (from [`LARGE_A`] up to `f64::MAX`), in f64.
//!
//! Near `x = a` (`|x - a| / a < TEMME_RATIO`) they come from Temme's
//! uniform expansion (`igamma_temme`), in a fixed number of steps. Away
//! from it, the series (`x < a`) and the continued fraction (`x > a`) of
//! `statrs`, Cephes and TensorFlow converge fast (the series' terms shrink
//! by `x / a <= 0.7` at each step, the fraction takes a few dozen steps),
//! and for `a` beyond a few 1e4 their factor `x^a e^-x / Γ(a)` underflows,
//! so they return at once: no `(a, x)` takes more than about a hundred
//! steps.
//!
//! That factor, computed as `exp(a ln x - x - lgamma(a))`, is a difference
//! of numbers near `a ln a`, and its relative error grows like `a ε`
//! (`statrs`'s `P(1e15, 1e15)` was 0.0065 for 0.500000004). Here its
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

/// From this `a` on, the functions come from here (below it `statrs`'s
/// factor loses less than `LARGE_A · ε`, about 1e-14).
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
pub(crate) fn log_factor(a: f64, x: f64, shift: f64) -> f64 {
    let t = (x - a) / a;
    let inv = 1.0 / a;
    let inv2 = inv * inv;
    // Stirling: lgamma(a) - ((a - 1/2) ln a - a + ln(2π)/2)
    let s = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0)));
    let log_a = a.ln();
    a * log1pmx(t) + 0.5 * log_a - 0.5 * (2.0 * std::f64::consts::PI).ln() - s - shift * log_a
}

/// `P(a, x)` (or `Q(a, x)` when `upper`) for `a >= LARGE_A` and `x > 0`,
/// both finite: Temme's expansion near `x = a`, the series below, the
/// continued fraction above.
pub(crate) fn igamma(a: f64, x: f64, upper: bool) -> f64 {
    if ((x - a) / a).abs() < TEMME_RATIO {
        return super::igamma_temme::igamma(a, x, upper);
    }
    by_sums(a, x, upper)
}

/// P (or Q when `upper`) by the series below `a`, the continued fraction
/// above it.
fn by_sums(a: f64, x: f64, upper: bool) -> f64 {
    if x < a {
        let p = series(a, x);
        if upper {
            1.0 - p
        } else {
            p
        }
    } else {
        let q = fraction(a, x);
        if upper {
            q
        } else {
            1.0 - q
        }
    }
}

/// A bound on the steps of [`series`] and [`fraction`], never reached
/// (they take at most about a hundred with `|x - a| >= 0.3 a`).
const MAX_STEPS: usize = 1000;

/// `P(a, x) = x^a e^-x / Γ(a + 1) · Σ xⁿ / ((a + 1)…(a + n))`.
fn series(a: f64, x: f64) -> f64 {
    let f = log_factor(a, x, 1.0).exp();
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

/// `Q(a, x) = x^a e^-x / Γ(a) · 1/(x + 1 - a - 1·(1 - a)/(x + 3 - a - …))`
/// by the modified Lentz method.
fn fraction(a: f64, x: f64) -> f64 {
    let f = log_factor(a, x, 0.0).exp();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from scipy 1.17.1 (`gammainc`, `gammaincc`, Temme's
    /// expansion there), to 1e-14 relative (before Temme's expansion here,
    /// the sums' rounding over `9 sqrt(a)` terms cost `4e-17 sqrt(a)`).
    #[test]
    fn large_a_matches_scipy() {
        let cases = [
            (1e4, 1e4, 0.5013298083399552, false),
            (1e6, 1e6, 0.5001329807608725, false),
            (1e8, 1e8, 0.5000132980760141, false),
            (1e8, 99_980_000.0, 0.022744732581593558, false),
            (1e8, 100_020_000.0, 0.022755530774855204, true),
            (1e12, 1e12, 0.5000001329807602, false),
            (1e12, 999_998_000_000.0, 0.9772499220428144, true),
            (1e12, 1_000_002_000_000.0, 0.9772498140608813, false),
            (1e14, 1e14, 0.500000013298076, false),
            (1e15, 1e15, 0.5000000042052208, false),
            (1e15, 1e15, 0.4999999957947791, true),
        ];
        for (a, x, want, upper) in cases {
            let got = igamma(a, x, upper);
            assert!(
                ((got - want) / want).abs() < 1e-14,
                "{} ({a:e}, {x:e}) = {got}, scipy {want}",
                if upper { "Q" } else { "P" }
            );
        }
    }

    /// On both sides of the switch to Temme's expansion the methods agree.
    #[test]
    fn temme_meets_the_series_and_the_fraction() {
        for a in [100.0, 1e3, 1e4] {
            for (x, upper) in [(0.7 * a, false), (0.7 * a, true), (1.3 * a, true), (1.3 * a, false)] {
                let temme = super::super::igamma_temme::igamma(a, x, upper);
                let sums = by_sums(a, x, upper);
                assert!(((temme - sums) / sums).abs() < 1e-13, "{a} {x} {upper}: {temme} {sums}");
            }
        }
    }

    #[test]
    fn the_factor_agrees_with_the_direct_formula_where_that_is_exact() {
        for (a, x) in [(100.0, 80.0), (150.0, 150.5), (300.0, 420.0)] {
            let direct = a * f64::ln(x) - x - libm::lgamma(a);
            assert!((log_factor(a, x, 0.0) - direct).abs() < 1e-11, "{a} {x}");
        }
    }
}
