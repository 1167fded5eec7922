//! Never-panic property test for attention and the transformer layers:
//! random (often empty or mismatched) shapes, dtypes, masks, causal flags,
//! dropout rates, cache misuse, positions past the table, and sampling with
//! degenerate logits, temperatures and top-k. Every call returns a result
//! or an error, never a panic.

use std::panic::{catch_unwind, AssertUnwindSafe};

use gradtape::nn::{
    sampling, AttentionArgs, KvCache, Layer, MultiHeadAttention, PositionalEmbedding, TransformerBlock,
};
use gradtape::{AttentionDropout, DType, Result, Rng, Tensor};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
    fn shape(&mut self, rank: usize) -> Vec<usize> {
        (0..rank).map(|_| self.below(5) as usize).collect()
    }
    fn dtype(&mut self) -> DType {
        [DType::F32, DType::F64, DType::F16, DType::I64, DType::Bool][self.below(5) as usize]
    }
    fn tensor(&mut self, shape: &[usize], dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, 1e30];
        let v: Vec<f64> = (0..n)
            .map(|i| {
                if self.below(10) == 0 {
                    special[self.below(5) as usize]
                } else {
                    ((i as f64) * 0.37 + self.below(7) as f64).sin()
                }
            })
            .collect();
        Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
    }
    fn float(&mut self) -> f64 {
        [0.0, 0.5, 1.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 0.999_999][self.below(8) as usize]
    }
}

/// Runs `f`, failing the test if it panics; whether it returned `Ok`.
fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> bool {
    let r = catch_unwind(AssertUnwindSafe(f));
    assert!(r.is_ok(), "{what} panicked");
    r.is_ok_and(|r| r.is_ok())
}

