//! A traced loop's forward run keeps what its gradient reads once, and
//! only what the gradient cannot have otherwise
//! (`function/control/residuals.rs`):
//!
//! - a residual that is a loop variable's next value (an RNN's
//!   `h' = tanh(..)`, read by `tanh`'s gradient) is read from that
//!   variable's history one row on, not kept in a history of its own
//!   (checked on the loops' structure in the `internals` binary,
//!   `function_control::residuals_that_are_next_states_are_kept_once`);
//! - an input row `gather(xs, i)` of a captured sequence at the loop's
//!   counter is gathered again by the backward loop, not kept: the forward
//!   loop's body returns the loop variables and the residuals the
//!   backward loop reads, and the row is not among them (checked here:
//!   without it the body returned one more output, the row).
//!
//! Values: the loss and every gradient against gradtape's eager mode (the
//! loop of ops TensorFlow's `tf.while_loop` unrolls to, as the other loop
//! tests), in f64 to 1e-12 of the largest magnitude, on three loop shapes:
//! a tanh RNN (gradients of the weights and of the captured sequence), a
//! loop carrying two states (two `tanh` cells, the second reading the
//! first's new state, each output read by its gradient), and an iterated map `y' = tanh(c y + xs[i])` to second
//! order (the gradient of the gradient pulls cotangents back into the
//! residuals read one row on). The second-order value is also checked
//! against TensorFlow 2.21 (`tf.while_loop` under two nested
//! `GradientTape`s, f64, the script in the test's doc).

use std::sync::Arc;

use gradtape::{function, while_loop, DType, GradientTape, Graph, Result, Tensor, Variable, WhileOptions};

/// Deterministic values in [-scale, scale].
fn filled(shape: &[usize], seed: f64, scale: f64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (i as f64 * 0.7 + seed).sin() * scale).collect(), shape)
}

/// Fails unless `got` and `want` agree in shape and to 1e-12 of `want`'s
/// largest magnitude.
fn close(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{what} {k}");
        let (g, w) = (g.to_vec_f64(), w.to_vec_f64());
        let scale = w.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!((a - b).abs() <= 1e-12 * scale, "{what} {k}[{i}]: traced {a}, eager {b}");
        }
    }
}

/// The forward loop's body with the residuals and the backward loop's body
/// of a traced step's first differentiated loop.
fn bodies(g: &Graph) -> (Arc<Graph>, Arc<Graph>) {
    let subs = g.subgraphs();
    let at = subs
        .iter()
        .position(|(l, _)| l == "body with residuals")
        .unwrap_or_else(|| panic!("no loop keeping residuals:\n{g}"));
    let bwd = subs[at..]
        .iter()
        .find(|(l, _)| l == "body")
        .unwrap_or_else(|| panic!("no backward loop:\n{g}"));
    (subs[at].1.clone(), bwd.1.clone())
}

/// Whether `g` has a node of `op` (with or without attributes).
fn has(g: &Graph, op: &str) -> bool {
    let s = g.to_string();
    s.contains(&format!(" = {op}(")) || s.contains(&format!(" = {op}["))
}

/// `sum(h_T^2)` for `h' = tanh(xs[i] w + h u + b)` over the rows of `xs`
/// (read with `gather` at the counter), and its gradients with respect to
/// `w`, `u`, `b` and `xs`.
fn rnn(xs: &Tensor, w: &Variable, u: &Variable, b: &Variable) -> Result<Vec<Tensor>> {
    let (t, batch, units) = (xs.shape()[0], xs.shape()[1], u.shape()[0]);
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        tape.watch(xs);
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt_scalar(t as f64),
            |v: &Vec<Tensor>| {
                let x = xs.gather(&v[0], 0)?;
                let h = x
                    .matmul(&w.read())?
                    .add(&v[1].matmul(&u.read())?)?
                    .add(&b.read())?
                    .tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, h])
            },
            vec![Tensor::scalar(0i64), Tensor::zeros(&[batch, units], DType::F64)],
            WhileOptions::default(),
        )?;
        out[1].square()?.sum_all()
    })?;
    let g = tape.gradient(&loss, &[w.clone(), u.clone(), b.clone()])?;
    let gx = tape.gradient(&loss, xs)?.expect("a gradient of xs");
    let mut outs = vec![loss];
    outs.extend(g.into_iter().map(|g| g.expect("a gradient")));
    outs.push(gx);
    Ok(outs)
}

