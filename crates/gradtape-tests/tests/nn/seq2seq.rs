//! An encoder–decoder Transformer as a new user would write one from the
//! docs (the class of keras_hub's translation examples): token and
//! learned position embeddings, a post-norm encoder block over a padded
//! source (`Embedding::compute_mask` as the padding mask), a post-norm
//! causal decoder block with cross-attention to it, a dense head, Adam. It
//! learns to reverse sequences of 3 to 5 tokens: the traced training step
//! gives the eager step's loss and gradients, the loss falls, and greedy
//! decoding with a key/value cache (`call_cached_with`) reverses unseen
//! sequences, the same tokens through a traced decoding step with a
//! cache of fixed capacity (`TransformerBlock::kv_cache`, two traces).

use std::sync::{Arc, Mutex};

use gradtape::nn::{
    Activation, BlockArgs, Dense, Embedding, KvCache, Layer, Module, PositionalEmbedding, TransformerBlock,
};
use gradtape::optim::{Adam, Optimizer};
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor, Variable};

/// Padding, the real tokens 1..=6, and the decoder's start token.
const PAD: i64 = 0;
const BOS: i64 = 7;
const VOCAB: usize = 8;
/// The longest sequence.
const LEN: usize = 5;
const WIDTH: usize = 16;

struct Seq2Seq {
    source: Embedding,
    target: Embedding,
    source_positions: PositionalEmbedding,
    target_positions: PositionalEmbedding,
    encoder: TransformerBlock,
    decoder: TransformerBlock,
    head: Dense,
}

impl Seq2Seq {
    fn new(dtype: DType, seed: u64) -> Result<Seq2Seq> {
        let mut rng = Rng::new(seed);
        let block = |rng: &mut Rng, decoder: bool| {
            let b = TransformerBlock::builder(WIDTH, 2, 32)
                .normalize_first(false)
                .activation(Activation::Relu)
                .dtype(dtype);
            if decoder {
                b.causal(true).cross_attention(WIDTH).build(rng)
            } else {
                b.build(rng)
            }
        };
        Ok(Seq2Seq {
            source: Embedding::builder(VOCAB, WIDTH)
                .mask_zero(true)
                .dtype(dtype)
                .build(&mut rng)?,
            target: Embedding::builder(VOCAB, WIDTH).dtype(dtype).build(&mut rng)?,
            source_positions: PositionalEmbedding::builder(LEN, WIDTH).dtype(dtype).build(&mut rng)?,
            target_positions: PositionalEmbedding::builder(LEN, WIDTH).dtype(dtype).build(&mut rng)?,
            encoder: block(&mut rng, false)?,
            decoder: block(&mut rng, true)?,
            head: Dense::builder(WIDTH, VOCAB).dtype(dtype).build(&mut rng)?,
        })
    }

    fn variables(&self) -> Vec<Variable> {
        let mut v = self.source.variables();
        v.extend(self.target.variables());
        v.extend(self.source_positions.variables());
        v.extend(self.target_positions.variables());
        v.extend(self.encoder.variables());
        v.extend(self.decoder.variables());
        v.extend(self.head.variables());
        v
    }

    /// The encoder's output over `src` `[b, LEN]` and its padding mask.
    fn encode(&self, src: &Tensor, training: bool) -> Result<(Tensor, Tensor)> {
        let pad = self.source.compute_mask(src)?.expect("mask_zero");
        let x = self.source_positions.add_to(&self.source.call(src)?, 0)?;
        let args = BlockArgs::new().padding_mask(&pad).training(training);
        Ok((self.encoder.call_with(&x, args)?, pad))
    }

    /// The logits `[b, t, VOCAB]` of the decoder's inputs `dec` `[b, t]`.
    fn logits(&self, src: &Tensor, dec: &Tensor, training: bool) -> Result<Tensor> {
        let (enc, pad) = self.encode(src, training)?;
        let y = self.target_positions.add_to(&self.target.call(dec)?, 0)?;
        let args = BlockArgs::new()
            .encoder(&enc)
            .encoder_padding_mask(&pad)
            .training(training);
        self.head.call(&self.decoder.call_with(&y, args)?)
    }

    /// The mean cross-entropy over the real target positions.
    fn loss(&self, src: &Tensor, dec: &Tensor, target: &Tensor) -> Result<Tensor> {
        let logits = self.logits(src, dec, true)?;
        let n = target.shape().iter().product::<usize>();
        let per =
            Tensor::sparse_softmax_cross_entropy_with_logits(&target.reshape(&[n])?, &logits.reshape(&[n, VOCAB])?)?;
        let real = target.reshape(&[n])?.gt_scalar(PAD as f64)?.cast(logits.dtype())?;
        per.mul(&real)?.sum_all()?.div(&real.sum_all()?)
    }

