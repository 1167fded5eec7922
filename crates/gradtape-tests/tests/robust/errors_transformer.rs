//! Bad input to attention and the transformer layers, as an outside
//! checker gives it: each call is an `Err` naming the op (or layer) and
//! the offending shapes or dtypes, never a panic or a value, and the same
//! error eagerly and inside a traced `function` (the checks run when the
//! trace is built, with the placeholders' shapes). The sampling helpers and
//! the cache, which run on the host, eagerly.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use gradtape::nn::{
    sampling, AttentionArgs, Embedding, KvCache, Layer, LayerNorm, MultiHeadAttention, PositionalEmbedding,
};
use gradtape::{function, AttentionDropout, DType, Result, Rng, Tensor};

/// `sin(0.37 i)` of `shape` in `dt`.
fn t(shape: &[usize], dt: DType) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| ((i as f64) * 0.37).sin()).collect::<Vec<f64>>(), shape)
        .unwrap()
        .cast(dt)
        .unwrap()
}

type F = Arc<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;

/// `f` on `args`, eagerly and traced: both errors, alike, naming every
/// one of `names`.
fn refused(what: &str, args: Vec<Tensor>, names: &[&str], f: F) {
    let eager = catch_unwind(AssertUnwindSafe(|| f(&args))).unwrap_or_else(|_| panic!("{what}: eager panicked"));
    let traced = {
        let f = f.clone();
        let func = function(move |a: &Vec<Tensor>| f(a));
        catch_unwind(AssertUnwindSafe(|| func.call(&args))).unwrap_or_else(|_| panic!("{what}: traced panicked"))
    };
    let e = eager
        .err()
        .unwrap_or_else(|| panic!("{what}: accepted eagerly"))
        .to_string();
    let g = traced
        .err()
        .unwrap_or_else(|| panic!("{what}: accepted traced"))
        .to_string();
    assert_eq!(e, g, "{what}: eager and traced errors differ");
    for n in names {
        assert!(e.contains(n), "{what}: {e:?} does not name {n:?}");
    }
}

fn sdpa(mask: bool, causal: bool, scale: Option<f64>) -> F {
    Arc::new(move |a: &[Tensor]| {
        a[0].scaled_dot_product_attention(&a[1], &a[2], if mask { a.get(3) } else { None }, causal, scale)
    })
}

