//! `cond` and `while_loop`, eager and traced, with gradients to second
//! order and forward mode. Expected values come from TensorFlow 2.21
//! (`tf.function` with `tf.cond` / `tf.while_loop`, f64), as printed by the
//! script quoted above each test.

use gradtape::{
    cond, function, while_loop, ForwardAccumulator, GradientTape, Result, Tensor, TensorSpec, Variable, WhileOptions,
};

fn close(got: f64, want: f64) {
    assert!((got - want).abs() <= 1e-12 * (1.0 + want.abs()), "{got} vs {want}");
}

fn s(t: &Tensor) -> f64 {
    t.to_scalar::<f64>().expect("f64 scalar")
}

/// `y = x` squared `n` times (n a tensor), with dy/dx and d²y/dx² from
/// nested tapes.
fn squares(x: &Tensor, n: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let t2 = GradientTape::new();
    let t1 = GradientTape::new();
    let (y, dy) = t2.record(|| {
        t2.watch(x);
        let y = t1.record(|| {
            t1.watch(x);
            let out = while_loop(
                |v: &(Tensor, Tensor)| v.0.lt(n),
                |v: &(Tensor, Tensor)| Ok((v.0.add(&Tensor::scalar(1i32))?, v.1.mul(&v.1)?)),
                (Tensor::scalar(0i32), x.clone()),
                WhileOptions::default(),
            )?;
            Ok(out.1)
        })?;
        let dy = t1.gradient(&y, x)?.expect("connected");
        Ok((y, dy))
    })?;
    let d2 = t2.gradient(&dy, x)?.expect("connected");
    Ok((y, dy, d2))
}

// tf: while_loop(i < n, (i + 1, y * y), [0, x]) at x = 1.1, n = 3, nested tapes
// -> y 2.143588810000001, dy 15.589736800000008, d2y 99.20741600000005
#[test]
fn a_loop_of_squares_has_gradient_2n_x_to_2n_minus_1_eager_and_traced() -> Result<()> {
    let x = Tensor::scalar(1.1f64);
    let n = Tensor::scalar(3i32);
    let (y, dy, d2) = squares(&x, &n)?;
    close(s(&y), 2.143588810000001);
    close(s(&dy), 15.589736800000008);
    close(s(&d2), 99.20741600000005);
    let f = function(|(x, n): &(Tensor, Tensor)| {
        let (y, dy, d2) = squares(x, n)?;
        Ok(vec![y, dy, d2])
    });
    let r = f.call(&(x.clone(), n))?;
    close(s(&r[0]), 2.143588810000001);
    close(s(&r[1]), 15.589736800000008);
    close(s(&r[2]), 99.20741600000005);
    // the count is a graph input: 2^n x^(2^n - 1) for other n, one trace
    for k in [0, 1, 2, 4] {
        let r = f.call(&(x.clone(), Tensor::scalar(k)))?;
        let p = 2f64.powi(k);
        close(s(&r[1]), p * 1.1f64.powf(p - 1.0));
        close(s(&r[2]), p * (p - 1.0) * 1.1f64.powf(p - 2.0));
    }
    assert_eq!(f.trace_count(), 1);
    let g = f.graph(&(x, Tensor::scalar(1)))?;
    assert!(g.count("While") + g.count("WhileWithHistory") >= 1, "{g}");
    Ok(())
}

