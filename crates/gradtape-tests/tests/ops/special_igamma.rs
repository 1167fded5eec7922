//! The incomplete gamma functions (`igamma`, `igammac`) at their edges, a
//! part of `special.rs` (whose helpers it uses): the gradient in `a`
//! against TensorFlow 2.21 and mpmath, huge, large, extreme and tiny
//! arguments against scipy and mpmath (the sources are named at each
//! test), and second derivatives.

use gradtape::{GradientTape, Result, Tensor};

use super::special::{close, grad, v};

#[test]
fn igamma_gradient_in_a_matches_tensorflow_and_mpmath() -> Result<()> {
    // points in the series region (x <= 1 or x <= a) and in the continued
    // fraction's (x > 1 and x > a), and x = 0
    let a = v(&[0.5, 2.0, 3.0, 10.0, 0.2, 30.0, 1.5]);
    let x = v(&[0.2, 3.0, 0.5, 12.0, 5.0, 25.0, 0.0]);
    // mpmath (30 digits): mp.diff(lambda s: mp.gammainc(s, 0, x,
    // regularized=True), a); TF 2.21's tf.math.igamma gradient in a agrees
    // to 1e-14 relative ([-0.8201614064863386, -0.19742541957920223,
    // -0.02852023587882894, -0.09717797203717947, -0.0025090884820016795,
    // -0.04995487742583447, 0.0])
    let want = [
        -0.8201614064863388,
        -0.19742541957920248,
        -0.02852023587882894,
        -0.09717797203717965,
        -0.0025090884820016843,
        -0.049954877425834855,
        0.0,
    ];
    close(&grad(&a, |a| Tensor::igamma(a, &x))?, &want, 1e-12);
    let neg: Vec<f64> = want.iter().map(|w| -w).collect();
    close(&grad(&a, |a| Tensor::igammac(a, &x))?, &neg, 1e-12);
    // both inputs at once, through the checker (first order: the gradient
    // in a has no gradient itself)
    let opts = gradtape::CheckOptions {
        second_order: false,
        ..Default::default()
    };
    let a = v(&[0.7, 2.5, 4.0, 1.2]);
    let x = v(&[0.4, 3.5, 2.0, 6.0]);
    gradtape::check_gradients(
        |t| Tensor::igamma(&t[0], &t[1])?.square(),
        &[a.clone(), x.clone()],
        &opts,
    )?;
    gradtape::check_gradients(|t| Tensor::igammac(&t[0], &t[1])?.square(), &[a, x], &opts)?;
    Ok(())
}

#[test]
fn incomplete_gamma_of_huge_arguments_returns_the_normal_limit() -> Result<()> {
    // found by the fuzz: igamma(1e30, 1e30) never returned. For huge a,
    // P(a, x) tends to Phi((x - a) / sqrt(a)) (central limit theorem):
    // P(a, a) -> 1/2, P(a, a + 3 sqrt(a)) -> Phi(3) = 0.9986501019683699
    // (Phi(3) from scipy.stats.norm.cdf(3)); a = 1e16 so that a + 3e8 is
    // exact in f64
    let p =
        |a: f64, x: f64| -> Result<f64> { Tensor::igamma(&Tensor::scalar(a), &Tensor::scalar(x))?.to_scalar::<f64>() };
    let q =
        |a: f64, x: f64| -> Result<f64> { Tensor::igammac(&Tensor::scalar(a), &Tensor::scalar(x))?.to_scalar::<f64>() };
    assert!((p(1e30, 1e30)? - 0.5).abs() < 1e-12);
    assert!((q(1e30, 1e30)? - 0.5).abs() < 1e-12);
    assert!((p(1e16, 1e16 + 3e8)? - 0.998_650_101_968_369_9).abs() < 1e-9);
    assert!((q(1e16, 1e16 - 3e8)? - 0.998_650_101_968_369_9).abs() < 1e-9);
    assert_eq!(p(f64::MAX, 1.0)?, 0.0);
    assert!((p(f64::MAX, f64::MAX)? - 0.5).abs() < 1e-12);
    let f32_half = Tensor::igamma(&Tensor::scalar(1e30f32), &Tensor::scalar(1e30f32))?.to_scalar::<f32>()?;
    assert!((f32_half - 0.5).abs() < 1e-6, "{f32_half}");
    Ok(())
}

