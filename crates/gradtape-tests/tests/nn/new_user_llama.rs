//! A Llama-style decoder as a new user would write it from the docs'
//! layers, against the same model written from TensorFlow 2.21 ops
//! (`tests/reference/new_user_models6.py` printed the numbers of
//! `tests/data/new_user_models6.txt`): `RMSNorm`s, a `MultiHeadAttention`
//! with grouped-query heads (4 query heads, 2 key/value heads:
//! `num_key_value_heads`) and rotary positions (`rotary_embedding`,
//! half-split, max wavelength 10000) on the queries and keys, causal, no
//! biases; a SwiGLU MLP (`down(silu(gate(x)) · up(x))` from three bias-free
//! `Dense`s); two blocks, a final `RMSNorm` and an untied head.
//!
//! - training: next-token sparse cross-entropy, Adam, two steps eagerly
//!   and as a traced `function` (traced once), float64 at 1e-12 relative
//!   and float32 at a rounding tolerance;
//! - greedy generation from fresh weights: four new tokens after a prompt
//!   of three, decoded with one `KvCache` per attention layer
//!   (`call_cached`: the rotary positions then count from the cache's
//!   length), eagerly and as a traced `function` of the new tokens and
//!   the caches (a `KvCache` passes through a trace as its tensors), equal
//!   to recomputing the whole prefix each step (eagerly and traced, one
//!   trace per prefix length) to rounding, and to TensorFlow's logits and
//!   tokens;
//! - the same through caches of fixed capacity (`kv_cache`, keras_hub's
//!   `CachedMultiHeadAttention` cache, written at an index tensor): 22
//!   steps from one trace of the one-token step, equal to the eager
//!   steps, the growing caches and the recomputed prefix to rounding, and
//!   to TensorFlow's logits for the first four; a full cache refused.

use std::sync::Mutex;

use gradtape::nn::{
    Activation, AttentionArgs, Dense, Embedding, KvCache, Layer, Module, MultiHeadAttention, RMSNorm, RotaryEmbedding,
};
use gradtape::optim::Adam;
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor, Variable};

use super::new_user_util::{adam, set_weights_as, train_both, update, Check, Stepper};
use super::new_user_vit::{traced_equals_eager, DATA};

/// float32 against the float64 reference, relative to each vector's
/// largest element: rounding, carried into the weights by Adam (6.9e-6).
const REL32: f64 = 3e-5;

/// The RMS norms' scales among the weights (set to 1 + fill).
const ONES: [usize; 3] = [1, 10, 19];

struct Block {
    attn_norm: RMSNorm,
    attn: MultiHeadAttention,
    mlp_norm: RMSNorm,
    up: Dense,
    gate: Dense,
    down: Dense,
}

struct Llama {
    tok: Embedding,
    blocks: Vec<Block>,
    norm: RMSNorm,
    head: Dense,
    opt: Mutex<Adam>,
}

impl Llama {
    /// Two blocks: width 8, 4 heads of 4 (2 key/value heads), MLP 12,
    /// vocabulary 11; weights `fill(.., k0 + j)`.
    fn new(dt: DType, k0: f64) -> Result<Llama> {
        let rng = &mut Rng::new(0);
        let norm = || RMSNorm::builder(8).epsilon(1e-6).dtype(dt).build();
        let linear = |i: usize, o: usize, act: Activation, rng: &mut Rng| {
            Dense::builder(i, o)
                .activation(act)
                .use_bias(false)
                .dtype(dt)
                .build(rng)
        };
        let mut blocks = Vec::new();
        for _ in 0..2 {
            blocks.push(Block {
                attn_norm: norm()?,
                attn: MultiHeadAttention::builder(4, 4)
                    .num_key_value_heads(2)
                    .rotary_embedding(RotaryEmbedding::builder().build()?)
                    .use_bias(false)
                    .dtype(dt)
                    .build(8, rng)?,
                mlp_norm: norm()?,
                up: linear(8, 12, Activation::Linear, rng)?,
                gate: linear(8, 12, Activation::Silu, rng)?,
                down: linear(12, 8, Activation::Linear, rng)?,
            });
        }
        let m = Llama {
            tok: Embedding::builder(11, 8).dtype(dt).build(rng)?,
            blocks,
            norm: norm()?,
            head: linear(8, 11, Activation::Linear, rng)?,
            opt: Mutex::new(adam()),
        };
        set_weights_as(&m.vars(), k0, &ONES);
        Ok(m)
    }

