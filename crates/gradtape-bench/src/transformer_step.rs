//! transformer_step: one SGD step of a 2-block GPT (WORKLOADS.md): tokens
//! [8, 128], width 256, 4 causal heads of 64, a GELU MLP of 1024, final
//! LayerNorm, logits over 256 tokens, mean sparse softmax cross-entropy;
//! gradient w.r.t. the 25 variables. Written with the library's ops as a
//! user writes it (attention, LayerNorm and the head split by hand), as the
//! peers' implementations are.

use gradtape::{GradientTape, Result, Tensor, Variable};

use crate::traced::{measure, Mode, Timing};
use crate::{init, Report};

const B: usize = 8;
const T: usize = 128;
const V: usize = 256;
const D: usize = 256;
const H: usize = 4;
const L: usize = 2;
const HD: usize = D / H;
const MLP: usize = 1024;

/// `(x - mean) / sqrt(var + 1e-5) * gain + bias` over the last axis (the
/// biased variance).
fn layer_norm(x: &Tensor, gain: &Tensor, bias: &Tensor) -> Result<Tensor> {
    let mean = x.mean(&[-1], true)?;
    let d = x.sub(&mean)?;
    let var = d.square()?.mean(&[-1], true)?;
    d.mul(&var.add_scalar(1e-5)?.rsqrt()?)?.mul(gain)?.add(bias)
}

/// `[B*T, D]` to `[B, H, T, HD]`.
fn heads(t: &Tensor) -> Result<Tensor> {
    t.reshape(&[B, T, H, HD])?.permute(&[0, 2, 1, 3])
}

/// The variables in the peers' order: per block `Wqkv, Wo, ln1 gain, ln1
/// bias, ln2 gain, ln2 bias, W1, b1, W2, b2`, then `E, P, lnf gain, lnf
/// bias, Wout` (so the first gradient is block 0's `dWqkv`).
fn variables() -> Vec<Variable> {
    let ones = || Variable::new(Tensor::ones(&[D], gradtape::DType::F32));
    let zeros = |n| Variable::new(Tensor::zeros(&[n], gradtape::DType::F32));
    let mut p = Vec::new();
    for blk in 0..L {
        let k0 = 10.0 + 10.0 * blk as f64;
        p.push(Variable::new(init(&[D, 3 * D], k0 + 1.0, 1.0 / 16.0)));
        p.push(Variable::new(init(&[D, D], k0 + 2.0, 1.0 / 16.0)));
        p.extend([ones(), zeros(D), ones(), zeros(D)]);
        p.push(Variable::new(init(&[D, MLP], k0 + 3.0, 1.0 / 16.0)));
        p.push(zeros(MLP));
        p.push(Variable::new(init(&[MLP, D], k0 + 4.0, 1.0 / 32.0)));
        p.push(zeros(D));
    }
    p.push(Variable::new(init(&[V, D], 1.0, 0.02)));
    p.push(Variable::new(init(&[T, D], 2.0, 0.02)));
    p.extend([ones(), zeros(D)]);
    p.push(Variable::new(init(&[D, V], 3.0, 1.0 / 16.0)));
    p
}

/// The loss of the model with variables `p` on tokens `tok` [B, T] and
/// labels `lab` [B*T], causal mask `mask` [T, T].
fn loss(p: &[Tensor], tok: &Tensor, lab: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let (e, pos, lnf_g, lnf_b, w_out) = (
        &p[10 * L],
        &p[10 * L + 1],
        &p[10 * L + 2],
        &p[10 * L + 3],
        &p[10 * L + 4],
    );
    let mut x = e.gather(tok, 0)?.add(pos)?.reshape(&[B * T, D])?;
    for blk in p[..10 * L].chunks(10) {
        let [wqkv, wo, ln1_g, ln1_b, ln2_g, ln2_b, w1, b1, w2, b2] = blk else {
            unreachable!("chunks of 10")
        };
        let h = layer_norm(&x, ln1_g, ln1_b)?;
        let qkv = h.matmul(wqkv)?.split(3, -1)?;
        let (q, k, v) = (heads(&qkv[0])?, heads(&qkv[1])?, heads(&qkv[2])?);
        let s = q.matmul(&k.permute(&[0, 1, 3, 2])?)?.div_scalar(8.0)?.add(mask)?;
        let a = s
            .softmax(-1)?
            .matmul(&v)?
            .permute(&[0, 2, 1, 3])?
            .reshape(&[B * T, D])?;
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
    let tok = Tensor::from_vec((0..(B * T) as i64).map(|i| (7 * i + 3) % V as i64).collect(), &[B, T])?;
    let lab = Tensor::from_vec((0..(B * T) as i64).map(|i| (11 * i + 5) % V as i64).collect(), &[B * T])?;
    let mask: Vec<f32> = (0..T * T).map(|i| if i % T > i / T { -1e9 } else { 0.0 }).collect();
    let mask = Tensor::from_vec(mask, &[T, T])?;
    let params = variables();
    let body = move |(tok, lab, mask): &(Tensor, Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let p: Vec<Tensor> = params.iter().map(Variable::read).collect();
            loss(&p, tok, lab, mask)
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
