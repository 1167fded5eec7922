//! Special functions: gradients through the checker (first and second
//! order), values and gradients against TensorFlow 2.21 (`tf.math.lgamma`,
//! `digamma`, `polygamma`, `igamma`, `igammac`, `betainc`, `erfinv`,
//! `ndtri`, `bessel_i0e`, `bessel_i1e`, `xlogy`, `xlog1py`,
//! `log_sigmoid`; printed by a script run in the peers' venv).

use crate::common;

use common::*;
use gradtape::{GradientTape, Result, Tensor};

fn v(x: &[f64]) -> Tensor {
    Tensor::vector(x)
}

fn close(got: &Tensor, want: &[f64], tol: f64) {
    let got = got.to_vec::<f64>().unwrap();
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    let one: &[(&str, Op, Dom)] = &[
        ("lgamma", |x| x[0].lgamma(), Pos),
        ("digamma", |x| x[0].digamma(), Pos),
        (
            "polygamma 2",
            |x| Tensor::polygamma(&x[0].scalar_like(2.0)?, &x[0]),
            Pos,
        ),
        ("erfinv", |x| x[0].mul_scalar(0.4)?.erfinv(), Any),
        ("ndtri", |x| x[0].mul_scalar(0.4)?.ndtri(), Pos),
        ("bessel_i0e", |x| x[0].bessel_i0e(), NonZero),
        ("bessel_i1e", |x| x[0].bessel_i1e(), NonZero),
        // where its derivative is the series (below 1e-2; 1e-4 in f64)
        ("bessel_i1e near 0", |x| x[0].mul_scalar(5e-5)?.bessel_i1e(), NonZero),
        // far left of 0, where the Hurwitz zeta goes by reflection (and
        // the derivative, polygamma 3, too); between the poles -71 and -70
        (
            "polygamma 2 far left",
            |x| Tensor::polygamma(&x[0].scalar_like(2.0)?, &x[0].mul_scalar(0.3)?.add_scalar(-70.5)?),
            Any,
        ),
        ("log_sigmoid", |x| x[0].log_sigmoid(), Any),
        ("igamma in x", |x| Tensor::igamma(&x[0].scalar_like(1.5)?, &x[0]), Pos),
        ("igammac in x", |x| Tensor::igammac(&x[0].scalar_like(0.7)?, &x[0]), Pos),
        (
            "betainc in x",
            |x| Tensor::betainc(&x[0].scalar_like(2.5)?, &x[0].scalar_like(1.5)?, &x[0].mul_scalar(0.4)?),
            Pos,
        ),
    ];
    for &(name, f, d) in one {
        for s in [&[5][..], &[2, 3]] {
            t.push(case(format!("{name} {s:?}"), f, &[(s, d)]));
        }
    }
    let two: &[(&str, Op, Dom, Dom)] = &[
        ("xlogy", |x| Tensor::xlogy(&x[0], &x[1]), Any, Pos),
        ("xlog1py", |x| Tensor::xlog1py(&x[0], &x[1]), Any, Pos),
        ("divide_no_nan", |x| Tensor::divide_no_nan(&x[0], &x[1]), Any, NonZero),
    ];
    for &(name, f, da, db) in two {
        for (sa, sb) in [(&[4][..], &[4][..]), (&[2, 3], &[3]), (&[], &[2, 2])] {
            t.push(case(format!("{name} {sa:?},{sb:?}"), f, &[(sa, da), (sb, db)]));
        }
    }
    t
}

#[test]
fn every_special_function_passes_the_gradient_checker() {
    run_table(
        &table(),
        &[
            "lgamma",
            "digamma",
            "polygamma",
            "erfinv",
            "ndtri",
            "bessel_i0e",
            "bessel_i1e",
            "log_sigmoid",
            "igamma",
            "igammac",
            "betainc",
            "xlogy",
            "xlog1py",
            "divide_no_nan",
        ],
        30,
        200,
    );
}

