//! A `cond` branch or a `while_loop` body that returns a constant as it
//! is (a tensor the function captured, not a value of the trace): the
//! op's output is a value of its own, and the constant stays the constant
//! for the rest of the function.
//!
//! The trace knows values by their tensors' ids. The output of such a
//! `cond` used to keep the constant's id when the branch taken while
//! tracing returned it, so every later op on the constant read the
//! `cond`'s output instead: `sigmoid(c)` after the `cond` gave
//! `sigmoid(v)` on calls that took the other branch. The same held for a
//! differentiated call's forward graph (traced again under a tape, on the
//! inputs of the first differentiated call). Found by the random programs
//! of `aliasing.rs`.
//!
//! Expected values: TensorFlow 2.21,
//! ```python
//! c = tf.constant([1., -2.])
//! v = tf.Variable([3., 4.])
//! @tf.function
//! def f(y):
//!     first = v.read_value()
//!     a, b = tf.cond(tf.reduce_sum(y) > 0, lambda: (first, tf.tanh(c)), lambda: (c, -first))
//!     return a, b, tf.sigmoid(c) * y, first * 2.
//! f([-1., -1.])  # [1, -2], [-3, -4], [-0.7310586, -0.1192029], [6, 8]
//! f([1., 2.])    # [3, 4], [0.7615942, -0.9640276], [0.7310586, 0.2384058], [6, 8]
//! @tf.function
//! def g(n):
//!     i, s = tf.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, c), (0, tf.constant([5., 6.])))
//!     return s, c * 2.
//! g(1), g(0), g(3)  # ([1, -2], [2, -4]), ([5, 6], [2, -4]), ([1, -2], [2, -4])
//! ```

use gradtape::{cond, function, while_loop, GradientTape, Result, Tensor, Variable, WhileOptions};

fn close(got: &Tensor, want: &[f32], what: &str) {
    let g = got.to_vec::<f32>().expect("f32");
    assert_eq!(g.len(), want.len(), "{what}: {g:?} vs {want:?}");
    for (a, b) in g.iter().zip(want) {
        assert!((a - b).abs() <= 1e-6, "{what}: {g:?} vs {want:?}");
    }
}

fn branchy(y: &Tensor, v: &Variable, c: &Tensor) -> Result<Vec<Tensor>> {
    let first = v.read();
    let (a, b) = cond(
        &y.sum_all()?.gt_scalar(0.0)?,
        || Ok((first.clone(), c.tanh()?)),
        || Ok((c.clone(), first.neg()?)),
    )?;
    Ok(vec![a, b, c.sigmoid()?.mul(y)?, first.mul_scalar(2.0)?])
}

const FALSE_BRANCH: [&[f32]; 4] = [&[1.0, -2.0], &[-3.0, -4.0], &[-0.731_058_6, -0.119_202_9], &[6.0, 8.0]];
const TRUE_BRANCH: [&[f32]; 4] = [
    &[3.0, 4.0],
    &[0.761_594_2, -0.964_027_6],
    &[0.731_058_6, 0.238_405_8],
    &[6.0, 8.0],
];

#[test]
fn a_constant_a_branch_returns_stays_the_constant_after_the_cond() -> Result<()> {
    let v = Variable::new(Tensor::vector(&[3.0f32, 4.0]));
    let c = Tensor::vector(&[1.0f32, -2.0]);
    let f = {
        let (v, c) = (v.clone(), c.clone());
        function(move |y: &Tensor| branchy(y, &v, &c))
    };
    // traced where the branch that returns `c` is taken, then both
    let (no, yes) = (Tensor::vector(&[-1.0f32, -1.0]), Tensor::vector(&[1.0f32, 2.0]));
    for (k, (y, want)) in [(&no, FALSE_BRANCH), (&yes, TRUE_BRANCH), (&no, FALSE_BRANCH)]
        .into_iter()
        .enumerate()
    {
        for (i, (t, w)) in f.call(y)?.iter().zip(want).enumerate() {
            close(t, w, &format!("call {k} output {i}"));
        }
    }
    assert_eq!(f.trace_count(), 1);

    // differentiated calls: the first builds the forward graph (tracing
    // the closure again) where `c` is returned, the second takes the
    // other branch; d(sum(sigmoid(c) * y))/dy = sigmoid(c)
    let f = {
        let (v, c) = (v.clone(), c.clone());
        function(move |y: &Tensor| branchy(y, &v, &c))
    };
    for (k, (y, want)) in [(&no, FALSE_BRANCH), (&yes, TRUE_BRANCH)].into_iter().enumerate() {
        let tape = GradientTape::new();
        let (outs, loss) = tape.record(|| {
            tape.watch(y);
            let outs = f.call(y)?;
            let loss = outs[2].sum_all()?;
            Ok((outs, loss))
        })?;
        for (i, (t, w)) in outs.iter().zip(want).enumerate() {
            close(t, w, &format!("differentiated call {k} output {i}"));
        }
        let dy = tape.gradient(&loss, y)?.expect("connected");
        close(
            &dy,
            &[0.731_058_6, 0.119_202_9],
            &format!("differentiated call {k}: the gradient"),
        );
    }
    Ok(())
}

#[test]
fn a_constant_a_loop_body_returns_stays_the_constant_after_the_loop() -> Result<()> {
    let c = Tensor::vector(&[1.0f32, -2.0]);
    let g = {
        let c = c.clone();
        function(move |n: &Tensor| {
            let (_, s) = while_loop(
                |(i, _): &(Tensor, Tensor)| i.lt(n),
                |(i, _): &(Tensor, Tensor)| Ok((i.add_scalar(1.0)?, c.clone())),
                (Tensor::scalar(0.0f32), Tensor::vector(&[5.0f32, 6.0])),
                WhileOptions::default(),
            )?;
            Ok((s, c.mul_scalar(2.0)?))
        })
    };
    // traced with one turn (the body's `c` is the loop's output), then none
    for (n, s) in [(1.0f32, [1.0f32, -2.0]), (0.0, [5.0, 6.0]), (3.0, [1.0, -2.0])] {
        let (got_s, twice) = g.call(&Tensor::scalar(n))?;
        close(&got_s, &s, &format!("n = {n}: the loop's output"));
        close(&twice, &[2.0, -4.0], &format!("n = {n}: c * 2 after the loop"));
    }
    assert_eq!(g.trace_count(), 1);
    Ok(())
}