    /// A block's SwiGLU MLP with its residual, on the stream `h`.
    fn mlp(b: &Block, h: &Tensor) -> Result<Tensor> {
        let m = b.mlp_norm.forward(h, true)?;
        let g = b.gate.forward(&m, true)?.mul(&b.up.forward(&m, true)?)?;
        h.add(&b.down.forward(&g, true)?)
    }

    /// The logits of `ids` `[b, t]`, every position.
    fn logits(&self, ids: &Tensor) -> Result<Tensor> {
        let mut h = self.tok.forward(ids, true)?;
        for b in &self.blocks {
            let a = b.attn_norm.forward(&h, true)?;
            h = h.add(&b.attn.call_with(&a, &a, AttentionArgs::new().use_causal_mask(true))?)?;
            h = Llama::mlp(b, &h)?;
        }
        self.head.forward(&self.norm.forward(&h, true)?, true)
    }

    /// The logits of the new positions `ids` `[b, t_new]` after those in
    /// `caches` (one per block), which they extend.
    fn logits_cached(&self, ids: &Tensor, caches: &mut [KvCache]) -> Result<Tensor> {
        let mut h = self.tok.forward(ids, false)?;
        for (b, c) in self.blocks.iter().zip(caches) {
            let a = b.attn_norm.forward(&h, false)?;
            h = h.add(&b.attn.call_cached(&a, c)?)?;
            h = Llama::mlp(b, &h)?;
        }
        self.head.forward(&self.norm.forward(&h, false)?, false)
    }
}

impl Stepper for Llama {
    fn vars(&self) -> Vec<Variable> {
        let mut v = self.tok.trainable_variables();
        for b in &self.blocks {
            for l in [
                &b.attn_norm as &dyn Layer,
                &b.attn,
                &b.mlp_norm,
                &b.up,
                &b.gate,
                &b.down,
            ] {
                v.extend(l.trainable_variables());
            }
        }
        v.extend(self.norm.trainable_variables());
        v.extend(self.head.trainable_variables());
        v
    }

    /// data: ids [b, t] and next tokens [b, t] (i64).
    fn step(&self, data: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
        let tape = GradientTape::new();
        let (logits, loss) = tape.record(|| {
            let logits = self.logits(&data[0])?;
            let loss = Tensor::sparse_softmax_cross_entropy_with_logits(&data[1], &logits)?.mean_all()?;
            Ok((logits, loss))
        })?;
        update(&tape, &loss, &self.vars(), &self.opt, vec![logits, loss.clone()])
    }
}

fn ids(v: &[i64], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), shape)
}

#[test]
fn llama_rms_rotary_gqa_swiglu_decoder_matches_tensorflow_ops() -> Result<()> {
    let (mut c64, mut c32) = (Check::with(DATA, 1e-4), Check::with(DATA, 1e-3).tolerance(REL32));
    let data = [
        ids(&[3, 7, 1, 9, 4, 5, 0, 10, 6, 8], &[2, 5])?,
        ids(&[7, 1, 9, 4, 2, 0, 10, 6, 8, 1], &[2, 5])?,
    ];
    let runs = train_both(
        &mut c64,
        &mut c32,
        "llama",
        &["logits", "loss"],
        |dt| Llama::new(dt, 420.0),
        &data,
    )?;
    traced_equals_eager(&runs, 1e-14, 1e-6);
    c64.finish("llama f64", 3000);
    c32.finish("llama f32", 3000);
    Ok(())
}

/// The last position's row of `logits` `[b, t, v]`, `[b, v]`.
fn last(logits: &Tensor) -> Result<Tensor> {
    let t = logits.shape()[1];
    logits.narrow(1, t - 1, 1)?.squeeze(&[1])
}

