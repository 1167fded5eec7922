//! The float32, larger-size models of `new_user_scaled.rs` (see there):
//! a RealNVP flow, a neural ODE (while_loop), a U-Net, a text classifier
//! (masked bidirectional GRU and a Conv1D branch), an AdamW loop with
//! gradient accumulation and clipping.

use std::sync::Mutex;

use gradtape::nn::{
    losses, Activation, Bidirectional, Conv1D, Conv2D, Conv2DTranspose, Dense, Embedding, GlobalPooling, Layer, Merge,
    Pool2D, PoolKind, SequenceLayer, UpSampling2D, GRU,
};
use gradtape::optim::{clip_by_global_norm, Adam, AdamW, CosineDecay, Optimizer, Sgd};
use gradtape::{while_loop, GradientTape, Padding, ResizeMethod, Result, Rng, Tensor, Variable, WhileOptions};

use super::new_user_scaled::{dense, differential, ints, Model, F};

type Timing = (&'static str, &'static str, (f64, f64));

fn vars_of(layers: &[&dyn Layer]) -> Vec<Variable> {
    layers.iter().flat_map(|l| l.variables()).collect()
}

/// Gradients of `loss` applied by `opt`; the loss returned.
fn apply<O: Optimizer>(opt: &Mutex<O>, tape: &GradientTape, loss: Tensor, vars: &[Variable]) -> Result<Vec<Tensor>> {
    let grads = tape.gradient(&loss, vars)?;
    opt.lock().unwrap().apply_gradients(grads.into_iter().zip(vars))?;
    Ok(vec![loss])
}

// ---- RealNVP ------------------------------------------------------------------

struct Flow {
    couplings: Vec<[Dense; 3]>,
    opt: Mutex<Adam>,
}

impl Model for Flow {
    fn vars(&self) -> Vec<Variable> {
        self.couplings
            .iter()
            .flat_map(|c| vars_of(&[&c[0], &c[1], &c[2]]))
            .collect()
    }

    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let nll = tape.record(|| {
            let mut x = d[0].clone();
            let mut logdet = x.narrow(1, 0, 1)?.squeeze(&[1])?.zeros_like();
            for c in &self.couplings {
                let half = x.split(2, 1)?;
                let h = c[0].call(&half[0])?;
                let s = c[1].call(&h)?.tanh()?;
                let y2 = half[1].mul(&s.exp()?)?.add(&c[2].call(&h)?)?;
                x = Tensor::concat(&[&y2, &half[0]], 1)?;
                logdet = logdet.add(&s.sum(&[1], false)?)?;
            }
            let logp = x.square()?.sum(&[1], false)?.mul_scalar(-0.5)?;
            logp.add(&logdet)?.mean_all()?.neg()
        })?;
        apply(&self.opt, &tape, nll, &vars)
    }
}

// ---- neural ODE ---------------------------------------------------------------

struct Ode {
    l1: Dense,
    l2: Dense,
    opt: Mutex<Sgd>,
}

impl Ode {
    fn rk4(&self, y: &Tensor) -> Result<Tensor> {
        let f = |y: &Tensor| self.l2.call(&self.l1.call(y)?);
        let dt = 0.0625;
        let k1 = f(y)?;
        let k2 = f(&y.add(&k1.mul_scalar(dt / 2.0)?)?)?;
        let k3 = f(&y.add(&k2.mul_scalar(dt / 2.0)?)?)?;
        let k4 = f(&y.add(&k3.mul_scalar(dt)?)?)?;
        let s = k1.add(&k2.mul_scalar(2.0)?)?.add(&k3.mul_scalar(2.0)?)?.add(&k4)?;
        y.add(&s.mul_scalar(dt / 6.0)?)
    }
}

impl Model for Ode {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.l1, &self.l2])
    }

    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let (_, y1) = while_loop(
                |v: &(Tensor, Tensor)| v.0.lt(&Tensor::scalar(16i64)),
                |v: &(Tensor, Tensor)| Ok((v.0.add(&Tensor::scalar(1i64))?, self.rk4(&v.1)?)),
                (Tensor::scalar(0i64), d[0].clone()),
                WhileOptions::default(),
            )?;
            losses::mean_squared_error(&d[1], &y1)
        })?;
        apply(&self.opt, &tape, loss, &vars)
    }
}

