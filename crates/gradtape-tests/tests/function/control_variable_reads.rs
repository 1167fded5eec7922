//! A traced `cond` or `while_loop` that reads a variable, differentiated
//! after the variable was assigned: the gradient is taken at the value the
//! forward run read, as the eager tape (which keeps the values read) and
//! TensorFlow (whose `tf.cond` / `tf.while_loop` gradients read the forward
//! op's intermediates) give it.
//!
//! Before, the control op's gradient ran its sub-graphs again (the branch
//! under a tape; the loop's backward body repeated the variable read),
//! and the read there saw the variable's new value: a traced step that
//! updated a variable between the forward pass and a gradient (a
//! persistent tape asked again after an update) got its gradients at the
//! new value. Now the reads of a control op whose sub-graphs write nothing
//! are made once, in front of it, and taken as captures
//! (`function/control/hoist.rs`).
//!
//! Reference: TensorFlow 2.21, `tf.function` with `tf.while_loop` /
//! `tf.cond` under `tf.GradientTape`, the variable assigned 5.0 before
//! `tape.gradient` (float64; the script is in this file's comments), and
//! gradtape's eager run of the same closure.
//!
//! ```python
//! v = tf.Variable(0.9, dtype=tf.float64)
//! @tf.function
//! def loop(x):
//!     with tf.GradientTape() as tape:
//!         tape.watch(x)
//!         _, y = tf.while_loop(lambda i, y: i < 3,
//!             lambda i, y: (i + 1, tf.sin(y * v.read_value())), (tf.constant(0, tf.int64), x))
//!         s = tf.reduce_sum(y)
//!     v.assign(5.0)
//!     return s, tape.gradient(s, x)
//! # cond: tf.cond(tf.reduce_sum(x) > 0, lambda: tf.sin(x * v), lambda: tf.cos(x * v))
//! # loop_v: as loop, the gradient with respect to v (watched as read)
//! loop(tf.constant([0.7, -1.3], tf.float64))
//! ```

use gradtape::{cond, function, Function, FunctionOptions, GradientTape, Result, Tensor, Variable, WhileOptions};

/// TensorFlow's `loop`: the sum and its gradient with respect to `x`.
const TF_LOOP: (f64, [f64; 2]) = (-0.1761416689588461, [0.4564335543494994, 0.15146365343721238]);
/// TensorFlow's `cond`.
const TF_COND: (f64, [f64; 2]) = (1.198179192620382, [-0.5302302821480426, 0.8286755379625221]);
/// TensorFlow's `loop_v`: the gradient with respect to `v`.
const TF_LOOP_V: f64 = -0.020719963894787086;

fn x() -> Tensor {
    Tensor::from_vec(vec![0.7f64, -1.3], &[2]).expect("x")
}

/// `sum(y_3)` for `y_{t+1} = sin(y_t v)`, `v` assigned 5 before the
/// gradients with respect to `x` and `v`.
fn loop_then_assign(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let s = tape.record(|| {
        tape.watch(x);
        let (_, y) = gradtape::while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
            |(i, y): &(Tensor, Tensor)| Ok((i.add(&Tensor::scalar(1i64))?, y.mul(&v.read())?.sin()?)),
            (Tensor::scalar(0i64), x.clone()),
            WhileOptions::default(),
        )?;
        y.sum_all()
    })?;
    v.assign(&Tensor::scalar(5.0f64))?;
    let dx = tape.gradient(&s, x)?.expect("dx");
    let dv = tape.gradient(&s, v)?.expect("dv");
    Ok(vec![s, dx, dv])
}

/// `sum(sin(x v))` if `sum(x) > 0` else `sum(cos(x v))`, `v` assigned 5
/// before the gradient with respect to `x`.
fn cond_then_assign(v: &Variable, x: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let s = tape.record(|| {
        tape.watch(x);
        let y = cond(
            &x.sum_all()?.gt_scalar(0.0)?,
            || x.mul(&v.read())?.sin(),
            || x.mul(&v.read())?.cos(),
        )?;
        y.sum_all()
    })?;
    v.assign(&Tensor::scalar(5.0f64))?;
    let g = tape.gradient(&s, x)?.expect("dx");
    Ok(vec![s, g])
}