#[test]
fn llama_greedy_generation_with_kv_cache_matches_recompute_and_tensorflow() -> Result<()> {
    let mut check = Check::with(DATA, 1e-6);
    let m = std::sync::Arc::new(Llama::new(DType::F64, 430.0)?);
    // the script scales the head up so that the greedy choices are clear
    let head = &m.head.trainable_variables()[0];
    head.assign(&head.read().mul_scalar(8.0)?)?;
    let traced = {
        let m = m.clone();
        function(move |seq: &Tensor| last(&m.logits(seq)?))
    };
    // a decoding step traced: the new tokens and the caches in, the last
    // logits and the extended caches out
    let traced_step = {
        let m = m.clone();
        function(move |(fed, caches): &(Tensor, Vec<KvCache>)| {
            let mut caches = caches.clone();
            Ok((last(&m.logits_cached(fed, &mut caches)?)?, caches))
        })
    };
    let mut seq = ids(&[3, 7, 1, 5, 0, 10], &[2, 3])?;
    let mut caches = vec![KvCache::new(); 2];
    let mut traced_caches = caches.clone();
    let mut fed = seq.clone();
    let mut worst = 0f64;
    let near = |what: &str, got: &Tensor, want: &Tensor| {
        for (a, b) in got.to_vec_f64().iter().zip(want.to_vec_f64()) {
            assert!(
                (a - b).abs() <= 1e-13 * b.abs().max(1.0),
                "{what}: traced {a} != eager {b}"
            );
        }
    };
    for s in 0..4 {
        let cached = last(&m.logits_cached(&fed, &mut caches)?)?;
        let (cached_traced, next_caches) = traced_step.call(&(fed.clone(), traced_caches))?;
        traced_caches = next_caches;
        let full = last(&m.logits(&seq)?)?;
        let full_traced = traced.call(&seq)?;
        let name = format!("gen{s}_logits");
        check.one("cached", &name, Some(&cached));
        check.one("cached traced", &name, Some(&cached_traced));
        check.one("recomputed", &name, Some(&full));
        check.one("recomputed traced", &name, Some(&full_traced));
        for (a, b) in cached.to_vec_f64().iter().zip(full.to_vec_f64()) {
            worst = worst.max((a - b).abs());
        }
        near(&format!("step {s} recomputed"), &full_traced, &full);
        near(&format!("step {s} cached"), &cached_traced, &cached);
        for (t, e) in traced_caches.iter().zip(&caches) {
            near(&format!("step {s} cache"), t.values().unwrap(), e.values().unwrap());
        }
        let next = cached.argmax(-1)?.reshape(&[2, 1])?.cast(DType::I64)?;
        seq = Tensor::concat(&[&seq, &next], 1)?;
        fed = next;
    }
    assert!(worst < 1e-12, "cached against recomputed logits: {worst:e}");
    assert_eq!(caches[0].len(), 6);
    // the cache of a grouped layer holds its 2 key/value heads only
    assert_eq!(caches[1].keys().unwrap().shape(), &[2, 2, 6, 4]);
    assert_eq!(traced.trace_count(), 4, "one trace per prefix length");
    assert_eq!(traced_step.trace_count(), 4, "one trace per cache length");
    assert_eq!(traced_caches[1].len(), 6);
    check.one("tokens", "gen_tokens", Some(&seq.cast(DType::F64)?));
    check.finish("llama generation", 4 * 22 * 4);
    Ok(())
}