#[test]
fn values_match_tensorflow() -> Result<()> {
    let x = v(&[0.3, 1.5, 4.0, -0.5, -2.5, 12.0]);
    close(
        &x.lgamma()?,
        &[
            1.0957979948180756,
            -0.12078223763524522,
            1.791759469228055,
            1.2655121234846454,
            -0.05624371649767407,
            17.502307845873887,
        ],
        1e-14,
    );
    close(
        &x.digamma()?,
        &[
            -3.502524222200133,
            0.03648997397857645,
            1.2561176684318007,
            0.03648997397857645,
            1.1031566406452433,
            2.4426616799758123,
        ],
        1e-13,
    );
    close(
        &Tensor::polygamma(&x.scalar_like(1.0)?, &x)?,
        &[
            12.245364546107734,
            0.9348022005446793,
            0.28382295573711525,
            8.934802200544679,
            9.539246644989124,
            0.0869018728717684,
        ],
        1e-13,
    );
    let x4 = v(&[0.3, 1.5, 4.0, 12.0]);
    close(
        &Tensor::polygamma(&x4.scalar_like(3.0)?, &x4)?,
        &[
            743.1417646550497,
            1.4090910340024367,
            0.04486532819275508,
            0.001310093231070826,
        ],
        1e-13,
    );
    let (a, z) = (v(&[0.5, 2.0, 5.0, 30.0]), v(&[0.2, 3.0, 1.0, 25.0]));
    close(
        &Tensor::igamma(&a, &z)?,
        &[
            0.47291074313446185,
            0.8008517265285442,
            0.003659846827343713,
            0.1821039159774535,
        ],
        1e-12,
    );
    close(
        &Tensor::igammac(&a, &z)?,
        &[
            0.5270892568655381,
            0.1991482734714558,
            0.9963401531726563,
            0.8178960840225464,
        ],
        1e-12,
    );
    close(
        &Tensor::betainc(&v(&[0.5, 2.0, 5.0]), &v(&[1.5, 3.0, 0.7]), &v(&[0.2, 0.6, 0.95]))?,
        &[0.549815144247899, 0.8208, 0.6236012551631198],
        1e-12,
    );
    // erfinv(0.999999): SciPy's value (TF 2.21 gives 3.458910737260051, off
    // by 4e-12 relative; mpmath at 30 digits agrees with SciPy up to the
    // rounding of the f64 input)
    close(
        &v(&[-0.99, -0.3, 0.0, 0.5, 0.999999]).erfinv()?,
        &[
            -1.8213863677184496,
            -0.27246271472675443,
            0.0,
            0.4769362762044699,
            3.458910737275499,
        ],
        1e-12,
    );
    close(
        &v(&[1e-10, 0.01, 0.3, 0.5, 0.975]).ndtri()?,
        &[
            -6.361340902404056,
            -2.3263478740408408,
            -0.5244005127080409,
            0.0,
            1.959963984540054,
        ],
        1e-12,
    );
    let b = v(&[-50.0, -3.0, -0.5, 0.0, 1e-5, 2.0, 39.0, 41.0, 300.0]);
    close(
        &b.bessel_i0e()?,
        &[
            0.056561626647454184,
            0.24300035416182536,
            0.6450352704491502,
            1.0,
            0.9999900000749995,
            0.308508322553671,
            0.06408967575058332,
            0.062496943756818885,
            0.02304255841508546,
        ],
        1e-13,
    );
    close(
        &b.bessel_i1e()?,
        &[
            -0.0559931238928954,
            -0.19682671329730084,
            -0.15642080318487162,
            0.0,
            4.999950000312499e-06,
            0.2152692892489377,
            0.06326260540048712,
            0.061730020699518176,
            0.02300412204026895,
        ],
        1e-13,
    );
    close(
        &Tensor::xlogy(&v(&[0.0, 2.0, 3.0]), &v(&[0.0, 0.5, 4.0]))?,
        &[0.0, -1.3862943611198906, 4.1588830833596715],
        1e-15,
    );
    close(
        &Tensor::xlog1py(&v(&[0.0, 2.0]), &v(&[-1.0, 0.5]))?,
        &[0.0, 0.8109302162163288],
        1e-15,
    );
    close(
        &v(&[-800.0, 0.0, 30.0]).log_sigmoid()?,
        &[-800.0, -std::f64::consts::LN_2, -9.357622968839737e-14],
        1e-15,
    );
    // outside the domain: NaN, as TF
    assert!(v(&[1.5]).erfinv()?.to_vec::<f64>()?[0].is_nan());
    assert!(Tensor::igamma(&v(&[-1.0]), &v(&[1.0]))?.to_vec::<f64>()?[0].is_nan());
    Ok(())
}

fn grad(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(x);
        f(x)?.sum_all()
    })?;
    Ok(tape.gradient(&l, x)?.unwrap())
}

