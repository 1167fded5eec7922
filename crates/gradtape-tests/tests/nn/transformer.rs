//! Transformer layers: `MultiHeadAttention` against Keras 3.15.1's with the
//! same weights (self, causal, masked, cross; f32 and f64) and its
//! gradients against `tf.GradientTape`'s, all printed by
//! `tests/reference/transformer.py` (every weight and input there and here
//! is `fill(shape, k)`); incremental decoding with a `KvCache` against the
//! full causal forward; the attention scores (`call_with_scores`, Keras's
//! `return_attention_scores=True`); positions (learned, and keras_hub's sinusoidal
//! formula); a pre-LayerNorm `TransformerBlock` against the same block
//! written with Keras layers, and traced against eager; weight tying; the
//! sampling helpers.

use gradtape::nn::sampling::{categorical, sample_next};
use gradtape::nn::{
    losses, sine_position_encoding, AttentionArgs, Embedding, Initializer, KvCache, Layer, LayerNorm, Module,
    MultiHeadAttention, PositionalEmbedding, TransformerBlock,
};
use gradtape::{
    check_gradients, function, CheckOptions, DType, GradientTape, Result, Rng, SourceRef, Tensor, Variable,
};

#[path = "../reference/keras_transformer.rs"]
mod keras;
use keras::*;

use super::keras_util::{assert_close, fill, weighted};

/// Sets every variable to `fill(shape, k0 + j)`, `j` its index.
fn set_weights(vars: &[Variable], k0: f64) {
    for (j, v) in vars.iter().enumerate() {
        v.assign(&fill(&v.shape(), k0 + j as f64, v.dtype())).unwrap();
    }
}

/// The script's self-attention layer: 2 heads of 3 on 6 features.
fn self_mha(dtype: DType, dropout: f64) -> Result<MultiHeadAttention> {
    let m = MultiHeadAttention::builder(2, 3)
        .dropout(dropout)
        .dtype(dtype)
        .build(6, &mut Rng::new(0))?;
    set_weights(&m.variables(), 1.0);
    Ok(m)
}

fn keras_mask() -> Tensor {
    let m: Vec<bool> = MHA_MASK.iter().map(|&v| v != 0.0).collect();
    Tensor::from_vec(m, &[2, 4, 4]).unwrap()
}

#[test]
fn self_attention_matches_keras() -> Result<()> {
    let m = self_mha(DType::F32, 0.0)?;
    let x = fill(&[2, 4, 6], 0.3, DType::F32);
    let mask = keras_mask();
    // Layer::call is unmasked self-attention at inference
    assert_close("self", &m.call(&x)?, &MHA_SELF_F32, 1e-5);
    let causal = m.call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
    assert_close("causal", &causal, &MHA_CAUSAL_F32, 1e-5);
    let masked = m.call_with(&x, &x, AttentionArgs::new().attention_mask(&mask))?;
    assert_close("masked", &masked, &MHA_MASKED_F32, 1e-5);
    // a mask without the batch dim broadcasts over it
    let first = mask.narrow(0, 0, 1)?;
    let y = m.call_with(&x, &x, AttentionArgs::new().attention_mask(&first.squeeze(&[0])?))?;
    assert_close("2-d mask, batch 0", &y.narrow(0, 0, 1)?, &MHA_MASKED_F32[..24], 1e-5);
    // the names and shapes are Keras's
    let names: Vec<String> = m.variables().iter().map(|v| v.name().to_string()).collect();
    let parts = ["query", "key", "value", "attention_output"];
    let want: Vec<String> = parts
        .iter()
        .flat_map(|p| [format!("{}/{p}/kernel", m.name()), format!("{}/{p}/bias", m.name())])
        .collect();
    assert_eq!(names, want);
    Ok(())
}

#[test]
fn cross_attention_matches_keras_in_f32_and_f64() -> Result<()> {
    for (dtype, tol, plain, causal) in [
        (DType::F32, 1e-5, &MHA_CROSS_F32, &MHA_CROSS_CAUSAL_F32),
        (DType::F64, 1e-12, &MHA_CROSS_F64, &MHA_CROSS_CAUSAL_F64),
    ] {
        // 3 heads, key_dim 2, value_dim 3, output 4; query 5, value 4 and
        // key 7 features; 3 queries, 6 keys
        let m = MultiHeadAttention::builder(3, 2)
            .value_dim(3)
            .output_shape(4)
            .value_features(4)
            .key_features(7)
            .dtype(dtype)
            .build(5, &mut Rng::new(0))?;
        set_weights(&m.variables(), 10.0);
        let q = fill(&[2, 3, 5], 0.1, dtype);
        let v = fill(&[2, 6, 4], 0.2, dtype);
        let k = fill(&[2, 6, 7], 0.4, dtype);
        let y = m.call_with(&q, &v, AttentionArgs::new().key(&k))?;
        assert_eq!(y.shape(), &[2, 3, 4]);
        assert_close(&format!("cross {dtype}"), &y, plain, tol);
        let args = AttentionArgs::new().key(&k).use_causal_mask(true);
        assert_close(
            &format!("cross causal {dtype}"),
            &m.call_with(&q, &v, args)?,
            causal,
            tol,
        );
    }
    Ok(())
}

