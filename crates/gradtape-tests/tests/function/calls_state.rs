//! Variables read and written in traced functions, in program order
//! (TensorFlow's automatic control dependencies), as seeded random
//! sequences of reads and writes traced against eager, with writes of
//! views of the variable itself, aliased handles, `cond` and `while_loop`
//! bodies, optimizer steps, sparse updates with duplicate indices and the
//! draws of an advancing generator; variables made inside a traced closure.
//! The cache of traces is `retracing.rs`.
//!
//! The reference is the same closure run eagerly (its ops checked against
//! TensorFlow elsewhere); where the semantics are TensorFlow's own, the
//! TF 2.21 snippets that gave them are quoted beside the test (run with
//! `tf.function`).

use gradtape::{cond, function, while_loop, DType, IndexedSlices, Result, Tensor, Variable, WhileOptions};

pub(super) use super::aliasing::{bits, Gen, Kept};

/// The largest difference of `got` from `want` relative to `1 + |want|`
/// is at most `tol` (NaN where the other is NaN), shapes equal.
pub(super) fn assert_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (a, b) = (got.to_vec_f64(), want.to_vec_f64());
    for (p, q) in a.iter().zip(&b) {
        assert!(
            (p - q).abs() <= tol * (1.0 + q.abs()) || (p.is_nan() && q.is_nan()),
            "{what}: {a:?} vs {b:?}"
        );
    }
}

/// One operation on the variables `u`, `w` and `u2` (another handle of
/// `u`'s object: the same variable).
#[derive(Clone, Copy, Debug)]
enum Act {
    /// a read of variable `0..3`, kept as an output
    Read(usize),
    /// `v.assign(x * k)`
    AssignInput(usize, i8),
    /// `v.assign_add(read(v2) * 2)`
    AddRead(usize, usize),
    /// `v.assign_sub(x)`
    SubInput(usize),
    /// `v.assign(reverse(v, axis 0))`
    Reverse(usize),
    /// `v.assign(transpose(v))` (square)
    Transpose(usize),
    /// `v.assign(roll(v, 1, axis 1))`
    Roll(usize),
    /// `v.assign(concat(v[1:], v[:1]))`: a slice of itself
    Rotate(usize),
    /// `v.apply_gradient_descent(0.5, read(v2))`
    Descent(usize, usize),
    /// `v.scatter_add` rows `[1, 1, 0]` of `x` (duplicate indices)
    ScatterDup(usize),
    /// `v.apply_sparse_gradient_descent(0.25, rows [2, 0, 2])`
    SparseDescent(usize),
    /// `cond(sum(x) > 0, assign_add(x), assign_sub(read(v2)))`
    Cond(usize, usize),
    /// `while_loop` three times: `v.assign_add(read(v) * 0.5)`
    Loop(usize),
    /// `r = read(v); y = tanh(r * x) + read(v2); v.assign(y)`, keeping `y`,
    /// `r` transposed and `r - 1` (made after the write: `r`'s buffer is
    /// then the graph's alone, free to be written in place)
    Chain(usize, usize),
}

fn var(vs: &[Variable; 3], i: usize) -> &Variable {
    &vs[i % 3]
}

fn draw(g: &mut Gen) -> Vec<Act> {
    (0..2 + g.below(8))
        .map(|_| {
            let (a, b) = (g.below(3), g.below(3));
            match g.below(14) {
                0 | 1 => Act::Read(a),
                2 => Act::AssignInput(a, g.below(5) as i8 - 2),
                3 => Act::AddRead(a, b),
                4 => Act::SubInput(a),
                5 => Act::Reverse(a),
                6 => Act::Transpose(a),
                7 => Act::Roll(a),
                8 => Act::Rotate(a),
                9 => Act::Descent(a, b),
                10 => Act::ScatterDup(a),
                11 => Act::SparseDescent(a),
                12 if g.coin() => Act::Chain(a, b),
                _ if g.coin() => Act::Cond(a, b),
                _ => Act::Loop(a),
            }
        })
        .collect()
}

