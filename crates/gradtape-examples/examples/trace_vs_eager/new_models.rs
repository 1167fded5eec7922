//! The harness's models written as a new user would write them from the
//! README and the docs, each a different mix of ops from the models in
//! `main.rs` and `more_models.rs`: a ViT, a convolutional autoencoder, a
//! WaveNet-like dilated causal convolution stack, an MLP with BatchNorm,
//! Dropout and an L2 penalty, a graph network (gather and
//! `unsorted_segment_sum`), a VAE drawing its noise inside the step, an
//! RK4 spring-mass chain unrolled in Rust, and a Hessian-vector product
//! (a Cauchy step of Newton's method) inside the step.

use super::*;
use gradtape::nn::{AttentionArgs, BatchNorm, Conv1D, Conv2DTranspose, Dropout, LayerNorm, MultiHeadAttention};

/// Gradients of `loss` applied to the trainable `vars` by `opt`.
fn step_with<O: Optimizer>(opt: &Mutex<O>, tape: &GradientTape, loss: &Tensor, vars: &[Variable]) -> Result<()> {
    apply(opt, tape, loss, vars)
}

// ---- ViT ---------------------------------------------------------------------

struct VitBlock {
    ln1: LayerNorm,
    attn: MultiHeadAttention,
    ln2: LayerNorm,
    up: Dense,
    down: Dense,
}

impl VitBlock {
    fn new(width: usize, heads: usize, rng: &mut Rng) -> Result<VitBlock> {
        Ok(VitBlock {
            ln1: LayerNorm::new(width, F)?,
            // (no projection biases, as many ViTs: the key bias's gradient
            // is zero but for rounding (a softmax does not see a constant
            // added to a row's scores), which Adam would amplify into noise
            // the comparison cannot judge)
            attn: MultiHeadAttention::builder(heads, width / heads)
                .use_bias(false)
                .build(width, rng)?,
            ln2: LayerNorm::new(width, F)?,
            up: dense(width, 2 * width, Activation::Gelu, rng)?,
            down: dense(2 * width, width, Activation::Linear, rng)?,
        })
    }
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.ln1, &self.attn, &self.ln2, &self.up, &self.down])
    }
    fn call(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.ln1.call(x)?;
        let x = x.add(&self.attn.call_with(&h, &h, AttentionArgs::new())?)?;
        x.add(&self.down.call(&self.up.call(&self.ln2.call(&x)?)?)?)
    }
}

