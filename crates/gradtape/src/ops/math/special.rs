//! Special functions (f32/f64, elementwise; binary ones broadcast):
//! `lgamma`, `digamma`, `polygamma`, `igamma`/`igammac` (regularised
//! incomplete gamma), `betainc`, `erfinv`, `ndtri`, `bessel_i0e`/`i1e`,
//! `log_sigmoid`, with the tests `is_nan`, `is_finite`, `is_inf` (the
//! guarded `xlogy`, `xlog1py`, `divide_no_nan` are in `guarded.rs`).
//!
//! Values come from `libm` (`lgamma`) and `statrs` (digamma, incomplete
//! beta, inverse erf), computed in f64, except the incomplete gamma
//! functions (`igamma.rs`: the series and continued fraction with
//! SciPy's choice between them, Temme's expansion near `x = a` for large
//! `a`; `statrs`'s lost `a · ε` and read tiny arguments as 0); `polygamma` (Hurwitz
//! zeta by Euler–Maclaurin) and the scaled Bessel functions (power series,
//! asymptotic expansion for large arguments) are written here. Gradients
//! are TensorFlow's, written with these same ops: `lgamma' = digamma`,
//! `digamma' = polygamma(1, ·)`, `polygamma(n)' = polygamma(n + 1)`;
//! `betainc` is differentiable in `x` only (as TF's), `igamma`/`igammac` in
//! `x` (`IgammaGradX`, TF's `x^(a-1) e^-x / Γ(a)` formed in f64, without
//! the loss of `a · ε` for large `a`; differentiable again in `a` and `x`)
//! and, to first order, in `a` (TF's `IgammaGradA`, here in f64; its
//! own gradient is an error, as TF has none). Outside a function's
//! domain the value is NaN, as TensorFlow (e.g. `igamma` with `a <= 0`,
//! `erfinv` beyond `[-1, 1]`).

use std::f64::consts::PI;

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::ops::desc::{Op, SpecialOp};
use crate::ops::linalg::decomp::{from_f64s, host_f64s};
use crate::ops::{bind, expect_float, expect_same_dtype};
use crate::tensor::layout::broadcast_shapes;
use crate::tensor::Tensor;

/// `ψ⁽ⁿ⁾(x)` for an integer order `n >= 0`.
fn polygamma(n: f64, x: f64) -> f64 {
    if n.fract() != 0.0 || n < 0.0 || x.is_nan() {
        return f64::NAN;
    }
    if n == 0.0 {
        return digamma(x);
    }
    // (-1)^(n+1) n! ζ(n + 1, x)
    let sign = if (n as u64).is_multiple_of(2) { -1.0 } else { 1.0 };
    sign * libm::tgamma(n + 1.0) * hurwitz_zeta(n + 1.0, x)
}

/// `ψ(x)`: NaN at the poles 0, -0 and the negative integers (as
/// TensorFlow's and JAX's; `statrs` gives -inf there). Left of 0 by
/// reflection, `ψ(x) = ψ(1 - x) - π cot(πx)`, with `cot(πx)` from `x`'s
/// distance to the nearest integer (exact), not from `πx` (`statrs`'s
/// form, whose rounding of `πx` lost the distance beside a pole: ψ at
/// `-1 + 2^-40` came out -1.09946e12 for -1.09951e12).
fn digamma(x: f64) -> f64 {
    if x <= 0.0 && x.floor() == x {
        return f64::NAN;
    }
    if x < 0.0 {
        let r = x - x.round();
        return statrs::function::gamma::digamma(1.0 - x) - PI / (PI * r).tan();
    }
    statrs::function::gamma::digamma(x)
}

