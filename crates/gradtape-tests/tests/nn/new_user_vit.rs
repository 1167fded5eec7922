//! Two attention models over inputs that are not token sequences, as a
//! new user would write them from the docs, against TensorFlow 2.21 /
//! Keras 3.15.1 (`tests/reference/new_user_models6.py` printed the numbers
//! of `tests/data/new_user_models6.txt`):
//!
//! - a ViT-tiny: 8x8x3 images cut into four 4x4 patches by a strided
//!   `Conv2D`, a learned class token (a plain variable, tiled over the
//!   batch) concatenated in front, learned positions
//!   (`PositionalEmbedding`), two pre-norm `TransformerBlock`s, a final
//!   `LayerNorm` and a `Dense` classifier on the class token; AdamW;
//! - a Perceiver-style cross-attention: a learned latent array (4 x 6)
//!   attends over a longer input (9 positions: `t_q != t_k`) with a
//!   `MultiHeadAttention` whose key input (the input and two positional
//!   features, 7) differs from its value input (5), `value_dim` (5) from
//!   `key_dim` (4) and `output_shape` (8) from the query's width (6); a
//!   `value_mask` hides the second input's padding; then a latent
//!   `TransformerBlock` of width 8, the mean over the latents and a `Dense`
//!   regressor; MSE; Adam.
//!
//! Two steps each, eagerly and as a traced `function` (traced once), in
//! float64 at 1e-12 relative and float32 at a rounding tolerance; the
//! traced runs' weights equal the eager runs' to rounding.
//!
//! Every attention here has `key_dim` 4: Keras's float64
//! `MultiHeadAttention` on TensorFlow scales the scores by `1/√key_dim`
//! rounded to float32 (its `tf.cast` of a Python float makes a float32
//! tensor first), 3.7e-11 relative off the float64 result at `key_dim` 3
//! (measured against NumPy); `1/2` is exact in both.

use std::sync::Mutex;