/// The sequence on `vs` with input `x` (`[3, 3]`): the reads, then each
/// variable's final value read.
fn run(acts: &[Act], vs: &[Variable; 3], x: &Tensor) -> Result<Vec<Tensor>> {
    let mut out = Vec::new();
    for &a in acts {
        match a {
            Act::Read(i) => out.push(var(vs, i).read()),
            Act::AssignInput(i, k) => var(vs, i).assign(&x.mul_scalar(f64::from(k))?)?,
            Act::AddRead(i, j) => {
                let y = var(vs, j).read().mul_scalar(2.0)?;
                var(vs, i).assign_add(&y)?
            }
            Act::SubInput(i) => var(vs, i).assign_sub(x)?,
            Act::Reverse(i) => var(vs, i).assign(&var(vs, i).read().reverse(&[0])?)?,
            Act::Transpose(i) => var(vs, i).assign(&var(vs, i).read().transpose()?)?,
            Act::Roll(i) => var(vs, i).assign(&var(vs, i).read().roll(&[1], &[1])?)?,
            Act::Rotate(i) => {
                let v = var(vs, i).read();
                let r = Tensor::concat(&[&v.narrow(0, 1, 2)?, &v.narrow(0, 0, 1)?], 0)?;
                var(vs, i).assign(&r)?
            }
            Act::Descent(i, j) => {
                let gr = var(vs, j).read();
                var(vs, i).apply_gradient_descent(0.5, &gr)?
            }
            Act::ScatterDup(i) => {
                let rows = x.narrow(0, 0, 3)?;
                let s = IndexedSlices::new(rows, Tensor::vector(&[1i64, 1, 0]), &[3, 3])?;
                var(vs, i).scatter_add(&s)?
            }
            Act::SparseDescent(i) => {
                let rows = var(vs, i).read().add(x)?;
                let s = IndexedSlices::new(rows, Tensor::vector(&[2i64, 0, 2]), &[3, 3])?;
                var(vs, i).apply_sparse_gradient_descent(0.25, &s)?
            }
            Act::Cond(i, j) => {
                let v = var(vs, i).clone();
                let w = var(vs, j).clone();
                let r = cond(
                    &x.sum_all()?.gt_scalar(0.0)?,
                    || {
                        v.assign_add(x)?;
                        Ok(v.read())
                    },
                    || {
                        v.assign_sub(&w.read())?;
                        Ok(v.read())
                    },
                )?;
                out.push(r);
            }
            Act::Chain(i, j) => {
                let r = var(vs, i).read();
                let y = r.mul(x)?.tanh()?.add(&var(vs, j).read())?;
                var(vs, i).assign(&y)?;
                out.extend([y, r.transpose()?, r.add_scalar(-1.0)?]);
            }
            Act::Loop(i) => {
                let v = var(vs, i).clone();
                let n = while_loop(
                    |n: &Tensor| n.lt_scalar(3.0),
                    |n: &Tensor| {
                        v.assign_add(&v.read().mul_scalar(0.5)?)?;
                        n.add_scalar(1.0)
                    },
                    Tensor::scalar(0.0f64),
                    WhileOptions::default(),
                )?;
                out.push(n);
            }
        }
    }
    for v in vs {
        out.push(v.read());
    }
    Ok(out)
}

