//! Tapes used *inside* traced functions, traced against eager: persistent
//! tapes asked for several gradients, nested tapes (a gradient recorded on
//! an outer tape, differentiated again), `stop_recording` on the inner
//! tape while the outer records, watched inputs next to a variable the
//! tapes watch as it is read, and `jacobian` inside the function.
//!
//! Seeded random smooth programs (elementwise chains, products with a
//! variable, row and column sums broadcast back, `cond` and `while_loop`
//! reading the variable, so second derivatives go through both) are the
//! bodies; each
//! function is called on three inputs (the first trace, the cached graph,
//! the first inputs again, whose results must repeat the first call's
//! bits) and must give eager's values, first and second derivatives
//! within rounding (a compiled graph may add in another order).
//!
//! Expected values: the closure run eagerly (the tape's rules are checked
//! against finite differences and TensorFlow elsewhere). TensorFlow's
//! semantics are the same inside a `tf.function`: `tape.gradient` of a
//! persistent tape may be called many times, a gradient taken while an
//! outer tape records is recorded on it, and ops under
//! `inner.stop_recording()` are still recorded on the outer tape.

use std::sync::Arc;

use gradtape::{cond, function, while_loop, DType, GradientTape, Result, Tensor, Variable, WhileOptions};

use super::aliasing::{bits, Gen};

#[derive(Clone, Copy, Debug)]
enum Step {
    Unary(usize, usize),
    Binary(usize, usize, usize),
    /// `pool[a] @ w`, `w` the `[c, c]` variable
    Product(usize),
    /// `pool[a] + 0.25 * sum(pool[b], axis)` broadcast back
    Reduce(bool, usize, usize),
    /// `cond(sum(pool[a]) > 0, tanh(pool[a]) * pool[b], sin(pool[b]))`
    Cond(usize, usize),
    /// two turns of `s -> tanh(s) * pool[b] + s @ w / 4` from `s = pool[a]`
    Loop(usize, usize),
}

#[derive(Clone, Debug)]
struct Prog {
    rows: usize,
    cols: usize,
    dtype: DType,
    steps: Vec<Step>,
    /// a step whose value the inner tape does not record
    /// (`stop_recording`), when `Some`
    stopped: Option<usize>,
    /// whether the inner tape is persistent (asked for a second gradient)
    persistent: bool,
    /// whether the variable is watched as read (else not a source)
    watch_var: bool,
    /// whether a Jacobian is taken inside the function
    jacobian: bool,
}

fn unary(op: usize, a: &Tensor) -> Result<Tensor> {
    match op % 6 {
        0 => a.tanh(),
        1 => a.sin(),
        2 => a.square()?.mul_scalar(0.5),
        3 => a.sigmoid(),
        4 => a.mul_scalar(0.3)?.exp(),
        _ => a.neg()?.add_scalar(0.5),
    }
}

fn binary(op: usize, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op % 3 {
        0 => a.add(b),
        1 => a.mul(b)?.tanh(),
        _ => a.sub(b)?.mul_scalar(0.5),
    }
}

impl Prog {
    fn random(g: &mut Gen) -> Prog {
        let n = 2 + g.below(7);
        let steps: Vec<Step> = (0..n)
            .map(|i| {
                let pool = 2 + i;
                let op = g.below(60);
                match g.below(9) {
                    0..=2 => Step::Unary(op, g.below(pool)),
                    3 | 4 => Step::Binary(op, g.below(pool), g.below(pool)),
                    5 => Step::Product(g.below(pool)),
                    6 => Step::Reduce(g.coin(), g.below(pool), g.below(pool)),
                    7 => Step::Cond(g.below(pool), g.below(pool)),
                    _ => Step::Loop(g.below(pool), g.below(pool)),
                }
            })
            .collect();
        Prog {
            rows: 2 + g.below(5),
            cols: 2 + g.below(5),
            dtype: if g.below(3) == 0 { DType::F32 } else { DType::F64 },
            stopped: g.coin().then(|| g.below(n)),
            steps,
            persistent: g.coin(),
            watch_var: g.coin(),
            jacobian: g.coin(),
        }
    }

