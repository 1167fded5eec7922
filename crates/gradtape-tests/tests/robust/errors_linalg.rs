//! Bad input to the linear-algebra, shape and indexing ops of issue 3 gives
//! the right `Error` variant with a message naming the op and the shapes or
//! dtypes, never a panic.

use gradtape::{DType, Error, PadMode, Result, Slice, Tensor};

#[track_caller]
fn err<T: std::fmt::Debug>(r: Result<T>, needles: &[&str]) -> Error {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not contain {n:?}");
    }
    e
}

fn f64s(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn ones(shape: &[usize]) -> Tensor {
    Tensor::ones(shape, DType::F64)
}

#[test]
fn non_square_matrices_are_rejected() {
    let a = ones(&[2, 3]);
    for (op, r) in [
        ("inverse", a.inverse()),
        ("det", a.det()),
        ("cholesky", a.cholesky()),
        ("logdet", a.logdet()),
    ] {
        let e = err(r, &["[2, 3]", "square"]);
        assert!(matches!(e, Error::InvalidArgument { .. }), "{op}: {e:?}");
    }
    let e = err(ones(&[3]).inverse(), &["inverse", "[3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "inverse", .. }));
    let e = err(a.solve(&ones(&[2, 1])), &["solve", "[2, 3]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "solve", .. }));
    let e = err(
        a.triangular_solve(&ones(&[2, 1]), true, false),
        &["triangular_solve", "[2, 3]"],
    );
    assert!(matches!(
        e,
        Error::InvalidArgument {
            op: "triangular_solve",
            ..
        }
    ));
}

/// `cholesky_solve` (two triangular solves) names itself, not the inner
/// solve, with both shapes.
#[test]
fn cholesky_solve_names_itself_and_the_shapes() {
    let l = Tensor::eye(3, DType::F64);
    let e = err(
        l.cholesky_solve(&ones(&[2, 1])),
        &["cholesky_solve", "[3, 3]", "[2, 1]"],
    );
    assert!(!e.to_string().contains("triangular_solve"), "{e}");
    let e = err(
        ones(&[2, 3]).cholesky_solve(&ones(&[2, 1])),
        &["cholesky_solve", "[2, 3]"],
    );
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "cholesky_solve",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn singular_and_indefinite_matrices_are_rejected() {
    let s = f64s(&[1., 2., 2., 4.], &[2, 2]);
    let e = err(s.inverse(), &["inverse", "singular", "[2, 2]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "inverse", .. }));
    let e = err(s.solve(&ones(&[2, 1])), &["solve", "singular"]);
    assert!(matches!(e, Error::InvalidArgument { op: "solve", .. }));
    // numerically singular: rows in arithmetic progression
    let s3 = f64s(&[1., 2., 3., 4., 5., 6., 7., 8., 9.], &[3, 3]);
    assert!(matches!(
        s3.inverse(),
        Err(Error::InvalidArgument { op: "inverse", .. })
    ));
    // second matrix of a batch singular: the message says which
    let b = f64s(&[1., 0., 0., 1., 0., 0., 0., 0.], &[2, 2, 2]);
    err(b.inverse(), &["inverse", "matrix 1", "[2, 2, 2]"]);
    let e = err(
        f64s(&[1., 2., 2., 1.], &[2, 2]).cholesky(),
        &["cholesky", "positive definite"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "cholesky", .. }));
    err(f64s(&[-1.], &[1, 1]).cholesky(), &["cholesky", "positive definite"]);
}

/// `det` and `slogdet` of a singular matrix have values (0 and -inf); their
/// gradients (through the inverse, as TensorFlow's, which fails there too)
/// fail with an error naming the op, not `inverse`.
#[test]
fn det_gradients_at_a_singular_matrix_name_their_op() -> Result<()> {
    let s = f64s(&[1., 2., 2., 4.], &[2, 2]);
    let tape = gradtape::GradientTape::new();
    let d = tape.record(|| {
        tape.watch(&s);
        s.det()
    })?;
    assert_eq!(d.to_scalar::<f64>()?, 0.0);
    let e = err(tape.gradient(&d, &s), &["det", "gradient", "singular"]);
    assert!(matches!(e, Error::InvalidArgument { op: "det", .. }), "{e:?}");
    let tape = gradtape::GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&s);
        Ok(s.slogdet()?.1)
    })?;
    assert_eq!(l.to_scalar::<f64>()?, f64::NEG_INFINITY);
    let e = err(tape.gradient(&l, &s), &["slogdet", "gradient", "singular"]);
    assert!(matches!(e, Error::InvalidArgument { op: "slogdet", .. }), "{e:?}");
    Ok(())
}

#[test]
fn integer_inputs_are_rejected_where_floats_are_required() {
    // (products and einsums of integers are TensorFlow's:
    // tests/ops/tf_integer.rs)
    let i = Tensor::from_vec(vec![1i32, 0, 0, 1], &[2, 2]).unwrap();
    for (op, r) in [
        ("inverse", i.inverse()),
        ("det", i.det()),
        ("cholesky", i.cholesky()),
        ("slogdet", i.slogdet().map(|p| p.0)),
        ("solve", i.solve(&i)),
        ("triangular_solve", i.triangular_solve(&i, true, false)),
    ] {
        let e = err(r, &[op, "i32"]);
        assert!(matches!(e, Error::UnsupportedDType { op: o, .. } if o == op), "{e:?}");
    }
    let e = err(Tensor::linspace(0.0, 1.0, 3, DType::I64), &["linspace", "i64"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "linspace", .. }));
    let e = err(
        f64s(&[1.], &[1, 1]).solve(&Tensor::ones(&[1, 1], DType::F32)),
        &["solve", "f64", "f32"],
    );
    assert!(matches!(e, Error::DTypeMismatch { op: "solve", .. }));
}

#[test]
fn mismatched_shapes_in_products_and_solves() {
    let e = err(ones(&[3, 3]).solve(&ones(&[2, 1])), &["solve", "[3, 3]", "[2, 1]"]);
    assert!(matches!(e, Error::ShapeMismatch { op: "solve", .. }));
    let e = err(
        ones(&[2, 3, 3]).solve(&ones(&[4, 3, 1])),
        &["solve", "[2, 3, 3]", "[4, 3, 1]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "solve", .. }));
    let e = err(ones(&[2, 3]).matvec(&ones(&[2])), &["matvec", "[2, 3]", "[2]"]);
    assert!(matches!(e, Error::ShapeMismatch { op: "matvec", .. }));
    let e = err(
        ones(&[2, 3]).tensordot(&ones(&[2, 3]), &[1], &[0]),
        &["tensordot", "[2, 3]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "tensordot", .. }));
    let e = err(ones(&[2, 3]).tensordot(&ones(&[3]), &[1, 0], &[0]), &["tensordot"]);
    assert!(matches!(e, Error::InvalidArgument { op: "tensordot", .. }));
    let e = err(
        ones(&[2, 3]).tensordot(&ones(&[3]), &[2], &[0]),
        &["tensordot", "axis 2"],
    );
    assert!(matches!(e, Error::BadAxis { op: "tensordot", .. }));
    let e = err(
        ones(&[2, 3]).tensordot(&ones(&[3, 3]), &[1, 1], &[0, 1]),
        &["tensordot", "repeated"],
    );
    assert!(matches!(
        e,
        Error::BadAxis {
            op: "tensordot",
            repeated: true,
            ..
        }
    ));
    let e = err(ones(&[]).diag(), &["diag", "[]"]);
    assert!(matches!(e, Error::InvalidArgument { op: "diag", .. }));
    err(ones(&[3]).diag_part(), &["diag_part", "[3]"]);
    err(ones(&[3]).trace(), &["trace", "[3]"]);
    err(ones(&[3]).band_part(0, 0), &["band_part", "[3]"]);
}

/// `band_part` with a count past the matrix is TensorFlow's error
/// (`tf.linalg.band_part` of a `[3, 3]` with `num_lower = 5` or
/// `num_upper = 7`: "num_lower must be negative or less or equal to number
/// of rows", checked with TF 2.21); it was taken as the whole triangle.
/// Counts up to the dims, and negative ones (any), keep their meaning.
#[test]
fn band_part_counts_past_the_matrix_are_errors() -> Result<()> {
    let m = ones(&[2, 3, 4]);
    err(
        m.band_part(4, 0),
        &["band_part", "num_lower", "rows (3)", "4", "[2, 3, 4]"],
    );
    err(
        m.band_part(0, 5),
        &["band_part", "num_upper", "columns (4)", "5", "[2, 3, 4]"],
    );
    err(m.band_part(isize::MAX, -1), &["band_part", "num_lower"]);
    // (values as TF's: the whole matrix with both counts at the dims, the
    // lower triangle with num_lower = -2)
    assert_eq!(m.band_part(3, 4)?.to_vec_f64(), vec![1.0; 24]);
    let sq = Tensor::from_vec((1..=9).map(|i| i as f32).collect::<Vec<_>>(), &[3, 3])?;
    assert_eq!(
        sq.band_part(-2, 0)?.to_vec::<f32>()?,
        vec![1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 7.0, 8.0, 9.0]
    );
    Ok(())
}

#[test]
fn bad_einsum_specs() {
    let a = ones(&[2, 3]);
    let b = ones(&[4, 2]);
    for (spec, ops, needle) in [
        ("ij,jk->ik", vec![&a, &b], "einsum"),
        ("ijk->i", vec![&a], "3 letters"),
        ("ij->k", vec![&a], "in no input"),
        ("ij->ii", vec![&a], "repeated"),
        ("i...j...->ij", vec![&a], "more than one ellipsis"),
        ("i.j->ij", vec![&a], "letters"),
        ("...ijk->i", vec![&a], "3 letters"),
        ("ij,jk,kl->il", vec![&a, &b], "3 input terms for 2 operands"),
        ("ij", vec![&a, &b], "operands"),
        ("i1->i", vec![&a], "letters"),
        ("ii->i", vec![&a], "sizes 2 and 3"),
    ] {
        let e = err(Tensor::einsum(spec, &ops), &["einsum", needle]);
        assert!(
            matches!(
                e,
                Error::InvalidArgument { op: "einsum", .. } | Error::ShapeMismatch { op: "einsum", .. }
            ),
            "{spec}: {e:?}"
        );
    }
    // the letter whose sizes differ, and in which operands
    let e = err(
        Tensor::einsum("ij,jk->ik", &[&a, &b]),
        &[
            "einsum",
            "letter 'j' is 3 in operand 0 (shape [2, 3]) but 4 in operand 1 (shape [4, 2])",
        ],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "einsum", .. }));
    // ellipsis dims broadcast only 1 against n
    let e = err(
        Tensor::einsum("...ij,...jk->...ik", &[&ones(&[2, 2, 3]), &ones(&[3, 3, 2])]),
        &[
            "einsum",
            "a dim of the ellipsis is 2 in operand 0 (shape [2, 2, 3]) but 3 in operand 1 (shape [3, 3, 2])",
        ],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "einsum", .. }));
}

#[test]
fn bad_joins_splits_and_slices() {
    let a = ones(&[2, 3]);
    let e = err(Tensor::concat(&[], 0), &["concat"]);
    assert!(matches!(e, Error::InvalidArgument { op: "concat", .. }));
    let e = err(
        Tensor::concat(&[&a, &ones(&[3, 2])], 0),
        &["concat", "[2, 3]", "[3, 2]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "concat", .. }));
    let e = err(Tensor::concat(&[&a, &ones(&[6])], 0), &["concat", "[6]"]);
    assert!(matches!(e, Error::ShapeMismatch { op: "concat", .. }));
    let e = err(Tensor::concat(&[&a, &a], 2), &["concat", "axis 2"]);
    assert!(matches!(e, Error::BadAxis { op: "concat", .. }));
    let e = err(
        Tensor::concat(&[&a, &Tensor::ones(&[2, 3], DType::F32)], 0),
        &["concat", "f64", "f32"],
    );
    assert!(matches!(e, Error::DTypeMismatch { op: "concat", .. }));
    let e = err(Tensor::concat(&[&ones(&[])], 0), &["concat", "axis 0"]);
    assert!(matches!(e, Error::BadAxis { .. }));
    let e = err(Tensor::stack(&[&a, &ones(&[3, 2])], 0), &["stack", "[2, 3]", "[3, 2]"]);
    assert!(matches!(e, Error::ShapeMismatch { op: "stack", .. }));
    let e = err(Tensor::stack(&[&a], 3), &["stack", "axis 3"]);
    assert!(matches!(e, Error::BadAxis { op: "stack", .. }));
    err(Tensor::stack(&[], 0), &["stack"]);
    let e = err(a.split(2, 1), &["split", "[2, 3]", "2"]);
    assert!(matches!(e, Error::InvalidArgument { op: "split", .. }));
    err(a.split(0, 1), &["split"]);
    err(a.split_sizes(&[1, 1], 1), &["split", "[1, 1]"]);
    err(a.split_sizes(&[usize::MAX, 4], 1), &["split"]);
    let e = err(a.unstack(2), &["unstack", "axis 2"]);
    assert!(matches!(e, Error::BadAxis { op: "unstack", .. }));
    let e = err(
        a.strided_slice(&[Slice::step(0)]),
        &["strided_slice", "step 0", "[2, 3]"],
    );
    assert!(matches!(
        e,
        Error::InvalidArgument {
            op: "strided_slice",
            ..
        }
    ));
    err(
        a.strided_slice(&[Slice::all(); 3]),
        &["strided_slice", "3 slices", "[2, 3]"],
    );
    let e = err(a.reverse(&[2]), &["reverse", "axis 2"]);
    assert!(matches!(e, Error::BadAxis { op: "reverse", .. }));
    err(a.reverse(&[1, -1]), &["reverse", "repeated"]);
    err(a.tile(&[2]), &["tile", "[2, 3]"]);
    let e = err(a.repeat(2, -3), &["repeat", "axis -3"]);
    assert!(matches!(e, Error::BadAxis { op: "repeat", .. }));
    err(a.repeat_each(&[1, 2], 1), &["repeat", "2 counts", "[2, 3]"]);
    let e = err(
        a.pad_with(&[(0, 0), (3, 0)], PadMode::Reflect),
        &["pad", "reflect", "[2, 3]"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "pad", .. }));
    err(a.pad_with(&[(0, 0), (0, 4)], PadMode::Symmetric), &["pad", "symmetric"]);
    assert!(a.pad_with(&[(0, 0), (0, 3)], PadMode::Symmetric).is_ok());
    err(a.pad_with(&[(1, 1)], PadMode::Reflect), &["pad", "1 paddings"]);
}

#[test]
fn bad_indices() {
    let x = ones(&[2, 3]);
    let e = err(
        x.gather_nd(&Tensor::from_vec(vec![1i64, 3], &[1, 2]).unwrap()),
        &["gather_nd", "3", "[2, 3]"],
    );
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "gather_nd",
            index: 3,
            dim: 3,
            shape: vec![2, 3]
        }
    );
    err(
        x.gather_nd(&Tensor::from_vec(vec![-1i32], &[1, 1]).unwrap()),
        &["gather_nd", "-1"],
    );
    let e = err(x.gather_nd(&ones(&[1, 2])), &["gather_nd", "f64"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "gather_nd", .. }));
    let e = err(
        x.gather_nd(&Tensor::zeros(&[1, 3], DType::I64)),
        &["gather_nd", "[2, 3]", "[1, 3]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "gather_nd", .. }));
    err(x.gather_nd(&Tensor::scalar(0i64)), &["gather_nd", "rank"]);
    let idx = Tensor::from_vec(vec![0i64, 1], &[2, 1]).unwrap();
    let e = err(
        Tensor::scatter_nd(&idx, &ones(&[3]), &[4]),
        &["scatter_nd", "[3]", "[2]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "scatter_nd", .. }));
    let e = err(Tensor::scatter_nd(&idx, &ones(&[2]), &[1]), &["scatter_nd", "index 1"]);
    assert!(matches!(e, Error::IndexOutOfRange { op: "scatter_nd", .. }));
    let e = err(
        Tensor::scatter_nd(&idx, &Tensor::ones(&[2], DType::Bool), &[2]),
        &["scatter_nd", "bool"],
    );
    assert!(matches!(e, Error::UnsupportedDType { op: "scatter_nd", .. }));
    let bi = Tensor::from_vec(vec![0i64, 5], &[2, 1]).unwrap();
    let e = err(x.gather_with(&bi, 1, 1), &["gather_with", "5"]);
    assert!(matches!(
        e,
        Error::IndexOutOfRange {
            op: "gather_with",
            index: 5,
            dim: 3,
            ..
        }
    ));
    let e = err(x.gather_with(&bi, 0, 1), &["gather_with", "batch_dims"]);
    assert!(matches!(e, Error::InvalidArgument { op: "gather_with", .. }));
    let e = err(
        x.gather_with(&Tensor::zeros(&[3, 1], DType::I64), 1, 1),
        &["gather_with", "[2, 3]", "[3, 1]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { op: "gather_with", .. }));
    err(x.gather_with(&bi, 1, 3), &["gather_with", "batch_dims 3"]);
    err(x.gather_with(&bi, 2, 0), &["gather_with", "axis 2"]);
    let e = err(ones(&[2]).one_hot(3, 1.0, 0.0, -1, DType::F32), &["one_hot", "f64"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "one_hot", .. }));
    let i = Tensor::vector(&[0i64, 1]);
    let e = err(i.one_hot(3, 1.0, 0.0, 2, DType::F32), &["one_hot", "axis 2", "[2]"]);
    assert!(matches!(e, Error::BadAxis { op: "one_hot", .. }));
    err(i.one_hot(3, 1.0, 0.0, -2, DType::F32), &["one_hot", "axis -2"]);
    let e = err(Tensor::range(0.0, 1.0, 0.0, DType::F32), &["range", "step"]);
    assert!(matches!(e, Error::InvalidArgument { op: "range", .. }));
}