/// `ζ(s, q) = Σₖ (q + k)^-s` for `s > 1` (Euler–Maclaurin with ten or more
/// direct terms and eight Bernoulli corrections); a negative `q` needs an
/// integer `s` (NaN otherwise); at a non-positive integer `q` (a pole) it
/// is +inf for an even `s` and NaN otherwise, as TensorFlow's (Eigen's)
/// `zeta`, so that `polygamma(n, 0)` is +inf for odd `n` and NaN for even;
/// `q = -inf` counts as such a pole (as Eigen's), `q = +inf` gives 0.
fn hurwitz_zeta(s: f64, q: f64) -> f64 {
    // B_2k / (2k)!
    const B: [f64; 8] = [
        1.0 / 12.0,
        -1.0 / 720.0,
        1.0 / 30240.0,
        -1.0 / 1209600.0,
        1.0 / 47900160.0,
        -691.0 / 1307674368000.0,
        1.0 / 74724249600.0,
        -3617.0 / 10670622842880000.0,
    ];
    // (`floor`, not `fract`: -inf is a pole too, where `fract` is NaN and
    // the count of direct terms below would overflow)
    let pole = q.floor() == q;
    if q <= 0.0 && (pole || s.fract() != 0.0) {
        let even_s = s.fract() == 0.0 && (s % 2.0) == 0.0;
        return if pole && even_s { f64::INFINITY } else { f64::NAN };
    }
    if q < -64.0 {
        // (an integer s here) summed directly, -q terms: a long loop,
        // hours for -1e12 + 0.5
        return zeta_far_left(s, q);
    }
    // direct terms until the argument is large (a negative q included:
    // (q + k)^-s with an integer s)
    let n_direct = 10 + if q < 0.0 { (-q).ceil() as usize } else { 0 };
    let mut sum: f64 = (0..n_direct).map(|k| (q + k as f64).powf(-s)).sum();
    let a = q + n_direct as f64;
    sum += a.powf(1.0 - s) / (s - 1.0) + 0.5 * a.powf(-s);
    // Σ B_2k/(2k)! · s (s+1) ... (s+2k-2) · a^(-s-2k+1)
    let mut rising = s; // s (s+1) ... (s+2k-2)
    let mut pow = a.powf(-s - 1.0);
    for (k, b) in B.iter().enumerate() {
        let term = b * rising * pow;
        sum += term;
        if term.abs() < 1e-17 * sum.abs() {
            break;
        }
        let j = 2.0 * k as f64;
        rising *= (s + j + 1.0) * (s + j + 2.0);
        pow /= a * a;
    }
    sum
}

/// [`hurwitz_zeta`] at an integer `s` and a `q` far left of 0, off the
/// poles, by reflection: with `n = s - 1` and `c = cot(πq)`,
/// `ζ(s, q) = (-1)ⁿ (ζ(s, 1 - q) + πˢ Pₙ(c) / n!)`, where
/// `dⁿ/dqⁿ cot(πq) = πⁿ Pₙ(cot(πq))` (`P₀(c) = c`,
/// `Pₖ₊₁(c) = -(1 + c²) Pₖ'(c)`); `1 - q` is far right, a few terms. For
/// `s` past 40 (where `Pₙ`'s coefficients grow past `n!`), the terms
/// within 6 of 0: the others add less than `6^(1-s)`, against at least
/// `2^s` from the nearest.
fn zeta_far_left(s: f64, q: f64) -> f64 {
    if s > 40.0 {
        let k0 = (-q).floor();
        return (-6..=7).map(|k| (q + k0 + k as f64).powf(-s)).sum();
    }
    let n = s as usize - 1;
    // Pₙ's coefficients, lowest power first
    let mut p = vec![0.0, 1.0];
    for _ in 0..n {
        // -(1 + c²) P'(c)
        let d: Vec<f64> = (1..p.len()).map(|i| i as f64 * p[i]).collect();
        let mut next = vec![0.0; d.len() + 2];
        for (i, &v) in d.iter().enumerate() {
            next[i] -= v;
            next[i + 2] -= v;
        }
        p = next;
    }
    // cot(πq) from q's distance to the nearest integer (exact), not πq
    let r = q - q.round();
    let c = 1.0 / (PI * r).tan();
    let pn = p.iter().rev().fold(0.0, |acc, &v| acc * c + v);
    let fact: f64 = (1..=n).map(|i| i as f64).product();
    let sign = if n.is_multiple_of(2) { 1.0 } else { -1.0 };
    sign * (hurwitz_zeta(s, 1.0 - q) + PI.powf(s) * pn / fact)
}

