//! Bad input to the issue-3 math ops gives the right `Error` variant with a
//! message naming the op and the shapes or dtypes, never a panic.

use gradtape::{DType, Error, Result, Tensor};

#[track_caller]
fn err<T: std::fmt::Debug>(r: Result<T>, needles: &[&str]) -> Error {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not contain {n:?}");
    }
    e
}

fn ints() -> Tensor {
    Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap()
}

fn f23() -> Tensor {
    Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap()
}

#[test]
fn float_only_ops_reject_integers_and_bools() {
    type U = fn(&Tensor) -> Result<Tensor>;
    let ops: &[(&str, U)] = &[
        ("expm1", Tensor::expm1),
        ("log1p", Tensor::log1p),
        ("rsqrt", Tensor::rsqrt),
        ("reciprocal", Tensor::reciprocal),
        ("tan", Tensor::tan),
        ("asin", Tensor::asin),
        ("acos", Tensor::acos),
        ("atan", Tensor::atan),
        ("sinh", Tensor::sinh),
        ("cosh", Tensor::cosh),
        ("asinh", Tensor::asinh),
        ("acosh", Tensor::acosh),
        ("atanh", Tensor::atanh),
        ("erf", Tensor::erf),
        ("erfc", Tensor::erfc),
        ("softplus", Tensor::softplus),
        ("softsign", Tensor::softsign),
        ("relu6", Tensor::relu6),
        ("leaky_relu", |x| x.leaky_relu(0.1)),
        ("elu", Tensor::elu),
        ("selu", Tensor::selu),
        ("gelu", |x| x.gelu(false)),
        ("gelu", |x| x.gelu(true)),
        ("silu", Tensor::silu),
        ("hard_sigmoid", Tensor::hard_sigmoid),
        ("hard_silu", Tensor::hard_silu),
        ("mish", Tensor::mish),
        ("mish_grad", Tensor::mish_grad),
        ("celu", |x| x.celu(1.0)),
        ("relu", |x| x.relu_with(0.1, None, 0.0)),
        ("hard_tanh", Tensor::hard_tanh),
        ("soft_shrink", |x| x.soft_shrink(0.5)),
        ("hard_shrink", |x| x.hard_shrink(0.5)),
        ("tanh_shrink", Tensor::tanh_shrink),
        ("glu", |x| x.glu(-1)),
        ("sparse_plus", Tensor::sparse_plus),
        ("squareplus", |x| x.squareplus(4.0)),
        ("logsumexp", |x| x.logsumexp(&[0], false)),
        ("variance", |x| x.variance(&[0], false)),
        ("std", |x| x.std(&[0], false)),
        ("norm", |x| x.norm(&[0], false)),
    ];
    for &(name, f) in ops {
        for t in [ints(), Tensor::vector(&[true, false])] {
            let e = err(f(&t), &[name, t.dtype().name()]);
            assert!(matches!(e, Error::UnsupportedDType { op, .. } if op == name), "{e:?}");
        }
    }
    for (name, r) in [
        ("floor", Tensor::vector(&[true]).floor()),
        ("ceil", Tensor::vector(&[true]).ceil()),
        ("round", Tensor::vector(&[true]).round()),
        ("clip_by_value", Tensor::vector(&[true]).clip_by_value(0.0, 1.0)),
        ("prod", Tensor::vector(&[true]).prod(&[0], false)),
        ("cumsum", Tensor::vector(&[true]).cumsum(0, false, false)),
        ("cumprod", Tensor::vector(&[true]).cumprod(0, false, false)),
        ("argmax", Tensor::vector(&[true]).argmax(0)),
        ("argmin", Tensor::vector(&[true]).argmin(0)),
    ] {
        let e = err(r, &[name, "bool"]);
        assert!(matches!(e, Error::UnsupportedDType { op, .. } if op == name), "{e:?}");
    }
}

