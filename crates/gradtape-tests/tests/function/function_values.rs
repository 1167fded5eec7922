//! Traced functions never give a wrong number: values checked against the
//! same closure run eagerly, across calls of other sizes (`None` dims) and
//! other argument structures; host reads refused while tracing; variables
//! read only inside control flow; custom gradients inside traces.
//!
//! Expected values are the eager run of the same closure (itself checked
//! against TensorFlow elsewhere) or simple maths stated beside each check.

use gradtape::nn::losses;
use gradtape::{
    cond, custom_gradient, function, while_loop, DType, Function, FunctionOptions, GradientTape, Result, Tensor,
    TensorSpec, Variable, WhileOptions,
};

fn rows(n: usize, cols: usize, seed: f64) -> Tensor {
    let v: Vec<f64> = (0..n * cols).map(|i| ((i as f64 + seed) * 0.731).sin() * 2.0).collect();
    Tensor::from_vec(v, &[n, cols]).unwrap()
}

fn close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    for (g, w) in got.to_vec_f64().iter().zip(want.to_vec_f64()) {
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{what}: {g} vs {w}");
    }
}

fn batch_signature(cols: usize) -> FunctionOptions {
    FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F64, &[None, Some(cols)])]),
        ..Default::default()
    }
}

/// Calls `body` traced (one signature with a `None` batch dim) and eagerly
/// at several batch sizes, the first one tracing; the values must agree.
fn traced_matches_eager(what: &str, cols: usize, body: fn(&Tensor) -> Result<Tensor>) -> Result<usize> {
    let f = Function::with_options(body, batch_signature(cols));
    for (k, n) in [2usize, 4, 3, 1, 7, 2].into_iter().enumerate() {
        let x = rows(n, cols, k as f64);
        close(&f.call(&x)?, &body(&x)?, &format!("{what} at batch {n}"));
    }
    Ok(f.trace_count())
}

#[test]
fn counts_of_a_none_dim_are_the_run_sizes_not_the_traced_one() -> Result<()> {
    // mean_all of [1, 2, 3, 4] after a trace at length 2: 2.5 (10 / 4)
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F64, &[None])]),
        ..Default::default()
    };
    let f = Function::with_options(|x: &Tensor| x.mean_all(), opts);
    assert_eq!(f.call(&Tensor::vector(&[1.0f64, 2.0]))?.to_scalar::<f64>()?, 1.5);
    assert_eq!(
        f.call(&Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]))?.to_scalar::<f64>()?,
        2.5
    );
    assert_eq!(f.call(&Tensor::vector(&[5.0f64]))?.to_scalar::<f64>()?, 5.0);
    traced_matches_eager("mean", 3, |x| x.mean(&[0], false))?;
    traced_matches_eager("variance", 3, |x| x.moments(&[0], false).map(|(_, v)| v))?;
    traced_matches_eager("sparse cross-entropy mean", 3, |x| {
        let n = x.shape()[0];
        let labels = Tensor::from_vec((0..n as i64).map(|i| i % 3).collect(), &[n])?;
        losses::sparse_categorical_crossentropy(&labels, x, true)
    })?;
    Ok(())
}

#[test]
fn shapes_derived_from_a_none_dim_follow_the_run() -> Result<()> {
    traced_matches_eager("broadcast_to a shape read from x", 2, |x| {
        let n = x.shape()[0];
        Tensor::vector(&[1.0f64, -2.0]).broadcast_to(&[n, 2])?.mul(x)
    })?;
    traced_matches_eager("reshape to a shape read from x", 4, |x| {
        let n = x.shape()[0];
        x.reshape(&[n * 2, 2])?.sum(&[1], false)
    })?;
    traced_matches_eager("a constant of x's size", 2, |x| {
        let n = x.shape()[0];
        let w = Tensor::from_vec((0..n).map(|i| i as f64).collect(), &[n, 1])?;
        x.mul(&w)
    })?;
    Ok(())
}

#[test]
fn a_graph_that_does_not_depend_on_the_size_is_traced_once() -> Result<()> {
    let traces = traced_matches_eager("row sums and exp", 3, |x| x.exp()?.sum(&[1], false))?;
    assert_eq!(traces, 1);
    // a mean depends on the count: each size is traced on its own
    let traces = traced_matches_eager("mean", 3, |x| x.mean_all())?;
    assert_eq!(traces, 5, "sizes 2, 4, 3, 1, 7");
    Ok(())
}