use gradtape::nn::losses::Loss;
use gradtape::nn::{
    AttentionArgs, Conv2D, Dense, Layer, LayerNorm, Module, MultiHeadAttention, PositionalEmbedding, TransformerBlock,
};
use gradtape::optim::{Adam, AdamW};
use gradtape::{DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{adam, fill, set_weights_as, train_both, update, Check, Runs, Stepper};

pub(super) const DATA: &str = include_str!("../data/new_user_models6.txt");

/// The LayerNorm scales among a `TransformerBlock`'s 14 variables (set to
/// 1 + fill, as the script's `BLOCK_GAMMAS`).
pub(super) const BLOCK_GAMMAS: [usize; 2] = [0, 10];

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding, which Adam's first steps (each gradient
/// divided by its own magnitude) carry into the weights (the ViT's reach
/// 3.8e-5).
const REL32: f64 = 1e-4;

/// The weights of each traced run against the eager run's of the same
/// dtype (`runs.models`: eager and traced f64, then f32), relative to each
/// variable's largest element: both compute one model with the same ops,
/// so they differ by rounding only (the compiled graph's fused kernels
/// sum in other orders).
pub(super) fn traced_equals_eager<M: Stepper>(runs: &Runs<M>, rel64: f64, rel32: f64) {
    for (pair, rel) in runs.models.chunks(2).zip([rel64, rel32]) {
        let [(_, eager), (what, traced)] = pair else {
            panic!("eager and traced runs in pairs")
        };
        for (j, (e, t)) in eager.vars().iter().zip(traced.vars()).enumerate() {
            let (e, t) = (e.read().to_vec_f64(), t.read().to_vec_f64());
            let scale = e.iter().fold(0f64, |m, x| m.max(x.abs()));
            for (i, (a, b)) in t.iter().zip(&e).enumerate() {
                assert!((a - b).abs() <= rel * scale, "{what} weight {j}[{i}]: {a}, eager {b}");
            }
        }
    }
}

/// A pre-norm block of width `d`, `heads` heads of `d / heads`, MLP `ff`.
pub(super) fn block(d: usize, heads: usize, ff: usize, dt: DType) -> Result<TransformerBlock> {
    TransformerBlock::builder(d, heads, ff)
        .dtype(dt)
        .build(&mut Rng::new(0))
}

// ---- 1. ViT-tiny -------------------------------------------------------------

struct Vit {
    patches: Conv2D,
    cls: Variable,
    pos: PositionalEmbedding,
    blocks: [TransformerBlock; 2],
    ln: LayerNorm,
    head: Dense,
    opt: Mutex<AdamW>,
}

impl Vit {
    fn new(dt: DType) -> Result<Vit> {
        let rng = &mut Rng::new(0);
        let m = Vit {
            patches: Conv2D::builder(3, 8, [4, 4]).strides([4, 4]).dtype(dt).build(rng)?,
            cls: Variable::new(Tensor::zeros(&[1, 1, 8], dt)),
            pos: PositionalEmbedding::builder(5, 8).dtype(dt).build(rng)?,
            blocks: [block(8, 2, 16, dt)?, block(8, 2, 16, dt)?],
            ln: LayerNorm::builder(8).epsilon(1e-5).dtype(dt).build()?,
            head: dense(8, 3, None, dt)?,
            opt: Mutex::new(
                AdamW::new(2f64.powi(-7))
                    .weight_decay(0.125)
                    .betas(0.875, 1.0 - 2f64.powi(-10))?
                    .epsilon(2f64.powi(-20))?,
            ),
        };
        let gammas: Vec<usize> = BLOCK_GAMMAS.iter().flat_map(|g| [4 + g, 18 + g]).chain([32]).collect();
        set_weights_as(&m.vars(), 400.0, &gammas);
        Ok(m)
    }

    /// The class logits of images `[b, 8, 8, 3]`.
    fn logits(&self, img: &Tensor) -> Result<Tensor> {
        let b = img.shape()[0];
        let p = self.patches.forward(img, true)?.reshape(&[b, 4, 8])?;
        let cls = self.cls.read().tile(&[b, 1, 1])?;
        let mut h = self.pos.add_to(&Tensor::concat(&[&cls, &p], 1)?, 0)?;
        for blk in &self.blocks {
            h = blk.forward(&h, true)?;
        }
        let first = self.ln.forward(&h, true)?.narrow(1, 0, 1)?.squeeze(&[1])?;
        self.head.forward(&first, true)
    }
}

impl Stepper for Vit {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.patches.trainable_variables();
        v.push(self.cls.clone());
        v.extend(self.pos.trainable_variables());
        for b in &self.blocks {
            v.extend(b.trainable_variables());
        }
        v.extend(self.ln.trainable_variables());
        v.extend(self.head.trainable_variables());
        v
    }

    /// data: images [2, 8, 8, 3] and labels [2] (i64).
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let tape = GradientTape::new();
        let (logits, loss) = tape.record(|| {
            let logits = self.logits(&data[0])?;
            let loss = Loss::SparseCategoricalCrossentropy { from_logits: true }.call(&data[1], &logits)?;
            Ok((logits, loss))
        })?;
        update(&tape, &loss, &self.vars(), &self.opt, vec![logits, loss.clone()])
    }
}

#[test]
fn vit_tiny_conv_patches_class_token_adamw_matches_tensorflow() -> Result<()> {
    // the key biases' gradients are zero in exact arithmetic (a shift
    // common to a query's scores): roundoff, compared absolutely
    let (mut c64, mut c32) = (Check::with(DATA, 1e-4), Check::with(DATA, 1e-3).tolerance(REL32));
    let data = [fill(&[2, 8, 8, 3], 0.4, 2.0), Tensor::from_vec(vec![2i64, 0], &[2])?];
    let runs = train_both(&mut c64, &mut c32, "vit", &["logits", "loss"], Vit::new, &data)?;
    traced_equals_eager(&runs, 1e-14, 1e-6);
    c64.finish("vit f64", 3000);
    c32.finish("vit f32", 3000);
    Ok(())
}

// ---- 2. Perceiver-style cross-attention --------------------------------------

