//! A differentiated traced `while_loop` whose body runs another loop with
//! effects (a dropout, a variable write): the inner loop keeps its random
//! draws and the values its writes made as residuals, and the outer loop
//! keeps the inner loop's per iteration, as for one level
//! (`control_effects.rs`), so the gradient uses the masks the forward run
//! drew and the writes run once.
//!
//! Before, the inner loop, made where no tape of the user's watched it,
//! kept no history, and the outer loop's gradient was an error ("the
//! gradient would run the loop's body again ... draws fresh random
//! numbers").
//!
//! Reference: TensorFlow 2.21 (`tf.function` and eagerly, the same
//! digits), float64:
//!
//! ```python
//! v = tf.Variable(0.5, dtype=tf.float64)
//! def nested(x):
//!     with tf.GradientTape() as tape:
//!         tape.watch(x)
//!         def inner(y):
//!             def body(j, y):
//!                 v.assign_add(0.25)
//!                 return j + 1, tf.sin(y * v.read_value())
//!             return tf.while_loop(lambda j, y: j < 2, body, (tf.constant(0, tf.int64), y))[1]
//!         _, y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, inner(y) + 0.5 * y),
//!                              (tf.constant(0, tf.int64), x))
//!         s = tf.reduce_sum(y)
//!     return s, tape.gradient(s, x), v.read_value()
//! nested(tf.constant([0.7, -1.3], tf.float64))
//! # also with the inner loop's maximum_iterations=1, and no outer step
//! ```
//!
//! and, for the dropout, `d/dw sum_t sum_u drop_tu(x) w = sum_t sum_u
//! drop_tu(x)`, the value itself at `w = 1`, which holds only when the
//! gradient reads the masks the value used.

use std::sync::Arc;

use gradtape::nn::{Dropout, Layer};
use gradtape::{function, while_loop, GradientTape, Result, Rng, Tensor, Variable, WhileOptions};

/// TensorFlow's `nested`: the sum, its gradient, the variable after.
const TF_NESTED: [&[f64]; 3] = [
    &[0.4557793564617576],
    &[-0.08318491302959438, -1.0044376218143858],
    &[2.0],
];
/// The same with the inner loop's `maximum_iterations=1`.
const TF_NESTED_INNER_MAX1: [&[f64]; 3] = [
    &[-0.11010901181410837],
    &[0.829901846071973, -0.11088570870792538],
    &[1.25],
];
/// The same with no outer step.
const TF_NESTED_NONE: [&[f64]; 3] = [&[-0.6000000000000001], &[1.0, 1.0], &[0.5]];

fn one() -> Tensor {
    Tensor::scalar(1i64)
}

/// `steps` iterations of `body` on `(count, y)`.
fn count_loop(steps: i64, y: Tensor, body: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    count_loop_max(steps, None, y, body)
}

/// [`count_loop`], at most `max` iterations.
fn count_loop_max(
    steps: i64,
    max: Option<usize>,
    y: Tensor,
    body: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (_, y) = while_loop(
        |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(steps)),
        |(i, y): &(Tensor, Tensor)| Ok((i.add(&one())?, body(y)?)),
        (Tensor::scalar(0i64), y),
        WhileOptions {
            max_iterations: max,
            ..Default::default()
        },
    )?;
    Ok(y)
}

fn nested(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
    nested_in(v, x, 3, None)
}

/// [`nested`] with `outer` outer steps, the inner loop at most `inner_max`.
fn nested_in(v: &Variable, x: &Tensor, outer: i64, inner_max: Option<usize>) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let s = tape.record(|| {
        tape.watch(x);
        let y = count_loop(outer, x.clone(), |y| {
            let inner = count_loop_max(2, inner_max, y.clone(), |y| {
                v.assign_add(&Tensor::scalar(0.25f64))?;
                y.mul(&v.read())?.sin()
            })?;
            inner.add(&y.mul_scalar(0.5)?)
        })?;
        y.sum_all()
    })?;
    let g = tape.gradient(&s, x)?.expect("dx");
    Ok(vec![s, g, v.read()])
}

