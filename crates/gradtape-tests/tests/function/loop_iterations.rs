//! A compiled `while_loop` runs its iterations as one caller's repeated
//! runs of the compiled body (`control/iterate.rs`): the loop variables
//! moved into each run (a buffer nothing else holds is written in place),
//! the captures borrowed, and the condition fused into the body where it
//! has no stateful node, the body writes no variable and the loop has no
//! `max_iterations` (else the condition runs on its own). These tests
//! check that the values are eager's (the Rust loop of the same ops, which
//! `tf.while_loop` unrolls to) to 1e-12 in f64 on bodies whose aliasing the
//! in-place writes could get wrong: a variable read twice, a variable or a
//! capture returned as it is, one value returned as two variables; that
//! the caller's inputs and the captures are never written; and that each
//! way of running the condition (fused, on its own under
//! `max_iterations`, reading a variable the body writes) stops where
//! eager does.

use gradtape::{function, while_loop, DType, GradientTape, Result, Tensor, Variable, WhileOptions};

use super::loop_compiled::{cell_loop, same};

/// `[rows, cols]` f64 of smooth values (more than 64 bytes: a buffer of
/// its own, which a fused kernel may write in place).
fn data(rows: usize, cols: usize, phase: f64) -> Tensor {
    let v = (0..rows * cols)
        .map(|i| ((i as f64 + phase) * 0.37).sin() * 0.5)
        .collect();
    Tensor::from_vec(v, &[rows, cols]).unwrap()
}

/// The loop of these tests: variables `(i, a, b, z)`; while `i < n`,
/// `a' = tanh(a a_w + b) * 0.5 + a` (a read twice), `b' = a' `(one value,
/// two variables), `z' = c` (a capture returned as it is); `i` and the
/// returned `c` checked after.
fn aliased(n: &Tensor, c: &Tensor, w: &Tensor, opts: WhileOptions) -> Result<Vec<Tensor>> {
    while_loop(
        |v: &Vec<Tensor>| v[0].lt(n),
        |v: &Vec<Tensor>| {
            let a = v[1].matmul(w)?.add(&v[2])?.tanh()?.mul_scalar(0.5)?.add(&v[1])?;
            Ok(vec![v[0].add_scalar(1.0)?, a.clone(), a, c.clone()])
        },
        vec![Tensor::scalar(0i64), data(4, 8, 0.0), data(4, 8, 3.0), data(4, 8, 7.0)],
        opts,
    )
}

#[test]
fn aliased_loop_variables_keep_eager_values_and_inputs_stay_unwritten() -> Result<()> {
    let (c, w) = (data(4, 8, 11.0), data(8, 8, 5.0));
    let (c0, w0) = (c.to_vec::<f64>()?, w.to_vec::<f64>()?);
    let f = function(|(n, c, w): &(Tensor, Tensor, Tensor)| aliased(n, c, w, WhileOptions::default()));
    for n in [0i64, 1, 2, 6, 1] {
        let args = (Tensor::scalar(n), c.clone(), w.clone());
        let got = f.call(&args)?;
        let want = aliased(&args.0, &c, &w, WhileOptions::default())?;
        same(&got, &want, &format!("n = {n}"));
        assert_eq!(got[0].to_scalar::<i64>()?, n);
        if n > 0 {
            // one value as two variables: the same numbers in both, and
            // the capture returned as it is
            assert_eq!(got[1].to_vec::<f64>()?, got[2].to_vec::<f64>()?);
            assert_eq!(got[3].to_vec::<f64>()?, c0);
        }
        // the captures (and so the caller's tensors) are never written
        assert_eq!((c.to_vec::<f64>()?, w.to_vec::<f64>()?), (c0.clone(), w0.clone()));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn a_loop_variable_passed_through_and_the_callers_initial_values_stay_as_given() -> Result<()> {
    // (i, h, k): h' = h * k + k, k' = k (a variable returned as it is)
    let step = |(h0, k0, n): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        while_loop(
            |v: &Vec<Tensor>| v[0].lt(n),
            |v: &Vec<Tensor>| Ok(vec![v[0].add_scalar(1.0)?, v[1].mul(&v[2])?.add(&v[2])?, v[2].clone()]),
            vec![Tensor::scalar(0i64), h0.clone(), k0.clone()],
            WhileOptions::default(),
        )
    };
    let f = function(step);
    let (h0, k0) = (data(6, 8, 1.0), data(6, 8, 2.0));
    let (hv, kv) = (h0.to_vec::<f64>()?, k0.to_vec::<f64>()?);
    for n in [3i64, 0, 5] {
        let args = (h0.clone(), k0.clone(), Tensor::scalar(n));
        let got = f.call(&args)?;
        same(&got, &step(&args)?, &format!("n = {n}"));
        assert_eq!(got[2].to_vec::<f64>()?, kv, "k returned as it is");
        // the loop's initial values are the caller's: never written
        assert_eq!((h0.to_vec::<f64>()?, k0.to_vec::<f64>()?), (hv.clone(), kv.clone()));
    }
    Ok(())
}

/// `h -> tanh(h w + x)` `n` times under a tape, the loss and its
/// gradients as to `w` (a variable: the backward loop sums its gradient,
/// an `[8, 8]` carried sum, in place) and `x`.
fn rnn_grads(w: &Variable, x: &Tensor, n: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        tape.watch(x);
        cell_loop(w, x, n)?.square()?.mean_all()
    })?;
    let gw = tape.gradient(&loss, std::slice::from_ref(w))?[0].clone();
    let gx = tape.gradient(&loss, x)?;
    let z = |g: Option<Tensor>, s: &[usize]| g.unwrap_or_else(|| Tensor::zeros(s, DType::F64));
    Ok(vec![loss, z(gw, &[8, 8]), z(gx, &[4, 8])])
}

