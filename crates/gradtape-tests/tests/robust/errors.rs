//! Bad input gives an `Err` that names the op and the shapes or dtypes
//! involved, never a panic.
//!
//! Each test asserts on the error variant and on its `Display` message.

use gradtape::{DType, Error, GradientOptions, GradientTape, Result, Tensor, Variable};

fn m23() -> Tensor {
    Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap()
}

/// Unwraps the error of `r`, checks the message contains every `needle`, and
/// returns the error for a variant match.
#[track_caller]
fn err<T: std::fmt::Debug>(r: Result<T>, needles: &[&str]) -> Error {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not contain {n:?}");
    }
    e
}

#[test]
fn shape_mismatch_names_op_and_shapes() {
    let e = err(m23().add(&Tensor::vector(&[1.0f32; 4])), &["add", "[2, 3]", "[4]"]);
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "add",
            lhs: vec![2, 3],
            rhs: vec![4]
        }
    );
    for (name, r) in [
        ("sub", m23().sub(&Tensor::vector(&[1.0f32; 2]))),
        ("mul", m23().mul(&Tensor::vector(&[1.0f32; 2]))),
        ("div", m23().div(&Tensor::vector(&[1.0f32; 2]))),
        ("pow", m23().pow(&Tensor::vector(&[1.0f32; 2]))),
        ("maximum", m23().maximum(&Tensor::vector(&[1.0f32; 2]))),
        ("minimum", m23().minimum(&Tensor::vector(&[1.0f32; 2]))),
    ] {
        let e = err(r, &[name, "[2, 3]", "[2]"]);
        assert!(matches!(e, Error::ShapeMismatch { op, .. } if op == name), "{e:?}");
    }
    let e = err(
        Tensor::where_(&Tensor::vector(&[true, false]), &m23(), &m23()),
        &["where", "[2]", "[2, 3]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "where", .. }), "{e:?}");
    let e = err(m23().sum_to_shape(&[4]), &["sum_to_shape", "[2, 3]", "[4]"]);
    assert!(matches!(e, Error::ShapeMismatch { op: "sum_to_shape", .. }), "{e:?}");
    let e = err(
        Tensor::vector(&[1.0f32; 3]).sum_to_shape(&[2, 3]),
        &["sum_to_shape", "[3]", "[2, 3]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "sum_to_shape", .. }), "{e:?}");
}

#[test]
fn dtype_mismatch_names_op_and_dtypes() {
    let e = err(m23().add(&Tensor::ones(&[2, 3], DType::F64)), &["add", "f32", "f64"]);
    assert_eq!(
        e,
        Error::DTypeMismatch {
            op: "add",
            lhs: DType::F32,
            rhs: DType::F64
        }
    );
    let e = err(
        m23().matmul(&Tensor::ones(&[3, 2], DType::F64)),
        &["matmul", "f32", "f64"],
    );
    assert!(matches!(e, Error::DTypeMismatch { op: "matmul", .. }), "{e:?}");
    let e = err(
        m23().maximum(&Tensor::ones(&[2, 3], DType::I32)),
        &["maximum", "f32", "i32"],
    );
    assert!(matches!(e, Error::DTypeMismatch { op: "maximum", .. }), "{e:?}");
    let e = err(m23().pow(&Tensor::ones(&[2, 3], DType::F64)), &["pow", "f32", "f64"]);
    assert!(matches!(e, Error::DTypeMismatch { op: "pow", .. }), "{e:?}");
    let e = err(
        Tensor::where_(
            &Tensor::vector(&[true, false, true]),
            &m23(),
            &Tensor::zeros(&[3], DType::F64),
        ),
        &["where", "f32", "f64"],
    );
    assert!(matches!(e, Error::DTypeMismatch { op: "where", .. }), "{e:?}");
    // a divisor of another dtype is a dtype error, even if it holds a zero
    let e = err(m23().div(&Tensor::zeros(&[3], DType::I32)), &["div", "f32", "i32"]);
    assert!(matches!(e, Error::DTypeMismatch { op: "div", .. }), "{e:?}");
    // reading out as the wrong type
    let e = err(m23().to_vec::<f64>(), &["to_vec", "f32", "f64"]);
    assert!(matches!(e, Error::DTypeMismatch { op: "to_vec", .. }), "{e:?}");
}

#[test]
fn unsupported_dtype_names_op_and_dtype() {
    let i = Tensor::vector(&[1i32, 2, 3]);
    let b = Tensor::vector(&[true, false]);
    let e = err(i.exp(), &["exp", "i32", "f32 or f64"]);
    assert_eq!(
        e,
        Error::UnsupportedDType {
            op: "exp",
            dtype: DType::I32,
            expected: "f32 or f64"
        }
    );
    let e = err(b.mean(&[0], false), &["mean", "bool"]);
    assert!(
        matches!(
            e,
            Error::UnsupportedDType {
                op: "mean",
                dtype: DType::Bool,
                ..
            }
        ),
        "{e:?}"
    );
    // (integer means, powers and products are TensorFlow's:
    // tests/ops/tf_integer.rs; mixed and bool operands are still refused)
    for (name, r) in [
        ("log", i.log()),
        ("sqrt", i.sqrt()),
        ("sin", i.sin()),
        ("cos", i.cos()),
        ("tanh", i.tanh()),
        ("sigmoid", i.sigmoid()),
        ("pow_scalar", i.pow_scalar(2.0)),
        (
            "pow",
            Tensor::ones(&[2], DType::Bool).pow(&Tensor::ones(&[2], DType::Bool)),
        ),
        (
            "matmul",
            Tensor::ones(&[2, 2], DType::Bool).matmul(&Tensor::ones(&[2, 2], DType::Bool)),
        ),
    ] {
        let e = err(r, &[name]);
        assert!(
            matches!(e, Error::UnsupportedDType { op, .. } if op == name),
            "{name}: {e:?}"
        );
    }
    for (name, r) in [
        ("neg", b.neg()),
        ("abs", b.abs()),
        ("relu", b.relu()),
        ("square", b.square()),
        ("sum", b.sum(&[0], false)),
        ("max", b.max_all()),
        ("min", b.min_all()),
        ("add", b.add(&b)),
        ("mul_scalar", b.mul_scalar(2.0)),
    ] {
        let e = err(r, &[name, "bool"]);
        assert!(
            matches!(e, Error::UnsupportedDType { op, dtype: DType::Bool, .. } if op == name),
            "{name}: {e:?}"
        );
    }
    // where_'s condition must be bool; gather's indices must be integers
    let e = err(Tensor::where_(&m23(), &m23(), &m23()), &["where", "f32", "bool"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "where", .. }), "{e:?}");
    let e = err(m23().gather(&Tensor::vector(&[0.0f32]), 0), &["gather", "f32"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "gather", .. }), "{e:?}");
}

#[test]
fn bad_axis_names_op_axis_and_shape() {
    let e = err(m23().sum(&[5], false), &["sum", "axis 5", "[2, 3]"]);
    assert_eq!(
        e,
        Error::BadAxis {
            op: "sum",
            axis: 5,
            shape: vec![2, 3],
            repeated: false
        }
    );
    let e = err(m23().sum(&[-3], false), &["sum", "axis -3", "[2, 3]", "out of range"]);
    assert!(
        matches!(
            e,
            Error::BadAxis {
                op: "sum",
                axis: -3,
                ..
            }
        ),
        "{e:?}"
    );
    // the same axis twice, also spelled once negative
    let e = err(m23().sum(&[0, 0], false), &["sum", "axis 0", "[2, 3]", "repeated"]);
    assert!(
        matches!(
            e,
            Error::BadAxis {
                op: "sum",
                axis: 0,
                repeated: true,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(m23().max(&[1, -1], true), &["max", "axis -1", "[2, 3]", "repeated"]);
    assert!(
        matches!(
            e,
            Error::BadAxis {
                op: "max",
                repeated: true,
                ..
            }
        ),
        "{e:?}"
    );
    for (name, r) in [
        ("mean", m23().mean(&[2], false)),
        ("max", m23().max(&[7], false)),
        ("min", m23().min(&[-4], false)),
        ("gather", m23().gather(&Tensor::vector(&[0i64]), 2)),
        ("scatter_add", m23().scatter_add(&Tensor::vector(&[0i64]), 3, 2)),
        ("expand_dims", m23().expand_dims(4)),
        ("squeeze", m23().squeeze(&[2])),
    ] {
        let e = err(r, &[name, "[2, 3]"]);
        assert!(matches!(e, Error::BadAxis { op, .. } if op == name), "{name}: {e:?}");
    }
    let e = err(m23().dim(2), &["dim", "axis 2", "[2, 3]"]);
    assert!(matches!(e, Error::BadAxis { op: "dim", .. }), "{e:?}");
    // a scalar has no axis 0
    let e = err(Tensor::scalar(1.0f64).sum(&[0], false), &["sum", "axis 0", "[]"]);
    assert!(matches!(e, Error::BadAxis { .. }), "{e:?}");
}

#[test]
fn out_of_range_index_names_op_index_and_dim() {
    let x = Tensor::from_vec(vec![1.0f64; 6], &[3, 2]).unwrap();
    let e = err(
        x.gather(&Tensor::vector(&[0i64, 7]), 0),
        &["gather", "index 7", "size 3", "[3, 2]"],
    );
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "gather",
            index: 7,
            dim: 3,
            shape: vec![3, 2]
        }
    );
    let e = err(
        x.gather(&Tensor::vector(&[-1i32]), 0),
        &["gather", "index -1", "size 3"],
    );
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "gather",
                index: -1,
                dim: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(x.gather(&Tensor::vector(&[2i64]), 1), &["gather", "index 2", "size 2"]);
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "gather",
                index: 2,
                dim: 2,
                ..
            }
        ),
        "{e:?}"
    );
    let u = Tensor::vector(&[1.0f32, 2.0]);
    let e = err(
        u.scatter_add(&Tensor::vector(&[0i64, 4]), 0, 4),
        &["scatter_add", "index 4", "size 4"],
    );
    assert!(matches!(e, Error::IndexOutOfRange { op: "scatter_add", .. }), "{e:?}");
    let e = err(
        u.scatter_add(&Tensor::vector(&[0i64, -2]), 0, 4),
        &["scatter_add", "index -2"],
    );
    assert!(matches!(e, Error::IndexOutOfRange { op: "scatter_add", .. }), "{e:?}");
    // updates whose shape does not match the indices
    let e = err(
        u.scatter_add(&Tensor::vector(&[0i64, 1, 2]), 0, 4),
        &["scatter_add", "[2]", "[3]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "scatter_add", .. }), "{e:?}");
}

#[test]
fn bad_reshape_names_op_numel_and_shape() {
    let e = err(m23().reshape(&[4]), &["reshape", "6 elements", "[4]"]);
    assert_eq!(
        e,
        Error::BadReshape {
            op: "reshape",
            numel: 6,
            shape: vec![4]
        }
    );
    let e = err(m23().reshape(&[0, 6]), &["reshape", "6 elements", "[0, 6]"]);
    assert!(matches!(e, Error::BadReshape { .. }), "{e:?}");
    let e = err(
        Tensor::from_vec(vec![1.0f32; 5], &[2, 2]),
        &["from_vec", "5 elements", "[2, 2]"],
    );
    assert_eq!(
        e,
        Error::BadReshape {
            op: "from_vec",
            numel: 5,
            shape: vec![2, 2]
        }
    );
    let e = err(Tensor::from_slice(&[1i64, 2], &[]), &["from_vec", "2 elements", "[]"]);
    assert!(matches!(e, Error::BadReshape { .. }), "{e:?}");
}

#[test]
fn matmul_errors_name_both_shapes() {
    let a = Tensor::ones(&[2, 3], DType::F64);
    let e = err(
        a.matmul(&Tensor::ones(&[4, 5], DType::F64)),
        &["matmul", "[2, 3]", "[4, 5]"],
    );
    assert_eq!(
        e,
        Error::InnerDimMismatch {
            op: "matmul",
            lhs: vec![2, 3],
            rhs: vec![4, 5],
            lhs_axis: 1,
            rhs_axis: 0,
            lhs_dim: 3,
            rhs_dim: 4,
        }
    );
    // the transpose flags change which dims must agree
    let e = err(
        a.matmul_with(&Tensor::ones(&[2, 3], DType::F64), false, false),
        &["matmul", "[2, 3]"],
    );
    assert!(matches!(e, Error::InnerDimMismatch { op: "matmul", .. }), "{e:?}");
    assert!(a.matmul_with(&Tensor::ones(&[2, 3], DType::F64), true, false).is_ok());
    // a batched mismatch names the contracted dims, not only the shapes
    // (which were printed alike: "incompatible shapes [2, 4, 8, 32] and
    // [2, 4, 8, 32]"), following the transpose flags
    let q = Tensor::ones(&[2, 4, 8, 32], DType::F32);
    let e = err(
        q.matmul(&q),
        &[
            "matmul",
            "inner dimensions differ: a's 32 (axis 3) vs b's 8 (axis 2)",
            "[2, 4, 8, 32]",
        ],
    );
    assert!(matches!(e, Error::InnerDimMismatch { .. }), "{e:?}");
    assert_eq!(q.matmul_with(&q, false, true).unwrap().shape(), &[2, 4, 8, 8]);
    err(
        q.matmul_with(&q, true, true),
        &["inner dimensions differ: a's 8 (axis 2) vs b's 32 (axis 3)"],
    );
    let r = Tensor::ones(&[2, 4, 8, 16], DType::F32);
    err(
        q.matmul_with(&r, true, true),
        &["inner dimensions differ: a's 8 (axis 2) vs b's 16 (axis 3)"],
    );
    // batch dims that do not broadcast
    let e = err(
        Tensor::ones(&[2, 3, 4], DType::F64).matmul(&Tensor::ones(&[3, 4, 5], DType::F64)),
        &["matmul", "[2, 3, 4]", "[3, 4, 5]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "matmul", .. }), "{e:?}");
    // rank < 2
    let e = err(
        Tensor::ones(&[3], DType::F64).matmul(&a.transpose().unwrap()),
        &["matmul", "rank", "[3]", "[3, 2]"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "matmul", .. }), "{e:?}");
    let e = err(a.matmul(&Tensor::scalar(1.0f64)), &["matmul", "rank", "[2, 3]", "[]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "matmul", .. }), "{e:?}");
}

#[test]
fn shape_op_errors_name_op_and_shape() {
    let x = Tensor::ones(&[2, 3, 4], DType::F32);
    for perm in [&[0, 0, 1][..], &[0, 1], &[0, 1, 3], &[2, 1, 0, 3]] {
        let e = err(x.permute(perm), &["permute", &format!("{perm:?}"), "[2, 3, 4]"]);
        assert!(matches!(e, Error::InvalidArgument { op: "permute", .. }), "{e:?}");
    }
    let e = err(Tensor::vector(&[1.0f32; 3]).transpose(), &["transpose", "rank", "[3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "transpose", .. }), "{e:?}");

    let e = err(m23().broadcast_to(&[3, 3]), &["broadcast_to", "[2, 3]", "[3, 3]"]);
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "broadcast_to",
            lhs: vec![2, 3],
            rhs: vec![3, 3]
        }
    );
    // broadcasting may not drop or shrink dims
    let e = err(m23().broadcast_to(&[3]), &["broadcast_to", "[2, 3]", "[3]"]);
    assert!(matches!(e, Error::ShapeMismatch { op: "broadcast_to", .. }), "{e:?}");
    let e = err(m23().broadcast_to(&[1, 3]), &["broadcast_to", "[2, 3]", "[1, 3]"]);
    assert!(matches!(e, Error::ShapeMismatch { op: "broadcast_to", .. }), "{e:?}");

    let e = err(
        m23().reshape(&[2, 1, 3]).unwrap().squeeze(&[0]),
        &["squeeze", "[2, 1, 3]", "size 2"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "squeeze", .. }), "{e:?}");

    let e = err(m23().slice(&[1, 1], &[2, 2]), &["slice", "[1, 1]", "[2, 2]", "[2, 3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "slice", .. }), "{e:?}");
    let e = err(m23().slice(&[0], &[1]), &["slice", "[0]", "[1]", "[2, 3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "slice", .. }), "{e:?}");
    let e = err(m23().slice(&[usize::MAX, 0], &[2, 3]), &["slice", "[2, 3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "slice", .. }), "{e:?}");
    let e = err(m23().narrow(1, 2, 2), &["narrow", "axis 1", "[2, 3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "narrow", .. }), "{e:?}");
    let e = err(m23().narrow(2, 0, 1), &["narrow", "axis 2", "[2, 3]"]);
    assert!(matches!(e, Error::BadAxis { op: "narrow", .. }), "{e:?}");
    let e = err(m23().pad(&[(1, 1)]), &["pad", "1 paddings", "[2, 3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "pad", .. }), "{e:?}");
}

#[test]
fn integer_division_by_zero_is_an_error() {
    let a = Tensor::vector(&[4i32, 6]);
    let e = err(
        a.div(&Tensor::vector(&[2i32, 0])),
        &["div", "division by zero", "[2]", "i32"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "div", .. }), "{e:?}");
    let e = err(
        Tensor::vector(&[4i64]).div(&Tensor::scalar(0i64)),
        &["div", "division by zero", "i64"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "div", .. }), "{e:?}");
    let e = err(a.div_scalar(0.0), &["div_scalar", "division by zero", "i32"]);
    assert!(matches!(e, Error::InvalidArgument { op: "div_scalar", .. }), "{e:?}");
    // a scalar an integer tensor cannot hold is refused before it could
    // truncate to a zero divisor
    let e = err(a.div_scalar(0.5), &["div_scalar", "0.5", "not exactly representable"]);
    assert!(matches!(e, Error::InvalidArgument { op: "div_scalar", .. }), "{e:?}");
    // floats divide by zero as IEEE says
    let f = Tensor::vector(&[1.0f32, -1.0, 0.0])
        .div(&Tensor::zeros(&[3], DType::F32))
        .unwrap();
    let v = f.to_vec::<f32>().unwrap();
    assert_eq!((v[0], v[1]), (f32::INFINITY, f32::NEG_INFINITY));
    assert!(v[2].is_nan());
    assert_eq!(
        a.div(&Tensor::vector(&[3i32, -4])).unwrap().to_vec::<i32>().unwrap(),
        vec![1, -1]
    );
    // the one overflowing quotient wraps instead of panicking
    let min = Tensor::vector(&[i32::MIN, 7]);
    assert_eq!(
        min.div(&Tensor::scalar(-1i32)).unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MIN, -7]
    );
    assert_eq!(
        min.div_scalar(-1.0).unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MIN, -7]
    );
    let min = Tensor::vector(&[i64::MIN]);
    assert_eq!(min.div_scalar(-1.0).unwrap().to_vec::<i64>().unwrap(), vec![i64::MIN]);
}

#[test]
fn to_scalar_and_item_of_non_scalars() {
    let e = err(m23().to_scalar::<f32>(), &["to_scalar", "[2, 3]", "6 elements"]);
    assert!(matches!(e, Error::InvalidArgument { op: "to_scalar", .. }), "{e:?}");
    let e = err(
        Tensor::zeros(&[0], DType::F64).to_scalar::<f64>(),
        &["to_scalar", "[0]", "0 elements"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "to_scalar", .. }), "{e:?}");
    let e = err(m23().item(), &["item", "[2, 3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "item", .. }), "{e:?}");
    let e = err(Tensor::scalar(1.0f32).to_scalar::<i32>(), &["to_scalar", "f32", "i32"]);
    assert!(matches!(e, Error::DTypeMismatch { op: "to_scalar", .. }), "{e:?}");
    // a one-element tensor of any rank is fine
    assert_eq!(
        Tensor::from_vec(vec![2.5f32], &[1, 1])
            .unwrap()
            .to_scalar::<f32>()
            .unwrap(),
        2.5
    );
}

#[test]
fn wrong_number_of_output_gradients() {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::new();
    let y = tape
        .record(|| {
            tape.watch(&x);
            x.square()
        })
        .unwrap();
    let opts = GradientOptions::default().output_gradients(vec![x.ones_like(), x.ones_like()]);
    let e = err(
        tape.gradient_with(&y, &x, opts),
        &["gradient", "2 output_gradients", "1 targets"],
    );
    assert_eq!(e, Error::OutputGradientsCount { expected: 1, got: 2 });
    // a rejected call does not use up a one-shot tape
    assert!(tape.gradient(&y, &x).unwrap().is_some());

    let tape = GradientTape::new();
    let (y, z) = tape
        .record(|| {
            tape.watch(&x);
            Ok((x.square()?, x.sum_all()?))
        })
        .unwrap();
    let e = err(
        tape.gradient_with([&y, &z], &x, GradientOptions::default().output_gradients(vec![])),
        &["0 output_gradients", "2 targets"],
    );
    assert_eq!(e, Error::OutputGradientsCount { expected: 2, got: 0 });
}

#[test]
fn wrong_shape_or_dtype_of_output_gradients() {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::persistent();
    let y = tape
        .record(|| {
            tape.watch(&x);
            x.square()
        })
        .unwrap();
    let opts = GradientOptions::default().output_gradients(vec![Tensor::ones(&[3], DType::F64)]);
    let e = err(
        tape.gradient_with(&y, &x, opts),
        &["output_gradients[0]", "[3]", "[2]", "f64"],
    );
    assert_eq!(
        e,
        Error::OutputGradientShape {
            index: 0,
            expected: vec![2],
            expected_dtype: DType::F64,
            got: vec![3],
            got_dtype: DType::F64
        }
    );
    let opts = GradientOptions::default().output_gradients(vec![Tensor::ones(&[2], DType::F32)]);
    let e = err(tape.gradient_with(&y, &x, opts), &["output_gradients[0]", "f32", "f64"]);
    assert!(
        matches!(
            e,
            Error::OutputGradientShape {
                index: 0,
                got_dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    // the second of two targets
    let opts = GradientOptions::default().output_gradients(vec![y.ones_like(), Tensor::scalar(1.0f64)]);
    let e = err(
        tape.gradient_with([&y, &y], &x, opts),
        &["output_gradients[1]", "[]", "[2]"],
    );
    assert!(matches!(e, Error::OutputGradientShape { index: 1, .. }), "{e:?}");
}

#[test]
fn a_one_shot_tape_cannot_be_reused() {
    let x = Tensor::scalar(3.0f32);
    let tape = GradientTape::new();
    let y = tape
        .record(|| {
            tape.watch(&x);
            x.square()
        })
        .unwrap();
    assert_eq!(tape.gradient(&y, &x).unwrap().unwrap().to_scalar::<f32>().unwrap(), 6.0);
    let e = err(
        tape.gradient(&y, &x),
        &["gradient", "not persistent", "GradientTape::persistent()"],
    );
    assert_eq!(e, Error::TapeNotPersistent { op: "gradient" });
    // a persistent tape can be asked again
    let tape = GradientTape::persistent();
    let y = tape
        .record(|| {
            tape.watch(&x);
            x.square()
        })
        .unwrap();
    for _ in 0..2 {
        assert_eq!(tape.gradient(&y, &x).unwrap().unwrap().to_scalar::<f32>().unwrap(), 6.0);
    }
}

#[test]
fn stop_recording_while_not_recording() {
    let tape = GradientTape::new();
    let e = err(tape.stop_recording(|| Ok(())), &["stop_recording", "not recording"]);
    assert_eq!(e, Error::TapeNotRecording);
    // after the recording scope ends, too
    tape.record(|| Ok(())).unwrap();
    assert_eq!(tape.stop_recording(|| Ok(())).unwrap_err(), Error::TapeNotRecording);
    // and inside stop_recording itself
    let nested = tape.record(|| tape.stop_recording(|| tape.stop_recording(|| Ok(()))));
    assert_eq!(nested.unwrap_err(), Error::TapeNotRecording);
    assert!(!tape.is_recording());
}

#[test]
fn entering_an_active_tape_twice() {
    let tape = GradientTape::new();
    let guard = tape.enter().unwrap();
    let e = err(tape.enter().map(|_| ()), &["record", "already recording"]);
    assert_eq!(e, Error::TapeAlreadyRecording);
    let e = err(tape.record(|| Ok(())), &["already recording"]);
    assert_eq!(e, Error::TapeAlreadyRecording);
    // the failed attempts did not stop the first recording
    assert!(tape.is_recording());
    drop(guard);
    assert!(!tape.is_recording());
    // entering again after it stopped is fine
    assert!(tape.enter().is_ok());
}

#[test]
fn variable_assign_of_wrong_shape_or_dtype() {
    let v = Variable::builder(Tensor::vector(&[1.0f32, 2.0]))
        .name("weights")
        .build();
    let e = err(
        v.assign(&Tensor::vector(&[1.0f32; 3])),
        &["assign", "'weights'", "[2]", "[3]", "f32"],
    );
    assert_eq!(
        e,
        Error::VariableMismatch {
            op: "assign",
            name: "weights".into(),
            expected: vec![2],
            expected_dtype: DType::F32,
            got: vec![3],
            got_dtype: DType::F32
        }
    );
    let e = err(
        v.assign(&Tensor::vector(&[1.0f64, 2.0])),
        &["assign", "weights", "f32", "f64"],
    );
    assert!(
        matches!(
            e,
            Error::VariableMismatch {
                got_dtype: DType::F64,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(
        v.assign_add(&Tensor::scalar(1.0f32)),
        &["assign_add", "weights", "[2]", "[]"],
    );
    assert!(matches!(e, Error::VariableMismatch { op: "assign_add", .. }), "{e:?}");
    let e = err(
        v.assign_sub(&Tensor::vector(&[1i32, 2])),
        &["assign_sub", "weights", "i32"],
    );
    assert!(matches!(e, Error::VariableMismatch { op: "assign_sub", .. }), "{e:?}");
    // the value is unchanged after the failures
    assert_eq!(v.read().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn errors_inside_a_recording_leave_the_tape_usable() {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::persistent();
    let r = tape.record(|| {
        tape.watch(&x);
        let y = x.square()?;
        y.add(&Tensor::ones(&[3], DType::F64))
    });
    assert!(matches!(r, Err(Error::ShapeMismatch { op: "add", .. })));
    assert!(!tape.is_recording());
    let y = tape.record(|| x.square()).unwrap();
    assert_eq!(
        tape.gradient(&y, &x).unwrap().unwrap().to_vec::<f64>().unwrap(),
        vec![2.0, 4.0]
    );
}

#[test]
fn reductions_of_empty_tensors_do_not_panic() {
    let e = Tensor::zeros(&[0, 3], DType::F32);
    assert_eq!(e.sum(&[0], false).unwrap().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(e.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    assert_eq!(e.max(&[1], false).unwrap().shape(), &[0]);
    // TensorFlow: the max of nothing is the lowest value, the min the highest
    assert_eq!(
        e.max(&[0], false).unwrap().to_vec::<f32>().unwrap(),
        vec![f32::NEG_INFINITY; 3]
    );
    assert_eq!(e.min_all().unwrap().to_scalar::<f32>().unwrap(), f32::INFINITY);
}

/// Integer arithmetic wraps on overflow, as TensorFlow's kernels do, instead
/// of panicking (debug builds check overflow; `cargo test` without
/// `--release` is where a regression here would panic).
#[test]
fn integer_overflow_wraps_instead_of_panicking() -> gradtape::Result<()> {
    let big = Tensor::vector(&[i32::MAX, i32::MIN]);
    let one = Tensor::scalar(1i32);
    assert_eq!(big.add(&one)?.to_vec::<i32>()?, vec![i32::MIN, i32::MIN + 1]);
    assert_eq!(big.sub(&one)?.to_vec::<i32>()?, vec![i32::MAX - 1, i32::MAX]);
    assert_eq!(big.mul_scalar(2.0)?.to_vec::<i32>()?, vec![-2, 0]);
    assert_eq!(big.neg()?.to_vec::<i32>()?, vec![i32::MIN + 1, i32::MIN]);
    assert_eq!(big.sum_all()?.to_scalar::<i32>()?, -1);
    let huge = Tensor::vector(&[i64::MAX, 1]);
    assert_eq!(
        huge.sum_all()?.to_scalar::<i64>()?,
        i64::MIN,
        "exact integer sum, not through f64"
    );
    Ok(())
}

/// Ops built from other ops report the op the user called, not the inner op
/// that found the argument bad (`layer_normalization` with a bad axis once
/// said `mean`).
#[test]
fn composite_ops_name_themselves() {
    let x = m23().cast(DType::F64).unwrap();
    let sq = Tensor::ones(&[2, 3], DType::F64);
    let cases: Vec<(&str, Result<Tensor>)> = vec![
        ("layer_normalization", x.layer_normalization(&[5], None, None, 1e-3)),
        ("layer_normalization", x.layer_normalization(&[1, -1], None, None, 1e-3)),
        ("layer_normalization", x.layer_normalization(&[1], None, None, -1.0)),
        ("moments", x.moments(&[2], false).map(|m| m.1)),
        ("moments", x.moments(&[0, -2], true).map(|m| m.1)),
        ("variance", x.variance(&[-3], false)),
        ("std", x.std(&[2], false)),
        ("std", x.cast(DType::I32).unwrap().std(&[0], false)),
        ("embedding_lookup", x.embedding_lookup(&Tensor::vector(&[0.0f64]))),
        ("embedding_lookup", x.embedding_lookup(&Tensor::vector(&[2i64]))),
        ("logdet", sq.logdet()),
        ("tril", Tensor::vector(&[1.0f64]).tril()),
        ("triu", Tensor::vector(&[1.0f64]).triu()),
        ("split_sizes", x.split_sizes(&[1, 1], 1).map(|v| v[0].clone())),
        ("split_sizes", x.split_sizes(&[1], 4).map(|v| v[0].clone())),
        ("repeat_each", x.repeat_each(&[1, 2], 1)),
        ("repeat_each", x.repeat_each(&[1, 2], -3)),
        (
            "jvp",
            gradtape::jvp(|p| p[0].sin(), std::slice::from_ref(&x), &[Tensor::vector(&[1.0f64])]).map(|r| r.1),
        ),
        (
            "jvp",
            gradtape::jvp(|p| p[0].sin(), std::slice::from_ref(&x), &[m23()]).map(|r| r.1),
        ),
        ("hvp", gradtape::hvp(|p| p.sum_all(), &x, &Tensor::vector(&[1.0f64]))),
    ];
    for (op, r) in cases {
        let e = err(r, &[op]);
        let named = match &e {
            Error::BadAxis { op, .. }
            | Error::InvalidArgument { op, .. }
            | Error::UnsupportedDType { op, .. }
            | Error::IndexOutOfRange { op, .. }
            | Error::DTypeMismatch { op, .. }
            | Error::ShapeMismatch { op, .. } => *op,
            other => panic!("{op}: unexpected {other:?}"),
        };
        assert_eq!(named, op, "{e}");
    }
}
