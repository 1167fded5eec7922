//! A traced `while_loop` or `cond` whose body or branch has effects (a
//! variable write, a dropout drawing fresh masks), differentiated: the
//! effects run once (per iteration), in the forward run, and the gradient
//! reads what they made (gradtape's `function/control/residuals.rs` and
//! `branch_residuals.rs`), as the eager tape and TensorFlow (whose
//! `tf.while_loop` and `tf.cond` gradients read the forward op's
//! intermediates) do.
//!
//! Before, such a body or branch kept the recomputing gradient: the
//! gradient ran it again, so a variable the loop counted its steps in was
//! incremented twice per step (6 after 3 steps), a branch's update ran
//! twice, and a dropout drew other masks than the forward run used (the
//! gradient of `sum_t drop(x) w` with respect to `w` was not the value
//! over `w`). A second-order gradient reaching its residuals pulls them
//! back through the body without its effects, at the draws kept.
//!
//! References: TensorFlow 2.21 (`tf.function`, `tf.GradientTape`,
//! float64) for the counting loop and the branch that counts:
//!
//! ```python
//! v = tf.Variable(0.5, dtype=tf.float64)
//! @tf.function
//! def loop(x):
//!     with tf.GradientTape() as tape:
//!         tape.watch(x)
//!         def body(i, y):
//!             v.assign_add(1.0)
//!             return i + 1, tf.sin(y * v.read_value())
//!         _, y = tf.while_loop(lambda i, y: i < 3, body, (tf.constant(0, tf.int64), x))
//!         s = tf.reduce_sum(y)
//!     return s, tape.gradient(s, x)
//! loop(tf.constant([0.7, -1.3], tf.float64))  # and v after
//! # branch: v = 0.5; def yes(): v.assign_add(1.0); return tf.sin(x * v.read_value())
//! #   y = tf.cond(tf.reduce_sum(x) < 0, yes, lambda: tf.cos(x)); s = tf.reduce_sum(y)
//! ```
//!
//! and, for the dropout, the identity `d/dw sum_t (drop_t(x) w) =
//! sum_t drop_t(x)`, the value itself at `w = 1`, which holds only when
//! the gradient reads the masks the value used.

use std::sync::Arc;

use gradtape::nn::{Dropout, Layer};
use gradtape::{
    cond, function, while_loop, Function, FunctionOptions, GradientTape, Result, Rng, Tensor, Variable, WhileOptions,
};

/// TensorFlow's sum, its gradient, and the variable after: the loop.
const TF_COUNTING: (f64, [f64; 2], f64) = (-0.30583794892016625, [3.5624912903615424, -2.766755661322994], 3.5);
/// The same of the branch that counts.
const TF_BRANCH: (f64, [f64; 2], f64) = (-0.061536489409852346, [0.7463565718375906, -0.5552712470269306], 1.5);

fn one() -> Tensor {
    Tensor::scalar(1i64)
}

/// `sum(y_3)` for `y_{t+1} = sin(y_t v)` where the body first adds 1 to
/// `v`, with its gradient with respect to `x` and `v` after.
fn counting(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let s = tape.record(|| {
        tape.watch(x);
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
            |(i, y): &(Tensor, Tensor)| {
                v.assign_add(&Tensor::scalar(1.0f64))?;
                Ok((i.add(&one())?, y.mul(&v.read())?.sin()?))
            },
            (Tensor::scalar(0i64), x.clone()),
            WhileOptions::default(),
        )?;
        y.sum_all()
    })?;
    let g = tape.gradient(&s, x)?.expect("dx");
    Ok(vec![s, g, v.read()])
}

fn assert_close(got: &Tensor, want: &[f64], tol: f64, what: &str) {
    let got = got.to_vec_f64();
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}: {got:?} against {want:?}"
        );
    }
}

/// `sum(sin(x v))` after adding 1 to `v` where `sum(x) < 0`, else
/// `sum(cos(x))`, with its gradient with respect to `x` and `v` after.
fn branch_counting(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let s = tape.record(|| {
        tape.watch(x);
        let y = cond(
            &x.sum_all()?.lt_scalar(0.0)?,
            || {
                v.assign_add(&Tensor::scalar(1.0f64))?;
                x.mul(&v.read())?.sin()
            },
            || x.cos(),
        )?;
        y.sum_all()
    })?;
    let g = tape.gradient(&s, x)?.expect("dx");
    Ok(vec![s, g, v.read()])
}

