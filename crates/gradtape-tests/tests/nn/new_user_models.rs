//! Models a new user would write, against TensorFlow 2.21 / Keras 3.15.1 in
//! float64: a physics-informed network (third-order nested tapes), a VAE
//! training step (Adam), a GAN step (two tapes, Adam and SGD), and a
//! ResNet-style block with batch normalisation (training, then inference).
//! Each runs eagerly and as a traced `function` (called twice: two training
//! steps, or the PINN at two sets of points; the PINN also with its two
//! inner tapes traced and the outer tape eager around the call, against the
//! same written with a `tf.function`), and every loss, gradient,
//! updated weight and moving statistic is compared with the numbers that
//! `tests/reference/new_user_models.py` (TensorFlow 2.21.0, Keras 3.15.1)
//! wrote to `tests/data/new_user_models.txt`.
//!
//! Tolerance: 1e-12 relative to the larger of an element's magnitude and its
//! vector's largest (tf_util's `agrees`): both sides compute in float64 with
//! the same formulas, so they differ by accumulated roundoff only (the
//! observed differences are reported by each test).

use std::f64::consts::PI;
use std::sync::{Arc, Mutex};

use gradtape::nn::{losses, Activation, BatchNorm, Conv2D, Dense, GlobalPooling, Layer, Module, PoolKind};
use gradtape::optim::{Adam, Optimizer, Sgd};
use gradtape::{function, DType, GradientTape, Padding, Result, Rng, Tensor, Variable};

use super::new_user_util::{adam, fill, names, set_weights, Check};

const DATA: &str = include_str!("../data/new_user_models.txt");

fn dense(inp: usize, units: usize, act: Option<Activation>, rng: &mut Rng) -> Result<Dense> {
    let b = Dense::builder(inp, units).dtype(DType::F64);
    match act {
        Some(a) => b.activation(a).build(rng),
        None => b.build(rng),
    }
}

fn sgd(lr: f64) -> Sgd {
    Sgd::new(lr).momentum(0.875).unwrap()
}

/// A traced function's outputs, as options again.
fn some(v: Vec<Tensor>) -> Vec<Option<Tensor>> {
    v.into_iter().map(Some).collect()
}

// ---- 1. Physics-informed network -------------------------------------------

const PINN_SHAPES: [&[usize]; 6] = [&[2, 8], &[8], &[8, 8], &[8], &[8, 1], &[1]];

fn pinn_weights() -> Vec<Variable> {
    let scale = |j: usize| if j == 0 { 3.0 } else { 1.0 };
    PINN_SHAPES
        .iter()
        .enumerate()
        .map(|(j, s)| Variable::new(fill(s, 1.0 + j as f64, scale(j))))
        .collect()
}

/// u(X) = sin(tanh(X W1 + b1) W2 + b2) W3 + b3.
fn pinn_u(w: &[Variable], x: &Tensor) -> Result<Tensor> {
    let h = x.matmul(&w[0].read())?.add(&w[1].read())?.tanh()?;
    h.matmul(&w[2].read())?
        .add(&w[3].read())?
        .sin()?
        .matmul(&w[4].read())?
        .add(&w[5].read())
}

/// u, the residual u_xx + u_yy + sin(πx) sin(πy), the loss mean(r²), and
/// d loss / d weights: a persistent tape around a second tape, both
/// watching X, inside the tape of the weights.
fn pinn(w: &[Variable], x: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let outer = GradientTape::new();
    let (u, r, loss) = outer.record(|| pinn_residual(w, x))?;
    let grads = outer.gradient(&loss, w)?;
    Ok([Some(u), Some(r), Some(loss)].into_iter().chain(grads).collect())
}

