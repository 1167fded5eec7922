//! Cases where a differential test against TensorFlow 2.21 found this crate
//! wrong (issue 11), with TensorFlow's numbers: `gather` with a scalar index
//! on a later axis, forward mode through the complex constructors and
//! extractors, and `floor_mod`'s gradient; and from the elementwise and
//! reduction sweep at special points (0, ±1, ±inf, NaN, ties, zeros;
//! values, gradients and second derivatives, f32 and f64) of 2026-12-02:
//! `acosh`'s slope below 1, and `polygamma` (the gradient of `digamma`,
//! the second of `lgamma`) at -inf and far left of 0. Each expected value
//! is quoted with the TensorFlow call that gave it.

use crate::common::nested_grads;
use crate::common::values::agree;
use gradtape::{Complex, ForwardAccumulator, GradientTape, Result, Tensor};

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "{what}: got {got:?}, want {want:?}");
    }
}

fn complex_parts(t: &Tensor) -> Result<Vec<(f64, f64)>> {
    Ok(t.to_vec::<Complex<f64>>()?.iter().map(|c| (c.re, c.im)).collect())
}

/// `p = reshape(arange(12.), [3, 4])`.
fn p34() -> Tensor {
    Tensor::from_vec((0..12).map(|v| v as f64).collect(), &[3, 4]).unwrap()
}

#[test]
fn gather_with_a_scalar_index_on_the_last_axis_has_a_gradient_and_a_tangent() -> Result<()> {
    // TF 2.21: p = reshape(range(12.), [3, 4]); g = tf.gather(p, 2, axis=-1)
    // -> [2, 6, 10]; tape.gradient(sum(g * [1, 2, 3]), p)
    // -> [[0, 0, 1, 0], [0, 0, 2, 0], [0, 0, 3, 0]]
    let p = p34();
    let w = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    for axis in [-1, 1] {
        let tape = GradientTape::new();
        let (g, loss) = tape.record(|| {
            tape.watch(&p);
            let g = p.gather(&Tensor::scalar(2i64), axis)?;
            let loss = g.mul(&w)?.sum_all()?;
            Ok((g, loss))
        })?;
        close(&g.to_vec_f64(), &[2.0, 6.0, 10.0], 0.0, "gather");
        let d = tape.gradient(&loss, &p)?.expect("a gradient");
        let want = [0., 0., 1., 0., 0., 0., 2., 0., 0., 0., 3., 0.];
        close(&d.to_vec_f64(), &want, 0.0, &format!("gradient, axis {axis}"));
        // ForwardAccumulator(p, 0.5 * p): jvp(tf.gather(p, 2, axis=1)) -> [1, 3, 5]
        let acc = ForwardAccumulator::new();
        acc.watch(&p, &p.mul_scalar(0.5)?)?;
        let y = acc.record(|| p.gather(&Tensor::scalar(2i64), axis))?;
        let t = acc.jvp(&y)?.expect("a tangent");
        close(&t.to_vec_f64(), &[1.0, 3.0, 5.0], 0.0, &format!("tangent, axis {axis}"));
    }
    Ok(())
}

