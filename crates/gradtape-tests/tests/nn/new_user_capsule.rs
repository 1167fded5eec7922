//! A capsule network with dynamic routing as a new user would write it
//! from the docs, against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models7.py` printed the numbers of
//! `tests/data/new_user_models7.txt`): primary capsules from a Dense(6 →
//! 12) reshaped to 4 capsules of 3 and squashed (`|s|²/(1 + |s|²) ·
//! s/√(|s|² + 1e-7)`); each primary capsule's predictions for 3 class
//! capsules of 2 by `einsum("bid,ijde->bije")` with a plain weight
//! variable [4, 3, 3, 2]; three iterations of routing by agreement (the
//! routing logits' softmax over the class capsules, the weighted sum over
//! the primary capsules, squash, the agreement `Σ û · v` added to the
//! logits), with the predictions under `stop_gradient` but in the last
//! iteration (so the coupling coefficients pass no gradient, as in the
//! paper's implementation); the margin loss on the class capsules'
//! lengths (m⁺ 0.9, m⁻ 0.1, λ 1/2, through `one_hot`); Adam. Two steps
//! eagerly and as a traced `function` (called twice, traced once), in
//! float64 at 1e-12 relative (see `new_user_util.rs`) and float32 at
//! `REL32`.

use std::sync::Mutex;

use gradtape::nn::{Dense, Layer, Module};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Tensor, Variable};

use super::new_user_adversarial::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: a few float32 roundings carried through two Adam
/// steps (the largest seen: 5.6e-7).
const REL32: f64 = 2e-5;

struct Capsules {
    primary: Dense,
    w: Variable,
    opt: Mutex<Adam>,
}

/// `|s|²/(1 + |s|²) · s/√(|s|² + 1e-7)` over the last axis.
fn squash(s: &Tensor) -> Result<Tensor> {
    let sq = s.square()?.sum(&[-1], true)?;
    sq.div(&sq.add_scalar(1.0)?)?
        .mul(&s.div(&sq.add_scalar(1e-7)?.sqrt()?)?)
}

impl Capsules {
    fn new(dt: DType) -> Result<Capsules> {
        let m = Capsules {
            primary: dense(6, 12, None, dt)?,
            w: Variable::new(Tensor::zeros(&[4, 3, 3, 2], dt)),
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 780.0, &[]);
        Ok(m)
    }
}

impl Stepper for Capsules {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.primary.trainable_variables();
        v.push(self.w.clone());
        v
    }

    /// data: inputs [4, 6], labels [4] (i64); outputs the last coupling
    /// coefficients, the class capsules' lengths and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (x, y) = (&data[0], &data[1]);
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let b = x.shape()[0];
            let u = squash(&self.primary.forward(x, true)?.reshape(&[b, 4, 3])?)?;
            let u_hat = Tensor::einsum("bid,ijde->bije", &[&u, &self.w.read()])?;
            let u_stop = u_hat.stop_gradient();
            let mut logits = Tensor::zeros(&[b, 4, 3], u.dtype());
            let (mut c, mut v) = (logits.clone(), logits.clone());
            for r in 0..3 {
                c = logits.softmax(2)?;
                let pred = if r == 2 { &u_hat } else { &u_stop };
                v = squash(&c.expand_dims(-1)?.mul(pred)?.sum(&[1], false)?)?;
                if r < 2 {
                    logits = logits.add(&u_stop.mul(&v.expand_dims(1)?)?.sum(&[-1], false)?)?;
                }
            }
            let lengths = v.square()?.sum(&[-1], false)?.add_scalar(1e-7)?.sqrt()?;
            let t = y.one_hot(3, 1.0, 0.0, -1, lengths.dtype())?;
            let present = lengths.neg()?.add_scalar(0.9)?.relu()?.square()?;
            let absent = lengths.add_scalar(-0.1)?.relu()?.square()?;
            let margin = t
                .mul(&present)?
                .add(&t.scalar_like(1.0)?.sub(&t)?.mul(&absent)?.mul_scalar(0.5)?)?;
            let loss = margin.sum(&[1], false)?.mean_all()?;
            Ok(vec![c, lengths, loss])
        })?;
        let loss = out[2].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

#[test]
fn capsule_network_dynamic_routing_matches_tensorflow() -> Result<()> {
    let x = fill(&[4, 6], 0.15, 2.0);
    let y = Tensor::vector(&[2i64, 0, 1, 2]);
    let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
    let outs = ["c", "lengths", "loss"];
    train_both(&mut c64, &mut c32, "capsule", &outs, Capsules::new, &[x, y])?;
    c64.finish("capsule f64", 150);
    c32.finish("capsule f32", 150);
    Ok(())
}