/// `got` within `tol` of `want` relative to `|want|` (for values far below
/// 1), and exactly `want` where that is 0, infinite or NaN.
fn rel_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if *w == 0.0 || w.is_infinite() {
            g == w
        } else {
            ((g - w) / w).abs() <= tol
        };
        assert!(ok, "{what}[{i}]: {g:e}, want {w:e} (all: {got:?})");
    }
}

/// `P` and `Q` of `(a, x)` elementwise, f64.
fn p_and_q(a: &[f64], x: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
    let (a, x) = (v(a), v(x));
    Ok((Tensor::igamma(&a, &x)?.to_vec()?, Tensor::igammac(&a, &x)?.to_vec()?))
}

const TWO_62: f64 = 4_611_686_018_427_387_904.0;
const TWO_31: f64 = 2_147_483_648.0;

#[test]
fn incomplete_gamma_of_large_a_matches_scipy_and_mpmath() -> Result<()> {
    // Temme's expansion near x = a (before it, the series and continued
    // fraction took ~9 sqrt(a) steps: 0.3 s at a = 1e15, minutes at 1e30).
    // Reference: scipy 1.17.1 gammainc / gammaincc (Temme there too) for the
    // first ten; scipy is off beyond |x - a| > 4.5 sqrt(a) at large a (its
    // series stops at 2000 terms: 1.5e-25 for the eleventh), so those come
    // from mpmath (60 digits: the series x^a e^-x / Gamma(a+1) sum x^n /
    // ((a+1)...(a+n)) for a <= 1e8, DLMF 8.12.3 with the exact c0, c1 for
    // a >= 1e10, whose O(a^-2) remainder is below f64)
    let cases = [
        (1e15, 1e15, 0.5000000042052208, 0.4999999957947791),
        (1e30, 1e30, 0.5000000000000001, 0.4999999999999999),
        (1e300, 1e300, 0.5, 0.5),
        (1e6, 1e6 - 1e3, 0.15865521357430365, 0.8413447864256963),
        (1e6, 1e6 + 1e3, 0.8413447863683402, 0.15865521363165971),
        (1e10, 1e10, 0.5000013298076014, 0.4999986701923987),
        (150.0, 140.0, 0.2095436239186071, 0.790456376081393),
        (TWO_62, TWO_62, 0.500000000061924, 0.49999999993807603),
        (TWO_62, TWO_62 - 3.0 * TWO_31, 0.0013498980261267873, 0.9986501019738733),
        (TWO_62, TWO_62 + 3.0 * TWO_31, 0.9986501019628666, 0.0013498980371334016),
        (1e12, 1e12 - 1e7, 7.617314210603466e-24, 1.0),
        (1e4, 1.29e4, 1.0, 3.810220167502291e-156),
    ];
    let a: Vec<f64> = cases.iter().map(|c| c.0).collect();
    let x: Vec<f64> = cases.iter().map(|c| c.1).collect();
    let (p, q) = p_and_q(&a, &x)?;
    // (1.7e-13 for Q(1e4, 1.29e4) = 3.8e-156: a tail's condition number is
    // its exponent, here 357, so that one rounding of x costs 4e-14)
    rel_close("P", &p, &cases.iter().map(|c| c.2).collect::<Vec<_>>(), 1e-14);
    rel_close("Q", &q, &cases.iter().map(|c| c.3).collect::<Vec<_>>(), 3e-13);
    // far from x = a: 0 and 1 at once, whatever the size (scipy agrees;
    // TF 2.21 gives 2e-297 for P(1e300, 1e300) and NaN for Q)
    let inf = f64::INFINITY;
    let a = [1e300, 1e30, 1e15, f64::MAX, 1e-300, 0.5, inf, 1e300, f64::MAX];
    let x = [1.0, 1e12, 2e15, 1e300, 1e300, 1e300, 1.0, inf, f64::MAX];
    let (p, q) = p_and_q(&a, &x)?;
    assert_eq!(p, [0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5]);
    assert_eq!(q, [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5]);
    // outside the domain: NaN, as TF
    let (p, q) = p_and_q(
        &[0.0, -1e300, 1e300, f64::NAN, 1e30],
        &[1.0, 1e300, -1e300, 1e30, f64::NAN],
    )?;
    assert!(p.iter().chain(&q).all(|v| v.is_nan()), "{p:?} {q:?}");
    Ok(())
}