#[test]
fn attention_and_transformer_layers_never_panic() {
    let mut g = Lcg(0x7a11);
    let mut rng = Rng::new(1);
    // calls that returned a result, per kind (the cases must reach the
    // kernels, not only the checks)
    let mut ok = [0usize; 5];
    for case in 0..400 {
        // the op, on random operands
        let rank = 1 + g.below(4) as usize;
        let dt = if g.coin() { DType::F32 } else { g.dtype() };
        // mostly agreeing shapes (q [.., tq, d], k [.., tk, d], v [.., tk, dv]),
        // sometimes independent ones
        let (qs, ks, vs) = if g.below(4) == 0 {
            (g.shape(rank), g.shape(rank), g.shape(rank))
        } else {
            let qs = g.shape(rank.max(2));
            let r = qs.len();
            let (tk, dv) = (g.below(5) as usize, g.below(5) as usize);
            let mut ks = qs.clone();
            ks[r - 2] = tk;
            let mut vs = ks.clone();
            vs[r - 1] = dv;
            (qs, ks, vs)
        };
        let (q, k, v) = (g.tensor(&qs, dt), g.tensor(&ks, dt), g.tensor(&vs, dt));
        let mask = if g.coin() {
            let mrank = g.below(rank as u64 + 1) as usize;
            let ms = g.shape(mrank);
            let mdt = if g.coin() { DType::Bool } else { dt };
            Some(g.tensor(&ms, mdt))
        } else {
            None
        };
        let causal = g.coin();
        let scale = if g.coin() { Some(g.float()) } else { None };
        ok[0] += usize::from(no_panic(
            &format!("case {case}: attention {qs:?} {ks:?} {vs:?}"),
            || q.scaled_dot_product_attention(&k, &v, mask.as_ref(), causal, scale),
        ));
        let drop = AttentionDropout {
            rate: g.float(),
            seed: g.next(),
        };
        ok[1] += usize::from(no_panic(&format!("case {case}: attention dropout {drop:?}"), || {
            q.scaled_dot_product_attention_dropout(&k, &v, mask.as_ref(), causal, scale, drop)
        }));
        // the layers, on inputs of random rank and width
        let heads = g.below(3) as usize;
        let key_dim = g.below(4) as usize;
        let feat = g.below(5) as usize;
        let xrank = 1 + g.below(3) as usize;
        let mut xs = g.shape(xrank);
        if g.below(4) != 0 {
            // mostly [batch, time, feat]
            xs = vec![g.below(4) as usize, g.below(5) as usize, feat];
        }
        let xdt = if g.below(4) != 0 { DType::F32 } else { g.dtype() };
        let x = g.tensor(&xs, xdt);
        ok[2] += usize::from(no_panic(
            &format!("case {case}: MultiHeadAttention {heads}x{key_dim} on {:?}", x.shape()),
            || {
                let mha = MultiHeadAttention::builder(heads, key_dim)
                    .dropout(g.float())
                    .build(feat, &mut rng)?;
                let args = AttentionArgs::new().use_causal_mask(g.coin()).training(g.coin());
                let y = mha.call_with(&x, &x, args);
                let mut cache = KvCache::new();
                let _ = mha.call_cached(&x, &mut cache);
                // a second call with another batch size
                let x2 = Tensor::zeros(&[1 + x.shape().first().copied().unwrap_or(0), 1, feat], DType::F32);
                let _ = mha.call_cached(&x2, &mut cache);
                y
            },
        ));
        ok[3] += usize::from(no_panic(&format!("case {case}: TransformerBlock"), || {
            let block = TransformerBlock::builder(feat, heads, 1 + g.below(4) as usize)
                .causal(g.coin())
                .build(&mut rng)?;
            let mut cache = KvCache::new();
            let _ = block.call_cached(&x, &mut cache);
            block.call(&x)
        }));
        no_panic(&format!("case {case}: PositionalEmbedding"), || {
            let pe = PositionalEmbedding::builder(g.below(5) as usize, feat).build(&mut rng)?;
            let start = g.below(8) as usize;
            let _ = pe.positions(start, g.below(8) as usize);
            let _ = pe.add_to(&x, start);
            pe.forward_from(&x, start)
        });
        // sampling
        let lrank = g.below(3) as usize;
        let ls = g.shape(lrank);
        let ldt = g.dtype();
        let logits = g.tensor(&ls, ldt);
        let t = g.float();
        let k = if g.coin() { Some(g.below(6) as usize) } else { None };
        ok[4] += usize::from(no_panic(
            &format!("case {case}: sampling {:?} t={t} k={k:?}", logits.shape()),
            || {
                let _ = sampling::categorical(&logits, g.below(4) as usize, &mut rng);
                sampling::sample_next(&logits, t, k, &mut rng)
            },
        ));
    }
    eprintln!("results per kind: {ok:?}");
    assert!(ok.iter().all(|&n| n >= 20), "too few cases got past the checks: {ok:?}");
}

