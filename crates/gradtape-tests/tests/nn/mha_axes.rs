//! `MultiHeadAttention`'s `attention_axes` and per-head attention masks
//! against Keras 3 on TensorFlow 2.21 in float64
//! (`tests/reference/mha_axes.py` printed `tests/data/mha_axes.txt`): the
//! outputs, the scores (`call_with_scores`, Keras's
//! `return_attention_scores=True`, in Keras's layout `[batch, other...,
//! heads, attention_q..., attention_k...]`) and the gradients of `Σ y ·
//! fill` with respect to the query, the value and every weight, eagerly
//! and as a traced function (the mask one of its inputs):
//!
//! - attention over both axes of images `[2, 3, 4, 8]` (`(1, 2)`);
//! - over axis 2 only (axis 1 batch-like) under a per-head mask `[2, 1, 2,
//!   4, 4]`;
//! - 3-D inputs under a per-head mask `[2, 2, 5, 5]`, and under `[1, 2, 5,
//!   5]` with the causal mask;
//! - cross-attention between images of other sizes (12 queries, 6 keys)
//!   under a mask without the heads' axis `[2, 3, 4, 2, 3]`.
//!
//! Then the errors: attention axes out of range (the batch, the features,
//! past the rank), repeated or empty, masks that do not broadcast, and the
//! padding and causal masks with other attention axes.

use std::sync::Arc;

use gradtape::nn::{AttentionArgs, Module, MultiHeadAttention};
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor};

use super::new_user_util::{fill, set_weights, Check};

const DATA: &str = include_str!("../data/mha_axes.txt");

/// The script's masks `[b, h, tq, tk]`: key `j` of query `i` kept where
/// `(b + 2h + i + 3j) % 4 != 1` or `j == 0`.
fn keep(b: usize, h: usize, tq: usize, tk: usize) -> Result<Tensor> {
    let mut v = Vec::new();
    for bb in 0..b {
        for hh in 0..h {
            for i in 0..tq {
                for j in 0..tk {
                    v.push((bb + 2 * hh + i + 3 * j) % 4 != 1 || j == 0);
                }
            }
        }
    }
    Tensor::from_vec(v, &[b, h, tq, tk])
}

/// The outputs of one case: `y` (by `call_with`), then by
/// `call_with_scores` `y` again and the scores, then the gradients of `Σ y
/// · fill(y, 9)` w.r.t. `q`, `v` and the weights.
fn outputs(
    mha: &MultiHeadAttention,
    q: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
) -> Result<Vec<Tensor>> {
    let args = AttentionArgs {
        attention_mask: mask,
        use_causal_mask: causal,
        ..AttentionArgs::new()
    };
    let plain = mha.call_with(q, v, args)?;
    let vars = mha.variables();
    let tape = GradientTape::persistent();
    let (y, s, loss) = tape.record(|| {
        tape.watch(q);
        tape.watch(v);
        let (y, s) = mha.call_with_scores(q, v, args)?;
        let loss = y.mul(&fill(y.shape(), 9.0, 1.0))?.sum_all()?;
        Ok((y, s, loss))
    })?;
    let mut out = vec![plain, y, s];
    let g = tape.gradient(&loss, &[q, v])?;
    out.extend(g.into_iter().map(|g| g.expect("connected")));
    let gw = tape.gradient(&loss, &vars)?;
    out.extend(gw.into_iter().map(|g| g.expect("connected")));
    Ok(out)
}

/// The key bias's gradient: zero (the softmax does not see a shift of
/// every score) but for rounding, in TensorFlow's results too.
const KEY_BIAS: usize = 5 + 3;

/// `outputs` against the script's `{name}_*`, the key bias's gradient
/// against zero.
fn compare(check: &mut Check, what: &str, names: &[String], got: &[Tensor]) {
    for (j, (n, g)) in names.iter().zip(got).enumerate() {
        if j == KEY_BIAS {
            let worst = g.to_vec_f64().iter().fold(0f64, |m, x| m.max(x.abs()));
            assert!(worst < 1e-13, "{what} {n}: {worst:e}");
        } else {
            check.one(what, n, Some(g));
        }
    }
}

/// One case eagerly and traced against the script's `{name}_*`.
fn case(
    check: &mut Check,
    name: &str,
    mha: MultiHeadAttention,
    q: Tensor,
    v: Tensor,
    mask: Option<Tensor>,
    causal: bool,
) -> Result<()> {
    let mha = Arc::new(mha);
    let names: Vec<String> = ["y", "y", "scores", "dq", "dv"]
        .iter()
        .map(|n| format!("{name}_{n}"))
        .chain((0..mha.variables().len()).map(|j| format!("{name}_grad{j}")))
        .collect();
    let eager = outputs(&mha, &q, &v, mask.as_ref(), causal)?;
    compare(check, &format!("{name} eager"), &names, &eager);
    let traced = {
        let mha = mha.clone();
        function(move |(q, v, m): &(Tensor, Tensor, Option<Tensor>)| outputs(&mha, q, v, m.as_ref(), causal))
    };
    let got = traced.call(&(q, v, mask))?;
    compare(check, &format!("{name} traced"), &names, &got);
    Ok(())
}

/// A float64 layer of 2 heads of 4 whose weights are the script's.
fn layer(b: gradtape::nn::MultiHeadAttentionBuilder, features: usize, k0: f64) -> Result<MultiHeadAttention> {
    let mha = b.dtype(DType::F64).build(features, &mut Rng::new(0))?;
    set_weights(&mha.variables(), k0);
    Ok(mha)
}