/// A training step traced where its loop did not iterate (the backward
/// loop's body was then traced at empty histories: it failed with a
/// `gather` of row -1 before) serves later calls whose loops do, with the
/// values of the loop of squares above: y = x^(2^n), dy = 2^n x^(2^n - 1),
/// d2y = 2^n (2^n - 1) x^(2^n - 2).
#[test]
fn a_loop_traced_where_it_did_not_iterate_differentiates_when_it_does() -> Result<()> {
    let x = Tensor::scalar(1.1f64);
    let f = function(|(x, n): &(Tensor, Tensor)| {
        let (y, dy, d2) = squares(x, n)?;
        Ok(vec![y, dy, d2])
    });
    for k in [0, 3, 0, 1, 2] {
        let r = f.call(&(x.clone(), Tensor::scalar(k)))?;
        let p = 2f64.powi(k);
        close(s(&r[0]), 1.1f64.powf(p));
        close(s(&r[1]), p * 1.1f64.powf(p - 1.0));
        close(s(&r[2]), p * (p - 1.0) * 1.1f64.powf(p - 2.0));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

// tf: cond(x > 0, x^3, -x), nested tapes: x = 1.5 -> 3.375, 6.75, 9.0;
// x = -2 -> 2.0, -1.0, 0.0
#[test]
fn cond_chooses_at_run_time_with_gradients_of_the_branch_taken() -> Result<()> {
    let f = function(|x: &Tensor| {
        let t2 = GradientTape::new();
        let t1 = GradientTape::new();
        let (y, dy) = t2.record(|| {
            t2.watch(x);
            let y = t1.record(|| {
                t1.watch(x);
                cond(&x.gt_scalar(0.0)?, || x.mul(x)?.mul(x), || x.neg())
            })?;
            let dy = t1.gradient(&y, x)?.expect("connected");
            Ok((y, dy))
        })?;
        let d2 = t2.gradient(&dy, x)?.unwrap_or_else(|| dy.zeros_like());
        Ok([y, dy, d2])
    });
    let [y, dy, d2] = f.call(&Tensor::scalar(1.5f64))?;
    assert_eq!((s(&y), s(&dy), s(&d2)), (3.375, 6.75, 9.0));
    let [y, dy, d2] = f.call(&Tensor::scalar(-2.0f64))?;
    assert_eq!((s(&y), s(&dy), s(&d2)), (2.0, -1.0, 0.0));
    assert_eq!(f.trace_count(), 1);
    let g = f.graph(&Tensor::scalar(1.0f64))?;
    assert!(g.count("Cond") >= 2, "forward and gradient conds: {g}");
    Ok(())
}

// tf: outer while i < 3: (inner while j < 2: y = y x + 1), y = sin(y); y0 = 0.5,
// x = 0.7 -> y 0.8589182660536059, dy/dx -0.8326659130656077
#[test]
fn nested_loops_differentiate_through_both_levels() -> Result<()> {
    let run = |x: &Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            let outer = while_loop(
                |v: &(Tensor, Tensor)| v.0.lt_scalar(3.0),
                |v: &(Tensor, Tensor)| {
                    let inner = while_loop(
                        |w: &(Tensor, Tensor)| w.0.lt_scalar(2.0),
                        |w: &(Tensor, Tensor)| Ok((w.0.add_scalar(1.0)?, w.1.mul(x)?.add_scalar(1.0)?)),
                        (Tensor::scalar(0i32), v.1.clone()),
                        WhileOptions::default(),
                    )?;
                    Ok((v.0.add_scalar(1.0)?, inner.1.sin()?))
                },
                (Tensor::scalar(0i32), Tensor::scalar(0.5f64)),
                WhileOptions::default(),
            )?;
            Ok(outer.1)
        })?;
        let dy = tape.gradient(&y, x)?.expect("connected");
        Ok((y, dy))
    };
    let x = Tensor::scalar(0.7f64);
    let (y, dy) = run(&x)?;
    close(s(&y), 0.8589182660536059);
    close(s(&dy), -0.8326659130656077);
    let f = function(move |x: &Tensor| run(x));
    let (y, dy) = f.call(&x)?;
    close(s(&y), 0.8589182660536059);
    close(s(&dy), -0.8326659130656077);
    Ok(())
}

// tf: while v >= 1: (v / 2, y w + v) from (x, 1); x = 10, w = 0.9 ->
// y 15.4961, dy/dx 1.484, dy/dw 38.716
#[test]
fn a_loop_whose_count_depends_on_data_differentiates_to_inputs_and_variables() -> Result<()> {
    let w = Variable::new(Tensor::scalar(0.9f64));
    let wc = w.clone();
    let f = function(move |x: &Tensor| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            let out = while_loop(
                |v: &(Tensor, Tensor)| v.0.ge(&Tensor::scalar(1.0f64)),
                |v: &(Tensor, Tensor)| Ok((v.0.div_scalar(2.0)?, v.1.mul(&wc.read())?.add(&v.0)?)),
                (x.clone(), Tensor::scalar(1.0f64)),
                WhileOptions::default(),
            )?;
            Ok(out.1)
        })?;
        let [gx, gw] = tape.gradient(&y, &[gradtape::SourceRef::from(x), (&wc).into()])?;
        Ok((y, gx.expect("x"), gw.expect("w")))
    });
    let (y, gx, gw) = f.call(&Tensor::scalar(10.0f64))?;
    close(s(&y), 15.4961);
    close(s(&gx), 1.484);
    close(s(&gw), 38.716);
    // x = 3: two iterations (3, 1.5): y = (1 w + 3) w + 1.5
    let (y, gx, gw) = f.call(&Tensor::scalar(3.0f64))?;
    close(s(&y), (0.9 + 3.0) * 0.9 + 1.5);
    close(s(&gx), 0.9 + 0.5);
    close(s(&gw), 2.0 * 0.9 + 3.0);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