fn check_sequence(seed: u64) -> Result<()> {
    let mut g = Gen(seed);
    let acts = std::sync::Arc::new(draw(&mut g));
    let dtype = if g.coin() { DType::F32 } else { DType::F64 };
    let (u0, w0) = (g.tensor(&[3, 3], dtype)?, g.tensor(&[3, 3], dtype)?);
    let (u, w) = (Variable::new(u0.clone()), Variable::new(w0.clone()));
    let vs = [u.clone(), w.clone(), u.clone()];
    let (ue, we) = (Variable::new(u0), Variable::new(w0));
    let ves = [ue.clone(), we.clone(), ue.clone()];
    // every fourth sequence runs its traced graph as traced, uncompiled
    let optimize = !seed.is_multiple_of(4);
    let opts = gradtape::FunctionOptions {
        optimize,
        ..Default::default()
    };
    let f = {
        let (acts, vs) = (acts.clone(), vs.clone());
        gradtape::Function::with_options(move |x: &Tensor| run(&acts, &vs, x), opts)
    };
    let label = format!("seed {seed}: {dtype}, optimize {optimize}, {acts:?}");
    let mut kept: Vec<Kept> = Vec::new();
    let xs = [g.tensor(&[3, 3], dtype)?, g.tensor(&[3, 3], dtype)?];
    for (k, x) in [&xs[0], &xs[0], &xs[1], &xs[0]].into_iter().enumerate() {
        kept.push(Kept::new(format!("the input of call {k}"), x));
        let got = f.call(x)?;
        let want = run(&acts, &ves, x)?;
        for (i, (t, e)) in got.iter().zip(&want).enumerate() {
            // (sums of three rows: the same order eagerly and traced)
            assert!(
                bits(t) == bits(e),
                "output {i} of call {k}: traced {:?}, eager {:?} ({label})",
                t.to_vec_f64(),
                e.to_vec_f64()
            );
            kept.push(Kept::new(format!("output {i} of call {k}"), t));
        }
        for s in &kept {
            s.check(&format!("after call {k} ({label})"));
        }
    }
    assert_eq!(f.trace_count(), 1, "{label}");
    Ok(())
}

/// 300 sequences of reads and writes of two variables (one of them through
/// two handles), each called four times, against the same sequence run
/// eagerly: every read sees the writes before it and none after (TF:
/// `tf.function` adds control dependencies between a function's stateful
/// ops in program order). Writes of a view of the variable itself
/// (reversed, transposed, rolled, sliced) read the old value whole.
#[test]
fn reads_and_writes_of_variables_run_in_program_order() -> Result<()> {
    let n: u64 = std::env::var("GRADTAPE_CALLS_STATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in 0..n {
        check_sequence(0x57a7e + seed)?;
    }
    Ok(())
}