    /// Greedy decoding of `src` `[b, LEN]`, one position at a time with a
    /// key/value cache.
    fn reverse(&self, src: &Tensor) -> Result<Vec<i64>> {
        let (enc, pad) = self.encode(src, false)?;
        let b = src.shape()[0];
        let args = BlockArgs::new().encoder(&enc).encoder_padding_mask(&pad);
        let mut cache = KvCache::new();
        let mut next = Tensor::from_vec(vec![BOS; b], &[b, 1])?;
        let mut out = vec![Vec::new(); b];
        for t in 0..LEN {
            let y = self.target_positions.add_to(&self.target.call(&next)?, t)?;
            let logits = self.head.call(&self.decoder.call_cached_with(&y, &mut cache, args)?)?;
            next = logits.argmax(-1)?;
            for (row, id) in out.iter_mut().zip(next.to_vec::<i64>()?) {
                row.push(id);
            }
        }
        Ok(out.concat())
    }
}

/// [`Seq2Seq::reverse`] through a traced decoding step (the new position,
/// the decoder's cache, the encoder's output and padding in; the logits
/// and the cache out) and a cache of fixed capacity: the tokens, the
/// step's number of traces, and the products (`MatMul` nodes) of its first
/// graph and of the one that serves the later steps.
fn reverse_traced(m: &Arc<Seq2Seq>, src: &Tensor) -> Result<(Vec<i64>, usize, [usize; 2])> {
    let (enc, pad) = m.encode(src, false)?;
    let b = src.shape()[0];
    let step = {
        let m = m.clone();
        function(move |(y, cache, enc, pad): &(Tensor, KvCache, Tensor, Tensor)| {
            let mut cache = cache.clone();
            let args = BlockArgs::new().encoder(enc).encoder_padding_mask(pad);
            let h = m.decoder.call_cached_with(y, &mut cache, args)?;
            Ok((m.head.call(&h)?, cache))
        })
    };
    let mut cache = m.decoder.kv_cache(b, LEN)?;
    let mut next = Tensor::from_vec(vec![BOS; b], &[b, 1])?;
    let mut out = vec![Vec::new(); b];
    let mut products = [0; 2];
    for t in 0..LEN {
        let y = m.target_positions.add_to(&m.target.call(&next)?, t)?;
        let args = (y, cache, enc.clone(), pad.clone());
        if let Some(p) = products.get_mut(t) {
            *p = step.graph(&args)?.count("MatMul");
        }
        let (logits, c) = step.call(&args)?;
        cache = c;
        next = logits.argmax(-1)?;
        for (row, id) in out.iter_mut().zip(next.to_vec::<i64>()?) {
            row.push(id);
        }
    }
    assert_eq!(cache.len(), LEN);
    Ok((out.concat(), step.trace_count(), products))
}

/// A batch: sources of 3 to 5 tokens (padded), the decoder's inputs
/// (start, then the reversed source shifted right) and targets (the
/// reversed source, padded).
fn batch(rng: &mut Rng, b: usize) -> Result<(Tensor, Tensor, Tensor)> {
    let (mut src, mut dec, mut tgt) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..b {
        let n = 3 + rng.below(3) as usize;
        let seq: Vec<i64> = (0..n).map(|_| 1 + rng.below(6) as i64).collect();
        let rev: Vec<i64> = seq.iter().rev().copied().collect();
        let padded = |v: &[i64]| {
            v.iter()
                .copied()
                .chain(std::iter::repeat(PAD))
                .take(LEN)
                .collect::<Vec<_>>()
        };
        src.extend(padded(&seq));
        tgt.extend(padded(&rev));
        dec.extend(padded(&[&[BOS], &rev[..n - 1]].concat()));
    }
    let t = |v: Vec<i64>| Tensor::from_vec(v, &[b, LEN]);
    Ok((t(src)?, t(dec)?, t(tgt)?))
}

/// One training step: the loss and the gradients, applied by `opt`.
fn step(m: &Seq2Seq, opt: &mut Adam, src: &Tensor, dec: &Tensor, tgt: &Tensor) -> Result<Vec<Tensor>> {
    let vars = m.variables();
    let tape = GradientTape::new();
    let loss = tape.record(|| m.loss(src, dec, tgt))?;
    let grads = tape.gradient(&loss, &vars)?;
    opt.apply_gradients(grads.clone().into_iter().zip(&vars))?;
    let grads: Vec<Tensor> = grads
        .into_iter()
        .map(|g| g.expect("every variable gets a gradient"))
        .collect();
    Ok([vec![loss], grads].concat())
}