#[test]
fn binary_ops_check_shapes_and_dtypes() {
    let a = f23();
    let b = Tensor::vector(&[1.0f32; 2]);
    for (name, r) in [
        ("squared_difference", a.squared_difference(&b)),
        ("atan2", a.atan2(&b)),
        ("floor_div", a.floor_div(&b)),
        ("floor_mod", a.floor_mod(&b)),
    ] {
        let e = err(r, &[name, "[2, 3]", "[2]"]);
        assert_eq!(
            e,
            Error::ShapeMismatch {
                op: name,
                lhs: vec![2, 3],
                rhs: vec![2]
            }
        );
    }
    let d = Tensor::vector(&[1.0f64; 3]);
    for (name, r) in [
        ("squared_difference", a.squared_difference(&d)),
        ("atan2", a.atan2(&d)),
        ("floor_div", a.floor_div(&d)),
        ("floor_mod", a.floor_mod(&d)),
    ] {
        let e = err(r, &[name, "f32", "f64"]);
        assert!(matches!(e, Error::DTypeMismatch { op, .. } if op == name), "{e:?}");
    }
    let e = err(ints().atan2(&ints()), &["atan2", "i32"]);
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e:?}");
    // (integers are squared_difference's too, as TensorFlow's: wrapping)
    let big = Tensor::vector(&[i32::MAX, 3]);
    let sd = big.squared_difference(&Tensor::vector(&[-1i32, 5])).unwrap();
    assert_eq!(sd.to_vec::<i32>().unwrap(), vec![0, 4]);
    let bb = Tensor::vector(&[true, false]);
    for (name, r) in [("floor_div", bb.floor_div(&bb)), ("floor_mod", bb.floor_mod(&bb))] {
        let e = err(r, &[name, "bool"]);
        assert!(matches!(e, Error::UnsupportedDType { .. }), "{e:?}");
    }
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let z = Tensor::vector(&[1i32, 0, 2]);
    for (name, r) in [("floor_div", ints().floor_div(&z)), ("floor_mod", ints().floor_mod(&z))] {
        let e = err(r, &[name, "division by zero", "[2, 3]", "[3]"]);
        assert!(matches!(e, Error::InvalidArgument { op, .. } if op == name), "{e:?}");
    }
    // float division by zero is IEEE
    let q = f23().floor_div(&Tensor::scalar(0.0f32)).unwrap();
    assert!(q.to_vec::<f32>().unwrap().iter().all(|v| v.is_infinite()));
}

#[test]
fn logical_ops_need_bools() {
    let b = Tensor::vector(&[true, false]);
    let i = Tensor::vector(&[1i64, 0]);
    for (name, r) in [
        ("logical_and", b.logical_and(&i)),
        ("logical_or", i.logical_or(&b)),
        ("logical_xor", b.logical_xor(&i)),
        ("logical_not", i.logical_not()),
    ] {
        let e = err(r, &[name, "i64", "bool"]);
        assert!(matches!(e, Error::UnsupportedDType { op, .. } if op == name), "{e:?}");
    }
    let e = err(
        b.logical_and(&Tensor::vector(&[true; 3])),
        &["logical_and", "[2]", "[3]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    for (name, r) in [("all", f23().all(&[0], false)), ("any", ints().any(&[0], false))] {
        let e = err(r, &[name, "bool"]);
        assert!(matches!(e, Error::UnsupportedDType { op, .. } if op == name), "{e:?}");
    }
}

#[test]
fn reductions_and_scans_check_axes() {
    let x = Tensor::zeros(&[2, 3], DType::F64);
    type R = fn(&Tensor, &[isize]) -> Result<Tensor>;
    let ops: &[(&str, R)] = &[
        ("prod", |x, a| x.prod(a, false)),
        ("logsumexp", |x, a| x.logsumexp(a, false)),
        ("variance", |x, a| x.variance(a, true)),
        ("norm", |x, a| x.norm(a, false)),
        ("all", |x, a| x.cast(DType::Bool)?.all(a, false)),
        ("any", |x, a| x.cast(DType::Bool)?.any(a, false)),
    ];
    for &(name, f) in ops {
        let e = err(f(&x, &[2]), &["axis 2", "out of range", "[2, 3]"]);
        assert!(matches!(e, Error::BadAxis { repeated: false, .. }), "{name}: {e:?}");
        let e = err(f(&x, &[-3]), &["axis -3", "[2, 3]"]);
        assert!(matches!(e, Error::BadAxis { .. }), "{name}: {e:?}");
        let e = err(f(&x, &[1, -1]), &["repeated", "[2, 3]"]);
        assert!(matches!(e, Error::BadAxis { repeated: true, .. }), "{name}: {e:?}");
    }
    for (name, r) in [
        ("cumsum", x.cumsum(2, false, false)),
        ("cumprod", x.cumprod(-3, true, true)),
        ("argmax", x.argmax(5)),
        ("argmin", x.argmin(-4)),
    ] {
        let e = err(r, &[name, "[2, 3]", "out of range"]);
        assert!(matches!(e, Error::BadAxis { op, .. } if op == name), "{e:?}");
    }
    // a scalar has no axis to scan or search
    let s = Tensor::scalar(1.0f64);
    assert!(matches!(s.cumsum(0, false, false), Err(Error::BadAxis { .. })));
    assert!(matches!(s.argmax(0), Err(Error::BadAxis { .. })));
}

#[test]
fn argmax_of_an_empty_axis_is_an_error() {
    let e = Tensor::zeros(&[2, 0], DType::F32);
    for (name, r) in [("argmax", e.argmax(1)), ("argmin", e.argmin(-1))] {
        let err = err(r, &[name, "[2, 0]", "empty"]);
        assert!(
            matches!(err, Error::InvalidArgument { op, .. } if op == name),
            "{err:?}"
        );
    }
}

#[test]
fn clip_by_value_checks_its_bounds() {
    for (lo, hi) in [(1.0, 0.0), (f64::NAN, 1.0), (0.0, f64::NAN)] {
        let e = err(f23().clip_by_value(lo, hi), &["clip_by_value", "lo <= hi", "[2, 3]"]);
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "clip_by_value",
                    ..
                }
            ),
            "{e:?}"
        );
    }
}

