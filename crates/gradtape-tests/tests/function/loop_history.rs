//! A differentiated `while_loop` in a traced step keeps its history (each
//! iteration's entry values and the residuals of its body's gradient) by
//! copying each iteration's values into one buffer as they are made,
//! with room for as many rows as the last call kept
//! (`function/control/history.rs`). These tests change the iteration count
//! from call to call through one trace (fewer rows than the room made,
//! more, none, the same), so that the buffer is made at the last call's
//! size, grown past it, and left empty, and compare the loss, every
//! gradient and the weights of an SGD step with eager's (the loop of ops
//! TensorFlow's `tf.while_loop` unrolls to; values from gradtape's eager
//! mode, as the other loop tests): to 1e-12 (1e-10 at the larger size)
//! of the largest magnitude in f64 over eight SGD steps; in f32 (where the compiled graph may sum in
//! another order), to 1e-5 at each call from the same weights.
//! The RNN's input row is read at the loop's counter with `gather`, as a
//! user writes it (`trace_vs_eager`'s `rnn_loop`). A loop whose kept rows
//! change shape (a loop in the body of a differentiated loop, run a
//! different number of times each iteration) is an error naming the loop,
//! as before, from the rows kept as tensors.

use gradtape::{function, while_loop, DType, GradientTape, Result, Tensor, Variable, WhileOptions};

/// Each output of `got` is the one of `want` in shape and to `tol` of its
/// largest magnitude.
fn same(got: &[Tensor], want: &[Tensor], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.shape(), b.shape(), "{what}: output {k}");
        let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
        let scale = b.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!(
                (p - q).abs() <= tol * scale,
                "{what}, output {k}[{i}]: traced {p}, eager {q}"
            );
        }
    }
}

/// Deterministic values in [-scale, scale].
fn filled(shape: &[usize], seed: f64, scale: f64, dtype: DType) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (i as f64 * 0.7 + seed).sin() * scale).collect(), shape)?.cast(dtype)
}

/// The RNN's weights `[w, u, b]` and a head `v`.
fn weights(input: usize, units: usize, dtype: DType) -> Result<Vec<Variable>> {
    Ok(vec![
        Variable::new(filled(&[input, units], 0.1, 0.5, dtype)?),
        Variable::new(filled(&[units, units], 0.2, 0.3, dtype)?),
        Variable::new(filled(&[units], 0.3, 0.1, dtype)?),
        Variable::new(filled(&[units, 1], 0.4, 0.5, dtype)?),
    ])
}

/// One SGD step (at `rate`) of `mean((tanh(x_t w + h u + b) ... ) v)^2`
/// over the first `n` rows of `xs` (`h` from zeros, `x_t = xs[t]` by
/// `gather` at the counter); returns the loss, the final state and the
/// gradients (zeros where the loop did not run).
fn rnn_step(vars: &[Variable], xs: &Tensor, n: &Tensor, rate: f64) -> Result<Vec<Tensor>> {
    let (batch, units, dtype) = (xs.shape()[1], vars[1].shape()[0], xs.dtype());
    let tape = GradientTape::new();
    let (loss, h) = tape.record(|| {
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt(n),
            |v: &Vec<Tensor>| {
                let x = xs.gather(&v[0], 0)?;
                let h = x
                    .matmul(&vars[0].read())?
                    .add(&v[1].matmul(&vars[1].read())?)?
                    .add(&vars[2].read())?
                    .tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, h])
            },
            vec![Tensor::scalar(0i64), Tensor::zeros(&[batch, units], dtype)],
            WhileOptions::default(),
        )?;
        let loss = out[1].matmul(&vars[3].read())?.add_scalar(0.5)?.square()?.mean_all()?;
        Ok((loss, out[1].clone()))
    })?;
    let grads = tape.gradient(&loss, vars)?;
    let mut outs = vec![loss, h];
    for (g, v) in grads.into_iter().zip(vars) {
        let g = g.unwrap_or_else(|| Tensor::zeros(&v.shape(), dtype));
        v.assign_sub(&g.mul_scalar(rate)?)?;
        outs.push(g);
    }
    Ok(outs)
}