/// `exp(-|x|) I_ν(x)` for `ν` 0 or 1.
fn bessel_ie(nu: u32, x: f64) -> f64 {
    let ax = x.abs();
    if x.is_nan() {
        return f64::NAN;
    }
    let v = if ax > 40.0 {
        // asymptotic: e^x / sqrt(2πx) Σ (-1)^k a_k(ν) / x^k
        let mu = 4.0 * (nu * nu) as f64;
        let mut term = 1.0;
        let mut sum = 1.0;
        for k in 1..60 {
            let odd = (2 * k - 1) as f64;
            term *= -(mu - odd * odd) / (k as f64 * 8.0 * ax);
            sum += term;
            if term.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum / (2.0 * PI * ax).sqrt()
    } else {
        // Σ (x/2)^(2k+ν) / (k! (k+ν)!), scaled by e^-|x| term by term
        let h = ax / 2.0;
        let mut term = if nu == 0 { 1.0 } else { h };
        let mut sum = term;
        for k in 1..500 {
            term *= h * h / (k as f64 * (k + nu as usize) as f64);
            sum += term;
            if term < 1e-17 * sum {
                break;
            }
        }
        sum * (-ax).exp()
    };
    if nu == 1 && x < 0.0 {
        -v
    } else {
        v
    }
}

/// The function a descriptor names, on f64 arguments.
pub(crate) fn scalar(op: &SpecialOp, a: f64, b: f64, c: f64) -> f64 {
    use statrs::function::{beta, erf};
    match op {
        SpecialOp::Lgamma => libm::lgamma(a),
        SpecialOp::Digamma => digamma(a),
        SpecialOp::Erfinv => {
            if a.abs() > 1.0 || a.is_nan() {
                f64::NAN
            } else {
                erf::erf_inv(a)
            }
        }
        SpecialOp::Ndtri => {
            if !(0.0..=1.0).contains(&a) {
                f64::NAN
            } else {
                -std::f64::consts::SQRT_2 * erf::erfc_inv(2.0 * a)
            }
        }
        SpecialOp::I0e => bessel_ie(0, a),
        SpecialOp::I1e => bessel_ie(1, a),
        SpecialOp::Polygamma => polygamma(a, b),
        SpecialOp::Igamma | SpecialOp::Igammac => {
            let upper = *op == SpecialOp::Igammac;
            if a.is_nan() || b.is_nan() || a <= 0.0 || b < 0.0 {
                f64::NAN
            } else if b == 0.0 {
                if upper {
                    1.0
                } else {
                    0.0
                }
            } else if b.is_infinite() {
                if upper {
                    0.0
                } else {
                    1.0
                }
            } else if a.is_infinite() {
                if upper {
                    1.0
                } else {
                    0.0
                }
            } else {
                super::igamma::igamma(a, b, upper)
            }
        }
        SpecialOp::IgammaGradA => igamma_da(a, b),
        SpecialOp::IgammaGradX => igamma_dx(a, b),
        SpecialOp::Betainc => {
            if a.is_nan() || b.is_nan() || c.is_nan() {
                f64::NAN
            } else {
                beta::checked_beta_reg(a, b, c).unwrap_or(f64::NAN)
            }
        }
    }
}

/// Broadcasts float operands of one dtype to their common shape.
fn operands(op: &'static str, xs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let mut shape: Vec<usize> = Vec::new();
    for x in xs {
        expect_float(op, x)?;
        expect_same_dtype(op, xs[0], x)?;
        shape = broadcast_shapes(op, &shape, x.shape())?.to_vec();
    }
    xs.iter()
        .map(|x| {
            if x.shape() == shape.as_slice() {
                Ok((*x).clone())
            } else {
                x.broadcast_to(&shape)
            }
        })
        .collect()
}

/// Evaluates `op` elementwise (in f64) on broadcast operands and binds it
/// with `rule(inputs, output, cotangent)`, which gives the cotangent of
/// the last input (the others get `None` unless `rule_all` gives them).
fn apply(
    op: SpecialOp,
    xs: &[&Tensor],
    rule: impl Fn(&[Tensor], &Tensor, &Tensor, &[bool]) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Result<Tensor> {
    let name = op.public_name();
    let ins = operands(name, xs)?;
    // no GPU kernels: host values, under soft device placement
    let device = crate::kernels::gpu::placement(name, xs)?.unwrap_or_default();
    let vals: Vec<Vec<f64>> = ins.iter().map(|t| host_f64s(name, t)).collect::<Result<_>>()?;
    let n = ins[0].numel();
    let at = |k: usize, i: usize| vals.get(k).map_or(0.0, |v| v[i]);
    let out: Vec<f64> = (0..n).map(|i| scalar(&op, at(0, i), at(1, i), at(2, i))).collect();
    let y = from_f64s(out, ins[0].shape(), ins[0].dtype(), device)?;
    let refs: Vec<&Tensor> = ins.iter().collect();
    let saved = ins.clone();
    Ok(bind(Op::Special(op), &refs, y, move |y| {
        let y = y.clone();
        vjp(move |g, needs| Ok(rule(&saved, &y, &g[0], needs)?.into_iter().collect()))
    }))
}

impl Tensor {
    /// `log |Γ(x)|` (`tf.math.lgamma`); d/dx is `digamma`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let y = Tensor::vector(&[5.0f64, -0.5]).lgamma()?.to_vec::<f64>()?;
    /// assert!((y[0] - 24f64.ln()).abs() < 1e-14 && (y[1] - (2.0 * std::f64::consts::PI.sqrt()).ln()).abs() < 1e-14);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn lgamma(&self) -> Result<Tensor> {
        apply(SpecialOp::Lgamma, &[self], |x, _, g, _| {
            Ok(vec![Some(g.mul(&x[0].digamma()?)?)])
        })
    }

    /// `ψ(x) = d/dx log Γ(x)` (`tf.math.digamma`); d/dx is `polygamma(1, x)`.
    pub fn digamma(&self) -> Result<Tensor> {
        apply(SpecialOp::Digamma, &[self], |x, _, g, _| {
            Ok(vec![Some(g.mul(&Tensor::polygamma(&x[0].scalar_like(1.0)?, &x[0])?)?)])
        })
    }

    /// `ψ⁽ⁿ⁾(x)`, the `n`-th derivative of `digamma` (`tf.math.polygamma`;
    /// `n` a tensor of non-negative integers in the float dtype; others give
    /// NaN). Differentiable in `x`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let y = Tensor::polygamma(&Tensor::scalar(1.0f64), &Tensor::scalar(1.0f64))?;
    /// assert!((y.to_scalar::<f64>()? - std::f64::consts::PI.powi(2) / 6.0).abs() < 1e-14);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn polygamma(n: &Tensor, x: &Tensor) -> Result<Tensor> {
        apply(SpecialOp::Polygamma, &[n, x], |v, _, g, _| {
            let next = Tensor::polygamma(&v[0].add_scalar(1.0)?, &v[1])?;
            Ok(vec![None, Some(g.mul(&next)?)])
        })
    }

    /// The regularised lower incomplete gamma function `P(a, x)`
    /// (`tf.math.igamma`), differentiable in `x`, and in `a` to first order
    /// (TF's `IgammaGradA`; a second derivative through it is an error).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let p = Tensor::igamma(&Tensor::scalar(1.0f64), &Tensor::scalar(2.0f64))?;
    /// assert!((p.to_scalar::<f64>()? - (1.0 - (-2.0f64).exp())).abs() < 1e-14);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn igamma(a: &Tensor, x: &Tensor) -> Result<Tensor> {
        apply(SpecialOp::Igamma, &[a, x], |v, _, g, needs| {
            igamma_grad(v, g, needs, 1.0)
        })
    }

    /// The regularised upper incomplete gamma function `Q(a, x) = 1 - P(a, x)`
    /// (`tf.math.igammac`), differentiable as [`igamma`](Self::igamma).
    pub fn igammac(a: &Tensor, x: &Tensor) -> Result<Tensor> {
        apply(SpecialOp::Igammac, &[a, x], |v, _, g, needs| {
            igamma_grad(v, g, needs, -1.0)
        })
    }

    /// The regularised incomplete beta function `I_x(a, b)`
    /// (`tf.math.betainc`), differentiable in `x` (as TensorFlow: `a` and
    /// `b` get no gradient).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let i = Tensor::betainc(&Tensor::scalar(2.0f64), &Tensor::scalar(1.0f64), &Tensor::scalar(0.5f64))?;
    /// assert!((i.to_scalar::<f64>()? - 0.25).abs() < 1e-14);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn betainc(a: &Tensor, b: &Tensor, x: &Tensor) -> Result<Tensor> {
        apply(SpecialOp::Betainc, &[a, b, x], |v, _, g, _| {
            let (a, b, x) = (&v[0], &v[1], &v[2]);
            let lbeta = a.lgamma()?.add(&b.lgamma()?)?.sub(&a.add(b)?.lgamma()?)?;
            // xlogy / xlog1py (as TF): at x = 0 with a = 1 (x = 1 with b = 1)
            // the term is 0, not 0 · -inf = NaN
            let log_density =
                Tensor::xlogy(&a.add_scalar(-1.0)?, x)?.add(&Tensor::xlog1py(&b.add_scalar(-1.0)?, &x.neg()?)?)?;
            Ok(vec![None, None, Some(g.mul(&log_density.sub(&lbeta)?.exp()?)?)])
        })
    }

    /// The inverse of `erf` on `[-1, 1]` (`tf.math.erfinv`); d/dx is
    /// `√π/2 · exp(erfinv(x)²)`.
    pub fn erfinv(&self) -> Result<Tensor> {
        apply(SpecialOp::Erfinv, &[self], |_, y, g, _| {
            Ok(vec![Some(g.mul(&y.square()?.exp()?.mul_scalar(PI.sqrt() / 2.0)?)?)])
        })
    }

    /// The quantile function of the standard normal (`tf.math.ndtri`);
    /// d/dp is `√(2π) · exp(ndtri(p)² / 2)`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let z = Tensor::scalar(0.975f64).ndtri()?.to_scalar::<f64>()?;
    /// assert!((z - 1.959963984540054).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn ndtri(&self) -> Result<Tensor> {
        apply(SpecialOp::Ndtri, &[self], |_, y, g, _| {
            Ok(vec![Some(g.mul(
                &y.square()?.mul_scalar(0.5)?.exp()?.mul_scalar((2.0 * PI).sqrt())?,
            )?)])
        })
    }

    /// `exp(-|x|) I₀(x)`, the exponentially scaled modified Bessel function
    /// of order 0 (`tf.math.bessel_i0e`); d/dx is `i1e(x) - sign(x) i0e(x)`.
    pub fn bessel_i0e(&self) -> Result<Tensor> {
        apply(SpecialOp::I0e, &[self], |x, y, g, _| {
            Ok(vec![Some(g.mul(&x[0].bessel_i1e()?.sub(&x[0].sign()?.mul(y)?)?)?)])
        })
    }

    /// `exp(-|x|) I₁(x)` (`tf.math.bessel_i1e`); d/dx is
    /// `i0e(x) - i1e(x) (sign(x) + 1/x)`, and near 0 (below 1e-2, 1e-4 in
    /// f64) its series `½ - |x| + 15x²/16 - 7|x|³/12 + 35x⁴/128`: the second
    /// derivative of the exact form cancels two terms of size `1/(2x)`
    /// (in f32 at 1e-8 it gave 0, where the value is -1; TensorFlow's gives 8).
    pub fn bessel_i1e(&self) -> Result<Tensor> {
        apply(SpecialOp::I1e, &[self], |x, y, g, _| {
            let x = &x[0];
            let near = if x.dtype() == crate::tensor::DType::F64 {
                1e-4
            } else {
                1e-2
            };
            let small = x.abs()?.lt_scalar(near)?;
            let safe = Tensor::where_(&small, &x.scalar_like(1.0)?, x)?;
            // the series on the small points only (0 elsewhere): at 1e300
            // its x⁴ is inf, and a derivative through the branch `where`
            // does not take would be 0 · inf
            let near_x = Tensor::where_(&small, x, &x.scalar_like(0.0)?)?;
            let (ax, x2) = (near_x.abs()?, near_x.square()?);
            let exact = safe
                .bessel_i0e()?
                .sub(&y.mul(&safe.sign()?.add(&safe.reciprocal()?)?)?)?;
            let series = ax
                .mul_scalar(-1.0)?
                .add_scalar(0.5)?
                .add(&x2.mul_scalar(15.0 / 16.0)?)?
                .sub(&x2.mul(&ax)?.mul_scalar(7.0 / 12.0)?)?
                .add(&x2.square()?.mul_scalar(35.0 / 128.0)?)?;
            Ok(vec![Some(g.mul(&Tensor::where_(&small, &series, &exact)?)?)])
        })
    }
}