#[test]
fn a_training_step_takes_a_partial_last_batch() -> Result<()> {
    // one SGD step of a linear least-squares model on batches of 4, 4, 3
    let run = |traced: bool| -> Result<(Vec<f64>, Vec<f64>)> {
        let w = Variable::new(Tensor::from_vec(vec![0.5f64, -0.25, 1.0], &[3, 1])?);
        let w2 = w.clone();
        let step = move |(x, y): &(Tensor, Tensor)| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = tape.record(|| x.matmul(&w2.read())?.sub(y)?.square()?.mean_all())?;
            let g = tape.gradient(&loss, &w2)?.expect("read");
            w2.apply_gradient_descent(0.1, &g)?;
            Ok(loss)
        };
        let opts = FunctionOptions {
            input_signature: Some(vec![
                TensorSpec::new(DType::F64, &[None, Some(3)]),
                TensorSpec::new(DType::F64, &[None, Some(1)]),
            ]),
            ..Default::default()
        };
        let f = Function::with_options(step.clone(), opts);
        let mut losses = Vec::new();
        for (k, n) in [4usize, 4, 3].into_iter().enumerate() {
            let (x, y) = (rows(n, 3, k as f64), rows(n, 1, 10.0 + k as f64));
            let loss = if traced { f.call(&(x, y))? } else { step(&(x, y))? };
            losses.push(loss.to_scalar::<f64>()?);
        }
        Ok((losses, w.read().to_vec_f64()))
    };
    let (traced, eager) = (run(true)?, run(false)?);
    for (a, b) in traced.0.iter().chain(&traced.1).zip(eager.0.iter().chain(&eager.1)) {
        assert!((a - b).abs() <= 1e-12, "{traced:?} vs {eager:?}");
    }
    Ok(())
}

#[test]
fn the_gradient_through_a_call_has_the_run_shape() -> Result<()> {
    let f = Function::with_options(|x: &Tensor| x.square()?.mean_all(), batch_signature(2));
    for n in [2usize, 5, 3] {
        let x = rows(n, 2, n as f64);
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            f.call(&x)
        })?;
        let g = tape.gradient(&y, &x)?.expect("connected");
        // d mean(x^2) / dx = 2 x / numel
        let want = x.mul_scalar(2.0 / (2 * n) as f64)?;
        close(&g, &want, &format!("gradient at batch {n}"));
    }
    // also for a graph that serves every size (its gradient is traced per size)
    let f = Function::with_options(|x: &Tensor| x.square()?.sum_all(), batch_signature(2));
    for n in [2usize, 5] {
        let x = rows(n, 2, 1.0);
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            f.call(&x)
        })?;
        close(
            &tape.gradient(&y, &x)?.expect("connected"),
            &x.mul_scalar(2.0)?,
            "sum of squares",
        );
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn argument_structures_get_traces_of_their_own() -> Result<()> {
    let f = function(|(a, b): &(Option<Tensor>, Option<Tensor>)| match (a, b) {
        (Some(a), None) => a.mul_scalar(2.0),
        (None, Some(b)) => b.mul_scalar(-1.0),
        (Some(a), Some(b)) => a.add(b),
        (None, None) => Ok(Tensor::scalar(0.0f64)),
    });
    let x = Tensor::scalar(3.0f64);
    assert_eq!(f.call(&(Some(x.clone()), None))?.to_scalar::<f64>()?, 6.0);
    assert_eq!(f.call(&(None, Some(x.clone())))?.to_scalar::<f64>()?, -3.0);
    assert_eq!(f.call(&(Some(x.clone()), Some(x.clone())))?.to_scalar::<f64>()?, 6.0);
    assert_eq!(f.call(&(None, None))?.to_scalar::<f64>()?, 0.0);
    assert_eq!(f.call(&(None, Some(x.clone())))?.to_scalar::<f64>()?, -3.0);
    assert_eq!(f.trace_count(), 4);
    // two lists of the same tensors, split differently
    let g = function(|(a, b): &(Vec<Tensor>, Vec<Tensor>)| {
        let s = |v: &Vec<Tensor>| v.iter().try_fold(Tensor::scalar(0.0f64), |acc, t| acc.add(t));
        s(a)?.sub(&s(b)?)
    });
    let one = Tensor::scalar(1.0f64);
    let two = Tensor::scalar(2.0f64);
    let r1 = g.call(&(vec![one.clone(), two.clone()], vec![one.clone()]))?;
    let r2 = g.call(&(vec![one.clone()], vec![two.clone(), one.clone()]))?;
    assert_eq!((r1.to_scalar::<f64>()?, r2.to_scalar::<f64>()?), (2.0, -2.0));
    assert_eq!(g.trace_count(), 2);
    Ok(())
}