#[test]
fn a_body_that_writes_a_variable_writes_it_once_per_iteration() -> Result<()> {
    let want = [vec![TF_COUNTING.0], TF_COUNTING.1.to_vec(), vec![TF_COUNTING.2]];
    check_counting(counting, &want)
}

#[test]
fn a_branch_that_writes_a_variable_writes_it_once() -> Result<()> {
    let want = [vec![TF_BRANCH.0], TF_BRANCH.1.to_vec(), vec![TF_BRANCH.2]];
    check_counting(branch_counting, &want)
}

/// `run` eager, traced (compiled and not), twice each with a variable at
/// 0.5: TensorFlow's values and variable after.
fn check_counting(run: fn(&Variable, &Tensor) -> Result<Vec<Tensor>>, want: &[Vec<f64>]) -> Result<()> {
    let plain = FunctionOptions {
        optimize: false,
        ..Default::default()
    };
    for mode in ["eager", "compiled", "traced"] {
        let x = Tensor::from_vec(vec![0.7f64, -1.3], &[2])?;
        for call in 0..2 {
            let v = Variable::new(Tensor::scalar(0.5f64));
            let got = match mode {
                "eager" => run(&v, &x)?,
                "compiled" => {
                    let w = v.clone();
                    function(move |x: &Tensor| run(&w, x)).call(&x)?
                }
                _ => {
                    let w = v.clone();
                    Function::with_options(move |x: &Tensor| run(&w, x), plain.clone()).call(&x)?
                }
            };
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                assert_close(g, w, 1e-14, &format!("{mode} call {call} output {k}"));
            }
        }
    }
    Ok(())
}

/// `sum_t drop_t(x) w` over 5 steps of a loop, with its gradient with
/// respect to `w` (a fresh mask at each step and each call).
fn dropped_sum(d: &Dropout, x: &Tensor, w: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(w);
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(5i64)),
            |(i, y): &(Tensor, Tensor)| Ok((i.add(&one())?, y.add(&d.forward(x, true)?.mul(w)?)?)),
            (Tensor::scalar(0i64), x.zeros_like()),
            WhileOptions::default(),
        )?;
        y.sum_all()
    })?;
    let g = tape.gradient(&y, w)?.expect("dw");
    Ok(vec![y, g])
}

#[test]
fn a_dropout_in_the_body_is_differentiated_at_the_masks_it_drew() -> Result<()> {
    let x = Tensor::from_vec((0..64).map(|i| 1.0 + i as f64).collect(), &[64])?;
    let w = Tensor::scalar(1.0f64);
    let d = Arc::new(Dropout::new(0.5, &mut Rng::new(7))?);
    let f = function(move |(x, w): &(Tensor, Tensor)| dropped_sum(&d, x, w));
    let mut values = Vec::new();
    for call in 0..3 {
        let r = f.call(&(x.clone(), w.clone()))?;
        let (y, g) = (r[0].to_scalar::<f64>()?, r[1].to_scalar::<f64>()?);
        // every element kept (x 2) or dropped: the value is an even
        // integer, at most 2 * 5 * sum(x)
        assert!(y > 0.0 && y < 2.0 * 5.0 * 2080.0 && y % 2.0 == 0.0, "call {call}: {y}");
        assert_eq!(g, y, "call {call}: the gradient is the value at w = 1");
        values.push(y);
    }
    // fresh masks at each call
    assert!(values[0] != values[1] || values[1] != values[2], "{values:?}");
    Ok(())
}

/// `sum(y_3)` for `y_{t+1} = sin(y_t w) k_t`, `k_t` a dropout of ones (0
/// or 2, a fresh mask each step), with its first and second derivatives
/// in `w`, and the masks as base-3 digits `K = 9 b_0 + 3 b_1 + b_2` (`b_t
/// = k_t / 2`) to check them against.
fn dropped_chain(d: &Dropout, x: &Tensor, w: &Tensor) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let (y, g, masks) = outer.record(|| {
        outer.watch(w);
        let tape = GradientTape::new();
        let (y, masks) = tape.record(|| {
            tape.watch(w);
            let (_, y, masks) = while_loop(
                |(i, _, _): &(Tensor, Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
                |(i, y, m): &(Tensor, Tensor, Tensor)| {
                    let keep = d.forward(&y.ones_like(), true)?;
                    let m = m.mul_scalar(3.0)?.add(&keep.mul_scalar(0.5)?)?;
                    Ok((i.add(&one())?, y.mul(w)?.sin()?.mul(&keep)?, m))
                },
                (Tensor::scalar(0i64), x.clone(), x.zeros_like()),
                WhileOptions::default(),
            )?;
            Ok((y.sum_all()?, masks))
        })?;
        Ok((y.clone(), tape.gradient(&y, w)?.expect("dw"), masks))
    })?;
    let h = outer.gradient(&g, w)?.expect("d2w");
    Ok(vec![y, g, h, masks])
}

