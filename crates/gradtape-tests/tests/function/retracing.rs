//! The cache of a traced function's graphs, and state from call to call:
//! calls on many signatures interleaved (dtype, shape, rank, `None` dims
//! of a signature at sizes that broadcast differently, zero sizes), a
//! `bool` argument, a value captured at trace time and replaced after it,
//! graphs dropped from the cache, a traced function called from another's
//! trace with two shapes, several calls under one tape with their
//! gradients taken after them all, and calls from several threads at once.
//! Each call is checked against the same closure run eagerly, and every
//! tensor returned earlier (and every input) against its bits when made.
//!
//! Where the semantics are TensorFlow's own, the TF 2.21 snippets that
//! gave them are quoted beside the test.

use gradtape::{function, DType, Result, Tensor, Variable};

use super::calls_state::{assert_close, bits, Gen, Kept};

/// The function of the cache tests, eagerly: a fused chain, a sum
/// broadcast back and a product with its transpose.
fn shaped(x: &Tensor) -> Result<Tensor> {
    let y = x.mul(x)?.sin()?.add(&x.mul_scalar(0.5)?)?;
    let s = y.sum(&[-1], true)?;
    y.sub(&s)?.matmul(&x.transpose()?)
}

/// Calls on many signatures, interleaved and repeated: each gives the value
/// of its own signature's graph (TF keys a `tf.function`'s traces by dtype
/// and shape: `f(tf.zeros([2,3], tf.float32))` and `f(tf.zeros([2,3],
/// tf.float64))` are two traces; `[2,3]` and `[3,2]`, two more), and a
/// graph traced later leaves the earlier ones right, also their results
/// already returned.
#[test]
fn the_cache_gives_each_signature_its_own_values() -> Result<()> {
    let f = function(|x: &Tensor| shaped(x));
    let mut g = Gen(0xcac4e);
    let sigs: &[(&[usize], DType)] = &[
        (&[2, 3], DType::F32),
        (&[2, 3], DType::F64),
        (&[3, 2], DType::F32),
        (&[2, 4], DType::F32),
        (&[1, 3], DType::F64),
        (&[0, 3], DType::F32),
        (&[2, 0], DType::F64),
        (&[5, 1], DType::F32),
    ];
    let mut kept = Vec::new();
    for round in 0..3 {
        for k in 0..sigs.len() {
            // (another order each round)
            let (shape, dtype) = sigs[(k * (round + 1) + round) % sigs.len()];
            let x = g.tensor(shape, dtype)?;
            let got = f.call(&x)?;
            let want = shaped(&x)?;
            assert_eq!(got.dtype(), dtype);
            assert_eq!(got.shape(), want.shape(), "{shape:?} {dtype}");
            assert_close(&got, &want, 1e-5, &format!("{shape:?} {dtype}"));
            kept.push(Kept::new(format!("{shape:?} {dtype} of round {round}"), &got));
            for s in &kept {
                s.check(&format!("after {shape:?} {dtype} in round {round}"));
            }
        }
    }
    assert_eq!(f.trace_count(), sigs.len());
    Ok(())
}

/// A `bool` argument is static: each value its own trace, and calls
/// alternating between them give each branch's values (TF: a Python
/// `bool` argument is part of the cache key, one trace per value).
#[test]
fn a_bool_argument_picks_its_own_trace() -> Result<()> {
    let f = function(|(x, double): &(Tensor, bool)| if *double { x.mul_scalar(2.0) } else { x.neg() });
    let x = Tensor::vector(&[1.0f32, -3.0, 0.5]);
    for k in 0..4 {
        let flag = k % 2 == 0;
        let y = f.call(&(x.clone(), flag))?;
        let want = if flag { [2.0, -6.0, 1.0] } else { [-1.0, 3.0, -0.5] };
        assert_eq!(y.to_vec::<f32>()?, want, "call {k}");
    }
    assert_eq!(f.trace_count(), 2);
    assert_eq!(x.to_vec::<f32>()?, [1.0, -3.0, 0.5]);
    Ok(())
}

