//! Two models a new user would write that differentiate through a
//! derivative, against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models3.py`, numbers in
//! `tests/data/new_user_models3.txt`):
//!
//! - a physics-informed network for Burgers' equation u_t + u u_x = ν u_xx:
//!   u_x and u_t from an inner tape watching the points, u_xx from a
//!   persistent tape around it, both inside the weights' tape; plus the
//!   initial condition u(x, 0) = -sin(πx); Adam; again with the
//!   derivatives as per-point `batch_jacobian`s, and in forward mode
//!   (`ForwardAccumulator`s, forward over forward for u_xx);
//! - a contractive autoencoder: the squared Frobenius norm of the
//!   encoder's per-example Jacobian (`batch_jacobian` on an inner tape)
//!   in the loss, differentiated w.r.t. the weights; Adam;
//! - a WGAN-GP step: the critic's gradient penalty is the gradient of the
//!   critic w.r.t. its interpolated input, taken on an inner tape inside
//!   the critic's and the generator's tapes; Adam for the critic, RMSprop
//!   for the generator.
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`) and
//! in float32 against the same float64 reference at the tolerance given.

use std::f64::consts::PI;
use std::sync::Mutex;

use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::optim::{Adam, Optimizer, RmsProp};
use gradtape::{DType, ForwardAccumulator, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

const DATA: &str = include_str!("../data/new_user_models3.txt");

/// float32 against the float64 reference: relative to each vector's
/// largest element (errors of a few float32 roundings, carried through two
/// steps).
const REL32: f64 = 1e-4;

pub(super) fn dense(inp: usize, units: usize, act: Option<Activation>, dtype: DType) -> Result<Dense> {
    let b = Dense::builder(inp, units).dtype(dtype);
    let rng = &mut Rng::new(0);
    match act {
        Some(a) => b.activation(a).build(rng),
        None => b.build(rng),
    }
}

// ---- 1. Burgers PINN ---------------------------------------------------------

const NU: f64 = 0.0625;

struct Burgers {
    layers: [Dense; 3],
    opt: Mutex<Adam>,
}

impl Burgers {
    fn new(dt: DType) -> Result<Burgers> {
        let tanh = Some(Activation::Tanh);
        let m = Burgers {
            layers: [dense(2, 8, tanh, dt)?, dense(8, 8, tanh, dt)?, dense(8, 1, None, dt)?],
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 60.0, &[]);
        Ok(m)
    }

    fn u(&self, x: &Tensor) -> Result<Tensor> {
        self.layers.iter().try_fold(x.clone(), |h, l| l.forward(&h, true))
    }

    /// u, the residual r = u_t + u u_x - ν u_xx at `x` (columns x, t), and
    /// the loss mean(r²) + mean((u(x0) + sin(π x0))²).
    fn loss(&self, x: &Tensor, x0: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let t1 = GradientTape::persistent();
        let (u, ux, ut) = t1.record(|| {
            t1.watch(x);
            let t2 = GradientTape::new();
            let u = t2.record(|| {
                t2.watch(x);
                self.u(x)
            })?;
            let g = t2.gradient(&u, x)?.expect("du/dX");
            Ok((u, g.narrow(1, 0, 1)?, g.narrow(1, 1, 1)?))
        })?;
        let uxx = t1.gradient(&ux, x)?.expect("d2u/dx2").narrow(1, 0, 1)?;
        self.residual_loss(x0, u, &ux, &ut, &uxx)
    }

    /// From u and its derivatives at the points: u, the residual and the
    /// loss (the initial condition's term from `x0`), as [`Self::loss`].
    fn residual_loss(
        &self,
        x0: &Tensor,
        u: Tensor,
        ux: &Tensor,
        ut: &Tensor,
        uxx: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let r = ut.add(&u.mul(ux)?)?.sub(&uxx.mul_scalar(NU)?)?;
        let ic = self.u(x0)?.add(&x0.narrow(1, 0, 1)?.mul_scalar(PI)?.sin()?)?;
        let loss = r.square()?.mean_all()?.add(&ic.square()?.mean_all()?)?;
        Ok((u, r, loss))
    }

    /// Adam's update from `loss` on `tape`; the step's outputs: u, r, the
    /// loss, then the gradients.
    fn update(&self, tape: &GradientTape, (u, r, loss): (Tensor, Tensor, Tensor)) -> Result<Vec<Option<Tensor>>> {
        update(tape, &loss, &self.vars(), &self.opt, vec![u, r, loss.clone()])
    }
}

impl Stepper for Burgers {
    fn vars(&self) -> Vec<Variable> {
        self.layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let tape = GradientTape::new();
        let out = tape.record(|| self.loss(&data[0], &data[1]))?;
        self.update(&tape, out)
    }
}

/// The same network with its derivatives taken as per-point Jacobians
/// (`batch_jacobian`, TensorFlow's idiom for a PINN's inputs), the second
/// one of the first's x column.
struct BurgersJacobian(Burgers);

impl Stepper for BurgersJacobian {
    fn vars(&self) -> Vec<Variable> {
        self.0.vars()
    }

    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (m, x, x0) = (&self.0, &data[0], &data[1]);
        let n = x.shape()[0];
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let t1 = GradientTape::new();
            let (u, ux, ut) = t1.record(|| {
                t1.watch(x);
                let t2 = GradientTape::new();
                let u = t2.record(|| {
                    t2.watch(x);
                    m.u(x)
                })?;
                let j = t2.batch_jacobian(&u, x)?.expect("du/dX").reshape(&[n, 2])?;
                Ok((u, j.narrow(1, 0, 1)?, j.narrow(1, 1, 1)?))
            })?;
            let uxx = t1
                .batch_jacobian(&ux, x)?
                .expect("d2u/dx2")
                .reshape(&[n, 2])?
                .narrow(1, 0, 1)?;
            m.residual_loss(x0, u, &ux, &ut, &uxx)
        })?;
        m.update(&tape, out)
    }
}

#[test]
fn burgers_pinn_with_batch_jacobians_matches_tensorflow() -> Result<()> {
    let x = fill(&[12, 2], 0.3, 2.0);
    let x0 = Tensor::stack(&[&fill(&[6], 1.9, 2.0), &Tensor::zeros(&[6], DType::F64)], 1)?;
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let build = |dt| Ok(BurgersJacobian(Burgers::new(dt)?));
    train_both(&mut c64, &mut c32, "burgers", &["u", "r", "loss"], build, &[x, x0])?;
    c64.finish("burgers (batch_jacobian) f64", 300);
    c32.finish("burgers (batch_jacobian) f32", 300);
    Ok(())
}

/// The same network with its derivatives in forward mode, as
/// `tf.autodiff.ForwardAccumulator`s: u_x and u_t from accumulators with
/// the tangents e_x and e_t of the points, u_xx from one with e_x around
/// the first (forward over forward), all inside the weights' tape.
struct BurgersForward(Burgers);

impl Stepper for BurgersForward {
    fn vars(&self) -> Vec<Variable> {
        self.0.vars()
    }

    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (m, x, x0) = (&self.0, &data[0], &data[1]);
        let col = x.narrow(1, 0, 1)?;
        let (one, zero) = (col.ones_like(), col.zeros_like());
        let ex = Tensor::concat(&[&one, &zero], 1)?;
        let et = Tensor::concat(&[&zero, &one], 1)?;
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let outer = ForwardAccumulator::watching(x, std::slice::from_ref(&ex))?;
            let (u, ux) = outer.record(|| {
                let inner = ForwardAccumulator::watching(x, std::slice::from_ref(&ex))?;
                let u = inner.record(|| m.u(x))?;
                Ok((u.clone(), inner.jvp(&u)?.expect("u_x")))
            })?;
            let uxx = outer.jvp(&ux)?.expect("u_xx");
            let along_t = ForwardAccumulator::watching(x, std::slice::from_ref(&et))?;
            let u_again = along_t.record(|| m.u(x))?;
            let ut = along_t.jvp(&u_again)?.expect("u_t");
            m.residual_loss(x0, u, &ux, &ut, &uxx)
        })?;
        m.update(&tape, out)
    }
}

#[test]
fn burgers_pinn_in_forward_mode_matches_tensorflow() -> Result<()> {
    let x = fill(&[12, 2], 0.3, 2.0);
    let x0 = Tensor::stack(&[&fill(&[6], 1.9, 2.0), &Tensor::zeros(&[6], DType::F64)], 1)?;
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let build = |dt| Ok(BurgersForward(Burgers::new(dt)?));
    train_both(&mut c64, &mut c32, "burgers", &["u", "r", "loss"], build, &[x, x0])?;
    c64.finish("burgers (forward mode) f64", 300);
    c32.finish("burgers (forward mode) f32", 300);
    Ok(())
}

#[test]
fn burgers_pinn_matches_tensorflow() -> Result<()> {
    let x = fill(&[12, 2], 0.3, 2.0);
    let x0 = Tensor::stack(&[&fill(&[6], 1.9, 2.0), &Tensor::zeros(&[6], DType::F64)], 1)?;
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "burgers",
        &["u", "r", "loss"],
        Burgers::new,
        &[x, x0],
    )?;
    c64.finish("burgers f64", 300);
    c32.finish("burgers f32", 300);
    Ok(())
}

// ---- 2. Contractive autoencoder ----------------------------------------------------

struct Cae {
    enc: Dense,
    dec: Dense,
    opt: Mutex<Adam>,
}

impl Cae {
    fn new(dt: DType) -> Result<Cae> {
        let m = Cae {
            enc: dense(5, 4, Some(Activation::Sigmoid), dt)?,
            dec: dense(4, 5, None, dt)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 140.0, &[]);
        Ok(m)
    }
}

impl Stepper for Cae {
    fn vars(&self) -> Vec<Variable> {
        [&self.enc, &self.dec]
            .iter()
            .flat_map(|l| l.trainable_variables())
            .collect()
    }

    /// data: x [b, 5]; outputs the Jacobian [b, 4, 5], the penalty and the
    /// loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let x = &data[0];
        let vars = self.vars();
        let tape = GradientTape::new();
        let (jac, penalty, loss) = tape.record(|| {
            let jt = GradientTape::new();
            let h = jt.record(|| {
                jt.watch(x);
                self.enc.forward(x, true)
            })?;
            let jac = jt.batch_jacobian(&h, x)?.expect("dh/dx");
            let penalty = jac.square()?.sum(&[1, 2], false)?.mean_all()?;
            let rec = self.dec.forward(&h, true)?.sub(x)?.square()?.mean_all()?;
            let loss = rec.add(&penalty.mul_scalar(0.25)?)?;
            Ok((jac, penalty, loss))
        })?;
        update(&tape, &loss, &vars, &self.opt, vec![jac, penalty, loss.clone()])
    }
}

#[test]
fn contractive_autoencoder_matches_tensorflow() -> Result<()> {
    let x = fill(&[6, 5], 0.9, 2.0);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(&mut c64, &mut c32, "cae", &["jac", "penalty", "loss"], Cae::new, &[x])?;
    c64.finish("cae f64", 300);
    c32.finish("cae f32", 300);
    Ok(())
}

// ---- 3. WGAN-GP ----------------------------------------------------------------

struct Wgan {
    generator: [Dense; 2],
    critic: [Dense; 2],
    c_opt: Mutex<Adam>,
    g_opt: Mutex<RmsProp>,
}

impl Wgan {
    fn new(dt: DType) -> Result<Wgan> {
        let tanh = Some(Activation::Tanh);
        let m = Wgan {
            generator: [dense(3, 6, tanh, dt)?, dense(6, 4, None, dt)?],
            critic: [dense(4, 6, tanh, dt)?, dense(6, 1, None, dt)?],
            c_opt: Mutex::new(adam()),
            g_opt: Mutex::new(RmsProp::new(2f64.powi(-6)).rho(0.875)?.epsilon(2f64.powi(-20))?),
        };
        set_weights_as(&m.g_vars(), 120.0, &[]);
        set_weights_as(&m.c_vars(), 130.0, &[]);
        Ok(m)
    }

    fn g_vars(&self) -> Vec<Variable> {
        self.generator.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn c_vars(&self) -> Vec<Variable> {
        self.critic.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn critic(&self, x: &Tensor) -> Result<Tensor> {
        self.critic[1].forward(&self.critic[0].forward(x, true)?, true)
    }
}

impl Stepper for Wgan {
    /// The critic's, then the generator's.
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.c_vars();
        v.extend(self.g_vars());
        v
    }

    /// data: z, real, alpha.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (z, real, alpha) = (&data[0], &data[1], &data[2]);
        let (gt, ct) = (GradientTape::new(), GradientTape::new());
        let (gp, c_loss, g_loss) = gt.record(|| {
            ct.record(|| {
                let fake = self.generator[1].forward(&self.generator[0].forward(z, true)?, true)?;
                let x_hat = alpha.mul(real)?.add(&alpha.neg()?.add_scalar(1.0)?.mul(&fake)?)?;
                let pt = GradientTape::new();
                let d_hat = pt.record(|| {
                    pt.watch(&x_hat);
                    self.critic(&x_hat)
                })?;
                let gx = pt.gradient(&d_hat, &x_hat)?.expect("dD/dx_hat");
                let norm = gx.square()?.sum(&[1], false)?.sqrt()?;
                let gp = norm.sub_scalar(1.0)?.square()?.mean_all()?;
                let d_fake = self.critic(&fake)?;
                let c_loss = d_fake
                    .mean_all()?
                    .sub(&self.critic(real)?.mean_all()?)?
                    .add(&gp.mul_scalar(2.0)?)?;
                let g_loss = d_fake.mean_all()?.neg()?;
                Ok((gp, c_loss, g_loss))
            })
        })?;
        let (cv, gv) = (self.c_vars(), self.g_vars());
        let cg = ct.gradient(&c_loss, &cv)?;
        let gg = gt.gradient(&g_loss, &gv)?;
        self.c_opt
            .lock()
            .unwrap()
            .apply_gradients(cg.clone().into_iter().zip(&cv))?;
        self.g_opt
            .lock()
            .unwrap()
            .apply_gradients(gg.clone().into_iter().zip(&gv))?;
        Ok([Some(gp), Some(c_loss), Some(g_loss)]
            .into_iter()
            .chain(cg)
            .chain(gg)
            .collect())
    }
}

#[test]
fn wgan_gp_step_matches_tensorflow() -> Result<()> {
    let z = fill(&[6, 3], 0.2, 2.0);
    let real = fill(&[6, 4], 1.4, 2.0).add_scalar(0.25)?;
    let alpha = fill(&[6, 1], 2.2, 1.0).add_scalar(0.5)?;
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "wgan",
        &["gp", "c_loss", "g_loss"],
        Wgan::new,
        &[z, real, alpha],
    )?;
    c64.finish("wgan f64", 300);
    c32.finish("wgan f32", 300);
    Ok(())
}