/// The script's f64 self-attention layer under `mask`: the loss
/// `weighted(out)` and its gradients (every weight in Keras's order, then
/// the input) against `tf.GradientTape`'s.
fn masked_gradients_match_tensorflow(what: &str, mask: &Tensor, loss: &[f64], want: [&[f64]; 9]) -> Result<()> {
    let m = self_mha(DType::F64, 0.0)?;
    let x = fill(&[2, 4, 6], 0.3, DType::F64);
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&x);
        weighted(&m.call_with(&x, &x, AttentionArgs::new().attention_mask(mask))?)
    })?;
    assert_close(&format!("{what} loss"), &l, loss, 1e-12);
    let vars = m.variables();
    let mut sources: Vec<SourceRef> = vars.iter().map(SourceRef::from).collect();
    sources.push(SourceRef::from(&x));
    let grads = tape.gradient(&l, &sources[..])?;
    for (i, (g, w)) in grads.iter().zip(want).enumerate() {
        assert_close(
            &format!("{what} gradient {i} (TF)"),
            g.as_ref().expect("a gradient"),
            w,
            1e-10,
        );
    }
    Ok(())
}

#[test]
fn gradients_match_tensorflow_and_finite_differences() -> Result<()> {
    let want: [&[f64]; 9] = [
        &MHA_GRAD_QUERY_KERNEL,
        &MHA_GRAD_QUERY_BIAS,
        &MHA_GRAD_KEY_KERNEL,
        &MHA_GRAD_KEY_BIAS,
        &MHA_GRAD_VALUE_KERNEL,
        &MHA_GRAD_VALUE_BIAS,
        &MHA_GRAD_OUTPUT_KERNEL,
        &MHA_GRAD_OUTPUT_BIAS,
        &MHA_GRAD_INPUT,
    ];
    masked_gradients_match_tensorflow("masked", &keras_mask(), &MHA_GRAD_LOSS, want)?;
    // cross-attention, causal, with a mask: first and second derivatives
    // in the query, key and value inputs against finite differences
    let c = MultiHeadAttention::builder(2, 2)
        .value_dim(3)
        .value_features(3)
        .key_features(4)
        .dtype(DType::F64)
        .build(5, &mut Rng::new(0))?;
    set_weights(&c.variables(), 3.0);
    let cmask = Tensor::from_vec((0..2 * 3 * 4).map(|i| i % 4 != 2).collect::<Vec<_>>(), &[2, 3, 4])?;
    let inputs = [
        fill(&[2, 3, 5], 0.5, DType::F64),
        fill(&[2, 4, 3], 0.6, DType::F64),
        fill(&[2, 4, 4], 0.7, DType::F64),
    ];
    let f = |t: &[Tensor]| {
        let args = AttentionArgs::new()
            .key(&t[2])
            .attention_mask(&cmask)
            .use_causal_mask(true);
        weighted(&c.call_with(&t[0], &t[1], args)?)
    };
    let report = check_gradients(f, &inputs, &CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    Ok(())
}

/// Padding as Keras masks it (query mask and key mask combined, so a
/// padded query's row hides every key). Keras 3 answers such a row in two
/// ways and the layer follows both: uniform probabilities over all keys
/// on its default path (no dropout, no scores asked for), zero
/// probabilities (the output projection's bias alone) with the scores or
/// with dropout. Outputs and scores in f32, gradients in f64
/// (TensorFlow's tape), against `reference/transformer.py`; traced as
/// eager; first and second derivatives against finite differences.
#[test]
fn padding_masks_match_keras() -> Result<()> {
    let pad: Vec<bool> = MHA_PAD_MASK.iter().map(|&v| v != 0.0).collect();
    let pad = Tensor::from_vec(pad, &[2, 4, 4])?;
    let args = AttentionArgs::new().attention_mask(&pad);
    let m = self_mha(DType::F32, 0.0)?;
    let x = fill(&[2, 4, 6], 0.3, DType::F32);
    let y = m.call_with(&x, &x, args)?;
    assert_close("padded", &y, &MHA_PADDED_F32, 1e-5);
    let (y0, scores) = m.call_with_scores(&x, &x, args)?;
    assert_close("padded, with scores", &y0, &MHA_PADDED_WITH_SCORES_F32, 1e-5);
    assert_close("padded scores", &scores, &MHA_PADDED_SCORES_F32, 1e-5);
    // there the padded queries (batch 1, rows 2 and 3) give the bias alone
    let bias = m.variables()[7].read().to_vec::<f32>()?;
    let y0 = y0.to_vec::<f32>()?;
    for row in [6, 7] {
        assert_eq!(&y0[row * 6..][..6], &bias[..], "padded row {row}");
    }
    // a layer with dropout takes Keras's other path, also at inference
    let d = self_mha(DType::F32, 0.5)?;
    assert_eq!(d.call_with(&x, &x, args)?.to_vec::<f32>()?, y0);
    let traced = {
        let (m, pad) = (self_mha(DType::F32, 0.0)?, pad.clone());
        function(move |x: &Tensor| m.call_with(x, x, AttentionArgs::new().attention_mask(&pad)))
    };
    assert_eq!(traced.call(&x)?.to_vec::<f32>()?, y.to_vec::<f32>()?);
    // gradients (f64) against TensorFlow's
    let want: [&[f64]; 9] = [
        &MHA_PADDED_GRAD_QUERY_KERNEL,
        &MHA_PADDED_GRAD_QUERY_BIAS,
        &MHA_PADDED_GRAD_KEY_KERNEL,
        &MHA_PADDED_GRAD_KEY_BIAS,
        &MHA_PADDED_GRAD_VALUE_KERNEL,
        &MHA_PADDED_GRAD_VALUE_BIAS,
        &MHA_PADDED_GRAD_OUTPUT_KERNEL,
        &MHA_PADDED_GRAD_OUTPUT_BIAS,
        &MHA_PADDED_GRAD_INPUT,
    ];
    masked_gradients_match_tensorflow("padded", &pad, &MHA_PADDED_GRAD_LOSS, want)?;
    let m = self_mha(DType::F64, 0.0)?;
    let x = fill(&[2, 4, 6], 0.3, DType::F64);
    // first and second derivatives in the input, the scores' too
    let f = |t: &[Tensor]| weighted(&m.call_with(&t[0], &t[0], args)?);
    let report = check_gradients(f, std::slice::from_ref(&x), &CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    let f = |t: &[Tensor]| weighted(&m.call_with_scores(&t[0], &t[0], args)?.1);
    let report = check_gradients(f, &[x], &CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    Ok(())
}

#[test]
fn dropout_while_training_keeps_keras_values() -> Result<()> {
    let x = fill(&[2, 4, 6], 0.3, DType::F32);
    let mask = keras_mask();
    // a rate so small that no probability is dropped: the dropout path
    // (the fused op with dropout) gives Keras's values
    let tiny = self_mha(DType::F32, 1e-12)?;
    let args = AttentionArgs::new().training(true);
    assert_close("dropout path", &tiny.call_with(&x, &x, args)?, &MHA_SELF_F32, 1e-5);
    let y = tiny.call_with(&x, &x, args.attention_mask(&mask))?;
    assert_close("dropout path masked", &y, &MHA_MASKED_F32, 1e-5);
    let y = tiny.call_with(&x, &x, args.use_causal_mask(true))?;
    assert_close("dropout path causal", &y, &MHA_CAUSAL_F32, 1e-5);
    // a real rate: a new draw at each training call, none at inference
    let m = self_mha(DType::F32, 0.5)?;
    let (a, b) = (
        m.forward(&x, true)?.to_vec::<f32>()?,
        m.forward(&x, true)?.to_vec::<f32>()?,
    );
    assert_ne!(a, b);
    assert_ne!(a, m.call(&x)?.to_vec::<f32>()?);
    assert_close("inference", &m.call(&x)?, &MHA_SELF_F32, 1e-5);
    // traced: each call of the graph draws a new mask (as Dropout), and the
    // kept probabilities still give a finite output
    let m = std::sync::Arc::new(m);
    let mt = m.clone();
    let f = function(move |x: &Tensor| mt.forward(x, true));
    let (a, b) = (f.call(&x)?.to_vec::<f32>()?, f.call(&x)?.to_vec::<f32>()?);
    assert_ne!(a, b);
    assert!(a.iter().chain(&b).all(|v| v.is_finite()));
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn attention_scores_match_keras_and_differentiate() -> Result<()> {
    // Keras's return_attention_scores=True: self-attention with the bool
    // mask (f32), causal cross-attention (f64); the output is call_with's
    let m = self_mha(DType::F32, 0.0)?;
    let x = fill(&[2, 4, 6], 0.3, DType::F32);
    let mask = keras_mask();
    let args = AttentionArgs::new().attention_mask(&mask);
    let (y, scores) = m.call_with_scores(&x, &x, args)?;
    assert_eq!(scores.shape(), &[2, 2, 4, 4]);
    assert_close("scores masked", &scores, &MHA_SCORES_MASKED_F32, 1e-5);
    assert_eq!(y.to_vec::<f32>()?, m.call_with(&x, &x, args)?.to_vec::<f32>()?);
    let c = MultiHeadAttention::builder(3, 2)
        .value_dim(3)
        .output_shape(4)
        .value_features(4)
        .key_features(7)
        .dtype(DType::F64)
        .build(5, &mut Rng::new(0))?;
    set_weights(&c.variables(), 10.0);
    let q = fill(&[2, 3, 5], 0.1, DType::F64);
    let v = fill(&[2, 6, 4], 0.2, DType::F64);
    let k = fill(&[2, 6, 7], 0.4, DType::F64);
    let args = AttentionArgs::new().key(&k).use_causal_mask(true);
    let (y, scores) = c.call_with_scores(&q, &v, args)?;
    assert_eq!(scores.shape(), &[2, 3, 3, 6]);
    assert_close("scores cross causal", &scores, &MHA_SCORES_CROSS_CAUSAL_F64, 1e-12);
    assert_close("output cross causal", &y, &MHA_CROSS_CAUSAL_F64, 1e-12);
    // with dropout while training: the output is the dropout path's, the
    // scores are taken before the dropout (unchanged by it)
    let d = self_mha(DType::F32, 0.5)?;
    let (_, dropped) = d.call_with_scores(&x, &x, AttentionArgs::new().attention_mask(&mask).training(true))?;
    assert_close("scores with dropout", &dropped, &MHA_SCORES_MASKED_F32, 1e-5);
    // the scores differentiate (first and second order, against finite
    // differences) in the query, key and value inputs, with a mask
    let cmask = Tensor::from_vec((0..2 * 3 * 6).map(|i| i % 6 != 4).collect::<Vec<_>>(), &[2, 3, 6])?;
    let f = |t: &[Tensor]| {
        let args = AttentionArgs::new().key(&t[2]).attention_mask(&cmask);
        weighted(&c.call_with_scores(&t[0], &t[1], args)?.1)
    };
    let report = check_gradients(f, &[q, v, k], &CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    // traced: the output and the scores are the eager call's
    let m = std::sync::Arc::new(m);
    let mt = m.clone();
    let traced = function(move |x: &Tensor| {
        let mask = keras_mask();
        let (y, s) = mt.call_with_scores(x, x, AttentionArgs::new().attention_mask(&mask).use_causal_mask(true))?;
        Ok(vec![y, s])
    });
    let args = AttentionArgs::new().attention_mask(&mask).use_causal_mask(true);
    let (y, s) = m.call_with_scores(&x, &x, args)?;
    let got = traced.call(&x)?;
    assert_close("traced output", &got[0], &y.to_vec_f64(), 1e-6);
    assert_close("traced scores", &got[1], &s.to_vec_f64(), 1e-6);
    Ok(())
}

#[test]
fn bad_attention_input_is_an_error() -> Result<()> {
    let m = self_mha(DType::F32, 0.0)?;
    let x = fill(&[2, 4, 6], 0.3, DType::F32);
    let none = AttentionArgs::new();
    let cases: Vec<(&str, Result<Tensor>)> = vec![
        ("features", m.call_with(&fill(&[2, 4, 5], 0.0, DType::F32), &x, none)),
        ("rank", m.call_with(&fill(&[4, 6], 0.0, DType::F32), &x, none)),
        ("dtype", m.call_with(&fill(&[2, 4, 6], 0.0, DType::F64), &x, none)),
        ("batch", m.call_with(&fill(&[3, 4, 6], 0.0, DType::F32), &x, none)),
        (
            "key length",
            m.call_with(&x, &x, none.key(&fill(&[2, 3, 6], 0.0, DType::F32))),
        ),
        (
            "mask dtype",
            m.call_with(&x, &x, none.attention_mask(&fill(&[2, 4, 4], 0.0, DType::F32))),
        ),
        (
            "mask shape",
            m.call_with(
                &x,
                &x,
                none.attention_mask(&Tensor::from_vec(vec![true; 12], &[1, 4, 3])?),
            ),
        ),
    ];
    for (what, r) in cases {
        let e = r.err().unwrap_or_else(|| panic!("{what}: no error"));
        assert!(e.to_string().contains("MultiHeadAttention"), "{what}: {e}");
    }
    // a cross-attention layer cannot decode from a cache
    let c = MultiHeadAttention::builder(2, 3)
        .value_features(4)
        .build(6, &mut Rng::new(0))?;
    assert!(c.call_cached(&x, &mut KvCache::new()).is_err());
    // a cache from another batch size
    let mut cache = KvCache::new();
    m.call_cached(&x, &mut cache)?;
    assert!(m.call_cached(&fill(&[1, 1, 6], 0.0, DType::F32), &mut cache).is_err());
    assert!(MultiHeadAttention::builder(2, 0).build(6, &mut Rng::new(0)).is_err());
    assert!(MultiHeadAttention::builder(2, 3)
        .dtype(DType::I32)
        .build(6, &mut Rng::new(0))
        .is_err());
    Ok(())
}

#[test]
fn cached_decoding_gives_the_full_causal_output() -> Result<()> {
    // expected: the same layer's causal forward on the whole sequence
    let mut rng = Rng::new(5);
    let m = MultiHeadAttention::builder(2, 4)
        .value_dim(3)
        .dtype(DType::F64)
        .build(8, &mut rng)?;
    let x = rng.normal(&[2, 7, 8], 0.0, 1.0, DType::F64)?;
    let full = m.call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
    let mut cache = KvCache::new();
    let mut start = 0;
    // a prompt of 3, one position, a piece of 2, one position
    for len in [3, 1, 2, 1] {
        let y = m.call_cached(&x.narrow(1, start, len)?, &mut cache)?;
        start += len;
        assert_eq!(cache.len(), start);
        let want = full.narrow(1, start - len, len)?.to_vec_f64();
        assert_close(&format!("positions {}..{start}", start - len), &y, &want, 1e-12);
    }
    assert_eq!(cache.keys().unwrap().shape(), &[2, 2, 7, 4]);
    assert_eq!(cache.values().unwrap().shape(), &[2, 2, 7, 3]);
    cache.clear();
    assert!(cache.is_empty());
    Ok(())
}

#[test]
fn positions_learned_and_sinusoidal() -> Result<()> {
    let pe = PositionalEmbedding::builder(6, 3)
        .dtype(DType::F64)
        .name("pos")
        .build(&mut Rng::new(0))?;
    assert_eq!(pe.table().name(), "pos/embeddings");
    pe.table().assign(&fill(&[6, 3], 0.0, DType::F64))?;
    let table = pe.table().read().to_vec::<f64>()?;
    // rows start..start+t of the table, broadcast over the batch
    let x = fill(&[2, 2, 3], 1.0, DType::F64);
    let y = pe.forward_from(&x, 3)?.to_vec::<f64>()?;
    let rows = &table[9..15];
    assert_eq!(y, [rows, rows].concat());
    assert_eq!(pe.call(&x)?.to_vec::<f64>()?, [&table[..6], &table[..6]].concat());
    // add_to adds them; the gradient reaches exactly those rows, once per
    // batch element
    let tape = GradientTape::new();
    let l = tape.record(|| pe.add_to(&x, 3)?.sum_all())?;
    let g = tape.gradient(&l, pe.table())?.unwrap().to_vec_f64();
    let want: Vec<f64> = (0..18).map(|i| if (9..15).contains(&i) { 2.0 } else { 0.0 }).collect();
    assert_eq!(g, want);
    assert!(pe.forward_from(&x, 5).is_err()); // positions 5 and 6 of 0..6
    assert!(pe.call(&fill(&[2, 2, 4], 0.0, DType::F64)).is_err());
    // keras_hub's SinePositionEncoding formula in numpy (the script)
    let s = sine_position_encoding(5, 6, 3, 10000.0, DType::F64)?;
    assert_close("sine", &s, &SINE_5_6_FROM_3, 1e-15);
    // by hand: position 3, features 0 and 1 are sin 3 and cos 3
    let v = s.to_vec::<f64>()?;
    assert_eq!((v[0], v[1]), (3f64.sin(), 3f64.cos()));
    assert_eq!(sine_position_encoding(2, 4, 0, 1e4, DType::F32)?.dtype(), DType::F32);
    Ok(())
}

#[test]
fn builders_for_layer_norm_and_embedding() -> Result<()> {
    let x = fill(&[3, 4], 0.2, DType::F64);
    let a = LayerNorm::builder(4)
        .epsilon(1e-5)
        .center(false)
        .dtype(DType::F64)
        .build()?;
    let b = LayerNorm::with_options(4, 1e-5, false, true, DType::F64)?;
    a.variables()[0].assign(&fill(&[4], 1.0, DType::F64))?;
    b.variables()[0].assign(&fill(&[4], 1.0, DType::F64))?;
    assert_eq!(a.variables().len(), 1);
    assert_eq!(a.call(&x)?.to_vec::<f64>()?, b.forward(&x, true)?.to_vec::<f64>()?);
    let e = Embedding::builder(5, 2)
        .initializer(Initializer::Constant(0.25))
        .name("tok")
        .build(&mut Rng::new(0))?;
    assert_eq!(e.table().name(), "tok/embeddings");
    assert_eq!(e.call(&Tensor::vector(&[4i64]))?.to_vec::<f32>()?, vec![0.25, 0.25]);
    Ok(())
}

#[test]
fn tied_embedding_gradient_collects_both_uses() -> Result<()> {
    let emb = Embedding::builder(5, 3).dtype(DType::F64).build(&mut Rng::new(0))?;
    let t = fill(&[5, 3], 2.0, DType::F64);
    emb.table().assign(&t)?;
    let ids = Tensor::from_vec(vec![1i64, 3, 3, 0], &[2, 2])?;
    // the model: logits = lookup(ids) · tableᵀ
    let tape = GradientTape::new();
    let l = tape.record(|| weighted(&emb.attend(&emb.call(&ids)?)?))?;
    assert_eq!(emb.attend(&emb.call(&ids)?)?.shape(), &[2, 2, 5]);
    let got = tape.gradient(&l, emb.table())?.unwrap();
    // expected: each use alone, with plain ops on the table (the other
    // use's table a constant); their sum is the tied gradient
    let one_use = |lookup: bool| -> Result<Vec<f64>> {
        let tape = GradientTape::new();
        let l = tape.record(|| {
            tape.watch(&t);
            let (a, b) = if lookup {
                (t.clone(), t.stop_gradient())
            } else {
                (t.stop_gradient(), t.clone())
            };
            weighted(&a.embedding_lookup(&ids)?.matmul_with(&b, false, true)?)
        })?;
        Ok(tape.gradient(&l, &t)?.unwrap().to_vec_f64())
    };
    let (g1, g2) = (one_use(true)?, one_use(false)?);
    // rows 2 and 4 are never looked up: only the projection reaches them
    assert!(g1[6..9].iter().all(|&g| g == 0.0) && g2[6..9].iter().any(|&g| g != 0.0));
    let want: Vec<f64> = g1.iter().zip(&g2).map(|(a, b)| a + b).collect();
    assert_close("tied gradient", &got, &want, 1e-12);
    assert!(emb.attend(&fill(&[2, 4], 0.0, DType::F64)).is_err());
    Ok(())
}

#[test]
fn transformer_block_matches_keras_layers() -> Result<()> {
    // the script's block: Keras LayerNormalization(1e-5), the MHA, Dense,
    // exact GELU (numpy's erf), Dense; weights fill(shape, 20 + j) in our
    // order
    let block = TransformerBlock::builder(6, 2, 8)
        .causal(true)
        .dtype(DType::F64)
        .build(&mut Rng::new(0))?;
    set_weights(&block.variables(), 20.0);
    let x = fill(&[2, 4, 6], 0.3, DType::F64);
    assert_close("block", &block.call(&x)?, &BLOCK_CAUSAL_F64, 1e-12);
    // the same from a prompt of 3 and one cached position
    let mut cache = KvCache::new();
    let a = block.call_cached(&x.narrow(1, 0, 3)?, &mut cache)?;
    let b = block.call_cached(&x.narrow(1, 3, 1)?, &mut cache)?;
    let got = Tensor::concat(&[&a, &b], 1)?;
    assert_close("cached", &got, &BLOCK_CAUSAL_F64, 1e-12);
    // not causal: no cached decoding
    let enc = TransformerBlock::builder(6, 2, 8).build(&mut Rng::new(0))?;
    assert!(enc
        .call_cached(&fill(&[1, 1, 6], 0.0, DType::F32), &mut KvCache::new())
        .is_err());
    assert!(enc.call(&fill(&[1, 1, 5], 0.0, DType::F32)).is_err());
    // dropout: a new draw at each training call
    let d = TransformerBlock::builder(6, 2, 8)
        .dropout(0.3)
        .build(&mut Rng::new(0))?;
    let x = fill(&[2, 4, 6], 0.3, DType::F32);
    assert_ne!(
        d.forward(&x, true)?.to_vec::<f32>()?,
        d.forward(&x, true)?.to_vec::<f32>()?
    );
    assert_eq!(d.call(&x)?.to_vec::<f32>()?, d.call(&x)?.to_vec::<f32>()?);
    Ok(())
}

/// A 2-block character GPT: token and learned position embeddings, causal
/// blocks, a final norm and the tied output projection.
struct TinyGpt {
    tokens: Embedding,
    positions: PositionalEmbedding,
    blocks: Vec<TransformerBlock>,
    norm: LayerNorm,
}

impl TinyGpt {
    fn new(seed: u64) -> Result<TinyGpt> {
        let mut rng = Rng::new(seed);
        let f = DType::F64;
        let tokens = Embedding::builder(11, 8)
            .initializer(Initializer::RandomNormal { mean: 0.0, std: 0.5 })
            .dtype(f)
            .build(&mut rng)?;
        let positions = PositionalEmbedding::builder(8, 8).dtype(f).build(&mut rng)?;
        let blocks = (0..2)
            .map(|_| {
                TransformerBlock::builder(8, 2, 16)
                    .causal(true)
                    .dtype(f)
                    .build(&mut rng)
            })
            .collect::<Result<_>>()?;
        let norm = LayerNorm::builder(8).epsilon(1e-5).dtype(f).build()?;
        Ok(TinyGpt {
            tokens,
            positions,
            blocks,
            norm,
        })
    }

    fn variables(&self) -> Vec<Variable> {
        let mut v = self.tokens.variables();
        v.extend(self.positions.variables());
        self.blocks.iter().for_each(|b| v.extend(b.variables()));
        v.extend(self.norm.variables());
        v
    }

    /// Logits `[batch, t, vocab]` of the ids `[batch, t]` at positions
    /// `start..`; with caches, one per block, it decodes.
    fn logits(&self, ids: &Tensor, start: usize, caches: Option<&mut [KvCache]>, training: bool) -> Result<Tensor> {
        let mut h = self.tokens.call(ids)?;
        h = self.positions.add_to(&h, start)?;
        match caches {
            Some(caches) => {
                for (b, c) in self.blocks.iter().zip(caches) {
                    h = b.call_cached(&h, c)?;
                }
            }
            None => {
                for b in &self.blocks {
                    h = b.forward(&h, training)?;
                }
            }
        }
        self.tokens.attend(&self.norm.call(&h)?)
    }

    fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let logits = self.logits(ids, 0, None, true)?;
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        losses::sparse_categorical_crossentropy(&targets.reshape(&[b * t])?, &logits.reshape(&[b * t, 11])?, true)
    }
}

#[test]
fn a_tiny_gpt_step_traced_gives_the_eager_loss_and_gradients() -> Result<()> {
    let model = std::sync::Arc::new(TinyGpt::new(3)?);
    let vars = model.variables();
    let step = {
        let (model, vars) = (model.clone(), vars.clone());
        move |ids: &Tensor, targets: &Tensor| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            let l = tape.record(|| model.loss(ids, targets))?;
            let mut out = vec![l.clone()];
            for g in tape.gradient(&l, &vars[..])? {
                out.push(g.expect("every variable gets a gradient"));
            }
            Ok(out)
        }
    };
    let step2 = step.clone();
    let f = function(move |(ids, targets): &(Tensor, Tensor)| step2(ids, targets));
    // expected: the eager step on the same ids (new ids at each call)
    let mut rng = Rng::new(9);
    for call in 0..3 {
        let seq: Vec<i64> = (0..2 * 7).map(|_| rng.below(11) as i64).collect();
        let ids: Vec<i64> = seq.chunks(7).flat_map(|r| r[..6].to_vec()).collect();
        let targets: Vec<i64> = seq.chunks(7).flat_map(|r| r[1..].to_vec()).collect();
        let (ids, targets) = (Tensor::from_vec(ids, &[2, 6])?, Tensor::from_vec(targets, &[2, 6])?);
        let got = f.call(&(ids.clone(), targets.clone()))?;
        let want = step(&ids, &targets)?;
        assert_eq!(got.len(), 1 + vars.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("call {call} output {i}"), g, &w.to_vec_f64(), 1e-12);
        }
        // the gradients are not all zero (the loss depends on every weight)
        assert!(want[1..].iter().all(|g| g.to_vec_f64().iter().any(|v| *v != 0.0)));
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn a_tiny_gpt_decodes_with_caches_as_the_full_forward() -> Result<()> {
    let model = TinyGpt::new(4)?;
    let ids = Tensor::from_vec(vec![1i64, 5, 2, 9, 9, 0, 3, 4, 10, 7, 1, 2], &[2, 6])?;
    // expected: the full forward's logits at every position
    let full = model.logits(&ids, 0, None, false)?;
    let mut caches = [KvCache::new(), KvCache::new()];
    let mut pieces = vec![model.logits(&ids.narrow(1, 0, 3)?, 0, Some(&mut caches[..]), false)?];
    for p in 3..6 {
        pieces.push(model.logits(&ids.narrow(1, p, 1)?, p, Some(&mut caches[..]), false)?);
    }
    let refs: Vec<&Tensor> = pieces.iter().collect();
    assert_close("decoded logits", &Tensor::concat(&refs, 1)?, &full.to_vec_f64(), 1e-10);
    Ok(())
}

fn argmax_rows(v: &[f64], n: usize) -> Vec<i64> {
    v.chunks(n)
        .map(|r| {
            let mut best = 0;
            for (i, &x) in r.iter().enumerate() {
                if x > r[best] {
                    best = i;
                }
            }
            best as i64
        })
        .collect()
}

#[test]
fn sampling_is_greedy_at_the_limits_and_follows_the_softmax() -> Result<()> {
    let mut rng = Rng::new(21);
    let logits = rng.normal(&[50, 20], 0.0, 2.0, DType::F32)?;
    let argmax = logits.argmax(-1)?.to_vec::<i64>()?;
    assert_eq!(argmax, argmax_rows(&logits.to_vec_f64(), 20));
    assert_eq!(sample_next(&logits, 1.0, Some(1), &mut rng)?.to_vec::<i64>()?, argmax);
    assert_eq!(sample_next(&logits, 1e-8, None, &mut rng)?.to_vec::<i64>()?, argmax);
    assert_eq!(
        sample_next(&logits, 1e-300, Some(5), &mut rng)?.to_vec::<i64>()?,
        argmax
    );
    // empirical frequencies against the probabilities: 40000 draws per
    // row, each frequency within 5 standard errors sqrt(p (1 - p) / n)
    // (a false failure has probability below 1e-5 per class; the seed is
    // fixed, so the test is deterministic)
    let rows = [0.0, 1.0, 2.0, -1.0, 0.5, f64::NEG_INFINITY, 0.0, 0.0];
    let logits = Tensor::from_vec(rows.to_vec(), &[2, 4])?.cast(DType::F32)?;
    let n = 40000;
    let check = |draws: &[i64], probs: &[f64], what: &str| {
        for (c, &p) in probs.iter().enumerate() {
            let freq = draws.iter().filter(|&&d| d == c as i64).count() as f64 / draws.len() as f64;
            let se = (p * (1.0 - p) / draws.len() as f64).sqrt();
            assert!(
                (freq - p).abs() <= 5.0 * se + 1e-12,
                "{what}, class {c}: frequency {freq}, probability {p}"
            );
        }
    };
    let softmax = |r: &[f64], t: f64| -> Vec<f64> {
        let e: Vec<f64> = r.iter().map(|l| (l / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    };
    let s = categorical(&logits, n, &mut rng)?;
    assert_eq!(s.shape(), &[2, n]);
    let s = s.to_vec::<i64>()?;
    check(&s[..n], &softmax(&rows[..4], 1.0), "categorical row 0");
    check(&s[n..], &softmax(&rows[4..], 1.0), "categorical row 1");
    // temperature 2 and top-2: softmax(logits / 2) over the two largest
    let draws: Vec<i64> = (0..n / 4)
        .map(|_| Ok(sample_next(&logits, 2.0, Some(2), &mut rng)?.to_vec::<i64>()?[0]))
        .collect::<Result<_>>()?;
    check(
        &draws,
        &softmax(&[f64::NEG_INFINITY, 1.0, 2.0, f64::NEG_INFINITY], 2.0),
        "top-2, T = 2",
    );
    // bad input
    let bad: Vec<(&str, Result<Tensor>)> = vec![
        ("temperature 0", sample_next(&logits, 0.0, None, &mut rng)),
        ("temperature < 0", sample_next(&logits, -1.0, None, &mut rng)),
        ("temperature NaN", sample_next(&logits, f64::NAN, None, &mut rng)),
        ("top_k 0", sample_next(&logits, 1.0, Some(0), &mut rng)),
        (
            "rank 1",
            sample_next(&Tensor::vector(&[1.0f32, 2.0]), 1.0, None, &mut rng),
        ),
        (
            "rank 3",
            categorical(&Tensor::zeros(&[1, 2, 3], DType::F32), 1, &mut rng),
        ),
        (
            "integers",
            categorical(&Tensor::from_vec(vec![1i64, 2], &[1, 2])?, 1, &mut rng),
        ),
        (
            "NaN",
            categorical(&Tensor::from_vec(vec![1.0, f64::NAN], &[1, 2])?, 1, &mut rng),
        ),
        (
            "all -inf",
            categorical(&Tensor::full(&[1, 2], f64::NEG_INFINITY, DType::F64), 1, &mut rng),
        ),
    ];
    for (what, r) in bad {
        assert!(r.is_err(), "{what}: no error");
    }
    Ok(())
}
