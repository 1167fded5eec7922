//! A seq2seq encoder–decoder with Luong (dot-product) attention as a new
//! user would write it from the docs, against TensorFlow 2.21 / Keras
//! 3.15.1 (`tests/reference/new_user_models5.py` printed the numbers of
//! `tests/data/new_user_models5.txt`): a `GRU` encoder over a
//! post-padded source, masked by the source `Embedding`'s `mask_zero`
//! mask (`compute_mask`, `forward_from_masked`: Keras's mask propagation);
//! a `GRU` decoder started from the encoder's last state
//! (`forward_from`) over the shifted targets (teacher forcing); Keras's
//! `Attention` (dot scores, no scale) from the decoder's states to the
//! encoder's with the source mask as the value mask; the context and the
//! decoder state concatenated into a tanh `Dense`, then the logits; the
//! per-token sparse cross-entropy averaged over the real (non-pad) target
//! tokens only. Adam; two steps eagerly and as a traced `function`, in
//! float64 at 1e-12 relative and float32 at `REL32`.

use std::sync::Mutex;

use gradtape::nn::{Activation, Attention, AttentionArgs, Dense, Embedding, Layer, GRU};
use gradtape::optim::Adam;
use gradtape::{DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_gpt::DATA;
use super::new_user_physics::dense;
use super::new_user_util::{adam, set_weights_as, train_both, update, Check, Stepper};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding.
const REL32: f64 = 2e-5;

pub(super) struct Seq2Seq {
    src_emb: Embedding,
    enc: GRU,
    tgt_emb: Embedding,
    dec: GRU,
    att: Attention,
    comb: Dense,
    out: Dense,
    opt: Mutex<Adam>,
}

impl Seq2Seq {
    fn new(dt: DType) -> Result<Seq2Seq> {
        Seq2Seq::sized(9, 8, 4, 6, dt)
    }

    /// Source and target vocabularies (0 pads), embedding width, units.
    pub(super) fn sized(src_vocab: usize, tgt_vocab: usize, emb: usize, units: usize, dt: DType) -> Result<Seq2Seq> {
        let rng = &mut Rng::new(0);
        let gru = |rng: &mut Rng, seq| GRU::builder(emb, units).return_sequences(seq).dtype(dt).build(rng);
        let m = Seq2Seq {
            src_emb: Embedding::builder(src_vocab, emb)
                .mask_zero(true)
                .dtype(dt)
                .build(rng)?,
            enc: gru(rng, true)?,
            tgt_emb: Embedding::builder(tgt_vocab, emb).dtype(dt).build(rng)?,
            dec: gru(rng, true)?,
            att: Attention::builder().dtype(dt).build(rng)?,
            comb: dense(2 * units, units, Some(Activation::Tanh), dt)?,
            out: dense(units, tgt_vocab, None, dt)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), 310.0, &[]);
        Ok(m)
    }

    /// The encoder's last state, the attention context, the logits and
    /// the masked loss of `src` `[b, s]`, decoder inputs and targets `[b, t]`.
    fn forward(&self, src: &Tensor, tgt_in: &Tensor, tgt_out: &Tensor) -> Result<[Tensor; 4]> {
        let src_mask = self.src_emb.compute_mask(src)?.expect("mask_zero gives a mask");
        let (enc_seq, enc_h) =
            self.enc
                .forward_from_masked(&self.src_emb.forward(src, true)?, None, Some(&src_mask))?;
        let (dec_seq, _) = self
            .dec
            .forward_from(&self.tgt_emb.forward(tgt_in, true)?, Some(enc_h.clone()))?;
        let ctx = self
            .att
            .call_with(&dec_seq, &enc_seq, AttentionArgs::new().value_mask(&src_mask))?;
        let h = self.comb.forward(&Tensor::concat(&[&ctx, &dec_seq], -1)?, true)?;
        let logits = self.out.forward(&h, true)?;
        let per_token = Tensor::sparse_softmax_cross_entropy_with_logits(tgt_out, &logits)?;
        let w = tgt_out.ne_scalar(0.0)?.cast(logits.dtype())?;
        let loss = per_token.mul(&w)?.sum_all()?.div(&w.sum_all()?)?;
        Ok([enc_h, ctx, logits, loss])
    }
}

impl Stepper for Seq2Seq {
    fn vars(&self) -> Vec<Variable> {
        [
            &self.src_emb as &dyn Layer,
            &self.enc,
            &self.tgt_emb,
            &self.dec,
            &self.comb,
            &self.out,
        ]
        .iter()
        .flat_map(|l| l.trainable_variables())
        .collect()
    }

    /// data: source ids [b, s], decoder inputs and targets [b, t] (i64).
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let vars = self.vars();
        let tape = GradientTape::new();
        let out = tape.record(|| self.forward(&data[0], &data[1], &data[2]))?;
        let loss = out[3].clone();
        update(&tape, &loss, &vars, &self.opt, out.into())
    }
}

/// Post-padded sources, the decoder's inputs (1 starts) and its targets
/// (0 pads).
pub(super) fn s2s_batch() -> Result<[Tensor; 3]> {
    let t = |v: &[i64], shape: &[usize]| Tensor::from_vec(v.to_vec(), shape);
    Ok([
        t(&[3, 5, 2, 7, 0, 4, 1, 6, 0, 0], &[2, 5])?,
        t(&[1, 3, 4, 5, 1, 6, 2, 0], &[2, 4])?,
        t(&[3, 4, 5, 2, 6, 2, 7, 0], &[2, 4])?,
    ])
}

#[test]
fn seq2seq_gru_dot_attention_masked_loss_matches_tensorflow() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 0.0), Check::with(DATA, 0.0).tolerance(REL32));
    let runs = train_both(
        &mut c64,
        &mut c32,
        "s2s",
        &["enc_h", "ctx", "logits", "loss"],
        Seq2Seq::new,
        &s2s_batch()?,
    )?;
    // the padded source steps are masked: the encoder's state after them
    // is the state after the last real token (row 1 without its pads)
    let m = &runs.models[0].1;
    let [src, tin, tout] = s2s_batch()?;
    let base = m.forward(&src, &tin, &tout)?;
    let short = m.forward(
        &src.narrow(1, 0, 3)?.narrow(0, 1, 1)?,
        &tin.narrow(0, 1, 1)?,
        &tout.narrow(0, 1, 1)?,
    )?;
    let h_row1 = base[0].narrow(0, 1, 1)?.to_vec_f64();
    let h_short = short[0].to_vec_f64();
    for (a, b) in h_row1.iter().zip(&h_short) {
        assert!(
            (a - b).abs() < 1e-14,
            "encoder state over the pads {a} vs without them {b}"
        );
    }
    c64.finish("s2s f64", 1000);
    c32.finish("s2s f32", 1000);
    Ok(())
}