/// Cases the fuzz campaign (`GRADTAPE_FUZZ_OPS=attention,transformer`)
/// found: a broadcast view too large to copy given to the sampling
/// helpers (it panicked), a causal band of more elements than memory in
/// the composite that forward mode runs (an allocation abort, even with an
/// empty batch), and attention over 2³¹ keys of width 0 (it walked every
/// key, for nothing). Each is now a result or an error, at once.
#[test]
fn huge_and_empty_shapes_are_results_or_errors() -> Result<()> {
    let big = Tensor::scalar(0.5f32).broadcast_to(&[1, 1 << 61])?;
    let mut rng = Rng::new(0);
    assert!(sampling::categorical(&big, 2, &mut rng).is_err());
    assert!(sampling::sample_next(&big, 1.0, Some(3), &mut rng).is_err());
    // forward mode through the composite: a causal band of 2^62 + 1 rows
    // (values of width 0 and 1: the packed output [0, 2^62 + 1, 2] is
    // itself too large a shape)
    let q = Tensor::zeros(&[0, (1 << 62) + 1, 1], DType::F64);
    for dv in [0, 1] {
        let (k, v) = (
            Tensor::zeros(&[0, 1, 1], DType::F64),
            Tensor::zeros(&[0, 1, dv], DType::F64),
        );
        let acc = gradtape::ForwardAccumulator::new();
        acc.watch(&q, &q.try_ones_like()?)?;
        let y = acc.record(|| q.scaled_dot_product_attention(&k, &v, None, true, Some(0.5)));
        let outcome = y.and_then(|y| {
            assert_eq!(y.shape(), &[0, (1 << 62) + 1, dv]);
            acc.jvp(&y)
        });
        let e = outcome.expect_err("a causal band of 2^62 + 1 rows");
        assert!(
            e.to_string().contains("scaled_dot_product_attention"),
            "width {dv}: {e}"
        );
    }
    // no width: an empty output and zero gradients, without a walk over
    // the keys
    let q = Tensor::zeros(&[1, 2, 0], DType::F32);
    let kv = Tensor::zeros(&[1, 1 << 31, 0], DType::F32);
    let tape = gradtape::GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&q);
        q.scaled_dot_product_attention(&kv, &kv, None, false, None)
    })?;
    assert_eq!(y.shape(), &[1, 2, 0]);
    assert_eq!(tape.gradient(&y, &q)?.map(|g| g.shape().to_vec()), Some(vec![1, 2, 0]));
    // keys of width 3, values of width 0: gradients of q and k are zeros
    let (q, k, v) = (
        Tensor::ones(&[2, 3, 3], DType::F64),
        Tensor::ones(&[2, 4, 3], DType::F64),
        Tensor::zeros(&[2, 4, 0], DType::F64),
    );
    let tape = gradtape::GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&[q.clone(), k.clone()]);
        q.scaled_dot_product_attention(&k, &v, None, true, None)
    })?;
    for g in tape.gradient(&y, &[q, k])? {
        assert!(g.unwrap().to_vec::<f64>()?.iter().all(|&x| x == 0.0));
    }
    Ok(())
}