#[test]
fn attention_op_refuses_bad_input_eager_and_traced() {
    const OP: &str = "scaled_dot_product_attention";
    let f = DType::F32;
    let bad: Vec<(&str, Vec<Tensor>, Vec<&str>, F)> = vec![
        (
            "rank 1",
            vec![t(&[4], f), t(&[4], f), t(&[4], f)],
            vec!["[4]"],
            sdpa(false, false, None),
        ),
        (
            "ranks differ",
            vec![t(&[1, 2, 3, 4], f), t(&[2, 3, 4], f), t(&[2, 3, 4], f)],
            vec!["[1, 2, 3, 4]", "[2, 3, 4]"],
            sdpa(false, false, None),
        ),
        (
            "batch differs (no broadcasting)",
            vec![t(&[2, 2, 3, 4], f), t(&[1, 2, 3, 4], f), t(&[1, 2, 3, 4], f)],
            vec!["[2, 2, 3, 4]", "[1, 2, 3, 4]"],
            sdpa(false, false, None),
        ),
        (
            "heads differ",
            vec![t(&[2, 2, 3, 4], f), t(&[2, 3, 3, 4], f), t(&[2, 3, 3, 4], f)],
            vec!["[2, 3, 3, 4]"],
            sdpa(false, false, None),
        ),
        (
            "head_dim differs",
            vec![t(&[2, 2, 3, 4], f), t(&[2, 2, 3, 5], f), t(&[2, 2, 3, 4], f)],
            vec!["[2, 2, 3, 5]"],
            sdpa(false, false, None),
        ),
        (
            "v's time differs from k's",
            vec![t(&[2, 2, 3, 4], f), t(&[2, 2, 3, 4], f), t(&[2, 2, 5, 4], f)],
            vec!["[2, 2, 5, 4]"],
            sdpa(false, false, None),
        ),
        (
            "mask of the wrong shape",
            vec![
                t(&[2, 2, 3, 4], f),
                t(&[2, 2, 5, 4], f),
                t(&[2, 2, 5, 4], f),
                t(&[2, 2, 3, 4], f),
            ],
            vec!["[2, 2, 3, 4]", "[2, 2, 3, 5]"],
            sdpa(true, false, None),
        ),
        (
            "mask of higher rank",
            vec![
                t(&[2, 3, 4], f),
                t(&[2, 5, 4], f),
                t(&[2, 5, 4], f),
                t(&[1, 2, 3, 5], f),
            ],
            vec!["[1, 2, 3, 5]"],
            sdpa(true, false, None),
        ),
        (
            "integer mask",
            vec![
                t(&[2, 3, 4], f),
                t(&[2, 5, 4], f),
                t(&[2, 5, 4], f),
                t(&[3, 5], DType::I64),
            ],
            vec!["i64"],
            sdpa(true, false, None),
        ),
        (
            "f64 mask for f32 inputs",
            vec![
                t(&[2, 3, 4], f),
                t(&[2, 5, 4], f),
                t(&[2, 5, 4], f),
                t(&[3, 5], DType::F64),
            ],
            vec!["f64"],
            sdpa(true, false, None),
        ),
        (
            "f32 mask for f16 inputs",
            vec![
                t(&[2, 3, 4], DType::F16),
                t(&[2, 5, 4], DType::F16),
                t(&[2, 5, 4], DType::F16),
                t(&[3, 5], f),
            ],
            vec!["f16", "f32"],
            sdpa(true, false, None),
        ),
        (
            "integer inputs",
            vec![
                t(&[2, 3, 4], DType::I64),
                t(&[2, 5, 4], DType::I64),
                t(&[2, 5, 4], DType::I64),
            ],
            vec!["i64"],
            sdpa(false, true, None),
        ),
        (
            "mixed float dtypes",
            vec![t(&[2, 3, 4], f), t(&[2, 5, 4], DType::F64), t(&[2, 5, 4], f)],
            vec!["f32", "f64"],
            sdpa(false, false, None),
        ),
        (
            "scale NaN",
            vec![t(&[2, 3, 4], f), t(&[2, 5, 4], f), t(&[2, 5, 4], f)],
            vec!["scale", "NaN"],
            sdpa(false, false, Some(f64::NAN)),
        ),
        (
            "scale infinite",
            vec![t(&[2, 3, 4], f), t(&[2, 5, 4], f), t(&[2, 5, 4], f)],
            vec!["scale", "inf"],
            sdpa(false, true, Some(f64::INFINITY)),
        ),
    ];
    for (what, args, names, op) in bad {
        let mut names = names;
        names.push(OP);
        refused(what, args, &names, op);
    }
    for rate in [1.0, -0.1, f64::NAN, 1.5] {
        refused(
            &format!("dropout {rate}"),
            vec![t(&[1, 2, 3, 4], f), t(&[1, 2, 5, 4], f), t(&[1, 2, 5, 4], f)],
            &[OP, "dropout", &format!("{rate}")],
            Arc::new(move |a: &[Tensor]| {
                a[0].scaled_dot_product_attention_dropout(
                    &a[1],
                    &a[2],
                    None,
                    false,
                    None,
                    AttentionDropout { rate, seed: 3 },
                )
            }),
        );
    }
}