/// d/dx P(a, x) = x^(a-1) e^-x / Γ(a) by [`igamma_grad_x`], and d/da
/// P(a, x) by [`igamma_grad_a`] (`sign` -1 for Q = 1 - P), as TensorFlow's
/// `IgammaGrad`/`IgammaGradA`.
fn igamma_grad(v: &[Tensor], g: &Tensor, needs: &[bool], sign: f64) -> Result<Vec<Option<Tensor>>> {
    let (a, x) = (&v[0], &v[1]);
    let da = if needs[0] {
        Some(g.mul(&igamma_grad_a(a, x)?.mul_scalar(sign)?)?)
    } else {
        None
    };
    let dx = if needs[1] {
        Some(g.mul(&igamma_grad_x(a, x)?.mul_scalar(sign)?)?)
    } else {
        None
    };
    Ok(vec![da, dx])
}

/// `∂P(a, x)/∂x = x^(a-1) e^-x / Γ(a)` elementwise (in f64, see
/// [`igamma_dx`]), differentiable again: its derivatives are itself times
/// `(a - 1)/x - 1` in `x` and `ln x - ψ(a)` in `a` (those of TF's
/// `exp((a - 1) ln x - x - lgamma(a))`).
pub(crate) fn igamma_grad_x(a: &Tensor, x: &Tensor) -> Result<Tensor> {
    apply(SpecialOp::IgammaGradX, &[a, x], |v, y, g, needs| {
        let (a, x) = (&v[0], &v[1]);
        let gy = g.mul(y)?;
        let da = if needs[0] {
            Some(gy.mul(&x.log()?.sub(&a.digamma()?)?)?)
        } else {
            None
        };
        let dx = if needs[1] {
            Some(gy.mul(&a.add_scalar(-1.0)?.div(x)?.add_scalar(-1.0)?)?)
        } else {
            None
        };
        Ok(vec![da, dx])
    })
}

