//! Forward mode (a `ForwardAccumulator` inside a traced function) through
//! a `while_loop` or `cond` with effects: a body reading a variable, one
//! writing it, a dropout. The tangent is that of the forward run: the
//! writes run once per iteration and the masks the forward drew are the
//! ones the tangent uses (nothing runs again or draws anew).
//!
//! Before, each was an error ("the gradient would run the loop's body
//! again ... no tape watched the loop when it ran"): forward mode gets a
//! loop's tangent from its reverse rule (the double-VJP construction),
//! and the loop kept no history for an accumulator.
//!
//! References: TensorFlow 2.21, float64, eagerly (in `tf.function` its
//! `ForwardAccumulator` fails through a `tf.while_loop` reading a
//! variable, "Tried to take gradients (or similar) of a variable without
//! handle data"):
//!
//! ```python
//! v = tf.Variable(0.5, dtype=tf.float64)
//! with tf.autodiff.ForwardAccumulator(v, tf.constant(1.0, tf.float64)) as acc:
//!     _, y = tf.while_loop(lambda i, y: i < 3,
//!         lambda i, y: (i + 1, tf.sin(y * v.read_value()) + v), (tf.constant(0, tf.int64), x))
//!     s = tf.reduce_sum(y)
//! # s, acc.jvp(s) at x = [0.7, -1.3]
//! v = tf.Variable(0.5, dtype=tf.float64)
//! with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, -2.0], tf.float64)) as acc:
//!     def body(i, y):
//!         v.assign_add(1.0)
//!         return i + 1, tf.sin(y * v.read_value())
//!     _, y = tf.while_loop(lambda i, y: i < 3, body, (tf.constant(0, tf.int64), x))
//!     s = tf.reduce_sum(y)
//! # s, acc.jvp(s), v after; also with maximum_iterations=2, and i < 0
//! ```
//!
//! and, for the dropout, the tangent of `sum_t drop_t(x) w` along `w` = 1
//! is the value at `w = 1`, which holds only with the masks the value
//! used.

use std::sync::Arc;

use gradtape::nn::{Dropout, Layer};
use gradtape::{
    cond, function, while_loop, ForwardAccumulator, Function, FunctionOptions, Result, Rng, Tensor, Variable,
    WhileOptions,
};

/// TensorFlow's sum and tangent of the loop reading `v`.
const TF_READS: [&[f64]; 2] = [&[1.6609044908101307], &[4.815377479070423]];
/// The same of the loop adding 1 to `v` each step, and `v` after.
const TF_COUNTS: [&[f64]; 3] = [&[-0.30583794892016625], &[9.096002613007531], &[3.5]];
/// The same with `maximum_iterations=2`.
const TF_COUNTS_MAX2: [&[f64]; 3] = [&[0.09600207555587126], &[-2.94583791042318], &[2.5]];
/// The same over no step (`sum(x)`, `<1, t>`, `v` untouched).
const TF_COUNTS_NONE: [&[f64]; 3] = [&[-0.6000000000000001], &[-1.0], &[0.5]];

fn one() -> Tensor {
    Tensor::scalar(1i64)
}

fn three_steps(x: &Tensor, body: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    steps(x, 3, None, body)
}

/// `n` steps of `body`, at most `max`.
fn steps(x: &Tensor, n: i64, max: Option<usize>, body: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let (_, y) = while_loop(
        |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(n)),
        |(i, y): &(Tensor, Tensor)| Ok((i.add(&one())?, body(y)?)),
        (Tensor::scalar(0i64), x.clone()),
        WhileOptions {
            max_iterations: max,
            ..Default::default()
        },
    )?;
    Ok(y)
}

fn reads(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
    let acc = ForwardAccumulator::new();
    acc.watch(v, &Tensor::scalar(1.0f64))?;
    let s = acc.record(|| three_steps(x, |y| y.mul(&v.read())?.sin()?.add(&v.read()))?.sum_all())?;
    Ok(vec![s.clone(), acc.jvp(&s)?.expect("tangent")])
}

fn counts(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
    counts_in(v, x, 3, None)
}

