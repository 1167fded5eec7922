//! Higher-order derivatives through a traced `while_loop` whose trip count
//! is an input: one graph, traced at one count, must serve calls at other
//! counts (larger, smaller, none), in second order (a Hessian from nested
//! tapes), forward mode (a JVP) and forward over reverse (a Hessian-vector
//! product).
//!
//! The loop's history (one row per iteration) is an input of the backward
//! loop's body, and of the body of that loop's own gradient: every value
//! made from it must take its shape when the graph runs. Before, zeros for
//! a history no gradient reached were a constant of the traced length
//! (`ShapeMismatch` in an `add` at another count), and the vectorized
//! Jacobian's per-row loop stacked and split the histories with reshapes
//! and slices of the traced length (`BadReshape`).
//!
//! Expected values: the same closure run eagerly (to 1e-12), and the
//! derivatives of the iterated map worked out by hand below.

use gradtape::{function, while_loop, ForwardAccumulator, GradientTape, Result, Tensor, WhileOptions};

/// The map iterated: `f(y) = c sin(y) + 0.1 y^2`, elementwise.
fn step(y: &Tensor, c: &Tensor) -> Result<Tensor> {
    y.sin()?.mul(c)?.add(&y.square()?.mul_scalar(0.1)?)
}

/// `y0` through `n` steps of the map (`n` a scalar tensor: the trip count
/// is decided when the graph runs). The counter is a float loop variable,
/// so it gets a history (and zero gradients) too.
fn iterate(y0: &Tensor, n: &Tensor, c: &Tensor) -> Result<Tensor> {
    let (_, y) = while_loop(
        |(i, _): &(Tensor, Tensor)| i.lt(n),
        |(i, y): &(Tensor, Tensor)| Ok((i.add_scalar(1.0)?, step(y, c)?)),
        (Tensor::scalar(0.0f64), y0.clone()),
        WhileOptions::default(),
    )?;
    Ok(y)
}

/// `L(y0) = 0.5 (sum y_n)^2`, with `y_n` the loop's output.
fn loss(y0: &Tensor, n: &Tensor, c: &Tensor) -> Result<Tensor> {
    iterate(y0, n, c)?.sum_all()?.square()?.mul_scalar(0.5)
}

/// The gradient of [`loss`] w.r.t. `y0`, on a tape of its own.
fn grad(y0: &Tensor, n: &Tensor, c: &Tensor) -> Result<Tensor> {
    let t = GradientTape::new();
    let l = t.record(|| {
        t.watch(y0);
        loss(y0, n, c)
    })?;
    Ok(t.gradient(&l, y0)?.expect("connected"))
}

/// The Hessian of [`loss`] (the Jacobian of the gradient, nested tapes).
fn hessian(y0: &Tensor, n: &Tensor, c: &Tensor) -> Result<Tensor> {
    let o = GradientTape::new();
    let g = o.record(|| {
        o.watch(y0);
        grad(y0, n, c)
    })?;
    Ok(o.jacobian(&g, y0)?.expect("connected"))
}

/// The JVP of the loop's output along `v`.
fn jvp(y0: &Tensor, n: &Tensor, c: &Tensor, v: &Tensor) -> Result<Tensor> {
    let acc = ForwardAccumulator::watching(y0, std::slice::from_ref(v))?;
    let y = acc.record(|| iterate(y0, n, c))?;
    Ok(acc.jvp(&y)?.expect("connected"))
}

/// The Hessian of [`loss`] times `v`: forward mode over the gradient.
fn hvp(y0: &Tensor, n: &Tensor, c: &Tensor, v: &Tensor) -> Result<Tensor> {
    let acc = ForwardAccumulator::watching(y0, std::slice::from_ref(v))?;
    let g = acc.record(|| grad(y0, n, c))?;
    Ok(acc.jvp(&g)?.expect("connected"))
}

