//! `MultiHeadAttention` projects self-attention's one input with one
//! product by the query, key and value kernels side by side, and a
//! cross-attention's sequence with one product by the key and value
//! kernels: the products a traced call records, and the values and
//! gradients against the projections written out one by one here from
//! the layer's own variables (Keras's three products), eager and traced.

use std::sync::Arc;

use gradtape::nn::{AttentionArgs, Module, MultiHeadAttention};
use gradtape::{function, DType, GradientTape, Result, Rng, Tensor, Variable};

/// `x [b, t, in]` by the kernel `[in, heads, dim]` and bias `[heads, dim]`
/// of a projection, as heads `[b, heads, t, dim]`.
fn heads(x: &Tensor, kernel: &Tensor, bias: &Tensor) -> Result<Tensor> {
    let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let (h, dim) = (kernel.shape()[1], kernel.shape()[2]);
    x.reshape(&[b * t, d])?
        .matmul(&kernel.reshape(&[d, h * dim])?)?
        .add(&bias.reshape(&[h * dim])?)?
        .reshape(&[b, t, h, dim])?
        .permute(&[0, 2, 1, 3])
}

/// The layer's output written out with one product per projection
/// (variables in Keras's order: query, key, value, output; kernel then
/// bias).
fn separate(query: &Tensor, value: &Tensor, w: &[Tensor], key_dim: usize) -> Result<Tensor> {
    let q = heads(query, &w[0], &w[1])?;
    let k = heads(value, &w[2], &w[3])?;
    let v = heads(value, &w[4], &w[5])?;
    let s = q
        .matmul(&k.permute(&[0, 1, 3, 2])?)?
        .div_scalar((key_dim as f64).sqrt())?;
    let o = s.softmax(-1)?.matmul(&v)?.permute(&[0, 2, 1, 3])?;
    let (b, t, h, dv) = (o.shape()[0], o.shape()[1], o.shape()[2], o.shape()[3]);
    let out = w[6].shape()[2];
    o.reshape(&[b * t, h * dv])?
        .matmul(&w[6].reshape(&[h * dv, out])?)?
        .add(&w[7])?
        .reshape(&[b, t, out])
}

fn close(what: &str, got: &Tensor, want: &Tensor) -> Result<()> {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (g, w) = (got.to_vec::<f64>()?, want.to_vec::<f64>()?);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{what}[{i}]: {a} vs {b}");
    }
    Ok(())
}

/// The output and every variable's gradient of `Σ y·r` (fixed weights
/// `r`), for the layer and for the projections written out.
fn check(mha: &MultiHeadAttention, query: &Tensor, value: &Tensor, what: &str) -> Result<()> {
    let vars: Vec<Variable> = mha.variables();
    let r = Rng::new(9).normal(
        &[query.shape()[0], query.shape()[1], query.shape()[2]],
        0.0,
        1.0,
        DType::F64,
    )?;
    let run = |layer: bool| -> Result<(Tensor, Vec<Option<Tensor>>)> {
        let tape = GradientTape::new();
        let (y, loss) = tape.record(|| {
            let y = if layer {
                mha.call_with(query, value, AttentionArgs::new())?
            } else {
                let w: Vec<Tensor> = vars.iter().map(|v| v.read()).collect();
                separate(query, value, &w, mha.key_dim())?
            };
            let loss = y.mul(&r)?.sum_all()?;
            Ok::<_, gradtape::Error>((y, loss))
        })?;
        Ok((y, tape.gradient(&loss, &vars)?))
    };
    let ((y, g), (y0, g0)) = (run(true)?, run(false)?);
    close(&format!("{what}: output"), &y, &y0)?;
    for (v, (a, b)) in vars.iter().zip(g.iter().zip(&g0)) {
        let (a, b) = (a.as_ref().expect("a gradient"), b.as_ref().expect("a gradient"));
        close(&format!("{what}: d/d {}", v.name()), a, b)?;
    }
    Ok(())
}

#[test]
fn self_and_cross_attention_project_with_joined_products() -> Result<()> {
    let mut rng = Rng::new(4);
    // self-attention: 3 heads of 4 over 12 features, value_dim 5
    let mha = Arc::new(
        MultiHeadAttention::builder(3, 4)
            .value_dim(5)
            .dtype(DType::F64)
            .build(12, &mut rng)?,
    );
    let x = rng.normal(&[2, 6, 12], 0.0, 1.0, DType::F64)?;
    check(&mha, &x, &x, "self-attention")?;
    // one product for the query, key and value heads, one for the output
    let layer = mha.clone();
    let f = function(move |x: &Tensor| layer.call_with(x, x, AttentionArgs::new()));
    assert_eq!(
        f.concrete(&x)?.graph().count("MatMul"),
        2,
        "{}",
        f.concrete(&x)?.graph()
    );
    // the traced call gives the eager values
    close(
        "self-attention traced",
        &f.call(&x)?,
        &mha.call_with(&x, &x, AttentionArgs::new())?,
    )?;

    // cross-attention to a sequence of 7 of 9 features: the query's
    // product, one for the key and value heads, the output's
    let cross = Arc::new(
        MultiHeadAttention::builder(2, 4)
            .value_features(9)
            .dtype(DType::F64)
            .build(12, &mut rng)?,
    );
    let s = rng.normal(&[2, 7, 9], 0.0, 1.0, DType::F64)?;
    check(&cross, &x, &s, "cross-attention")?;
    let layer = cross.clone();
    let f = function(move |(x, s): &(Tensor, Tensor)| layer.call_with(x, s, AttentionArgs::new()));
    let args = (x.clone(), s.clone());
    assert_eq!(
        f.concrete(&args)?.graph().count("MatMul"),
        3,
        "{}",
        f.concrete(&args)?.graph()
    );
    close(
        "cross-attention traced",
        &f.call(&args)?,
        &cross.call_with(&x, &s, AttentionArgs::new())?,
    )?;
    Ok(())
}