#[test]
fn an_rnns_input_row_is_gathered_again_not_kept() -> Result<()> {
    let xs = filled(&[7, 3, 4], 0.5, 1.0)?;
    let w = Variable::new(filled(&[4, 5], 0.1, 0.5)?);
    let u = Variable::new(filled(&[5, 5], 0.2, 0.4)?);
    let b = Variable::new(filled(&[5], 0.3, 0.1)?);
    let f = {
        let (w, u, b) = (w.clone(), u.clone(), b.clone());
        function(move |xs: &Tensor| rnn(xs, &w, &u, &b))
    };
    close(&f.call(&xs)?, &rnn(&xs, &w, &u, &b)?, "rnn");
    let (fwd, bwd) = bodies(f.concrete(&xs)?.graph());
    // the counter, the state, and one residual (the state's next value:
    // `tanh`'s output); not the gathered row
    assert_eq!(fwd.outputs.len(), 3, "{fwd}");
    assert!(
        has(&fwd, "Gather") && has(&bwd, "Gather") && has(&bwd, "TanhGrad"),
        "{bwd}"
    );
    Ok(())
}

/// `sum(h2_T)` for a loop carrying two states,
/// `h1' = tanh(xs[i] w1 + h1 u1)`, `h2' = tanh(h1' v + h2 u2)`, and its
/// gradients with respect to the four weights.
fn two_states(xs: &Tensor, ws: &[Variable]) -> Result<Vec<Tensor>> {
    let (t, batch, units) = (xs.shape()[0], xs.shape()[1], ws[1].shape()[0]);
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt_scalar(t as f64),
            |v: &Vec<Tensor>| {
                let x = xs.gather(&v[0], 0)?;
                let h1 = x.matmul(&ws[0].read())?.add(&v[1].matmul(&ws[1].read())?)?.tanh()?;
                let h2 = h1.matmul(&ws[2].read())?.add(&v[2].matmul(&ws[3].read())?)?.tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, h1, h2])
            },
            vec![
                Tensor::scalar(0i64),
                Tensor::zeros(&[batch, units], DType::F64),
                filled(&[batch, units], 0.9, 0.3)?,
            ],
            WhileOptions::default(),
        )?;
        out[2].sum_all()
    })?;
    let g = tape.gradient(&loss, ws)?;
    Ok(std::iter::once(loss)
        .chain(g.into_iter().map(|g| g.expect("a gradient")))
        .collect())
}

#[test]
fn a_loop_carrying_two_states_keeps_neither_twice() -> Result<()> {
    let xs = filled(&[6, 2, 3], 0.4, 1.0)?;
    let ws: Vec<Variable> = [(&[3, 4][..], 0.1), (&[4, 4], 0.2), (&[4, 4], 0.3), (&[4, 4], 0.4)]
        .iter()
        .map(|(s, k)| filled(s, *k, 0.5).map(Variable::new))
        .collect::<Result<_>>()?;
    let f = {
        let ws = ws.clone();
        function(move |xs: &Tensor| two_states(xs, &ws))
    };
    close(&f.call(&xs)?, &two_states(&xs, &ws)?, "two states");
    let (fwd, bwd) = bodies(f.concrete(&xs)?.graph());
    // the counter, two states, their next values (the `tanh`s' outputs,
    // which their gradients read): no gathered row
    assert_eq!(fwd.outputs.len(), 5, "{fwd}");
    assert!(has(&bwd, "Gather") && has(&bwd, "TanhGrad"), "{bwd}");
    Ok(())
}