/// `∂P(a, x)/∂a` elementwise (TF's `IgammaGradA`, computed in f64). Its
/// own derivatives are not implemented (TF has none either): asking for
/// one is an error naming the op.
pub(crate) fn igamma_grad_a(a: &Tensor, x: &Tensor) -> Result<Tensor> {
    apply(SpecialOp::IgammaGradA, &[a, x], |_, _, _, _| {
        Err(Error::invalid(
            "igamma",
            "the second derivative with respect to `a` (the gradient of IgammaGradA) is not implemented",
        ))
    })
}

/// `x^(a-1) e^-x / Γ(a)`, TF's `exp((a - 1) ln x - x - lgamma(a))` (NaN
/// at `x = 0` with `a = 1` and at `x = inf`, as TF's), but for finite
/// `a >= LARGE_A` and `0 < x < inf` from the factor of `igamma.rs`,
/// which keeps full precision where that loses `a · ε` (at `a = x = 1e15`
/// it was 3% off).
fn igamma_dx(a: f64, x: f64) -> f64 {
    if a >= super::igamma::LARGE_A && a.is_finite() && x > 0.0 && x.is_finite() {
        let log_f = super::igamma::log_factor(a, x, 0.0);
        let f = log_f.exp();
        // (f / x: one rounding; where f is subnormal, in the exponent)
        return if f >= f64::MIN_POSITIVE {
            f / x
        } else {
            (log_f - x.ln()).exp()
        };
    }
    ((a - 1.0) * x.ln() - x - libm::lgamma(a)).exp()
}