#[test]
fn an_inner_loop_writing_a_variable_writes_once_per_iteration_under_a_gradient() -> Result<()> {
    check_nested(nested, &TF_NESTED)?;
    // (TensorFlow: the inner loop with maximum_iterations=1; no outer step)
    check_nested(|v, x| nested_in(v, x, 3, Some(1)), &TF_NESTED_INNER_MAX1)?;
    check_nested(|v, x| nested_in(v, x, 0, None), &TF_NESTED_NONE)
}

/// `run` eagerly, traced compiled and traced as is, twice each with a
/// fresh variable at 0.5: TensorFlow's values (`want`, one per output).
fn check_nested(run: fn(&Variable, &Tensor) -> Result<Vec<Tensor>>, want: &[&[f64]; 3]) -> Result<()> {
    crate::control_forward_effects::check(run, want)
}

/// `sum_t sum_u drop_tu(x) w` over 3 outer and 4 inner steps, with its
/// gradient with respect to `w`.
fn nested_dropout(d: &Dropout, x: &Tensor, w: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(w);
        let y = count_loop(3, x.zeros_like(), |y| {
            y.add(&count_loop(4, x.zeros_like(), |acc| {
                acc.add(&d.forward(x, true)?.mul(w)?)
            })?)
        })?;
        y.sum_all()
    })?;
    let g = tape.gradient(&y, w)?.expect("dw");
    Ok(vec![y, g])
}

#[test]
fn a_dropout_in_an_inner_loop_is_differentiated_at_the_masks_it_drew() -> Result<()> {
    let x = Tensor::from_vec((0..64).map(|i| 1.0 + i as f64).collect(), &[64])?;
    let d = Arc::new(Dropout::new(0.5, &mut Rng::new(11))?);
    let f = function(move |(x, w): &(Tensor, Tensor)| nested_dropout(&d, x, w));
    let mut values = Vec::new();
    for call in 0..3 {
        let r = f.call(&(x.clone(), Tensor::scalar(1.0f64)))?;
        let (y, g) = (r[0].to_scalar::<f64>()?, r[1].to_scalar::<f64>()?);
        // each element kept (x 2) or dropped at each of 12 steps
        assert!(y > 0.0 && y < 2.0 * 12.0 * 2080.0 && y % 2.0 == 0.0, "call {call}: {y}");
        assert_eq!(g, y, "call {call}: the gradient is the value at w = 1");
        values.push(y);
    }
    assert!(values[0] != values[1] || values[1] != values[2], "{values:?}");
    Ok(())
}

/// A second-order gradient through the inner loop's draws would need the
/// outer body without its effects, which sit inside the inner loop: still
/// an error naming the loop and saying why (not other masks).
#[test]
fn a_second_order_gradient_through_an_inner_loop_with_a_dropout_is_an_error() -> Result<()> {
    let d = Arc::new(Dropout::new(0.5, &mut Rng::new(11))?);
    let f = function(move |(x, w): &(Tensor, Tensor)| {
        let outer = GradientTape::new();
        let g = outer.record(|| {
            outer.watch(w);
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(w);
                count_loop(2, x.clone(), |y| {
                    count_loop(2, y.clone(), |z| d.forward(&z.mul(w)?.sin()?, true))
                })?
                .sum_all()
            })?;
            Ok(tape.gradient(&y, w)?.expect("dw"))
        })?;
        Ok(outer.gradient(&g, w)?.expect("d2w"))
    });
    let x = Tensor::from_vec((0..8).map(|i| 0.1 + i as f64 * 0.1).collect(), &[8])?;
    let msg = f
        .call(&(x, Tensor::scalar(1.0f64)))
        .expect_err("second order")
        .to_string();
    assert!(msg.contains("while_loop") && msg.contains("random"), "{msg}");
    Ok(())
}