/// A ViT-style classifier: `[b, side, side, c]` images cut into `p x p`
/// patches by reshape and permute, a linear patch embedding, a learned
/// class token (concatenated in front) and learned positions, pre-LN
/// blocks of `MultiHeadAttention` and a GELU MLP, a head on the class
/// token; softmax cross-entropy, Adam.
pub(super) struct Vit {
    patch: usize,
    embed: Dense,
    cls: Variable,
    pos: Variable,
    blocks: Vec<VitBlock>,
    ln: LayerNorm,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Model for Vit {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.embed.variables();
        v.push(self.cls.clone());
        v.push(self.pos.clone());
        for b in &self.blocks {
            v.extend(b.vars());
        }
        v.extend(vars_of(&[&self.ln, &self.head]));
        v
    }
    /// data: images [b, side, side, c], labels [b]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let (b, side, c) = (d[0].shape()[0], d[0].shape()[1], d[0].shape()[3]);
        let (p, n) = (self.patch, side / self.patch);
        let width = self.cls.shape()[2];
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let patches = d[0]
                .reshape(&[b, n, p, n, p, c])?
                .permute(&[0, 1, 3, 2, 4, 5])?
                .reshape(&[b, n * n, p * p * c])?;
            let tokens = self.embed.call(&patches)?;
            let cls = self.cls.read().broadcast_to(&[b, 1, width])?;
            let mut h = Tensor::concat(&[&cls, &tokens], 1)?.add(&self.pos.read())?;
            for blk in &self.blocks {
                h = blk.call(&h)?;
            }
            let first = self
                .ln
                .call(&h.slice(&[0, 0, 0], &[b, 1, width])?.reshape(&[b, width])?)?;
            losses::sparse_categorical_crossentropy(&d[1], &self.head.call(&first)?, true)
        })?;
        step_with(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn vit(
    batch: usize,
    side: usize,
    patch: usize,
    width: usize,
    heads: usize,
) -> Result<(impl Fn() -> Result<Vit>, Vec<Tensor>)> {
    let mut rng = Rng::new(31);
    let data = vec![
        rng.normal(&[batch, side, side, 3], 0.0, 1.0, F)?,
        labels(&mut rng, batch, 10)?,
    ];
    let tokens = (side / patch) * (side / patch) + 1;
    let build = move || {
        let rng = &mut Rng::new(32);
        Ok(Vit {
            patch,
            embed: dense(patch * patch * 3, width, Activation::Linear, rng)?,
            cls: Variable::new(rng.normal(&[1, 1, width], 0.0, 0.02, F)?),
            pos: Variable::new(rng.normal(&[tokens, width], 0.0, 0.02, F)?),
            blocks: (0..2)
                .map(|_| VitBlock::new(width, heads, rng))
                .collect::<Result<_>>()?,
            ln: LayerNorm::new(width, F)?,
            head: dense(width, 10, Activation::Linear, rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- convolutional autoencoder ---------------------------------------------

/// Two stride-2 `Conv2D`s down, two stride-2 `Conv2DTranspose`s up, a
/// sigmoid output; MSE against the input, Adam.
pub(super) struct ConvAe {
    down: [Conv2D; 2],
    up: [Conv2DTranspose; 2],
    opt: Mutex<Adam>,
}

impl Model for ConvAe {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.down[0], &self.down[1], &self.up[0], &self.up[1]])
    }
    /// data: images [b, side, side, 1] in (0, 1)
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = self.down[1].call(&self.down[0].call(&d[0])?)?;
            let y = self.up[1].call(&self.up[0].call(&h)?)?.sigmoid()?;
            losses::mean_squared_error(&d[0], &y)
        })?;
        step_with(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn conv_ae(batch: usize, side: usize, c: [usize; 2]) -> Result<(impl Fn() -> Result<ConvAe>, Vec<Tensor>)> {
    let mut rng = Rng::new(33);
    let data = vec![rng.uniform(&[batch, side, side, 1], 0.0, 1.0, F)?];
    let build = move || {
        let rng = &mut Rng::new(34);
        let down = |i, o, rng: &mut Rng| {
            Conv2D::builder(i, o, [3, 3])
                .strides([2, 2])
                .padding(Padding::Same)
                .activation(Activation::Relu)
                .build(rng)
        };
        let up = |i, o, act, rng: &mut Rng| {
            Conv2DTranspose::builder(i, o, [3, 3])
                .strides([2, 2])
                .padding(Padding::Same)
                .activation(act)
                .build(rng)
        };
        Ok(ConvAe {
            down: [down(1, c[0], rng)?, down(c[0], c[1], rng)?],
            up: [
                up(c[1], c[0], Activation::Relu, rng)?,
                up(c[0], 1, Activation::Linear, rng)?,
            ],
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- WaveNet-like ----------------------------------------------------------

/// A causal `Conv1D` input layer, then dilated causal convolutions (rates
/// 1, 2, 4, 8) with gated units `tanh(f) * sigmoid(g)`, a 1x1 convolution
/// back to the residual width, residual connections and summed skips; a
/// 1x1 output predicting the next sample; MSE, Adam.
pub(super) struct WaveNet {
    input: Conv1D,
    filt: Vec<Conv1D>,
    gate: Vec<Conv1D>,
    res: Vec<Conv1D>,
    out: Conv1D,
    opt: Mutex<Adam>,
}

impl Model for WaveNet {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.input.variables();
        for k in 0..self.filt.len() {
            v.extend(vars_of(&[&self.filt[k], &self.gate[k], &self.res[k]]));
        }
        v.extend(self.out.variables());
        v
    }
    /// data: signal [b, t, 1], next samples [b, t, 1]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let mut h = self.input.call(&d[0])?;
            let mut skip: Option<Tensor> = None;
            for k in 0..self.filt.len() {
                let z = self.filt[k].call(&h)?.tanh()?.mul(&self.gate[k].call(&h)?.sigmoid()?)?;
                let r = self.res[k].call(&z)?;
                skip = Some(match skip {
                    Some(s) => s.add(&r)?,
                    None => r.clone(),
                });
                h = h.add(&r)?;
            }
            let y = self.out.call(&skip.expect("a layer").relu()?)?;
            losses::mean_squared_error(&d[1], &y)
        })?;
        step_with(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn wavenet(batch: usize, t: usize, ch: usize) -> Result<(impl Fn() -> Result<WaveNet>, Vec<Tensor>)> {
    let mut rng = Rng::new(35);
    let signal = rng.normal(&[batch, t + 1, 1], 0.0, 1.0, F)?;
    let data = vec![
        signal.slice(&[0, 0, 0], &[batch, t, 1])?,
        signal.slice(&[0, 1, 0], &[batch, t, 1])?,
    ];
    let build = move || {
        let rng = &mut Rng::new(36);
        let causal =
            |i, o, k, rate, rng: &mut Rng| Conv1D::builder(i, o, k).dilation_rate(rate).causal(true).build(rng);
        let rates = [1i64, 2, 4, 8];
        Ok(WaveNet {
            input: causal(1, ch, 2, 1, rng)?,
            filt: rates
                .iter()
                .map(|&r| causal(ch, ch, 2, r, rng))
                .collect::<Result<_>>()?,
            gate: rates
                .iter()
                .map(|&r| causal(ch, ch, 2, r, rng))
                .collect::<Result<_>>()?,
            res: rates.iter().map(|_| causal(ch, ch, 1, 1, rng)).collect::<Result<_>>()?,
            out: causal(ch, 1, 1, 1, rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- MLP with BatchNorm, Dropout, L2 -------------------------------------

/// Dense, BatchNorm (training mode: batch statistics, the moving averages
/// updated), ReLU and Dropout twice, a Dense head; softmax cross-entropy
/// plus `1e-4 Σ‖kernel‖²`; Adam on the trainable weights. (At batch 512,
/// 256-1024-1024 one batch-normalised value lands within 1e-7 of zero,
/// `-4.5e-8` eagerly and `+3.3e-8` in f64 and in the fused graph: the
/// ReLU's gradient at that element flips, the batch norm's backward
/// spreads it over its column, and the comparison reports DIFFERENT. A
/// kink, not a bug; the larger size here is batch 256.)
pub(super) struct BnMlp {
    dense: [Dense; 3],
    bn: [BatchNorm; 2],
    drop: Dropout,
    opt: Mutex<Adam>,
}

impl Model for BnMlp {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.dense[0], &self.bn[0], &self.dense[1], &self.bn[1], &self.dense[2]])
    }
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let train: Vec<Variable> = self.vars().into_iter().filter(|v| v.trainable()).collect();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let mut h = d[0].clone();
            for k in 0..2 {
                h = self.dense[k].call(&h)?;
                h = self.bn[k].forward(&h, true)?.relu()?;
                h = self.drop.forward(&h, true)?;
            }
            let ce = losses::sparse_categorical_crossentropy(&d[1], &self.dense[2].call(&h)?, true)?;
            let l2 = self
                .dense
                .iter()
                .map(|l| l.variables()[0].read().square()?.sum_all())
                .collect::<Result<Vec<_>>>()?;
            let l2 = l2[1..].iter().try_fold(l2[0].clone(), |a, b| a.add(b))?;
            ce.add(&l2.mul_scalar(1e-4)?)
        })?;
        step_with(&self.opt, &tape, &loss, &train)?;
        Ok(vec![loss])
    }
}

pub(super) fn bn_mlp(batch: usize, sizes: [usize; 3]) -> Result<(impl Fn() -> Result<BnMlp>, Vec<Tensor>)> {
    let mut rng = Rng::new(37);
    let data = vec![
        rng.normal(&[batch, sizes[0]], 0.0, 1.0, F)?,
        labels(&mut rng, batch, 10)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(38);
        Ok(BnMlp {
            dense: [
                // (no bias before a BatchNorm, as Keras users write it: its
                // gradient is zero but for rounding, which Adam would
                // amplify into noise the comparison cannot judge)
                Dense::builder(sizes[0], sizes[1]).use_bias(false).build(rng)?,
                Dense::builder(sizes[1], sizes[2]).use_bias(false).build(rng)?,
                dense(sizes[2], 10, Activation::Linear, rng)?,
            ],
            bn: [BatchNorm::new(sizes[1], F)?, BatchNorm::new(sizes[2], F)?],
            drop: Dropout::new(0.2, rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- graph network ---------------------------------------------------------

/// Message passing on a fixed random graph: each of `rounds` rounds
/// gathers the source node's features for every edge, transforms them (a
/// Dense), sums them into the target nodes (`unsorted_segment_sum`), and
/// updates every node with a Dense on `[h, messages]`; a mean readout and
/// a Dense predict one number per node; MSE, Adam.
pub(super) struct Gnn {
    msg: Vec<Dense>,
    upd: Vec<Dense>,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Model for Gnn {
    fn vars(&self) -> Vec<Variable> {
        let mut v = Vec::new();
        for k in 0..self.msg.len() {
            v.extend(vars_of(&[&self.msg[k], &self.upd[k]]));
        }
        v.extend(self.head.variables());
        v
    }
    /// data: node features [n, f], edge sources [e], edge targets [e],
    /// node targets [n, 1]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let n = d[0].shape()[0];
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let mut h = d[0].clone();
            for k in 0..self.msg.len() {
                let m = self.msg[k].call(&h.gather(&d[1], 0)?)?;
                let agg = m.unsorted_segment_sum(&d[2], n)?;
                h = self.upd[k].call(&Tensor::concat(&[&h, &agg], 1)?)?;
            }
            let pooled = h.mean(&[0], true)?.broadcast_to(h.shape())?;
            let y = self.head.call(&h.add(&pooled)?)?;
            losses::mean_squared_error(&d[3], &y)
        })?;
        step_with(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn gnn(
    nodes: usize,
    edges: usize,
    feat: usize,
    hidden: usize,
) -> Result<(impl Fn() -> Result<Gnn>, Vec<Tensor>)> {
    let mut rng = Rng::new(39);
    let data = vec![
        rng.normal(&[nodes, feat], 0.0, 1.0, F)?,
        labels(&mut rng, edges, nodes)?,
        labels(&mut rng, edges, nodes)?,
        rng.normal(&[nodes, 1], 0.0, 1.0, F)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(40);
        let (mut msg, mut upd) = (Vec::new(), Vec::new());
        let mut w = feat;
        for _ in 0..2 {
            msg.push(dense(w, hidden, Activation::Relu, rng)?);
            upd.push(dense(w + hidden, hidden, Activation::Relu, rng)?);
            w = hidden;
        }
        Ok(Gnn {
            msg,
            upd,
            head: dense(hidden, 1, Activation::Linear, rng)?,
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- VAE -------------------------------------------------------------------

/// A VAE on vectors in (0, 1): an encoder to a mean and a log-variance,
/// `z = μ + exp(½ log σ²) ε` with `ε` drawn from the model's `Rng` inside
/// the step (a new draw each step, the same in the traced step), a
/// decoder to logits; binary cross-entropy plus the KL divergence, Adam.
pub(super) struct Vae {
    enc: Dense,
    mu: Dense,
    logvar: Dense,
    dec: (Dense, Dense),
    rng: Mutex<Rng>,
    opt: Mutex<Adam>,
}

impl Model for Vae {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.enc, &self.mu, &self.logvar, &self.dec.0, &self.dec.1])
    }
    /// data: x [b, d]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let b = d[0].shape()[0];
        let latent = self.mu.variables()[0].shape()[1];
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = self.enc.call(&d[0])?;
            let (mu, lv) = (self.mu.call(&h)?, self.logvar.call(&h)?);
            let eps = self.rng.lock().unwrap().normal(&[b, latent], 0.0, 1.0, F)?;
            let z = mu.add(&lv.mul_scalar(0.5)?.exp()?.mul(&eps)?)?;
            let logits = self.dec.1.call(&self.dec.0.call(&z)?)?;
            let rec = losses::binary_crossentropy(&d[0], &logits, true)?;
            // KL(q || N(0, 1)) = -½ Σ (1 + log σ² - μ² - σ²), per example
            let kl = lv
                .add_scalar(1.0)?
                .sub(&mu.square()?)?
                .sub(&lv.exp()?)?
                .sum_all()?
                .mul_scalar(-0.5 / b as f64)?;
            rec.add(&kl)
        })?;
        step_with(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn vae(
    batch: usize,
    dim: usize,
    hidden: usize,
    latent: usize,
) -> Result<(impl Fn() -> Result<Vae>, Vec<Tensor>)> {
    let mut rng = Rng::new(41);
    let data = vec![rng.uniform(&[batch, dim], 0.0, 1.0, F)?];
    let build = move || {
        let rng = &mut Rng::new(42);
        Ok(Vae {
            enc: dense(dim, hidden, Activation::Relu, rng)?,
            mu: dense(hidden, latent, Activation::Linear, rng)?,
            logvar: dense(hidden, latent, Activation::Linear, rng)?,
            dec: (
                dense(latent, hidden, Activation::Relu, rng)?,
                dense(hidden, dim, Activation::Linear, rng)?,
            ),
            rng: Mutex::new(rng.split()),
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    Ok((build, data))
}

// ---- RK4 spring-mass chain -------------------------------------------------

/// A chain of masses between two walls joined by springs of learned
/// stiffness `k` (`[n + 1]`) with a learned damping `c`, integrated by
/// RK4 for `steps` steps unrolled in Rust (no `while_loop`: a trace of a
/// few thousand small ops); the loss is the mean final energy over a batch
/// of initial conditions, and SGD lowers it.
pub(super) struct Rk4 {
    k: Variable,
    c: Variable,
    steps: usize,
    opt: Mutex<Sgd>,
}

impl Rk4 {
    /// The extensions of the springs `[b, n + 1]` of positions `x [b, n]`.
    fn stretch(x: &Tensor) -> Result<Tensor> {
        let (b, n) = (x.shape()[0], x.shape()[1]);
        let z = Tensor::zeros(&[b, 1], F);
        let xp = Tensor::concat(&[&z, x, &z], 1)?;
        xp.slice(&[0, 1], &[b, n + 1])?.sub(&xp.slice(&[0, 0], &[b, n + 1])?)
    }
    /// `(dx/dt, dv/dt)` at `(x, v)`.
    fn deriv(&self, k: &Tensor, c: &Tensor, x: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, n) = (x.shape()[0], x.shape()[1]);
        let t = Self::stretch(x)?.mul(k)?;
        let f = t.slice(&[0, 1], &[b, n])?.sub(&t.slice(&[0, 0], &[b, n])?)?;
        Ok((v.clone(), f.sub(&v.mul(c)?)?))
    }
}

impl Model for Rk4 {
    fn vars(&self) -> Vec<Variable> {
        vec![self.k.clone(), self.c.clone()]
    }
    /// data: positions [b, n], velocities [b, n]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let dt = 0.05;
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let (k, c) = (self.k.read(), self.c.read());
            let (mut x, mut v) = (d[0].clone(), d[1].clone());
            let axpy = |a: &Tensor, s: f64, b: &Tensor| a.add(&b.mul_scalar(s)?);
            for _ in 0..self.steps {
                let (a1, b1) = self.deriv(&k, &c, &x, &v)?;
                let (a2, b2) = self.deriv(&k, &c, &axpy(&x, dt / 2.0, &a1)?, &axpy(&v, dt / 2.0, &b1)?)?;
                let (a3, b3) = self.deriv(&k, &c, &axpy(&x, dt / 2.0, &a2)?, &axpy(&v, dt / 2.0, &b2)?)?;
                let (a4, b4) = self.deriv(&k, &c, &axpy(&x, dt, &a3)?, &axpy(&v, dt, &b3)?)?;
                let comb = |p: &Tensor, q1: &Tensor, q2: &Tensor, q3: &Tensor, q4: &Tensor| {
                    p.add(
                        &q1.add(&q2.mul_scalar(2.0)?)?
                            .add(&q3.mul_scalar(2.0)?)?
                            .add(q4)?
                            .mul_scalar(dt / 6.0)?,
                    )
                };
                x = comb(&x, &a1, &a2, &a3, &a4)?;
                v = comb(&v, &b1, &b2, &b3, &b4)?;
            }
            let energy = v
                .square()?
                .sum_all()?
                .add(&Self::stretch(&x)?.square()?.mul(&k)?.sum_all()?)?;
            energy.mul_scalar(0.5 / x.shape()[0] as f64)
        })?;
        step_with(&self.opt, &tape, &loss, &vars)?;
        Ok(vec![loss])
    }
}

pub(super) fn rk4(batch: usize, n: usize, steps: usize) -> Result<(impl Fn() -> Result<Rk4>, Vec<Tensor>)> {
    let mut rng = Rng::new(43);
    let data = vec![
        rng.normal(&[batch, n], 0.0, 0.5, F)?,
        rng.normal(&[batch, n], 0.0, 0.5, F)?,
    ];
    let build = move || {
        let rng = &mut Rng::new(44);
        Ok(Rk4 {
            k: Variable::new(rng.uniform(&[n + 1], 0.5, 1.5, F)?),
            c: Variable::new(Tensor::scalar(0.1f32)),
            steps,
            opt: Mutex::new(Sgd::new(0.01)),
        })
    };
    Ok((build, data))
}

// ---- Hessian-vector product: a Newton-Cauchy step --------------------------

/// A two-layer tanh regressor trained by steepest descent with the exact
/// step along the gradient from the local quadratic: `g` from an inner
/// tape, `Hg` by differentiating `g · stop(g)` on an outer tape (a
/// Hessian-vector product, reverse over reverse), the step `α = g·g /
/// g·Hg` (clipped to [0, 1]); the weights updated by `assign_sub`.
/// Returns the loss and `α`.
pub(super) struct Newton {
    w1: Variable,
    w2: Variable,
}

impl Model for Newton {
    fn vars(&self) -> Vec<Variable> {
        vec![self.w1.clone(), self.w2.clone()]
    }
    /// data: x [b, d], y [b, 1]
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let outer = GradientTape::new();
        let (loss, g, gv) = outer.record(|| {
            let inner = GradientTape::new();
            let loss = inner.record(|| {
                let h = d[0].matmul(&self.w1.read())?.tanh()?;
                losses::mean_squared_error(&d[1], &h.matmul(&self.w2.read())?)
            })?;
            let g: Vec<Tensor> = inner
                .gradient(&loss, &vars)?
                .into_iter()
                .map(|g| g.expect("connected"))
                .collect();
            let gv = g[0]
                .mul(&g[0].stop_gradient())?
                .sum_all()?
                .add(&g[1].mul(&g[1].stop_gradient())?.sum_all()?)?;
            Ok((loss, g, gv))
        })?;
        let hv: Vec<Tensor> = outer
            .gradient(&gv, &vars)?
            .into_iter()
            .map(|h| h.expect("connected"))
            .collect();
        let ghg = g[0].mul(&hv[0])?.sum_all()?.add(&g[1].mul(&hv[1])?.sum_all()?)?;
        let alpha = gv.div(&ghg.abs()?.add_scalar(1e-6)?)?.clip_by_value(0.0, 1.0)?;
        for (v, g) in vars.iter().zip(&g) {
            v.assign_sub(&g.mul(&alpha)?)?;
        }
        Ok(vec![loss, alpha])
    }
}

pub(super) fn newton(batch: usize, dim: usize, hidden: usize) -> Result<(impl Fn() -> Result<Newton>, Vec<Tensor>)> {
    let mut rng = Rng::new(45);
    let x = rng.normal(&[batch, dim], 0.0, 1.0, F)?;
    let y = x.slice(&[0, 0], &[batch, 1])?.sin()?;
    let data = vec![x, y];
    let build = move || {
        let rng = &mut Rng::new(46);
        Ok(Newton {
            w1: Variable::new(rng.normal(&[dim, hidden], 0.0, 1.0 / (dim as f64).sqrt(), F)?),
            w2: Variable::new(rng.normal(&[hidden, 1], 0.0, 1.0 / (hidden as f64).sqrt(), F)?),
        })
    };
    Ok((build, data))
}
