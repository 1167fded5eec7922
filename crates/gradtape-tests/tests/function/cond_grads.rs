//! A traced `cond`'s gradient computes only the gradients a tape asks
//! for. Its rule returned a gradient for every differentiable capture of
//! its branches, so a branch reading a data tensor no tape watched (rows
//! of `xs` gathered) scattered the gradient of the whole `xs` into zeros
//! in the backward branches for nothing (the loop's rule had the same
//! fault: `loop_compiled`). Checked on both gradient paths: branches
//! without effects (the gradient runs the taken branch again under a
//! tape) and a branch that writes a variable (the gradient is the backward
//! half split at the residuals). Values and gradients are the eager ones
//! (a plain `if`) to 1e-12 in f64, with `xs` watched and not.

use gradtape::{cond, function, DType, GradientTape, Result, Tensor, Variable};

use super::loop_compiled::{count_nested, same};

/// A loss through a `cond` on `pred` whose branches read rows `idx` of
/// `xs` and the weight `w` (the false branch also counts its runs in
/// `calls` where given: an effect); the loss, the gradient as to `w`, and
/// as to `xs` where `watch_xs`.
fn step(
    w: &Variable,
    xs: &Tensor,
    idx: &Tensor,
    pred: &Tensor,
    calls: Option<&Variable>,
    watch_xs: bool,
) -> Result<Vec<Tensor>> {
    let tape = GradientTape::persistent();
    let loss = tape.record(|| {
        if watch_xs {
            tape.watch(xs);
        }
        let y = cond(
            pred,
            || xs.gather(idx, 0)?.matmul(&w.read()),
            || {
                if let Some(c) = calls {
                    c.assign_add(&Tensor::scalar(1.0f64))?;
                }
                xs.gather(idx, 0)?.tanh()?.matmul(&w.read())?.mul_scalar(0.5)
            },
        )?;
        y.square()?.mean_all()
    })?;
    let gw = tape.gradient(&loss, std::slice::from_ref(w))?;
    let mut out = vec![
        loss.clone(),
        gw[0].clone().unwrap_or_else(|| Tensor::zeros(&[4, 4], DType::F64)),
    ];
    if watch_xs {
        out.push(tape.gradient(&loss, xs)?.expect("d xs"));
    }
    Ok(out)
}

#[test]
fn a_cond_gradient_computes_no_gradient_of_a_capture_nothing_asks_for() -> Result<()> {
    let w = Variable::new(Tensor::from_vec(
        (0..16).map(|i| (i as f64 * 0.37).sin() * 0.4).collect(),
        &[4, 4],
    )?);
    let xs = Tensor::from_vec((0..40).map(|i| (i as f64 * 0.29).sin()).collect(), &[10, 4])?;
    let idx = Tensor::vector(&[1i64, 4, 7]);
    for effects in [false, true] {
        for watch_xs in [false, true] {
            let calls = Variable::new(Tensor::scalar(0.0f64));
            let f = {
                let (w, c) = (w.clone(), calls.clone());
                function(move |(xs, idx, pred): &(Tensor, Tensor, Tensor)| {
                    step(&w, xs, idx, pred, effects.then_some(&c), watch_xs)
                })
            };
            let what = format!("effects = {effects}, watch_xs = {watch_xs}");
            let c = f.concrete(&(xs.clone(), idx.clone(), Tensor::scalar(true)))?;
            let scatters = count_nested(c.optimized_graph(), "ScatterAdd");
            assert_eq!(scatters > 0, watch_xs, "{what}: {scatters} scatters");
            for p in [true, false] {
                let pred = Tensor::scalar(p);
                let got = f.call(&(xs.clone(), idx.clone(), pred.clone()))?;
                let eager_calls = Variable::new(Tensor::scalar(0.0f64));
                let want = step(&w, &xs, &idx, &pred, effects.then_some(&eager_calls), watch_xs)?;
                same(&got, &want, &format!("{what}, pred = {p}"));
            }
            // the branch with effects ran once per call, as eagerly
            let n = calls.read().to_scalar::<f64>()?;
            assert_eq!(n, if effects { 1.0 } else { 0.0 }, "{what}: branch runs");
        }
    }
    Ok(())
}
