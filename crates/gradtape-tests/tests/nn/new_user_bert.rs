//! Two padded-batch Transformers as a new user would write them from the
//! docs, against TensorFlow 2.21 / Keras 3.15.1
//! (`tests/reference/new_user_models6.py` printed the numbers of
//! `tests/data/new_user_models6.txt`):
//!
//! - a BERT-style masked-LM step: token, segment and learned position
//!   embeddings summed, an embedding `LayerNorm` (epsilon 1e-12), two
//!   post-norm `TransformerBlock`s (`normalize_first(false)`) over a
//!   padded batch (`forward_with_padding`: the padded keys hidden; the
//!   third sequence is all padding, whose rows see no key: Keras averages
//!   every value there, and so must the block), an MLM head (`Dense` with
//!   GELU, `LayerNorm`, the output projection tied to the token table
//!   with `Embedding::attend`, plus a bias), the loss on the masked
//!   positions only (`gather_with(.., batch_dims 1)` and the sample
//!   weights of `Loss::compute_weighted`); Adam;
//! - a left-padded causal decoder (a batch prepared for generation): token
//!   embeddings plus the fixed `sine_position_encoding`, one causal
//!   `TransformerBlock` with the padding mask (the first rows of the
//!   left-padded sequence see no key at all: the causal and padding masks
//!   combined), a `Dense` head, the next-token loss weighted by the real
//!   targets; Adam.
//!
//! Two steps each, eagerly and as a traced `function` (traced once), in
//! float64 at 1e-12 relative and float32 at a rounding tolerance.

use std::sync::Mutex;

use gradtape::nn::losses::{Loss, Reduction};
use gradtape::nn::{
    sine_position_encoding, Dense, Embedding, Layer, LayerNorm, Module, PositionalEmbedding, TransformerBlock,
};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_physics::dense;
use super::new_user_util::{adam, set_weights_as, train_both, update, Check, Stepper};
use super::new_user_vit::{traced_equals_eager, BLOCK_GAMMAS, DATA};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding, carried into the weights by Adam (the BERT's
/// reach 1.9e-6, the causal decoder's 2.3e-5).
const REL32: f64 = 1e-4;

/// The masked-token loss: the mean over all predicted slots of the
/// sparse cross-entropy times the slot's weight (Keras's
/// `SparseCategoricalCrossentropy(from_logits=True)(y, logits,
/// sample_weight=w)`).
fn weighted_loss(labels: &Tensor, logits: &Tensor, w: &Tensor) -> Result<Tensor> {
    Loss::SparseCategoricalCrossentropy { from_logits: true }.compute_weighted(
        labels,
        logits,
        Some(w),
        Reduction::SumOverBatchSize,
    )
}

// ---- 1. BERT masked LM -------------------------------------------------------

struct Bert {
    tok: Embedding,
    seg: Embedding,
    pos: PositionalEmbedding,
    ln: LayerNorm,
    blocks: [TransformerBlock; 2],
    mlm: Dense,
    mlm_ln: LayerNorm,
    bias: Variable,
    opt: Mutex<Adam>,
}

impl Bert {
    fn new(dt: DType) -> Result<Bert> {
        let rng = &mut Rng::new(0);
        let post_norm = |rng: &mut Rng| {
            TransformerBlock::builder(8, 2, 16)
                .normalize_first(false)
                .dtype(dt)
                .build(rng)
        };
        let m = Bert {
            tok: Embedding::builder(13, 8).dtype(dt).build(rng)?,
            seg: Embedding::builder(2, 8).dtype(dt).build(rng)?,
            pos: PositionalEmbedding::builder(6, 8).dtype(dt).build(rng)?,
            ln: LayerNorm::builder(8).epsilon(1e-12).dtype(dt).build()?,
            blocks: [post_norm(rng)?, post_norm(rng)?],
            mlm: dense(8, 8, Some(gradtape::nn::Activation::Gelu), dt)?,
            mlm_ln: LayerNorm::builder(8).epsilon(1e-12).dtype(dt).build()?,
            bias: Variable::new(Tensor::zeros(&[13], dt)),
            opt: Mutex::new(adam()),
        };
        let gammas: Vec<usize> = [3]
            .into_iter()
            .chain(BLOCK_GAMMAS.iter().flat_map(|g| [5 + g, 19 + g]))
            .chain([35])
            .collect();
        set_weights_as(&m.vars(), 410.0, &gammas);
        Ok(m)
    }
}

impl Stepper for Bert {
    fn vars(&self) -> Vec<Variable> {
        let mut v = Vec::new();
        for l in [&self.tok as &dyn Layer, &self.seg, &self.pos, &self.ln] {
            v.extend(l.trainable_variables());
        }
        for b in &self.blocks {
            v.extend(b.trainable_variables());
        }
        v.extend(self.mlm.trainable_variables());
        v.extend(self.mlm_ln.trainable_variables());
        v.push(self.bias.clone());
        v
    }

    /// data: token ids [b, t], segment ids [b, t], the predicted positions
    /// [b, 2], their labels [b, 2] (i64) and weights [b, 2].
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (ids, segs, at, labels, w) = (&data[0], &data[1], &data[2], &data[3], &data[4]);
        let tape = GradientTape::new();
        let (h, logits, loss) = tape.record(|| {
            let pad = ids.ne(&ids.scalar_like(0.0)?)?;
            let e = self.tok.forward(ids, true)?.add(&self.seg.forward(segs, true)?)?;
            let mut h = self.ln.forward(&self.pos.add_to(&e, 0)?, true)?;
            for b in &self.blocks {
                h = b.forward_with_padding(&h, &pad, true)?;
            }
            let picked = h.gather_with(at, 1, 1)?;
            let t = self.mlm_ln.forward(&self.mlm.forward(&picked, true)?, true)?;
            let logits = self.tok.attend(&t)?.add(&self.bias.read())?;
            let loss = weighted_loss(labels, &logits, w)?;
            Ok((h, logits, loss))
        })?;
        update(&tape, &loss, &self.vars(), &self.opt, vec![h, logits, loss.clone()])
    }
}