/// A tensor the closure reads from shared state at trace time is captured
/// by value: replacing it afterwards changes neither the graph nor its
/// results (TF 2.21, the same):
/// ```python
/// c = tf.constant([1.0, 2.0])
/// @tf.function
/// def f(x): return x + c
/// f(tf.constant([0.0, 0.0]))   # [1, 2]
/// c = tf.constant([10.0, 20.0])
/// f(tf.constant([0.0, 0.0]))   # [1, 2] still, one trace
/// ```
/// A new signature retraces and captures the value then.
#[test]
fn a_captured_value_replaced_after_the_trace_is_not_seen() -> Result<()> {
    let c = std::sync::Arc::new(std::sync::Mutex::new(Tensor::vector(&[1.0f32, 2.0])));
    let f = {
        let c = c.clone();
        function(move |x: &Tensor| {
            let c = c.lock().expect("not poisoned").clone();
            x.add(&c)
        })
    };
    let zeros = Tensor::vector(&[0.0f32, 0.0]);
    assert_eq!(f.call(&zeros)?.to_vec::<f32>()?, [1.0, 2.0]);
    *c.lock().expect("not poisoned") = Tensor::vector(&[10.0f32, 20.0]);
    assert_eq!(f.call(&zeros)?.to_vec::<f32>()?, [1.0, 2.0]);
    assert_eq!(f.trace_count(), 1);
    // a new dtype: a new trace, which reads the new value (f64 + f32 is
    // an error, as TF's AddV2 of two dtypes)
    let e = f.call(&Tensor::vector(&[0.0f64, 0.0])).expect_err("f64 + f32");
    assert!(e.to_string().contains("f64") && e.to_string().contains("f32"), "{e}");
    let one = Tensor::vector(&[0.0f32, 1.0]);
    assert_eq!(f.call(&one.reshape(&[1, 2])?)?.to_vec::<f32>()?, [10.0, 21.0]);
    // the old signature keeps the old capture
    assert_eq!(f.call(&zeros)?.to_vec::<f32>()?, [1.0, 2.0]);
    Ok(())
}

/// A traced function called from another's trace, twice with two shapes,
/// and once more on its own: the values of the same calls eagerly; a
/// variable the inner function writes is written once per inner call, in
/// order (TF: a nested `tf.function` call is inlined into the caller's
/// graph with its stateful ops in program order).
#[test]
fn functions_calling_functions_give_eager_values() -> Result<()> {
    let v = Variable::new(Tensor::scalar(1.0f64));
    let ve = Variable::new(Tensor::scalar(1.0f64));
    let inner_body = |v: &Variable, x: &Tensor| -> Result<Tensor> {
        v.assign_add(&x.sum_all()?.mul_scalar(0.5)?)?;
        shaped(x)?.mul(&v.read())
    };
    let inner = std::sync::Arc::new({
        let v = v.clone();
        function(move |x: &Tensor| inner_body(&v, x))
    });
    let outer_body = |inner: &dyn Fn(&Tensor) -> Result<Tensor>, x: &Tensor| -> Result<Vec<Tensor>> {
        let a = inner(x)?;
        let xt = x.transpose()?;
        let b = inner(&xt)?;
        let c = inner(&x.narrow(0, 0, 1)?)?;
        Ok(vec![a.clone(), b.sum_all()?.add(&a.sum_all()?)?, c, a])
    };
    let outer = {
        let inner = inner.clone();
        function(move |x: &Tensor| outer_body(&|t: &Tensor| inner.call(t), x))
    };
    let mut g = Gen(0xf00);
    let mut kept = Vec::new();
    // the inner function traced on its own first at one of the shapes the
    // outer trace calls it with (that call then uses this graph)
    let t = g.tensor(&[3, 2], DType::F64)?;
    assert_close(
        &inner.call(&t)?,
        &inner_body(&ve, &t)?,
        1e-12,
        "the inner function alone",
    );
    for k in 0..4 {
        let x = g.tensor(&[2, 3], DType::F64)?;
        kept.push(Kept::new(format!("input {k}"), &x));
        let got = outer.call(&x)?;
        let want = outer_body(&|t: &Tensor| inner_body(&ve, t), &x)?;
        for (i, (t, e)) in got.iter().zip(&want).enumerate() {
            assert_close(t, e, 1e-12, &format!("output {i} of call {k}"));
            kept.push(Kept::new(format!("output {i} of call {k}"), t));
        }
        assert!((v.read().to_scalar::<f64>()? - ve.read().to_scalar::<f64>()?).abs() < 1e-12);
        // the inner function on its own, between the outer calls
        let alone = inner.call(&x)?;
        let alone_e = inner_body(&ve, &x)?;
        assert!((alone.sum_all()?.to_scalar::<f64>()? - alone_e.sum_all()?.to_scalar::<f64>()?).abs() < 1e-9);
        for s in &kept {
            s.check(&format!("after call {k}"));
        }
    }
    assert_eq!(outer.trace_count(), 1);
    Ok(())
}

