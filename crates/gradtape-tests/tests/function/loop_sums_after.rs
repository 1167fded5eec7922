//! Sums a loop carries, taken out of it by the compiler
//! (`function/control/sums_after.rs`, the `sums_after_loops` pass): a
//! loop variable that only accumulates products over rows
//! (`acc ← acc + a_tᵀ b_t`, a loop gradient's weight gradients) or sums
//! over leading axes is summed after the loop, in one product over the
//! stacked rows.
//!
//! Each test checks that the pass fired (or did not) by its count in the
//! compile stats and the loop's attribute in the optimised graph (without
//! the pass both are absent), and the values against gradtape's eager mode
//! (the loop of ops TensorFlow's `tf.while_loop` unrolls to) in f64, to
//! 1e-12 of the largest magnitude (the sums are added in another order).
//! The RNN's gradients are also checked against TensorFlow 2.21
//! (`tf.while_loop` under a `GradientTape`, f64; the script is in the
//! test's doc). What must not be taken out: an accumulator read in the
//! loop or by its condition, a non-linear term, and sums whose stacked
//! operands would be larger than what they save; what must still be right:
//! a loop that `max_iterations` stops, one that runs no iteration, and a
//! gradient of the gradient.

use gradtape::{function, while_loop, DType, Function, FunctionOptions, GradientTape, Result, Tensor, Variable};
use gradtape::{ConcreteFunction, WhileOptions};

/// Deterministic values in [-scale, scale].
fn filled(shape: &[usize], seed: f64, scale: f64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (i as f64 * 0.7 + seed).sin() * scale).collect(), shape)
}

/// Fails unless `got` and `want` agree in shape and to `tol` of `want`'s
/// largest magnitude.
fn close(got: &[Tensor], want: &[Tensor], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what} {k}");
        let (g, w) = (g.to_vec_f64(), w.to_vec_f64());
        let scale = w.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!((a - b).abs() <= tol * scale, "{what} {k}[{i}]: traced {a}, eager {b}");
        }
    }
}

/// How many terms the compiler took out of loops, and whether the
/// optimised graph lists a loop with sums after it.
fn taken(c: &std::sync::Arc<ConcreteFunction>) -> (Option<usize>, bool) {
    (
        c.compile_stats().count("sums_after_loops"),
        c.optimized_graph().to_string().contains("sums_after="),
    )
}

/// `sum(h_T^2)` for `h' = tanh(xs[i] w + h u + b)` over the rows of `xs`
/// while `i < n` (at most `max` iterations), and its gradients with
/// respect to `w`, `u` and `b`.
fn rnn(xs: &Tensor, n: &Tensor, ws: &[Variable], max: Option<usize>) -> Result<Vec<Tensor>> {
    let (batch, units) = (xs.shape()[1], ws[1].shape()[0]);
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt(n),
            |v: &Vec<Tensor>| {
                let x = xs.gather(&v[0], 0)?;
                let h = x
                    .matmul(&ws[0].read())?
                    .add(&v[1].matmul(&ws[1].read())?)?
                    .add(&ws[2].read())?
                    .tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, h])
            },
            vec![Tensor::scalar(0i64), filled(&[batch, units], 0.6, 0.5)?],
            WhileOptions {
                max_iterations: max,
                ..Default::default()
            },
        )?;
        out[1].square()?.sum_all()
    })?;
    // (no iteration: no gradient reaches the weights, zeros)
    let g = tape.gradient(&loss, ws)?.into_iter().zip(ws);
    let g = g.map(|(g, w)| g.map_or_else(|| Tensor::try_zeros(&w.shape(), w.dtype()), Ok));
    std::iter::once(Ok(loss)).chain(g).collect()
}