    /// The program's values on `x` (`[r, c]`) and `w`; the step
    /// `self.stopped` runs under `stop`'s `stop_recording`.
    fn forward(&self, x: &Tensor, w: &Variable, stop: Option<&GradientTape>) -> Result<Tensor> {
        let mut pool = vec![x.clone(), x.mul_scalar(0.5)?.cos()?];
        for (i, s) in self.steps.iter().enumerate() {
            let step = || -> Result<Tensor> {
                match *s {
                    Step::Unary(op, a) => unary(op, &pool[a]),
                    Step::Binary(op, a, b) => binary(op, &pool[a], &pool[b]),
                    Step::Product(a) => pool[a].matmul(&w.read())?.mul_scalar(0.5),
                    Step::Reduce(rows, a, b) => {
                        let axis = if rows { 0 } else { 1 };
                        pool[a].add(&pool[b].sum(&[axis], true)?.mul_scalar(0.25)?)?.tanh()
                    }
                    Step::Cond(a, b) => cond(
                        &pool[a].sum_all()?.gt_scalar(0.0)?,
                        || pool[a].tanh()?.mul(&pool[b]),
                        || pool[b].sin(),
                    ),
                    Step::Loop(a, b) => {
                        let (_, s) = while_loop(
                            |(i, _): &(Tensor, Tensor)| i.lt_scalar(2.0),
                            |(i, s): &(Tensor, Tensor)| {
                                let next = s.tanh()?.mul(&pool[b])?.add(&s.matmul(&w.read())?.mul_scalar(0.25)?)?;
                                Ok((i.add_scalar(1.0)?, next))
                            },
                            (Tensor::scalar(0.0f64), pool[a].clone()),
                            WhileOptions::default(),
                        )?;
                        Ok(s)
                    }
                }
            };
            let t = match (self.stopped == Some(i), stop) {
                (true, Some(tape)) => tape.stop_recording(step)?,
                _ => step()?,
            };
            pool.push(t);
        }
        Ok(pool.pop().expect("a step at least"))
    }

    /// Gradients inside the function: values, first derivatives from the
    /// inner tape (twice when persistent), second derivatives from the
    /// outer one, and a Jacobian.
    fn grads(&self, x: &Tensor, w: &Variable) -> Result<Vec<Tensor>> {
        let outer = GradientTape::persistent();
        let inner = match self.persistent {
            true => GradientTape::persistent(),
            false => GradientTape::new(),
        }
        .watch_accessed_variables(self.watch_var);
        let mut out = Vec::new();
        let gsum = outer.record(|| {
            outer.watch(x);
            let (y, z) = inner.record(|| {
                inner.watch(x);
                let h = self.forward(x, w, Some(&inner))?;
                let y = h.sin()?.sum_all()?;
                let z = h.square()?.mean_all()?;
                Ok((y, z))
            })?;
            out.push(y.clone());
            out.push(z.clone());
            let (gx, gw) = inner.gradient(&y, &(x, w))?;
            let gx = gx.unwrap_or_else(|| zeros_of(x));
            out.push(gx.clone());
            out.push(gw.unwrap_or_else(|| zeros_of(&w.read())));
            if self.persistent {
                // a second gradient of the same tape, of another target
                let gz = inner.gradient(&z, x)?;
                out.push(gz.unwrap_or_else(|| zeros_of(x)));
            }
            gx.square()?.sum_all()
        })?;
        out.push(gsum.clone());
        let (hx, hw) = outer.gradient(&gsum, &(x, w))?;
        out.push(hx.unwrap_or_else(|| zeros_of(x)));
        out.push(hw.unwrap_or_else(|| zeros_of(&w.read())));
        if self.jacobian {
            let jt = GradientTape::new();
            let rowsum = jt.record(|| {
                jt.watch(x);
                self.forward(x, w, None)?.sum(&[1], false)
            })?;
            let j = jt.jacobian(&rowsum, x)?;
            out.push(j.unwrap_or_else(|| Tensor::zeros(&[self.rows, self.rows, self.cols], x.dtype())));
        }
        Ok(out)
    }
}

/// Zeros in place of a gradient that is `None`: a traced `cond` (a graph
/// op) connects the inputs of both branches, so where eager gives `None`
/// (the branch taken does not read the source) a traced function gives
/// zeros, as TensorFlow does (TF 2.21: `tape.gradient` of
/// `tf.cond(sum(x) > 0, lambda: tanh(x) * p, lambda: sin(p))` with respect
/// to `x` at `x = [-1, -2]` is `None` eagerly, `[0, 0]` in a
/// `tf.function`); the values are compared.
fn zeros_of(t: &Tensor) -> Tensor {
    Tensor::zeros(t.shape(), t.dtype())
}

fn close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let tol = if want.dtype() == DType::F32 { 2e-5 } else { 1e-11 };
    let scale = want.to_vec_f64().iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.to_vec_f64().iter().zip(want.to_vec_f64()).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {i}: traced {g}, eager {w}"
        );
    }
}