/// The body of the signature tests: a fused chain over two broadcast
/// operands, a sum broadcast back, a mean (its count depends on the size;
/// NaN when empty, as TF's) and a variable updated with the sum.
fn relaxed(v: &Variable, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    let a = x.mul(y)?.tanh()?.add(x)?;
    let s = a.sub(&a.sum(&[-1], true)?)?;
    let m = a.mean(&[0, 1], false)?;
    v.assign_add(&a.sum(&[0, 1], false)?.reshape(&[1])?)?;
    Ok(vec![a, s, m, v.read(), x.clone()])
}

/// A signature with `None` dims, called at sizes that broadcast
/// differently (`[n, k]` against `[n, k]`, `[1, k]`, `[n, 1]`, `[1, 1]`),
/// zero sizes among them, in an order that comes back to earlier sizes:
/// each call gives eager's values (TF 2.21 with `input_signature=
/// [tf.TensorSpec([None, None])] * 2`: one trace, broadcasting decided at
/// run time, as eager), and earlier results keep theirs.
#[test]
fn a_signature_with_none_dims_broadcasts_as_eager_at_every_size() -> Result<()> {
    use gradtape::{FunctionOptions, TensorSpec};
    for dtype in [DType::F32, DType::F64] {
        let spec = TensorSpec::new(dtype, &[None, None]);
        let opts = FunctionOptions {
            input_signature: Some(vec![spec.clone(), spec]),
            ..Default::default()
        };
        let v = Variable::new(Tensor::zeros(&[1], dtype));
        let ve = Variable::new(Tensor::zeros(&[1], dtype));
        let f = {
            let v = v.clone();
            gradtape::Function::with_options(move |(x, y): &(Tensor, Tensor)| relaxed(&v, x, y), opts)
        };
        let mut g = Gen(0x5123 + dtype as u64);
        let sizes: &[([usize; 2], [usize; 2])] = &[
            ([3, 4], [3, 4]),
            ([3, 4], [1, 4]),
            ([3, 4], [3, 1]),
            ([2, 5], [2, 5]),
            ([3, 4], [1, 1]),
            ([1, 4], [3, 4]),
            ([0, 4], [1, 4]),
            ([3, 0], [3, 1]),
            ([40, 33], [40, 33]),
            ([40, 33], [1, 33]),
            ([3, 4], [3, 4]),
            ([1, 1], [1, 1]),
            ([3, 4], [1, 4]),
        ];
        let mut kept = Vec::new();
        for (k, (sx, sy)) in sizes.iter().enumerate() {
            let (x, y) = (g.tensor(sx, dtype)?, g.tensor(sy, dtype)?);
            kept.push(Kept::new(format!("x of call {k}"), &x));
            kept.push(Kept::new(format!("y of call {k}"), &y));
            let got = f.call(&(x.clone(), y.clone()))?;
            let want = relaxed(&ve, &x, &y)?;
            for (i, (t, e)) in got.iter().zip(&want).enumerate() {
                let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
                assert_close(t, e, tol, &format!("output {i} of call {k} ({sx:?}, {sy:?}, {dtype})"));
                kept.push(Kept::new(format!("output {i} of call {k} ({sx:?}, {sy:?})"), t));
            }
            for s in &kept {
                s.check(&format!("after call {k} ({sx:?}, {sy:?}, {dtype})"));
            }
            // (the sums' rounding, which differs by the order of the
            // additions, does not build up from call to call)
            v.assign(&ve.read())?;
        }
    }
    Ok(())
}

