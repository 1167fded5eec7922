//! A traced loop's gradient reads what its forward loop kept instead of
//! running the loop's body again (gradtape's
//! `function/control/residuals.rs`): the backward loop's body holds the
//! body's gradient ops and none of its forward ops, the forward loop runs
//! the body with the residuals as extra outputs, and the gradients are
//! the eager tape's (to 1e-12: the compiled bodies' fused kernels may
//! round differently). Before, the backward loop ran the whole body again
//! at each iteration (a traced neural ODE's step was 1.10× its eager
//! step). Two loops: a recurrent cell `tanh(h W + b)` over variables, and
//! an iterated map `y + 0.1 sin(c y)` of a captured tensor, whose
//! gradient's `cos(c y)` moves to the forward loop; the map also to
//! second order (a gradient of the gradient pulls cotangents back into
//! the residuals).

use gradtape::{function, while_loop, GradientTape, Graph, Result, Tensor, Variable, WhileOptions};

/// The printed bodies of a traced step's first loop and its gradient: the
/// forward loop's body with the residuals (empty where there is none), and
/// the backward loop's body (the next plain body).
fn bodies(g: &Graph) -> (String, String) {
    let subs = g.subgraphs();
    let at = subs.iter().position(|(l, _)| l == "body with residuals");
    let fwd = at.map_or_else(String::new, |k| subs[k].1.to_string());
    let bwd = at
        .and_then(|k| subs[k..].iter().find(|(l, _)| l == "body"))
        .map_or_else(String::new, |(_, g)| g.to_string());
    (fwd, bwd)
}

/// Fails unless `got` and `want` agree to 1e-12 relative to `want`'s scale.
fn close(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_vec_f64(), w.to_vec_f64());
        let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let off = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(
            g.len() == w.len() && off <= 1e-12 * scale,
            "{what} {k}: {g:?} against {w:?}"
        );
    }
}

/// Asserts that `op` runs in the forward loop's body and not in the
/// backward loop's, which runs `grad_op`.
fn forward_only(g: &Graph, op: &str, grad_op: &str) {
    let (fwd, bwd) = bodies(g);
    let has = |s: &str, op: &str| s.contains(&format!(" = {op}("));
    assert!(has(&fwd, op), "the forward body lacks {op}:\n{g}");
    assert!(!has(&bwd, op) && has(&bwd, grad_op) && has(&bwd, "RowAt"), "{g}");
}

fn count_to(n: i64) -> impl Fn(&(Tensor, Tensor)) -> Result<Tensor> {
    move |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(n))
}

/// `sum(h_5^2)` for `h_{t+1} = tanh(h_t W + b)`, and its gradients with
/// respect to `W` and `b`.
fn rnn_grads(h0: &Tensor, w: &Variable, b: &Variable) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        let (_, h) = while_loop(
            count_to(5),
            |(i, h): &(Tensor, Tensor)| {
                let next = h.matmul(&w.read())?.add(&b.read())?.tanh()?;
                Ok((i.add(&Tensor::scalar(1i64))?, next))
            },
            (Tensor::scalar(0i64), h0.clone()),
            WhileOptions::default(),
        )?;
        h.square()?.sum_all()
    })?;
    let g = tape.gradient(&loss, &[w.clone(), b.clone()])?;
    Ok(g.into_iter().map(|g| g.expect("a gradient")).chain([loss]).collect())
}

#[test]
fn a_recurrent_loops_gradient_reads_the_kept_activations() -> Result<()> {
    let fill = |shape: &[usize], k: f64| {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|i| 0.4 * (0.7 * i as f64 + k).sin()).collect(), shape)
    };
    let h0 = fill(&[3, 4], 0.3)?;
    let (w, b) = (Variable::new(fill(&[4, 4], 1.1)?), Variable::new(fill(&[4], 2.3)?));
    let f = {
        let (w, b) = (w.clone(), b.clone());
        function(move |h0: &Tensor| rnn_grads(h0, &w, &b))
    };
    close(&f.call(&h0)?, &rnn_grads(&h0, &w, &b)?, "rnn");
    forward_only(f.concrete(&h0)?.graph(), "Tanh", "TanhGrad");
    Ok(())
}

/// `sum(y_6)` for `y_{t+1} = y_t + 0.1 sin(c y_t)`, its gradient with
/// respect to `c`, and that gradient's sum's gradient (second order).
fn map_grads(y0: &Tensor, c: &Tensor) -> Result<Vec<Tensor>> {
    let outer = GradientTape::new();
    let (loss, g, s) = outer.record(|| {
        outer.watch(c);
        let inner = GradientTape::new();
        let loss = inner.record(|| {
            inner.watch(c);
            let (_, y) = while_loop(
                count_to(6),
                |(i, y): &(Tensor, Tensor)| {
                    let next = y.add(&c.mul(y)?.sin()?.mul_scalar(0.1)?)?;
                    Ok((i.add(&Tensor::scalar(1i64))?, next))
                },
                (Tensor::scalar(0i64), y0.clone()),
                WhileOptions::default(),
            )?;
            y.sum_all()
        })?;
        let g = inner.gradient(&loss, c)?.expect("a gradient");
        let s = g.sum_all()?;
        Ok((loss, g, s))
    })?;
    let gg = outer.gradient(&s, c)?.expect("a second-order gradient");
    Ok(vec![loss, g, gg])
}

#[test]
fn an_iterated_maps_gradient_moves_its_cos_to_the_forward_loop() -> Result<()> {
    let y0 = Tensor::from_vec(vec![0.5, -1.2, 2.0, 0.1], &[4])?;
    let c = Tensor::from_vec(vec![1.5, 0.7, -0.4, 2.2], &[4])?;
    let f = function(|(y0, c): &(Tensor, Tensor)| map_grads(y0, c));
    let args = (y0.clone(), c.clone());
    close(&f.call(&args)?, &map_grads(&y0, &c)?, "map");
    forward_only(f.concrete(&args)?.graph(), "Cos", "Mul");
    Ok(())
}
