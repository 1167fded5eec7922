//! The `scale_into_update` pass: a traced training step that clips its
//! gradients to a global norm (`clip_gradients_by_global_norm`, or an
//! optimizer's `global_clipnorm`) hands the optimizer's `ApplyUpdates`
//! node the unclipped dense gradients and the factor, and the update loop
//! multiplies as it reads (the listing shows `scaled=N`).
//!
//! The reference is the same run traced with the pass off: every variable
//! and every loss must be the same bits after several steps (and close to
//! the eager run's: the traced graph's own sums round differently from the
//! eager ones, with or without the pass), on two model shapes (a tanh MLP and a two-block residual model
//! with an embedding, whose sparse gradient is not folded), with AdamW,
//! plain SGD (which without the pass takes the one-pass
//! `apply_gradient_descent`), SGD with momentum and RMSprop, in `f32` and
//! `f64`, with the norm above the clip (the factor below 1) and below it.
//! Where the pass must not fold (a clipped gradient read elsewhere too; an
//! optimizer accumulating gradients, whose step reads them as they are
//! given), the listing says so and the values still match.

use std::sync::{Arc, Mutex};

use gradtape::optim::{clip_gradients_by_global_norm, AdamW, Optimizer, RmsProp, Sgd};
use gradtape::{DType, Function, FunctionOptions, Gradient, GradientTape, Result, Rng, Tensor, Variable};

const PASS: &str = "scale_into_update";
const STEPS: usize = 4;

/// A model: its variables and its loss on a batch.
trait Model: Send + Sync + 'static {
    fn vars(&self) -> Vec<Variable>;
    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor>;
}

/// `tanh(x W1 + b1) W2 + b2`, squared error.
struct Mlp {
    vars: Vec<Variable>,
}

impl Mlp {
    fn new(dtype: DType, din: usize, hidden: usize, dout: usize, scale: f64) -> Result<Mlp> {
        let mut rng = Rng::new(11);
        let vars = vec![
            Variable::builder(rng.normal(&[din, hidden], 0.0, scale, dtype)?)
                .name("w1")
                .build(),
            Variable::builder(rng.normal(&[hidden], 0.0, scale, dtype)?)
                .name("b1")
                .build(),
            Variable::builder(rng.normal(&[hidden, dout], 0.0, scale, dtype)?)
                .name("w2")
                .build(),
            Variable::builder(rng.normal(&[dout], 0.0, scale, dtype)?)
                .name("b2")
                .build(),
        ];
        Ok(Mlp { vars })
    }
}

impl Model for Mlp {
    fn vars(&self) -> Vec<Variable> {
        self.vars.clone()
    }
    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let v = &self.vars;
        let h = x.matmul(&v[0].read())?.add(&v[1].read())?.tanh()?;
        h.matmul(&v[2].read())?.add(&v[3].read())?.sub(y)?.square()?.mean_all()
    }
}

/// Token embeddings (a sparse gradient), two residual blocks `x + gelu(x
/// W1) W2`, and a squared error against `y`.
struct Residual {
    vars: Vec<Variable>,
}

impl Residual {
    fn new(vocab: usize, width: usize) -> Result<Residual> {
        let mut rng = Rng::new(12);
        let mut vars = vec![Variable::builder(rng.normal(&[vocab, width], 0.0, 0.5, DType::F32)?)
            .name("embeddings")
            .build()];
        for b in 0..2 {
            vars.push(
                Variable::builder(rng.normal(&[width, 2 * width], 0.0, 0.2, DType::F32)?)
                    .name(format!("w1_{b}"))
                    .build(),
            );
            vars.push(
                Variable::builder(rng.normal(&[2 * width, width], 0.0, 0.2, DType::F32)?)
                    .name(format!("w2_{b}"))
                    .build(),
            );
        }
        Ok(Residual { vars })
    }
}

impl Model for Residual {
    fn vars(&self) -> Vec<Variable> {
        self.vars.clone()
    }
    fn loss(&self, ids: &Tensor, y: &Tensor) -> Result<Tensor> {
        let v = &self.vars;
        let mut x = v[0].read().gather(ids, 0)?;
        for b in 0..2 {
            let h = x.matmul(&v[1 + 2 * b].read())?.gelu(false)?;
            x = x.add(&h.matmul(&v[2 + 2 * b].read())?)?;
        }
        x.sub(y)?.square()?.mean_all()
    }
}

/// How a step clips and what else it does with the clipped gradients.
#[derive(Clone, Copy, PartialEq)]
enum Clipping {
    /// `clip_gradients_by_global_norm` before `apply`.
    Explicit,
    /// The optimizer's own `global_clipnorm`.
    OptimizerOption,
    /// Explicit, and the step also returns the sum of the first clipped
    /// gradient (read by something besides the update: not folded).
    ReadElsewhere,
}