/// TF 2.21, the literal numbers:
/// ```python
/// v = tf.Variable([[1.,2.],[3.,4.]])
/// @tf.function
/// def h():
///     a = v.read_value()
///     v.assign(tf.transpose(v))
///     b = v.read_value()
///     v.assign(tf.reverse(v, [0]))
///     v.assign_add(v * 2.)
///     return a, b, v.read_value()
/// # [[1,2],[3,4]], [[1,3],[2,4]], [[6,12],[3,9]]
/// w = tf.Variable([1.,2.,3.])
/// @tf.function
/// def s():
///     w.scatter_add(tf.IndexedSlices(tf.constant([1.,10.,100.]), tf.constant([2,2,0])))
///     return w.read_value()
/// # [101, 2, 14]
/// ```
#[test]
fn a_variable_written_with_views_of_itself_gives_tf_values() -> Result<()> {
    let v = Variable::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?);
    let vc = v.clone();
    let h = function(move |_: &()| {
        let a = vc.read();
        vc.assign(&vc.read().transpose()?)?;
        let b = vc.read();
        vc.assign(&vc.read().reverse(&[0])?)?;
        vc.assign_add(&vc.read().mul_scalar(2.0)?)?;
        Ok((a, b, vc.read()))
    });
    let (a, b, c) = h.call(&())?;
    assert_eq!(a.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(b.to_vec::<f32>()?, [1.0, 3.0, 2.0, 4.0]);
    assert_eq!(c.to_vec::<f32>()?, [6.0, 12.0, 3.0, 9.0]);
    // a second call starts from the first's end
    let (a2, _, _) = h.call(&())?;
    assert_eq!(a2.to_vec::<f32>()?, [6.0, 12.0, 3.0, 9.0]);
    assert_eq!(a.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(c.to_vec::<f32>()?, [6.0, 12.0, 3.0, 9.0]);

    let w = Variable::new(Tensor::vector(&[1.0f32, 2.0, 3.0]));
    let wc = w.clone();
    let s = function(move |_: &()| {
        let rows = IndexedSlices::new(
            Tensor::vector(&[1.0f32, 10.0, 100.0]),
            Tensor::vector(&[2i64, 2, 0]),
            &[3],
        )?;
        wc.scatter_add(&rows)?;
        Ok(wc.read())
    });
    assert_eq!(s.call(&())?.to_vec::<f32>()?, [101.0, 2.0, 14.0]);
    Ok(())
}

/// A traced training step that reads its variables before and after the
/// optimizer's update and returns both, the gradients and the slots: the
/// reads see the values of their place in the program (TF: `v.read_value()`
/// before `opt.apply_gradients` is the old value, after it the new one),
/// the same as eagerly, at every call, and the tensors returned by earlier
/// calls (the variables' old values among them, which the update writes in
/// place when nothing holds them) keep theirs. The gradient of `u` is
/// `u + x` (an elementwise value the compiler may write in place); `w`'s
/// is `w` itself.
#[test]
fn an_optimizer_step_between_reads_gives_eager_values() -> Result<()> {
    use gradtape::optim::{Adam, Optimizer, Sgd};
    use gradtape::GradientTape;
    use std::sync::{Arc, Mutex};

    fn step<O: Optimizer>(u: &Variable, w: &Variable, opt: &Mutex<O>, x: &Tensor) -> Result<Vec<Tensor>> {
        let before = (u.read(), w.read());
        u.assign(&u.read().mul_scalar(0.75)?)?;
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let (a, b) = (u.read(), w.read());
            a.mul(&a)?
                .mul_scalar(0.5)?
                .add(&a.mul(x)?)?
                .sum_all()?
                .add(&b.square()?.sum_all()?.mul_scalar(0.5)?)
        })?;
        let g = tape.gradient(&loss, &[u.clone(), w.clone()])?;
        let mut opt = opt.lock().expect("not poisoned");
        opt.apply_gradients(g.iter().cloned().zip([u, w]))?;
        let mut out = vec![before.0, before.1, u.read(), w.read(), loss];
        out.extend(g.into_iter().flatten());
        out.extend(opt.variables().iter().map(Variable::read));
        Ok(out)
    }

    fn run<O: Optimizer + Send + 'static>(make: impl Fn() -> O) -> Result<()> {
        let mut g = Gen(0x0971);
        let (u0, w0) = (g.tensor(&[4, 5], DType::F64)?, g.tensor(&[5], DType::F64)?);
        let (u, w) = (Variable::new(u0.clone()), Variable::new(w0.clone()));
        let (ue, we) = (Variable::new(u0), Variable::new(w0));
        let (opt, opt_e) = (Arc::new(Mutex::new(make())), Mutex::new(make()));
        let f = {
            let (u, w, opt) = (u.clone(), w.clone(), opt.clone());
            function(move |x: &Tensor| step(&u, &w, &opt, x))
        };
        let xs = [g.tensor(&[4, 5], DType::F64)?, g.tensor(&[4, 5], DType::F64)?];
        let mut kept = Vec::new();
        for k in 0..5 {
            let x = &xs[k % 2];
            kept.push(Kept::new(format!("the input of call {k}"), x));
            let got = f.call(x)?;
            let want = step(&ue, &we, &opt_e, x)?;
            assert_eq!(got.len(), want.len());
            for (i, (t, e)) in got.iter().zip(&want).enumerate() {
                assert_close(t, e, 1e-13, &format!("output {i} of call {k}"));
                kept.push(Kept::new(format!("output {i} of call {k}"), t));
            }
            for s in &kept {
                s.check(&format!("after call {k}"));
            }
        }
        assert_eq!(f.trace_count(), 1);
        Ok(())
    }
    run(|| Sgd::new(0.1))?;
    run(|| Sgd::new(0.1).momentum(0.9).expect("a momentum in [0, 1]"))?;
    run(|| Adam::new(0.01))
}