fn ids(v: &[i64], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape)
}

#[test]
fn bert_masked_lm_padding_tied_weighted_positions_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 1e-4), Check::with(DATA, 1e-3).tolerance(2e-5));
    let data = [
        ids(&[2, 5, 1, 7, 1, 3, 4, 1, 8, 6, 0, 0, 0, 0, 0, 0, 0, 0], &[3, 6])?,
        ids(&[0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0], &[3, 6])?,
        ids(&[2, 4, 1, 3, 0, 0], &[3, 2])?,
        ids(&[9, 11, 12, 6, 0, 0], &[3, 2])?,
        Tensor::from_vec(vec![1.0f64, 1.0, 1.0, 0.0, 0.0, 0.0], &[3, 2])?,
    ];
    let runs = train_both(
        &mut c64,
        &mut c32,
        "bert",
        &["hidden", "logits", "loss"],
        Bert::new,
        &data,
    )?;
    traced_equals_eager(&runs, 1e-14, 1e-6);
    c64.finish("bert f64", 5000);
    c32.finish("bert f32", 5000);
    Ok(())
}

// ---- 2. A left-padded causal decoder -----------------------------------------

struct CausalPadded {
    tok: Embedding,
    block: TransformerBlock,
    head: Dense,
    opt: Mutex<Adam>,
}

impl CausalPadded {
    fn new(dt: DType) -> Result<CausalPadded> {
        let rng = &mut Rng::new(0);
        let m = CausalPadded {
            tok: Embedding::builder(9, 8).mask_zero(true).dtype(dt).build(rng)?,
            block: TransformerBlock::builder(8, 2, 16).causal(true).dtype(dt).build(rng)?,
            head: dense(8, 9, None, dt)?,
            opt: Mutex::new(adam()),
        };
        let gammas: Vec<usize> = BLOCK_GAMMAS.iter().map(|g| 1 + g).collect();
        set_weights_as(&m.vars(), 460.0, &gammas);
        Ok(m)
    }
}