/// A scalar operand an integer tensor cannot hold exactly is an error naming
/// the op, never truncated: TensorFlow 2.21 refuses it too
/// (`tf.constant([1, 2, 3]) * 0.5` raises "TypeError: Cannot convert 0.5 to
/// EagerTensor of dtype int32", as do `tf.clip_by_value(x, 0.5, 2.5)`,
/// `x > 1.5` and `x * 3e10`).
#[test]
fn integer_tensors_refuse_scalars_they_cannot_hold() {
    use gradtape::PadMode;
    type S = fn(&Tensor) -> Result<Tensor>;
    let i = ints();
    let bad: &[(&str, &str, S)] = &[
        ("mul_scalar", "0.5", |x| x.mul_scalar(0.5)),
        ("div_scalar", "0.5", |x| x.div_scalar(0.5)),
        ("add_scalar", "NaN", |x| x.add_scalar(f64::NAN)),
        ("sub_scalar", "inf", |x| x.sub_scalar(f64::INFINITY)),
        ("mul_scalar", "30000000000", |x| x.mul_scalar(3e10)),
        ("add_scalar", "-2147483649", |x| x.add_scalar(-2147483649.0)),
        ("clip_by_value", "0.5", |x| x.clip_by_value(0.5, 4.0)),
        ("clip_by_value", "4.5", |x| x.clip_by_value(1.0, 4.5)),
        ("gt_scalar", "1.5", |x| x.gt_scalar(1.5)),
        ("lt_scalar", "NaN", |x| x.lt_scalar(f64::NAN)),
        ("ge_scalar", "0.5", |x| x.ge_scalar(0.5)),
        ("le_scalar", "inf", |x| x.le_scalar(f64::INFINITY)),
        ("eq_scalar", "2.5", |x| x.eq_scalar(2.5)),
        ("ne_scalar", "0.25", |x| x.ne_scalar(0.25)),
        ("scalar_like", "0.25", |x| x.scalar_like(0.25)),
        ("pad", "0.5", |x| x.pad_with(&[(1, 0), (0, 0)], PadMode::Constant(0.5))),
        ("one_hot", "0.5", |x| x.one_hot(3, 0.5, 0.0, -1, DType::I64)),
        ("one_hot", "2", |x| x.one_hot(3, 1.0, 2.0, -1, DType::Bool)),
    ];
    for (op, c, f) in bad {
        let e = err(f(&i), &[op, c, "not exactly representable", "[2, 3]"]);
        assert!(matches!(e, Error::InvalidArgument { .. }), "{op}: {e:?}");
    }
    // i64 holds [-2^63, 2^63): 2^63 itself is out of range
    let l = Tensor::vector(&[1i64]);
    err(l.add_scalar(9_223_372_036_854_775_808.0), &["add_scalar", "i64"]);
    assert_eq!(
        l.add_scalar(-9_223_372_036_854_775_808.0)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        vec![i64::MIN + 1]
    );
    // exact scalars keep working; floats take any scalar
    assert_eq!(
        i.mul_scalar(2.0).unwrap().to_vec::<i32>().unwrap(),
        vec![2, 4, 6, 8, 10, 12]
    );
    assert_eq!(
        i.div_scalar(-2.0).unwrap().to_vec::<i32>().unwrap(),
        vec![0, -1, -1, -2, -2, -3]
    );
    assert_eq!(
        i.sub_scalar(1.0).unwrap().to_vec::<i32>().unwrap(),
        vec![0, 1, 2, 3, 4, 5]
    );
    assert_eq!(
        i.clip_by_value(2.0, 4.0).unwrap().to_vec::<i32>().unwrap(),
        vec![2, 2, 3, 4, 4, 4]
    );
    assert_eq!(
        i.gt_scalar(3.0).unwrap().to_vec::<bool>().unwrap(),
        vec![false, false, false, true, true, true]
    );
    let c = |f: fn(&Tensor, f64) -> Result<Tensor>| f(&i, 3.0).unwrap().to_vec::<bool>().unwrap();
    assert_eq!(c(Tensor::ge_scalar), vec![false, false, true, true, true, true]);
    assert_eq!(c(Tensor::le_scalar), vec![true, true, true, false, false, false]);
    assert_eq!(c(Tensor::eq_scalar), vec![false, false, true, false, false, false]);
    assert_eq!(c(Tensor::ne_scalar), vec![true, true, false, true, true, true]);
    assert_eq!(f23().mul_scalar(0.5).unwrap().to_vec::<f32>().unwrap()[0], 0.5);
    assert!(f23().add_scalar(f64::NAN).unwrap().to_vec::<f32>().unwrap()[0].is_nan());
}
