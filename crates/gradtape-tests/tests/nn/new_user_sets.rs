//! Two models whose loss treats a batch or a point cloud as a set, as a
//! new user would write them from the docs, against TensorFlow 2.21 /
//! Keras 3.15.1 (`tests/reference/new_user_models7.py` printed the
//! numbers of `tests/data/new_user_models7.txt`):
//!
//! - SimCLR's NT-Xent contrastive loss: an encoder Dense(6-8 relu-4) over
//!   two views of 4 examples, the 8 embeddings `l2_normalize`d and
//!   concatenated, their cosine similarities over the temperature 1/2,
//!   the diagonal masked, sparse softmax cross-entropy against each view's
//!   partner; Adam. The mask written two ways a user writes it: minus
//!   `1e9 · eye` (the reference) and `where(eye, −∞, sim)`, which
//!   TensorFlow gives the same numbers for, bit for bit (checked against
//!   the same reference: a softmax over a row with an `−∞` logit must not
//!   give NaN, in value or gradient);
//! - PointNet: two clouds of 6 points in 3-D, the first with a point
//!   repeated, the second padded to 6 by repeating its last point (exact
//!   ties in the max over the points, whose gradient TensorFlow splits
//!   evenly among the tied points); a shared `Conv1D` (kernel 1, relu) and
//!   a Dense(8-16, relu) applied to every point, `GlobalPooling` (max, 1-D:
//!   Keras's `GlobalMaxPooling1D`), Dense(16-8 relu-3) logits, sparse
//!   cross-entropy; Adam. The points' saliency (the loss's gradient w.r.t.
//!   the points) is compared too: the weights' gradients cannot tell how
//!   the max shares its gradient among tied points (the tied points are
//!   equal, whichever gets it), the saliency can.
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`) and
//! float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::{losses, Activation, Conv1D, Dense, GlobalPooling, Layer, Module, PoolKind};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_adversarial::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: a few float32 roundings carried through two Adam
/// steps (the largest seen: 1.9e-6 for both models).
const REL32: f64 = 2e-5;

// ---- 1. NT-Xent -----------------------------------------------------------------------------

struct NtXent {
    enc: (Dense, Dense),
    /// the diagonal masked by `where(eye, −∞, sim)` instead of `− 1e9 · eye`
    infinite: bool,
    opt: Mutex<Adam>,
}

impl NtXent {
    fn new(dt: DType, infinite: bool) -> Result<NtXent> {
        let m = NtXent {
            enc: (dense(6, 8, Some(Activation::Relu), dt)?, dense(8, 4, None, dt)?),
            infinite,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 730.0, &[]);
        Ok(m)
    }

    fn embed(&self, x: &Tensor) -> Result<Tensor> {
        self.enc.1.forward(&self.enc.0.forward(x, true)?, true)
    }
}

impl Stepper for NtXent {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.enc.0.trainable_variables();
        v.extend(self.enc.1.trainable_variables());
        v
    }

    /// data: the two views [b, 6], the partners' indices [2b] (i64);
    /// outputs the similarity matrix over the temperature and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let z = Tensor::concat(&[&self.embed(&data[0])?, &self.embed(&data[1])?], 0)?;
            let z = z.l2_normalize(&[1], 1e-12)?;
            let n = z.shape()[0];
            let sim = z.matmul_with(&z, false, true)?.div_scalar(0.5)?;
            let logits = if self.infinite {
                Tensor::where_(&Tensor::eye(n, DType::Bool), &sim.scalar_like(f64::NEG_INFINITY)?, &sim)?
            } else {
                sim.sub(&Tensor::eye(n, sim.dtype()).mul_scalar(1e9)?)?
            };
            let loss = losses::sparse_categorical_crossentropy(&data[2], &logits, true)?;
            Ok(vec![sim, loss])
        })?;
        let loss = out[1].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

#[test]
fn simclr_nt_xent_loss_matches_tensorflow() -> Result<()> {
    let x1 = fill(&[4, 6], 0.5, 2.0);
    let x2 = x1.add(&fill(&[4, 6], 2.1, 0.5))?;
    let partners = Tensor::vector(&[4i64, 5, 6, 7, 0, 1, 2, 3]);
    for infinite in [false, true] {
        let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
        let build = |dt| NtXent::new(dt, infinite);
        let data = [x1.clone(), x2.clone(), partners.clone()];
        train_both(&mut c64, &mut c32, "ntxent", &["sim", "loss"], build, &data)?;
        c64.finish(&format!("ntxent f64 (−∞ mask: {infinite})"), 150);
        c32.finish(&format!("ntxent f32 (−∞ mask: {infinite})"), 150);
    }
    Ok(())
}

// ---- 2. PointNet ----------------------------------------------------------------------------

struct PointNet {
    shared: (Conv1D, Dense),
    pool: GlobalPooling,
    head: (Dense, Dense),
    opt: Mutex<Adam>,
}

impl PointNet {
    fn new(dt: DType) -> Result<PointNet> {
        let conv = Conv1D::builder(3, 8, 1)
            .activation(Activation::Relu)
            .dtype(dt)
            .build(&mut Rng::new(0))?;
        let relu = Some(Activation::Relu);
        let m = PointNet {
            shared: (conv, dense(8, 16, relu, dt)?),
            pool: GlobalPooling::new(PoolKind::Max, 1)?,
            head: (dense(16, 8, relu, dt)?, dense(8, 3, None, dt)?),
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 740.0, &[]);
        Ok(m)
    }
}

impl Stepper for PointNet {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.shared.0.trainable_variables();
        for d in [&self.shared.1, &self.head.0, &self.head.1] {
            v.extend(d.trainable_variables());
        }
        v
    }

    /// data: clouds [2, 6, 3], labels [2] (i64); outputs the pooled
    /// features, the logits, the points' saliency (the loss's gradient
    /// w.r.t. the points, from a tape inside the training tape) and the
    /// loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| {
            let t = GradientTape::new();
            let (g, logits, loss) = t.record(|| {
                t.watch(&data[0]);
                let h = self.shared.1.forward(&self.shared.0.forward(&data[0], true)?, true)?;
                let g = self.pool.forward(&h, true)?;
                let logits = self.head.1.forward(&self.head.0.forward(&g, true)?, true)?;
                let loss = losses::sparse_categorical_crossentropy(&data[1], &logits, true)?;
                Ok((g, logits, loss))
            })?;
            let saliency = t.gradient(&loss, &data[0])?.expect("the points' gradient");
            Ok(vec![g, logits, saliency, loss])
        })?;
        let loss = out[3].clone();
        update(&tape, &loss, &vars, &self.opt, out)
    }
}

/// The clouds: `fill([2, 6, 3], 0.6, 2)` with cloud 0's point 5 a copy of
/// its point 3, and cloud 1's points 4 and 5 copies of its point 3 (the
/// point that gives most channels' maximum).
fn clouds() -> Result<Tensor> {
    let mut v = fill(&[2, 6, 3], 0.6, 2.0).to_vec::<f64>()?;
    let point = |c: usize, p: usize| (c * 6 + p) * 3;
    for (c, p) in [(0, 5), (1, 4), (1, 5)] {
        let (to, from) = (point(c, p), point(c, 3));
        v.copy_within(from..from + 3, to);
    }
    Tensor::from_vec(v, &[2, 6, 3])
}

#[test]
fn pointnet_max_over_tied_points_matches_tensorflow() -> Result<()> {
    let pts = clouds()?;
    let y = Tensor::vector(&[1i64, 2]);
    let (mut c64, mut c32) = (Check::with(DATA, 1e-6), Check::with(DATA, 1e-6).tolerance(REL32));
    let runs = train_both(
        &mut c64,
        &mut c32,
        "pointnet",
        &["global", "logits", "saliency", "loss"],
        PointNet::new,
        &[pts.clone(), y],
    )?;
    // the ties are exact in every run (the duplicated points' features are
    // bit for bit equal), so the saliency compared above saw the max's
    // gradient split among them
    for (what, m) in &runs.models {
        let x = pts.cast(m.shared.0.kernel().read().dtype())?;
        let h = m.shared.1.forward(&m.shared.0.forward(&x, false)?, false)?;
        let at = |c: usize, p: usize| -> Result<Vec<f64>> { Ok(h.narrow(0, c, 1)?.narrow(1, p, 1)?.to_vec_f64()) };
        assert_eq!(at(0, 3)?, at(0, 5)?, "{what}: cloud 0's copies differ");
        assert_eq!(at(1, 3)?, at(1, 4)?, "{what}: cloud 1's copies differ");
    }
    c64.finish("pointnet f64", 150);
    c32.finish("pointnet f32", 150);
    Ok(())
}