/// One step: loss, gradients (sparse where the tape keeps them so),
/// clipped, applied; returns the loss and a second number (the global
/// norm, or the clipped gradient's sum for `ReadElsewhere`).
fn step(
    model: &dyn Model,
    opt: &Mutex<Box<dyn Optimizer + Send>>,
    clip: f64,
    how: Clipping,
    x: &Tensor,
    y: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let vars = model.vars();
    let tape = GradientTape::new();
    let loss = tape.record(|| model.loss(x, y))?;
    let grads = tape.sparse_gradient(&loss, &vars)?;
    let (grads, other) = match how {
        Clipping::OptimizerOption => (grads, loss.clone()),
        Clipping::Explicit => clip_gradients_by_global_norm(&grads, clip)?,
        Clipping::ReadElsewhere => {
            let (grads, _) = clip_gradients_by_global_norm(&grads, clip)?;
            let Some(Gradient::Dense(first)) = grads.last().cloned().flatten() else {
                panic!("the last variable's gradient is dense");
            };
            (grads, first.sum_all()?)
        }
    };
    let mut opt = opt.lock().unwrap();
    opt.apply(grads.into_iter().zip(vars.iter().cloned()).collect())?;
    Ok((loss, other))
}

/// What a run ends with: every loss and second number, then every
/// variable, as bits.
fn run(
    model: Arc<dyn Model>,
    make: &dyn Fn() -> Box<dyn Optimizer + Send>,
    clip: f64,
    how: Clipping,
    batch: &(Tensor, Tensor),
    mode: Option<FunctionOptions>,
) -> Result<(Vec<f64>, String)> {
    // (fresh variables: each run starts from the model's initial values)
    let start: Vec<Tensor> = model.vars().iter().map(|v| v.read()).collect();
    let opt = Arc::new(Mutex::new(make()));
    let mut out = Vec::new();
    let mut listing = String::new();
    let body = {
        let (model, opt) = (model.clone(), opt.clone());
        move |(x, y): &(Tensor, Tensor)| step(&*model, &opt, clip, how, x, y)
    };
    let traced = mode.map(|o| Function::with_options(body.clone(), o));
    for _ in 0..STEPS {
        let (loss, other) = match &traced {
            Some(f) => f.call(batch)?,
            None => body(batch)?,
        };
        out.push(loss.cast(DType::F64)?.item()?);
        out.push(other.cast(DType::F64)?.item()?);
    }
    if let Some(f) = &traced {
        listing = f.concrete(batch)?.optimized_graph().to_string();
    }
    for v in model.vars() {
        out.extend(v.read().cast(DType::F64)?.to_vec::<f64>()?);
    }
    for (v, s) in model.vars().iter().zip(start) {
        v.assign(&s)?;
    }
    Ok((out, listing))
}

/// The `scaled=N` of the listing's `ApplyUpdates` node (0 when absent).
fn scaled(listing: &str) -> usize {
    let line = listing
        .lines()
        .find(|l| l.contains("ApplyUpdates"))
        .expect("an update node");
    line.split("scaled=")
        .nth(1)
        .map_or(0, |r| r.split(']').next().unwrap().parse().unwrap())
}

/// Runs eagerly, traced and traced without the pass; asserts the traced
/// runs the same bits and the eager one within `tol` of them (relative
/// to 1 + |value|; a gradient left unscaled moves the values by far more),
/// and returns the folded count.
fn check(
    model: Arc<dyn Model>,
    make: &dyn Fn() -> Box<dyn Optimizer + Send>,
    clip: f64,
    how: Clipping,
    batch: &(Tensor, Tensor),
) -> Result<usize> {
    let (eager, _) = run(model.clone(), make, clip, how, batch, None)?;
    let off = FunctionOptions::default().disable_pass(PASS)?;
    let (without, l_off) = run(model.clone(), make, clip, how, batch, Some(off))?;
    let (with, l_on) = run(model, make, clip, how, batch, Some(FunctionOptions::default()))?;
    assert_eq!(scaled(&l_off), 0, "{l_off}");
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(bits(&with) == bits(&without), "the pass changed values");
    let tol = if batch.1.dtype() == DType::F64 { 1e-11 } else { 2e-5 };
    for (i, (a, b)) in with.iter().zip(&eager).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "value {i}: traced {a}, eager {b}"
        );
    }
    Ok(scaled(&l_on))
}

fn mlp_batch(dtype: DType, rows: usize, din: usize, dout: usize) -> Result<(Tensor, Tensor)> {
    let mut rng = Rng::new(3);
    Ok((
        rng.normal(&[rows, din], 0.0, 1.0, dtype)?,
        rng.normal(&[rows, dout], 0.0, 1.0, dtype)?,
    ))
}