#[test]
fn forward_mode_goes_through_complex_constructors_and_extractors() -> Result<()> {
    // TF 2.21: re = [1, 2], im = [3, -1] (float64), tangents [0.5, 1.5] and
    // [-2, 4]; with ForwardAccumulator:
    //   z = tf.complex(re, im)   jvp [0.5-2j, 1.5+4j]
    //   w = z * z                jvp [13-1j, 14+13j]
    //   tf.math.angle(z)         jvp [-0.35, 1.9]
    //   tf.math.real(w)          jvp [13, 14]
    //   tf.math.imag(w)          jvp [-1, 13]
    //   tf.math.conj(w)          jvp [13+1j, 14-13j]
    let re = Tensor::vector(&[1.0f64, 2.0]);
    let im = Tensor::vector(&[3.0f64, -1.0]);
    let acc = ForwardAccumulator::new();
    acc.watch(&re, &Tensor::vector(&[0.5f64, 1.5]))?;
    acc.watch(&im, &Tensor::vector(&[-2.0f64, 4.0]))?;
    let (z, w, a, r, i, c) = acc.record(|| {
        let z = Tensor::complex(&re, &im)?;
        let w = z.mul(&z)?;
        Ok((z.clone(), w.clone(), z.angle()?, w.real()?, w.imag()?, w.conj()?))
    })?;
    let jvp = |t: &Tensor| acc.jvp(t).map(|o| o.expect("a tangent"));
    assert_eq!(complex_parts(&jvp(&z)?)?, vec![(0.5, -2.0), (1.5, 4.0)]);
    assert_eq!(complex_parts(&jvp(&w)?)?, vec![(13.0, -1.0), (14.0, 13.0)]);
    close(&jvp(&a)?.to_vec_f64(), &[-0.35, 1.9], 1e-15, "angle");
    close(&jvp(&r)?.to_vec_f64(), &[13.0, 14.0], 0.0, "real");
    close(&jvp(&i)?.to_vec_f64(), &[-1.0, 13.0], 0.0, "imag");
    assert_eq!(complex_parts(&jvp(&c)?)?, vec![(13.0, 1.0), (14.0, -13.0)]);
    // a complex primal can be watched directly
    let acc = ForwardAccumulator::new();
    let z = Tensor::vector(&[Complex::new(1.0f64, 3.0)]);
    acc.watch(&z, &Tensor::vector(&[Complex::new(0.5f64, -2.0)]))?;
    let y = acc.record(|| z.mul(&z)?.real())?;
    close(
        &acc.jvp(&y)?.expect("a tangent").to_vec_f64(),
        &[13.0],
        0.0,
        "real(z * z)",
    );
    Ok(())
}

#[test]
fn floor_mod_has_tensorflows_gradient() -> Result<()> {
    // TF 2.21: x = [7.5, -7.5, 7.5, -7.5, 2], y = [2, 2, -2, -2, 0.75] (float64);
    // r = tf.math.floormod(x, y) -> [1.5, 0.5, -0.5, -1.5, 0.5];
    // tape.gradient(r, [x, y]) -> [1, 1, 1, 1, 1], [-3, 4, 4, -3, -2]
    let x = Tensor::vector(&[7.5f64, -7.5, 7.5, -7.5, 2.0]);
    let y = Tensor::vector(&[2.0f64, 2.0, -2.0, -2.0, 0.75]);
    let tape = GradientTape::new();
    let r = tape.record(|| {
        tape.watch(&[&x, &y]);
        x.floor_mod(&y)
    })?;
    close(&r.to_vec_f64(), &[1.5, 0.5, -0.5, -1.5, 0.5], 0.0, "floor_mod");
    let s = tape.record(|| r.sum_all())?;
    let [dx, dy] = tape.gradient(&s, &[&x, &y])?;
    close(&dx.expect("dx").to_vec_f64(), &[1.0; 5], 0.0, "dx");
    close(&dy.expect("dy").to_vec_f64(), &[-3.0, 4.0, 4.0, -3.0, -2.0], 0.0, "dy");
    // broadcasting: x = [[1.3, -2.6], [5.1, 0.4]], y = [0.7, -1.1];
    // tape.gradient(sum(floormod(x, y) * [[1, 2], [3, 4]]), [x, y])
    // -> [[1, 2], [3, 4]], [-22, 0]
    let x = Tensor::from_vec(vec![1.3f64, -2.6, 5.1, 0.4], &[2, 2])?;
    let y = Tensor::vector(&[0.7f64, -1.1]);
    let w = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    let tape = GradientTape::new();
    let s = tape.record(|| {
        tape.watch(&[&x, &y]);
        x.floor_mod(&y)?.mul(&w)?.sum_all()
    })?;
    let [dx, dy] = tape.gradient(&s, &[&x, &y])?;
    close(
        &dx.expect("dx").to_vec_f64(),
        &[1.0, 2.0, 3.0, 4.0],
        0.0,
        "dx broadcast",
    );
    close(&dy.expect("dy").to_vec_f64(), &[-22.0, 0.0], 1e-12, "dy broadcast");
    Ok(())
}

