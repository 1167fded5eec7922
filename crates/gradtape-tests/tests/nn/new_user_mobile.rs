//! Two models a new user would write from the docs, against TensorFlow
//! 2.21 / Keras 3.15.1 (`tests/reference/new_user_models5.py` printed the
//! numbers of `tests/data/new_user_models5.txt`):
//!
//! - a MobileNet-style block on NHWC images: `Conv2D` 3x3 stride 2 →
//!   `BatchNorm` → ReLU6 → `DepthwiseConv2D` 3x3 → `BatchNorm` → ReLU6 →
//!   pointwise `Conv2D` 1x1 → `BatchNorm` → ReLU6 → `GlobalPooling`
//!   (average) → `Dense` logits; the normalisations in training mode
//!   (momentum 7/8, their moving statistics checked after the steps); SGD
//!   with momentum. Two steps eagerly and as a traced `function`, float64
//!   at 1e-12 relative and float32 at `REL32`;
//! - mixed precision: Dense(4->8, relu) -> Dense(8->3) with float32
//!   master weights cast to float16 where they are read, the loss in
//!   float32, `LossScaleOptimizer` (initial scale 2^20, doubled after 2
//!   finite steps) around SGD with `global_clipnorm`: the first three steps overflow in float16
//!   and are skipped (the scale halves each time), the next two apply,
//!   the second doubling the scale; the inner SGD's `global_clipnorm`
//!   clips the unscaled gradients. Five steps eagerly and as a traced
//!   `function` (traced once: each call of the graph decides whether to
//!   skip, and reads and writes the scale in its variable); float16
//!   against TensorFlow's float16 at `REL16`.

use std::sync::{Arc, Mutex};

use gradtape::nn::{Activation, BatchNorm, Conv2D, Dense, DepthwiseConv2D, GlobalPooling, Layer, Module, PoolKind};
use gradtape::optim::{LossScaleOptimizer, Optimizer, Sgd};
use gradtape::{function, DType, GradientTape, Padding, Result, Rng, Tensor, Variable};

use super::new_user_gpt::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{classifier_step, fill, set_weights_as, train_both, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding (the batch statistics of 2 images of 3x3
/// positions divide by small variances).
const REL32: f64 = 1e-4;

// ---- 1. MobileNet-style block -----------------------------------------------------------

pub(super) struct Mobile {
    conv: Conv2D,
    bn1: BatchNorm,
    dw: DepthwiseConv2D,
    bn2: BatchNorm,
    pw: Conv2D,
    bn3: BatchNorm,
    pool: GlobalPooling,
    head: Dense,
    opt: Mutex<Sgd>,
}

impl Mobile {
    fn new(dt: DType) -> Result<Mobile> {
        Mobile::sized(3, 8, 3, dt)
    }

    /// Input channels, the block's channels and the classes.
    pub(super) fn sized(inp: usize, c: usize, classes: usize, dt: DType) -> Result<Mobile> {
        let rng = &mut Rng::new(0);
        let bn = || BatchNorm::builder(c).momentum(0.875).epsilon(1e-3).dtype(dt).build();
        let m = Mobile {
            conv: Conv2D::builder(inp, c, [3, 3])
                .strides([2, 2])
                .padding(Padding::Same)
                .use_bias(false)
                .dtype(dt)
                .build(rng)?,
            bn1: bn()?,
            dw: DepthwiseConv2D::builder(c, 1, [3, 3])
                .padding(Padding::Same)
                .use_bias(false)
                .dtype(dt)
                .build(rng)?,
            bn2: bn()?,
            pw: Conv2D::builder(c, c, [1, 1]).use_bias(false).dtype(dt).build(rng)?,
            bn3: bn()?,
            pool: GlobalPooling::new(PoolKind::Avg, 2)?,
            head: dense(c, classes, None, dt)?,
            opt: Mutex::new(Sgd::new(0.125).momentum(0.875)?),
        };
        set_weights_as(&m.vars(), 340.0, &[1, 4, 7]);
        Ok(m)
    }

    /// The moving means and variances of the three normalisations.
    fn moving(&self) -> Vec<Variable> {
        [&self.bn1, &self.bn2, &self.bn3]
            .iter()
            .flat_map(|b| [b.moving_mean().clone(), b.moving_variance().clone()])
            .collect()
    }

    fn logits(&self, img: &Tensor) -> Result<Tensor> {
        let mut h = img.clone();
        for (l, bn) in [
            (&self.conv as &dyn Layer, &self.bn1),
            (&self.dw, &self.bn2),
            (&self.pw, &self.bn3),
        ] {
            h = bn.forward(&l.forward(&h, true)?, true)?.relu6()?;
        }
        self.head.forward(&self.pool.forward(&h, true)?, true)
    }
}

impl Stepper for Mobile {
    fn vars(&self) -> Vec<Variable> {
        let layers: [&dyn Layer; 7] = [
            &self.conv, &self.bn1, &self.dw, &self.bn2, &self.pw, &self.bn3, &self.head,
        ];
        layers.iter().flat_map(|l| l.trainable_variables()).collect()
    }

    /// data: images [b, h, w, c], labels [b] (i64); outputs the logits
    /// and the loss.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        classifier_step(&self.vars(), &self.opt, &data[1], || self.logits(&data[0]))
    }
}

#[test]
fn mobilenet_block_batch_norm_relu6_matches_tensorflow() -> Result<()> {
    let img = fill(&[2, 6, 6, 3], 0.8, 2.0);
    let y = Tensor::vector(&[2i64, 0]);
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let runs = train_both(
        &mut c64,
        &mut c32,
        "mobile",
        &["logits", "loss"],
        Mobile::new,
        &[img, y],
    )?;
    for (what, m) in &runs.models {
        let check = if what.contains("F64") { &mut c64 } else { &mut c32 };
        check.vars(what, "mobile_moving", &m.moving());
    }
    c64.finish("mobile f64", 700);
    c32.finish("mobile f32", 700);
    Ok(())
}

// ---- 2. Mixed precision with dynamic loss scaling -------------------------------------------

/// float16 against TensorFlow's float16, relative to each vector's
/// largest element: a few float16 roundings (2^-11 each) whose ties TF's
/// kernels may break otherwise.
const REL16: f64 = 4e-3;

pub(super) struct Mixed {
    l1: Dense,
    l2: Dense,
}

impl Mixed {
    fn new() -> Result<Mixed> {
        Mixed::sized(4, 8, 3)
    }

    /// Inputs, hidden units, classes.
    pub(super) fn sized(inp: usize, hidden: usize, classes: usize) -> Result<Mixed> {
        let m = Mixed {
            l1: dense(inp, hidden, Some(Activation::Relu), DType::F32)?,
            l2: dense(hidden, classes, None, DType::F32)?,
        };
        set_weights_as(&m.vars(), 380.0, &[]);
        Ok(m)
    }

    fn vars(&self) -> Vec<Variable> {
        let mut v = self.l1.trainable_variables();
        v.extend(self.l2.trainable_variables());
        v
    }

    /// The float32 loss of the float16 model on `x` (f16) and labels `y`,
    /// the master weights read and cast to float16 under the tape.
    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let w = self
            .vars()
            .iter()
            .map(|v| v.read().cast(DType::F16))
            .collect::<Result<Vec<_>>>()?;
        let h = x.matmul(&w[0])?.add(&w[1])?.relu()?;
        let logits = h.matmul(&w[2])?.add(&w[3])?;
        Tensor::sparse_softmax_cross_entropy_with_logits(y, &logits.cast(DType::F32)?)?.mean_all()
    }
}