/// u, r and the loss, second derivatives from the two inner tapes.
fn pinn_residual(w: &[Variable], x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    {
        let t1 = GradientTape::persistent();
        let (u, ux, uy) = t1.record(|| {
            t1.watch(x);
            let t2 = GradientTape::new();
            let u = t2.record(|| {
                t2.watch(x);
                pinn_u(w, x)
            })?;
            let g = t2.gradient(&u, x)?.expect("du/dX");
            Ok((u, g.narrow(1, 0, 1)?, g.narrow(1, 1, 1)?))
        })?;
        let uxx = t1.gradient(&ux, x)?.expect("d2u/dx2").narrow(1, 0, 1)?;
        let uyy = t1.gradient(&uy, x)?.expect("d2u/dy2").narrow(1, 1, 1)?;
        let (px, py) = (x.narrow(1, 0, 1)?, x.narrow(1, 1, 1)?);
        let f = px.mul_scalar(PI)?.sin()?.mul(&py.mul_scalar(PI)?.sin()?)?;
        let r = uxx.add(&uyy)?.add(&f)?;
        let loss = r.square()?.mean_all()?;
        Ok((u, r, loss))
    }
}

#[test]
fn physics_informed_network_matches_tensorflow() -> Result<()> {
    let w = pinn_weights();
    let points = [fill(&[16, 2], 0.3, 2.0), fill(&[16, 2], 2.25, 2.0)];
    let mut check = Check::with(DATA, 0.0);
    let traced = {
        let w = w.clone();
        function(move |x: &Tensor| Ok(pinn(&w, x)?.into_iter().flatten().collect::<Vec<_>>()))
    };
    for (c, x) in points.iter().enumerate() {
        let n = names(&format!("pinn{}", c + 1), &["u", "r", "loss"], &[("grad", 6)]);
        check.all_optional("eager", &n, &pinn(&w, x)?);
        check.all_optional("traced", &n, &some(traced.call(x)?));
    }
    // the second points ran the first trace's graph
    assert_eq!(traced.trace_count(), 1);
    // the two inner tapes traced, the outer one eager around the call: the
    // call's gradient (its symbolic gradient, traced) reaches the weights;
    // TensorFlow's reference is the same with a tf.function
    let inner = {
        let w = w.clone();
        function(move |x: &Tensor| {
            let (u, r, loss) = pinn_residual(&w, x)?;
            Ok(vec![u, r, loss])
        })
    };
    for (c, x) in points.iter().enumerate() {
        let outer = GradientTape::new();
        let out = outer.record(|| inner.call(x))?;
        let grads = outer.gradient(&out[2], &w)?;
        let want = names(&format!("pinn{}", c + 1), &["u", "r", "loss"], &[]);
        check.all_optional("outer tape around a call", &want, &some(out));
        // as TensorFlow's call of a tf.function: b3 gets zeros (u, an
        // output of the call, depends on it), not None
        check.all_optional(
            "outer tape around a call",
            &names(&format!("pinn{}_call", c + 1), &[], &[("grad", 6)]),
            &grads,
        );
    }
    assert_eq!(inner.trace_count(), 1);
    check.finish("pinn", 800);
    Ok(())
}

// ---- 2. VAE ----------------------------------------------------------------

struct Vae {
    enc: Dense,
    mu: Dense,
    logvar: Dense,
    dec1: Dense,
    dec2: Dense,
}

impl Vae {
    fn new() -> Result<Vae> {
        let rng = &mut Rng::new(0);
        let tanh = Some(Activation::Tanh);
        let m = Vae {
            enc: dense(8, 6, tanh, rng)?,
            mu: dense(6, 2, None, rng)?,
            logvar: dense(6, 2, None, rng)?,
            dec1: dense(2, 6, tanh, rng)?,
            dec2: dense(6, 8, None, rng)?,
        };
        set_weights(&m.vars(), 10.0);
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        [&self.enc, &self.mu, &self.logvar, &self.dec1, &self.dec2]
            .iter()
            .flat_map(|l| l.trainable_variables())
            .collect()
    }
}

