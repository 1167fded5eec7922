//! A neural ODE a new user would write, against TensorFlow 2.21 / Keras
//! 3.15.1 in float64 (`tests/reference/new_user_models2.py`, numbers in
//! `tests/data/new_user_models2.txt`): dy/dt = Dense(8->2)(tanh(Dense(2->8)
//! (y))), integrated by RK4 (dt = 1/8, 8 steps), loss the mean squared
//! distance of y(1) from a target, gradients for the weights and for y0
//! through every step, SGD with momentum. Run three ways: eagerly (a Rust
//! loop), traced with the Rust loop unrolled into the graph, and traced with
//! the loop a `while_loop` (the count decided when the graph runs) — each
//! traced function called twice (two steps). Compared at 1e-12 relative
//! (see `new_user_util.rs`).

use std::sync::{Arc, Mutex};

use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::optim::{Optimizer, Sgd};
use gradtape::{function, while_loop, GradientTape, Result, Tensor, Variable, WhileOptions};

use super::new_user_util::{all_some, dense, eager_vs_traced, fill, names, print_times, set_weights, Check};

const DT: f64 = 0.125;
const STEPS: i64 = 8;

struct Ode {
    l1: Dense,
    l2: Dense,
}

#[derive(Clone, Copy, PartialEq)]
enum Loop {
    /// a Rust loop (unrolled into a traced graph)
    Rust,
    /// `while_loop`
    While,
}

impl Ode {
    fn new() -> Result<Ode> {
        let m = Ode {
            l1: dense(2, 8, Some(Activation::Tanh), true)?,
            l2: dense(8, 2, None, true)?,
        };
        set_weights(&m.vars(), 70.0);
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let mut v = self.l1.trainable_variables();
        v.extend(self.l2.trainable_variables());
        v
    }

    fn f(&self, y: &Tensor) -> Result<Tensor> {
        self.l2.call(&self.l1.call(y)?)
    }

    /// One RK4 step.
    fn rk4_step(&self, y: &Tensor) -> Result<Tensor> {
        let k1 = self.f(y)?;
        let k2 = self.f(&y.add(&k1.mul_scalar(DT / 2.0)?)?)?;
        let k3 = self.f(&y.add(&k2.mul_scalar(DT / 2.0)?)?)?;
        let k4 = self.f(&y.add(&k3.mul_scalar(DT)?)?)?;
        let sum = k1.add(&k2.mul_scalar(2.0)?)?.add(&k3.mul_scalar(2.0)?)?.add(&k4)?;
        y.add(&sum.mul_scalar(DT / 6.0)?)
    }

    fn integrate(&self, y0: &Tensor, how: Loop) -> Result<Tensor> {
        match how {
            Loop::Rust => (0..STEPS).try_fold(y0.clone(), |y, _| self.rk4_step(&y)),
            Loop::While => {
                let out = while_loop(
                    |v: &(Tensor, Tensor)| v.0.lt(&Tensor::scalar(STEPS)),
                    |v: &(Tensor, Tensor)| Ok((v.0.add(&Tensor::scalar(1i64))?, self.rk4_step(&v.1)?)),
                    (Tensor::scalar(0i64), y0.clone()),
                    WhileOptions::default(),
                )?;
                Ok(out.1)
            }
        }
    }
}

/// y(1), the loss, the gradients of the four weights and of y0; one SGD
/// step.
fn ode_step(m: &Ode, opt: &mut Sgd, y0: &Tensor, target: &Tensor, how: Loop) -> Result<Vec<Tensor>> {
    let vars = m.vars();
    let tape = GradientTape::persistent();
    let (y1, loss) = tape.record(|| {
        tape.watch(y0);
        let y1 = m.integrate(y0, how)?;
        let loss = y1.sub(target)?.square()?.mean_all()?;
        Ok((y1, loss))
    })?;
    let grads = tape.gradient(&loss, &vars)?;
    let gy0 = tape.gradient(&loss, y0)?.expect("d loss / d y0");
    opt.apply_gradients(grads.clone().into_iter().zip(&vars))?;
    let mut out = vec![y1, loss];
    out.extend(all_some(grads, "ode"));
    out.push(gy0);
    Ok(out)
}

fn sgd() -> Sgd {
    Sgd::new(0.0625).momentum(0.875).unwrap()
}

fn data() -> (Tensor, Tensor) {
    (fill(&[4, 2], 0.8, 2.0), fill(&[4, 2], 2.2, 2.0))
}

#[test]
fn neural_ode_rk4_matches_tensorflow() -> Result<()> {
    let (y0, target) = data();
    let mut check = Check::new();
    for (what, traced, how) in [
        ("eager", false, Loop::Rust),
        ("eager while_loop", false, Loop::While),
        ("traced rust loop", true, Loop::Rust),
        ("traced while_loop", true, Loop::While),
    ] {
        let m = Arc::new(Ode::new()?);
        let opt = Arc::new(Mutex::new(sgd()));
        let f = {
            let (m, opt) = (m.clone(), opt.clone());
            function(move |(y0, t): &(Tensor, Tensor)| ode_step(&m, &mut opt.lock().unwrap(), y0, t, how))
        };
        for s in 1..=2 {
            let got = if traced {
                f.call(&(y0.clone(), target.clone()))?
            } else {
                ode_step(&m, &mut opt.lock().unwrap(), &y0, &target, how)?
            };
            check.all(what, &names(&format!("ode{s}"), &["y1", "loss"], &[("grad", 5)]), &got);
        }
        if traced {
            assert_eq!(
                f.trace_count(),
                1,
                "{what}: the second step ran the first trace's graph"
            );
        }
        check.vars(what, "ode_weight", &m.vars());
    }
    check.finish("ode", 400);
    Ok(())
}

/// Eager and traced time per training step (a release-mode measurement,
/// printed; run with `--ignored --nocapture`).
#[test]
#[ignore]
fn neural_ode_eager_vs_traced_time() -> Result<()> {
    let data = data();
    for how in [Loop::Rust, Loop::While] {
        let (m, mut o) = (Ode::new()?, sgd());
        let (m2, o2) = (Arc::new(Ode::new()?), Arc::new(Mutex::new(sgd())));
        let f = function(move |(y0, t): &(Tensor, Tensor)| ode_step(&m2, &mut o2.lock().unwrap(), y0, t, how));
        let (eager, traced) = eager_vs_traced(
            100,
            || ode_step(&m, &mut o, &data.0, &data.1, Loop::Rust).map(drop),
            || f.call(&data).map(drop),
        );
        let label = if how == Loop::Rust {
            "neural ODE, rust loop"
        } else {
            "neural ODE, while_loop"
        };
        print_times(label, "batch 4, 2 -> 8 -> 2, RK4 x 8 steps", eager, traced);
    }
    Ok(())
}