/// `∂P(a, x)/∂a` in f64, as Eigen's `igamma_der_a` (Cephes' algorithms
/// carried through forward-mode derivatives): for `x > 1` and `x > a`, minus
/// the derivative of `Q = x^a e^-x / Γ(a) · CF` with the continued
/// fraction's derivative by its recurrences; otherwise the derivative of the
/// series `P = x^a e^-x / Γ(a + 1) · Σ xⁿ / ((a+1)…(a+n))`; for large `a`
/// near `x` (where those take `√a` steps), Temme's expansion differentiated
/// (`igamma_temme::igamma_da`). 0 at `x = 0` and `x = inf`; NaN outside the
/// domain (`a <= 0`, `x < 0`, NaN).
fn igamma_da(a: f64, x: f64) -> f64 {
    if a.is_nan() || x.is_nan() || a <= 0.0 || x < 0.0 || a.is_infinite() {
        return f64::NAN;
    }
    if x == 0.0 || x.is_infinite() {
        return 0.0;
    }
    if a >= super::igamma::LARGE_A && ((x - a) / a).abs() < super::igamma_temme::TEMME_RATIO {
        // (the recurrences below take of the order of √a steps here)
        return super::igamma_temme::igamma_da(a, x);
    }
    const EPS: f64 = f64::EPSILON / 2.0;
    if x > 1.0 && x > a {
        let ax = super::igamma::factor(a, x, 0.0);
        if ax == 0.0 {
            return 0.0;
        }
        const BIG: f64 = 4.503599627370496e15;
        let mut y = 1.0 - a;
        let mut z = x + y + 1.0;
        let mut c = 0.0;
        let (mut pkm2, mut qkm2, mut pkm1, mut qkm1) = (1.0, x, x + 1.0, z * x);
        let mut ans = pkm1 / qkm1;
        let (mut dpkm2, mut dqkm2, mut dpkm1, mut dqkm1) = (0.0, 0.0, 0.0, -x);
        let mut dans = (dpkm1 - ans * dqkm1) / qkm1;
        for _ in 0..2000 {
            c += 1.0;
            y += 1.0;
            z += 2.0;
            let yc = y * c;
            let pk = pkm1 * z - pkm2 * yc;
            let qk = qkm1 * z - qkm2 * yc;
            let dpk = dpkm1 * z - pkm1 - dpkm2 * yc + pkm2 * c;
            let dqk = dqkm1 * z - qkm1 - dqkm2 * yc + qkm2 * c;
            if qk != 0.0 {
                ans = pk / qk;
                let prev = dans;
                dans = (dpk - ans * dqk) / qk;
                if (dans - prev).abs() <= EPS {
                    break;
                }
            }
            (pkm2, pkm1, qkm2, qkm1) = (pkm1, pk, qkm1, qk);
            (dpkm2, dpkm1, dqkm2, dqkm1) = (dpkm1, dpk, dqkm1, dqk);
            if pk.abs() > BIG {
                for t in [
                    &mut pkm2, &mut pkm1, &mut qkm2, &mut qkm1, &mut dpkm2, &mut dpkm1, &mut dqkm2, &mut dqkm1,
                ] {
                    *t /= BIG;
                }
            }
        }
        let dlogax = x.ln() - digamma(a);
        -(ax * (ans * dlogax + dans))
    } else {
        let ax = super::igamma::factor(a, x, 1.0);
        if ax == 0.0 {
            return 0.0;
        }
        let (mut r, mut c, mut ans, mut dc, mut dans) = (a, 1.0, 1.0, 0.0, 0.0);
        for _ in 0..2000 {
            r += 1.0;
            let term = x / r;
            dc = term * dc - x / (r * r) * c;
            dans += dc;
            c *= term;
            ans += c;
            if dc.abs() <= EPS * dans.abs() {
                break;
            }
        }
        let dlogax = x.ln() - digamma(a + 1.0);
        ax * (ans * dlogax + dans)
    }
}