/// One training step: reconstruction (summed sigmoid cross-entropy from
/// logits) + KL, both averaged over the batch; gradients; one Adam step.
fn vae_step(m: &Vae, opt: &mut Adam, x: &Tensor, eps: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let (rec, kl, loss) = tape.record(|| {
        let h = m.enc.forward(x, true)?;
        let (mu, lv) = (m.mu.forward(&h, true)?, m.logvar.forward(&h, true)?);
        let z = mu.add(&lv.mul_scalar(0.5)?.exp()?.mul(eps)?)?;
        let logits = m.dec2.forward(&m.dec1.forward(&z, true)?, true)?;
        let rec = Tensor::sigmoid_cross_entropy_with_logits(x, &logits)?
            .sum(&[1], false)?
            .mean_all()?;
        let inner = lv.add_scalar(1.0)?.sub(&mu.square()?)?.sub(&lv.exp()?)?;
        let kl = inner.sum(&[1], false)?.mul_scalar(-0.5)?.mean_all()?;
        let loss = rec.add(&kl)?;
        Ok((rec, kl, loss))
    })?;
    let grads = tape.gradient(&loss, &vars)?;
    opt.apply_gradients(grads.clone().into_iter().zip(&vars))?;
    Ok([Some(rec), Some(kl), Some(loss)].into_iter().chain(grads).collect())
}

#[test]
fn vae_training_step_matches_tensorflow() -> Result<()> {
    let x = fill(&[6, 8], 0.2, 0.8).add_scalar(0.5)?;
    let eps = fill(&[6, 2], 0.9, 2.0);
    let mut check = Check::with(DATA, 0.0);
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(Vae::new()?);
        let opt = Arc::new(Mutex::new(adam()));
        let step = {
            let (m, opt) = (m.clone(), opt.clone());
            function(move |(x, eps): &(Tensor, Tensor)| {
                Ok(vae_step(&m, &mut opt.lock().unwrap(), x, eps)?
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>())
            })
        };
        for s in 1..=2 {
            let got = if traced {
                some(step.call(&(x.clone(), eps.clone()))?)
            } else {
                vae_step(&m, &mut opt.lock().unwrap(), &x, &eps)?
            };
            check.all_optional(
                what,
                &names(&format!("vae{s}"), &["rec", "kl", "loss"], &[("grad", 10)]),
                &got,
            );
        }
        check.vars(what, "vae_weight", &m.vars());
        assert_eq!(opt.lock().unwrap().iterations(), 2);
    }
    check.finish("vae", 900);
    Ok(())
}

// ---- 3. GAN ----------------------------------------------------------------

struct Gan {
    generator: [Dense; 2],
    disc: [Dense; 2],
    g_opt: Mutex<Adam>,
    d_opt: Mutex<Sgd>,
}

impl Gan {
    fn new() -> Result<Gan> {
        let rng = &mut Rng::new(0);
        let tanh = Some(Activation::Tanh);
        let m = Gan {
            generator: [dense(3, 6, tanh, rng)?, dense(6, 4, None, rng)?],
            disc: [dense(4, 6, tanh, rng)?, dense(6, 1, None, rng)?],
            g_opt: Mutex::new(adam()),
            d_opt: Mutex::new(sgd(0.125)),
        };
        set_weights(&m.g_vars(), 20.0);
        set_weights(&m.d_vars(), 30.0);
        Ok(m)
    }