/// `sum(y_T)` for `y' = tanh(c y + xs[i])`, its gradient `g` with respect
/// to `c`, and the gradient of `sum(g)` with respect to `c` (second order).
fn map2(y0: &Tensor, c: &Tensor, xs: &Tensor) -> Result<Vec<Tensor>> {
    let t = xs.shape()[0];
    let outer = GradientTape::new();
    let (loss, g, s) = outer.record(|| {
        outer.watch(c);
        let inner = GradientTape::new();
        let loss = inner.record(|| {
            inner.watch(c);
            let out = while_loop(
                |v: &Vec<Tensor>| v[0].lt_scalar(t as f64),
                |v: &Vec<Tensor>| {
                    let y = c.mul(&v[1])?.add(&xs.gather(&v[0], 0)?)?.tanh()?;
                    Ok(vec![v[0].add_scalar(1.0)?, y])
                },
                vec![Tensor::scalar(0i64), y0.clone()],
                WhileOptions::default(),
            )?;
            out[1].sum_all()
        })?;
        let g = inner.gradient(&loss, c)?.expect("a gradient");
        let s = g.sum_all()?;
        Ok((loss, g, s))
    })?;
    let gg = outer.gradient(&s, c)?.expect("a second-order gradient");
    Ok(vec![loss, g, gg])
}

/// TensorFlow 2.21 for the same map (f64), as a referee of the
/// second-order value:
///
/// ```text
/// y0 = tf.constant([0.5, -1.2, 2.0], tf.float64); c = tf.constant([1.5, 0.7, -0.4], tf.float64)
/// xs = tf.constant(np.sin(0.7 * np.arange(15) + 0.2).reshape(5, 3) * 0.5)
/// @tf.function
/// def step(c):
///     with tf.GradientTape() as o:
///         o.watch(c)
///         with tf.GradientTape() as t:
///             t.watch(c)
///             _, y = tf.while_loop(lambda i, y: i < 5,
///                 lambda i, y: (i + 1, tf.tanh(c * y + tf.gather(xs, i))), (tf.constant(0), y0))
///             loss = tf.reduce_sum(y)
///         g = t.gradient(loss, c)
///         s = tf.reduce_sum(g)
///     return loss, g, o.gradient(s, c)
/// ```
#[test]
fn a_maps_state_read_one_row_on_gives_eager_and_tensorflow_second_order() -> Result<()> {
    let y0 = Tensor::from_vec(vec![0.5, -1.2, 2.0], &[3])?;
    let c = Tensor::from_vec(vec![1.5, 0.7, -0.4], &[3])?;
    let xs = filled(&[5, 3], 0.2, 0.5)?;
    let f = function(|(y0, c, xs): &(Tensor, Tensor, Tensor)| map2(y0, c, xs));
    let args = (y0.clone(), c.clone(), xs.clone());
    let got = f.call(&args)?;
    close(&got, &map2(&y0, &c, &xs)?, "map");
    let tf = [TF_LOSS, &TF_G[..], &TF_GG[..]];
    for (k, (t, want)) in got.iter().zip(tf).enumerate() {
        for (a, b) in t.to_vec_f64().iter().zip(want) {
            assert!(
                (a - b).abs() <= 1e-10 * (1.0 + b.abs()),
                "output {k}: {a} against TensorFlow's {b}"
            );
        }
    }
    let (fwd, _) = bodies(f.concrete(&args)?.graph());
    // the counter, the state, and `tanh`'s output (read one row on)
    assert_eq!(fwd.outputs.len(), 3, "{fwd}");
    Ok(())
}

/// (TensorFlow's numbers, printed by the script above; JAX f64 gives the
/// same second-order gradient to 5e-16)
const TF_LOSS: &[f64] = &[0.5471274067590622];
const TF_G: [f64; 3] = [0.2502717142952513, -0.6970737326063398, 0.47630346539842966];
const TF_GG: [f64; 3] = [-0.9628820267411088, -3.590978649680476, -0.45956424676816254];