struct Perceiver {
    latents: Variable,
    cross: MultiHeadAttention,
    block: TransformerBlock,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Perceiver {
    fn new(dt: DType) -> Result<Perceiver> {
        let rng = &mut Rng::new(0);
        let m = Perceiver {
            latents: Variable::new(Tensor::zeros(&[4, 6], dt)),
            cross: MultiHeadAttention::builder(2, 4)
                .value_dim(5)
                .value_features(5)
                .key_features(7)
                .output_shape(8)
                .dtype(dt)
                .build(6, rng)?,
            block: TransformerBlock::builder(8, 2, 16).dtype(dt).build(rng)?,
            head: dense(8, 2, None, dt)?,
            opt: Mutex::new(adam()),
        };
        let gammas: Vec<usize> = BLOCK_GAMMAS.iter().map(|g| 9 + g).collect();
        set_weights_as(&m.vars(), 440.0, &gammas);
        Ok(m)
    }
}

impl Stepper for Perceiver {
    fn vars(&self) -> Vec<Variable> {
        let mut v = vec![self.latents.clone()];
        v.extend(self.cross.trainable_variables());
        v.extend(self.block.trainable_variables());
        v.extend(self.head.trainable_variables());
        v
    }

    /// data: the inputs [b, 9, 5], their keys [b, 9, 7], the real
    /// positions [b, 9] (bool) and the targets [b, 2].
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (x, key, real, y) = (&data[0], &data[1], &data[2], &data[3]);
        let tape = GradientTape::new();
        let (z, pred, loss) = tape.record(|| {
            let b = x.shape()[0];
            let q = self.latents.read().expand_dims(0)?.tile(&[b, 1, 1])?;
            let z = self
                .cross
                .call_with(&q, x, AttentionArgs::new().key(key).value_mask(real))?;
            let z = self.block.forward(&z, true)?;
            let pred = self.head.forward(&z.mean(&[1], false)?, true)?;
            let loss = Loss::MeanSquaredError.call(y, &pred)?;
            Ok((z, pred, loss))
        })?;
        update(&tape, &loss, &self.vars(), &self.opt, vec![z, pred, loss.clone()])
    }
}

/// The Perceiver's data: inputs, keys (the inputs and `sin`, `cos` of
/// position / 8), the real positions, the targets.
fn perceiver_data() -> Result<Vec<Tensor>> {
    let x = fill(&[2, 9, 5], 0.9, 2.0);
    let pos: Vec<f64> = (0..9)
        .flat_map(|p| {
            let a = p as f64 / 8.0;
            [a.sin(), a.cos()]
        })
        .collect();
    let pos = Tensor::from_vec(pos, &[1, 9, 2])?.tile(&[2, 1, 1])?;
    let key = Tensor::concat(&[&x, &pos], -1)?;
    let real: Vec<bool> = (0..18).map(|i| i < 15).collect();
    Ok(vec![x, key, Tensor::from_vec(real, &[2, 9])?, fill(&[2, 2], 1.7, 1.0)])
}

#[test]
fn perceiver_latent_cross_attention_other_key_value_widths_matches_tensorflow() -> Result<()> {
    // the attentions' key biases get gradients that are zero in exact
    // arithmetic (the softmax ignores a shift common to a query's
    // scores): roundoff of 1e-16 on either side, compared absolutely at
    // 1e-15 in float64
    let (mut c64, mut c32) = (Check::with(DATA, 1e-3), Check::with(DATA, 1e-3).tolerance(REL32));
    let runs = train_both(
        &mut c64,
        &mut c32,
        "perceiver",
        &["latents", "pred", "loss"],
        Perceiver::new,
        &perceiver_data()?,
    )?;
    traced_equals_eager(&runs, 1e-14, 1e-6);
    // the padding is hidden: changing the padded inputs and keys changes
    // nothing (the first model after its two steps, eager f64)
    let m = &runs.models[0].1;
    let mut data = perceiver_data()?;
    let z = |d: &[Tensor]| -> Result<Vec<f64>> {
        let q = m.latents.read().expand_dims(0)?.tile(&[2, 1, 1])?;
        let args = AttentionArgs::new().key(&d[1]).value_mask(&d[2]);
        Ok(m.cross.call_with(&q, &d[0], args)?.to_vec_f64())
    };
    let before = z(&data)?;
    let noise = fill(&[2, 9, 5], 3.1, 5.0).mul(&data[2].logical_not()?.cast(DType::F64)?.expand_dims(-1)?)?;
    data[0] = data[0].add(&noise)?;
    data[1] = data[1].add(&Tensor::concat(&[&noise, &noise.narrow(2, 0, 2)?], -1)?)?;
    assert_eq!(z(&data)?, before, "the padded positions changed the latents");
    c64.finish("perceiver f64", 1500);
    c32.finish("perceiver f32", 1500);
    Ok(())
}

