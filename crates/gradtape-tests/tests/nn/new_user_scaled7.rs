//! The seventh batch's models (`new_user_adversarial.rs`,
//! `new_user_sets.rs`, `new_user_tcn.rs`) as a new user would first run
//! them: float32, Keras's default initialisers, larger sizes (where the
//! compiled graph's kernels take other paths: fused chains, blocked
//! products, threads). As `new_user_scaled.rs`: no TensorFlow reference,
//! the traced training step (a `function` called three times) must give
//! what the same step gives eagerly from the same weights, to 2e-5
//! relative. The PointNet's clouds are padded by repeating a point, so
//! that its max over the points meets exact ties at every size; its
//! points' saliency (where the split among ties shows) is compared too.

use std::sync::Mutex;

use gradtape::nn::losses::{self, Loss};
use gradtape::nn::{Activation, Conv1D, Dense, GlobalPooling, Layer, PoolKind};
use gradtape::optim::{Adam, Optimizer, Sgd};
use gradtape::{while_loop, DType, GradientTape, Padding, Result, Rng, Tensor, Variable, WhileOptions};

use super::new_user_adversarial::pgd_ascend;
use super::new_user_scaled::{dense, differential, ints, Model, F};
use super::new_user_util::print_times;

/// Applies `grads` to `vars` with `opt`.
fn apply<O: Optimizer>(opt: &Mutex<O>, grads: Vec<Option<Tensor>>, vars: &[Variable]) -> Result<()> {
    opt.lock().unwrap().apply_gradients(grads.into_iter().zip(vars))
}

fn vars_of(layers: &[&dyn Layer]) -> Vec<Variable> {
    layers.iter().flat_map(|l| l.variables()).collect()
}

// ---- PointNet ---------------------------------------------------------------

struct PointNet {
    conv: Conv1D,
    shared: Dense,
    head: (Dense, Dense),
    opt: Mutex<Adam>,
}

impl Model for PointNet {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.conv, &self.shared, &self.head.0, &self.head.1])
    }

    /// data: clouds [b, n, 3], labels [b]; outputs the loss and the
    /// points' saliency
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let (loss, saliency) = tape.record(|| {
            let t = GradientTape::new();
            let loss = t.record(|| {
                t.watch(&d[0]);
                let h = self.shared.call(&self.conv.call(&d[0])?)?;
                let g = GlobalPooling::new(PoolKind::Max, 1)?.call(&h)?;
                let logits = self.head.1.call(&self.head.0.call(&g)?)?;
                losses::sparse_categorical_crossentropy(&d[1], &logits, true)
            })?;
            let s = t.gradient(&loss, &d[0])?.expect("saliency");
            Ok((loss, s))
        })?;
        apply(&self.opt, tape.gradient(&loss, &vars)?, &vars)?;
        Ok(vec![loss, saliency])
    }
}

/// `b` clouds of `n` points, the last quarter of each a copy of its point
/// `n / 2`.
fn padded_clouds(rng: &mut Rng, b: usize, n: usize) -> Result<Tensor> {
    let mut v = rng.normal(&[b, n, 3], 0.0, 1.0, DType::F64)?.to_vec::<f64>()?;
    for c in 0..b {
        let from = (c * n + n / 2) * 3;
        for p in n - n / 4..n {
            v.copy_within(from..from + 3, (c * n + p) * 3);
        }
    }
    Tensor::from_vec(v, &[b, n, 3])?.cast(F)
}

// ---- PGD ----------------------------------------------------------------------

struct Pgd {
    net: (Dense, Dense),
    /// the attack as a `while_loop` (else a Rust loop), inside the tape
    looped: bool,
    opt: Mutex<Sgd>,
}

impl Pgd {
    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        losses::sparse_categorical_crossentropy(y, &self.net.1.call(&self.net.0.call(x)?)?, true)
    }

    fn ascend(&self, x_adv: &Tensor, y: &Tensor, lo: &Tensor, hi: &Tensor) -> Result<Tensor> {
        pgd_ascend(|x| self.loss(x, y), x_adv, 0.01, lo, hi, 3.0)
    }
}