/// The same greedy decoding through caches of fixed capacity
/// (`MultiHeadAttention::kv_cache`, keras_hub's `CachedMultiHeadAttention`
/// cache: buffers of 32 positions written at an index tensor, the rotary
/// positions read at it), the prompt in one piece then 21 tokens one at a
/// time: TensorFlow's logits for the first four steps, the eager step's
/// logits and caches from the traced step, the growing cache's logits
/// and the recomputed prefix's to rounding at every step, and two traces
/// for all 22 steps (the prompt's three positions, then every one-token
/// step: the growing cache traces once per length, the test above).
#[test]
fn llama_greedy_decoding_with_fixed_caches_traces_once_and_matches_tensorflow() -> Result<()> {
    let mut check = Check::with(DATA, 1e-6);
    let m = std::sync::Arc::new(Llama::new(DType::F64, 430.0)?);
    let head = &m.head.trainable_variables()[0];
    head.assign(&head.read().mul_scalar(8.0)?)?;
    let step = {
        let m = m.clone();
        function(move |(fed, caches): &(Tensor, Vec<KvCache>)| {
            let mut caches = caches.clone();
            Ok((last(&m.logits_cached(fed, &mut caches)?)?, caches))
        })
    };
    let fixed = || {
        m.blocks
            .iter()
            .map(|b| b.attn.kv_cache(2, 32))
            .collect::<Result<Vec<_>>>()
    };
    let (mut eager, mut traced, mut growing) = (fixed()?, fixed()?, vec![KvCache::new(); 2]);
    let mut seq = ids(&[3, 7, 1, 5, 0, 10], &[2, 3])?;
    let mut fed = seq.clone();
    // worst differences: traced against eager, eager fixed against
    // growing, fixed against the recomputed prefix
    let (mut traced_eager, mut fixed_growing, mut fixed_full) = (0f64, 0f64, 0f64);
    let worst = |w: &mut f64, a: &Tensor, b: &Tensor| {
        for (a, b) in a.to_vec_f64().iter().zip(b.to_vec_f64()) {
            *w = w.max((a - b).abs() / b.abs().max(1.0));
        }
    };
    for s in 0..22 {
        let got = last(&m.logits_cached(&fed, &mut eager)?)?;
        let (got_traced, next) = step.call(&(fed.clone(), traced))?;
        traced = next;
        let grown = last(&m.logits_cached(&fed, &mut growing)?)?;
        let full = last(&m.logits(&seq)?)?;
        if s < 4 {
            let name = format!("gen{s}_logits");
            check.one("fixed cache", &name, Some(&got));
            check.one("fixed cache traced", &name, Some(&got_traced));
        }
        worst(&mut traced_eager, &got_traced, &got);
        worst(&mut fixed_growing, &got, &grown);
        worst(&mut fixed_full, &got, &full);
        for (t, e) in traced.iter().zip(&eager) {
            worst(&mut traced_eager, t.keys().unwrap(), e.keys().unwrap());
            worst(&mut traced_eager, t.values().unwrap(), e.values().unwrap());
            assert_eq!(t.index().unwrap().to_vec::<i64>()?, e.index().unwrap().to_vec::<i64>()?);
        }
        let next = got.argmax(-1)?.reshape(&[2, 1])?.cast(DType::I64)?;
        seq = Tensor::concat(&[&seq, &next], 1)?;
        fed = next;
    }
    eprintln!(
        "llama fixed caches, 22 steps: traced against eager {traced_eager:.1e}, against the growing cache {fixed_growing:.1e}, against the recomputed prefix {fixed_full:.1e}"
    );
    assert!(traced_eager < 1e-13, "traced against eager: {traced_eager:e}");
    assert!(fixed_growing < 1e-13, "fixed against growing: {fixed_growing:e}");
    assert!(fixed_full < 1e-12, "fixed against recomputed: {fixed_full:e}");
    assert_eq!(step.trace_count(), 2, "the prompt's shape, then every one-token step");
    assert_eq!(
        (eager[0].len(), traced[1].len(), eager[1].capacity()),
        (24, 24, Some(32))
    );
    assert_eq!(eager[1].keys().unwrap().shape(), &[2, 2, 32, 4]);
    check.finish("llama fixed-cache generation", 4 * 22 * 2 - 1);

    // the rest of the capacity: 8 more positions fit, the 9th does not,
    // eagerly (naming the layer and the capacity) and traced (the write
    // refuses it); nor does a cache of another batch
    let eight = ids(&[1; 16], &[2, 8])?;
    let mut full = eager.clone();
    m.logits_cached(&eight, &mut full)?;
    assert_eq!(full[0].len(), 32);
    let e = m
        .logits_cached(&ids(&[1, 2], &[2, 1])?, &mut full)
        .unwrap_err()
        .to_string();
    assert!(e.contains("MultiHeadAttention") && e.contains("capacity is 32"), "{e}");
    // (the rotary tables are read at the index first)
    let e = step.call(&(ids(&[1, 2], &[2, 1])?, full)).unwrap_err().to_string();
    assert!(e.contains("dynamic_slice") && e.contains("does not fit"), "{e}");
    let mut one = m
        .blocks
        .iter()
        .map(|b| b.attn.kv_cache(1, 32))
        .collect::<Result<Vec<_>>>()?;
    let e = m
        .logits_cached(&ids(&[1, 2], &[2, 1])?, &mut one)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MultiHeadAttention") && e.contains("[1, 2, 32, 4]") && e.contains("batch of 2"),
        "{e}"
    );
    Ok(())
}

