//! Errors raised while a traced function's graph runs (values that the
//! trace could not check: an index out of range, an integer division by
//! zero): the error names the function, the op the user called as the
//! trace recorded it (not the primitive that failed: `gather_with` is a
//! `gather_nd` in the graph) with its operands' shapes and dtypes, and
//! keeps the op's own error, the one an eager call gives, unchanged.

use gradtape::{function, DType, Error, Function, FunctionOptions, GradientTape, Result, Tensor};

fn named(name: &str) -> FunctionOptions {
    FunctionOptions {
        name: name.into(),
        ..Default::default()
    }
}

fn ints(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// The error of `traced` (a call that must fail), checked: its message
/// starts with `prefix`, and the op's own error inside is `eager`'s (the
/// error of the primitive that failed, where the user's op is made of
/// several: then of the same kind as eager's, where the eager op names
/// itself).
fn check(traced: Result<impl std::fmt::Debug>, eager: Result<impl std::fmt::Debug>, prefix: &str) -> Error {
    let e = traced.expect_err("the traced call fails");
    let want = eager.expect_err("the eager call fails");
    let msg = e.to_string();
    assert!(msg.starts_with(prefix), "{msg}\n(wanted it to start with {prefix:?})");
    assert!(matches!(e, Error::InFunction { .. }), "{e:?}");
    // eager errors are as they were: the op's own
    assert!(!matches!(want, Error::InFunction { .. }), "{want:?}");
    let inner = e.innermost();
    assert_eq!(
        std::mem::discriminant(inner),
        std::mem::discriminant(&want),
        "{msg}\n{want}"
    );
    if let (Error::IndexOutOfRange { index: a, .. }, Error::IndexOutOfRange { index: b, .. }) = (inner, &want) {
        assert_eq!(a, b, "{msg}\n{want}");
    }
    if inner.to_string().split(':').next() == want.to_string().split(':').next() {
        assert_eq!(inner, &want, "{msg}");
        assert!(msg.ends_with(&want.to_string()), "{msg}");
    }
    e
}

#[test]
fn a_gather_index_out_of_range_names_the_function_and_the_gather() -> Result<()> {
    let x = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[4, 3])?;
    for optimize in [true, false] {
        let f = Function::with_options(
            |(x, i): &(Tensor, Tensor)| x.gather(i, 0)?.sum_all(),
            FunctionOptions {
                optimize,
                ..named("step")
            },
        );
        f.call(&(x.clone(), ints(&[0, 3], &[2])))?;
        let bad = ints(&[0, 7], &[2]);
        let e = check(
            f.call(&(x.clone(), bad.clone())),
            x.gather(&bad, 0),
            "in traced function 'step': gather (params [4, 3] f32, indices [2] i64): ",
        );
        assert!(
            matches!(e.innermost(), Error::IndexOutOfRange { index: 7, .. }),
            "{e:?}"
        );
        assert_eq!(f.trace_count(), 1, "the bad call ran the graph made for the good one");
    }
    Ok(())
}

#[test]
fn gather_with_names_itself_not_the_gather_nd_it_is_made_of() -> Result<()> {
    let x = Tensor::from_vec((0..24).map(f64::from).collect(), &[2, 3, 4])?;
    let f = function(|(x, i): &(Tensor, Tensor)| x.gather_with(i, 2, 1));
    f.call(&(x.clone(), ints(&[0, 1, 3, 1, 2, 0], &[2, 3])))?;
    let bad = ints(&[0, 1, 7, 1, 2, 0], &[2, 3]);
    let e = check(
        f.call(&(x.clone(), bad.clone())),
        x.gather_with(&bad, 2, 1),
        "in traced function 'function': gather_with (params [2, 3, 4] f64, indices [2, 3] i64): ",
    );
    assert!(e.to_string().contains("gather_nd"), "{e}");
    Ok(())
}