// ---- U-Net --------------------------------------------------------------------

struct UNet {
    convs: [Conv2D; 5],
    t: Conv2DTranspose,
    pool: Pool2D,
    up: UpSampling2D,
    opt: Mutex<Adam>,
}

impl Model for UNet {
    fn vars(&self) -> Vec<Variable> {
        let c = &self.convs;
        vars_of(&[&c[0], &c[1], &self.t, &c[2], &c[3], &c[4]])
    }

    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let c = &self.convs;
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let e1 = c[0].call(&d[0])?;
            let e2 = c[1].call(&self.pool.call(&e1)?)?;
            let u = self.t.call(&e2)?.add(&c[2].call(&self.up.call(&e2)?)?)?;
            let logits = c[4].call(&c[3].call(&Tensor::concat(&[&u, &e1], -1)?)?)?;
            losses::binary_crossentropy(&d[1], &logits, true)
        })?;
        apply(&self.opt, &tape, loss, &vars)
    }
}

// ---- text classifier ------------------------------------------------------------

struct Text {
    emb: Embedding,
    bi: Bidirectional,
    conv: Conv1D,
    pool: GlobalPooling,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Model for Text {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.emb, &self.bi, &self.conv, &self.head])
    }

    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let e = self.emb.call(&d[0])?;
            let mask = self.emb.compute_mask(&d[0])?;
            let r = self.bi.forward_masked(&e, mask.as_ref(), true)?;
            let c = self.pool.call(&self.conv.call(&e)?)?;
            let logits = self.head.call(&Tensor::concat(&[&r, &c], 1)?)?;
            losses::sparse_categorical_crossentropy(&d[1], &logits, true)
        })?;
        apply(&self.opt, &tape, loss, &vars)
    }
}

// ---- AdamW loop -------------------------------------------------------------------

struct Loop {
    l1: Dense,
    l2: Dense,
    opt: Mutex<AdamW>,
}

impl Model for Loop {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.l1, &self.l2])
    }

    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let micro = 4;
        let rows = d[0].shape()[0] / micro;
        let mut acc: Vec<Option<Tensor>> = vec![None; vars.len()];
        let mut total = d[0].sum_all()?.zeros_like();
        for mb in 0..micro {
            let (xb, yb) = (d[0].narrow(0, rows * mb, rows)?, d[1].narrow(0, rows * mb, rows)?);
            let tape = GradientTape::new();
            let loss = tape
                .record(|| losses::sparse_categorical_crossentropy(&yb, &self.l2.call(&self.l1.call(&xb)?)?, true))?;
            for (a, g) in acc.iter_mut().zip(tape.gradient(&loss, &vars)?) {
                let g = g.expect("gradient");
                *a = Some(match a.take() {
                    Some(s) => s.add(&g)?,
                    None => g,
                });
            }
            total = total.add(&loss)?;
        }
        let mean: Vec<Option<Tensor>> = acc
            .into_iter()
            .map(|a| a.map(|g| g.div_scalar(micro as f64)).transpose())
            .collect::<Result<_>>()?;
        let (clipped, norm) = clip_by_global_norm(&mean, 1.0)?;
        self.opt
            .lock()
            .unwrap()
            .apply_gradients(clipped.into_iter().zip(&vars))?;
        Ok(vec![total.div_scalar(micro as f64)?, norm])
    }
}

