//! A traced step whose gradient goes through a `while_loop` is compiled
//! (gradtape's `compile::is_static`): the loop keeps its history, whose
//! length is the iteration count and so may change from call to call,
//! but only the loop's gradient reads it, so the rest of the graph keeps
//! its traced shapes. Before, such a step ran its whole graph as traced
//! (no fused kernels, no buffer reuse; a PGD training step was slower
//! traced than eager). The iteration counts here come from inputs: one
//! trace serves 0, 1, 2 and 5 iterations, the history read row by row (as
//! views) by the backward loop, and the values and gradients are the
//! eager ones (the loop of ops TensorFlow's `tf.while_loop` unrolls to)
//! to 1e-12 in f64: a plain loop, nested loops, a loop in a `cond`. A
//! loop whose variables change shape (a `None` dim in its shape
//! invariants) gives eager's numbers (its graph uncompiled), or, called
//! with another count through the same graph, eager's numbers or an error
//! naming the shapes; one without invariants is refused, naming the loop
//! and its shapes. And the loop's gradient computes no gradient of a
//! capture that no tape asks for (an RNN reading its unwatched data
//! `xs[t]` scattered a gradient of the whole `xs` at every backward
//! iteration).

use gradtape::{cond, function, while_loop, DType, GradientTape, Result, Tensor, TensorSpec, Variable, WhileOptions};

/// Each output of `got` is the one of `want` in shape and to 1e-12 of its
/// largest magnitude.
pub(crate) fn same(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.shape(), b.shape(), "{what}: output {k}");
        let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
        let scale = b.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        for (p, q) in a.iter().zip(&b) {
            assert!(
                (p - q).abs() <= 1e-12 * scale,
                "{what}, output {k}: traced {p}, eager {q}"
            );
        }
    }
}

fn w0() -> Result<Tensor> {
    Tensor::from_vec((0..16).map(|i| (i as f64 * 0.37).sin() * 0.4).collect(), &[4, 4])
}

fn x0() -> Result<Tensor> {
    Tensor::from_vec((0..12).map(|i| (i as f64 * 0.61).cos() * 0.5).collect(), &[3, 4])
}

/// The gradient, or zeros where the loss does not depend on it (the
/// loop did not run), as a traced step gives.
fn or_zeros(g: Option<Tensor>, shape: &[usize]) -> Tensor {
    g.unwrap_or_else(|| Tensor::zeros(shape, DType::F64))
}

/// `h -> tanh(h w + x)` from `h = x` while the counter is below `n`.
pub(crate) fn cell_loop(w: &Variable, x: &Tensor, n: &Tensor) -> Result<Tensor> {
    let out = while_loop(
        |v: &Vec<Tensor>| v[0].lt(n),
        |v: &Vec<Tensor>| Ok(vec![v[0].add_scalar(1.0)?, v[1].matmul(&w.read())?.add(x)?.tanh()?]),
        vec![Tensor::scalar(0i64), x.clone()],
        WhileOptions::default(),
    )?;
    Ok(out[1].clone())
}

/// A chain of elementwise ops after the loop (what the compiler fuses).
fn head(h: &Tensor) -> Result<Tensor> {
    h.mul_scalar(1.5)?.exp()?.add_scalar(-1.0)?.square()?.mean_all()
}

/// The loss of [`cell_loop`] run `n` times and its gradients as to `w`
/// and `x`.
fn step(w: &Variable, x: &Tensor, n: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        tape.watch(x);
        head(&cell_loop(w, x, n)?)
    })?;
    let g = tape.gradient(&loss, std::slice::from_ref(w))?;
    let gx = tape.gradient(&loss, x)?;
    Ok(vec![loss, or_zeros(g[0].clone(), &[4, 4]), or_zeros(gx, &[3, 4])])
}

#[test]
fn a_differentiated_loop_of_any_length_runs_compiled() -> Result<()> {
    let (w, x) = (Variable::new(w0()?), x0()?);
    let f = {
        let w = w.clone();
        function(move |(x, n): &(Tensor, Tensor)| step(&w, x, n))
    };
    let c = f.concrete(&(x.clone(), Tensor::scalar(2i64)))?;
    // the step's graph is compiled: its elementwise chain fused, the loop
    // (keeping its history) one node of it (before, the history's
    // changing length kept the whole graph uncompiled: no fused kernel)
    assert!(c.compile_stats().fused > 0, "{:?}", c.compile_stats());
    assert_eq!(
        c.optimized_graph().count("WhileWithHistory"),
        1,
        "{}",
        c.optimized_graph()
    );
    for n in [2i64, 5, 0, 1, 2] {
        let got = f.call(&(x.clone(), Tensor::scalar(n)))?;
        same(&got, &step(&w, &x, &Tensor::scalar(n))?, &format!("n = {n}"));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// An outer loop of `n` steps whose body runs [`cell_loop`] `m` times
/// from its carry and adds the carry, then the head; with the gradients.
fn nested_step(w: &Variable, x: &Tensor, n: &Tensor, m: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        tape.watch(x);
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt(n),
            |v: &Vec<Tensor>| {
                let h = cell_loop(w, &v[1], m)?;
                Ok(vec![v[0].add_scalar(1.0)?, h.add(&v[1])?.mul_scalar(0.5)?])
            },
            vec![Tensor::scalar(0i64), x.clone()],
            WhileOptions::default(),
        )?;
        head(&out[1])
    })?;
    let g = tape.gradient(&loss, std::slice::from_ref(w))?;
    let gx = tape.gradient(&loss, x)?;
    Ok(vec![loss, or_zeros(g[0].clone(), &[4, 4]), or_zeros(gx, &[3, 4])])
}