fn assert_close(got: &Tensor, want: &[f64], what: &str) {
    let got = got.to_vec_f64();
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-14 * w.abs().max(1.0),
            "{what}: {got:?} against {want:?}"
        );
    }
}

/// Traced (compiled and as traced) and eager, each with a variable of its
/// own at 0.9: the values TensorFlow gives, and the variable at 5 after.
fn check(run: fn(&Variable, &Tensor) -> Result<Vec<Tensor>>, want: &[Vec<f64>], what: &str) -> Result<()> {
    let plain = FunctionOptions {
        optimize: false,
        ..Default::default()
    };
    for mode in ["eager", "compiled", "traced"] {
        let v = Variable::new(Tensor::scalar(0.9f64));
        let got = match mode {
            "eager" => run(&v, &x())?,
            "compiled" => {
                let w = v.clone();
                function(move |x: &Tensor| run(&w, x)).call(&x())?
            }
            _ => {
                let w = v.clone();
                Function::with_options(move |x: &Tensor| run(&w, x), plain.clone()).call(&x())?
            }
        };
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            assert_close(g, w, &format!("{what} {mode} output {k}"));
        }
        assert_eq!(v.read().to_scalar::<f64>()?, 5.0, "{what} {mode}");
    }
    Ok(())
}

#[test]
fn a_loops_gradient_reads_the_variable_as_the_forward_loop_did() -> Result<()> {
    let want = vec![vec![TF_LOOP.0], TF_LOOP.1.to_vec(), vec![TF_LOOP_V]];
    check(loop_then_assign, &want, "while_loop")
}

#[test]
fn a_conds_gradient_reads_the_variable_as_the_forward_branch_did() -> Result<()> {
    let want = vec![vec![TF_COND.0], TF_COND.1.to_vec()];
    check(cond_then_assign, &want, "cond")
}

/// The reads leave the loop's body and branches (one read in front of the
/// op, a capture inside), where nothing inside writes; a body that writes
/// the variable keeps its read (it must see the write).
#[test]
fn reads_move_in_front_of_control_flow_that_writes_nothing() -> Result<()> {
    let v = Variable::new(Tensor::scalar(0.9f64));
    let w = v.clone();
    let f = function(move |x: &Tensor| loop_then_assign(&w, x));
    let g = f.concrete(&x())?.graph().clone();
    let subs = g.subgraphs();
    let (_, body) = subs.iter().find(|(l, _)| l == "body").expect("a loop body");
    assert_eq!(body.count("ReadVariable"), 0, "{g}");
    assert!(g.count("ReadVariable") >= 1, "{g}");

    let w = v.clone();
    let writes = function(move |x: &Tensor| {
        let (_, y) = gradtape::while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i64)),
            |(i, y): &(Tensor, Tensor)| {
                w.assign_add(&Tensor::scalar(1.0f64))?;
                Ok((i.add(&Tensor::scalar(1i64))?, y.mul(&w.read())?))
            },
            (Tensor::scalar(0i64), x.clone()),
            WhileOptions::default(),
        )?;
        Ok(y)
    });
    let g = writes.concrete(&x())?.graph().clone();
    let subs = g.subgraphs();
    let (_, body) = subs.iter().find(|(l, _)| l == "body").expect("a loop body");
    assert_eq!(body.count("ReadVariable"), 1, "{g}");
    // 0.9 -> 1.9, 2.9, 3.9: y = x * 1.9 * 2.9 * 3.9
    v.assign(&Tensor::scalar(0.9f64))?;
    let y = writes.call(&x())?;
    assert_close(&y, &[0.7 * 1.9 * 2.9 * 3.9, -1.3 * 1.9 * 2.9 * 3.9], "writes");
    Ok(())
}
