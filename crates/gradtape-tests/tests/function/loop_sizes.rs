//! A traced `while_loop` whose variables change shape (a `None` dim in a
//! shape invariant) runs its condition and body graphs at sizes they were
//! not traced at, so a number the closures derive from a size (a `mean`'s
//! count, a Rust `bool` made from a length) would be wrong there. Such a
//! loop is refused with an error naming it and the shapes (`function`'s
//! `control::loop_sizes`); one whose graphs hold no such number runs, with
//! eager's values. (Before the checks, the mean below gave 26.990 traced
//! against eager's 26.946, silently, and the condition read from a length
//! never ended.)

use gradtape::{function, while_loop, DType, Result, Tensor, TensorSpec, WhileOptions};

/// Appends `tanh` of the carry's column means (or sums / 3) as a row while
/// the counter is below `n` (or, with `by_length`, while the carry has
/// fewer than 6 rows, read from its shape), then sums the carry.
fn grow(x: &Tensor, n: &Tensor, mean: bool, by_length: bool) -> Result<Tensor> {
    let out = while_loop(
        |v: &Vec<Tensor>| {
            if by_length {
                Ok(Tensor::scalar(v[1].shape()[0] < 6))
            } else {
                v[0].lt(n)
            }
        },
        |v: &Vec<Tensor>| {
            let m = if mean {
                v[1].mean(&[0], true)?
            } else {
                v[1].sum(&[0], true)?.div_scalar(3.0)?
            };
            Ok(vec![v[0].add_scalar(1.0)?, Tensor::concat(&[&v[1], &m.tanh()?], 0)?])
        },
        vec![Tensor::scalar(0i64), x.clone()],
        WhileOptions {
            shape_invariants: Some(vec![
                TensorSpec::new(DType::I64, &[]),
                TensorSpec::new(DType::F64, &[None, Some(2)]),
            ]),
            ..Default::default()
        },
    )?;
    out[1].sum_all()
}

fn x() -> Result<Tensor> {
    Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])
}

#[test]
fn a_loop_body_holding_a_size_of_a_changing_shape_is_refused() -> Result<()> {
    let x = x()?;
    let f = function(|(x, n): &(Tensor, Tensor)| grow(x, n, true, false));
    // eagerly a plain loop: the mean's count follows the rows
    assert!((grow(&x, &Tensor::scalar(3i64), true, false)?.to_scalar::<f64>()? - 26.946149267309615).abs() < 1e-12);
    let e = f
        .call(&(x.clone(), Tensor::scalar(3i64)))
        .expect_err("a mean of a growing carry");
    let msg = e.to_string();
    for want in [
        "while_loop",
        "loop variable 1",
        "[?, 2] of f64",
        "[3, 2]",
        "[4, 2]",
        "body",
    ] {
        assert!(msg.contains(want), "{want:?} not in: {msg}");
    }
    Ok(())
}

#[test]
fn a_loop_condition_made_from_a_length_is_refused() -> Result<()> {
    let x = x()?;
    // (the length is read as a Rust number: a constant in the graph)
    let f = function(|(x, n): &(Tensor, Tensor)| grow(x, n, false, true));
    assert!(grow(&x, &Tensor::scalar(5i64), false, true)?
        .to_scalar::<f64>()?
        .is_finite());
    let e = f
        .call(&(x.clone(), Tensor::scalar(5i64)))
        .expect_err("a length read in Rust");
    // (the graph's condition is the constant `true`: the traced loop
    // never ended before the check)
    let msg = e.to_string();
    for want in ["while_loop", "loop variable 1", "condition", "never end", "[3, 2]"] {
        assert!(msg.contains(want), "{want:?} not in: {msg}");
    }
    Ok(())
}

#[test]
fn a_loop_whose_graphs_hold_no_size_runs_traced_at_every_count() -> Result<()> {
    let x = x()?;
    let f = function(|(x, n): &(Tensor, Tensor)| grow(x, n, false, false));
    for n in [0i64, 1, 3, 6] {
        let want = grow(&x, &Tensor::scalar(n), false, false)?.to_scalar::<f64>()?;
        let got = f.call(&(x.clone(), Tensor::scalar(n)))?.to_scalar::<f64>()?;
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "n = {n}: traced {got}, eager {want}"
        );
    }
    // an empty carry grows from zero rows too
    let empty = Tensor::zeros(&[0, 2], DType::F64);
    let want = grow(&empty, &Tensor::scalar(2i64), false, false)?.to_scalar::<f64>()?;
    let got = f.call(&(empty, Tensor::scalar(2i64)))?.to_scalar::<f64>()?;
    assert!((got - want).abs() <= 1e-12, "empty: traced {got}, eager {want}");
    Ok(())
}
