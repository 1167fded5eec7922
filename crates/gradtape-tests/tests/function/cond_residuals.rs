//! A traced `cond` a tape watches keeps the values its taken branch made,
//! and its gradient reads them: the gradient's branches run no forward op
//! of the branch again. Before, only a branch with effects was split at
//! its residuals; any other was run again under a tape in the gradient (a
//! traced step whose `cond` took `tanh(z)` computed the `tanh`, and the
//! product making `z`, a second time). The branch not taken gives a zero
//! broadcast to each of the other's residuals.
//!
//! Checked against the eager step (a plain `if`; eager's gradients are
//! themselves checked against finite differences in `gradcheck`) to 1e-12
//! in f64, on both branches: the first-order gradients as to an input and
//! a variable, the second order (the gradient of the squared gradient),
//! forward mode (a `ForwardAccumulator`'s tangent), and a `cond` inside a
//! `while_loop` (the residuals, zeros of the branch not taken among them,
//! kept per iteration in the loop's histories).

use gradtape::{cond, function, while_loop, ForwardAccumulator, GradientTape, Result, Tensor, Variable, WhileOptions};

use super::loop_compiled::same;

/// `relu(x w)²` where `pred`, else `tanh(x w) sin(x w)`: each branch
/// computes its product itself.
fn branchy(x: &Tensor, w: &Tensor, pred: &Tensor) -> Result<Tensor> {
    cond(
        pred,
        || x.matmul(w)?.relu()?.square(),
        || {
            let z = x.matmul(w)?;
            z.tanh()?.mul(&z.sin()?)
        },
    )
}

/// `sum(y c)` with fixed weights `c`.
fn weighed(y: &Tensor) -> Result<Tensor> {
    let n = y.shape().iter().product::<usize>();
    let c = Tensor::from_vec((0..n).map(|i| (i as f64 * 0.7 + 0.3).cos()).collect(), y.shape())?;
    y.mul(&c)?.sum_all()
}

fn x0() -> Result<Tensor> {
    Tensor::from_vec((0..15).map(|i| (i as f64 * 0.61).cos() * 0.8).collect(), &[3, 5])
}

fn w0() -> Result<Tensor> {
    Tensor::from_vec((0..20).map(|i| (i as f64 * 0.37).sin() * 0.6).collect(), &[5, 4])
}

/// The loss, its gradients as to `x` and `w`.
fn first(x: &Tensor, w: &Variable, pred: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        tape.watch(x);
        weighed(&branchy(x, &w.read(), pred)?)
    })?;
    let dx = tape.gradient(&loss, x)?.expect("d x");
    let dw = tape.gradient(&loss, std::slice::from_ref(w))?[0].clone().expect("d w");
    Ok(vec![loss, dx, dw])
}

/// The gradient as to `w` of `sum(dw²)`, `dw` the gradient of the loss.
fn second(x: &Tensor, w: &Variable, pred: &Tensor) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let s = outer.record(|| {
        let inner = GradientTape::new();
        let loss = inner.record(|| weighed(&branchy(x, &w.read(), pred)?))?;
        let dw = inner.gradient(&loss, std::slice::from_ref(w))?[0].clone().expect("d w");
        dw.square()?.sum_all()
    })?;
    let d2 = outer.gradient(&s, std::slice::from_ref(w))?[0].clone().expect("d2 w");
    Ok(vec![s, d2])
}

/// The loss and its tangent along `t` at `x`.
fn forward(x: &Tensor, w: &Variable, pred: &Tensor) -> Result<Vec<Tensor>> {
    let acc = ForwardAccumulator::new();
    let t = Tensor::from_vec((0..15).map(|i| (i as f64 * 0.23).sin()).collect(), &[3, 5])?;
    acc.watch(x, &t)?;
    let loss = acc.record(|| weighed(&branchy(x, &w.read(), pred)?))?;
    Ok(vec![loss.clone(), acc.jvp(&loss)?.expect("tangent")])
}