/// The RNN's data: `xs` `[7, 2, 4]` and weights for 6 units (sizes at
/// which the stacked rows, `x_t`, `h_{t-1}` and `dz_t`, are smaller than
/// the sums they replace, so all three are taken out).
fn rnn_data() -> Result<(Tensor, Vec<Variable>)> {
    let xs = filled(&[7, 2, 4], 0.5, 1.0)?;
    let ws = [(&[4, 6][..], 0.1, 0.5), (&[6, 6], 0.2, 0.4), (&[6], 0.3, 0.1)]
        .iter()
        .map(|(s, k, sc)| filled(s, *k, *sc).map(Variable::new))
        .collect::<Result<_>>()?;
    Ok((xs, ws))
}

/// The RNN's loss and gradients at `n` = 7 against TensorFlow 2.21, f64:
///
/// ```python
/// import numpy as np, tensorflow as tf
/// def filled(shape, seed, scale):
///     n = int(np.prod(shape)); return (np.sin(np.arange(n) * 0.7 + seed) * scale).reshape(shape)
/// xs = tf.constant(filled([7, 2, 4], 0.5, 1.0)); w = tf.Variable(filled([4, 6], 0.1, 0.5))
/// u = tf.Variable(filled([6, 6], 0.2, 0.4)); b = tf.Variable(filled([6], 0.3, 0.1))
/// with tf.GradientTape() as tape:
///     _, h = tf.while_loop(lambda i, h: i < 7,
///         lambda i, h: (i + 1, tf.tanh(tf.gather(xs, i) @ w + h @ u + b)),
///         (tf.constant(0, tf.int64), tf.constant(filled([2, 6], 0.6, 0.5))))
///     loss = tf.reduce_sum(h * h)
/// gw, gu, gb = tape.gradient(loss, [w, u, b])
/// print(loss.numpy(), gw.numpy()[0, :3], gu.numpy()[5, 3:], gb.numpy()[:3])
/// ```
const TF_RNN: [f64; 10] = [
    0.5718203906936312,
    -0.7153254480887757,
    -0.4258768585199595,
    -0.1910168951628809,
    -0.031984002431563345,
    0.11376361219894486,
    0.19757972434918125,
    0.5513041491306463,
    -0.06409792505908458,
    0.41816307894208515,
];