#[test]
fn transformer_layers_refuse_bad_input_eager_and_traced() -> Result<()> {
    let f = DType::F32;
    let mut rng = Rng::new(0);
    // builders
    for (heads, key_dim, rate, features, word) in [
        (0, 4, 0.0, 8, "num_heads"),
        (2, 0, 0.0, 8, "key_dim"),
        (2, 4, 1.0, 8, "dropout"),
        (2, 4, f64::NAN, 8, "dropout"),
        (2, 4, 0.0, 0, "features"),
    ] {
        let e = MultiHeadAttention::builder(heads, key_dim)
            .dropout(rate)
            .build(features, &mut rng)
            .err()
            .unwrap_or_else(|| panic!("{heads} heads of {key_dim}, dropout {rate}, {features} features: built"))
            .to_string();
        assert!(e.contains("MultiHeadAttention") && e.contains(word), "{e}");
    }
    let mha = Arc::new(MultiHeadAttention::builder(2, 4).build(8, &mut rng)?);
    let call = |causal: bool| -> F {
        let mha = mha.clone();
        Arc::new(move |a: &[Tensor]| {
            let mut args = AttentionArgs::new().use_causal_mask(causal);
            if let Some(m) = a.get(2) {
                args = args.attention_mask(m);
            }
            mha.call_with(&a[0], &a[1], args)
        })
    };
    let bool_of = |shape: &[usize]| t(shape, f).gt_scalar(0.0).unwrap();
    const MHA: &str = "MultiHeadAttention";
    refused(
        "query width 7",
        vec![t(&[2, 3, 7], f), t(&[2, 3, 8], f)],
        &[MHA, "[2, 3, 7]"],
        call(false),
    );
    refused(
        "rank-2 query",
        vec![t(&[3, 8], f), t(&[3, 8], f)],
        &[MHA, "[3, 8]"],
        call(false),
    );
    refused(
        "batch of query and value differ",
        vec![t(&[2, 3, 8], f), t(&[3, 3, 8], f)],
        &[MHA, "[2, 3, 8]", "[3, 3, 8]"],
        call(true),
    );
    refused(
        "f64 input to an f32 layer",
        vec![t(&[2, 3, 8], DType::F64), t(&[2, 3, 8], DType::F64)],
        &[MHA, "f64", "f32"],
        call(false),
    );
    refused(
        "mask [batch, t_q, t_q] for t_k keys",
        vec![t(&[2, 3, 8], f), t(&[2, 4, 8], f), bool_of(&[2, 3, 3])],
        &[MHA, "[2, 3, 3]", "[2, 3, 4]"],
        call(false),
    );
    refused(
        "mask [t_k]",
        vec![t(&[2, 3, 8], f), t(&[2, 4, 8], f), bool_of(&[4])],
        &[MHA, "[4]"],
        call(false),
    );
    refused(
        "float mask (ambiguous)",
        vec![t(&[2, 3, 8], f), t(&[2, 4, 8], f), t(&[2, 3, 4], f)],
        &[MHA, "f32 [2, 3, 4]"],
        call(false),
    );
    // positions, embeddings, norms
    let pe = Arc::new(PositionalEmbedding::builder(4, 8).build(&mut rng)?);
    let pe2 = pe.clone();
    refused(
        "5 positions of a table of 4",
        vec![t(&[1, 5, 8], f)],
        &["PositionalEmbedding", "5", "4 positions"],
        Arc::new(move |a: &[Tensor]| pe2.call(&a[0])),
    );
    refused(
        "positions of width 7",
        vec![t(&[1, 3, 7], f)],
        &["PositionalEmbedding", "[1, 3, 7]"],
        Arc::new(move |a: &[Tensor]| pe.call(&a[0])),
    );
    let emb = Arc::new(Embedding::new(5, 3, &mut rng)?);
    for (what, ids, names) in [
        (
            "id 5 of 5",
            Tensor::from_vec(vec![1i64, 5], &[1, 2])?,
            vec!["embedding_lookup", "5", "[5, 3]"],
        ),
        (
            "id -1",
            Tensor::from_vec(vec![1i64, -1], &[1, 2])?,
            vec!["embedding_lookup", "-1", "[5, 3]"],
        ),
        (
            "i32 id -1",
            Tensor::from_vec(vec![1i32, -1], &[1, 2])?,
            vec!["embedding_lookup", "-1"],
        ),
        (
            "id i64::MIN",
            Tensor::from_vec(vec![i64::MIN, 0], &[1, 2])?,
            vec!["embedding_lookup", "[5, 3]"],
        ),
        (
            "float ids",
            Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?,
            vec!["Embedding", "f32"],
        ),
        (
            "bool ids",
            Tensor::from_vec(vec![true, false], &[1, 2])?,
            vec!["Embedding", "bool"],
        ),
    ] {
        let emb = emb.clone();
        refused(what, vec![ids], &names, Arc::new(move |a: &[Tensor]| emb.call(&a[0])));
    }
    let ln = Arc::new(LayerNorm::new(8, f)?);
    let ln2 = ln.clone();
    refused(
        "LayerNorm width 7",
        vec![t(&[2, 7], f)],
        &["LayerNorm", "[2, 7]"],
        Arc::new(move |a: &[Tensor]| ln2.call(&a[0])),
    );
    refused(
        "LayerNorm f64 input",
        vec![t(&[2, 8], DType::F64)],
        &["LayerNorm", "f64", "[2, 8]"],
        Arc::new(move |a: &[Tensor]| ln.call(&a[0])),
    );
    for (axes, word) in [(vec![5isize], "5"), (vec![-3], "-3"), (vec![1, 1], "repeated")] {
        let a2 = axes.clone();
        refused(
            &format!("layer_normalization over axes {axes:?}"),
            vec![t(&[2, 8], f)],
            &["layer_normalization", word, "[2, 8]"],
            Arc::new(move |a: &[Tensor]| a[0].layer_normalization(&a2, None, None, 1e-5)),
        );
    }
    for eps in [-1.0, f64::NAN] {
        let e = LayerNorm::builder(8)
            .epsilon(eps)
            .build()
            .err()
            .expect("a bad epsilon")
            .to_string();
        assert!(e.contains("LayerNorm") && e.contains("epsilon"), "{e}");
    }
    Ok(())
}

