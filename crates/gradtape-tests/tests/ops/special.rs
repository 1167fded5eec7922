//! Special functions: gradients through the checker (first and second
//! order), values and gradients against TensorFlow 2.21 (`tf.math.lgamma`,
//! `digamma`, `polygamma`, `igamma`, `igammac`, `betainc`, `erfinv`,
//! `ndtri`, `bessel_i0e`, `bessel_i1e`, `xlogy`, `xlog1py`,
//! `log_sigmoid`; printed by a script run in the peers' venv). The
//! incomplete gamma function's edge cases are `special_igamma.rs`.

use crate::common;

use common::*;
use gradtape::{GradientTape, Result, Tensor};

pub(super) fn v(x: &[f64]) -> Tensor {
    Tensor::vector(x)
}

pub(super) fn close(got: &Tensor, want: &[f64], tol: f64) {
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

pub(super) fn grad(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
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