/// The same property for the attention masks, sliding windows and gates,
/// Keras's `Attention` and `AdditiveAttention`, post-norm and
/// cross-attention blocks with their padding masks, and masked global
/// pooling: random (often empty or mismatched) shapes, dtypes and masks.
#[test]
fn masks_windows_gates_and_cross_attention_never_panic() {
    use gradtape::nn::{AdditiveAttention, Attention, BlockArgs, GlobalPooling, PoolKind, ScoreMode, SequenceLayer};
    let mut g = Lcg(0x5eed);
    let mut rng = Rng::new(2);
    let mut ok = [0usize; 4];
    for case in 0..300 {
        let (b, tq, tk) = (g.below(3) as usize, g.below(4) as usize, g.below(5) as usize);
        let dt = if g.coin() { DType::F32 } else { g.dtype() };
        let mask = |g: &mut Lcg, shape: Vec<usize>| {
            if g.below(4) == 0 {
                None
            } else {
                // mostly the right length, sometimes not; mostly bool
                let dtype = if g.below(6) == 0 { DType::F32 } else { DType::Bool };
                Some(
                    g.tensor(&shape, DType::F64)
                        .gt_scalar(0.0)
                        .unwrap()
                        .cast(dtype)
                        .unwrap(),
                )
            }
        };
        let qlen = if g.below(8) == 0 { tq + 1 } else { tq };
        let (qm, vm, km) = (
            mask(&mut g, vec![b, qlen]),
            mask(&mut g, vec![b, tk]),
            mask(&mut g, vec![b, tk]),
        );
        let mut args = AttentionArgs::new().use_causal_mask(g.coin()).training(g.coin());
        if let Some(m) = &qm {
            args = args.query_mask(m);
        }
        if let Some(m) = &vm {
            args = args.value_mask(m);
        }
        if let Some(m) = &km {
            args = args.key_mask(m);
        }
        match case % 4 {
            0 => {
                // MultiHeadAttention with a window and a gate
                let d = 1 + g.below(6) as usize;
                let built = MultiHeadAttention::builder(1 + g.below(2) as usize, 1 + g.below(3) as usize)
                    .sliding_window(g.below(4) as usize)
                    .use_gate(g.coin())
                    .dropout([0.0, 0.5][g.below(2) as usize])
                    .dtype(if dt.is_float() { dt } else { DType::F32 })
                    .build(d, &mut rng);
                if let Ok(m) = built {
                    let (q, v) = (g.tensor(&[b, tq, d], dt), g.tensor(&[b, tk, d], dt));
                    ok[0] += no_panic("MultiHeadAttention with masks", || m.call_with(&q, &v, args)) as usize;
                    let mut cache = KvCache::new();
                    no_panic("call_cached with a window", || m.call_cached(&q, &mut cache));
                }
            }
            1 => {
                // Attention / AdditiveAttention
                let d = 1 + g.below(4) as usize;
                let (q, v, k) = (
                    g.tensor(&[b, tq, d], dt),
                    {
                        let dv = 1 + g.below(3) as usize;
                        g.tensor(&[b, tk, dv], dt)
                    },
                    g.tensor(&[b, tk, d], dt),
                );
                let args = args.key(&k);
                if g.coin() {
                    let mode = if g.coin() { ScoreMode::Dot } else { ScoreMode::Concat };
                    if let Ok(a) = Attention::builder()
                        .score_mode(mode)
                        .use_scale(g.coin())
                        .dtype(DType::F32)
                        .build(&mut rng)
                    {
                        ok[1] += no_panic("Attention", || a.call_with_scores(&q, &v, args)) as usize;
                    }
                } else if let Ok(a) = AdditiveAttention::builder(d)
                    .dropout([0.0, 0.3][g.below(2) as usize])
                    .build(&mut rng)
                {
                    ok[1] += no_panic("AdditiveAttention", || a.call_with(&q, &v, args)) as usize;
                }
            }
            2 => {
                // blocks: post-norm, cross-attention, padding masks
                let (d, ef) = (2 * (1 + g.below(2) as usize), 1 + g.below(4) as usize);
                let mut builder = TransformerBlock::builder(d, 2, 1 + g.below(4) as usize)
                    .normalize_first(g.coin())
                    .causal(g.coin());
                if g.coin() {
                    builder = builder.cross_attention(ef);
                }
                if let Ok(block) = builder.build(&mut rng) {
                    let xdt = if g.below(5) == 0 { dt } else { DType::F32 };
                    let x = g.tensor(&[b, tq, d], xdt);
                    let enc = g.tensor(&[b, tk, ef], DType::F32);
                    let mut bargs = BlockArgs::new().training(g.coin());
                    if g.coin() {
                        bargs = bargs.encoder(&enc);
                    }
                    if let Some(m) = &qm {
                        bargs = bargs.padding_mask(m);
                    }
                    if let Some(m) = &vm {
                        bargs = bargs.encoder_padding_mask(m);
                    }
                    ok[2] += no_panic("TransformerBlock::call_with", || block.call_with(&x, bargs)) as usize;
                    let mut cache = KvCache::new();
                    no_panic("call_cached_with", || {
                        block.call_cached_with(
                            &x,
                            &mut cache,
                            BlockArgs {
                                training: false,
                                padding_mask: None,
                                ..bargs
                            },
                        )
                    });
                }
            }
            _ => {
                // masked global pooling, of every rank
                let rank = 2 + g.below(3) as usize;
                let shape = g.shape(rank);
                let x = g.tensor(&shape, dt);
                if let Ok(p) =
                    GlobalPooling::new(if g.coin() { PoolKind::Avg } else { PoolKind::Max }, (rank - 2).max(1))
                {
                    ok[3] += no_panic("GlobalPooling::forward_masked", || {
                        p.forward_masked(&x, qm.as_ref(), false)
                    }) as usize;
                }
            }
        }
    }
    // every kind reached its kernels some of the time
    assert!(ok.iter().all(|&n| n > 5), "results per kind: {ok:?}");
}