fn check_program(seed: u64) -> Result<()> {
    let mut g = Gen(seed);
    let p = Arc::new(Prog::random(&mut g));
    let label = format!("seed {seed}: {p:?}");
    let (r, c, dt) = (p.rows, p.cols, p.dtype);
    let w0 = g.tensor(&[c, c], dt)?.mul_scalar(0.5)?;
    let w = Variable::new(w0.clone());
    let f = {
        let (p, w) = (p.clone(), w.clone());
        function(move |x: &Tensor| p.grads(x, &w))
    };
    let xs = [g.tensor(&[r, c], dt)?, g.tensor(&[r, c], dt)?];
    let mut first: Option<Vec<Tensor>> = None;
    for (k, x) in [&xs[0], &xs[1], &xs[0]].into_iter().enumerate() {
        let got = f.call(x)?;
        let want = p.grads(x, &w)?;
        assert_eq!(
            got.iter().map(Tensor::shape).collect::<Vec<_>>(),
            want.iter().map(Tensor::shape).collect::<Vec<_>>(),
            "call {k}: the results' shapes ({label})"
        );
        for (i, (t, e)) in got.iter().zip(&want).enumerate() {
            close(t, e, &format!("call {k} result {i} ({label})"));
        }
        match &first {
            None => first = Some(got),
            Some(f0) if k == 2 => {
                for (i, (a, b)) in f0.iter().zip(&got).enumerate() {
                    assert!(
                        bits(a) == bits(b),
                        "result {i}: the first inputs again give other bits ({label})"
                    );
                }
            }
            Some(_) => {}
        }
    }
    assert_eq!(f.trace_count(), 1, "{label}");
    assert!(bits(&w.read()) == bits(&w0), "the variable changed ({label})");
    Ok(())
}

/// 120 random programs (CI), each with its gradients taken inside the
/// traced function; `GRADTAPE_TRACED_GRADS=N` for a longer run.
#[test]
fn gradients_inside_traced_functions_match_eager() -> Result<()> {
    let n: u64 = std::env::var("GRADTAPE_TRACED_GRADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    for seed in 0..n {
        check_program(0x6a_d000 + seed)?;
    }
    Ok(())
}

/// A tape inside a function reading a variable before and after the
/// function writes it: the gradient with respect to the variable sums over
/// both reads, the write (`assign`) passes none to its value. TF 2.21 gives
/// the same eagerly and in a `tf.function`:
/// ```python
/// v = tf.Variable([1., 2.])
/// def f(x):
///     with tf.GradientTape(persistent=True) as t:
///         t.watch(x)
///         a = v.read_value() * x
///         v.assign(x * 2.)
///         b = v.read_value() ** 2
///         y = tf.reduce_sum(a * b)
///     return t.gradient(y, v), t.gradient(y, x), y
/// f(tf.constant([3., -1.]))  # [144, 4], [36, 8], 100; v = [6, -2]
/// ```
#[test]
fn a_gradient_reaches_a_variable_through_reads_before_and_after_its_write() -> Result<()> {
    let v = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
    let body = |x: &Tensor, v: &Variable| -> Result<(Tensor, Tensor, Tensor)> {
        let t = GradientTape::persistent();
        let y = t.record(|| {
            t.watch(x);
            let a = v.read().mul(x)?;
            v.assign(&x.mul_scalar(2.0)?)?;
            let b = v.read().square()?;
            a.mul(&b)?.sum_all()
        })?;
        let gv = t.gradient(&y, v)?.expect("connected");
        let gx = t.gradient(&y, x)?.expect("connected");
        Ok((gv, gx, y))
    };
    let f = {
        let v = v.clone();
        function(move |x: &Tensor| body(x, &v))
    };
    let x = Tensor::vector(&[3.0f32, -1.0]);
    for k in 0..3 {
        let (gv, gx, y) = match k {
            // eager, then the trace, then the cached graph
            0 => body(&x, &v)?,
            _ => f.call(&x)?,
        };
        assert_eq!(gv.to_vec::<f32>()?, [144.0, 4.0], "run {k}");
        assert_eq!(gx.to_vec::<f32>()?, [36.0, 8.0], "run {k}");
        assert_eq!(y.to_scalar::<f32>()?, 100.0, "run {k}");
        assert_eq!(v.read().to_vec::<f32>()?, [6.0, -2.0], "run {k}");
        v.assign(&Tensor::vector(&[1.0f32, 2.0]))?;
    }
    Ok(())
}