/// A cache of one graph (`max_cached: 1`), called on alternating
/// signatures: each call retraces and still gives its own signature's
/// values, and the results of the graphs it dropped keep theirs.
#[test]
fn graphs_dropped_from_the_cache_leave_their_results_alone() -> Result<()> {
    let opts = gradtape::FunctionOptions {
        max_cached: 1,
        ..Default::default()
    };
    let f = gradtape::Function::with_options(|x: &Tensor| shaped(x), opts);
    let mut g = Gen(0xd209);
    let mut kept = Vec::new();
    for k in 0..6 {
        let shape: &[usize] = if k % 2 == 0 { &[4, 3] } else { &[3, 5] };
        let x = g.tensor(shape, DType::F64)?;
        let got = f.call(&x)?;
        let want = shaped(&x)?;
        assert_close(&got, &want, 1e-12, &format!("call {k}"));
        kept.push(Kept::new(format!("call {k}"), &got));
        for s in &kept {
            s.check(&format!("after call {k}"));
        }
    }
    assert_eq!(f.trace_count(), 6);
    Ok(())
}

/// One persistent tape over three calls of one traced function (the same
/// inputs twice, then others), each writing a variable after reading it:
/// the gradients of each call's result, taken after all three ran, are
/// eager's (the values each call saved for its gradient are its own, not
/// the memory a later call reused), and the variable's gradient flows
/// through the read before each write (TF: a `tf.function` called under a
/// tape records one op per call, with the forward values it needs).
#[test]
fn gradients_of_several_calls_taken_after_them_all_are_eager() -> Result<()> {
    use gradtape::{GradientTape, SourceRef};
    fn body(v: &Variable, x: &Tensor) -> Result<Tensor> {
        let r = v.read();
        let h = x.mul(&r)?.tanh()?.add(&x.square()?)?;
        v.assign_add(&x.mul_scalar(0.125)?)?;
        h.mul(&v.read())?.sin()?.sum(&[1], false)
    }
    for dtype in [DType::F32, DType::F64] {
        let mut g = Gen(0x3a9 + dtype as u64);
        let v0 = g.tensor(&[4, 6], dtype)?;
        let (v, ve) = (Variable::new(v0.clone()), Variable::new(v0));
        let f = {
            let v = v.clone();
            function(move |x: &Tensor| body(&v, x))
        };
        let (a, b) = (g.tensor(&[4, 6], dtype)?, g.tensor(&[4, 6], dtype)?);
        let xs = [&a, &a, &b];
        let grads = |traced: bool, var: &Variable| -> Result<Vec<Tensor>> {
            let tape = GradientTape::persistent();
            let ys = tape.record(|| {
                tape.watch(&xs[..]);
                xs.iter()
                    .map(|x| if traced { f.call(x) } else { body(var, x) })
                    .collect::<Result<Vec<_>>>()
            })?;
            let mut out = Vec::new();
            for (y, x) in ys.iter().zip(xs).rev() {
                out.push(y.clone());
                let [gx, gv] = tape.gradient(y, &[SourceRef::from(x), SourceRef::from(var)])?;
                out.extend([gx.expect("connected"), gv.expect("connected")]);
            }
            Ok(out)
        };
        let got = grads(true, &v)?;
        let want = grads(false, &ve)?;
        let tol = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
        for (i, (t, e)) in got.iter().zip(&want).enumerate() {
            assert_close(t, e, tol, &format!("{dtype} value {i}"));
        }
        assert!(bits(&v.read()) == bits(&ve.read()));
    }
    Ok(())
}