#[test]
fn attention_axes_and_per_head_masks_match_keras_eager_and_traced() -> Result<()> {
    let mut check = Check::with(DATA, 1e-6);
    let mha = |k0: f64| layer(MultiHeadAttention::builder(2, 4), 8, k0);
    let img = || fill(&[2, 3, 4, 8], 1.0, 1.0);
    let axes = |a: &[isize], k0: f64| layer(MultiHeadAttention::builder(2, 4).attention_axes(a), 8, k0);
    // (the query and the value are distinct tensors, as in the script)
    case(&mut check, "img12", axes(&[1, 2], 100.0)?, img(), img(), None, false)?;
    let m2 = keep(2, 2, 4, 4)?.reshape(&[2, 1, 2, 4, 4])?;
    case(&mut check, "img2", axes(&[2], 120.0)?, img(), img(), Some(m2), false)?;
    let seq = || fill(&[2, 5, 8], 2.0, 1.0);
    case(
        &mut check,
        "head4",
        mha(140.0)?,
        seq(),
        seq(),
        Some(keep(2, 2, 5, 5)?),
        false,
    )?;
    case(
        &mut check,
        "head4c",
        mha(160.0)?,
        seq(),
        seq(),
        Some(keep(1, 2, 5, 5)?),
        true,
    )?;
    let cross = layer(
        MultiHeadAttention::builder(2, 4)
            .value_dim(2)
            .output_shape(5)
            .value_features(6)
            .attention_axes(&[1, 2]),
        8,
        180.0,
    )?;
    let m5 = keep(2, 1, 12, 6)?.reshape(&[2, 3, 4, 2, 3])?;
    case(
        &mut check,
        "cross12",
        cross,
        img(),
        fill(&[2, 2, 3, 6], 3.0, 1.0),
        Some(m5),
        false,
    )?;
    // 5 cases, eager and traced, of 2 y, the scores and the gradients
    check.finish("attention_axes and per-head masks", 2 * 5 * 1000);
    Ok(())
}

#[test]
fn bad_attention_axes_and_masks_are_errors_naming_the_layer_and_shapes() -> Result<()> {
    let rng = &mut Rng::new(0);
    let img = fill(&[2, 3, 4, 8], 1.0, 1.0);
    let call = |axes: &[isize], q: &Tensor, args: AttentionArgs<'_>| -> String {
        let mha = MultiHeadAttention::builder(2, 4)
            .attention_axes(axes)
            .dtype(DType::F64)
            .build(8, &mut Rng::new(0))
            .unwrap();
        mha.call_with(q, q, args).expect_err("refused").to_string()
    };
    // the batch, the features (3 or -1), past the rank, a repeat
    for axes in [&[0isize][..], &[3], &[-1], &[4], &[1, 1], &[2, -2], &[-4]] {
        let e = call(axes, &img, AttentionArgs::new());
        assert!(
            e.contains("MultiHeadAttention") && e.contains("attention_axes") && e.contains("[2, 3, 4, 8]"),
            "{axes:?}: {e}"
        );
    }
    assert!(MultiHeadAttention::builder(2, 4)
        .attention_axes(&[])
        .build(8, rng)
        .is_err());
    // a mask that does not broadcast to the scores [2, 2, 3, 4, 3, 4]
    let bad = Tensor::from_vec(vec![true; 96], &[2, 3, 4, 4, 1])?;
    let e = call(&[1, 2], &img, AttentionArgs::new().attention_mask(&bad));
    assert!(
        e.contains("MultiHeadAttention") && e.contains("[2, 3, 4, 4, 1]") && e.contains("[2, 2, 3, 4, 3, 4]"),
        "{e}"
    );
    // the padding and causal masks read axis 1 of [batch, time, features]
    let pad = Tensor::from_vec(vec![true; 24], &[2, 12])?;
    for args in [
        AttentionArgs::new().use_causal_mask(true),
        AttentionArgs::new().value_mask(&pad),
    ] {
        let e = call(&[1, 2], &img, args);
        assert!(e.contains("MultiHeadAttention") && e.contains("attention_mask"), "{e}");
    }
    // inputs of different ranks
    let mha = MultiHeadAttention::builder(2, 4).dtype(DType::F64).build(8, rng)?;
    let e = mha
        .call_with(&img, &fill(&[2, 12, 8], 0.0, 1.0), AttentionArgs::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("MultiHeadAttention") && e.contains("[2, 12, 8]"), "{e}");
    // per-head masks on [batch, time, features]: 3 heads for a layer of 2,
    // a rank of 5, a float mask
    let x = fill(&[2, 5, 8], 2.0, 1.0);
    for m in [
        Tensor::from_vec(vec![true; 150], &[2, 3, 5, 5])?,
        Tensor::from_vec(vec![true; 100], &[2, 1, 2, 5, 5])?,
        Tensor::zeros(&[2, 2, 5, 5], DType::F64),
    ] {
        let e = mha
            .call_with(&x, &x, AttentionArgs::new().attention_mask(&m))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MultiHeadAttention") && e.contains(&format!("{:?}", m.shape())) && e.contains("num_heads"),
            "{e}"
        );
    }
    // a layer with other attention axes does not decode
    let e = MultiHeadAttention::builder(2, 4)
        .attention_axes(&[2])
        .dtype(DType::F64)
        .build(8, rng)?
        .call_cached(&x, &mut gradtape::nn::KvCache::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("attention_axes"), "{e}");
    Ok(())
}
