//! Grouped-query attention on views (`ops::nn::gqa`): the fused op reads
//! each key/value head for its group of query heads, no repeated copy of
//! `k` and `v`. Its values and gradients against the repeated form it
//! replaced (`k.repeat(group, -3)`, then the attention op: written out
//! below), bit for bit, with causal masks, masks per head and shared, and
//! dropout; a Llama-style layer traced against eager, and its traced
//! graph without the repeat's copy, on two shapes.

use crate::half_util::f64_bits;
use gradtape::nn::{AttentionArgs, MultiHeadAttention};
use std::sync::Arc;

use gradtape::{function, AttentionDropout, DType, GradientTape, Result, Rng, Tensor};

type Attend<'a> = dyn Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor> + 'a;

/// `f(q, k, v)` and the gradients of `Σ f · w` with respect to `q`, `k`, `v`.
fn value_and_grads(f: &Attend<'_>, q: &Tensor, k: &Tensor, v: &Tensor, w: &Tensor) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let mut y = None;
    let loss = tape.record(|| {
        for t in [q, k, v] {
            tape.watch(t);
        }
        let o = f(q, k, v)?;
        y = Some(o.clone());
        o.mul(w)?.sum_all()
    })?;
    let mut out = vec![y.expect("recorded")];
    for g in tape.gradient(&loss, &[q.clone(), k.clone(), v.clone()][..])? {
        out.push(g.expect("a gradient"));
    }
    Ok(out)
}

#[test]
fn grouped_attention_keeps_the_repeated_bits() -> Result<()> {
    let mut rng = Rng::new(11);
    for dtype in [DType::F32, DType::F64] {
        // 6 query heads in 2 groups of 3 (and 1 group of 6: one k/v head)
        for hkv in [2, 1] {
            let q = rng.normal(&[2, 6, 5, 4], 0.0, 1.0, dtype)?;
            let k = rng.normal(&[2, hkv, 7, 4], 0.0, 1.0, dtype)?;
            let v = rng.normal(&[2, hkv, 7, 3], 0.0, 1.0, dtype)?;
            let w = rng.normal(&[2, 6, 5, 3], 0.0, 1.0, dtype)?;
            let g = 6 / hkv;
            let per_head = rng
                .normal(&[1, 6, 5, 7], 0.0, 1.0, DType::F32)?
                .gt(&Tensor::scalar(-0.8f32))?;
            let shared = rng.normal(&[5, 7], 0.0, 1.0, dtype)?;
            let masks: [(Option<&Tensor>, bool, Option<AttentionDropout>); 4] = [
                (None, true, None),
                (Some(&per_head), false, None),
                (Some(&shared), true, None),
                (None, false, Some(AttentionDropout { rate: 0.3, seed: 5 })),
            ];
            for (i, (mask, causal, drop)) in masks.into_iter().enumerate() {
                let grouped = move |q: &Tensor, k: &Tensor, v: &Tensor| {
                    q.grouped_query_attention(k, v, mask, causal, Some(0.4), drop)
                };
                let repeated = move |q: &Tensor, k: &Tensor, v: &Tensor| {
                    let (k, v) = (k.repeat(g, -3)?, v.repeat(g, -3)?);
                    match drop {
                        Some(d) => q.scaled_dot_product_attention_dropout(&k, &v, mask, causal, Some(0.4), d),
                        None => q.scaled_dot_product_attention(&k, &v, mask, causal, Some(0.4)),
                    }
                };
                let got = value_and_grads(&grouped, &q, &k, &v, &w)?;
                let want = value_and_grads(&repeated, &q, &k, &v, &w)?;
                for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(a.shape(), b.shape());
                    assert_eq!(
                        f64_bits(a),
                        f64_bits(b),
                        "{dtype} hkv {hkv} case {i}: part {j} (output, dq, dk, dv)"
                    );
                }
            }
        }
    }
    Ok(())
}

/// A Llama-style self-attention layer (4 query heads, 2 key/value heads,
/// causal), traced gradient step against eager, on two shapes; in the
/// traced graph one `Attention` node of rank 5 (the groups) reads the
/// keys and values broadcast to the groups, which nothing else reads (the
/// repeat made them a copy by a `Reshape` to the query heads).
#[test]
fn grouped_attention_layer_traced_without_copies() -> Result<()> {
    let mut rng = Rng::new(3);
    let mha = Arc::new(
        MultiHeadAttention::builder(4, 8)
            .num_key_value_heads(2)
            .dtype(DType::F32)
            .build(16, &mut rng)?,
    );
    let step = |mha: &MultiHeadAttention, x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::persistent();
        let loss = tape.record(|| {
            tape.watch(x);
            let y = mha.call_with(x, x, AttentionArgs::new().use_causal_mask(true))?;
            y.square()?.sum_all()
        })?;
        let mut out = vec![tape.gradient(&loss, x)?.expect("dx")];
        for g in tape.gradient(&loss, &mha_vars(mha)[..])? {
            out.push(g.expect("a weight's gradient"));
        }
        Ok(out)
    };
    for shape in [[2usize, 6, 16], [3, 9, 16]] {
        let x = rng.normal(&shape, 0.0, 1.0, DType::F32)?;
        let eager = step(&mha, &x)?;
        let layer = mha.clone();
        let f = function(move |x: &Tensor| step(&layer, x));
        let traced = f.call(&x)?;
        assert_eq!(traced.len(), eager.len());
        for (i, (a, b)) in traced.iter().zip(&eager).enumerate() {
            let (a, b) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
            let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert!(
                a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-5 * scale),
                "{shape:?}: traced gradient {i}"
            );
        }
        let text = f.graph(&x)?.to_string();
        let (b, t) = (shape[0], shape[1]);
        // the attention sees [b, 2 groups, 2 heads, t, _]
        assert_eq!(f.graph(&x)?.count("Attention"), 1, "{text}");
        assert!(text.contains(&format!("[{b}, 2, 2, {t}, 9]")), "{text}");
        // the keys and values broadcast to the groups go to the attention
        // ops only: no Reshape of them (the repeat's copy to [b, 4, t, 8])
        let spread: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("= BroadcastTo") && l.contains(&format!("[{b}, 2, 2, {t}, 8]")))
            .filter_map(|l| l.trim().split(':').next())
            .collect();
        assert_eq!(spread.len(), 2, "{text}");
        for l in text.lines().filter(|l| !l.contains("= Attention")) {
            let args = l.rsplit_once('(').map_or("", |(_, a)| a);
            let reads = |id: &str| args.split([',', ')', ' ']).any(|a| a == id);
            assert!(!spread.iter().any(|id| reads(id)), "{l}\n{text}");
        }
    }
    Ok(())
}

fn mha_vars(mha: &MultiHeadAttention) -> Vec<gradtape::Variable> {
    use gradtape::nn::Module;
    mha.variables()
}