#[test]
fn nested_differentiated_loops_run_compiled_at_any_counts() -> Result<()> {
    let (w, x) = (Variable::new(w0()?), x0()?);
    let f = {
        let w = w.clone();
        function(move |(x, n, m): &(Tensor, Tensor, Tensor)| nested_step(&w, x, n, m))
    };
    let c = f.concrete(&(x.clone(), Tensor::scalar(2i64), Tensor::scalar(3i64)))?;
    assert!(c.compile_stats().fused > 0, "{:?}", c.compile_stats());
    assert_eq!(
        c.optimized_graph().count("WhileWithHistory"),
        1,
        "{}",
        c.optimized_graph()
    );
    for (n, m) in [(2i64, 3i64), (3, 1), (0, 2), (1, 0), (1, 1), (4, 2)] {
        let args = (x.clone(), Tensor::scalar(n), Tensor::scalar(m));
        let got = f.call(&args)?;
        let want = nested_step(&w, &x, &args.1, &args.2)?;
        same(&got, &want, &format!("n = {n}, m = {m}"));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// [`cell_loop`] in the true branch of a `cond` (the false branch:
/// `sin(x w)`), then the head; with the gradients.
fn cond_step(w: &Variable, x: &Tensor, p: &Tensor, n: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        tape.watch(x);
        let h = cond(p, || cell_loop(w, x, n), || x.matmul(&w.read())?.sin())?;
        head(&h)
    })?;
    let g = tape.gradient(&loss, std::slice::from_ref(w))?;
    let gx = tape.gradient(&loss, x)?;
    Ok(vec![loss, or_zeros(g[0].clone(), &[4, 4]), or_zeros(gx, &[3, 4])])
}

#[test]
fn a_differentiated_loop_in_a_cond_gives_eager_values() -> Result<()> {
    let (w, x) = (Variable::new(w0()?), x0()?);
    let f = {
        let w = w.clone();
        function(move |(x, p, n): &(Tensor, Tensor, Tensor)| cond_step(&w, x, p, n))
    };
    let c = f.concrete(&(x.clone(), Tensor::scalar(true), Tensor::scalar(2i64)))?;
    assert!(c.compile_stats().fused > 0, "{:?}", c.compile_stats());
    for (p, n) in [(true, 2i64), (true, 5), (false, 3), (true, 0), (true, 1)] {
        let args = (x.clone(), Tensor::scalar(p), Tensor::scalar(n));
        let got = f.call(&args)?;
        let want = cond_step(&w, &x, &args.1, &args.2)?;
        same(&got, &want, &format!("p = {p}, n = {n}"));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// A loop appending `tanh(sum of the rows · w / 4)` as a row of its
/// carry `n` times (the carry's first dim grows: a `None` dim in its shape
/// invariant), then `sum(h^2)`; with the gradient as to `w`. (Sums: a
/// traced `mean` divides by the count of its traced shape.)
fn growing_step(w: &Variable, x: &Tensor, n: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt(n),
            |v: &Vec<Tensor>| {
                let next = v[1].sum(&[0], true)?.mul_scalar(0.25)?.matmul(&w.read())?.tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, Tensor::concat(&[&v[1], &next], 0)?])
            },
            vec![Tensor::scalar(0i64), x.clone()],
            WhileOptions {
                shape_invariants: Some(vec![
                    TensorSpec::new(DType::I64, &[]),
                    TensorSpec::new(DType::F64, &[None, Some(4)]),
                ]),
                ..Default::default()
            },
        )?;
        out[1].square()?.sum_all()
    })?;
    let g = tape.gradient(&loss, std::slice::from_ref(w))?;
    Ok(vec![loss, or_zeros(g[0].clone(), &[4, 4])])
}