    fn g_vars(&self) -> Vec<Variable> {
        self.generator.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn d_vars(&self) -> Vec<Variable> {
        self.disc.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn disc(&self, x: &Tensor) -> Result<Tensor> {
        self.disc[1].forward(&self.disc[0].forward(x, true)?, true)
    }
}

/// One GAN step: two tapes record the generator and both discriminator
/// passes; each network's loss is differentiated w.r.t. its own weights
/// and applied by its own optimizer.
fn gan_step(m: &Gan, z: &Tensor, real: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let (gt, dt) = (GradientTape::new(), GradientTape::new());
    let (d_loss, g_loss) =
        gt.record(|| {
            dt.record(|| {
                let fake = m.generator[1].forward(&m.generator[0].forward(z, true)?, true)?;
                let (rl, fl) = (m.disc(real)?, m.disc(&fake)?);
                let d_loss = losses::binary_crossentropy(&rl.ones_like(), &rl, true)?
                    .add(&losses::binary_crossentropy(&fl.zeros_like(), &fl, true)?)?;
                let g_loss = losses::binary_crossentropy(&fl.ones_like(), &fl, true)?;
                Ok((d_loss, g_loss))
            })
        })?;
    let (gv, dv) = (m.g_vars(), m.d_vars());
    let gg = gt.gradient(&g_loss, &gv)?;
    let dg = dt.gradient(&d_loss, &dv)?;
    m.g_opt
        .lock()
        .unwrap()
        .apply_gradients(gg.clone().into_iter().zip(&gv))?;
    m.d_opt
        .lock()
        .unwrap()
        .apply_gradients(dg.clone().into_iter().zip(&dv))?;
    Ok([Some(d_loss), Some(g_loss)].into_iter().chain(gg).chain(dg).collect())
}

#[test]
fn gan_step_matches_tensorflow() -> Result<()> {
    let z = fill(&[8, 3], 0.4, 2.0);
    let real = fill(&[8, 4], 1.1, 2.0).add_scalar(0.5)?;
    let mut check = Check::with(DATA, 0.0);
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(Gan::new()?);
        let step = {
            let m = m.clone();
            function(move |(z, real): &(Tensor, Tensor)| {
                Ok(gan_step(&m, z, real)?.into_iter().flatten().collect::<Vec<_>>())
            })
        };
        for s in 1..=2 {
            let got = if traced {
                some(step.call(&(z.clone(), real.clone()))?)
            } else {
                gan_step(&m, &z, &real)?
            };
            let n = names(
                &format!("gan{s}"),
                &["d_loss", "g_loss"],
                &[("g_grad", 4), ("d_grad", 4)],
            );
            check.all_optional(what, &n, &got);
        }
        check.vars(what, "gan_g_weight", &m.g_vars());
        check.vars(what, "gan_d_weight", &m.d_vars());
    }
    check.finish("gan", 500);
    Ok(())
}

// ---- 4. ResNet-style block with batch normalisation -------------------------

struct ResBlock {
    c1: Conv2D,
    bn1: BatchNorm,
    c2: Conv2D,
    bn2: BatchNorm,
    proj: Conv2D,
    pool: GlobalPooling,
    head: Dense,
}

impl ResBlock {
    fn new() -> Result<ResBlock> {
        let rng = &mut Rng::new(0);
        let conv = |i: usize, k: usize, bias: bool, rng: &mut Rng| {
            Conv2D::builder(i, 4, [k, k])
                .padding(Padding::Same)
                .use_bias(bias)
                .dtype(DType::F64)
                .build(rng)
        };
        let bn = || BatchNorm::with_options(4, 0.875, 1e-3, true, true, DType::F64);
        let m = ResBlock {
            c1: conv(3, 3, false, rng)?,
            bn1: bn()?,
            c2: conv(4, 3, false, rng)?,
            bn2: bn()?,
            proj: conv(3, 1, true, rng)?,
            pool: GlobalPooling::new(PoolKind::Avg, 2)?,
            head: dense(4, 3, None, rng)?,
        };
        // weight j is fill(shape, 40 + j), plus 1 for the two gammas
        for (j, v) in m.vars().iter().enumerate() {
            let gamma = if [1, 4].contains(&j) { 1.0 } else { 0.0 };
            v.assign(&fill(&v.shape(), 40.0 + j as f64, 1.0).add_scalar(gamma)?)?;
        }
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let layers: [&dyn Layer; 6] = [&self.c1, &self.bn1, &self.c2, &self.bn2, &self.proj, &self.head];
        layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    fn stats(&self) -> [&Variable; 4] {
        [
            self.bn1.moving_mean(),
            self.bn1.moving_variance(),
            self.bn2.moving_mean(),
            self.bn2.moving_variance(),
        ]
    }

    /// The logits and the mean sparse softmax cross-entropy.
    fn forward(&self, x: &Tensor, y: &Tensor, training: bool) -> Result<(Tensor, Tensor)> {
        let h = self.bn1.forward(&self.c1.forward(x, training)?, training)?.relu()?;
        let h = self.bn2.forward(&self.c2.forward(&h, training)?, training)?;
        let o = h.add(&self.proj.forward(x, training)?)?.relu()?;
        let logits = self.head.forward(&self.pool.forward(&o, training)?, training)?;
        let loss = losses::sparse_categorical_crossentropy(y, &logits, true)?;
        Ok((logits, loss))
    }
}

fn res_step(m: &ResBlock, opt: &mut Sgd, x: &Tensor, y: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let vars = m.vars();
    let tape = GradientTape::new();
    let (logits, loss) = tape.record(|| m.forward(x, y, true))?;
    let grads = tape.gradient(&loss, &vars)?;
    opt.apply_gradients(grads.clone().into_iter().zip(&vars))?;
    Ok([Some(logits), Some(loss)].into_iter().chain(grads).collect())
}

const STAT_NAMES: [&str; 4] = [
    "bn1_moving_mean",
    "bn1_moving_variance",
    "bn2_moving_mean",
    "bn2_moving_variance",
];

#[test]
fn resnet_block_with_batch_norm_matches_tensorflow() -> Result<()> {
    let x = fill(&[4, 6, 6, 3], 0.5, 2.0);
    let y = Tensor::vector(&[0i64, 2, 1, 2]);
    let mut check = Check::with(DATA, 0.0);
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(ResBlock::new()?);
        let opt = Arc::new(Mutex::new(sgd(0.0625)));
        let step = {
            let (m, opt) = (m.clone(), opt.clone());
            function(move |(x, y): &(Tensor, Tensor)| {
                Ok(res_step(&m, &mut opt.lock().unwrap(), x, y)?
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>())
            })
        };
        for s in 1..=2 {
            let got = if traced {
                some(step.call(&(x.clone(), y.clone()))?)
            } else {
                res_step(&m, &mut opt.lock().unwrap(), &x, &y)?
            };
            check.all_optional(
                what,
                &names(&format!("res{s}"), &["logits", "loss"], &[("grad", 10)]),
                &got,
            );
            // the moving statistics after this step
            for (n, v) in STAT_NAMES.iter().zip(m.stats()) {
                check.one(what, &format!("res{s}_{n}"), Some(&v.read()));
            }
        }
        check.vars(what, "res_weight", &m.vars());
        // inference: the moving statistics, and they stay as they are
        let before: Vec<Vec<f64>> = m.stats().iter().map(|v| v.read().to_vec_f64()).collect();
        let (logits, loss) = if traced {
            let mi = m.clone();
            let f = function(move |(x, y): &(Tensor, Tensor)| {
                let (l, s) = mi.forward(x, y, false)?;
                Ok(vec![l, s])
            });
            let out = f.call(&(x.clone(), y.clone()))?;
            (out[0].clone(), out[1].clone())
        } else {
            m.forward(&x, &y, false)?
        };
        check.one(what, "res_inference_logits", Some(&logits));
        check.one(what, "res_inference_loss", Some(&loss));
        let after: Vec<Vec<f64>> = m.stats().iter().map(|v| v.read().to_vec_f64()).collect();
        assert_eq!(before, after, "{what}: inference moved the statistics");
    }
    check.finish("resnet", 1800);
    Ok(())
}
