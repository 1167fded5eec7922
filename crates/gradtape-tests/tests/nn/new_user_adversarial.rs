//! Two adversarial training steps a new user would write from the docs,
//! against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models7.py` printed the numbers of
//! `tests/data/new_user_models7.txt`):
//!
//! - a WGAN-GP step with n_critic = 2 (`new_user_physics.rs` has one
//!   critic update per step): a generator Dense(3-8 relu-2) and a critic
//!   Dense(2-8 leaky relu-8 tanh-1); two critic updates in each (traced)
//!   step, the same Adam (`beta_1 = 0`) applied twice within one trace,
//!   each with the gradient penalty as Keras's WGAN-GP example writes it
//!   (an inner tape watching the interpolates between real and generated
//!   points, inside the critic's tape: the penalty's gradient w.r.t. the
//!   critic's weights is second order, through the leaky relu's and the
//!   tanh's derivatives; the norm written `sqrt(sum(square(g)))`, λ = 10);
//!   then one generator update, RMSprop (ρ 7/8). The leaky relu's slope is
//!   1/4: TensorFlow's slope is a float32 attribute, so Keras's 0.2 is
//!   0.2f32 in float64 too (the deliberate difference of
//!   `tf_elementwise.rs`), 1.5e-8 relative from gradtape's 0.2;
//! - PGD adversarial training: a Dense(4-8 tanh-3) classifier; three
//!   projected-gradient steps (the sign of the input gradient times 1/8,
//!   projected on the ε-ball of 1/4 around the clean inputs — TensorFlow's
//!   `clip_by_value` with tensor bounds, here `clip_by_tensors` — then on
//!   `[-1, 1]`); half the clean, half the adversarial sparse
//!   cross-entropy; SGD with Nesterov momentum. The attack four ways, all
//!   against the same numbers: a Rust loop (unrolled into the trace) or a
//!   `while_loop` (its count decided when the graph runs, a tape in its
//!   body), each before the training tape or *inside* it, as a user who
//!   writes the whole step in one block does (the weights' gradient
//!   through `sign` is zero, so it must equal the one with the attack
//!   outside; through the `while_loop`, its gradient is taken too).
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`) and
//! float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::{losses, Activation, Dense, Layer, Module};
use gradtape::optim::{Adam, Optimizer, RmsProp, Sgd};
use gradtape::{while_loop, DType, GradientTape, Result, Tensor, Variable, WhileOptions};

use super::new_user_physics::dense;
use super::new_user_util::{fill, set_weights_as, train_both, update, Check, Stepper};

/// The reference numbers of this batch (`new_user_models7.py`).
pub(super) const DATA: &str = include_str!("../data/new_user_models7.txt");

/// float32 against the float64 reference, relative to each vector's
/// largest element: a few float32 roundings carried through two steps
/// (the largest seen: 2.3e-7 for both models).
const REL32: f64 = 2e-5;

/// Dense layers in a row.
struct Stack(Vec<Dense>);

impl Stack {
    fn new(layers: &[(usize, usize, Option<Activation>)], k0: f64, dt: DType) -> Result<Stack> {
        let s = Stack(
            layers
                .iter()
                .map(|&(i, o, a)| dense(i, o, a, dt))
                .collect::<Result<_>>()?,
        );
        set_weights_as(&s.vars(), k0, &[]);
        Ok(s)
    }

    fn vars(&self) -> Vec<Variable> {
        self.0.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn call(&self, x: &Tensor) -> Result<Tensor> {
        self.0.iter().try_fold(x.clone(), |h, l| l.forward(&h, true))
    }
}

// ---- 1. WGAN-GP ----------------------------------------------------------------------------

struct Wgan {
    generator: Stack,
    critic: Stack,
    c_opt: Mutex<Adam>,
    g_opt: Mutex<RmsProp>,
}

impl Wgan {
    fn new(dt: DType) -> Result<Wgan> {
        let relu = Some(Activation::Relu);
        Ok(Wgan {
            critic: Stack::new(
                &[
                    (2, 8, Some(Activation::LeakyRelu(0.25))),
                    (8, 8, Some(Activation::Tanh)),
                    (8, 1, None),
                ],
                700.0,
                dt,
            )?,
            generator: Stack::new(&[(3, 8, relu), (8, 2, None)], 710.0, dt)?,
            c_opt: Mutex::new(Adam::new(2f64.powi(-7)).betas(0.0, 0.875)?.epsilon(2f64.powi(-20))?),
            g_opt: Mutex::new(RmsProp::new(2f64.powi(-7)).rho(0.875)?.epsilon(2f64.powi(-20))?),
        })
    }

    /// One critic update on real points, noise `z` and interpolation
    /// weights `eps` [n, 1]: the gradient norms at the interpolates, the
    /// penalty and the loss; then the critic's gradients.
    fn critic_step(&self, real: &Tensor, z: &Tensor, eps: &Tensor) -> Result<(Vec<Tensor>, Vec<Option<Tensor>>)> {
        let vars = self.critic.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let fake = self.generator.call(z)?;
            let x_hat = eps.mul(real)?.add(&eps.scalar_like(1.0)?.sub(eps)?.mul(&fake)?)?;
            let gp_tape = GradientTape::new();
            let d_hat = gp_tape.record(|| {
                gp_tape.watch(&x_hat);
                self.critic.call(&x_hat)
            })?;
            let g = gp_tape.gradient(&d_hat, &x_hat)?.expect("the critic's input gradient");
            let norm = g.square()?.sum(&[1], false)?.sqrt()?;
            let gp = norm.add_scalar(-1.0)?.square()?.mean_all()?;
            let wd = self
                .critic
                .call(&fake)?
                .mean_all()?
                .sub(&self.critic.call(real)?.mean_all()?)?;
            let loss = wd.add(&gp.mul_scalar(10.0)?)?;
            Ok(vec![norm, gp, loss])
        })?;
        let grads = tape.gradient(&out[2], &vars)?;
        self.c_opt
            .lock()
            .unwrap()
            .apply_gradients(grads.clone().into_iter().zip(&vars))?;
        Ok((out, grads))
    }
}

impl Stepper for Wgan {
    /// The critic's weights, then the generator's.
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.critic.vars();
        v.extend(self.generator.vars());
        v
    }

    /// data: real points [6, 2], three noises [6, 3], two interpolation
    /// weights [6, 1]; outputs both critic updates' norms, penalty and
    /// loss, the generator's loss, then the second critic update's
    /// gradients and the generator's.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let mut outs = Vec::new();
        let mut c_grads = Vec::new();
        for k in 0..2 {
            let (o, g) = self.critic_step(&data[0], &data[1 + k], &data[4 + k])?;
            outs.extend(o.into_iter().map(Some));
            c_grads = g;
        }
        let g_vars = self.generator.vars();
        let tape = GradientTape::new();
        let g_loss = tape.record(|| self.critic.call(&self.generator.call(&data[3])?)?.mean_all()?.neg())?;
        let rest = update(&tape, &g_loss, &g_vars, &self.g_opt, vec![g_loss.clone()])?;
        // rest: the generator's loss, then its gradients
        outs.push(rest[0].clone());
        Ok(outs
            .into_iter()
            .chain(c_grads)
            .chain(rest.into_iter().skip(1))
            .collect())
    }
}

#[test]
fn wgan_gp_gradient_penalty_matches_tensorflow() -> Result<()> {
    let mut data = vec![fill(&[6, 2], 0.9, 2.0)];
    data.extend((0..3).map(|k| fill(&[6, 3], 0.4 + k as f64, 2.0)));
    for k in 0..2 {
        data.push(fill(&[6, 1], 1.3 + k as f64, 1.0).add_scalar(0.5)?);
    }
    let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
    let outs = ["c0norm", "c0gp", "c0loss", "c1norm", "c1gp", "c1loss", "gloss"];
    train_both(&mut c64, &mut c32, "wgan", &outs, Wgan::new, &data)?;
    c64.finish("wgan f64", 300);
    c32.finish("wgan f32", 300);
    Ok(())
}

// ---- 2. PGD adversarial training ----------------------------------------------------------

/// One step of projected gradient ascent on `loss` from `x_adv`: `alpha`
/// times the sign of the input gradient (an inner tape watching `x_adv`),
/// projected on `[lo, hi]` (`clip_by_tensors`) and on `[−bound, bound]`.
pub(super) fn pgd_ascend(
    loss: impl Fn(&Tensor) -> Result<Tensor>,
    x_adv: &Tensor,
    alpha: f64,
    lo: &Tensor,
    hi: &Tensor,
    bound: f64,
) -> Result<Tensor> {
    let t = GradientTape::new();
    let l = t.record(|| {
        t.watch(x_adv);
        loss(x_adv)
    })?;
    let g = t.gradient(&l, x_adv)?.expect("the input gradient");
    x_adv
        .add(&g.sign()?.mul_scalar(alpha)?)?
        .clip_by_tensors(lo, hi)?
        .clip_by_value(-bound, bound)
}

/// Where a PGD step computes its attack.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Attack {
    /// a Rust loop inside the training tape
    Inside,
    /// a Rust loop before the training tape
    Outside,
    /// a `while_loop` (its count decided when the graph runs) inside the
    /// training tape
    WhileInside,
    /// a `while_loop` before the training tape
    WhileOutside,
}

struct Pgd {
    net: Stack,
    attack: Attack,
    opt: Mutex<Sgd>,
}

impl Pgd {
    fn new(dt: DType, attack: Attack) -> Result<Pgd> {
        Ok(Pgd {
            net: Stack::new(&[(4, 8, Some(Activation::Tanh)), (8, 3, None)], 720.0, dt)?,
            attack,
            opt: Mutex::new(Sgd::new(0.125).momentum(0.875)?.nesterov(true)),
        })
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        losses::sparse_categorical_crossentropy(y, &self.net.call(x)?, true)
    }

    /// One step of projected gradient ascent on the loss from `x_adv`.
    fn ascend(&self, x_adv: &Tensor, y: &Tensor, lo: &Tensor, hi: &Tensor) -> Result<Tensor> {
        pgd_ascend(|x| self.loss(x, y), x_adv, 0.125, lo, hi, 1.0)
    }

    /// Three steps of projected gradient ascent on the loss from `x`.
    fn attack(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let (lo, hi) = (x.add_scalar(-0.25)?, x.add_scalar(0.25)?);
        if matches!(self.attack, Attack::WhileInside | Attack::WhileOutside) {
            let out = while_loop(
                |v: &Vec<Tensor>| v[0].lt_scalar(3.0),
                |v: &Vec<Tensor>| Ok(vec![v[0].add_scalar(1.0)?, self.ascend(&v[1], y, &lo, &hi)?]),
                vec![Tensor::scalar(0i64), x.clone()],
                WhileOptions::default(),
            )?;
            return Ok(out[1].clone());
        }
        let mut x_adv = x.clone();
        for _ in 0..3 {
            x_adv = self.ascend(&x_adv, y, &lo, &hi)?;
        }
        Ok(x_adv)
    }
}

impl Stepper for Pgd {
    fn vars(&self) -> Vec<Variable> {
        self.net.vars()
    }

    /// data: inputs [6, 4], labels [6] (i64); outputs the adversarial
    /// inputs, the clean and adversarial losses and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (x, y) = (&data[0], &data[1]);
        let vars = self.vars();
        let inside = matches!(self.attack, Attack::Inside | Attack::WhileInside);
        let outside = if inside { None } else { Some(self.attack(x, y)?) };
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let x_adv = match &outside {
                Some(a) => a.clone(),
                None => self.attack(x, y)?,
            };
            let clean = self.loss(x, y)?;
            let adv = self.loss(&x_adv, y)?;
            let loss = clean.mul_scalar(0.5)?.add(&adv.mul_scalar(0.5)?)?;
            Ok(vec![x_adv, clean, adv, loss])
        })?;
        let loss = out[3].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

#[test]
fn pgd_adversarial_training_matches_tensorflow() -> Result<()> {
    let x = fill(&[6, 4], 0.2, 1.5);
    let y = Tensor::vector(&[0i64, 2, 1, 1, 0, 2]);
    for attack in [
        Attack::Inside,
        Attack::Outside,
        Attack::WhileInside,
        Attack::WhileOutside,
    ] {
        let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
        let outs = ["xadv", "clean", "adv", "loss"];
        let build = |dt| Pgd::new(dt, attack);
        train_both(&mut c64, &mut c32, "pgd", &outs, build, &[x.clone(), y.clone()])?;
        c64.finish(&format!("pgd f64 ({attack:?})"), 150);
        c32.finish(&format!("pgd f32 ({attack:?})"), 150);
    }
    Ok(())
}