/// Runs [`rnn_step`] traced and eagerly (two copies of the weights) at
/// each count in turn through one trace, comparing the outputs and then
/// the weights after each step.
fn rnn_against_eager(batch: usize, input: usize, units: usize, dtype: DType, rate: f64, tol: f64) -> Result<()> {
    let xs = filled(&[16, batch, input], 0.5, 1.0, dtype)?;
    let (eager, traced) = (weights(input, units, dtype)?, weights(input, units, dtype)?);
    let f = {
        let vars = traced.clone();
        function(move |(xs, n): &(Tensor, Tensor)| rnn_step(&vars, xs, n, rate))
    };
    // the room made is the last count's: 5 then fewer (2), more (9, 16),
    // none (0), one, the same twice
    for n in [5i64, 2, 9, 16, 0, 1, 7, 7] {
        let what = format!("{dtype} {batch}x{input}->{units}, n = {n}");
        let got = f.call(&(xs.clone(), Tensor::scalar(n)))?;
        let want = rnn_step(&eager, &xs, &Tensor::scalar(n), rate)?;
        same(&got, &want, tol, &what);
        let (we, wt): (Vec<Tensor>, Vec<Tensor>) = (
            eager.iter().map(Variable::read).collect(),
            traced.iter().map(Variable::read).collect(),
        );
        same(&wt, &we, tol, &format!("{what}: weights"));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn an_rnn_loops_history_gives_eager_values_at_counts_that_change() -> Result<()> {
    rnn_against_eager(3, 4, 5, DType::F64, 0.1, 1e-12)?;
    // (1e-10: at this size the rounding of sums in another order,
    // compounded over the steps, reaches 1.3e-12 by the seventh)
    rnn_against_eager(8, 16, 32, DType::F64, 0.1, 1e-10)?;
    // (f32 at rate 0: each call from the same weights, as the rounding of
    // a compiled sum in another order, compounded over SGD steps through
    // a 16-step recurrence, would grow past any tight tolerance)
    rnn_against_eager(8, 16, 32, DType::F32, 0.0, 1e-5)
}

/// A loop carrying an f64 matrix, an i32 vector and a bool alongside the
/// counter (histories of four dtypes, one of them a scalar, whose buffers
/// start inline), differentiated as to the matrix's start.
fn mixed_step(x: &Tensor, n: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(x);
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt(n),
            |v: &Vec<Tensor>| {
                let k = v[2].cast(DType::F64)?;
                let flip = v[3].cast(DType::F64)?.mul_scalar(2.0)?.add_scalar(-1.0)?;
                let h = v[1].mul(&k)?.sin()?.mul(&flip)?.add(&v[1])?;
                Ok(vec![
                    v[0].add_scalar(1.0)?,
                    h,
                    v[2].add_scalar(1.0)?,
                    v[3].logical_not()?,
                ])
            },
            vec![
                Tensor::scalar(0i64),
                x.clone(),
                Tensor::vector(&[1i32, 2, 3]),
                Tensor::scalar(true),
            ],
            WhileOptions::default(),
        )?;
        out[1].square()?.sum_all()
    })?;
    let g = tape
        .gradient(&loss, x)?
        .unwrap_or_else(|| Tensor::zeros(x.shape(), DType::F64));
    Ok(vec![loss, g])
}

#[test]
fn histories_of_every_dtype_the_loop_carries_give_eager_values() -> Result<()> {
    let x = filled(&[2, 3], 0.9, 0.8, DType::F64)?;
    let f = function(|(x, n): &(Tensor, Tensor)| mixed_step(x, n));
    for n in [3i64, 1, 6, 0, 6] {
        let got = f.call(&(x.clone(), Tensor::scalar(n)))?;
        same(&got, &mixed_step(&x, &Tensor::scalar(n))?, 1e-12, &format!("n = {n}"));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// An outer loop of 3 iterations whose body runs an inner loop as many
/// times as the outer counter plus one (the inner loop's history, kept for
/// the outer gradient, has another length at each outer iteration).
fn uneven_step(x: &Tensor) -> Result<Tensor> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(x);
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt_scalar(3.0),
            |v: &Vec<Tensor>| {
                let m = v[0].add_scalar(1.0)?;
                let inner = while_loop(
                    |w: &Vec<Tensor>| w[0].lt(&m),
                    |w: &Vec<Tensor>| Ok(vec![w[0].add_scalar(1.0)?, w[1].sin()?.mul_scalar(1.1)?]),
                    vec![Tensor::scalar(0i64), v[1].clone()],
                    WhileOptions::default(),
                )?;
                Ok(vec![v[0].add_scalar(1.0)?, inner[1].clone()])
            },
            vec![Tensor::scalar(0i64), x.clone()],
            WhileOptions::default(),
        )?;
        out[1].sum_all()
    })?;
    tape.gradient(&loss, x)?
        .ok_or_else(|| gradtape::Error::InvalidArgument {
            op: "uneven_step",
            msg: "no gradient".into(),
        })
}

/// (Eagerly the step runs: the tape records each inner iteration. Traced,
/// the inner loop's history is a residual of the outer body, one row per
/// outer iteration, `[1]` then `[2]` long: the rows so far go from the
/// buffer to a list and the stack of the list names the change.)
#[test]
fn kept_rows_that_change_shape_are_an_error_naming_the_loop() -> Result<()> {
    let x = filled(&[4], 0.3, 1.0, DType::F64)?;
    uneven_step(&x)?;
    let f = function(|x: &Tensor| uneven_step(x));
    let msg = f.call(&x).expect_err("rows of two shapes stacked").to_string();
    assert!(
        msg.contains("while_loop") && msg.contains("changes shape from [1] to [2] between iterations"),
        "{msg}"
    );
    Ok(())
}
