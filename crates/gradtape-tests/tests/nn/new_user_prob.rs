//! Two probabilistic models a new user would write, against TensorFlow
//! 2.21 / Keras 3.15.1 (`tests/reference/new_user_models3.py`, numbers in
//! `tests/data/new_user_models3.txt`):
//!
//! - a mixture-density network: mixture logits, means and softplus scales
//!   of 3 Gaussians from one hidden layer; the negative log-likelihood
//!   through `log_softmax` and `logsumexp`; Adam;
//! - a REINFORCE policy-gradient step: discounted returns by a reversed
//!   `cumsum`, advantages normalised by their mean and `std`, the
//!   log-probabilities of the taken actions by `gather_with` (TensorFlow's
//!   `gather(..., batch_dims=1)`), an entropy bonus; Adam.
//!
//! The mixture-density network also runs with its learning rate set by
//! hand between steps (`Optimizer::set_learning_rate`, Keras's
//! `optimizer.learning_rate = ...`), eagerly and in a traced step, and
//! with moving averages of its weights (`use_ema`, Keras's).
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`) and
//! in float32 against the same reference at `REL32`.

use std::f64::consts::PI;
use std::sync::{Arc, Mutex};

use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{function, DType, GradientTape, Result, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, Check, Stepper};

const DATA: &str = include_str!("../data/new_user_models3.txt");

/// float32 against the float64 reference, relative to each vector's
/// largest element.
const REL32: f64 = 1e-4;

fn layers_vars(layers: &[&Dense]) -> Vec<Variable> {
    layers.iter().flat_map(|l| l.trainable_variables()).collect()
}

/// Applies `loss`'s gradients (the last of `outs`) with `opt`; the outputs
/// then the gradients.
fn minimize(
    opt: &Mutex<Adam>,
    vars: &[Variable],
    f: impl FnOnce() -> Result<Vec<Tensor>>,
) -> Result<Vec<Option<Tensor>>> {
    let tape = GradientTape::new();
    let outs = tape.record(f)?;
    let grads = tape.gradient(outs.last().expect("a loss"), vars)?;
    opt.lock()
        .unwrap()
        .apply_gradients(grads.clone().into_iter().zip(vars))?;
    Ok(outs.into_iter().map(Some).chain(grads).collect())
}

// ---- 1. Mixture-density network -------------------------------------------------

struct Mdn {
    hidden: Dense,
    pi: Dense,
    mu: Dense,
    sigma: Dense,
    opt: Mutex<Adam>,
}

impl Mdn {
    fn new(dt: DType) -> Result<Mdn> {
        let m = Mdn {
            hidden: dense(3, 8, Some(Activation::Tanh), dt)?,
            pi: dense(8, 3, None, dt)?,
            mu: dense(8, 3, None, dt)?,
            sigma: dense(8, 3, None, dt)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 70.0, &[]);
        Ok(m)
    }
}

impl Stepper for Mdn {
    fn vars(&self) -> Vec<Variable> {
        layers_vars(&[&self.hidden, &self.pi, &self.mu, &self.sigma])
    }

    /// data: x [n, 3], y [n, 1]; outputs σ, the per-example
    /// log-likelihood and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (x, y) = (&data[0], &data[1]);
        minimize(&self.opt, &self.vars(), || {
            let h = self.hidden.forward(x, true)?;
            let log_pi = self.pi.forward(&h, true)?.log_softmax(1)?;
            let mu = self.mu.forward(&h, true)?;
            let sigma = self.sigma.forward(&h, true)?.softplus()?.add_scalar(2f64.powi(-10))?;
            let z = y.sub(&mu)?.div(&sigma)?;
            let log_n = z
                .square()?
                .mul_scalar(-0.5)?
                .sub(&sigma.log()?)?
                .sub_scalar(0.5 * (2.0 * PI).ln())?;
            let ll = log_pi.add(&log_n)?.logsumexp(&[1], false)?;
            let loss = ll.mean_all()?.neg()?;
            Ok(vec![sigma, ll, loss])
        })
    }
}

#[test]
fn mixture_density_network_matches_tensorflow() -> Result<()> {
    let x = fill(&[10, 3], 0.8, 2.0);
    let y = fill(&[10, 1], 2.1, 3.0);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(&mut c64, &mut c32, "mdn", &["sigma", "ll", "loss"], Mdn::new, &[x, y])?;
    c64.finish("mdn f64", 300);
    c32.finish("mdn f32", 300);
    Ok(())
}

/// The network again, its learning rate set by hand after the first step
/// (Keras's `optimizer.learning_rate = 2^-9`): eagerly, and traced, where
/// the graph traced at the first call must use the new rate at the next.
#[test]
fn mixture_density_network_with_a_rate_set_by_hand_matches_tensorflow() -> Result<()> {
    let x = fill(&[10, 3], 0.8, 2.0);
    let y = fill(&[10, 1], 2.1, 3.0);
    let mut check = Check::with(DATA, 0.0);
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(Mdn::new(DType::F64)?);
        let f = {
            let m = m.clone();
            function(move |d: &Vec<Tensor>| Ok(m.step(d)?.into_iter().flatten().collect::<Vec<_>>()))
        };
        let data = vec![x.clone(), y.clone()];
        for s in 1..=3 {
            let out: Vec<Tensor> = if traced {
                f.call(&data)?
            } else {
                m.step(&data)?.into_iter().flatten().collect()
            };
            check.one(what, &format!("mdn_drop{s}_loss"), Some(&out[2]));
            if s == 1 {
                m.opt.lock().unwrap().set_learning_rate(2f64.powi(-9))?;
            }
        }
        assert_eq!(m.opt.lock().unwrap().learning_rate(), 2f64.powi(-9));
        if traced {
            assert_eq!(f.trace_count(), 1);
        }
        check.vars(what, "mdn_drop_weight", &m.vars());
    }
    check.finish("mdn, rate set by hand", 200);
    Ok(())
}

/// The network again with Adam's moving averages of the weights (Keras's
/// `use_ema=True, ema_momentum=7/8`), three steps eagerly and traced (the
/// averages kept by the graph's update node); then
/// `finalize_variable_values` copies them into the weights.
#[test]
fn mixture_density_network_with_moving_averages_matches_tensorflow() -> Result<()> {
    let data = vec![fill(&[10, 3], 0.8, 2.0), fill(&[10, 1], 2.1, 3.0)];
    let mut check = Check::with(DATA, 0.0);
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(Mdn {
            opt: Mutex::new(adam().use_ema(0.875)?),
            ..Mdn::new(DType::F64)?
        });
        let f = {
            let m = m.clone();
            function(move |d: &Vec<Tensor>| Ok(m.step(d)?.into_iter().flatten().collect::<Vec<_>>()))
        };
        for s in 1..=3 {
            let out: Vec<Tensor> = if traced {
                f.call(&data)?
            } else {
                m.step(&data)?.into_iter().flatten().collect()
            };
            check.one(what, &format!("mdn_ema{s}_loss"), Some(&out[2]));
        }
        check.vars(what, "mdn_ema_weight", &m.vars());
        let opt = m.opt.lock().unwrap();
        let averages: Vec<Variable> = opt
            .variables()
            .into_iter()
            .filter(|v| v.name().ends_with("/average"))
            .collect();
        assert_eq!(averages.len(), m.vars().len());
        check.vars(what, "mdn_ema_average", &averages);
        opt.finalize_variable_values(&m.vars())?;
        check.vars(what, "mdn_ema_final", &m.vars());
    }
    check.finish("mdn with moving averages", 600);
    Ok(())
}

// ---- 2. REINFORCE -------------------------------------------------------------

const GAMMA: f64 = 0.875;

struct Policy {
    hidden: Dense,
    out: Dense,
    opt: Mutex<Adam>,
}

impl Policy {
    fn new(dt: DType) -> Result<Policy> {
        let m = Policy {
            hidden: dense(4, 8, Some(Activation::Tanh), dt)?,
            out: dense(8, 3, None, dt)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 100.0, &[]);
        Ok(m)
    }
}

impl Stepper for Policy {
    fn vars(&self) -> Vec<Variable> {
        layers_vars(&[&self.hidden, &self.out])
    }

    /// data: states [t, 4], actions [t] (i64), rewards [t]; outputs the
    /// returns, the taken actions' log-probabilities, the entropy and the
    /// loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (s, a, rew) = (&data[0], &data[1], &data[2]);
        let t = rew.shape()[0];
        minimize(&self.opt, &self.vars(), || {
            let k = Tensor::arange(0.0, t as f64, 1.0, rew.dtype())?;
            let disc = Tensor::full(&[], GAMMA, rew.dtype()).pow(&k)?;
            let ret = rew.mul(&disc)?.cumsum(0, false, true)?.div(&disc)?;
            let adv = ret
                .sub(&ret.mean_all()?)?
                .div(&ret.std(&[0], false)?.add_scalar(1e-8)?)?;
            let logits = self.out.forward(&self.hidden.forward(s, true)?, true)?;
            let logp = logits.log_softmax(-1)?;
            let taken = logp.gather_with(&a.reshape(&[t, 1])?, 1, 1)?.reshape(&[t])?;
            let entropy = logp.exp()?.mul(&logp)?.sum(&[-1], false)?.mean_all()?.neg()?;
            let loss = taken.mul(&adv)?.mean_all()?.neg()?.sub(&entropy.mul_scalar(0.0625)?)?;
            Ok(vec![ret, taken, entropy, loss])
        })
    }
}

#[test]
fn reinforce_step_matches_tensorflow() -> Result<()> {
    let s = fill(&[6, 4], 1.3, 2.0);
    let a = Tensor::vector(&[0i64, 2, 1, 1, 0, 2]);
    let rew = fill(&[6], 0.7, 2.0);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "reinforce",
        &["ret", "taken", "entropy", "loss"],
        Policy::new,
        &[s, a, rew],
    )?;
    c64.finish("reinforce f64", 200);
    c32.finish("reinforce f32", 200);
    Ok(())
}
