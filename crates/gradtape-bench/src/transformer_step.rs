//! transformer_step: one SGD step of a 2-block GPT (WORKLOADS.md): tokens
//! [8, 128], width 256, 4 causal heads of 64, a GELU MLP of 1024, final
//! LayerNorm, logits over 256 tokens, mean sparse softmax cross-entropy;
//! gradient w.r.t. the 25 variables. Written with the library's ops as a
//! user writes it: the head split by hand, as the peers' implementations
//! do, LayerNorm by the library's `layer_normalization` (PyTorch's peer
//! calls `F.layer_norm`) and the attention of the heads by its fused
//! `scaled_dot_product_attention` (the peers write both by hand:
//! `GRADTAPE_BENCH_BY_HAND=1` does too, LayerNorm from the mean and
//! variance, attention with three products, the mask and a softmax).
//!
//! `gpt_small` (gradtape's own, NOT one of WORKLOADS.md's): the same model
//! at the shape of issue 28's char-level GPT (tokens [16, 64], width 128,
//! 4 heads of 32, MLP 512, 65 tokens), a second shape on which traced must
//! not lose to eager.

use gradtape::{GradientTape, Result, Tensor, Variable};

use crate::traced::{measure, Mode, Timing};
use crate::{init, Report};

/// The sizes of one GPT.
#[derive(Clone, Copy)]
struct Gpt {
    /// batch
    b: usize,
    /// context
    t: usize,
    /// vocabulary
    v: usize,
    /// width
    d: usize,
    /// heads
    h: usize,
    /// MLP width
    mlp: usize,
}

/// The blocks of every GPT here.
const L: usize = 2;

/// WORKLOADS.md's transformer_step.
const TRANSFORMER_STEP: Gpt = Gpt {
    b: 8,
    t: 128,
    v: 256,
    d: 256,
    h: 4,
    mlp: 1024,
};

/// Issue 28's char-level GPT.
const GPT_SMALL: Gpt = Gpt {
    b: 16,
    t: 64,
    v: 65,
    d: 128,
    h: 4,
    mlp: 512,
};

/// `(x - mean) / sqrt(var + 1e-5) * gain + bias` over the last axis (the
/// biased variance): the library's `layer_normalization` (one fused op,
/// as PyTorch's peer calls `F.layer_norm`), or written by hand as the JAX
/// and TensorFlow peers do, with `GRADTAPE_BENCH_BY_HAND=1`.
fn layer_norm(x: &Tensor, gain: &Tensor, bias: &Tensor) -> Result<Tensor> {
    if !by_hand() {
        return x.layer_normalization(&[-1], Some(gain), Some(bias), 1e-5);
    }
    let mean = x.mean(&[-1], true)?;
    let d = x.sub(&mean)?;
    let var = d.square()?.mean(&[-1], true)?;
    d.mul(&var.add_scalar(1e-5)?.rsqrt()?)?.mul(gain)?.add(bias)
}

/// Whether the heads' attention is written by hand
/// (`GRADTAPE_BENCH_BY_HAND=1`) rather than by the fused op.
fn by_hand() -> bool {
    static BY_HAND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BY_HAND.get_or_init(|| std::env::var("GRADTAPE_BENCH_BY_HAND").is_ok_and(|v| v == "1"))
}

/// `[B*T, D]` to `[B, H, T, HD]`.
fn heads(c: Gpt, t: &Tensor) -> Result<Tensor> {
    t.reshape(&[c.b, c.t, c.h, c.d / c.h])?.permute(&[0, 2, 1, 3])
}

/// The variables in the peers' order: per block `Wqkv, Wo, ln1 gain, ln1
/// bias, ln2 gain, ln2 bias, W1, b1, W2, b2`, then `E, P, lnf gain, lnf
/// bias, Wout` (so the first gradient is block 0's `dWqkv`).
fn variables(c: Gpt) -> Vec<Variable> {
    let Gpt { t, v, d, mlp, .. } = c;
    let ones = || Variable::new(crate::on_device(Tensor::ones(&[d], gradtape::DType::F32)));
    let zeros = |n| Variable::new(crate::zeros(&[n]));
    let mut p = Vec::new();
    for blk in 0..L {
        let k0 = 10.0 + 10.0 * blk as f64;
        p.push(Variable::new(init(&[d, 3 * d], k0 + 1.0, 1.0 / 16.0)));
        p.push(Variable::new(init(&[d, d], k0 + 2.0, 1.0 / 16.0)));
        p.extend([ones(), zeros(d), ones(), zeros(d)]);
        p.push(Variable::new(init(&[d, mlp], k0 + 3.0, 1.0 / 16.0)));
        p.push(zeros(mlp));
        p.push(Variable::new(init(&[mlp, d], k0 + 4.0, 1.0 / 32.0)));
        p.push(zeros(d));
    }
    p.push(Variable::new(init(&[v, d], 1.0, 0.02)));
    p.push(Variable::new(init(&[t, d], 2.0, 0.02)));
    p.extend([ones(), zeros(d)]);
    p.push(Variable::new(init(&[d, v], 3.0, 1.0 / 16.0)));
    p
}