#[test]
fn an_rnns_weight_gradients_are_summed_after_the_loop() -> Result<()> {
    let (xs, ws) = rnn_data()?;
    let f = {
        let ws = ws.clone();
        function(move |(xs, n): &(Tensor, Tensor)| rnn(xs, n, &ws, None))
    };
    // one graph, iteration counts decided when it runs: all 7 rows, 3, none
    for n in [7i64, 3, 0] {
        let args = (xs.clone(), Tensor::scalar(n));
        let want = rnn(&xs, &args.1, &ws, None)?;
        close(&f.call(&args)?, &want, 1e-12, &format!("rnn, n = {n}"));
        if n == 0 {
            // no iteration: the gradients are the sums' initial values
            for g in &want[1..] {
                assert!(g.to_vec_f64().iter().all(|&v| v == 0.0), "{g:?}");
            }
        }
    }
    let c = f.concrete(&(xs.clone(), Tensor::scalar(7i64)))?;
    // dW, dU and db of the backward loop: one term each
    assert_eq!(taken(&c), (Some(3), true), "{}", c.optimized_graph());
    // switched off: the backward loop carries its sums
    let off = FunctionOptions::default().disable_pass("sums_after_loops")?;
    let g = {
        let ws = ws.clone();
        Function::with_options(move |(xs, n): &(Tensor, Tensor)| rnn(xs, n, &ws, None), off)
    };
    let args = (xs.clone(), Tensor::scalar(7i64));
    assert_eq!(taken(&g.concrete(&args)?), (None, false));
    close(&f.call(&args)?, &g.call(&args)?, 1e-12, "rnn, pass off");
    // against TensorFlow
    let got = f.call(&args)?;
    let (gw, gu, gb) = (got[1].to_vec_f64(), got[2].to_vec_f64(), got[3].to_vec_f64());
    let mine = [
        got[0].to_vec_f64()[0],
        gw[0],
        gw[1],
        gw[2],
        gu[33],
        gu[34],
        gu[35],
        gb[0],
        gb[1],
        gb[2],
    ];
    for (i, (a, b)) in mine.iter().zip(TF_RNN).enumerate() {
        assert!(
            (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            "TensorFlow value {i}: {a} vs {b}"
        );
    }
    Ok(())
}

#[test]
fn a_loop_stopped_by_max_iterations_sums_the_iterations_it_ran() -> Result<()> {
    let (xs, ws) = rnn_data()?;
    let f = {
        let ws = ws.clone();
        function(move |(xs, n): &(Tensor, Tensor)| rnn(xs, n, &ws, Some(4)))
    };
    for n in [7i64, 2] {
        let args = (xs.clone(), Tensor::scalar(n));
        close(
            &f.call(&args)?,
            &rnn(&xs, &args.1, &ws, Some(4))?,
            1e-12,
            &format!("rnn, max 4, n = {n}"),
        );
    }
    assert!(taken(&f.concrete(&(xs, Tensor::scalar(7i64)))?).1);
    Ok(())
}

/// A forward loop carrying `acc ← acc + x_tᵀ y_t + tanh(x_tᵀ y_t)` (and
/// `s ← s + sum(x_t)` beside it) over the rows of `xs` and `ys`, `[n, 2,
/// 8]` each: the product term is taken out, the `tanh` stays in the loop,
/// and the scalar sum is taken out too, as `x_t` is stacked for the
/// product anyway (alone it stays: see `sums_read_in_the_loop_...`).
fn products(xs: &Tensor, ys: &Tensor) -> Result<Vec<Tensor>> {
    let n = xs.shape()[0];
    let out = while_loop(
        |v: &Vec<Tensor>| v[0].lt_scalar(n as f64),
        |v: &Vec<Tensor>| {
            let (x, y) = (xs.gather(&v[0], 0)?, ys.gather(&v[0], 0)?);
            let p = x.matmul_with(&y, true, false)?;
            let acc = v[1].add(&p)?.add(&p.tanh()?)?;
            let s = v[2].add(&x.sum(&[0, 1], false)?)?;
            Ok(vec![v[0].add_scalar(1.0)?, acc, s])
        },
        vec![Tensor::scalar(0i64), filled(&[8, 8], 0.2, 1.0)?, Tensor::scalar(0.5f64)],
        WhileOptions::default(),
    )?;
    Ok(out[1..].to_vec())
}

#[test]
fn a_product_summed_by_a_forward_loop_is_taken_out_and_the_rest_stays() -> Result<()> {
    let (xs, ys) = (filled(&[5, 2, 8], 0.1, 1.0)?, filled(&[5, 2, 8], 0.9, 1.0)?);
    let f = function(|(xs, ys): &(Tensor, Tensor)| products(xs, ys));
    let args = (xs.clone(), ys.clone());
    close(&f.call(&args)?, &products(&xs, &ys)?, 1e-12, "products");
    assert_eq!(taken(&f.concrete(&args)?), (Some(2), true));
    Ok(())
}

/// Loops whose sums must stay: `which` 0 reads the accumulator in the body
/// (beside its sum), 1 in the condition, 2 adds a non-linear function of
/// the product, 3 sums `s ← s + sum(x_t)` alone (stacking `x_t`, 16
/// numbers, to save adding one).
fn not_taken(xs: &Tensor, which: usize) -> Result<Vec<Tensor>> {
    let n = xs.shape()[0];
    let out = while_loop(
        |v: &Vec<Tensor>| match which {
            1 => v[0].lt_scalar(n as f64)?.logical_and(&v[1].sum_all()?.lt_scalar(1e9)?),
            _ => v[0].lt_scalar(n as f64),
        },
        |v: &Vec<Tensor>| {
            let x = xs.gather(&v[0], 0)?;
            let p = x.matmul_with(&x, true, false)?;
            let acc = match which {
                2 => v[1].add(&p.tanh()?)?,
                3 => v[1].add(&p.tanh()?)?,
                _ => v[1].add(&p)?,
            };
            let s = match which {
                0 => v[2].add(&v[1].mul_scalar(0.5)?)?,
                3 => v[2].add(&x.sum(&[0, 1], false)?)?,
                _ => v[2].clone(),
            };
            Ok(vec![v[0].add_scalar(1.0)?, acc, s])
        },
        vec![
            Tensor::scalar(0i64),
            filled(&[8, 8], 0.2, 1.0)?,
            match which {
                3 => Tensor::scalar(0.5f64),
                _ => Tensor::zeros(&[8, 8], DType::F64),
            },
        ],
        WhileOptions::default(),
    )?;
    Ok(out[1..].to_vec())
}

#[test]
fn sums_read_in_the_loop_or_not_linear_stay_in_it() -> Result<()> {
    let xs = filled(&[5, 2, 8], 0.3, 1.0)?;
    for which in 0..4 {
        let f = function(move |xs: &Tensor| not_taken(xs, which));
        close(&f.call(&xs)?, &not_taken(&xs, which)?, 1e-12, &format!("loop {which}"));
        assert_eq!(taken(&f.concrete(&xs)?), (Some(0), false), "loop {which}");
    }
    Ok(())
}

/// The gradient with respect to `u` of `sum(g_w^2)`, `g_w` the RNN loss's
/// gradient with respect to `w` (second order through the loop), with
/// the loss and `g_w`.
fn rnn_second(xs: &Tensor, ws: &[Variable]) -> Result<Vec<Tensor>> {
    let n = Tensor::scalar(xs.shape()[0] as i64);
    let outer = GradientTape::new();
    let (first, s) = outer.record(|| {
        let first = rnn(xs, &n, ws, None)?;
        let s = first[1].square()?.sum_all()?;
        Ok((first, s))
    })?;
    let gu = outer.gradient(&s, &ws[1])?.expect("a gradient");
    Ok(vec![first[0].clone(), first[1].clone(), gu])
}

/// (The first-order backward loop is differentiated here, so it keeps
/// its history and its sums as written; the value checks that the loops
/// around it, compiled with the pass on, stay right.)
#[test]
fn a_gradient_of_the_gradient_through_the_loop_is_right() -> Result<()> {
    let (xs, ws) = rnn_data()?;
    let f = {
        let ws = ws.clone();
        function(move |xs: &Tensor| rnn_second(xs, &ws))
    };
    close(&f.call(&xs)?, &rnn_second(&xs, &ws)?, 1e-10, "second order");
    Ok(())
}

/// `acc ← acc + h_{t+1}ᵀ h_t` beside `h_{t+1} = tanh(0.9 h_t + x_t)`: the
/// stacked operands are a loop variable's entry value (a body input) and
/// its next value (a body output already), which the body then returns
/// twice.
fn states(xs: &Tensor) -> Result<Vec<Tensor>> {
    let n = xs.shape()[0];
    let out = while_loop(
        |v: &Vec<Tensor>| v[0].lt_scalar(n as f64),
        |v: &Vec<Tensor>| {
            let h = v[1].mul_scalar(0.9)?.add(&xs.gather(&v[0], 0)?)?.tanh()?;
            let acc = v[2].add(&h.matmul_with(&v[1], true, false)?)?;
            Ok(vec![v[0].add_scalar(1.0)?, h, acc])
        },
        vec![
            Tensor::scalar(0i64),
            filled(&[2, 8], 0.4, 0.5)?,
            filled(&[8, 8], 0.8, 1.0)?,
        ],
        WhileOptions::default(),
    )?;
    Ok(out[1..].to_vec())
}

#[test]
fn operands_that_are_loop_variables_are_stacked_too() -> Result<()> {
    let xs = filled(&[6, 2, 8], 0.2, 1.0)?;
    let f = function(states);
    close(&f.call(&xs)?, &states(&xs)?, 1e-12, "states");
    assert_eq!(taken(&f.concrete(&xs)?), (Some(1), true));
    Ok(())
}