#[test]
fn a_loop_whose_variables_change_shape_gives_eager_values_or_a_clear_error() -> Result<()> {
    let (w, x) = (Variable::new(w0()?), x0()?);
    // (a graph per count: the carry's final shape, which the gradient's
    // seed takes its shape from, changes with it)
    for n in [2i64, 5, 0, 1] {
        let f = {
            let w = w.clone();
            function(move |(x, n): &(Tensor, Tensor)| growing_step(&w, x, n))
        };
        let got = f.call(&(x.clone(), Tensor::scalar(n)))?;
        let want = growing_step(&w, &x, &Tensor::scalar(n))?;
        same(&got, &want, &format!("growing, n = {n}"));
        // another count through the same graph: eager's numbers, or an
        // error naming the shapes, never other numbers
        let m = n + 2;
        let want = growing_step(&w, &x, &Tensor::scalar(m))?;
        match f.call(&(x.clone(), Tensor::scalar(m))) {
            Ok(got) => same(&got, &want, &format!("growing, n = {n} then {m}")),
            Err(e) => {
                let msg = e.to_string();
                let (a, b) = (format!("{}, 4]", 3 + n), format!("{}, 4]", 3 + m));
                assert!(msg.contains(&a) && msg.contains(&b), "n = {n} then {m}: {msg}");
            }
        }
    }

    // without invariants, a body changing a variable's shape is refused,
    // eagerly and traced, naming the loop and the shapes
    let bad = |x: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::persistent();
        tape.record(|| {
            tape.watch(x);
            let out = while_loop(
                |v: &Vec<Tensor>| v[0].lt_scalar(2.0),
                |v: &Vec<Tensor>| Ok(vec![v[0].add_scalar(1.0)?, Tensor::concat(&[&v[1], &v[1]], 0)?]),
                vec![Tensor::scalar(0i64), x.clone()],
                WhileOptions::default(),
            )?;
            out[1].sum_all()
        })
    };
    let eager = bad(&x).expect_err("eager");
    let traced = function(move |x: &Tensor| bad(x)).call(&x).expect_err("traced");
    for e in [eager, traced] {
        let msg = e.to_string();
        assert!(
            msg.contains("while_loop") && msg.contains("[3, 4]") && msg.contains("[6, 4]"),
            "{msg}"
        );
    }
    Ok(())
}

/// An Elman RNN over the rows of `xs` (`[t, 3, 4]`, time first) as a
/// `while_loop` reading `xs[t]` each step, then the head; with the
/// gradients as to `w` and `u`, and as to `xs` where `watch_xs`.
fn rnn_step(w: &Variable, u: &Variable, xs: &Tensor, watch_xs: bool) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let steps = xs.shape()[0] as f64;
    let loss = tape.record(|| {
        if watch_xs {
            tape.watch(xs);
        }
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt_scalar(steps),
            |v: &Vec<Tensor>| {
                let x = xs.gather(&v[0], 0)?;
                let h = x.matmul(&u.read())?.add(&v[1].matmul(&w.read())?)?.tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, h])
            },
            vec![Tensor::scalar(0i64), Tensor::zeros(&[3, 4], DType::F64)],
            WhileOptions::default(),
        )?;
        head(&out[1])
    })?;
    let g = tape.gradient(&loss, &[w.clone(), u.clone()])?;
    let mut out = vec![
        loss.clone(),
        or_zeros(g[0].clone(), &[4, 4]),
        or_zeros(g[1].clone(), &[4, 4]),
    ];
    if watch_xs {
        out.push(tape.gradient(&loss, xs)?.expect("d xs"));
    }
    Ok(out)
}

/// How many nodes named `name` `g` and the graphs nested in it hold.
pub(crate) fn count_nested(g: &gradtape::function::Graph, name: &str) -> usize {
    g.count(name) + g.subgraphs().iter().map(|(_, s)| count_nested(s, name)).sum::<usize>()
}

#[test]
fn a_loop_gradient_computes_no_gradient_of_a_capture_nothing_asks_for() -> Result<()> {
    let (w, u) = (Variable::new(w0()?), Variable::new(w0()?.transpose()?.mul_scalar(0.8)?));
    let xs = Tensor::from_vec((0..60).map(|i| (i as f64 * 0.29).sin()).collect(), &[5, 3, 4])?;
    for watch_xs in [false, true] {
        let f = {
            let (w, u) = (w.clone(), u.clone());
            function(move |xs: &Tensor| rnn_step(&w, &u, xs, watch_xs))
        };
        let c = f.concrete(&xs)?;
        // the gradient of `xs[t]` as to `xs` (a scatter into zeros of the
        // whole `xs`, summed over the iterations) only where it is asked
        // for (before, every backward iteration computed it)
        let scatters = count_nested(c.optimized_graph(), "ScatterAdd");
        assert_eq!(scatters > 0, watch_xs, "watch_xs = {watch_xs}: {scatters} scatters");
        assert!(c.compile_stats().fused > 0, "{:?}", c.compile_stats());
        let got = f.call(&xs)?;
        same(
            &got,
            &rnn_step(&w, &u, &xs, watch_xs)?,
            &format!("rnn, watch_xs = {watch_xs}"),
        );
    }
    Ok(())
}