#[test]
fn gradients_match_tensorflow() -> Result<()> {
    let x = v(&[0.3, 1.5, 4.0, -0.5]);
    close(
        &grad(&x, |x| x.lgamma())?,
        &[
            -3.502524222200133,
            0.03648997397857645,
            1.2561176684318007,
            0.03648997397857645,
        ],
        1e-13,
    );
    close(
        &grad(&x, |x| x.digamma())?,
        &[
            12.245364546107734,
            0.9348022005446793,
            0.28382295573711525,
            8.934802200544679,
        ],
        1e-13,
    );
    close(
        &grad(&x, |x| x.bessel_i1e())?,
        &[
            0.2706111957432463,
            0.0023679633526154653,
            -0.016436628154057414,
            0.17577286089453537,
        ],
        1e-13,
    );
    close(
        &grad(&x, |x| x.bessel_i0e())?,
        &[
            -0.645203064542709,
            -0.1483942216332326,
            -0.028251081721551413,
            0.4886144672642786,
        ],
        1e-13,
    );
    let z = v(&[0.2, 3.0]);
    close(
        &grad(&z, |z| Tensor::igamma(&v(&[0.5, 2.0]), z))?,
        &[1.0328830949345564, 0.14936120510359185],
        1e-12,
    );
    close(
        &grad(&z, |z| {
            Tensor::betainc(&v(&[0.5, 2.0]), &v(&[1.5, 3.0]), &z.div_scalar(4.0)?)
        })?,
        &[0.6937403133025385, 0.14062500000000003],
        1e-12,
    );
    // xlogy at x = 0, y = 0: value and gradients 0, no NaN
    let zero = v(&[0.0]);
    let tape = GradientTape::new();
    let (a, b) = (zero.clone(), zero.clone());
    let l = tape.record(|| {
        tape.watch(&a);
        tape.watch(&b);
        Tensor::xlogy(&a, &b)?.sum_all()
    })?;
    let g = tape.gradient(&l, &[&a, &b])?;
    assert_eq!(g[0].as_ref().unwrap().to_vec::<f64>()?, [0.0]);
    assert_eq!(g[1].as_ref().unwrap().to_vec::<f64>()?, [0.0]);
    Ok(())
}

#[test]
fn tests_and_errors() {
    let x = Tensor::vector(&[1.0f32, f32::INFINITY, f32::NAN]);
    assert_eq!(x.is_nan().unwrap().to_vec::<bool>().unwrap(), [false, false, true]);
    assert_eq!(
        Tensor::vector(&[1i32]).is_finite().unwrap().to_vec::<bool>().unwrap(),
        [true]
    );
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    assert!(err(Tensor::vector(&[1i32]).lgamma()).contains("lgamma"));
    assert!(err(Tensor::igamma(&v(&[1.0, 2.0]), &v(&[1.0, 2.0, 3.0]))).contains("igamma"));
    assert!(err(Tensor::betainc(&v(&[1.0]), &Tensor::vector(&[1.0f32]), &v(&[0.5]))).contains("betainc"));
    // the second derivative in `a` is refused, not silently zero (TF has
    // no gradient for IgammaGradA either)
    let a = v(&[1.5]);
    let outer = GradientTape::new();
    let r = outer.record(|| {
        outer.watch(&a);
        let inner = GradientTape::new();
        let l = inner.record(|| {
            inner.watch(&a);
            Tensor::igamma(&a, &v(&[2.0]))?.sum_all()
        })?;
        inner.gradient(&l, &a).map(|g| g.unwrap())
    });
    let g = r.unwrap();
    let s = outer.record(|| g.sum_all()).unwrap();
    assert!(outer.gradient(&s, &a).unwrap_err().to_string().contains("igamma"));
}

/// `got` and `want` agree: the same non-finite value (inf, -inf or NaN), or
/// finite values within `tol` relative.
fn same(got: &[f64], want: &[f64], tol: f64) {
    common::values::agree("special", got, want, tol);
}

#[test]
fn betainc_gradient_at_the_endpoints_matches_tensorflow() -> Result<()> {
    // TF 2.21: tf.GradientTape gradient of tf.math.betainc(a, b, x) in x
    // (float64), for x = 0 and x = 1; TF's rule uses xlogy / xlog1py, so a
    // = 1 (b = 1) gives the finite density 1/B(a, b) at x = 0 (x = 1), a
    // < 1 gives +inf and a > 1 gives 0
    let cases: [(f64, f64, [f64; 2]); 7] = [
        (0.5, 2.0, [f64::INFINITY, 0.0]),
        (1.0, 2.0, [2.0, 0.0]),
        (2.0, 3.0, [0.0, 0.0]),
        (2.0, 0.5, [0.0, f64::INFINITY]),
        (2.0, 1.0, [0.0, 2.0]),
        (1.0, 1.0, [1.0, 1.0]),
        (0.5, 0.5, [f64::INFINITY, f64::INFINITY]),
    ];
    for (a, b, want) in cases {
        let x = v(&[0.0, 1.0]);
        let g = grad(&x, |x| Tensor::betainc(&v(&[a, a]), &v(&[b, b]), x))?;
        same(&g.to_vec::<f64>()?, &want, 1e-13);
        // the values themselves: 0 and 1
        assert_eq!(
            Tensor::betainc(&v(&[a, a]), &v(&[b, b]), &x)?.to_vec::<f64>()?,
            [0.0, 1.0]
        );
    }
    Ok(())
}