/// The loss of the model with variables `p` on tokens `tok` [B, T] and
/// labels `lab` `[B*T]`, causal mask `mask` `[T, T]`.
fn loss(c: Gpt, p: &[Tensor], tok: &Tensor, lab: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let Gpt { b, t, d, .. } = c;
    let scale = ((d / c.h) as f64).sqrt();
    let (e, pos, lnf_g, lnf_b, w_out) = (
        &p[10 * L],
        &p[10 * L + 1],
        &p[10 * L + 2],
        &p[10 * L + 3],
        &p[10 * L + 4],
    );
    let mut x = e.gather(tok, 0)?.add(pos)?.reshape(&[b * t, d])?;
    for blk in p[..10 * L].chunks(10) {
        let [wqkv, wo, ln1_g, ln1_b, ln2_g, ln2_b, w1, b1, w2, b2] = blk else {
            unreachable!("chunks of 10")
        };
        let h = layer_norm(&x, ln1_g, ln1_b)?;
        let qkv = h.matmul(wqkv)?.split(3, -1)?;
        let (q, k, v) = (heads(c, &qkv[0])?, heads(c, &qkv[1])?, heads(c, &qkv[2])?);
        let a = if by_hand() {
            let s = q.matmul(&k.permute(&[0, 1, 3, 2])?)?.div_scalar(scale)?.add(mask)?;
            s.softmax(-1)?.matmul(&v)?
        } else {
            q.scaled_dot_product_attention(&k, &v, None, true, Some(1.0 / scale))?
        };
        let a = a.permute(&[0, 2, 1, 3])?.reshape(&[b * t, d])?;
        x = x.add(&a.matmul(wo)?)?;
        let h = layer_norm(&x, ln2_g, ln2_b)?;
        let m = h.matmul(w1)?.bias_add(b1)?.gelu(false)?.matmul(w2)?.bias_add(b2)?;
        x = x.add(&m)?;
    }
    let logits = layer_norm(&x, lnf_g, lnf_b)?.matmul(w_out)?;
    Tensor::sparse_softmax_cross_entropy_with_logits(lab, &logits)?.mean_all()
}

/// The workload of WORKLOADS.md; checksum `[loss, sum|dWqkv of block 0|]`
/// of the first step.
pub(crate) fn transformer_step(mode: Mode) -> Result<Report> {
    gpt_step(TRANSFORMER_STEP, mode)
}

/// Issue 28's char-level GPT (not a workload of WORKLOADS.md); checksum as
/// transformer_step's. `GRADTAPE_BENCH_GPT=b,t,d,h[,v]` runs the same model
/// at another shape instead (batch, context, width, heads, vocabulary:
/// 65 unless given; the MLP 4·d wide), to compare shapes.
pub(crate) fn gpt_small(mode: Mode) -> Result<Report> {
    let c = match std::env::var("GRADTAPE_BENCH_GPT") {
        Ok(spec) => shape(&spec)?,
        Err(_) => GPT_SMALL,
    };
    gpt_step(c, mode)
}

/// The GPT of a `GRADTAPE_BENCH_GPT` value.
fn shape(spec: &str) -> Result<Gpt> {
    let bad = |msg: String| gradtape::Error::InvalidArgument {
        op: "GRADTAPE_BENCH_GPT",
        msg,
    };
    let n: Vec<usize> = spec
        .split(',')
        .map(|x| x.trim().parse::<usize>().map_err(|e| bad(format!("{x:?}: {e}"))))
        .collect::<Result<_>>()?;
    let (&[b, t, d, h], v) = match n.as_slice() {
        [b, t, d, h] => (&[*b, *t, *d, *h], 65),
        [b, t, d, h, v] => (&[*b, *t, *d, *h], *v),
        _ => return Err(bad(format!("wants b,t,d,h[,v], got {spec:?}"))),
    };
    if n.contains(&0) || d % h != 0 {
        return Err(bad(format!(
            "wants sizes above 0 and heads dividing the width, got {spec:?}"
        )));
    }
    Ok(Gpt {
        b,
        t,
        v,
        d,
        h,
        mlp: 4 * d,
    })
}

/// One SGD step of the GPT `c`.
fn gpt_step(c: Gpt, mode: Mode) -> Result<Report> {
    let Gpt { b, t, v, .. } = c;
    let tok = Tensor::from_vec((0..(b * t) as i64).map(|i| (7 * i + 3) % v as i64).collect(), &[b, t])?;
    let lab = Tensor::from_vec((0..(b * t) as i64).map(|i| (11 * i + 5) % v as i64).collect(), &[b * t])?;
    let mask: Vec<f32> = (0..t * t).map(|i| if i % t > i / t { -1e9 } else { 0.0 }).collect();
    let mask = Tensor::from_vec(mask, &[t, t])?;
    let (tok, lab, mask) = (crate::on_device(tok), crate::on_device(lab), crate::on_device(mask));
    let params = variables(c);
    let body = move |(tok, lab, mask): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let p: Vec<Tensor> = params.iter().map(Variable::read).collect();
            loss(c, &p, tok, lab, mask)
        })?;
        let grads = tape.gradient(&loss, &params[..])?;
        let mut first = None;
        for (v, g) in params.iter().zip(grads) {
            let g = g.ok_or_else(|| gradtape::Error::InvalidArgument {
                op: "transformer_step",
                msg: "no gradient for a variable".into(),
            })?;
            v.apply_gradient_descent(0.01, &g)?;
            first.get_or_insert(g);
        }
        let dwqkv = first.ok_or_else(|| gradtape::Error::InvalidArgument {
            op: "transformer_step",
            msg: "no variables".into(),
        })?;
        Ok(vec![loss, dwqkv.abs()?.sum_all()?])
    };
    measure(mode, (tok, lab, mask), body, Timing::first(10, 2))
}