/// Variables reached several ways at once, against the same code run
/// eagerly at each of four calls: a variable given as an argument that the
/// closure also captures (one object: a write through either is read
/// through the other), a loop whose condition reads the variable its body
/// writes, a `cond` whose predicate reads a variable written just before,
/// a nested traced function given the variable as its argument, and two
/// functions writing one variable, called in turn. TF 2.21 runs the same
/// programs with these values (`while v < 10: v.assign_add(...)` runs
/// until the write makes the condition false; the nested call's writes
/// land in program order).
#[test]
fn variables_reached_several_ways_give_eager_values() -> Result<()> {
    fn body(
        u: &Variable,
        arg: &Variable,
        inner: &dyn Fn(&Variable, &Tensor) -> Result<Tensor>,
        x: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let r0 = u.read();
        arg.assign_add(x)?; // the same variable as `u`
        let r1 = u.read();
        // the loop runs while the variable's sum is below 10
        let n = while_loop(
            |n: &Tensor| u.read().sum_all()?.lt_scalar(10.0)?.logical_and(&n.lt_scalar(50.0)?),
            |n: &Tensor| {
                arg.assign_add(&u.read().abs()?.add_scalar(0.25)?)?;
                n.add_scalar(1.0)
            },
            Tensor::scalar(0.0f64),
            WhileOptions::default(),
        )?;
        u.assign(&u.read().mul_scalar(-0.5)?)?;
        let c = cond(&u.read().sum_all()?.gt_scalar(0.0)?, || x.exp(), || Ok(x.clone()))?;
        let i = inner(arg, x)?;
        Ok(vec![r0, r1, n, c, i, u.read(), x.clone()])
    }
    fn inner_body(v: &Variable, x: &Tensor) -> Result<Tensor> {
        v.assign_sub(&x.mul_scalar(0.5)?)?;
        v.read().add(x)
    }
    let inner = std::sync::Arc::new(function(|(v, x): &(Variable, Tensor)| inner_body(v, x)));
    let u = Variable::new(Tensor::vector(&[0.5f64, -1.0, 2.0]));
    let ue = Variable::new(Tensor::vector(&[0.5f64, -1.0, 2.0]));
    let f = {
        let (u, inner) = (u.clone(), inner.clone());
        function(move |(v, x): &(Variable, Tensor)| body(&u, v, &|v, t| inner.call(&(v.clone(), t.clone())), x))
    };
    // a second function writing the same variable
    let h = {
        let u = u.clone();
        function(move |x: &Tensor| {
            u.assign(&u.read().mul(x)?.tanh()?)?;
            Ok(u.read())
        })
    };
    let h_eager = |x: &Tensor| -> Result<Tensor> {
        ue.assign(&ue.read().mul(x)?.tanh()?)?;
        Ok(ue.read())
    };
    let mut g = Gen(0x5e7e);
    let mut kept = Vec::new();
    let mut iterations = Vec::new();
    for k in 0..4 {
        let x = g.tensor(&[3], DType::F64)?;
        kept.push(Kept::new(format!("the input of call {k}"), &x));
        let got = f.call(&(u.clone(), x.clone()))?;
        let want = body(&ue, &ue, &inner_body, &x)?;
        iterations.push(got[2].to_scalar::<f64>()?);
        let hg = h.call(&x)?;
        let he = h_eager(&x)?;
        for (i, (t, e)) in got.iter().chain([&hg]).zip(want.iter().chain([&he])).enumerate() {
            assert_close(t, e, 1e-13, &format!("output {i} of call {k}"));
            kept.push(Kept::new(format!("output {i} of call {k}"), t));
        }
        for s in &kept {
            s.check(&format!("after call {k}"));
        }
    }
    // (the loop ran, a number of times its variable decided)
    assert!(iterations.iter().any(|&n| n > 1.0), "{iterations:?}");
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// Draws of an advancing generator in a traced function are state too:
/// fresh at every call (TF: `tf.random.Generator.uniform` in a
/// `tf.function` gives new values at each call), two draws of one call
/// differ, a draw returned earlier keeps its values, and a gradient taken
/// in the same call uses the values the forward pass drew (`d(x·r)/dx = r`,
/// the very `r` returned).
#[test]
fn draws_are_fresh_at_each_call_and_their_gradients_use_them() -> Result<()> {
    use gradtape::{GradientTape, Rng};
    let rng = std::sync::Arc::new(std::sync::Mutex::new(Rng::new(7)));
    let f = {
        let rng = rng.clone();
        function(move |x: &Tensor| {
            let mut rng = rng.lock().expect("not poisoned");
            let a = rng.uniform(&[6], 0.5, 1.5, DType::F64)?;
            let b = rng.uniform(&[6], 0.5, 1.5, DType::F64)?;
            let tape = GradientTape::new();
            tape.watch(x);
            let y = tape.record(|| x.mul(&a)?.sum_all())?;
            let g = tape.gradient(&y, x)?.expect("connected");
            Ok(vec![a.clone(), b, y, g, a.add(x)?])
        })
    };
    let x = Tensor::vector(&[1.0f64, -2.0, 0.5, 3.0, 0.0, 4.0]);
    let mut kept: Vec<Kept> = Vec::new();
    let mut seen: Vec<Vec<u64>> = Vec::new();
    for k in 0..4 {
        let out = f.call(&x)?;
        let (a, b, y, g) = (&out[0], &out[1], &out[2], &out[3]);
        for d in [a, b] {
            assert!(d.to_vec_f64().iter().all(|v| (0.5..1.5).contains(v)), "call {k}: {d}");
            assert!(!seen.contains(&bits(d)), "call {k}: a draw repeats an earlier one");
            seen.push(bits(d));
        }
        assert!(bits(g) == bits(a), "call {k}: the gradient {g} is not the draw {a}");
        let dot: f64 = a.to_vec_f64().iter().zip(x.to_vec_f64()).map(|(p, q)| p * q).sum();
        assert!((y.to_scalar::<f64>()? - dot).abs() < 1e-12, "call {k}");
        assert!(bits(&out[4]) == bits(&a.add(&x)?), "call {k}");
        for (i, t) in out.iter().enumerate() {
            kept.push(Kept::new(format!("output {i} of call {k}"), t));
        }
        for s in &kept {
            s.check(&format!("after call {k}"));
        }
    }
    Ok(())
}

/// A closure that makes a variable at every run: eagerly each call starts
/// from a new variable (`2x` every time); traced, the variable made while
/// tracing would live on in the graph and carry state between calls (it
/// gave `2x`, then `x₁ + 2x₂`, ...). TensorFlow refuses it at the first call
/// (TF 2.21):
/// ```python
/// @tf.function
/// def f(x):
///     v = tf.Variable(x)
///     v.assign_add(x)
///     return v.read_value()
/// f(tf.constant([1.0, 2.0]))  # ValueError: tf.function only supports
///                             # singleton tf.Variables created on the first call
/// ```
/// and so does gradtape, naming the function. A variable made once, at the
/// first trace (a `OnceLock` here; a layer built at its first call), is
/// TF's singleton and works, its state carried as TF's is:
/// ```python
/// @tf.function
/// def g(x):
///     if m.v is None:
///         m.v = tf.Variable(tf.zeros_like(x))
///     m.v.assign_add(x)
///     return m.v.read_value()
/// g([1., 2.]), g([1., 2.])  # [1, 2], [2, 4]
/// ```
#[test]
fn a_variable_made_at_every_trace_is_an_error_and_one_made_once_is_state() -> Result<()> {
    let opts = gradtape::FunctionOptions {
        name: "fresh_variable".into(),
        ..Default::default()
    };
    let f = gradtape::Function::with_options(
        |x: &Tensor| {
            let v = Variable::new(x.clone());
            v.assign_add(x)?;
            Ok(v.read())
        },
        opts,
    );
    for _ in 0..2 {
        let e = f
            .call(&Tensor::vector(&[1.0f64, 2.0]))
            .expect_err("a variable made at every trace");
        let msg = e.to_string();
        assert!(msg.contains("fresh_variable") && msg.contains("variable"), "{msg}");
    }
    // the same inside a `cond` branch, and in a function called by another
    let g = function(|x: &Tensor| {
        cond(
            &x.sum_all()?.gt_scalar(0.0)?,
            || {
                let v = Variable::new(x.clone());
                Ok(v.read())
            },
            || Ok(x.clone()),
        )
    });
    assert!(g.call(&Tensor::vector(&[1.0f64])).is_err());
    let inner = std::sync::Arc::new(function(|x: &Tensor| Ok(Variable::new(x.exp()?).read())));
    let outer = {
        let inner = inner.clone();
        function(move |x: &Tensor| inner.call(x)?.add(x))
    };
    assert!(outer.call(&Tensor::vector(&[1.0f64])).is_err());

    let m: std::sync::Arc<std::sync::OnceLock<Variable>> = Default::default();
    let once = {
        let m = m.clone();
        function(move |x: &Tensor| {
            let v = m.get_or_init(|| Variable::new(Tensor::zeros(x.shape(), x.dtype())));
            v.assign_add(x)?;
            Ok(v.read())
        })
    };
    let x = Tensor::vector(&[1.0f32, 2.0]);
    assert_eq!(once.call(&x)?.to_vec::<f32>()?, [1.0, 2.0]);
    assert_eq!(once.call(&x)?.to_vec::<f32>()?, [2.0, 4.0]);
    assert_eq!(m.get().expect("made").read().to_vec::<f32>()?, [2.0, 4.0]);
    assert_eq!(once.trace_count(), 1);
    Ok(())
}

/// Scattered updates with repeated indices written to a variable in a
/// traced function: the last update of an index wins, as on TF's CPU
/// (TF 2.21; the GPU leaves the order undefined):
/// ```python
/// v = tf.Variable(tf.reshape(tf.range(9.0), [3, 3]))
/// @tf.function
/// def f(x):
///     r = v.read_value()
///     v.assign(tf.tensor_scatter_nd_update(v, [[2], [0], [2]], x))
///     v.assign(tf.tensor_scatter_nd_update(v, [[1], [1]], x[:2] * 10.))
///     return r, v.read_value()
/// f([[1., 2, 3], [4, 5, 6], [7, 8, 9]])
/// # [[0,1,2],[3,4,5],[6,7,8]], [[4,5,6],[40,50,60],[7,8,9]]
/// ```
/// and at a second call from where the first left the variable.
#[test]
fn scattered_updates_with_repeated_indices_keep_the_last() -> Result<()> {
    let v = Variable::new(Tensor::from_vec((0..9).map(f64::from).collect(), &[3, 3])?);
    let f = {
        let v = v.clone();
        function(move |x: &Tensor| {
            let r = v.read();
            let i = Tensor::from_vec(vec![2i64, 0, 2], &[3, 1])?;
            v.assign(&v.read().tensor_scatter_nd_update(&i, x)?)?;
            let j = Tensor::from_vec(vec![1i64, 1], &[2, 1])?;
            v.assign(
                &v.read()
                    .tensor_scatter_nd_update(&j, &x.narrow(0, 0, 2)?.mul_scalar(10.0)?)?,
            )?;
            Ok((r, v.read()))
        })
    };
    let x = Tensor::from_vec((1..10).map(f64::from).collect(), &[3, 3])?;
    let (r, after) = f.call(&x)?;
    assert_eq!(r.to_vec::<f64>()?, (0..9).map(f64::from).collect::<Vec<_>>());
    let want = [4.0, 5.0, 6.0, 40.0, 50.0, 60.0, 7.0, 8.0, 9.0];
    assert_eq!(after.to_vec::<f64>()?, want);
    let (r2, after2) = f.call(&x)?;
    assert_eq!(r2.to_vec::<f64>()?, want);
    assert_eq!(after2.to_vec::<f64>()?, want);
    assert_eq!(r.to_vec::<f64>()?, (0..9).map(f64::from).collect::<Vec<_>>());
    Ok(())
}

/// A tape inside a traced function over reads on both sides of a write:
/// the gradient with respect to the variable sums the paths through each
/// read, each at its own value (`loss = Σ r₀·x + Σ r₁²` with `r₁` read after
/// `v.assign(r₀ * 0.5 + x)`; the write is no op of the tape, so
/// `∂loss/∂v = x + 2 r₁`), the same as eagerly (TF 2.21 gives the same
/// under a `tf.GradientTape` in a `tf.function`: `assign` is not
/// differentiable, each `read_value` is), at each of three calls.
#[test]
fn a_gradient_through_reads_around_a_write_sums_each_read() -> Result<()> {
    use gradtape::GradientTape;
    fn step(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let r0 = v.read();
            v.assign(&r0.mul_scalar(0.5)?.add(x)?)?;
            let r1 = v.read();
            r0.mul(x)?.sum_all()?.add(&r1.square()?.sum_all()?)
        })?;
        let g = tape.gradient(&loss, v)?.expect("connected");
        Ok(vec![loss, g, v.read()])
    }
    let mut g = Gen(0x7a9e);
    let v0 = g.tensor(&[2, 3], DType::F64)?;
    let (v, ve) = (Variable::new(v0.clone()), Variable::new(v0));
    let f = {
        let v = v.clone();
        function(move |x: &Tensor| step(&v, x))
    };
    for k in 0..3 {
        let x = g.tensor(&[2, 3], DType::F64)?;
        let got = f.call(&x)?;
        let want = step(&ve, &x)?;
        for (i, (t, e)) in got.iter().zip(&want).enumerate() {
            assert_close(t, e, 1e-13, &format!("output {i} of call {k}"));
        }
        // ∂loss/∂v = x + 2 r₁ (r₁ the value after the write)
        let r1 = &got[2];
        assert_close(
            &got[1],
            &x.add(&r1.mul_scalar(2.0)?)?,
            1e-13,
            &format!("the gradient at call {k}"),
        );
    }
    Ok(())
}