/// One traced function called from four threads at once, each with inputs
/// of its own (two signatures among them), many times: every result is
/// eager's for its own inputs and keeps its values while the other threads
/// go on calling (a run that finds the graph's reused memory busy runs in
/// memory of its own).
#[test]
fn calls_from_several_threads_keep_their_own_results() -> Result<()> {
    let f = std::sync::Arc::new(function(|(x, y): &(Tensor, Tensor)| {
        let a = x.mul(y)?.tanh()?.add(x)?;
        Ok(vec![a.clone(), a.sub(&a.sum(&[-1], true)?)?, x.clone(), a.exp()?])
    }));
    let eager = |x: &Tensor, y: &Tensor| -> Result<Vec<Tensor>> {
        let a = x.mul(y)?.tanh()?.add(x)?;
        Ok(vec![a.clone(), a.sub(&a.sum(&[-1], true)?)?, x.clone(), a.exp()?])
    };
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || -> Result<()> {
                let mut g = Gen(0x7e4d + t);
                let mut kept = Vec::new();
                for k in 0..60 {
                    let shape: &[usize] = if (k + t) % 3 == 0 { &[3, 50] } else { &[8, 33] };
                    let (x, y) = (g.tensor(shape, DType::F32)?, g.tensor(shape, DType::F32)?);
                    let got = f.call(&(x.clone(), y.clone()))?;
                    let want = eager(&x, &y)?;
                    for (i, (p, q)) in got.iter().zip(&want).enumerate() {
                        assert_close(p, q, 1e-5, &format!("thread {t} call {k} output {i}"));
                        if k % 7 == 0 {
                            kept.push(Kept::new(format!("thread {t} call {k} output {i}"), p));
                        }
                    }
                    for s in &kept {
                        s.check(&format!("in thread {t} after call {k}"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("no panic")?;
    }
    Ok(())
}

/// A signature with a `None` dim whose closure decides by the size in Rust
/// (`exp` above three rows, `neg` else) and takes a mean (its count is
/// the size): every size gets the graph of its own trace, also when sizes
/// come back in another order (TF 2.21 with `input_signature=
/// [tf.TensorSpec([None])]` traces once and takes the shape symbolically;
/// a Python `if` on `x.shape[0]` sees `None` there, so gradtape's answer,
/// eager's for each size, is the one a TF user means).
#[test]
fn a_size_read_in_rust_gives_each_size_its_own_graph() -> Result<()> {
    use gradtape::{FunctionOptions, TensorSpec};
    let body = |x: &Tensor| -> Result<Tensor> {
        let y = if x.shape()[0] > 3 { x.exp()? } else { x.neg()? };
        y.sub(&y.mean(&[0], true)?)
    };
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F64, &[None])]),
        ..Default::default()
    };
    let f = gradtape::Function::with_options(move |x: &Tensor| body(x), opts);
    let mut g = Gen(0x512e);
    let mut kept = Vec::new();
    for (k, n) in [4usize, 2, 5, 3, 4, 1, 7, 2, 4].into_iter().enumerate() {
        let x = g.tensor(&[n], DType::F64)?;
        let got = f.call(&x)?;
        assert_close(&got, &body(&x)?, 1e-13, &format!("size {n} (call {k})"));
        kept.push(Kept::new(format!("size {n} (call {k})"), &got));
        for s in &kept {
            s.check(&format!("after call {k}"));
        }
    }
    Ok(())
}

/// Variables given as arguments: each call writes the one it was given
/// (TF: a `tf.Variable` argument is the variable itself, written in place).
#[test]
fn each_call_writes_the_variable_it_is_given() -> Result<()> {
    let f = function(|(v, x): &(Variable, Tensor)| {
        let before = v.read();
        v.assign_add(&x.mul(&before)?)?;
        Ok((before, v.read()))
    });
    let vs: Vec<Variable> = (0..3)
        .map(|i| Variable::new(Tensor::vector(&[1.0f64 + i as f64, -1.0])))
        .collect();
    let mut want: Vec<Vec<f64>> = vs.iter().map(|v| v.read().to_vec_f64()).collect();
    let x = Tensor::vector(&[0.5f64, 2.0]);
    for k in [0usize, 1, 0, 2, 2, 1, 0] {
        let (before, after) = f.call(&(vs[k].clone(), x.clone()))?;
        assert_eq!(before.to_vec_f64(), want[k]);
        want[k] = want[k].iter().zip([0.5, 2.0]).map(|(w, x)| w + x * w).collect();
        assert_eq!(after.to_vec_f64(), want[k]);
        for (v, w) in vs.iter().zip(&want) {
            assert_eq!(&v.read().to_vec_f64(), w);
        }
    }
    Ok(())
}