#[test]
fn digamma_and_polygamma_at_the_poles_match_tensorflow() -> Result<()> {
    let x = v(&[0.0, -0.0, -1.0, -2.0, -3.0, -2.5, 1.0]);
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    // TF 2.21: tf.math.digamma(x) and tf.math.polygamma(n, x), float64
    // (JAX's digamma is NaN at the poles too)
    let (d_m25, d_1) = (1.1031566406452433, -0.5772156649015329);
    same(
        &x.digamma()?.to_vec::<f64>()?,
        &[nan, nan, nan, nan, nan, d_m25, d_1],
        1e-13,
    );
    let want: [(f64, [f64; 7]); 5] = [
        (0.0, [nan, nan, nan, nan, nan, d_m25, d_1]),
        (1.0, [inf, inf, inf, inf, inf, 9.53924664, 1.64493407]),
        (2.0, [nan, nan, nan, nan, nan, -0.10820405, -2.40411381]),
        (3.0, [inf, inf, inf, inf, inf, 194.74787622, 6.4939394]),
        (4.0, [nan, nan, nan, nan, nan, -0.067996, -24.88626612]),
    ];
    for (n, w) in want {
        let y = Tensor::polygamma(&x.scalar_like(n)?.broadcast_to(&[7])?, &x)?;
        // (TF printed to 8 decimals)
        same(&y.to_vec::<f64>()?, &w, 1e-7);
    }
    // TF 2.21: gradients of lgamma (digamma: NaN at the poles) and of
    // digamma (polygamma(1, ·): +inf at the poles)
    same(
        &grad(&x, |x| x.lgamma())?.to_vec::<f64>()?,
        &[nan, nan, nan, nan, nan, d_m25, d_1],
        1e-13,
    );
    same(
        &grad(&x, |x| x.digamma())?.to_vec::<f64>()?,
        &[inf, inf, inf, inf, inf, 9.53924664, 1.64493407],
        1e-7,
    );
    Ok(())
}

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

/// `bessel_i1e`'s first and second derivatives near 0, where the exact
/// form of its derivative, `i0e(x) - i1e(x)(sign(x) + 1/x)`, cancels in
/// the second (two terms of size `1/(2x)`: f32 gave 0 at 1e-8, where the
/// value is -1; TensorFlow 2.21 gives 8), and on either side of where the
/// rule switches to the series (1e-4 in f64, 1e-2 in f32). Expected:
/// mpmath at 40 digits, `diff(exp(-|x|) besseli(1, x), x, k)`.
#[test]
#[allow(clippy::excessive_precision)] // (mpmath's digits, as printed)
fn bessel_i1e_derivatives_near_zero() -> gradtape::Result<()> {
    let pts = [
        (1e-8, 0.49999999000000009, -0.99999998125000017),
        (-3e-5, 0.49997000084373425, 0.99994375157497047),
        (9.9e-5, 0.49990100918787152, -0.99981439215068878),
        (1.01e-4, 0.49989900956283652, -0.99981064285062316),
        (0.0099, 0.49019132098410323, -0.9816079611700076),
        (0.0101, 0.48999503620068088, -0.98123989595341331),
        (0.5, 0.17577286089453498, -0.39024983720839651),
    ];
    for (dtype, rel) in [(gradtape::DType::F64, 1e-12), (gradtape::DType::F32, 2e-5)] {
        let x = Tensor::vector(&pts.map(|p| p.0)).cast(dtype)?;
        let (d1, d2) = common::nested_grads(&x, |x| x.bessel_i1e()?.sum_all(), |g| g.sum_all())?;
        for (i, (d1, d2)) in d1.to_vec_f64().iter().zip(d2.to_vec_f64()).enumerate() {
            let (x, w1, w2) = pts[i];
            assert!((d1 - w1).abs() <= rel * w1.abs(), "{dtype:?} i1e' at {x}: {d1} vs {w1}");
            assert!(
                (d2 - w2).abs() <= rel * w2.abs(),
                "{dtype:?} i1e'' at {x}: {d2} vs {w2}"
            );
        }
    }
    Ok(())
}