/// A Mistral-shaped decoder from `TransformerBlock::llama()`: one
/// key/value head (multi-query attention) and a sliding window of 3, two
/// blocks, whose cached greedy decoding (the prompt in one piece, then a
/// token at a time: the window and the rotary positions then count from
/// the cache's length) gives the logits of recomputing the whole prefix,
/// eagerly and through a traced decoding step, from growing caches and
/// from caches of fixed capacity (`TransformerBlock::kv_cache`: the window
/// then masks from the caches' index tensor). No TensorFlow reference:
/// the recomputation is the model's definition, checked against Keras in
/// `attention_masks` (windows) and above (rotary, grouped heads).
#[test]
fn mistral_window_mqa_cached_decoding_equals_recompute_eager_and_traced() -> Result<()> {
    use gradtape::nn::TransformerBlock;
    let dt = DType::F64;
    let rng = &mut Rng::new(0);
    let tok = std::sync::Arc::new(Embedding::builder(11, 8).dtype(dt).build(rng)?);
    let blocks: std::sync::Arc<Vec<TransformerBlock>> = std::sync::Arc::new(
        (0..2)
            .map(|_| {
                TransformerBlock::builder(8, 4, 12)
                    .llama()
                    .num_key_value_heads(1)
                    .sliding_window(3)
                    .dtype(dt)
                    .build(rng)
            })
            .collect::<Result<_>>()?,
    );
    let mut vars = tok.trainable_variables();
    for b in blocks.iter() {
        vars.extend(b.trainable_variables());
    }
    // the RMS norms' scales 1 + fill (a block: norm, q k v o, norm, three kernels)
    set_weights_as(&vars, 480.0, &[1, 6, 10, 15]);
    // logits by the tied table, of every new position
    let run = {
        let (tok, blocks) = (tok.clone(), blocks.clone());
        move |ids: &Tensor, caches: Option<&mut [KvCache]>| -> Result<Tensor> {
            let mut h = tok.forward(ids, false)?;
            match caches {
                Some(caches) => {
                    for (b, c) in blocks.iter().zip(caches) {
                        h = b.call_cached(&h, c)?;
                    }
                }
                None => {
                    for b in blocks.iter() {
                        h = b.forward(&h, false)?;
                    }
                }
            }
            tok.attend(&h)
        }
    };
    let new_step = || {
        let run = run.clone();
        function(move |(fed, caches): &(Tensor, Vec<KvCache>)| {
            let mut caches = caches.clone();
            Ok((last(&run(fed, Some(&mut caches))?)?, caches))
        })
    };
    let (step, step_fixed) = (new_step(), new_step());
    let mut seq = ids(&[3, 7, 1, 9, 5, 0, 10, 2], &[2, 4])?;
    let (mut caches, mut traced_caches) = (vec![KvCache::new(); 2], vec![KvCache::new(); 2]);
    // and caches of fixed capacity (12 positions), eager and traced
    let fixed = || blocks.iter().map(|b| b.kv_cache(2, 12)).collect::<Result<Vec<_>>>();
    let (mut fixed_eager, mut fixed_traced) = (fixed()?, fixed()?);
    let mut fed = seq.clone();
    let mut worst = 0f64;
    for s in 0..5 {
        let cached = last(&run(&fed, Some(&mut caches))?)?;
        let (traced, next) = step.call(&(fed.clone(), traced_caches))?;
        traced_caches = next;
        let from_fixed = last(&run(&fed, Some(&mut fixed_eager))?)?;
        let (fixed_traced_out, next) = step_fixed.call(&(fed.clone(), fixed_traced))?;
        fixed_traced = next;
        let full = last(&run(&seq, None)?)?;
        let scale = full.to_vec_f64().iter().fold(0f64, |m, x| m.max(x.abs()));
        for got in [&cached, &traced, &from_fixed, &fixed_traced_out] {
            for (a, b) in got.to_vec_f64().iter().zip(full.to_vec_f64()) {
                worst = worst.max((a - b).abs() / scale);
            }
        }
        let next = cached.argmax(-1)?.reshape(&[2, 1])?.cast(DType::I64)?;
        seq = Tensor::concat(&[&seq, &next], 1)?;
        fed = next;
        assert_eq!(caches[0].len(), 4 + s, "step {s}");
    }
    // past the window: the last steps attend to 3 of 7 and 8 positions
    assert_eq!(caches[1].keys().unwrap().shape(), &[2, 1, 8, 2]);
    eprintln!("mistral-shaped decoding: cached and traced against recomputed logits {worst:.1e}");
    assert!(worst < 1e-13, "cached or traced against recomputed logits: {worst:e}");
    assert_eq!(step.trace_count(), 5);
    // the fixed caches: the prompt's trace and one for the four one-token steps
    assert_eq!(step_fixed.trace_count(), 2);
    assert_eq!((fixed_eager[0].len(), fixed_traced[1].len()), (8, 8));
    Ok(())
}
