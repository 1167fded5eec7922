//! Two vision models a new user would write, against TensorFlow 2.21 /
//! Keras 3.15.1 (`tests/reference/new_user_models3.py`, numbers in
//! `tests/data/new_user_models3.txt`):
//!
//! - a small Vision Transformer: 4x4 patches of 8x8x3 images cut by
//!   `reshape` / `permute` (and again by `extract_patches`), a Dense patch embedding, a class token and
//!   learned positions (plain variables, the token broadcast to the batch),
//!   one pre-norm `TransformerBlock` (Keras's MultiHeadAttention,
//!   LayerNormalization and an exact-GELU MLP), a final `LayerNorm` and a
//!   head on the class token; sparse softmax cross-entropy; Adam;
//! - a contrastive (SimCLR NT-Xent) loss: two views through one encoder,
//!   `l2_normalize`d, the cosine-similarity matrix over a temperature with
//!   its diagonal masked out, cross-entropy towards each example's other
//!   view; SGD with momentum.
//!
//! Each runs two steps eagerly and as a traced `function` (called twice,
//! traced once), in float64 at 1e-12 relative (see `new_user_util.rs`) and
//! in float32 against the same reference at `REL32`.

use std::sync::Mutex;

use gradtape::nn::{Activation, Dense, Layer, LayerNorm, Module, TransformerBlock};
use gradtape::optim::{Adam, Sgd};
use gradtape::{DType, GradientTape, Padding, Result, Rng, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{adam, classifier_step, fill, set_weights_as, train_both, update, Check, Stepper};

const DATA: &str = include_str!("../data/new_user_models3.txt");

/// float32 against the float64 reference, relative to each vector's
/// largest element (the ViT's second step reaches 4e-5: Adam's first
/// update divides each gradient by its own magnitude, so a float32 error
/// in a small gradient element moves its weight by up to the learning
/// rate's share of it).
const REL32: f64 = 2e-4;

// ---- 1. Vision Transformer ---------------------------------------------------

struct Vit {
    /// cut the patches with `extract_patches` (`tf.image.extract_patches`)
    /// instead of reshape / permute: the same values in the same order
    extract: bool,
    patch: Dense,
    cls: Variable,
    pos: Variable,
    block: TransformerBlock,
    norm: LayerNorm,
    head: Dense,
    opt: Mutex<Adam>,
}

/// The three LayerNorm scales among the weights (set to 1 + fill).
const VIT_GAMMAS: [usize; 3] = [4, 14, 20];

impl Vit {
    fn new(dt: DType) -> Result<Vit> {
        let m = Vit {
            extract: false,
            patch: dense(48, 8, None, dt)?,
            cls: Variable::new(Tensor::zeros(&[1, 1, 8], dt)),
            pos: Variable::new(Tensor::zeros(&[1, 5, 8], dt)),
            block: TransformerBlock::builder(8, 2, 16)
                .layer_norm_epsilon(1e-5)
                .dtype(dt)
                .build(&mut Rng::new(0))?,
            norm: LayerNorm::builder(8).epsilon(1e-5).dtype(dt).build()?,
            head: dense(8, 3, None, dt)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 90.0, &VIT_GAMMAS);
        Ok(m)
    }

    /// The logits of images `[b, 8, 8, 3]`.
    fn logits(&self, img: &Tensor) -> Result<Tensor> {
        let b = img.shape()[0];
        let p = if self.extract {
            img.extract_patches([4, 4], [4, 4], [1, 1], Padding::Valid)?
                .reshape(&[b, 4, 48])?
        } else {
            img.reshape(&[b, 2, 4, 2, 4, 3])?
                .permute(&[0, 1, 3, 2, 4, 5])?
                .reshape(&[b, 4, 48])?
        };
        let h = self.patch.forward(&p, true)?;
        let cls = self.cls.read().broadcast_to(&[b, 1, 8])?;
        let h = Tensor::concat(&[&cls, &h], 1)?.add(&self.pos.read())?;
        let h = self.norm.forward(&self.block.forward(&h, true)?, true)?;
        self.head.forward(&h.narrow(1, 0, 1)?.reshape(&[b, 8])?, true)
    }
}

impl Stepper for Vit {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.patch.trainable_variables();
        v.extend([self.cls.clone(), self.pos.clone()]);
        for l in [&self.block as &dyn Layer, &self.norm, &self.head] {
            v.extend(l.trainable_variables());
        }
        v
    }

    /// data: images [b, 8, 8, 3], labels [b] (i64); outputs the logits and
    /// the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        classifier_step(&self.vars(), &self.opt, &data[1], || self.logits(&data[0]))
    }
}

