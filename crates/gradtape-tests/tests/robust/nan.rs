//! NaN and infinities through the activations, `maximum`/`minimum`, the
//! max/min reductions, `argmax`/`argmin` and max pooling: values, reverse-mode
//! gradients and forward-mode tangents as TensorFlow 2.21 gives them.
//!
//! Every expected number comes from TensorFlow 2.21 (CPU), computed with
//! `tf.GradientTape` (gradients of `sum(y)`) and
//! `tf.autodiff.ForwardAccumulator` (tangent of ones) on the inputs below,
//! in float64; the script is quoted in each test's comment.

use gradtape::{ForwardAccumulator, GradientTape, Padding, Result, Tensor};

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

/// The inputs of the activation tests: `[nan, -1, 0, 2, inf, -inf]`.
const XS: [f64; 6] = [NAN, -1.0, 0.0, 2.0, INF, -INF];

/// Equal as NaN-aware floats within `tol` (infinities must match exactly).
fn same(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol
        };
        assert!(ok, "{what}: got {got:?}, want {want:?}");
    }
}

/// `(y, dy/dx of sum(y), tangent of y for a tangent of ones)` of `f` at `x`.
fn value_grad_jvp(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        f(x)
    })?;
    let s = tape.record(|| y.sum_all())?;
    let g = tape.gradient(&s, x)?.expect("a gradient");
    let acc = ForwardAccumulator::new();
    acc.watch(x, &x.ones_like())?;
    let y2 = acc.record(|| f(x))?;
    let t = acc.jvp(&y2)?.expect("a tangent");
    Ok((y.to_vec_f64(), g.to_vec_f64(), t.to_vec_f64()))
}

/// One activation checked in f64 (and its values in f32).
fn check_activation(
    name: &str,
    f: impl Fn(&Tensor) -> Result<Tensor>,
    want_y: [f64; 6],
    want_g: [f64; 6],
    tol: f64,
) -> Result<()> {
    let (y, g, t) = value_grad_jvp(&Tensor::vector(&XS), &f)?;
    same(&y, &want_y, 1e-12, &format!("{name} value"));
    same(&g, &want_g, tol, &format!("{name} gradient"));
    // TF's forward-mode tangents equal its gradients on these inputs
    same(&t, &want_g, tol, &format!("{name} tangent"));
    let x32 = Tensor::vector(&XS.map(|v| v as f32));
    let (y32, g32, t32) = value_grad_jvp(&x32, &f)?;
    same(&y32, &want_y, 1e-6, &format!("{name} f32 value"));
    same(&g32, &want_g, 1e-6, &format!("{name} f32 gradient"));
    same(&t32, &want_g, 1e-6, &format!("{name} f32 tangent"));
    Ok(())
}

// TF 2.21: x = tf.constant([nan, -1., 0., 2., inf, -inf], tf.float64)
//   y = f(x); tape.gradient(y, x); ForwardAccumulator(x, ones_like(x)).jvp(f(x))