impl Model for Pgd {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.net.0, &self.net.1])
    }

    /// data: inputs [b, f], labels [b]; outputs the loss and the
    /// adversarial inputs
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let (x, y) = (&d[0], &d[1]);
        let vars = self.vars();
        let tape = GradientTape::new();
        let (loss, x_adv) = tape.record(|| {
            let (lo, hi) = (x.add_scalar(-0.03)?, x.add_scalar(0.03)?);
            let x_adv = if self.looped {
                while_loop(
                    |v: &Vec<Tensor>| v[0].lt_scalar(5.0),
                    |v: &Vec<Tensor>| Ok(vec![v[0].add_scalar(1.0)?, self.ascend(&v[1], y, &lo, &hi)?]),
                    vec![Tensor::scalar(0i64), x.clone()],
                    WhileOptions::default(),
                )?[1]
                    .clone()
            } else {
                (0..5).try_fold(x.clone(), |a, _| self.ascend(&a, y, &lo, &hi))?
            };
            let loss = self.loss(x, y)?.add(&self.loss(&x_adv, y)?)?.mul_scalar(0.5)?;
            Ok((loss, x_adv))
        })?;
        apply(&self.opt, tape.gradient(&loss, &vars)?, &vars)?;
        Ok(vec![loss, x_adv])
    }
}

// ---- NT-Xent --------------------------------------------------------------------

struct NtXent {
    enc: (Dense, Dense),
    opt: Mutex<Adam>,
}

impl Model for NtXent {
    fn vars(&self) -> Vec<Variable> {
        vars_of(&[&self.enc.0, &self.enc.1])
    }

    /// data: two views [b, f], partners [2b]; outputs the loss
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let embed = |x: &Tensor| self.enc.1.call(&self.enc.0.call(x)?);
            let z = Tensor::concat(&[&embed(&d[0])?, &embed(&d[1])?], 0)?.l2_normalize(&[1], 1e-12)?;
            let n = z.shape()[0];
            let sim = z.matmul_with(&z, false, true)?.div_scalar(0.1)?;
            let logits = Tensor::where_(&Tensor::eye(n, DType::Bool), &sim.scalar_like(f64::NEG_INFINITY)?, &sim)?;
            losses::sparse_categorical_crossentropy(&d[2], &logits, true)
        })?;
        apply(&self.opt, tape.gradient(&loss, &vars)?, &vars)?;
        Ok(vec![loss])
    }
}

// ---- TCN --------------------------------------------------------------------------

struct Tcn {
    /// per block: two (v, g, b) weight-normalised convolutions
    blocks: Vec<[Variable; 6]>,
    input: Conv1D,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Model for Tcn {
    fn vars(&self) -> Vec<Variable> {
        let mut v: Vec<Variable> = self.blocks.iter().flat_map(|b| b.iter().cloned()).collect();
        v.extend(vars_of(&[&self.input, &self.head]));
        v
    }

    /// data: series [b, t, f], next values [b, t, 1]; outputs the loss
    fn step(&self, d: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let mut h = self.input.call(&d[0])?;
            for (j, p) in self.blocks.iter().enumerate() {
                let dil = 1usize << j;
                let conv = |x: &Tensor, v: &Variable, g: &Variable, b: &Variable| -> Result<Tensor> {
                    let w = v.read().l2_normalize(&[0, 1], 1e-12)?.mul(&g.read())?;
                    x.pad(&[(0, 0), (2 * dil, 0), (0, 0)])?
                        .conv1d(&w, 1, Padding::Valid, dil as i64)?
                        .add(&b.read())
                };
                let o = conv(&h, &p[0], &p[1], &p[2])?.relu()?;
                let o = conv(&o, &p[3], &p[4], &p[5])?.relu()?;
                h = o.add(&h)?.relu()?;
            }
            Loss::MeanSquaredError.call(&d[1], &self.head.call(&h)?)
        })?;
        apply(&self.opt, tape.gradient(&loss, &vars)?, &vars)?;
        Ok(vec![loss])
    }
}