/// Views of a variable's value returned by a traced function (a reshape,
/// a transpose, a slice, the value itself), for variables small enough to
/// hold their elements inline and large enough to share a buffer: the
/// variable's later updates in place (gradient descent, eagerly and in the
/// next call's graph; an optimizer's step; a sparse update) leave them
/// alone.
#[test]
fn views_of_a_variable_returned_earlier_survive_its_updates_in_place() -> Result<()> {
    use gradtape::optim::{Optimizer, Sgd};
    for n in [3usize, 4, 16, 40] {
        let mut g = Gen(0x1e0 + n as u64);
        let v = Variable::new(g.tensor(&[n, 2], DType::F32)?);
        let f = {
            let v = v.clone();
            function(move |gr: &Tensor| {
                let r = v.read();
                let out = vec![r.reshape(&[2 * n])?, r.transpose()?, r.narrow(0, 1, n - 1)?, r.clone()];
                v.apply_gradient_descent(0.5, gr)?;
                Ok(out)
            })
        };
        let mut opt = Sgd::new(0.25);
        let mut kept = Vec::new();
        for k in 0..4 {
            let gr = g.tensor(&[n, 2], DType::F32)?;
            let before = v.read().to_vec_f64();
            for (i, t) in f.call(&gr)?.iter().enumerate() {
                kept.push(Kept::new(format!("view {i} of call {k} ({n} rows)"), t));
            }
            assert_eq!(kept.last().expect("kept").t.to_vec_f64(), before);
            v.apply_gradient_descent(0.125, &gr)?;
            opt.apply_gradients([(Some(gr.clone()), &v)])?;
            let rows = IndexedSlices::new(gr.narrow(0, 0, 2)?, Tensor::vector(&[1i64, 1]), &[n, 2])?;
            v.scatter_add(&rows)?;
            for s in &kept {
                s.check(&format!("after the updates of call {k} ({n} rows)"));
            }
        }
    }
    Ok(())
}