// tf: ForwardAccumulator(x, 1) around while i < 4: y = sin(y) x from y = x;
// x = 0.8 -> y 0.2642496080576613, jvp 1.4148618232935024
#[test]
fn while_loop_in_forward_mode() -> Result<()> {
    let run = |x: &Tensor| -> Result<(Tensor, Tensor)> {
        let acc = ForwardAccumulator::watching(x, &[Tensor::scalar(1.0f64)])?;
        let y = acc.record(|| {
            let out = while_loop(
                |v: &(Tensor, Tensor)| v.0.lt_scalar(4.0),
                |v: &(Tensor, Tensor)| Ok((v.0.add_scalar(1.0)?, v.1.sin()?.mul(x)?)),
                (Tensor::scalar(0i32), x.clone()),
                WhileOptions::default(),
            )?;
            Ok(out.1)
        })?;
        let t = acc.jvp(&y)?.expect("connected");
        Ok((y, t))
    };
    let x = Tensor::scalar(0.8f64);
    let (y, t) = run(&x)?;
    close(s(&y), 0.2642496080576613);
    close(s(&t), 1.4148618232935024);
    let f = function(move |x: &Tensor| run(x));
    let (y, t) = f.call(&x)?;
    close(s(&y), 0.2642496080576613);
    close(s(&t), 1.4148618232935024);
    Ok(())
}

#[test]
fn max_iterations_and_shape_invariants() -> Result<()> {
    // a loop that would never end stops after max_iterations
    let opts = WhileOptions {
        max_iterations: Some(5),
        ..Default::default()
    };
    let f = function(move |x: &Tensor| {
        while_loop(
            |_: &Tensor| Ok(Tensor::scalar(true)),
            |v: &Tensor| v.add_scalar(1.0),
            x.clone(),
            opts.clone(),
        )
    });
    assert_eq!(s(&f.call(&Tensor::scalar(0.0f64))?), 5.0);
    // a variable that grows is an error unless its dim is declared
    let grow = |v: &Tensor| gradtape::Tensor::concat(&[v, v], 0);
    // (an eager loop: its condition may look at shapes)
    let small = |v: &Tensor| Ok(Tensor::scalar(v.shape()[0] < 8));
    let e = while_loop(
        small,
        grow,
        Tensor::ones(&[1], gradtape::DType::F64),
        WhileOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("shape_invariants"), "{e}");
    let opts = WhileOptions {
        shape_invariants: Some(vec![TensorSpec::new(gradtape::DType::F64, &[None])]),
        ..Default::default()
    };
    let out = while_loop(small, grow, Tensor::ones(&[1], gradtape::DType::F64), opts)?;
    assert_eq!(out.shape(), &[8]);
    Ok(())
}

#[test]
fn control_flow_errors_are_clear() -> Result<()> {
    // branches of different dtypes
    let f = function(|x: &Tensor| cond(&x.gt_scalar(0.0)?, || Ok(x.clone()), || x.cast(gradtape::DType::F32)));
    let e = f.call(&Tensor::scalar(1.0f64)).unwrap_err().to_string();
    assert!(e.contains("cond") && e.contains("dtypes"), "{e}");
    // a predicate that is not a bool scalar
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let e = cond(&x, || Ok(x.clone()), || Ok(x.clone())).unwrap_err().to_string();
    assert!(e.contains("predicate"), "{e}");
    // a body that changes a dtype
    let f = function(|x: &Tensor| {
        while_loop(
            |v: &Tensor| v.lt_scalar(3.0),
            |v: &Tensor| v.cast(gradtape::DType::F32),
            x.clone(),
            WhileOptions::default(),
        )
    });
    let e = f.call(&Tensor::scalar(1.0f64)).unwrap_err().to_string();
    assert!(e.contains("while_loop") && e.contains("dtypes"), "{e}");
    Ok(())
}