#[test]
fn an_integer_division_by_zero_names_the_division() -> Result<()> {
    let a = Tensor::vector(&[6i32, 7, 8]);
    for (name, op) in [
        ("div", Tensor::div as fn(&Tensor, &Tensor) -> Result<Tensor>),
        ("floor_div", Tensor::floor_div),
        ("floor_mod", Tensor::floor_mod),
    ] {
        let f = Function::with_options(move |(a, b): &(Tensor, Tensor)| op(a, b)?.add(a), named("ratio"));
        f.call(&(a.clone(), Tensor::vector(&[1i32, 2, 3])))?;
        let zero = Tensor::vector(&[1i32, 0, 3]);
        check(
            f.call(&(a.clone(), zero.clone())),
            op(&a, &zero),
            &format!("in traced function 'ratio': {name} (x [3] i32, y [3] i32): {name}: integer division by zero"),
        );
    }
    Ok(())
}

#[test]
fn segment_ids_and_labels_out_of_range_name_their_op() -> Result<()> {
    let data = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    let f = Function::with_options(
        |(d, ids): &(Tensor, Tensor)| d.unsorted_segment_sum(ids, 2),
        named("pool"),
    );
    f.call(&(data.clone(), ints(&[0, 1, 1], &[3])))?;
    let bad = ints(&[0, 2, 1], &[3]);
    check(
        f.call(&(data.clone(), bad.clone())),
        data.unsorted_segment_sum(&bad, 2),
        "in traced function 'pool': unsorted_segment_sum (data [3, 2] f32, segment_ids [3] i64): ",
    );
    let logits = Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 0.0, 1.0, 1.5], &[2, 3])?;
    let loss = Function::with_options(
        |(l, y): &(Tensor, Tensor)| Tensor::sparse_softmax_cross_entropy_with_logits(y, l)?.mean_all(),
        named("loss"),
    );
    loss.call(&(logits.clone(), ints(&[2, 0], &[2])))?;
    let bad = ints(&[2, 3], &[2]);
    check(
        loss.call(&(logits.clone(), bad.clone())),
        Tensor::sparse_softmax_cross_entropy_with_logits(&bad, &logits),
        "in traced function 'loss': sparse_softmax_cross_entropy_with_logits (labels [2] i64, logits [2, 3] f64): ",
    );
    Ok(())
}

/// In a training step (a tape inside the trace) the lookup of a bad id
/// names the lookup; a function called by another names itself (the
/// innermost function), not its caller: here the forward half of its
/// gradient split, `inner_forward`, which the trace of `outer` calls (a
/// trace differentiates the calls it records).
#[test]
fn a_training_step_and_a_nested_function_name_the_op_and_the_innermost_function() -> Result<()> {
    let table = Tensor::from_vec((0..8).map(|v| v as f32 * 0.5).collect(), &[4, 2])?;
    let step = Function::with_options(
        |(t, ids): &(Tensor, Tensor)| {
            let tape = GradientTape::new();
            let loss = tape.record(|| {
                tape.watch(t);
                t.embedding_lookup(ids)?.square()?.sum_all()
            })?;
            let g = tape.gradient(&loss, t)?.expect("connected");
            Ok(vec![loss, g])
        },
        named("train_step"),
    );
    step.call(&(table.clone(), ints(&[1, 3, 3], &[3])))?;
    let bad = ints(&[1, 4, 3], &[3]);
    check(
        step.call(&(table.clone(), bad.clone())),
        table.embedding_lookup(&bad),
        "in traced function 'train_step': embedding_lookup (table [4, 2] f32, ids [3] i64): ",
    );
    let inner = Function::with_options(|(t, i): &(Tensor, Tensor)| t.gather(i, 0), named("inner"));
    let outer = Function::with_options(
        move |(t, i): &(Tensor, Tensor)| inner.call(&(t.clone(), i.clone()))?.exp(),
        named("outer"),
    );
    outer.call(&(table.clone(), ints(&[0, 1, 2], &[3])))?;
    check(
        outer.call(&(table.clone(), bad.clone())),
        table.gather(&bad, 0),
        "in traced function 'inner_forward': gather (params [4, 2] f32, indices [3] i64): ",
    );
    // (a bad call does not break the next one)
    let ok = outer.call(&(table.clone(), ints(&[3, 0, 1], &[3])))?;
    assert_eq!(ok.shape(), &[3, 2]);
    assert_eq!(ok.dtype(), DType::F32);
    Ok(())
}