/// Three steps of `h ← branchy(h, w, i even)` (`w` square), the loss and
/// its gradients as to `x` and `w`.
fn looped(x: &Tensor, w: &Variable) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        tape.watch(x);
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt_scalar(3.0),
            |v: &Vec<Tensor>| {
                let even = v[0].floor_mod(&Tensor::scalar(2i64))?.eq(&Tensor::scalar(0i64))?;
                let h = branchy(&v[1], &w.read(), &even)?.mul_scalar(0.5)?;
                Ok(vec![v[0].add_scalar(1.0)?, h])
            },
            vec![Tensor::scalar(0i64), x.clone()],
            WhileOptions::default(),
        )?;
        weighed(&out[1])
    })?;
    let dx = tape.gradient(&loss, x)?.expect("d x");
    let dw = tape.gradient(&loss, std::slice::from_ref(w))?[0].clone().expect("d w");
    Ok(vec![loss, dx, dw])
}

#[test]
fn a_watched_cond_keeps_its_branch_values_and_its_gradient_runs_no_forward_op_again() -> Result<()> {
    let (x, w) = (x0()?, Variable::new(w0()?));
    let f = {
        let w = w.clone();
        function(move |(x, pred): &(Tensor, Tensor)| first(x, &w, pred))
    };
    let c = f.concrete(&(x.clone(), Tensor::scalar(true)))?;
    // the gradient's branches (those holding the branches' VJPs) compute
    // no forward op: without the residuals each ran its branch again
    let mut backward = 0;
    for (label, s) in c.optimized_graph().subgraphs() {
        if s.count("TanhGrad") + s.count("ReluGrad") == 0 {
            continue;
        }
        backward += 1;
        for op in ["Tanh", "Sin", "Relu", "Square"] {
            assert_eq!(
                s.count(op),
                0,
                "the gradient's {label} branch computes {op} again:\n{s}"
            );
        }
    }
    // (two gradient calls, as to `x` and to `w`: two gradient `cond`s of
    // two branches each)
    assert_eq!(backward, 4, "{}", c.optimized_graph());
    for p in [true, false] {
        let pred = Tensor::scalar(p);
        let got = f.call(&(x.clone(), pred.clone()))?;
        same(&got, &first(&x, &w, &pred)?, &format!("first order, pred = {p}"));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn second_order_and_forward_mode_through_a_cond_with_residuals_are_the_eager_ones() -> Result<()> {
    let (x, w) = (x0()?, Variable::new(w0()?));
    let f2 = {
        let w = w.clone();
        function(move |(x, pred): &(Tensor, Tensor)| second(x, &w, pred))
    };
    let fj = {
        let w = w.clone();
        function(move |(x, pred): &(Tensor, Tensor)| forward(x, &w, pred))
    };
    for p in [true, false] {
        let pred = Tensor::scalar(p);
        let args = (x.clone(), pred.clone());
        same(
            &f2.call(&args)?,
            &second(&x, &w, &pred)?,
            &format!("second order, pred = {p}"),
        );
        same(
            &fj.call(&args)?,
            &forward(&x, &w, &pred)?,
            &format!("forward mode, pred = {p}"),
        );
    }
    Ok(())
}

#[test]
fn a_cond_with_residuals_inside_a_loop_is_the_eager_one() -> Result<()> {
    // (a square `w`: the loop carries `h` through both branches)
    let w = Variable::new(Tensor::from_vec(
        (0..25).map(|i| (i as f64 * 0.37).sin() * 0.6).collect(),
        &[5, 5],
    )?);
    let x = x0()?;
    let f = {
        let w = w.clone();
        function(move |x: &Tensor| looped(x, &w))
    };
    let got = f.call(&x)?;
    same(&got, &looped(&x, &w)?, "a cond in a loop");
    // and once more on other values, through the same trace
    let x2 = x.mul_scalar(-1.3)?;
    same(&f.call(&x2)?, &looped(&x2, &w)?, "a cond in a loop, other values");
    assert_eq!(f.trace_count(), 1);
    Ok(())
}
