//! Two models a new user would write from the docs, against TensorFlow
//! 2.21 / Keras 3.15.1 (`tests/reference/new_user_models5.py` printed the
//! numbers of `tests/data/new_user_models5.txt`):
//!
//! - knowledge distillation: a frozen teacher (Dense 6-12 relu-4, its
//!   logits under `stop_gradient`) and a student (Dense 6-5 tanh-4); the
//!   loss 1/4 of the hard-label sparse cross-entropy plus 3/4 of T² times
//!   Keras's `KLDivergence` between the teacher's and the student's
//!   softmaxes at temperature T = 2; Adam on the student only;
//! - a triplet-loss embedding network: Dense 6-8 tanh-4, `l2_normalize`d;
//!   the squared distances of all pairs, batch-hard mining (each anchor's
//!   farthest positive and nearest negative, by masked `max` / `min`),
//!   `relu(d_pos − d_neg + 1)` averaged; SGD.
//!
//! Each runs two steps eagerly and as a traced `function`, in float64 at
//! 1e-12 relative (see `new_user_util.rs`) and float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::losses::{self, Loss};
use gradtape::nn::{Activation, Dense, Layer, Module};
use gradtape::optim::{Adam, Sgd};
use gradtape::{DType, GradientTape, Result, Tensor, Variable};

use super::new_user_gpt::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding.
const REL32: f64 = 2e-5;

/// Two Dense layers in a row.
pub(super) struct Mlp(Dense, Dense);

impl Mlp {
    fn new(sizes: [usize; 3], act: Activation, k0: f64, dt: DType) -> Result<Mlp> {
        let m = Mlp(
            dense(sizes[0], sizes[1], Some(act), dt)?,
            dense(sizes[1], sizes[2], None, dt)?,
        );
        set_weights_as(&m.vars(), k0, &[]);
        Ok(m)
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

// ---- 1. Knowledge distillation ----------------------------------------------------------

pub(super) struct Distill {
    teacher: Mlp,
    student: Mlp,
    temperature: f64,
    alpha: f64,
    opt: Mutex<Adam>,
}

impl Distill {
    fn new(dt: DType) -> Result<Distill> {
        Distill::sized(6, 12, 5, 4, dt)
    }

    /// Inputs, the teacher's and the student's hidden widths, classes.
    pub(super) fn sized(inp: usize, teacher: usize, student: usize, classes: usize, dt: DType) -> Result<Distill> {
        Ok(Distill {
            teacher: Mlp::new([inp, teacher, classes], Activation::Relu, 350.0, dt)?,
            student: Mlp::new([inp, student, classes], Activation::Tanh, 360.0, dt)?,
            temperature: 2.0,
            alpha: 0.25,
            opt: Mutex::new(adam()),
        })
    }
}

impl Stepper for Distill {
    fn vars(&self) -> Vec<Variable> {
        self.student.vars()
    }

    /// data: inputs [n, d], labels [n] (i64); outputs the soft and hard
    /// losses and the total.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let t = self.temperature;
            let teacher = self.teacher.call(&data[0])?.stop_gradient();
            let student = self.student.call(&data[0])?;
            let soft = Loss::KLDivergence.call(
                &teacher.div_scalar(t)?.softmax(-1)?,
                &student.div_scalar(t)?.softmax(-1)?,
            )?;
            let hard = losses::sparse_categorical_crossentropy(&data[1], &student, true)?;
            let loss = hard
                .mul_scalar(self.alpha)?
                .add(&soft.mul_scalar((1.0 - self.alpha) * t * t)?)?;
            Ok(vec![soft, hard, loss])
        })?;
        let loss = out[2].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

#[test]
fn knowledge_distillation_kl_at_temperature_matches_tensorflow() -> Result<()> {
    let x = fill(&[6, 6], 0.1, 2.0);
    let y = Tensor::vector(&[1i64, 3, 0, 2, 1, 0]);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let runs = train_both(
        &mut c64,
        &mut c32,
        "distill",
        &["soft", "hard", "loss"],
        Distill::new,
        &[x, y],
    )?;
    // the teacher is frozen: its weights are as set
    for (what, m) in &runs.models {
        let fresh = Distill::new(m.teacher.0.kernel().read().dtype())?;
        for (a, b) in m.teacher.vars().iter().zip(fresh.teacher.vars()) {
            assert_eq!(
                a.read().to_vec_f64(),
                b.read().to_vec_f64(),
                "{what}: the teacher moved"
            );
        }
    }
    c64.finish("distill f64", 100);
    c32.finish("distill f32", 100);
    Ok(())
}

// ---- 2. Triplet loss, batch-hard mining -----------------------------------------------------

pub(super) struct Triplet {
    net: Mlp,
    margin: f64,
    opt: Mutex<Sgd>,
}

impl Triplet {
    fn new(dt: DType) -> Result<Triplet> {
        Triplet::sized(6, 8, 4, dt)
    }

