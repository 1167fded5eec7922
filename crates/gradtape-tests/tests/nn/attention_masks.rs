//! `MultiHeadAttention`'s masks from its inputs (`query_mask`,
//! `value_mask`, `key_mask`, combined with `attention_mask` and the causal
//! mask), its `sliding_window` and its `use_gate`, against Keras 3.15.1's
//! layer with the same weights, and the gated layer's gradients against
//! `tf.GradientTape`'s: all printed by
//! `tests/reference/keras_attention_masks.py` (every weight and input
//! there and here is `fill(shape, k)`). Then what Keras cannot check: the
//! window while decoding with a `KvCache`, traced against eager, finite
//! differences, and the errors for masks of the wrong shape.

use gradtape::nn::{AttentionArgs, KvCache, Layer, Module, MultiHeadAttention, MultiHeadAttentionBuilder};
use gradtape::{check_gradients, function, CheckOptions, DType, GradientTape, Result, Rng, SourceRef, Tensor};

#[path = "../reference/keras_attention_masks.rs"]
mod keras;
use keras::*;

use super::keras_util::{assert_close, fill, weighted};

/// `b` with every variable set to `fill(shape, k0 + j)`, `j` its index
/// (Keras's order, the gate's included).
fn layer(b: MultiHeadAttentionBuilder, features: usize, k0: f64) -> Result<MultiHeadAttention> {
    let m = b.build(features, &mut Rng::new(0))?;
    for (j, v) in m.variables().iter().enumerate() {
        v.assign(&fill(&v.shape(), k0 + j as f64, v.dtype()))?;
    }
    Ok(m)
}

/// The script's self-attention layer: 2 heads of 3 on 6 features.
fn self_layer(
    dtype: DType,
    b: impl FnOnce(MultiHeadAttentionBuilder) -> MultiHeadAttentionBuilder,
) -> Result<MultiHeadAttention> {
    layer(b(MultiHeadAttention::builder(2, 3).dtype(dtype)), 6, 1.0)
}

/// The script's cross-attention layer: 3 heads, key_dim 2, value_dim 3,
/// output 4; query 5, value 4 and key 7 features (f64).
fn cross_layer(gate: bool) -> Result<MultiHeadAttention> {
    let b = MultiHeadAttention::builder(3, 2)
        .value_dim(3)
        .output_shape(4)
        .value_features(4)
        .key_features(7)
        .use_gate(gate)
        .dtype(DType::F64);
    layer(b, 5, 10.0)
}

fn bools(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.iter().map(|&x| x != 0.0).collect::<Vec<_>>(), shape).unwrap()
}

/// The script's padding: two sequences of 5, the first of 3 tokens.
fn pad() -> Tensor {
    let v = [true, true, true, false, false, true, true, true, true, true];
    Tensor::from_vec(v.to_vec(), &[2, 5]).unwrap()
}

#[test]
fn padding_masks_of_the_inputs_match_keras() -> Result<()> {
    let pad = pad();
    for (dtype, tol, want) in [
        (
            DType::F64,
            1e-12,
            [&SELF_PADDED_F64, &SELF_PADDED_CAUSAL_F64, &SELF_VALUE_MASK_F64],
        ),
        (
            DType::F32,
            1e-5,
            [&SELF_PADDED_F32, &SELF_PADDED_CAUSAL_F32, &SELF_VALUE_MASK_F32],
        ),
    ] {
        let m = self_layer(dtype, |b| b)?;
        let x = fill(&[2, 5, 6], 0.3, dtype);
        let both = AttentionArgs::new().query_mask(&pad).value_mask(&pad);
        assert_close(&format!("padded {dtype}"), &m.call_with(&x, &x, both)?, want[0], tol);
        let causal = both.use_causal_mask(true);
        assert_close(
            &format!("padded causal {dtype}"),
            &m.call_with(&x, &x, causal)?,
            want[1],
            tol,
        );
        let values = AttentionArgs::new().value_mask(&pad);
        assert_close(
            &format!("value mask {dtype}"),
            &m.call_with(&x, &x, values)?,
            want[2],
            tol,
        );
        // the same masks as one attention mask give the same bits
        let square = pad.expand_dims(2)?.logical_and(&pad.expand_dims(1)?)?;
        let explicit = m.call_with(&x, &x, AttentionArgs::new().attention_mask(&square))?;
        assert_eq!(
            explicit.to_vec_f64(),
            m.call_with(&x, &x, both)?.to_vec_f64(),
            "{dtype}"
        );
        // and the padding matters (batch 0 differs unmasked; batch 1 has none)
        let plain = m.call_with(&x, &x, AttentionArgs::new())?.to_vec_f64();
        assert!(plain[..30]
            .iter()
            .zip(&want[0][..30])
            .any(|(a, b)| (a - b).abs() > 1e-3));
    }
    Ok(())
}

