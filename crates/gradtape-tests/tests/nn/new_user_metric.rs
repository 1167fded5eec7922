//! Two representation-learning models a new user would write from the
//! docs, against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models7.py` printed the numbers of
//! `tests/data/new_user_models7.txt`):
//!
//! - ArcFace (face-recognition heads): an embedding network Dense(6-8
//!   tanh-4) and a class-centre matrix [4, 3] (a plain variable), both
//!   `l2_normalize`d (the centres over axis 0), their cosines clipped to
//!   `[−1 + 1e-7, 1 − 1e-7]` (the user's guard for `acos`' infinite slope
//!   at ±1), `acos`, the additive angular margin 1/2 on the true class
//!   through `one_hot`, `cos(θ + m)`, scale 8, sparse softmax
//!   cross-entropy; Adam;
//! - SimSiam: an encoder Dense(6-8 relu-4) and a predictor Dense(4-8
//!   relu-4) over two views; the symmetric negative cosine similarity
//!   (Keras's `CosineSimilarity` loss, `Loss::CosineSimilarity`) of each
//!   view's prediction against the other view's projection under
//!   `stop_gradient`; SGD with momentum 7/8.
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`)
//! and float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::losses::{self, Loss};
use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::optim::{Adam, Sgd};
use gradtape::{DType, GradientTape, Result, Tensor, Variable};

use super::new_user_adversarial::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: a few float32 roundings carried through two steps
/// (the largest seen: ArcFace 4.4e-6, SimSiam 2.8e-7).
const REL32: f64 = 2e-5;

/// Two Dense layers in a row.
struct Mlp(Dense, Dense);

impl Mlp {
    fn new(sizes: [usize; 3], act: Activation, dt: DType) -> Result<Mlp> {
        Ok(Mlp(
            dense(sizes[0], sizes[1], Some(act), dt)?,
            dense(sizes[1], sizes[2], None, dt)?,
        ))
    }

    fn vars(&self) -> Vec<Variable> {
        let mut v = self.0.trainable_variables();
        v.extend(self.1.trainable_variables());
        v
    }

    fn call(&self, x: &Tensor) -> Result<Tensor> {
        self.1.forward(&self.0.forward(x, true)?, true)
    }
}

// ---- 1. ArcFace -----------------------------------------------------------------------------

struct ArcFace {
    net: Mlp,
    centres: Variable,
    opt: Mutex<Adam>,
}

impl ArcFace {
    fn new(dt: DType) -> Result<ArcFace> {
        let m = ArcFace {
            net: Mlp::new([6, 8, 4], Activation::Tanh, dt)?,
            centres: Variable::new(Tensor::zeros(&[4, 3], dt)),
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 760.0, &[]);
        Ok(m)
    }
}

impl Stepper for ArcFace {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.net.vars();
        v.push(self.centres.clone());
        v
    }

    /// data: inputs [6, 6], labels [6] (i64); outputs the angles, the
    /// logits and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (x, y) = (&data[0], &data[1]);
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let e = self.net.call(x)?.l2_normalize(&[1], 1e-12)?;
            let w = self.centres.read().l2_normalize(&[0], 1e-12)?;
            let cos = e.matmul(&w)?.clip_by_value(-1.0 + 1e-7, 1.0 - 1e-7)?;
            let theta = cos.acos()?;
            let onehot = y.one_hot(3, 1.0, 0.0, -1, cos.dtype())?;
            let target = theta.add_scalar(0.5)?.cos()?;
            let logits = onehot
                .mul(&target)?
                .add(&onehot.scalar_like(1.0)?.sub(&onehot)?.mul(&cos)?)?
                .mul_scalar(8.0)?;
            let loss = losses::sparse_categorical_crossentropy(y, &logits, true)?;
            Ok(vec![theta, logits, loss])
        })?;
        let loss = out[2].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

#[test]
fn arcface_additive_angular_margin_matches_tensorflow() -> Result<()> {
    let x = fill(&[6, 6], 0.45, 2.0);
    let y = Tensor::vector(&[0i64, 1, 2, 2, 1, 0]);
    let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
    let outs = ["theta", "logits", "loss"];
    train_both(&mut c64, &mut c32, "arcface", &outs, ArcFace::new, &[x, y])?;
    c64.finish("arcface f64", 150);
    c32.finish("arcface f32", 150);
    Ok(())
}

// ---- 2. SimSiam -----------------------------------------------------------------------------

struct SimSiam {
    encoder: Mlp,
    predictor: Mlp,
    opt: Mutex<Sgd>,
}

impl SimSiam {
    fn new(dt: DType) -> Result<SimSiam> {
        let m = SimSiam {
            encoder: Mlp::new([6, 8, 4], Activation::Relu, dt)?,
            predictor: Mlp::new([4, 8, 4], Activation::Relu, dt)?,
            opt: Mutex::new(Sgd::new(0.125).momentum(0.875)?),
        };
        set_weights_as(&m.vars(), 770.0, &[]);
        Ok(m)
    }
}

impl Stepper for SimSiam {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.encoder.vars();
        v.extend(self.predictor.vars());
        v
    }

    /// data: the two views [4, 6]; outputs both predictions and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let (z1, z2) = (self.encoder.call(&data[0])?, self.encoder.call(&data[1])?);
            let (p1, p2) = (self.predictor.call(&z1)?, self.predictor.call(&z2)?);
            let d = |z: &Tensor, p: &Tensor| Loss::CosineSimilarity { axis: -1 }.call(&z.stop_gradient(), p);
            let loss = d(&z2, &p1)?.mul_scalar(0.5)?.add(&d(&z1, &p2)?.mul_scalar(0.5)?)?;
            Ok(vec![p1, p2, loss])
        })?;
        let loss = out[2].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

#[test]
fn simsiam_symmetric_cosine_with_stop_gradient_matches_tensorflow() -> Result<()> {
    let x1 = fill(&[4, 6], 0.85, 2.0);
    let x2 = x1.add(&fill(&[4, 6], 1.9, 0.5))?;
    let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "simsiam",
        &["p1", "p2", "loss"],
        SimSiam::new,
        &[x1, x2],
    )?;
    c64.finish("simsiam f64", 150);
    c32.finish("simsiam f32", 150);
    Ok(())
}