/// The reference of [`dropped_chain`] in plain f64 at the masks it drew:
/// value, first and second derivatives in `w` carried through each step
/// (`u = y w`, `y' = sin(u) k`).
fn chain_reference(x: &[f64], w: f64, masks: &[f64]) -> [f64; 3] {
    let mut total = [0.0; 3];
    for (&x, &m) in x.iter().zip(masks) {
        let digits = [(m / 9.0).floor(), ((m / 3.0).floor()) % 3.0, m % 3.0];
        let (mut y, mut dy, mut ddy) = (x, 0.0, 0.0);
        for b in digits {
            let k = 2.0 * b;
            let (u, du, ddu) = (y * w, dy * w + y, ddy * w + 2.0 * dy);
            (y, dy, ddy) = (u.sin() * k, u.cos() * du * k, (-u.sin() * du * du + u.cos() * ddu) * k);
        }
        for (t, v) in total.iter_mut().zip([y, dy, ddy]) {
            *t += v;
        }
    }
    total
}

/// The second derivative through a body with a dropout reads the masks
/// the forward run drew (the body without its effects, over the kept
/// draws); it was an error ("the gradient would run the loop's body
/// again").
#[test]
fn a_second_order_gradient_through_a_body_with_a_dropout_uses_its_masks() -> Result<()> {
    let d = Arc::new(Dropout::new(0.5, &mut Rng::new(7))?);
    let f = function(move |(x, w): &(Tensor, Tensor)| dropped_chain(&d, x, w));
    let xs: Vec<f64> = (0..16).map(|i| 0.1 + i as f64 * 0.1).collect();
    let x = Tensor::from_vec(xs.clone(), &[16])?;
    let w = 1.3;
    let mut nonzero = 0;
    for call in 0..4 {
        let r = f.call(&(x.clone(), Tensor::scalar(w)))?;
        let masks = r[3].to_vec_f64();
        let want = chain_reference(&xs, w, &masks);
        for (k, want) in want.iter().enumerate() {
            let got = r[k].to_scalar::<f64>()?;
            assert!(
                (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                "call {call} output {k}: {got} vs {want}"
            );
        }
        nonzero += usize::from(want[2] != 0.0);
    }
    assert!(nonzero > 0, "every draw dropped everything");
    Ok(())
}

/// `sum(drop(x) w)` where `w > 0` (a fresh mask at each call), else
/// `sum(x w)`, and its gradient with respect to `w`.
fn dropped_branch(d: &Dropout, x: &Tensor, w: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(w);
        let y = cond(&w.gt_scalar(0.0)?, || d.forward(x, true)?.mul(w), || x.mul(w))?;
        y.sum_all()
    })?;
    let g = tape.gradient(&y, w)?.expect("dw");
    Ok(vec![y, g])
}

#[test]
fn a_dropout_in_a_branch_is_differentiated_at_the_mask_it_drew() -> Result<()> {
    let x = Tensor::from_vec((0..64).map(|i| 1.0 + i as f64).collect(), &[64])?;
    let d = Arc::new(Dropout::new(0.5, &mut Rng::new(7))?);
    let f = function(move |(x, w): &(Tensor, Tensor)| dropped_branch(&d, x, w));
    let mut values = Vec::new();
    for call in 0..3 {
        let r = f.call(&(x.clone(), Tensor::scalar(1.0f64)))?;
        let (y, g) = (r[0].to_scalar::<f64>()?, r[1].to_scalar::<f64>()?);
        assert!(y > 0.0 && y < 2.0 * 2080.0 && y % 2.0 == 0.0, "call {call}: {y}");
        assert_eq!(g, y, "call {call}: the gradient is the value at w = 1");
        values.push(y);
    }
    assert!(values[0] != values[1] || values[1] != values[2], "{values:?}");
    // the other branch: no dropout, d/dw sum(x w) = sum(x) = 2080
    let r = f.call(&(x.clone(), Tensor::scalar(-1.0f64)))?;
    assert_eq!((r[0].to_scalar::<f64>()?, r[1].to_scalar::<f64>()?), (-2080.0, 2080.0));
    Ok(())
}