#[test]
fn value_key_and_attention_masks_combine_as_keras_in_cross_attention() -> Result<()> {
    let m = cross_layer(false)?;
    let q = fill(&[2, 3, 5], 0.1, DType::F64);
    let v = fill(&[2, 6, 4], 0.2, DType::F64);
    let k = fill(&[2, 6, 7], 0.4, DType::F64);
    let (vm, km, am) = (
        bools(&CROSS_VMASK, &[2, 6]),
        bools(&CROSS_KMASK, &[2, 6]),
        bools(&CROSS_AMASK, &[2, 3, 6]),
    );
    let qm = Tensor::from_vec(vec![true, true, false, true, true, true], &[2, 3])?;
    let args = AttentionArgs::new().key(&k).value_mask(&vm).key_mask(&km);
    assert_close(
        "value and key masks",
        &m.call_with(&q, &v, args)?,
        &CROSS_VALUE_KEY,
        1e-12,
    );
    let all = args.query_mask(&qm).attention_mask(&am).use_causal_mask(true);
    assert_close(
        "every mask, causal",
        &m.call_with(&q, &v, all)?,
        &CROSS_ALL_CAUSAL,
        1e-12,
    );
    Ok(())
}

#[test]
fn sliding_windows_match_keras_alone_causal_and_padded() -> Result<()> {
    for (w, causal, want64, want32) in [
        (2, false, &WINDOW_2_F64, &WINDOW_2_F32),
        (3, true, &WINDOW_3_CAUSAL_F64, &WINDOW_3_CAUSAL_F32),
    ] {
        for (dtype, tol, want) in [(DType::F64, 1e-12, want64), (DType::F32, 1e-5, want32)] {
            let m = self_layer(dtype, |b| b.sliding_window(w))?;
            let x = fill(&[2, 6, 6], 0.5, dtype);
            let y = m.call_with(&x, &x, AttentionArgs::new().use_causal_mask(causal))?;
            assert_close(&format!("window {w}, causal {causal}, {dtype}"), &y, want, tol);
        }
    }
    let m = self_layer(DType::F64, |b| b.sliding_window(2))?;
    let x = fill(&[2, 5, 6], 0.3, DType::F64);
    let pad = pad();
    let y = m.call_with(&x, &x, AttentionArgs::new().query_mask(&pad).value_mask(&pad))?;
    assert_close("window 2, padded", &y, &WINDOW_2_PADDED_F64, 1e-12);
    Ok(())
}

#[test]
fn gated_attention_matches_keras_values_and_tensorflow_gradients() -> Result<()> {
    for (dtype, tol, want) in [
        (DType::F64, 1e-12, &GATE_CAUSAL_F64),
        (DType::F32, 1e-5, &GATE_CAUSAL_F32),
    ] {
        let m = layer(MultiHeadAttention::builder(2, 3).use_gate(true).dtype(dtype), 6, 2.0)?;
        let x = fill(&[2, 4, 6], 0.3, dtype);
        let y = m.call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
        assert_close(&format!("gate causal {dtype}"), &y, want, tol);
    }
    let c = cross_layer(true)?;
    let (q, v, k) = (
        fill(&[2, 3, 5], 0.1, DType::F64),
        fill(&[2, 6, 4], 0.2, DType::F64),
        fill(&[2, 6, 7], 0.4, DType::F64),
    );
    assert_close(
        "gate cross",
        &c.call_with(&q, &v, AttentionArgs::new().key(&k))?,
        &GATE_CROSS_F64,
        1e-12,
    );

    // gradients of the gated causal layer over the padded batch
    let m = layer(
        MultiHeadAttention::builder(2, 3).use_gate(true).dtype(DType::F64),
        6,
        2.0,
    )?;
    let names: Vec<String> = m.variables().iter().map(|v| v.name().to_string()).collect();
    let parts = ["query", "key", "gate", "value", "attention_output"];
    let want_names: Vec<String> = parts
        .iter()
        .flat_map(|p| [format!("{}/{p}/kernel", m.name()), format!("{}/{p}/bias", m.name())])
        .collect();
    assert_eq!(names, want_names);
    let x = fill(&[2, 5, 6], 0.3, DType::F64);
    let pad = pad();
    let args = AttentionArgs::new()
        .query_mask(&pad)
        .value_mask(&pad)
        .use_causal_mask(true);
    let tape = GradientTape::new();
    let l = tape.record(|| {
        tape.watch(&x);
        weighted(&m.call_with(&x, &x, args)?)
    })?;
    assert_close("gate loss", &l, &GATE_GRAD_LOSS, 1e-12);
    let vars = m.variables();
    let mut sources: Vec<SourceRef> = vars.iter().map(SourceRef::from).collect();
    sources.push(SourceRef::from(&x));
    let grads = tape.gradient(&l, &sources[..])?;
    let want: [&[f64]; 11] = [
        &GATE_GRAD_QUERY_KERNEL,
        &GATE_GRAD_QUERY_BIAS,
        &GATE_GRAD_KEY_KERNEL,
        &GATE_GRAD_KEY_BIAS,
        &GATE_GRAD_GATE_KERNEL,
        &GATE_GRAD_GATE_BIAS,
        &GATE_GRAD_VALUE_KERNEL,
        &GATE_GRAD_VALUE_BIAS,
        &GATE_GRAD_ATTENTION_OUTPUT_KERNEL,
        &GATE_GRAD_ATTENTION_OUTPUT_BIAS,
        &GATE_GRAD_INPUT,
    ];
    assert_eq!(grads.len(), want.len());
    for (i, (g, w)) in grads.iter().zip(want).enumerate() {
        assert_close(
            &format!("gate gradient {i} ({})", names.get(i).map_or("input", |s| s)),
            g.as_ref().expect("a gradient"),
            w,
            1e-10,
        );
    }
    // first and second derivatives in the input, by finite differences
    let f = |t: &[Tensor]| weighted(&m.call_with(&t[0], &t[0], args)?);
    let report = check_gradients(f, std::slice::from_ref(&x), &CheckOptions::default())?;
    assert!(report.compared > 0, "{report:?}");
    Ok(())
}