#[test]
fn relu_propagates_nan_and_its_gradient_there_is_zero() -> Result<()> {
    // tf.nn.relu: y [nan, 0, 0, 2, inf, 0], g = jvp [0, 0, 0, 1, 1, 0]
    check_activation(
        "relu",
        |x| x.relu(),
        [NAN, 0.0, 0.0, 2.0, INF, 0.0],
        [0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
        0.0,
    )?;
    // integer relu is unchanged
    let i = Tensor::vector(&[-3i32, 0, 4]).relu()?;
    assert_eq!(i.to_vec::<i32>()?, vec![0, 0, 4]);
    Ok(())
}

#[test]
fn relu6_leaky_relu_and_clip_by_value_at_nan_and_infinities() -> Result<()> {
    // tf.nn.relu6: y [nan, 0, 0, 2, 6, 0], g [0, 0, 0, 1, 0, 0]
    check_activation(
        "relu6",
        |x| x.relu6(),
        [NAN, 0.0, 0.0, 2.0, 6.0, 0.0],
        [0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
        0.0,
    )?;
    // tf.nn.leaky_relu(x, 0.2): y [nan, -0.2, 0, 2, inf, -inf], g [.2, .2, .2, 1, 1, .2]
    // (TF rounds alpha to f32: 0.20000000298; hence the tolerance)
    check_activation(
        "leaky_relu",
        |x| x.leaky_relu(0.2),
        [NAN, -0.2, 0.0, 2.0, INF, -INF],
        [0.2, 0.2, 0.2, 1.0, 1.0, 0.2],
        1e-8,
    )?;
    // tf.clip_by_value(x, -0.5, 1.0): y [nan, -0.5, 0, 1, 1, -0.5], g [0, 0, 1, 0, 0, 0]
    check_activation(
        "clip_by_value",
        |x| x.clip_by_value(-0.5, 1.0),
        [NAN, -0.5, 0.0, 1.0, 1.0, -0.5],
        [0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        0.0,
    )
}

#[test]
fn elu_and_selu_tangents_match_their_gradients_at_nan_and_infinities() -> Result<()> {
    // tf.nn.elu: y [nan, -0.6321205588285577, 0, 2, inf, -1],
    //   g = jvp [1, 0.36787944117144233, 1, 1, 1, 0]
    check_activation(
        "elu",
        |x| x.elu(),
        [NAN, -0.6321205588285577, 0.0, 2.0, INF, -1.0],
        [1.0, 0.36787944117144233, 1.0, 1.0, 1.0, 0.0],
        1e-15,
    )?;
    // tf.nn.selu: y [nan, -1.1113307378125628, 0, 2.101401974710961, inf, -1.7580993408473768],
    //   g = jvp [1.0507009873554805, 0.6467686030348141, 1.0507.., 1.0507.., 1.0507.., 0]
    let s = 1.0507009873554805;
    check_activation(
        "selu",
        |x| x.selu(),
        [
            NAN,
            -1.1113307378125628,
            0.0,
            2.101401974710961,
            INF,
            -1.7580993408473768,
        ],
        [s, 0.6467686030348141, s, s, s, 0.0],
        1e-15,
    )
}

/// `(y, da, db, tangent)` of `f(a, b)` with tangents 1 for `a` and 2 for `b`.
type Pair = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);

fn binary(a: &Tensor, b: &Tensor, f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<Pair> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&[a, b]);
        f(a, b)?.sum_all()
    })?;
    let [ga, gb] = tape.gradient(&y, &[a, b])?;
    let acc = ForwardAccumulator::new();
    acc.watch(a, &a.ones_like())?;
    acc.watch(b, &b.ones_like().mul_scalar(2.0)?)?;
    let z = acc.record(|| f(a, b))?;
    let t = acc.jvp(&z)?.expect("a tangent");
    Ok((
        f(a, b)?.to_vec_f64(),
        ga.expect("da").to_vec_f64(),
        gb.expect("db").to_vec_f64(),
        t.to_vec_f64(),
    ))
}

#[test]
fn maximum_and_minimum_propagate_nan_from_either_side() -> Result<()> {
    // TF 2.21: a = [nan, 1, nan, 1, 2], b = [1, nan, nan, 1, -inf] (float64);
    // tangents 1 for a, 2 for b
    let a = Tensor::vector(&[NAN, 1.0, NAN, 1.0, 2.0]);
    let b = Tensor::vector(&[1.0, NAN, NAN, 1.0, -INF]);
    // tf.maximum: y [nan, nan, nan, 1, 2], ga [0, 0, 0, 1, 1], gb [1, 1, 1, 0, 0], jvp [2, 2, 2, 1, 1]
    let (y, ga, gb, t) = binary(&a, &b, Tensor::maximum)?;
    same(&y, &[NAN, NAN, NAN, 1.0, 2.0], 0.0, "maximum");
    same(&ga, &[0.0, 0.0, 0.0, 1.0, 1.0], 0.0, "maximum da");
    same(&gb, &[1.0, 1.0, 1.0, 0.0, 0.0], 0.0, "maximum db");
    same(&t, &[2.0, 2.0, 2.0, 1.0, 1.0], 0.0, "maximum tangent");
    // tf.minimum: y [nan, nan, nan, 1, -inf], ga [0, 0, 0, 1, 0], gb [1, 1, 1, 0, 1], jvp [2, 2, 2, 1, 2]
    let (y, ga, gb, t) = binary(&a, &b, Tensor::minimum)?;
    same(&y, &[NAN, NAN, NAN, 1.0, -INF], 0.0, "minimum");
    same(&ga, &[0.0, 0.0, 0.0, 1.0, 0.0], 0.0, "minimum da");
    same(&gb, &[1.0, 1.0, 1.0, 0.0, 1.0], 0.0, "minimum db");
    same(&t, &[2.0, 2.0, 2.0, 1.0, 2.0], 0.0, "minimum tangent");
    // the argument order does not matter, in f32 too, and on a long
    // (vectorised) run
    let n = 300;
    let mut xs = vec![1.0f32; n];
    xs[7] = f32::NAN;
    xs[250] = f32::NAN;
    let x = Tensor::from_vec(xs, &[n])?;
    let one = Tensor::scalar(0.5f32);
    for y in [x.maximum(&one)?, one.maximum(&x)?, x.minimum(&one)?, one.minimum(&x)?] {
        let v = y.to_vec::<f32>()?;
        assert!(v[7].is_nan() && v[250].is_nan() && !v[8].is_nan(), "{:?}", &v[..10]);
    }
    Ok(())
}