#[test]
fn acosh_has_no_slope_below_one() -> Result<()> {
    // TF 2.21: x = [-2, -1, 0.5, 1, 2, inf, -inf] (f64);
    // tape.gradient(tf.math.acosh(x), x)
    // -> [nan, nan, nan, inf, 0.5773502691896258, 0, nan]
    // (1/sqrt(x^2 - 1) alone gave 0.577 at -2, where acosh is NaN)
    let xs = [-2.0, -1.0, 0.5, 1.0, 2.0, f64::INFINITY, f64::NEG_INFINITY];
    let want = [
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::INFINITY,
        0.5773502691896258,
        0.0,
        f64::NAN,
    ];
    for dtype in [gradtape::DType::F64, gradtape::DType::F32] {
        let x = Tensor::vector(&xs).cast(dtype)?;
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            x.acosh()?.sum_all()
        })?;
        let g = tape.gradient(&y, &x)?.expect("a gradient");
        let rel = if dtype == gradtape::DType::F64 { 1e-15 } else { 1e-6 };
        agree(&format!("acosh' {dtype:?}"), &g.to_vec_f64(), &want, rel);
    }
    Ok(())
}

#[test]
fn polygamma_at_minus_infinity_and_far_left_of_zero() -> Result<()> {
    // TF 2.21: tf.math.polygamma([1, 2, 3, 5, 45, 1, 2],
    //     [-70.3, -70.3, -65.7, -100.25, -80.6, -inf, -inf]) (f64)
    // -> [15.065289643812129, 68.83734422881084, 769.0209074405332,
    //     492231.2671105534, 2.4157515311528344e+74, inf, nan]
    // (here computed by reflection left of -64; before, -inf was summed
    // as 0, and -1e12 + 0.5 would have summed 1e12 terms)
    let n = Tensor::vector(&[1.0f64, 2.0, 3.0, 5.0, 45.0, 1.0, 2.0]);
    let x = Tensor::vector(&[
        -70.3f64,
        -70.3,
        -65.7,
        -100.25,
        -80.6,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ]);
    let want = [
        15.065289643812129,
        68.83734422881084,
        769.0209074405332,
        492231.2671105534,
        2.4157515311528344e+74,
        f64::INFINITY,
        f64::NAN,
    ];
    agree("polygamma", &Tensor::polygamma(&n, &x)?.to_vec_f64(), &want, 1e-13);
    // trigamma(-1e12 + 0.5) = π²/sin²(πx) - trigamma(1 - x): mpmath at 30
    // digits 9.8696044010883586 (TensorFlow's sum would take 1e12 terms)
    let far = Tensor::polygamma(&Tensor::scalar(1.0f64), &Tensor::scalar(-1e12 + 0.5))?;
    agree(
        "trigamma far left",
        &[far.to_scalar::<f64>()?],
        &[9.869_604_401_088_358],
        1e-14,
    );
    // TF 2.21: x = [-inf, -2.5, 3] (f64); the gradient and second
    // derivative of tf.math.lgamma(x) (nested tapes)
    // -> [nan, 1.1031566406452433, 0.9227843350984675],
    //    [inf, 9.539246644989124, 0.39493406684822646]
    let x = Tensor::vector(&[f64::NEG_INFINITY, -2.5, 3.0]);
    let (g, g2) = nested_grads(&x, |x| x.lgamma()?.sum_all(), |g| g.sum_all())?;
    agree(
        "lgamma'",
        &g.to_vec_f64(),
        &[f64::NAN, 1.1031566406452433, 0.9227843350984675],
        1e-14,
    );
    agree(
        "lgamma''",
        &g2.to_vec_f64(),
        &[f64::INFINITY, 9.539246644989124, 0.39493406684822646],
        1e-14,
    );
    Ok(())
}