impl Stepper for CausalPadded {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.tok.trainable_variables();
        v.extend(self.block.trainable_variables());
        v.extend(self.head.trainable_variables());
        v
    }

    /// data: ids [b, t] (left-padded with 0), next tokens [b, t], the
    /// targets' weights [b, t].
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let (ids, next, w) = (&data[0], &data[1], &data[2]);
        let tape = GradientTape::new();
        let (h, logits, loss) = tape.record(|| {
            let pad = self.tok.compute_mask(ids)?.expect("mask_zero");
            let x = self.tok.forward(ids, true)?;
            let pe = sine_position_encoding(ids.shape()[1], 8, 0, 10000.0, x.dtype())?;
            let h = self.block.forward_with_padding(&x.add(&pe)?, &pad, true)?;
            let logits = self.head.forward(&h, true)?;
            let loss = weighted_loss(next, &logits, w)?;
            Ok((h, logits, loss))
        })?;
        update(&tape, &loss, &self.vars(), &self.opt, vec![h, logits, loss.clone()])
    }
}

#[test]
fn left_padded_causal_decoder_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 1e-4), Check::with(DATA, 1e-3).tolerance(REL32));
    let data = [
        ids(&[0, 0, 3, 5, 2, 4, 1, 6, 7, 8], &[2, 5])?,
        ids(&[0, 3, 5, 2, 6, 1, 6, 7, 8, 2], &[2, 5])?,
        Tensor::from_vec(vec![0.0f64, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], &[2, 5])?,
    ];
    let runs = train_both(
        &mut c64,
        &mut c32,
        "causal",
        &["hidden", "logits", "loss"],
        CausalPadded::new,
        &data,
    )?;
    traced_equals_eager(&runs, 1e-14, 1e-6);
    c64.finish("causal f64", 1500);
    c32.finish("causal f32", 1500);
    Ok(())
}

// ---- 3. The attention masks a BERT user passes -------------------------------

/// Keras's `MultiHeadAttention` takes any `attention_mask` that
/// broadcasts against `[B, T, S]` and casts it to bool (nonzero keeps):
/// BERT's key padding as an int `[B, 1, S]` (`mask[:, None, :]` of a
/// tokenizer's 0/1 mask) and an int `[T, S]` band. gradtape refused both
/// (a bool `[B, T, S]`, `[1, T, S]` or `[T, S]` only). A float mask stays
/// an error, saying why (PyTorch's float masks are additive).
#[test]
fn attention_mask_int_and_broadcast_forms_match_keras() -> Result<()> {
    use gradtape::nn::{AttentionArgs, MultiHeadAttention};
    let mut check = Check::with(DATA, 1e-6);
    let mha = std::sync::Arc::new(
        MultiHeadAttention::builder(2, 4)
            .dtype(DType::F64)
            .build(8, &mut Rng::new(0))?,
    );
    set_weights_as(&mha.trainable_variables(), 470.0, &[]);
    let x = super::new_user_util::fill(&[2, 3, 8], 0.45, 1.0);
    let pad = Tensor::from_vec(vec![1i32, 1, 0, 0, 1, 1], &[2, 1, 3])?;
    let band = Tensor::from_vec(vec![2i64, 0, 0, 2, 2, 0, 0, 2, 2], &[3, 3])?;
    let call = |m: &Tensor| mha.call_with(&x, &x, AttentionArgs::new().attention_mask(m));
    check.one("int [B, 1, S]", "mask_int_b1s", Some(&call(&pad)?));
    check.one("int [T, S]", "mask_int_ts", Some(&call(&band)?));
    // the bool [B, T, S] of both, and the int one given as a bool
    let both = pad
        .ne(&pad.scalar_like(0.0)?)?
        .logical_and(&band.ne(&band.scalar_like(0.0)?)?)?;
    check.one("bool [B, T, S]", "mask_both", Some(&call(&both)?));
    let bool_pad = pad.ne(&pad.scalar_like(0.0)?)?;
    check.one("bool [B, 1, S]", "mask_int_b1s", Some(&call(&bool_pad)?));
    // traced, the int mask an input of the graph
    let traced = {
        let (mha, x) = (mha.clone(), x.clone());
        gradtape::function(move |m: &Tensor| mha.call_with(&x, &x, AttentionArgs::new().attention_mask(m)))
    };
    check.one("traced int [B, 1, S]", "mask_int_b1s", Some(&traced.call(&pad)?));
    check.finish("attention mask forms", 5 * 48 - 1);
    // what does not broadcast is still an error naming the shapes
    let bad = Tensor::from_vec(vec![1i32; 12], &[2, 2, 3])?;
    let err = call(&bad).unwrap_err().to_string();
    assert!(err.contains("attention mask") && err.contains("[2, 2, 3]"), "{err}");
    let floats = band.cast(DType::F64)?;
    let err = call(&floats).unwrap_err().to_string();
    assert!(
        err.contains("MultiHeadAttention") && err.contains("float mask"),
        "{err}"
    );
    assert!(call(&Tensor::zeros(&[3, 3], DType::C64)).is_err());
    Ok(())
}