#[test]
fn incomplete_gamma_gradients_for_large_a_match_mpmath() -> Result<()> {
    let a = v(&[1e15, 1e30, 1e300, 1e6, 1e10, 150.0, TWO_62, 1e12, 1e4]);
    let x = v(&[
        1e15,
        1e30,
        1e300,
        1e6 + 1e3,
        1e10,
        140.0,
        TWO_62 - 3.0 * TWO_31,
        1e12 - 1e7,
        1.29e4,
    ]);
    // d/dx: x^(a-1) e^-x / Gamma(a) in mpmath (700 digits); TF's (and
    // scipy.stats.gamma.pdf's) exp((a-1) ln x - x - lgamma(a)) in f64 gives
    // 3.8e-11, 1.0, 1.0, 2.42e-4 (8e-10 off), 3.98946e-6 (1e-5 off), ...
    let dx = [
        1.2615662610100799e-8,
        3.989422804014327e-16,
        3.9894228040143264e-151,
        0.00024180950473148182,
        3.989422803981082e-6,
        0.024606378364525405,
        2.063740230889789e-12,
        7.692111089807743e-29,
        8.578714395964491e-157,
    ];
    rel_close("dP/dx", &grad(&x, |x| Tensor::igamma(&a, x))?.to_vec()?, &dx, 2e-13);
    let neg: Vec<f64> = dx.iter().map(|d| -d).collect();
    rel_close("dQ/dx", &grad(&x, |x| Tensor::igammac(&a, x))?.to_vec()?, &neg, 2e-13);
    // d/da: mpmath central differences (110 digits) of the series above for
    // a <= 1e8 and of DLMF 8.12.3 (exact c0, c1) beyond; at x = a = 1e300,
    // the limit -1/sqrt(2 pi a) (1 + O(1/a)). The recurrences alone (at most
    // 2000 steps) were 14% off at a = 1e6 and 1e5 times too small at 1e12.
    let da = [
        -1.2615662610100802e-8,
        -3.989422804014327e-16,
        -3.9894228040143264e-151,
        -0.00024193040952413304,
        -3.989422804047572e-6,
        -0.023793726651202104,
        -2.063740229448283e-12,
        -7.692072629125374e-29,
        -9.717432970231585e-157,
    ];
    rel_close("dP/da", &grad(&a, |a| Tensor::igamma(a, &x))?.to_vec()?, &da, 2e-13);
    Ok(())
}