    pub(super) fn sized(inp: usize, hidden: usize, emb: usize, dt: DType) -> Result<Triplet> {
        Ok(Triplet {
            net: Mlp::new([inp, hidden, emb], Activation::Tanh, 370.0, dt)?,
            margin: 1.0,
            opt: Mutex::new(Sgd::new(0.0625)),
        })
    }

    /// Each anchor's hardest positive and negative squared distance, and
    /// the loss, for inputs `x` `[n, d]` and labels `y` `[n]`.
    fn forward(&self, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
        let n = x.shape()[0];
        let e = self.net.call(x)?.l2_normalize(&[1], 1e-12)?;
        let dot = e.matmul_with(&e, false, true)?;
        let sq = dot.diag_part()?;
        let d = sq
            .expand_dims(1)?
            .sub(&dot.mul_scalar(2.0)?)?
            .add(&sq.expand_dims(0)?)?
            .maximum(&Tensor::zeros(&[], e.dtype()))?;
        let same = y.expand_dims(1)?.eq(&y.expand_dims(0)?)?;
        let not_self = Tensor::eye(n, DType::Bool).logical_not()?;
        let pos_mask = same.logical_and(&not_self)?.cast(e.dtype())?;
        let neg_mask = same.logical_not()?.cast(e.dtype())?;
        let hardest_pos = d.mul(&pos_mask)?.max(&[1], false)?;
        let far = d.max(&[1], true)?.mul(&neg_mask.neg()?.add_scalar(1.0)?)?;
        let hardest_neg = d.add(&far)?.min(&[1], false)?;
        let loss = hardest_pos
            .sub(&hardest_neg)?
            .add_scalar(self.margin)?
            .relu()?
            .mean_all()?;
        Ok(vec![hardest_pos, hardest_neg, loss])
    }
}

impl Stepper for Triplet {
    fn vars(&self) -> Vec<Variable> {
        self.net.vars()
    }

    /// data: inputs [n, d], labels [n] (i64); outputs the hardest
    /// positive and negative distances and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| self.forward(&data[0], &data[1]))?;
        let loss = out[2].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

/// `n` inputs, row `i` being `fill([d], 0.7 i, 3)` (the rows of one
/// `fill([n, d])` nearly repeat every third row, collapsing the
/// embeddings).
pub(super) fn triplet_inputs(n: usize, d: usize) -> Result<Tensor> {
    let rows: Vec<Tensor> = (0..n).map(|i| fill(&[d], 0.7 * i as f64, 3.0)).collect();
    Tensor::stack(&rows.iter().collect::<Vec<_>>(), 0)
}

#[test]
fn triplet_loss_batch_hard_mining_matches_tensorflow() -> Result<()> {
    let y = Tensor::vector(&[0i64, 0, 1, 1, 2, 2, 0, 1]);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "triplet",
        &["pos", "neg", "loss"],
        Triplet::new,
        &[triplet_inputs(8, 6)?, y],
    )?;
    c64.finish("triplet f64", 100);
    c32.finish("triplet f32", 100);
    Ok(())
}