/// A maker of a fresh optimizer.
type Make = Box<dyn Fn() -> Box<dyn Optimizer + Send>>;

fn optimizers() -> Vec<(&'static str, Make)> {
    vec![
        (
            "adamw",
            Box::new(|| Box::new(AdamW::new(1e-2).weight_decay(0.01)) as Box<dyn Optimizer + Send>),
        ),
        ("sgd", Box::new(|| Box::new(Sgd::new(0.1)) as Box<dyn Optimizer + Send>)),
        (
            "momentum",
            Box::new(|| Box::new(Sgd::new(0.1).momentum(0.9).unwrap()) as Box<dyn Optimizer + Send>),
        ),
        (
            "rmsprop",
            Box::new(|| Box::new(RmsProp::new(1e-2)) as Box<dyn Optimizer + Send>),
        ),
    ]
}

#[test]
fn an_mlps_clipped_gradients_are_scaled_by_the_update_bit_for_bit() -> Result<()> {
    // (two shapes and both float types; a clip of 0.05 scales every step
    // down, one of 1e6 leaves the factor 1: both fold, both exact)
    for (dtype, din, hidden, dout, rows) in [(DType::F32, 24, 40, 6, 32), (DType::F64, 7, 96, 3, 20)] {
        let batch = mlp_batch(dtype, rows, din, dout)?;
        for (name, make) in optimizers() {
            for clip in [0.05, 1e6] {
                let model: Arc<dyn Model> = Arc::new(Mlp::new(dtype, din, hidden, dout, 0.5)?);
                let folded = check(model, &*make, clip, Clipping::Explicit, &batch)?;
                assert_eq!(folded, 4, "{name} {dtype:?} clip {clip}: every gradient folded");
            }
        }
    }
    Ok(())
}

#[test]
fn an_optimizers_global_clipnorm_folds_too() -> Result<()> {
    let batch = mlp_batch(DType::F32, 16, 10, 4)?;
    let model: Arc<dyn Model> = Arc::new(Mlp::new(DType::F32, 10, 64, 4, 0.5)?);
    let make = || Box::new(AdamW::new(1e-2).global_clipnorm(0.1).unwrap()) as Box<dyn Optimizer + Send>;
    assert_eq!(check(model, &make, 0.0, Clipping::OptimizerOption, &batch)?, 4);
    Ok(())
}

#[test]
fn a_sparse_embedding_gradient_is_left_and_the_dense_ones_fold() -> Result<()> {
    // (the embedding's rows come as values and indices: its clipped values
    // stay a `Mul`; the four dense weights fold)
    for (vocab, width, rows) in [(17usize, 32usize, 12usize), (40, 48, 30)] {
        let model: Arc<dyn Model> = Arc::new(Residual::new(vocab, width)?);
        let ids = Tensor::from_vec((0..rows).map(|i| ((i * 7) % vocab) as i64).collect(), &[rows])?;
        let y = Rng::new(4).normal(&[rows, width], 0.0, 1.0, DType::F32)?;
        let make = || Box::new(AdamW::new(1e-2)) as Box<dyn Optimizer + Send>;
        assert_eq!(check(model, &make, 0.2, Clipping::Explicit, &(ids, y))?, 4);
    }
    Ok(())
}

#[test]
fn a_clipped_gradient_read_elsewhere_is_not_folded() -> Result<()> {
    // (the last gradient's clipped value is also summed into an output:
    // its `Mul` must stay; the other three fold)
    let batch = mlp_batch(DType::F32, 16, 10, 4)?;
    let model: Arc<dyn Model> = Arc::new(Mlp::new(DType::F32, 10, 32, 4, 0.5)?);
    let make = || Box::new(AdamW::new(1e-2)) as Box<dyn Optimizer + Send>;
    assert_eq!(check(model, &make, 0.05, Clipping::ReadElsewhere, &batch)?, 3);
    Ok(())
}

#[test]
fn an_accumulating_optimizer_gets_the_products_as_before() -> Result<()> {
    // (gradient accumulation reads the gradients as given inside the
    // node: the factors fold, the node multiplies them out first)
    let batch = mlp_batch(DType::F32, 16, 10, 4)?;
    let model: Arc<dyn Model> = Arc::new(Mlp::new(DType::F32, 10, 32, 4, 0.5)?);
    let make = || Box::new(AdamW::new(1e-2).gradient_accumulation_steps(2).unwrap()) as Box<dyn Optimizer + Send>;
    assert_eq!(check(model, &make, 0.05, Clipping::Explicit, &batch)?, 4);
    Ok(())
}