/// By hand, for `n` steps: per element, `d = dy_n/dy0` and `s =
/// d^2 y_n/dy0^2` (the map is elementwise), from `d' = f'(y) d`, `s' =
/// f''(y) d^2 + f'(y) s`, with `f' = c cos y + 0.2 y`, `f'' = 0.2 - c sin
/// y`. Then with `S = sum y_n`: the Hessian of `0.5 S^2` is `d d^T +
/// S diag(s)`, the JVP along `v` is `d v`. Returns (Hessian row-major,
/// JVP).
fn by_hand(y0: &[f64], n: usize, c: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let m = y0.len();
    let (mut y, mut d, mut s) = (y0.to_vec(), vec![1.0; m], vec![0.0; m]);
    for _ in 0..n {
        for k in 0..m {
            let (f1, f2) = (c[k] * y[k].cos() + 0.2 * y[k], 0.2 - c[k] * y[k].sin());
            s[k] = f2 * d[k] * d[k] + f1 * s[k];
            d[k] *= f1;
            y[k] = c[k] * y[k].sin() + 0.1 * y[k] * y[k];
        }
    }
    let sum: f64 = y.iter().sum();
    let mut h = vec![0.0; m * m];
    for i in 0..m {
        for j in 0..m {
            h[i * m + j] = d[i] * d[j] + if i == j { sum * s[i] } else { 0.0 };
        }
    }
    (h, d.iter().zip(v).map(|(d, v)| d * v).collect())
}

fn close(got: &Tensor, want: &[f64], tol: f64, what: &str) {
    let got = got.to_vec_f64();
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: {g} vs {w} ({got:?} vs {want:?})"
        );
    }
}

fn same(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    close(got, &want.to_vec_f64(), 1e-12, what);
}

const Y0: [f64; 3] = [1.0, 0.2, -0.7];
const C: [f64; 3] = [1.1, 0.9, 1.0];
const V: [f64; 3] = [0.5, -1.0, 2.0];

fn args() -> (Tensor, Tensor, Tensor) {
    (Tensor::vector(&Y0), Tensor::vector(&C), Tensor::vector(&V))
}

/// One traced function giving the Hessian (nested tapes), the JVP and the
/// Hessian-vector product, called at trip counts 5 (tracing), 3, 8, 0, 1:
/// each as the eager run and as worked out by hand, one trace.
#[test]
fn second_order_and_forward_mode_through_a_loop_of_any_trip_count() -> Result<()> {
    let (y0, c, v) = args();
    let all = |(y0, n, c, v): &(Tensor, Tensor, Tensor, Tensor)| -> Result<(Tensor, Tensor, Tensor)> {
        Ok((hessian(y0, n, c)?, jvp(y0, n, c, v)?, hvp(y0, n, c, v)?))
    };
    let f = function(all);
    for n in [5usize, 3, 8, 0, 1] {
        let a = (y0.clone(), Tensor::scalar(n as f64), c.clone(), v.clone());
        let (h, j, hv) = f.call(&a)?;
        let (eh, ej, ehv) = all(&a)?;
        same(&h, &eh, &format!("Hessian at n = {n}"));
        same(&j, &ej, &format!("JVP at n = {n}"));
        same(&hv, &ehv, &format!("HVP at n = {n}"));
        let (wh, wj) = by_hand(&Y0, n, &C, &V);
        assert_eq!(h.shape(), &[3, 3]);
        close(&h, &wh, 1e-11, &format!("Hessian by hand at n = {n}"));
        close(&j, &wj, 1e-11, &format!("JVP by hand at n = {n}"));
        let whv: Vec<f64> = (0..3).map(|i| (0..3).map(|k| wh[i * 3 + k] * V[k]).sum()).collect();
        close(&hv, &whv, 1e-11, &format!("HVP by hand at n = {n}"));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// Each derivative in a function of its own (the graphs differ: a
/// Hessian alone, a JVP alone), traced at no iteration (empty histories)
/// and at one, then called at other counts.
#[test]
fn loop_derivatives_traced_at_zero_or_one_iteration_serve_other_counts() -> Result<()> {
    let (y0, c, v) = args();
    for first in [0usize, 1] {
        let hess = function(|(y0, n, c): &(Tensor, Tensor, Tensor)| hessian(y0, n, c));
        let fwd = function(|(y0, n, c, v): &(Tensor, Tensor, Tensor, Tensor)| jvp(y0, n, c, v));
        for n in [first, 4, 2, 1 - first, 6] {
            let nt = Tensor::scalar(n as f64);
            let (wh, wj) = by_hand(&Y0, n, &C, &V);
            let h = hess.call(&(y0.clone(), nt.clone(), c.clone()))?;
            same(&h, &hessian(&y0, &nt, &c)?, &format!("Hessian at n = {n}"));
            close(&h, &wh, 1e-11, &format!("Hessian by hand at n = {n}"));
            let j = fwd.call(&(y0.clone(), nt.clone(), c.clone(), v.clone()))?;
            same(&j, &jvp(&y0, &nt, &c, &v)?, &format!("JVP at n = {n}"));
            close(&j, &wj, 1e-11, &format!("JVP by hand at n = {n}"));
        }
        assert_eq!((hess.trace_count(), fwd.trace_count()), (1, 1));
    }
    Ok(())
}