// ---- The mistakes a new user makes with these models --------------------------

/// Each mistake a clear error naming the op (and the shapes), no panic.
#[test]
fn transformer_model_mistakes_are_errors_naming_the_op() -> Result<()> {
    use gradtape::nn::{Embedding, KvCache, RotaryEmbedding};
    let rng = &mut Rng::new(0);
    let dt = DType::F64;
    let patches = Conv2D::builder(3, 8, [4, 4]).strides([4, 4]).dtype(dt).build(rng)?;
    let emb = Embedding::builder(13, 8).dtype(dt).build(rng)?;
    let blk = block(8, 2, 16, dt)?;
    let cross = MultiHeadAttention::builder(2, 4)
        .value_features(5)
        .key_features(7)
        .dtype(dt)
        .build(6, rng)?;
    let mha = MultiHeadAttention::builder(4, 4)
        .num_key_value_heads(2)
        .dtype(dt)
        .build(8, rng)?;
    let h = fill(&[3, 6, 8], 0.1, 1.0);
    let mut cache = KvCache::new();
    mha.call_cached(&fill(&[2, 3, 8], 0.2, 1.0), &mut cache)?;
    let mistakes: Vec<(&str, Result<Tensor>, &[&str])> = vec![
        (
            "NCHW images to a channels-last Conv2D",
            patches.forward(&fill(&[2, 3, 8, 8], 0.0, 1.0), true),
            &["[2, 3, 8, 8]"],
        ),
        (
            "a masked position past the sequence",
            h.gather_with(&Tensor::from_vec(vec![2i64, 6, 1, 3, 0, 0], &[3, 2])?, 1, 1),
            &["gather", "6"],
        ),
        (
            "a token id past the vocabulary",
            emb.forward(&Tensor::from_vec(vec![3i64, 13], &[1, 2])?, true),
            &["13"],
        ),
        (
            "the value input as the key, of the wrong width",
            cross.call_with(
                &fill(&[2, 4, 6], 0.0, 1.0),
                &fill(&[2, 9, 5], 0.0, 1.0),
                AttentionArgs::new().key(&fill(&[2, 9, 5], 0.0, 1.0)),
            ),
            &["MultiHeadAttention", "key", "[2, 9, 5]"],
        ),
        (
            "a padding mask of the wrong length",
            blk.forward_with_padding(&h, &Tensor::from_vec(vec![true; 15], &[3, 5])?, true),
            &["TransformerBlock", "padding mask", "[3, 5]"],
        ),
        (
            "a padding mask of 0/1 floats",
            blk.forward_with_padding(&h, &Tensor::ones(&[3, 6], dt), true),
            &["TransformerBlock", "padding mask", "[3, 6]"],
        ),
        (
            "a cache of another batch",
            mha.call_cached(&fill(&[3, 1, 8], 0.3, 1.0), &mut cache),
            &["MultiHeadAttention", "cache"],
        ),
        (
            "a label past the vocabulary",
            Loss::SparseCategoricalCrossentropy { from_logits: true }
                .call(&Tensor::from_vec(vec![1i64, 13], &[2])?, &fill(&[2, 13], 0.0, 1.0)),
            &["13"],
        ),
    ];
    let mut bad = Vec::new();
    for (what, r, needles) in mistakes {
        match r {
            Ok(t) => bad.push(format!("{what}: no error, got {:?}", t.shape())),
            Err(e) => {
                let msg = e.to_string();
                eprintln!("{what}: {msg}");
                if let Some(n) = needles.iter().find(|n| !msg.contains(**n)) {
                    bad.push(format!("{what}: {msg:?} does not say {n:?}"));
                }
            }
        }
    }
    // rotary positions need an even key_dim
    let odd = MultiHeadAttention::builder(2, 3)
        .rotary_embedding(RotaryEmbedding::builder().build()?)
        .build(6, rng);
    match odd {
        Ok(_) => bad.push("rotary with key_dim 3: no error".into()),
        Err(e) => eprintln!("rotary with key_dim 3: {e}"),
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}