#[test]
fn igamma_x_gradient_differentiates_again_in_a_and_x() -> Result<()> {
    // d/da and d/dx of dP/dx = x^(a-1) e^-x / Gamma(a): times
    // ln x - digamma(a) and (a-1)/x - 1 (mpmath, 60 digits), through the
    // accurate kernel for a >= 100 too
    let (a, x) = (v(&[2.5, 150.0, 1e6]), v(&[1.7, 140.0, 1e6 + 1e3]));
    let mixed = [-0.05255295386704924, -0.0016155523047182705, 2.4180958529439683e-7];
    let dxx = [-0.035835844001604056, 0.0015818386091480618, -2.4180950473148184e-7];
    let outer = GradientTape::new();
    let (ga, gx) = {
        let dpdx = outer.record(|| {
            outer.watch(&a);
            outer.watch(&x);
            let inner = GradientTape::new();
            let l = inner.record(|| {
                inner.watch(&x);
                Tensor::igamma(&a, &x)?.sum_all()
            })?;
            Ok::<_, gradtape::Error>(inner.gradient(&l, &x)?.unwrap())
        })?;
        let s = outer.record(|| dpdx.sum_all())?;
        let g = outer.gradient(&s, &[&a, &x])?;
        (
            g[0].clone().unwrap().to_vec::<f64>()?,
            g[1].clone().unwrap().to_vec::<f64>()?,
        )
    };
    rel_close("d2P/dadx", &ga, &mixed, 1e-9);
    rel_close("d2P/dx2", &gx, &dxx, 1e-9);
    // and the checker, first and second order in x, at a = 150 around
    // x = 150 (P near 1/2: not a flat tail) and a = 1e4 around 1e4
    let opts = gradtape::CheckOptions::default();
    let x = v(&[149.2, 150.0, 151.5]);
    gradtape::check_gradients(|t| Tensor::igamma(&t[0].scalar_like(150.0)?, &t[0]), &[x], &opts)?;
    let x = v(&[9990.0, 10_000.0, 10_020.0]);
    gradtape::check_gradients(|t| Tensor::igammac(&t[0].scalar_like(1e4)?, &t[0]), &[x], &opts)?;
    Ok(())
}

#[test]
fn incomplete_gamma_of_extreme_arguments_returns_at_once() -> Result<()> {
    // every pair of these (found by the fuzz: a = x = 1e30 or 2^62 ran for
    // minutes), values and both gradients: each is a bounded number of
    // steps now (Temme near x = a, else a series or fraction of at most
    // about a hundred terms, or a factor that underflows at once)
    let inf = f64::INFINITY;
    let vals = [
        0.0,
        5e-324,
        1e-300,
        1e-20,
        0.5,
        1.0,
        99.9,
        100.0,
        150.0,
        1e4,
        2e4,
        1e6,
        1e6 + 1e3,
        1e12,
        1e15,
        1e15 + 1e8,
        1e30,
        TWO_62,
        1e100,
        1e300,
        f64::MAX,
        inf,
        f64::NAN,
        -1.0,
        -inf,
    ];
    let (mut a, mut x) = (Vec::new(), Vec::new());
    for &p in &vals {
        for &q in &vals {
            a.push(p);
            x.push(q);
        }
    }
    let (ta, tx) = (v(&a), v(&x));
    let (p, q) = p_and_q(&a, &x)?;
    for i in 0..a.len() {
        let valid = a[i] > 0.0 && x[i] >= 0.0;
        if valid {
            let ok = (0.0..=1.0).contains(&p[i]) && (p[i] + q[i] - 1.0).abs() < 1e-14;
            assert!(ok, "({}, {}): {} {}", a[i], x[i], p[i], q[i]);
        } else {
            assert!(p[i].is_nan() && q[i].is_nan(), "({}, {})", a[i], x[i]);
        }
    }
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&ta);
        tape.watch(&tx);
        Tensor::igamma(&ta, &tx)?.add(&Tensor::igammac(&ta, &tx)?)?.sum_all()
    })?;
    let g = tape.gradient(&l, &[&ta, &tx])?;
    // P + Q = 1: both gradients cancel wherever they are finite
    for t in g {
        for d in t.unwrap().to_vec::<f64>()? {
            assert!(d == 0.0 || !d.is_finite(), "{d}");
        }
    }
    // f32 too (computed in f64)
    let p32 = Tensor::igamma(&Tensor::vector(&[1e30f32, f32::MAX]), &Tensor::vector(&[1e30f32, 1.0]))?;
    assert_eq!(p32.to_vec::<f32>()?, [0.5, 0.0]);
    Ok(())
}