/// The cache looks at the last call's graph first and leaves it in place
/// (no reordering on a repeat): runs of calls on one signature between
/// calls on others (another dtype, another shape, one tensor passed twice
/// `(x, x)` against two `(x, y)`), alternately under a tape and without,
/// and from inside another function's trace, each give the closure's
/// eager values and, under the tape, eager's gradients (to 1e-12 in f64,
/// 2e-5 in f32: the fused sum adds in another order); one trace per
/// signature.
#[test]
fn repeated_signatures_between_others_give_eager_values() -> Result<()> {
    use gradtape::GradientTape;
    fn body((a, b): &(Tensor, Tensor)) -> Result<Tensor> {
        a.mul(b)?.add(&a.sin()?)?.sum_all()
    }
    let f = std::sync::Arc::new(function(body));
    let outer = {
        let f = f.clone();
        function(move |x: &Tensor| f.call(&(x.clone(), x.mul_scalar(2.0)?))?.mul_scalar(3.0))
    };
    let mut g = Gen(0x1a57);
    let (a32, b32) = (g.tensor(&[2, 3], DType::F32)?, g.tensor(&[2, 3], DType::F32)?);
    let (a64, b64) = (g.tensor(&[2, 3], DType::F64)?, g.tensor(&[2, 3], DType::F64)?);
    let c64 = g.tensor(&[5], DType::F64)?;
    let sigs: [(&Tensor, &Tensor); 5] = [(&a32, &b32), (&a64, &b64), (&c64, &c64), (&a64, &a64), (&a32, &a32)];
    let order = [0, 0, 0, 1, 1, 0, 2, 2, 3, 3, 1, 3, 4, 4, 0, 4, 2, 2, 1];
    for (k, &s) in order.iter().enumerate() {
        let (a, b) = sigs[s];
        let args = (a.clone(), b.clone());
        let tol = if a.dtype() == DType::F32 { 2e-5 } else { 1e-12 };
        let what = format!("call {k} (signature {s})");
        if k % 2 == 0 {
            assert_close(&f.call(&args)?, &body(&args)?, tol, &what);
            continue;
        }
        let run = |traced: bool| -> Result<Vec<Tensor>> {
            let tape = GradientTape::persistent();
            let y = tape.record(|| {
                tape.watch(&[a, b][..]);
                if traced {
                    f.call(&args)
                } else {
                    body(&args)
                }
            })?;
            let [ga, gb] = tape.gradient(&y, &[a.clone(), b.clone()])?;
            Ok(vec![y, ga.expect("connected"), gb.expect("connected")])
        };
        for (i, (t, e)) in run(true)?.iter().zip(&run(false)?).enumerate() {
            assert_close(t, e, tol, &format!("{what}, value {i} under a tape"));
        }
    }
    // from another function's trace and runs, between the calls above
    for x in [&a64, &c64, &a64] {
        let want = body(&(x.clone(), x.mul_scalar(2.0)?))?.mul_scalar(3.0)?;
        assert_close(&outer.call(x)?, &want, 1e-12, "called from another function");
        assert_close(
            &f.call(&(a64.clone(), b64.clone()))?,
            &body(&(a64.clone(), b64.clone()))?,
            1e-12,
            "between",
        );
    }
    // the five signatures, and the outer trace's call at [5] (two
    // tensors; its call at f64 [2, 3] is signature 1's)
    assert_eq!(f.trace_count(), 6);
    assert_eq!(outer.trace_count(), 2);
    Ok(())
}