#[test]
fn vision_transformer_matches_tensorflow() -> Result<()> {
    let img = fill(&[2, 8, 8, 3], 0.4, 2.0);
    let y = Tensor::vector(&[2i64, 0]);
    // the key projection's bias gets a gradient that is zero in exact
    // arithmetic (the softmax ignores a shift common to a query's scores):
    // roundoff of ~1e-17 on both sides, compared absolutely at 1e-16 (the
    // floor 1e-4 is below every other vector's largest element)
    let (mut c64, mut c32) = (Check::with(DATA, 1e-4), Check::with(DATA, 1e-4).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "vit",
        &["logits", "loss"],
        Vit::new,
        &[img, y.clone()],
    )?;
    // the patches by extract_patches
    let build = |dt| {
        Ok(Vit {
            extract: true,
            ..Vit::new(dt)?
        })
    };
    let img = fill(&[2, 8, 8, 3], 0.4, 2.0);
    train_both(&mut c64, &mut c32, "vit", &["logits", "loss"], build, &[img, y])?;
    c64.finish("vit f64", 3000);
    c32.finish("vit f32", 3000);
    Ok(())
}

// ---- 2. Contrastive (NT-Xent) --------------------------------------------------

struct Contrastive {
    enc: Dense,
    proj: Dense,
    opt: Mutex<Sgd>,
}

impl Contrastive {
    fn new(dt: DType) -> Result<Contrastive> {
        let m = Contrastive {
            enc: dense(6, 8, Some(Activation::Tanh), dt)?,
            proj: dense(8, 4, None, dt)?,
            opt: Mutex::new(Sgd::new(0.25).momentum(0.875)?),
        };
        set_weights_as(&m.vars(), 80.0, &[]);
        Ok(m)
    }
}

impl Stepper for Contrastive {
    fn vars(&self) -> Vec<Variable> {
        [&self.enc, &self.proj]
            .iter()
            .flat_map(|l| l.trainable_variables())
            .collect()
    }

    /// data: the two views [b, 6]; outputs the normalised projections and
    /// the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let b = data[0].shape()[0];
        let vars = self.vars();
        let tape = GradientTape::new();
        let (z, loss) = tape.record(|| {
            let x = Tensor::concat(&[&data[0], &data[1]], 0)?;
            let z = self
                .proj
                .forward(&self.enc.forward(&x, true)?, true)?
                .l2_normalize(&[1], 1e-12)?;
            let sim = z.matmul(&z.transpose()?)?.div_scalar(0.5)?;
            let sim = sim.sub(&Tensor::eye(2 * b, z.dtype()).mul_scalar(1e9)?)?;
            let labels: Vec<i64> = (b..2 * b).chain(0..b).map(|i| i as i64).collect();
            let ce = Tensor::sparse_softmax_cross_entropy_with_logits(&Tensor::vector(&labels), &sim)?;
            Ok((z, ce.mean_all()?))
        })?;
        update(&tape, &loss, &vars, &self.opt, vec![z, loss.clone()])
    }
}

#[test]
fn contrastive_nt_xent_matches_tensorflow() -> Result<()> {
    let x1 = fill(&[4, 6], 0.1, 2.0);
    let x2 = x1.add(&fill(&[4, 6], 3.3, 0.5))?;
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    train_both(
        &mut c64,
        &mut c32,
        "contrastive",
        &["z", "loss"],
        Contrastive::new,
        &[x1, x2],
    )?;
    c64.finish("contrastive f64", 300);
    c32.finish("contrastive f32", 300);
    Ok(())
}