#[test]
fn incomplete_gamma_of_tiny_arguments_matches_mpmath() -> Result<()> {
    // Reference: mpmath 1.3, 60 digits (gammainc regularised; scipy 1.17.1
    // agrees to 1e-15). TF 2.21 goes wrong here where `Q` is `1 - P` with
    // `P` near 1: it gives P(1e-300, 1e-300) = 1.0000000000000238 and
    // Q = -2.4e-14, Q(1e-20, 1e-16) = 7.8e-16; before this test, gradtape
    // (through statrs, which reads arguments below ~1e-15 as 0) gave
    // P(1e-20, 1e-16) = 0.
    let cases = [
        (1e-20, 1e-16, 1.0, 3.62641458230032e-19),
        (1e-20, 1e-300, 1.0, 6.9019831223331216e-18),
        (1e-300, 1e-300, 1.0, 6.901983122333122e-298),
        (1e-300, 1e-5, 1.0, 1.0935719800043695e-299),
        (1e-300, 5.0, 1.0, 1.1482955912753257e-303),
        (1e-16, 1e-16, 0.9999999999999963, 3.626414582300313e-15),
        (1e-10, 1e-10, 0.9999999977551365, 2.244863524002411e-09),
        (1e-5, 0.3, 0.9999909432172828, 9.056782717213817e-06),
        (1e-5, 2.0, 0.9999995109872543, 4.890127457242878e-07),
        (0.3, 1e-17, 8.850742848691338e-06, 0.9999911492571513),
        (0.5, 1e-200, 1.1283791670955125e-100, 1.0),
        (0.1, 1e-5, 0.3323984050405033, 0.6676015949594967),
        (0.7, 0.2, 0.32910789979003374, 0.6708921002099663),
        (3.0, 0.5, 0.014387677966970687, 0.9856123220330293),
        (2.0, 1e-200, 0.0, 1.0),
        (99.0, 1e-16, 0.0, 1.0),
    ];
    let a: Vec<f64> = cases.iter().map(|c| c.0).collect();
    let x: Vec<f64> = cases.iter().map(|c| c.1).collect();
    let (p, q) = p_and_q(&a, &x)?;
    rel_close("P", &p, &cases.iter().map(|c| c.2).collect::<Vec<_>>(), 1e-14);
    rel_close("Q", &q, &cases.iter().map(|c| c.3).collect::<Vec<_>>(), 1e-13);
    // both gradients there: (a, x, dP/da, dP/dx), mpmath (`diff` of
    // gammainc in a; x^(a-1) e^-x / Gamma(a)); TF 2.21 agrees to 5e-14
    let grads = [
        (1e-20, 1e-16, -36.2641458230032, 9.999999999999999e-05),
        (1e-10, 1e-10, -22.448635214909295, 0.9999999976551365),
        (1e-5, 0.3, -0.9056798917095227, 2.469378591680837e-05),
        (1e-5, 2.0, -0.04890203843888691, 6.766850124277858e-07),
        (0.3, 1e-17, -0.00034495554022074404, 265522285460.7401),
        (0.01, 1.05, -0.20613935283618262, 0.003353394573837023),
        (1e-300, 1e-5, -10.935719800043696, 9.999900000499998e-296),
        (0.5, 1e-200, -5.196789844062782e-98, 5.641895835477563e+99),
    ];
    let a = v(&grads.iter().map(|c| c.0).collect::<Vec<_>>());
    let x = v(&grads.iter().map(|c| c.1).collect::<Vec<_>>());
    let da = grad(&a, |a| Tensor::igamma(a, &x))?.to_vec::<f64>()?;
    let dx = grad(&x, |x| Tensor::igamma(&a, x))?.to_vec::<f64>()?;
    rel_close("dP/da", &da, &grads.iter().map(|c| c.2).collect::<Vec<_>>(), 1e-12);
    rel_close("dP/dx", &dx, &grads.iter().map(|c| c.3).collect::<Vec<_>>(), 1e-12);
    Ok(())
}