/// Second derivatives through `rsqrt`, `sqrt` and `reciprocal` where their
/// cotangent is exactly 0: `x · f(Σx²)` along rows, at the row `(c, -c)`,
/// whose reduced cotangent `Σ g·x` is 0. Their rules set the gradient to 0
/// wherever the cotangent was 0 (TensorFlow's `SqrtGrad`, `RsqrtGrad`,
/// `ReciprocalGrad`), and so lost the derivative w.r.t. the cotangent
/// there: H·v was wrong in both modes, each its own way (found by
/// random_programs, seed 61's program 9590, through `l2_normalize`).
/// Expected: TensorFlow 2.21, `o.gradient(reduce_sum(i.gradient(f(x), x) *
/// v), x)` of nested tapes, f = `reduce_sum(tanh(x * tf.math.rsqrt(
/// reduce_sum(x*x, 1, keepdims=True))))` and the same with `tf.sqrt`,
/// `tf.math.reciprocal`, and `tf.math.l2_normalize(x, axis=1,
/// epsilon=1e-6)` (its ForwardAccumulator over a tape agrees to 1e-16).
#[test]
fn second_derivatives_through_a_zero_cotangent_of_rsqrt_sqrt_reciprocal() -> Result<()> {
    let x = Tensor::from_vec(vec![0.875f64, -0.875, 0.875, -0.6], &[2, 2])?;
    let v = Tensor::from_vec(vec![0.6725f64, -1.47, 0.3, 0.7], &[2, 2])?;
    type F = fn(&Tensor) -> Result<Tensor>;
    fn by(x: &Tensor, f: &dyn Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        x.mul(&f(&x.square()?.sum(&[1], true)?)?)?.tanh()?.sum_all()
    }
    let cases: [(&str, F, [f64; 4]); 4] = [
        (
            "rsqrt",
            |x| by(x, &|s| s.rsqrt()),
            [
                -0.39085187896196794,
                -0.8543528060581308,
                -0.3381056039237049,
                0.5798096509996483,
            ],
        ),
        (
            "sqrt",
            |x| by(x, &|s| s.sqrt()),
            [
                -0.8567207383671274,
                -1.8726832496649468,
                -0.10522232876490867,
                0.5072488834077273,
            ],
        ),
        (
            "reciprocal",
            |x| by(x, &|s| s.reciprocal()),
            [
                -0.5189160842009692,
                -1.1342849721567658,
                -0.4830575352506187,
                0.6431733831469627,
            ],
        ),
        (
            "l2_normalize",
            |x| x.l2_normalize(&[1], 1e-6)?.tanh()?.sum_all(),
            [
                -0.390851878961968,
                -0.8543528060581307,
                -0.3381056039237049,
                0.5798096509996482,
            ],
        ),
    ];
    for (name, f, want) in cases {
        // reverse over reverse
        let outer = GradientTape::new();
        let hv = outer.record(|| {
            outer.watch(&x);
            let inner = GradientTape::new();
            let l = inner.record(|| {
                inner.watch(&x);
                f(&x)
            })?;
            inner.gradient(&l, &x)?.expect("connected").mul(&v)?.sum_all()
        })?;
        let rev = outer.gradient(&hv, &x)?.expect("connected").to_vec::<f64>()?;
        agree(&format!("{name}, reverse over reverse"), &rev, &want, 1e-12);
        // forward over reverse
        let fwd = gradtape::hvp(f, &x, &v)?.to_vec::<f64>()?;
        agree(&format!("{name}, forward over reverse"), &fwd, &want, 1e-12);
    }
    Ok(())
}