pub(super) fn run_all() -> Result<Vec<Timing>> {
    let mut out = Vec::new();
    let mut rng = Rng::new(11);

    let data = vec![rng.normal(&[256, 8], 0.0, 1.0, F)?];
    let build = || {
        let rng = &mut Rng::new(1);
        let couplings = (0..4)
            .map(|_| {
                Ok([
                    dense(4, 64, Activation::Relu, rng)?,
                    dense(64, 4, Activation::Linear, rng)?,
                    dense(64, 4, Activation::Linear, rng)?,
                ])
            })
            .collect::<Result<_>>()?;
        Ok(Flow {
            couplings,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    out.push((
        "realnvp",
        "batch 256, 8 features, 4 couplings, hidden 64",
        differential("realnvp", build, data)?,
    ));

    let data = vec![rng.normal(&[64, 4], 0.0, 1.0, F)?, rng.normal(&[64, 4], 0.0, 1.0, F)?];
    let build = || {
        let rng = &mut Rng::new(1);
        Ok(Ode {
            l1: dense(4, 64, Activation::Tanh, rng)?,
            l2: dense(64, 4, Activation::Linear, rng)?,
            opt: Mutex::new(Sgd::new(0.05).momentum(0.9)?),
        })
    };
    out.push((
        "neural ODE",
        "batch 64, 4 -> 64 -> 4, RK4 x 16 in a while_loop",
        differential("ode", build, data)?,
    ));

    let x = rng.normal(&[4, 32, 32, 3], 0.0, 1.0, F)?;
    let y = rng.uniform(&[4, 32, 32, 1], 0.0, 1.0, F)?.gt_scalar(0.5)?.cast(F)?;
    let build = || {
        let rng = &mut Rng::new(1);
        let conv = |i, o, k: usize, act, rng: &mut Rng| {
            Conv2D::builder(i, o, [k, k])
                .padding(Padding::Same)
                .activation(act)
                .build(rng)
        };
        Ok(UNet {
            convs: [
                conv(3, 16, 3, Activation::Relu, rng)?,
                conv(16, 32, 3, Activation::Relu, rng)?,
                conv(32, 16, 1, Activation::Linear, rng)?,
                conv(32, 16, 3, Activation::Relu, rng)?,
                conv(16, 1, 1, Activation::Linear, rng)?,
            ],
            t: Conv2DTranspose::builder(32, 16, [2, 2])
                .strides([2, 2])
                .padding(Padding::Same)
                .build(rng)?,
            pool: Pool2D::new(PoolKind::Max, [2, 2], [2, 2], Padding::Valid),
            up: UpSampling2D::new([2, 2], ResizeMethod::Bilinear)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    out.push((
        "u-net",
        "batch 4, 32x32x3, 16/32 channels",
        differential("unet", build, vec![x, y])?,
    ));

    // token ids with padding (0) at the end of each row: lengths 5..=24
    let (b, t, vocab) = (16, 24, 200);
    let mut ids = ints(&mut rng, &[b, t], vocab - 1)?
        .add(&Tensor::scalar(1i64))?
        .to_vec::<i64>()?;
    for r in 0..b {
        for c in (5 + r)..t {
            ids[r * t + c] = 0;
        }
    }
    let data = vec![Tensor::from_vec(ids, &[b, t])?, ints(&mut rng, &[b], 4)?];
    let build = || {
        let rng = &mut Rng::new(1);
        Ok(Text {
            emb: Embedding::builder(vocab, 32).mask_zero(true).build(rng)?,
            bi: Bidirectional::new(
                GRU::builder(32, 32).build(rng)?,
                GRU::builder(32, 32).build(rng)?,
                Merge::Concat,
            ),
            conv: Conv1D::builder(32, 32, 3)
                .padding(Padding::Same)
                .activation(Activation::Relu)
                .build(rng)?,
            pool: GlobalPooling::new(PoolKind::Max, 1)?,
            head: dense(96, 4, Activation::Linear, rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    out.push((
        "text classifier",
        "batch 16, 24 tokens, vocab 200, dim 32, BiGRU 32 + Conv1D 32",
        differential("text", build, data)?,
    ));

    let data = vec![rng.normal(&[128, 64], 0.0, 1.0, F)?, ints(&mut rng, &[128], 10)?];
    let build = || {
        let rng = &mut Rng::new(1);
        Ok(Loop {
            l1: dense(64, 128, Activation::Gelu, rng)?,
            l2: dense(128, 10, Activation::Linear, rng)?,
            opt: Mutex::new(AdamW::new(CosineDecay::new(1e-3, 10)).weight_decay(0.01)),
        })
    };
    out.push((
        "adamw loop",
        "4 micro-batches of 32, MLP 64 -> 128 -> 10",
        differential("adamw", build, data)?,
    ));
    Ok(out)
}