#[test]
fn host_reads_of_traced_values_are_refused() -> Result<()> {
    let f = function(|x: &Tensor| {
        let y = x.mul_scalar(2.0)?;
        let e = y.try_to_vec_f64().unwrap_err().to_string();
        assert!(e.contains("inside a traced function"), "{e}");
        assert!(y.to_vec::<f64>().is_err() && y.item().is_err());
        let shown = y.to_string();
        assert!(shown.contains("<traced>") && shown.contains("shape=[2]"), "{shown}");
        let acc = gradtape::nn::metrics::binary_accuracy(&y, &y, 0.5);
        assert!(acc.is_err(), "a metric reads values");
        Ok(y)
    });
    let x = Tensor::vector(&[1.0f64, 2.0]);
    assert_eq!(f.call(&x)?.to_vec::<f64>()?, vec![2.0, 4.0]);
    assert_eq!(
        f.call(&Tensor::vector(&[5.0f64, 6.0]))?.to_vec::<f64>()?,
        vec![10.0, 12.0]
    );
    // to_vec_f64 is the panicking form
    let g = function(|x: &Tensor| {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| x.to_vec_f64()));
        assert!(
            caught.is_err(),
            "to_vec_f64 of a traced value must not give the trace's numbers"
        );
        Ok(x.identity())
    });
    g.call(&x)?;
    Ok(())
}

#[test]
fn a_variable_read_only_in_a_branch_gets_its_gradient_through_the_call() -> Result<()> {
    // d/dv of cond(x > 0, v * x, x): x when the branch runs, 0 when not
    // (TensorFlow 2.21 gives the same: 2.0 and 0.0 at x = 2 and x = -2)
    let v = Variable::new(Tensor::scalar(3.0f64));
    let vf = v.clone();
    let f = function(move |x: &Tensor| {
        cond(
            &x.gt(&Tensor::scalar(0.0f64))?,
            || vf.read().mul(x),
            || Ok(x.identity()),
        )
    });
    for (x, want) in [(2.0, 2.0), (-2.0, 0.0)] {
        let x = Tensor::scalar(x);
        let tape = GradientTape::new();
        let y = tape.record(|| f.call(&x))?;
        let g = tape.gradient(&y, &v)?.expect("the function reads v");
        assert_eq!(g.to_scalar::<f64>()?, want);
    }
    // and read only in a loop body: y = x * v^3 after three iterations
    let w = Variable::new(Tensor::scalar(2.0f64));
    let wf = w.clone();
    let h = function(move |x: &Tensor| {
        let out = while_loop(
            |s: &(Tensor, Tensor)| s.0.lt(&Tensor::scalar(3i64)),
            |s: &(Tensor, Tensor)| Ok((s.0.add(&Tensor::scalar(1i64))?, s.1.mul(&wf.read())?)),
            (Tensor::scalar(0i64), x.clone()),
            WhileOptions::default(),
        )?;
        Ok(out.1)
    });
    let x = Tensor::scalar(1.5f64);
    let tape = GradientTape::new();
    let y = tape.record(|| h.call(&x))?;
    assert_eq!(y.to_scalar::<f64>()?, 12.0);
    // d(x w^3)/dw = 3 x w^2 = 18
    assert_eq!(
        tape.gradient(&y, &w)?.expect("read in the body").to_scalar::<f64>()?,
        18.0
    );
    Ok(())
}

/// `x^3` with its gradient given by hand (3 x^2, written with ops so that
/// it is differentiable again).
fn cube(x: &Tensor) -> Result<Tensor> {
    let out = custom_gradient("Cube", std::slice::from_ref(x), |xs| {
        let x = xs[0].clone();
        let y = x.mul(&x)?.mul(&x)?;
        let backward = move |dy: &[Tensor]| Ok(vec![Some(dy[0].mul(&x.mul(&x)?.mul_scalar(3.0)?)?)]);
        Ok((vec![y], backward))
    })?;
    Ok(out[0].clone())
}