#[test]
fn a_gradient_loops_sums_updated_in_place_give_eagers_gradients() -> Result<()> {
    let (w, x) = (Variable::new(data(8, 8, 4.0).mul_scalar(0.6)?), data(4, 8, 9.0));
    let f = {
        let w = w.clone();
        function(move |(x, n): &(Tensor, Tensor)| rnn_grads(&w, x, n))
    };
    let xv = x.to_vec::<f64>()?;
    for n in [4i64, 1, 0, 9, 4] {
        let n = Tensor::scalar(n);
        same(
            &f.call(&(x.clone(), n.clone()))?,
            &rnn_grads(&w, &x, &n)?,
            &format!("n = {n:?}"),
        );
        assert_eq!(x.to_vec::<f64>()?, xv);
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn each_way_of_running_the_condition_stops_where_eager_does() -> Result<()> {
    let (c, w) = (data(4, 8, 11.0), data(8, 8, 5.0));
    // the condition on its own: `max_iterations` stops the loop before its
    // condition does (4 of 6), or after (6 of 9)
    for (max, n) in [(4usize, 6i64), (9, 6), (0, 3)] {
        let opts = move || WhileOptions {
            max_iterations: Some(max),
            ..WhileOptions::default()
        };
        let f = function(move |(n, c, w): &(Tensor, Tensor, Tensor)| aliased(n, c, w, opts()));
        let args = (Tensor::scalar(n), c.clone(), w.clone());
        let got = f.call(&args)?;
        same(&got, &aliased(&args.0, &c, &w, opts())?, &format!("max {max}, n = {n}"));
        assert_eq!(got[0].to_scalar::<i64>()?, n.min(max as i64));
    }
    // a condition reading a variable the body writes (not hoisted: read at
    // each iteration, after the body's write)
    let count = Variable::new(Tensor::scalar(0.0f64));
    let run = {
        let count = count.clone();
        move |(x, n): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
            count.assign(&Tensor::scalar(0.0f64))?;
            while_loop(
                |_: &Vec<Tensor>| count.read().lt(n),
                |v: &Vec<Tensor>| {
                    count.assign_add(&Tensor::scalar(1.0f64))?;
                    Ok(vec![v[0].sin()?.add(&count.read())?])
                },
                vec![x.clone()],
                WhileOptions::default(),
            )
        }
    };
    let f = function(run.clone());
    let x = data(4, 8, 2.0);
    for n in [3.0f64, 0.0, 5.0] {
        let args = (x.clone(), Tensor::scalar(n));
        let got = f.call(&args)?;
        assert_eq!(count.read().to_scalar::<f64>()?, n, "iterations traced");
        let want = run(&args)?;
        assert_eq!(count.read().to_scalar::<f64>()?, n, "iterations eager");
        same(&got, &want, &format!("n = {n}"));
    }
    Ok(())
}