impl Tensor {
    /// `log(sigmoid(x)) = -softplus(-x)`, stable for large `|x|`
    /// (`tf.math.log_sigmoid`).
    pub fn log_sigmoid(&self) -> Result<Tensor> {
        let run = || self.neg()?.softplus()?.neg();
        expect_float("log_sigmoid", self)?;
        run().map_err(|e| e.for_op("log_sigmoid"))
    }

    /// Whether each element is NaN (bool; false for integer dtypes).
    pub fn is_nan(&self) -> Result<Tensor> {
        self.ne(self).map_err(|e| e.for_op("is_nan"))
    }

    /// Whether each element is finite (bool; true for integer dtypes).
    pub fn is_finite(&self) -> Result<Tensor> {
        let run = || {
            if !self.dtype().is_float() {
                return self.eq(self);
            }
            // x - x is 0 for finite x, NaN for ±inf and NaN
            let d = self.sub(self)?;
            d.eq(&d)
        };
        run().map_err(|e| e.for_op("is_finite"))
    }

    /// Whether each element is +inf or -inf (bool; false for integer dtypes).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f64, f64::INFINITY, f64::NAN, f64::NEG_INFINITY]);
    /// assert_eq!(x.is_inf()?.to_vec::<bool>()?, vec![false, true, false, true]);
    /// assert_eq!(x.is_nan()?.to_vec::<bool>()?, vec![false, false, true, false]);
    /// assert_eq!(x.is_finite()?.to_vec::<bool>()?, vec![true, false, false, false]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn is_inf(&self) -> Result<Tensor> {
        let run = || {
            if !self.dtype().is_float() {
                return self.ne(self);
            }
            self.abs()?.eq(&self.scalar_like(f64::INFINITY)?)
        };
        run().map_err(|e| e.for_op("is_inf"))
    }
}