#[test]
fn sampling_and_caches_refuse_misuse() -> Result<()> {
    let f = DType::F32;
    let mut rng = Rng::new(0);
    let logits = t(&[2, 5], f);
    for (temp, k, word) in [
        (0.0, None, "temperature"),
        (-1.0, None, "temperature"),
        (f64::NAN, None, "temperature"),
        (f64::INFINITY, None, "temperature"),
        (1.0, Some(0), "top_k"),
    ] {
        let e = sampling::sample_next(&logits, temp, k, &mut rng)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("sample_next") && e.contains(word), "t {temp} k {k:?}: {e}");
    }
    // top-k past the vocabulary is the whole row (as Hugging Face's
    // `TopKLogitsWarper` clamps it): a draw in range
    let ids = sampling::sample_next(&logits, 1.0, Some(9), &mut rng)?.to_vec::<i64>()?;
    assert!(ids.iter().all(|&i| (0..5).contains(&i)), "{ids:?}");
    for (shape, dt) in [(vec![2, 0], f), (vec![5], f), (vec![2, 5], DType::I64)] {
        let e = sampling::categorical(&t(&shape, dt), 3, &mut rng)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("categorical") && e.contains(&format!("{shape:?}")), "{e}");
    }
    // caches: overflow, another batch, another layer's cache, another dtype
    let mha = MultiHeadAttention::builder(2, 4).build(8, &mut rng)?;
    let mut cache = mha.kv_cache(1, 3)?;
    mha.call_cached(&t(&[1, 2, 8], f), &mut cache)?;
    let e = mha
        .call_cached(&t(&[1, 2, 8], f), &mut cache)
        .expect_err("overflow")
        .to_string();
    assert!(
        e.contains("MultiHeadAttention") && e.contains("capacity") && e.contains("[1, 2, 3, 4]"),
        "{e}"
    );
    assert_eq!(cache.len(), 2, "a refused call leaves the cache as it was");
    let e = mha
        .call_cached(&t(&[2, 1, 8], f), &mut cache)
        .expect_err("another batch")
        .to_string();
    assert!(e.contains("batch of 2") && e.contains("[1, 2, 3, 4]"), "{e}");
    let mut growing = KvCache::new();
    mha.call_cached(&t(&[1, 2, 8], f), &mut growing)?;
    let other = MultiHeadAttention::builder(4, 2).build(8, &mut rng)?;
    let e = other
        .call_cached(&t(&[1, 1, 8], f), &mut growing)
        .expect_err("another layer's cache")
        .to_string();
    assert!(e.contains("[1, 2, 2, 4]") && e.contains("4 key/value heads"), "{e}");
    let wide = MultiHeadAttention::builder(2, 4).dtype(DType::F64).build(8, &mut rng)?;
    let mut narrow = mha.kv_cache(1, 3)?;
    let e = wide
        .call_cached(&t(&[1, 1, 8], DType::F64), &mut narrow)
        .expect_err("an f32 cache")
        .to_string();
    assert!(e.contains("f32 [1, 2, 3, 4]") && e.contains("f64"), "{e}");
    let e = mha.kv_cache(0, 3).expect_err("batch 0").to_string();
    assert!(e.contains("kv_cache") && e.contains("0 and 3"), "{e}");
    Ok(())
}