/// The shape-invariant error named the same shape twice ("from shape [1]
/// to [1]"): an invariant that does not accept the initial shape is now
/// reported as such, and a change names the shapes before and after the
/// iteration that made it (not the loop's initial shape).
#[test]
fn shape_invariant_errors_name_the_real_shapes() {
    use gradtape::DType;
    let spec = |dims: &[Option<usize>]| WhileOptions {
        shape_invariants: Some(vec![TensorSpec::new(DType::F64, dims)]),
        ..Default::default()
    };
    let small = |v: &Tensor| Ok(Tensor::scalar(v.numel() < 64));
    // the invariant rejects the shape the loop starts from
    let e = while_loop(
        small,
        |v: &Tensor| Ok(v.clone()),
        Tensor::ones(&[1], DType::F64),
        spec(&[Some(2)]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("enters the loop with shape [1]") && e.contains("[2] of f64"),
        "{e}"
    );
    // [1] -> [2] -> [4], then the rank changes: the error names [4] and [2, 2]
    let body = |v: &Tensor| {
        if v.numel() < 4 {
            Tensor::concat(&[v, v], 0)
        } else {
            v.reshape(&[2, v.numel() / 2])
        }
    };
    let e = while_loop(small, body, Tensor::ones(&[1], DType::F64), spec(&[None]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("from shape [4] to [2, 2]") && e.contains("[?] of f64"),
        "{e}"
    );
    // traced: the body's input and output shapes
    let f = function(move |x: &Tensor| {
        while_loop(
            |v: &Tensor| v.sum_all()?.lt_scalar(10.0),
            |v: &Tensor| Tensor::concat(&[v, v], 0),
            x.clone(),
            WhileOptions::default(),
        )
    });
    let e = f.call(&Tensor::ones(&[3], DType::F64)).unwrap_err().to_string();
    assert!(e.contains("from shape [3] to [6]"), "{e}");
}

/// A traced training step whose loop reads a variable that the tape
/// differentiates, while no loop variable is watched (a neural ODE's
/// integrator: the weights are what is trained): the forward loop keeps
/// its history for the gradient, so the graph runs the loop once forward
/// and once backward. (It ran the forward loop a second time inside the
/// gradient, to make the history: a third loop node, and a traced step
/// as slow as eager.) The gradient is d/dw of x·w^n summed: n x w^(n-1).
#[test]
fn a_loop_over_a_variable_keeps_its_history_for_the_tape_of_the_variable() -> Result<()> {
    let w = Variable::new(Tensor::scalar(1.25f64));
    let step = {
        let w = w.clone();
        function(move |(x, n): &(Tensor, Tensor)| {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                let out = while_loop(
                    |v: &(Tensor, Tensor)| v.0.lt(n),
                    |v: &(Tensor, Tensor)| Ok((v.0.add(&Tensor::scalar(1i32))?, v.1.mul(&w.read())?)),
                    (Tensor::scalar(0i32), x.clone()),
                    WhileOptions::default(),
                )?;
                out.1.sum_all()
            })?;
            Ok(vec![y.clone(), tape.gradient(&y, &w)?.expect("connected")])
        })
    };
    let x = Tensor::vector(&[1.0f64, -0.5, 2.0]);
    for k in [3, 0, 5] {
        let r = step.call(&(x.clone(), Tensor::scalar(k)))?;
        close(s(&r[0]), 2.5 * 1.25f64.powi(k));
        close(s(&r[1]), 2.5 * k as f64 * 1.25f64.powi(k - 1));
    }
    assert_eq!(step.trace_count(), 1);
    let g = step.graph(&(x, Tensor::scalar(3)))?;
    assert_eq!(g.count("WhileWithHistory"), 1, "{g}");
    assert_eq!(g.count("While"), 1, "the backward loop: {g}");
    Ok(())
}