/// Keras's `LossScaleOptimizer(SGD(1/8, global_clipnorm=1/2),
/// initial_scale=2^20, dynamic_growth_steps=2)`.
pub(super) fn loss_scaled() -> Result<LossScaleOptimizer<Sgd>> {
    LossScaleOptimizer::new(Sgd::new(0.125).global_clipnorm(0.5)?)
        .initial_scale(2f64.powi(20))?
        .dynamic_growth_steps(2)
}

/// One training step: the loss, the optimizer skipping or applying.
pub(super) fn mixed_step(m: &Mixed, opt: &Mutex<LossScaleOptimizer<Sgd>>, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let tape = GradientTape::new();
    let loss = tape.record(|| m.loss(x, y))?;
    opt.lock().unwrap().minimize(&tape, &loss, &m.vars())?;
    Ok(loss)
}

#[test]
fn mixed_precision_dynamic_loss_scaling_matches_keras() -> Result<()> {
    let x = fill(&[4, 4], 0.7, 2.0).cast(DType::F16)?;
    let y = Tensor::vector(&[0i64, 2, 1, 2]);
    let mut check = Check::with(DATA, 0.0).tolerance(REL16);
    for traced in [false, true] {
        let what = if traced { "traced" } else { "eager" };
        let m = Arc::new(Mixed::new()?);
        let opt = Arc::new(Mutex::new(loss_scaled()?));
        // the whole step traced, as Keras's under tf.function: the graph
        // decides at each call whether to skip (gradtape refused the
        // wrapper inside a trace before)
        let step = {
            let (m, opt) = (m.clone(), opt.clone());
            function(move |(x, y): &(Tensor, Tensor)| mixed_step(&m, &opt, x, y))
        };
        let args = (x.clone(), y.clone());
        for s in 1..=5 {
            let loss = if traced {
                step.call(&args)?
            } else {
                mixed_step(&m, &opt, &x, &y)?
            };
            let opt = opt.lock().unwrap();
            let finite = Tensor::scalar(if opt.last_step_skipped() { 0.0 } else { 1.0 });
            check.one(what, &format!("mixed{s}_loss"), Some(&loss));
            check.one(what, &format!("mixed{s}_finite"), Some(&finite));
            check.one(
                what,
                &format!("mixed{s}_scale"),
                Some(&Tensor::scalar(opt.loss_scale())),
            );
        }
        if traced {
            assert_eq!(step.trace_count(), 1, "the scale's changes retraced");
        }
        // three skipped steps, two applied
        assert_eq!(opt.lock().unwrap().iterations(), 2, "{what}");
        check.vars(what, "mixed_weight", &m.vars());
    }
    check.finish("mixed f16", 40);
    Ok(())
}