#[test]
fn custom_gradients_work_inside_traced_functions() -> Result<()> {
    // tape inside the function: first and second order of x^3 at x = 2 (12, 12)
    let inside = function(|x: &Tensor| {
        let outer = GradientTape::new();
        let inner = GradientTape::new();
        let g = outer.record(|| {
            outer.watch(x);
            let y = inner.record(|| {
                inner.watch(x);
                cube(x)
            })?;
            Ok(inner.gradient(&y, x)?.expect("connected"))
        })?;
        let h = outer.gradient(&g, x)?.expect("connected");
        Ok((cube(x)?, g, h))
    });
    for x in [2.0f64, -1.5] {
        let (y, g, h) = inside.call(&Tensor::scalar(x))?;
        assert_eq!(y.to_scalar::<f64>()?, x * x * x);
        assert_eq!(g.to_scalar::<f64>()?, 3.0 * x * x);
        assert_eq!(h.to_scalar::<f64>()?, 6.0 * x);
    }
    // tapes outside the function: first and second order through the call
    let outside = function(|x: &Tensor| cube(x)?.mul_scalar(2.0));
    for x in [2.0f64, 0.5] {
        let x = Tensor::scalar(x);
        let (t2, t1) = (GradientTape::new(), GradientTape::new());
        let g = t2.record(|| {
            t2.watch(&x);
            let y = t1.record(|| {
                t1.watch(&x);
                outside.call(&x)
            })?;
            Ok(t1.gradient(&y, &x)?.expect("connected"))
        })?;
        let h = t2.gradient(&g, &x)?.expect("connected");
        let xv = x.to_scalar::<f64>()?;
        assert_eq!(g.to_scalar::<f64>()?, 6.0 * xv * xv);
        assert_eq!(h.to_scalar::<f64>()?, 12.0 * xv);
    }
    Ok(())
}

#[test]
fn a_call_under_a_tape_with_a_huge_output_is_an_error_or_a_value_never_a_panic() {
    let f = function(|x: &Tensor| x.broadcast_to(&[1 << 40, 1 << 20]));
    let x = Tensor::scalar(1.0f32);
    let tape = GradientTape::new();
    let r = tape.record(|| {
        tape.watch(&x);
        f.call(&x)
    });
    if let Ok(y) = r {
        assert_eq!(y.shape(), &[1 << 40, 1 << 20]);
        assert!(tape.gradient(&y, &x).is_err(), "ones of 2^60 elements cannot be made");
    }
}

#[test]
fn files_of_traced_values_are_refused() -> Result<()> {
    let f = function(|x: &Tensor| {
        let y = x.mul_scalar(3.0)?;
        let e = gradtape::io::npy_to_bytes(&y).unwrap_err().to_string();
        assert!(e.contains("inside a traced function"), "{e}");
        Ok(y)
    });
    assert_eq!(f.call(&Tensor::vector(&[1.0f32]))?.to_vec::<f32>()?, vec![3.0]);
    assert_eq!(f.call(&Tensor::vector(&[2.0f32]))?.to_vec::<f32>()?, vec![6.0]);
    Ok(())
}

#[test]
fn the_gradient_of_a_vector_output_through_a_call_at_another_size() -> Result<()> {
    // found by the traced fuzz: the cotangent example took the traced size
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F32, &[None])]),
        ..Default::default()
    };
    let f = Function::with_options(|x: &Tensor| x.mul_scalar(2.0), opts);
    for n in [1usize, 2, 5] {
        let x = Tensor::from_vec(vec![1.5f32; n], &[n])?;
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            f.call(&x)?.sum_all()
        })?;
        // d sum(2 x) / dx = 2
        assert_eq!(
            tape.gradient(&y, &x)?.expect("connected").to_vec::<f32>()?,
            vec![2.0; n]
        );
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn sizes_whose_graphs_differ_are_never_run_on_another_sizes_graph() -> Result<()> {
    // rfft's output length n/2 + 1 is the same at n = 2 and 3 but not at 4
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F32, &[None])]),
        ..Default::default()
    };
    let f = Function::with_options(|x: &Tensor| x.rfft(None), opts.clone());
    for n in [2usize, 3, 4, 5, 1] {
        let x = Tensor::from_vec((0..n).map(|i| i as f32 - 0.5).collect(), &[n])?;
        let (got, want) = (f.call(&x)?, x.rfft(None)?);
        assert_eq!(got.shape(), want.shape(), "rfft at {n}");
    }
    // an op that refuses a shape eagerly refuses it traced
    let all_none = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F32, &[None, None])]),
        ..Default::default()
    };
    let g = Function::with_options(|x: &Tensor| Tensor::einsum("ii->i", &[x]), all_none);
    g.call(&Tensor::ones(&[3, 3], DType::F32))?;
    let bad = Tensor::ones(&[4, 3], DType::F32);
    assert!(Tensor::einsum("ii->i", &[&bad]).is_err());
    assert!(g.call(&bad).is_err(), "eager refuses [4, 3]");
    Ok(())
}