#[test]
fn max_and_min_reductions_propagate_nan_and_give_nan_gradients() -> Result<()> {
    // TF 2.21: tf.reduce_max([1, nan, 3]) = nan, gradient [nan, nan, nan]
    // (and the same for reduce_min, and for nan first or last)
    for xs in [[1.0, NAN, 3.0], [NAN, 1.0, 3.0], [3.0, 1.0, NAN]] {
        let x = Tensor::vector(&xs);
        for (name, f) in [
            ("max", Tensor::max_all as fn(&Tensor) -> Result<Tensor>),
            ("min", Tensor::min_all),
        ] {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&x);
                f(&x)
            })?;
            assert!(y.to_scalar::<f64>()?.is_nan(), "{name} of {xs:?}");
            let g = tape.gradient(&y, &x)?.expect("a gradient").to_vec::<f64>()?;
            assert!(g.iter().all(|v| v.is_nan()), "{name} gradient of {xs:?}: {g:?}");
        }
    }
    Ok(())
}

#[test]
fn argmax_and_argmin_skip_nan_as_tensorflow() -> Result<()> {
    // TF 2.21 (float32 and float64): tf.argmax([1, nan, 3]) = 2,
    // tf.argmax([nan, 1, 3]) = 2, tf.argmax([3, 1, nan]) = 0, all-nan: 0;
    // tf.argmin([1, nan, 3]) = 0, tf.argmin([nan, 1, 3]) = 1, tf.argmin([3, 1, nan]) = 1.
    // (NumPy's argmax returns the first NaN instead.)
    let cases: [([f64; 3], i64, i64); 4] = [
        ([1.0, NAN, 3.0], 2, 0),
        ([NAN, 1.0, 3.0], 2, 1),
        ([3.0, 1.0, NAN], 0, 1),
        ([NAN, NAN, NAN], 0, 0),
    ];
    for (xs, max_at, min_at) in cases {
        let x = Tensor::vector(&xs);
        assert_eq!(x.argmax(0)?.to_scalar::<i64>()?, max_at, "argmax {xs:?}");
        assert_eq!(x.argmin(0)?.to_scalar::<i64>()?, min_at, "argmin {xs:?}");
        let x32 = Tensor::vector(&xs.map(|v| v as f32));
        assert_eq!(x32.argmax(0)?.to_scalar::<i64>()?, max_at, "f32 argmax {xs:?}");
        assert_eq!(x32.argmin(0)?.to_scalar::<i64>()?, min_at, "f32 argmin {xs:?}");
    }
    Ok(())
}

#[test]
fn max_pool_skips_nan_as_tensorflow() -> Result<()> {
    // three 2x2 windows (VALID, stride 2) of a [1, 2, 6, 1] image:
    // [1, nan; 3, 0.5], [nan, nan; nan, nan] and [-inf, -inf; -inf, -inf].
    // TF 2.21, tf.nn.max_pool2d: the first window gives 3 with its gradient
    // at the 3; the other two give -3.4028235e38 (the lowest finite f32), a
    // TF artifact documented as a departure: here NaN and -inf.
    let x = Tensor::from_vec(
        vec![
            1.0f32,
            f32::NAN,
            f32::NAN,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            3.0,
            0.5,
            f32::NAN,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
        ],
        &[1, 2, 6, 1],
    )?;
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.max_pool2d([2, 2], [2, 2], Padding::Valid)
    })?;
    same(&y.to_vec_f64(), &[3.0, NAN, -INF], 0.0, "max_pool");
    let loss = tape.record(|| y.slice(&[0, 0, 0, 0], &[1, 1, 1, 1])?.sum_all())?;
    let g = tape.gradient(&loss, &x)?.expect("a gradient").to_vec_f64();
    let mut want = [0.0; 12];
    want[6] = 1.0;
    same(&g, &want, 0.0, "max_pool gradient");
    Ok(())
}