#[test]
fn a_windowed_gated_layer_decodes_with_a_cache_as_it_attends_causally() -> Result<()> {
    // piece by piece (a prompt of 3, then one at a time) against the
    // causal call on the whole sequence, with windows shorter and longer
    // than the prompt, grouped heads and a gate
    for w in [1, 2, 4, 9] {
        let b = MultiHeadAttention::builder(4, 3)
            .num_key_value_heads(2)
            .sliding_window(w)
            .use_gate(true)
            .dtype(DType::F64);
        let m = layer(b, 8, 3.0)?;
        let x = fill(&[2, 7, 8], 0.2, DType::F64);
        let full = m.call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
        let mut cache = KvCache::new();
        let mut pieces = vec![m.call_cached(&x.narrow(1, 0, 3)?, &mut cache)?];
        for i in 3..7 {
            pieces.push(m.call_cached(&x.narrow(1, i, 1)?, &mut cache)?);
        }
        let got = Tensor::concat(&pieces.iter().collect::<Vec<_>>(), 1)?;
        assert_close(&format!("window {w} decoded"), &got, &full.to_vec_f64(), 1e-12);
        // the window matters whenever it is shorter than the sequence
        let unwindowed = layer(
            MultiHeadAttention::builder(4, 3)
                .num_key_value_heads(2)
                .use_gate(true)
                .dtype(DType::F64),
            8,
            3.0,
        )?
        .call_with(&x, &x, AttentionArgs::new().use_causal_mask(true))?;
        let differs = unwindowed
            .to_vec_f64()
            .iter()
            .zip(full.to_vec_f64())
            .any(|(a, b)| (a - b).abs() > 1e-9);
        assert_eq!(differs, w < 7, "window {w}");
    }
    Ok(())
}

#[test]
fn masked_windowed_gated_attention_traced_equals_eager() -> Result<()> {
    let pad = pad();
    let m = self_layer(DType::F32, |b| b.sliding_window(2).use_gate(true))?;
    let x = fill(&[2, 5, 6], 0.3, DType::F32);
    let eager = m.call_with(
        &x,
        &x,
        AttentionArgs::new()
            .query_mask(&pad)
            .value_mask(&pad)
            .use_causal_mask(true),
    )?;
    let traced = function(move |x: &Tensor| {
        m.call_with(
            x,
            x,
            AttentionArgs::new()
                .query_mask(&pad)
                .value_mask(&pad)
                .use_causal_mask(true),
        )
    });
    assert_eq!(traced.call(&x)?.to_vec::<f32>()?, eager.to_vec::<f32>()?);
    // a second input of the same shape runs the same graph
    let x2 = fill(&[2, 5, 6], 1.1, DType::F32);
    let m2 = self_layer(DType::F32, |b| b.sliding_window(2).use_gate(true))?;
    let pad2 = self::pad();
    let eager2 = m2.call_with(
        &x2,
        &x2,
        AttentionArgs::new()
            .query_mask(&pad2)
            .value_mask(&pad2)
            .use_causal_mask(true),
    )?;
    assert_eq!(traced.call(&x2)?.to_vec::<f32>()?, eager2.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn masks_of_the_wrong_shape_or_dtype_are_errors_naming_them() -> Result<()> {
    let m = self_layer(DType::F32, |b| b)?;
    let x = fill(&[2, 5, 6], 0.3, DType::F32);
    let short = Tensor::from_vec(vec![true; 8], &[2, 4])?;
    let floats = Tensor::ones(&[2, 5], DType::F32);
    let wide = Tensor::from_vec(vec![true; 15], &[3, 5])?;
    for (what, args) in [
        ("query_mask", AttentionArgs::new().query_mask(&short)),
        ("value_mask", AttentionArgs::new().value_mask(&floats)),
        ("key_mask", AttentionArgs::new().key_mask(&wide)),
    ] {
        let err = m.call_with(&x, &x, args).unwrap_err().to_string();
        assert!(
            err.contains("MultiHeadAttention") && err.contains(what) && err.contains("[2, 5]"),
            "{what}: {err}"
        );
    }
    assert!(MultiHeadAttention::builder(2, 3)
        .sliding_window(0)
        .build(6, &mut Rng::new(0))
        .is_err());
    Ok(())
}