#[test]
fn scaled_seventh_batch_traced_matches_eager() -> Result<()> {
    let mut times = Vec::new();
    let mut rng = Rng::new(17);
    // PointNet: 8 clouds of 256 points, 3 -> 64 -> 128, max, 128 -> 64 -> 10
    let data = vec![padded_clouds(&mut rng, 8, 256)?, ints(&mut rng, &[8], 10)?];
    let build = || {
        let rng = &mut Rng::new(2);
        Ok(PointNet {
            conv: Conv1D::builder(3, 64, 1).activation(Activation::Relu).build(rng)?,
            shared: dense(64, 128, Activation::Relu, rng)?,
            head: (
                dense(128, 64, Activation::Relu, rng)?,
                dense(64, 10, Activation::Linear, rng)?,
            ),
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    let t = differential("pointnet", build, data)?;
    times.push(("pointnet", "8 x 256 points, 3 -> 64 -> 128, max", t));
    // PGD: 128 examples of 64 features, 64 -> 256 tanh -> 10, 5 steps
    let data = vec![rng.normal(&[128, 64], 0.0, 1.0, F)?, ints(&mut rng, &[128], 10)?];
    for looped in [false, true] {
        let build = || {
            let rng = &mut Rng::new(3);
            Ok(Pgd {
                net: (
                    dense(64, 256, Activation::Tanh, rng)?,
                    dense(256, 10, Activation::Linear, rng)?,
                ),
                looped,
                opt: Mutex::new(Sgd::new(0.05).momentum(0.9)?.nesterov(true)),
            })
        };
        let name = if looped { "pgd (while_loop)" } else { "pgd" };
        let t = differential(name, build, data.clone())?;
        times.push((name, "128 x 64, 64 -> 256 -> 10, 5 attack steps", t));
    }
    // NT-Xent: 64 pairs of 32 features, 32 -> 128 relu -> 64, temperature 0.1
    let x1 = rng.normal(&[64, 32], 0.0, 1.0, F)?;
    let x2 = x1.add(&rng.normal(&[64, 32], 0.0, 0.3, F)?)?;
    let partners: Vec<i64> = (0..128).map(|i| (i + 64) % 128).collect();
    let build = || {
        let rng = &mut Rng::new(4);
        Ok(NtXent {
            enc: (
                dense(32, 128, Activation::Relu, rng)?,
                dense(128, 64, Activation::Linear, rng)?,
            ),
            opt: Mutex::new(Adam::new(1e-3)),
        })
    };
    let t = differential("ntxent", build, vec![x1, x2, Tensor::vector(&partners)])?;
    times.push(("ntxent", "2 x 64 views, 32 -> 128 -> 64, 128 x 128 similarities", t));
    // TCN: 4 series of 128 steps, 4 features, 32 channels, dilations 1..8
    let series = rng.normal(&[4, 129, 4], 0.0, 1.0, F)?;
    let data = vec![series.narrow(1, 0, 128)?, series.narrow(1, 1, 128)?.narrow(2, 0, 1)?];
    let build = || {
        let rng = &mut Rng::new(5);
        let c = 32;
        let mut blocks = Vec::new();
        for _ in 0..4 {
            let mut conv = || -> Result<[Variable; 3]> {
                Ok([
                    Variable::new(rng.normal(&[3, c, c], 0.0, 0.1, F)?),
                    Variable::new(Tensor::ones(&[c], F)),
                    Variable::new(Tensor::zeros(&[c], F)),
                ])
            };
            let (a, b) = (conv()?, conv()?);
            let [a0, a1, a2] = a;
            let [b0, b1, b2] = b;
            blocks.push([a0, a1, a2, b0, b1, b2]);
        }
        Ok(Tcn {
            blocks,
            input: Conv1D::builder(4, c, 1).build(rng)?,
            head: dense(c, 1, Activation::Linear, rng)?,
            opt: Mutex::new(Adam::new(1e-3).clipnorm(1.0)?),
        })
    };
    let t = differential("tcn", build, data)?;
    times.push(("tcn", "4 x 128 steps, 32 channels, dilations 1-8", t));
    for (name, sizes, (e, t)) in times {
        print_times(name, sizes, e, t);
    }
    Ok(())
}
