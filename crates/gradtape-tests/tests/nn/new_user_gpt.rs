//! A small GPT (decoder-only) as a new user would write it from the docs,
//! against TensorFlow 2.21 / Keras 3.15.1 (`tests/reference/new_user_models5.py`
//! printed the numbers of `tests/data/new_user_models5.txt`): an
//! `Embedding` for the tokens and a plain variable for the learned
//! positions, one pre-norm block (`LayerNorm`, `MultiHeadAttention` with
//! `use_causal_mask`, an exact-GELU `Dense` MLP), a final `LayerNorm`, the
//! output projection tied to the token table (`Embedding::attend`);
//! categorical cross-entropy from logits with label smoothing 1/8 on the
//! one-hot next tokens; the gradients clipped by `clip_by_global_norm`
//! (1/2); `AdamW` (weight decay 1/8) under `CosineDecay` with a linear
//! warm-up (2 steps from 2^-7 to 2^-5, then 2 steps of cosine decay).
//! Three steps, so that the rate warms up and then decays, eagerly and as
//! a traced `function` (traced once: the schedule follows the step counter
//! in the graph), in float64 at 1e-12 relative and float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::losses::Loss;
use gradtape::nn::{Activation, AttentionArgs, Dense, Embedding, Layer, LayerNorm, Module, MultiHeadAttention};
use gradtape::optim::{clip_by_global_norm, AdamW, CosineDecay, Optimizer};
use gradtape::{DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{set_weights_as, train_steps, Check, Stepper};

pub(super) const DATA: &str = include_str!("../data/new_user_models5.txt");

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding, which AdamW's first steps (each gradient
/// divided by its own magnitude) carry into the weights.
const REL32: f64 = 2e-4;

pub(super) struct Gpt {
    tok: Embedding,
    pos: Variable,
    ln1: LayerNorm,
    mha: MultiHeadAttention,
    ln2: LayerNorm,
    fc1: Dense,
    fc2: Dense,
    lnf: LayerNorm,
    label_smoothing: f64,
    opt: Mutex<AdamW>,
}

/// The LayerNorm scales among the weights (set to 1 + fill).
const GAMMAS: [usize; 3] = [2, 12, 18];

impl Gpt {
    fn new(dt: DType) -> Result<Gpt> {
        Gpt::sized(11, 6, 8, 2, 16, dt)
    }

    /// vocabulary, context, width, heads (of width / heads) and MLP width.
    pub(super) fn sized(vocab: usize, ctx: usize, d: usize, heads: usize, mlp: usize, dt: DType) -> Result<Gpt> {
        let rng = &mut Rng::new(0);
        let ln = || LayerNorm::builder(d).epsilon(1e-5).dtype(dt).build();
        let m = Gpt {
            tok: Embedding::builder(vocab, d).dtype(dt).build(rng)?,
            pos: Variable::new(Tensor::zeros(&[ctx, d], dt)),
            ln1: ln()?,
            mha: MultiHeadAttention::builder(heads, d / heads).dtype(dt).build(d, rng)?,
            ln2: ln()?,
            fc1: dense(d, mlp, Some(Activation::Gelu), dt)?,
            fc2: dense(mlp, d, None, dt)?,
            lnf: ln()?,
            label_smoothing: 0.125,
            opt: Mutex::new(
                AdamW::new(CosineDecay::new(2f64.powi(-7), 2).warmup(2f64.powi(-5), 2))
                    .weight_decay(0.125)
                    .betas(0.875, 1.0 - 2f64.powi(-10))?
                    .epsilon(2f64.powi(-20))?,
            ),
        };
        set_weights_as(&m.vars(), 300.0, &GAMMAS);
        Ok(m)
    }

    /// The next-token logits of `ids` `[b, t]`.
    fn logits(&self, ids: &Tensor) -> Result<Tensor> {
        let h = self.tok.forward(ids, true)?.add(&self.pos.read())?;
        let a = self.ln1.forward(&h, true)?;
        let h = h.add(&self.mha.call_with(&a, &a, AttentionArgs::new().use_causal_mask(true))?)?;
        let mlp = self
            .fc2
            .forward(&self.fc1.forward(&self.ln2.forward(&h, true)?, true)?, true)?;
        let h = h.add(&mlp)?;
        self.tok.attend(&self.lnf.forward(&h, true)?)
    }
}

impl Stepper for Gpt {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.tok.trainable_variables();
        v.push(self.pos.clone());
        for l in [
            &self.ln1 as &dyn Layer,
            &self.mha,
            &self.ln2,
            &self.fc1,
            &self.fc2,
            &self.lnf,
        ] {
            v.extend(l.trainable_variables());
        }
        v
    }

    /// data: token ids [b, t] and the next tokens [b, t] (i64); outputs
    /// the logits, the loss and the gradients' global norm, then the
    /// gradients before clipping.
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let (logits, loss) = tape.record(|| {
            let logits = self.logits(&data[0])?;
            let vocab = logits.shape()[2];
            let y = data[1].one_hot(vocab, 1.0, 0.0, -1, logits.dtype())?;
            let loss = Loss::CategoricalCrossentropy {
                from_logits: true,
                label_smoothing: self.label_smoothing,
            }
            .call(&y, &logits)?;
            Ok((logits, loss))
        })?;
        let grads = tape.gradient(&loss, &vars)?;
        let (clipped, norm) = clip_by_global_norm(&grads, 0.5)?;
        self.opt
            .lock()
            .unwrap()
            .apply_gradients(clipped.into_iter().zip(&vars))?;
        Ok([Some(logits), Some(loss), Some(norm)]
            .into_iter()
            .chain(grads)
            .collect())
    }
}

/// The batch of the test: ids and next tokens.
pub(super) fn gpt_batch() -> Result<[Tensor; 2]> {
    let ids = [3i64, 7, 1, 9, 4, 2, 5, 0, 10, 6, 8, 1];
    let next = [7i64, 1, 9, 4, 2, 6, 0, 10, 6, 8, 1, 3];
    Ok([
        Tensor::from_vec(ids.to_vec(), &[2, 6])?,
        Tensor::from_vec(next.to_vec(), &[2, 6])?,
    ])
}

#[test]
fn small_gpt_tied_label_smoothed_warmup_cosine_adamw_matches_tensorflow() -> Result<()> {
    // the key projection's bias gets a gradient that is zero in exact
    // arithmetic (the softmax ignores a shift common to a query's
    // scores): roundoff on both sides, compared absolutely at 1e-16 in
    // float64 and 2e-7 in float32 (where it reaches 3e-8)
    let (mut c64, mut c32) = (Check::with(DATA, 1e-4), Check::with(DATA, 1e-3).tolerance(REL32));
    let runs = train_steps(
        &mut c64,
        &mut c32,
        "gpt",
        &["logits", "loss", "norm"],
        Gpt::new,
        &gpt_batch()?,
        3,
    )?;
    // the schedule's rate after three steps: the cosine's midpoint
    for (what, m) in &runs.models {
        let lr = m.opt.lock().unwrap().learning_rate();
        assert!((lr - 2f64.powi(-6)).abs() < 1e-15, "{what}: lr {lr}");
    }
    c64.finish("gpt f64", 6000);
    c32.finish("gpt f32", 6000);
    Ok(())
}