#[test]
fn a_traced_seq2seq_step_gives_the_eager_loss_and_gradients() -> Result<()> {
    let eager = Seq2Seq::new(DType::F64, 1)?;
    let traced = Arc::new(Seq2Seq::new(DType::F64, 1)?);
    let mut eager_opt = Adam::new(1e-2);
    let f = {
        let (m, opt) = (traced.clone(), Arc::new(Mutex::new(Adam::new(1e-2))));
        function(move |(s, d, t): &(Tensor, Tensor, Tensor)| step(&m, &mut opt.lock().unwrap(), s, d, t))
    };
    let names: Vec<String> = eager.variables().iter().map(|v| v.name().to_string()).collect();
    let mut rng = Rng::new(5);
    for call in 0..3 {
        let (s, d, t) = batch(&mut rng, 6)?;
        let want = step(&eager, &mut eager_opt, &s, &d, &t)?;
        let got = f.call(&(s, d, t))?;
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let what = if i == 0 { "the loss" } else { &names[i - 1] };
            let (g, w) = (g.to_vec_f64(), w.to_vec_f64());
            // (relative to the largest element, and at least 1e-6: the
            // gradients are O(0.1), and a zero one is roundoff of 1e-19)
            let scale = w.iter().fold(1e-6f64, |m, x| m.max(x.abs()));
            for (a, b) in g.iter().zip(&w) {
                assert!((a - b).abs() <= 1e-10 * scale, "call {call}, {what}: {a} vs {b}");
            }
            // the softmax does not see a key bias (it adds the same to every
            // score of a row): its gradient is zero; every other is not
            let largest = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            if what.ends_with("key/bias") {
                assert!(largest < 1e-14, "call {call}, {what}: {largest}");
            } else {
                assert!(largest > 1e-8, "call {call}, {what} is zero");
            }
        }
    }
    assert_eq!(f.trace_count(), 1);
    // the updated weights agree too
    for (a, b) in traced.variables().iter().zip(eager.variables()) {
        let (a, b) = (a.read().to_vec_f64(), b.read().to_vec_f64());
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-10 * y.abs().max(1.0)));
    }
    Ok(())
}

#[test]
fn a_traced_seq2seq_model_learns_to_reverse_and_decodes_with_a_cache() -> Result<()> {
    let m = Arc::new(Seq2Seq::new(DType::F32, 7)?);
    let opt = Arc::new(Mutex::new(Adam::new(1e-2)));
    let f = {
        let (m, opt) = (m.clone(), opt.clone());
        function(
            move |(s, d, t): &(Tensor, Tensor, Tensor)| Ok(step(&m, &mut opt.lock().unwrap(), s, d, t)?[0].clone()),
        )
    };
    let mut rng = Rng::new(11);
    let mut losses = Vec::new();
    for _ in 0..300 {
        losses.push(f.call(&batch(&mut rng, 32)?)?.to_scalar::<f32>()?);
    }
    let first = losses[..10].iter().sum::<f32>() / 10.0;
    let last = losses[losses.len() - 10..].iter().sum::<f32>() / 10.0;
    // a uniform guess over the 8 tokens costs ln 8 = 2.08
    assert!(first > 1.5, "first losses {:?}", &losses[..10]);
    // (it reaches about 1e-3 here)
    assert!(last < 0.02, "the loss fell from {first} to {last} only");
    // unseen sources, decoded greedily position by position
    let (src, _, tgt) = batch(&mut Rng::new(99), 64)?;
    let got = m.reverse(&src)?;
    let want = tgt.to_vec::<i64>()?;
    let real: Vec<usize> = (0..want.len()).filter(|&i| want[i] != PAD).collect();
    let right = real.iter().filter(|&&i| got[i] == want[i]).count();
    assert!(
        right as f64 >= 0.95 * real.len() as f64,
        "{right} of {} tokens reversed right (final loss {last})",
        real.len()
    );
    // the cached decoding is the full decoder's greedy decoding
    let (enc_in, dec_in) = (
        src.narrow(0, 0, 4)?,
        Tensor::from_vec(
            (0..4)
                .flat_map(|r| [&[BOS][..], &got[r * LEN..r * LEN + LEN - 1]].concat())
                .collect::<Vec<_>>(),
            &[4, LEN],
        )?,
    );
    let full = m.logits(&enc_in, &dec_in, false)?.argmax(-1)?.to_vec::<i64>()?;
    assert_eq!(full, got[..4 * LEN].to_vec());
    // and through a traced step with a cache of fixed capacity: the same
    // tokens, from two traces (the first step has no kept projections of
    // the encoder's sequence yet; the others all have them, and their
    // graph reads them: it has one product fewer, the encoder's joined
    // key/value projection)
    let (traced, traces, products) = reverse_traced(&m, &src)?;
    assert_eq!(traced, got);
    assert_eq!(traces, 2);
    assert_eq!(
        products[1] + 1,
        products[0],
        "products of the first step's graph and the later ones'"
    );
    Ok(())
}