/// [`counts`] over `n` steps, at most `max`.
fn counts_in(v: &Variable, x: &Tensor, n: i64, max: Option<usize>) -> Result<Vec<Tensor>> {
    let acc = ForwardAccumulator::new();
    acc.watch(x, &Tensor::from_vec(vec![1.0f64, -2.0], &[2])?)?;
    let s = acc.record(|| {
        steps(x, n, max, |y| {
            v.assign_add(&Tensor::scalar(1.0f64))?;
            y.mul(&v.read())?.sin()
        })?
        .sum_all()
    })?;
    Ok(vec![s.clone(), acc.jvp(&s)?.expect("tangent"), v.read()])
}

/// `run` eagerly, traced compiled and traced as is, twice each, with a
/// fresh variable at 0.5: TensorFlow's values.
pub(crate) fn check(run: fn(&Variable, &Tensor) -> Result<Vec<Tensor>>, want: &[&[f64]]) -> Result<()> {
    let plain = FunctionOptions {
        optimize: false,
        ..Default::default()
    };
    for mode in ["eager", "compiled", "traced"] {
        let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
        for call in 0..2 {
            let v = Variable::new(Tensor::scalar(0.5f64));
            let w = v.clone();
            let got = match mode {
                "eager" => run(&v, &x)?,
                "compiled" => function(move |x: &Tensor| run(&w, x)).call(&x)?,
                _ => Function::with_options(move |x: &Tensor| run(&w, x), plain.clone()).call(&x)?,
            };
            assert_eq!(got.len(), want.len());
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                let g = g.to_vec_f64();
                assert_eq!(g.len(), w.len());
                for (a, b) in g.iter().zip(w.iter()) {
                    assert!(
                        (a - b).abs() <= 1e-14 * b.abs().max(1.0),
                        "{mode} call {call} output {k}: {g:?} vs {w:?}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn a_loop_reading_a_variable_has_its_tangent_traced() -> Result<()> {
    check(reads, &TF_READS)
}

#[test]
fn a_loop_writing_a_variable_has_its_tangent_and_writes_once_per_step() -> Result<()> {
    check(counts, &TF_COUNTS)?;
    // (TensorFlow: maximum_iterations=2; and a loop that does not run)
    check(|v, x| counts_in(v, x, 3, Some(2)), &TF_COUNTS_MAX2)?;
    check(|v, x| counts_in(v, x, 0, None), &TF_COUNTS_NONE)
}

/// The tangent along `w` of `sum_t drop_t(x) w` (a loop) or `sum(drop(x) w)`
/// (a branch), with the value.
fn dropped(d: &Dropout, x: &Tensor, w: &Tensor, in_loop: bool) -> Result<Vec<Tensor>> {
    let acc = ForwardAccumulator::new();
    acc.watch(w, &Tensor::scalar(1.0f64))?;
    let s = acc.record(|| {
        let y = if in_loop {
            let (_, y) = while_loop(
                |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(5i64)),
                |(i, y): &(Tensor, Tensor)| Ok((i.add(&one())?, y.add(&d.forward(x, true)?.mul(w)?)?)),
                (Tensor::scalar(0i64), x.zeros_like()),
                WhileOptions::default(),
            )?;
            y
        } else {
            cond(&w.gt_scalar(0.0)?, || d.forward(x, true)?.mul(w), || x.mul(w))?
        };
        y.sum_all()
    })?;
    Ok(vec![s.clone(), acc.jvp(&s)?.expect("tangent")])
}

#[test]
fn a_dropout_in_a_loop_or_branch_has_the_tangent_of_the_masks_it_drew() -> Result<()> {
    let x = Tensor::from_vec((0..64).map(|i| 1.0 + i as f64).collect(), &[64])?;
    for (in_loop, steps) in [(true, 5.0), (false, 1.0)] {
        let d = Arc::new(Dropout::new(0.5, &mut Rng::new(5))?);
        let f = function(move |(x, w): &(Tensor, Tensor)| dropped(&d, x, w, in_loop));
        let mut values = Vec::new();
        for call in 0..3 {
            let r = f.call(&(x.clone(), Tensor::scalar(1.0f64)))?;
            let (y, t) = (r[0].to_scalar::<f64>()?, r[1].to_scalar::<f64>()?);
            assert!(
                y > 0.0 && y < 2.0 * steps * 2080.0 && y % 2.0 == 0.0,
                "loop {in_loop} call {call}: {y}"
            );
            assert_eq!(t, y, "loop {in_loop} call {call}: the tangent is the value at w = 1");
            values.push(y);
        }
        assert!(values[0] != values[1] || values[1] != values[2], "{values:?}");
    }
    Ok(())
}