/// The padding masks a tokenizer gives are 0/1 integers, which Keras's
/// `MultiHeadAttention` (`query_mask`, `value_mask`, `key_mask`) and
/// keras_hub's blocks (`padding_mask`) cast to bool: the same results as
/// the bool masks, eager and traced. gradtape refused them (bool only);
/// a float mask stays an error.
#[test]
fn integer_padding_masks_equal_the_bool_ones() -> Result<()> {
    use gradtape::nn::{Attention, AttentionArgs, BlockArgs, MultiHeadAttention};
    let dt = DType::F64;
    let rng = &mut Rng::new(0);
    let x = super::new_user_util::fill(&[2, 4, 8], 0.6, 1.0);
    let enc = super::new_user_util::fill(&[2, 5, 8], 1.6, 1.0);
    let ints = Tensor::from_vec(vec![0i64, 1, 1, 1, 1, 1, 0, 0], &[2, 4])?;
    let enc_ints = Tensor::from_vec(vec![1i32, 1, 1, 0, 0, 1, 1, 1, 1, 1], &[2, 5])?;
    let bools = ints.ne(&ints.scalar_like(0.0)?)?;
    let enc_bools = enc_ints.ne(&enc_ints.scalar_like(0.0)?)?;
    let decoder = std::sync::Arc::new(
        TransformerBlock::builder(8, 2, 16)
            .causal(true)
            .cross_attention(8)
            .dtype(dt)
            .build(rng)?,
    );
    let mha = MultiHeadAttention::builder(2, 4).dtype(dt).build(8, rng)?;
    let dot = Attention::builder().dtype(dt).build(rng)?;
    let block = |p: &Tensor, e: &Tensor| {
        decoder.call_with(
            &x,
            BlockArgs::new().padding_mask(p).encoder(&enc).encoder_padding_mask(e),
        )
    };
    let attend = |q: &Tensor, v: &Tensor| {
        let args = AttentionArgs::new().query_mask(q).value_mask(v).key_mask(v);
        mha.call_with(&x, &enc, args)
    };
    let luong = |q: &Tensor, v: &Tensor| dot.call_with(&x, &enc, AttentionArgs::new().query_mask(q).value_mask(v));
    let traced = {
        let (decoder, x, enc) = (decoder.clone(), x.clone(), enc.clone());
        gradtape::function(move |(p, e): &(Tensor, Tensor)| {
            decoder.call_with(
                &x,
                BlockArgs::new().padding_mask(p).encoder(&enc).encoder_padding_mask(e),
            )
        })
    };
    for (what, got, want) in [
        ("TransformerBlock", block(&ints, &enc_ints)?, block(&bools, &enc_bools)?),
        (
            "traced TransformerBlock",
            traced.call(&(ints.clone(), enc_ints.clone()))?,
            block(&bools, &enc_bools)?,
        ),
        (
            "MultiHeadAttention",
            attend(&ints, &enc_ints)?,
            attend(&bools, &enc_bools)?,
        ),
        ("Attention", luong(&ints, &enc_ints)?, luong(&bools, &enc_bools)?),
    ] {
        assert_eq!(got.to_vec_f64(), want.to_vec_f64(), "{what}");
    }
    // the masks matter here: all-ones masks give other numbers
    let ones = Tensor::ones(&[2, 4], DType::I64);
    let enc_ones = Tensor::ones(&[2, 5], DType::I32);
    assert_ne!(
        block(&ones, &enc_ones)?.to_vec_f64(),
        block(&bools, &enc_bools)?.to_vec_f64()
    );
    let floats = ints.cast(dt)?;
    let err = decoder
        .forward_with_padding(&x, &floats, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("padding mask") && err.contains("f64"), "{err}");
    assert!(attend(&floats, &enc_bools).is_err());
    Ok(())
}
