//! Scaled dot-product attention as one op, fused on the CPU
//! (`kernels::cpu::attention`: blocked, FlashAttention's online softmax,
//! memory linear in the sequence lengths).
//!
//! The op binds a **packed** output, each query row's output followed by
//! its log-sum-exp (`[..., tq, dv + 1]`); the public method returns the
//! output columns, a view. So the log-sum-exp, which the backward pass
//! needs, is a value a trace records like any other, and a tape keeps `q`,
//! `k`, `v`, the mask and the packed rows: nothing of size `[tq, tk]`.
//!
//! Rules:
//! - the VJP runs the fused backward kernel (recomputing the scores block by
//!   block), as an op of its own, `AttentionGrad`, so a trace records it;
//! - `AttentionGrad`'s own VJP (a second order) is the unfused composite's
//!   (`softmax(q kᵀ · scale + mask) v`), differentiated by hand and written
//!   with differentiable ops, so higher orders and forward-over-reverse work;
//!   only they hold `[tq, tk]` matrices;
//! - the JVP is the composite's.
//!
//! On a GPU the op and its backward op run fused CUDA kernels
//! (`kernels::cuda::attention`: the same packed rows and gradient blocks,
//! nothing of size `[tq, tk]` either); on an emulated GPU, the CPU kernels
//! on host copies. The composites of the higher orders and the JVP are
//! made of ops with CUDA kernels, so they run on a GPU too.
//!
//! The mask is a constant: no gradient flows to it.
//!
//! Dropout of the probabilities (PyTorch's `dropout_p`) is decided inside
//! the kernels from a seed and each probability's index, so no mask is
//! stored; the seed is an operand (an `i64` scalar, drawn by a random op),
//! so a traced step that draws it afresh at each run drops afresh too. The
//! composite (second order, JVP) builds the same decisions as a dense
//! tensor ([`DropoutFactors`]).

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::attention::{Dims, Dropout};
use crate::ops::desc::{DynOp, Lazy, NnOp, Op, Outputs, F64};
use crate::ops::{bind, bind_jvp, bind_nondiff, grads};
use crate::tensor::{DType, Tensor};

mod hidden_rows;
mod host;

pub use hidden_rows::HiddenRows;
pub(crate) use host::attention_grad_into;
use host::{backward_host, forward_host};

const OP: &str = "scaled_dot_product_attention";

/// The shapes of a call, checked.
struct Shapes {
    batch: SmallVec<[usize; 4]>,
    dims: Dims,
    /// What the rows that see no key give.
    hidden: HiddenRows,
}

fn shape_err(msg: String) -> Error {
    Error::invalid(OP, msg)
}

/// A call's attributes and optional operands (the mask in the computing
/// dtype, additive; the dropout seed).
#[derive(Clone)]
pub(crate) struct Spec {
    /// The additive mask, broadcasting to the scores.
    pub mask: Option<Tensor>,
    /// Query `i` sees keys `j <= i` only.
    pub causal: bool,
    /// The factor of `q·k`.
    pub scale: f64,
    /// The dropout rate of the probabilities, in `[0, 1)`.
    pub rate: f64,
    /// The dropout seed, an `i64` scalar (present when `rate > 0`).
    pub seed: Option<Tensor>,
    /// What the rows that see no key give.
    pub hidden: HiddenRows,
}

impl Spec {
    /// From a descriptor's attributes and the operands after its tensors
    /// (`[mask][, seed]`, the seed present when `rate > 0`).
    pub(crate) fn from_operands(
        op: &'static str,
        rest: &[Tensor],
        causal: bool,
        scale: f64,
        rate: f64,
        hidden: HiddenRows,
    ) -> Result<Spec> {
        let seeded = usize::from(rate > 0.0);
        if rest.len() < seeded || rest.len() > seeded + 1 {
            return Err(Error::invalid(
                op,
                format!(
                    "expected {} operand(s) after q, k and v{}, got {}",
                    seeded,
                    if seeded == 1 {
                        " (the dropout seed, after an optional mask)"
                    } else {
                        " (an optional mask)"
                    },
                    rest.len()
                ),
            ));
        }
        let (mask, seed) = rest.split_at(rest.len() - seeded);
        Ok(Spec {
            mask: mask.first().cloned(),
            causal,
            scale,
            rate,
            seed: seed.first().cloned(),
            hidden,
        })
    }

    /// The operands after the tensors: the mask, then the seed.
    fn operands(&self) -> impl Iterator<Item = &Tensor> {
        self.mask.iter().chain(&self.seed)
    }

    /// The kernels' dropout, read off the seed.
    fn dropout(&self) -> Result<Option<Dropout>> {
        match (&self.seed, self.rate > 0.0) {
            (Some(seed), true) => Ok(Some(Dropout::new(seed_value(seed)?, self.rate))),
            (None, false) => Ok(None),
            _ => Err(shape_err(format!(
                "a dropout rate above 0 needs a seed (and only then): rate {}, seed {}",
                self.rate,
                if self.seed.is_some() { "given" } else { "missing" }
            ))),
        }
    }

    /// The dropout factors of the probabilities (`[..., tq, tk]`, 0 or
    /// `1 / (1 - rate)`) as a tensor, for the composite; `None` without
    /// dropout.
    fn factors(&self, q: &Tensor, k: &Tensor) -> Result<Option<Tensor>> {
        let Some(seed) = &self.seed else {
            return Ok(None);
        };
        let mut shape = q.shape().to_vec();
        let r = shape.len();
        shape[r - 1] = k.shape()[r - 2];
        let op = DropoutFactors {
            rate: self.rate,
            shape: shape.clone(),
            dtype: q.dtype(),
        };
        let y = op.run(seed)?;
        let f = bind_nondiff(
            Lazy("AttentionDropoutFactors", move || Op::Dyn(Arc::new(op.clone()))),
            &[seed],
            y,
        );
        // (on q's device, where the composite runs)
        Ok(Some(f.to(q.device())?))
    }
}

/// The seed held by a dropout seed tensor (an `i64` scalar).
fn seed_value(seed: &Tensor) -> Result<u64> {
    if seed.dtype() != DType::I64 || seed.rank() != 0 {
        return Err(shape_err(format!(
            "the dropout seed must be an i64 scalar, got {} {:?}",
            seed.dtype(),
            seed.shape()
        )));
    }
    let host = crate::kernels::gpu::to_host(OP, seed)?;
    Ok(host.values::<i64>(OP)?[0] as u64)
}

/// The dense form of the kernels' dropout decisions (`[..., tq, tk]`, 0
/// where dropped, `1 / (1 - rate)` where kept) from the seed: the
/// composite's (second order, JVP) dropout, an op of the seed so that a
/// trace recomputes it from each run's seed.
#[derive(Clone)]
struct DropoutFactors {
    rate: f64,
    shape: Vec<usize>,
    dtype: DType,
}

impl DropoutFactors {
    fn run(&self, seed: &Tensor) -> Result<Tensor> {
        let dr = Dropout::new(seed_value(seed)?, self.rate);
        let n = crate::tensor::layout::checked_numel(OP, &self.shape)?;
        let v: Vec<f64> = (0..n).map(|i| dr.factor(i)).collect();
        Tensor::from_vec(v, &self.shape)?.cast(self.dtype)
    }
}

impl DynOp for DropoutFactors {
    fn name(&self) -> &'static str {
        "AttentionDropoutFactors"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        match inputs {
            [seed] => Ok(smallvec::smallvec![self.run(seed)?]),
            _ => Err(Error::invalid(
                self.name(),
                format!("takes the seed only, got {} inputs", inputs.len()),
            )),
        }
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[rate={}, shape={:?}]", self.rate, self.shape)
    }
}

/// Checks `q`, `k`, `v` (and the mask and dropout rate) and returns their
/// sizes.
fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
    rate: f64,
) -> Result<Shapes> {
    let dt = q.dtype();
    if !dt.is_float() || k.dtype() != dt || v.dtype() != dt {
        return Err(shape_err(format!(
            "q, k and v must have one float dtype, got {}, {} and {}",
            q.dtype(),
            k.dtype(),
            v.dtype()
        )));
    }
    let r = q.rank();
    if r < 2 || k.rank() != r || v.rank() != r {
        return Err(shape_err(format!(
            "q, k and v must have one rank of at least 2 ([..., time, width]), got shapes {:?}, {:?} and {:?}",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if qs[..r - 2] != ks[..r - 2] || qs[..r - 2] != vs[..r - 2] || qs[r - 1] != ks[r - 1] || ks[r - 2] != vs[r - 2] {
        return Err(shape_err(format!(
            "q [..., tq, d], k [..., tk, d] and v [..., tk, dv] must agree, got {qs:?}, {ks:?} and {vs:?}"
        )));
    }
    if !scale.is_finite() {
        return Err(shape_err(format!("scale must be finite, got {scale}")));
    }
    if !(0.0..1.0).contains(&rate) {
        return Err(shape_err(format!("the dropout rate must lie in [0, 1), got {rate}")));
    }
    let batch: SmallVec<[usize; 4]> = qs[..r - 2].into();
    let (tq, tk) = (qs[r - 2], ks[r - 2]);
    if let Some(m) = mask {
        if m.dtype() != dt && m.dtype() != DType::Bool {
            return Err(shape_err(format!("the mask must be bool or {dt}, got {}", m.dtype())));
        }
        let full: SmallVec<[usize; 6]> = batch.iter().copied().chain([tq, tk]).collect();
        let ok = m.rank() <= r
            && m.shape()
                .iter()
                .rev()
                .zip(full.iter().rev())
                .all(|(&a, &b)| a == b || a == 1);
        if !ok {
            return Err(shape_err(format!(
                "the mask's shape {:?} does not broadcast to the scores' {full:?}",
                m.shape()
            )));
        }
    }
    let dims = Dims {
        batch: batch.iter().product(),
        tq,
        tk,
        d: qs[r - 1],
        dv: vs[r - 1],
        scale,
        causal,
        dropout: None,
    };
    Ok(Shapes {
        batch,
        dims,
        hidden: HiddenRows::Zeros,
    })
}

/// Checks a call's operands and returns its sizes, with the kernels'
/// dropout.
fn check_spec(q: &Tensor, k: &Tensor, v: &Tensor, a: &Spec) -> Result<Shapes> {
    let mut s = check(q, k, v, a.mask.as_ref(), a.causal, a.scale, a.rate)?;
    s.dims.dropout = a.dropout()?;
    if a.hidden == HiddenRows::Mean && a.rate > 0.0 {
        return Err(shape_err(format!(
            "the values' mean on rows that see no key is Keras's path without dropout; got a dropout rate of {}",
            a.rate
        )));
    }
    s.hidden = a.hidden;
    Ok(s)
}

/// The fused forward op: the packed rows `[..., tq, dv + 1]` (output, then
/// log-sum-exp) of `q`, `k`, `v` of one float type (not half), with an
/// additive mask of that type.
pub(crate) fn attention_packed(q: &Tensor, k: &Tensor, v: &Tensor, a: &Spec) -> Result<Tensor> {
    let s = check_spec(q, k, v, a)?;
    let d = s.dims;
    let mask = a.mask.as_ref();
    let mut placed: SmallVec<[&Tensor; 4]> = smallvec::smallvec![q, k, v];
    placed.extend(mask);
    let packed = match crate::dispatch::device::offload(
        OP,
        &placed,
        |_| crate::kernels::cuda::attention_forward(OP, &d, &s.batch, q, k, v, mask),
        |h| forward_host(&s, &h[0], &h[1], &h[2], h.get(3)),
    ) {
        // (an emulated GPU ran `forward_host`, which writes the means)
        Some(r) if s.hidden == HiddenRows::Mean && !crate::tensor::device::emulated() => {
            hidden_rows::means_on_device(&s, r?, v)?
        }
        Some(r) => r?,
        None => forward_host(&s, q, k, v, mask)?,
    };
    let mut inputs: SmallVec<[&Tensor; 8]> = smallvec::smallvec![q, k, v];
    inputs.extend(a.operands());
    let extra = inputs.len() - 3;
    let (qc, kc, vc, ac) = (q.clone(), k.clone(), v.clone(), a.clone());
    let desc = NnOp::Attention {
        causal: a.causal,
        scale: F64(a.scale),
        dropout: F64(a.rate),
        hidden: a.hidden,
    };
    Ok(bind_jvp(
        desc,
        &inputs,
        packed,
        move |packed| {
            let packed = packed.clone();
            vjp(move |g, _| {
                let dout = g[0].narrow(-1, 0, d.dv)?;
                let [dq, dk, dv] = fused_vjp(&qc, &kc, &vc, &ac, &packed, &dout)?;
                let mut gs = grads![Some(dq), Some(dk), Some(dv)];
                // (the mask and the seed get none)
                gs.extend((0..extra).map(|_| None));
                Ok(gs)
            })
        },
        |t, packed| {
            if t[..3].iter().all(Option::is_none) {
                // only the mask has a tangent, and it gets no derivative
                return packed.try_zeros_like();
            }
            composite_jvp(q, k, v, a, t)
        },
    ))
}

/// Checks the operands of attention's backward pass (as
/// [`check_spec`], and the packed rows and the cotangent) and returns
/// their sizes.
fn check_grad(q: &Tensor, k: &Tensor, v: &Tensor, a: &Spec, packed: &Tensor, dout: &Tensor) -> Result<Shapes> {
    let s = check_spec(q, k, v, a)?;
    let d = s.dims;
    let want: SmallVec<[usize; 6]> = s.batch.iter().copied().chain([d.tq, d.dv + 1]).collect();
    let want_g: SmallVec<[usize; 6]> = s.batch.iter().copied().chain([d.tq, d.dv]).collect();
    if packed.shape() != want.as_slice() || dout.shape() != want_g.as_slice() || dout.dtype() != q.dtype() {
        return Err(shape_err(format!(
            "attention's gradient needs the packed rows {want:?} and a cotangent {want_g:?} of {}, got {:?} and {:?} of {}",
            q.dtype(),
            packed.shape(),
            dout.shape(),
            dout.dtype()
        )));
    }
    Ok(s)
}

/// The backward kernel as an op (`AttentionGrad`): `[..., tq·d + tk·d +
/// tk·dv]`, each batch element's `dq`, `dk`, `dv` flattened. Its own rule
/// (a higher order) is the composite's ([`backward_vjp`]).
pub(crate) fn attention_grad_packed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    a: &Spec,
    packed: &Tensor,
    dout: &Tensor,
) -> Result<Tensor> {
    let s = check_grad(q, k, v, a, packed, dout)?;
    let d = s.dims;
    let mask = a.mask.as_ref();
    let mut placed: SmallVec<[&Tensor; 6]> = smallvec::smallvec![q, k, v, packed, dout];
    placed.extend(mask);
    let out = match crate::dispatch::device::offload(
        OP,
        &placed,
        |_| crate::kernels::cuda::attention_backward(OP, &d, &s.batch, q, k, v, mask, packed, dout),
        |h| backward_host(&s, [&h[0], &h[1], &h[2]], h.get(5), &h[3], &h[4]),
    ) {
        Some(r) if s.hidden == HiddenRows::Mean && !crate::tensor::device::emulated() => {
            hidden_rows::mean_grads_on_device(&s, r?, packed, dout)?
        }
        Some(r) => r?,
        None => backward_host(&s, [q, k, v], mask, packed, dout)?,
    };
    let mut inputs: SmallVec<[&Tensor; 8]> = smallvec::smallvec![q, k, v, packed, dout];
    inputs.extend(a.operands());
    let extra = inputs.len() - 5;
    let (qc, kc, vc, ac, gc) = (q.clone(), k.clone(), v.clone(), a.clone(), dout.clone());
    let desc = NnOp::AttentionGrad {
        causal: a.causal,
        scale: F64(a.scale),
        dropout: F64(a.rate),
        hidden: a.hidden,
    };
    Ok(bind(desc, &inputs, out, move |_| {
        vjp(move |g, _| {
            // the cotangents of dq, dk, dv, out of the packed rows
            let [gq, gk, gv] = unpack(&g[0], &qc, &kc, &vc)?;
            let [a, b, c, d] = backward_vjp(&qc, &kc, &vc, &ac, &gc, [&gq, &gk, &gv])?;
            // (the packed rows are functions of q, k, v: their part is in
            // the composite's derivative; the mask and the seed get none)
            let mut gs = grads![Some(a), Some(b), Some(c), None, Some(d)];
            gs.extend((0..extra).map(|_| None));
            Ok(gs)
        })
    }))
}

/// `dq`, `dk`, `dv` from the fused backward op.
fn fused_vjp(q: &Tensor, k: &Tensor, v: &Tensor, a: &Spec, packed: &Tensor, dout: &Tensor) -> Result<[Tensor; 3]> {
    unpack(&attention_grad_packed(q, k, v, a, packed, dout)?, q, k, v)
}

/// The three parts of a tensor laid out as `AttentionGrad`'s output (each
/// batch element's `q`-, `k`- and `v`-shaped blocks, flattened), shaped as
/// `q`, `k` and `v`.
fn unpack(all: &Tensor, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<[Tensor; 3]> {
    let last2 = |x: &Tensor| x.shape()[x.rank() - 2] * x.shape()[x.rank() - 1];
    let (nq, nk, nv) = (last2(q), last2(k), last2(v));
    Ok([
        all.narrow(-1, 0, nq)?.reshape(q.shape())?,
        all.narrow(-1, nq, nk)?.reshape(k.shape())?,
        all.narrow(-1, nq + nk, nv)?.reshape(v.shape())?,
    ])
}

/// `x` with its last two dims swapped.
fn swap_last(x: &Tensor) -> Result<Tensor> {
    let r = x.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    x.permute(&perm)
}

/// The unfused scores `q kᵀ · scale + mask`, with `-inf` above the
/// diagonal when causal.
fn scores(q: &Tensor, k: &Tensor, a: &Spec) -> Result<Tensor> {
    let mut s = q.matmul(&swap_last(k)?)?.mul_scalar(a.scale)?;
    if let Some(m) = &a.mask {
        s = s.add(m)?;
    }
    if a.causal {
        let (tq, tk) = (q.shape()[q.rank() - 2], k.shape()[k.rank() - 2]);
        let dt = q.dtype();
        let here = |t: Tensor| t.to(q.device());
        let zero = here(Tensor::full(&[], 0.0, dt))?;
        let ninf = here(Tensor::full(&[], f64::NEG_INFINITY, dt))?;
        s = s.add(&Tensor::where_(&here(causal_band(OP, tq, tk, 0)?)?, &zero, &ninf)?)?;
    }
    Ok(s)
}

/// `[tq, tk]` bool, true where key `j <= i + offset` (query `i`): the
/// causal band, its size checked (sizes beyond memory are `op`'s error,
/// not an abort).
pub(crate) fn causal_band(op: &'static str, tq: usize, tk: usize, offset: usize) -> Result<Tensor> {
    let n = crate::tensor::layout::checked_numel(op, &[tq, tk])?;
    let mut m = crate::tensor::alloc::try_vec(op, n)?;
    m.extend((0..n).map(|x| x % tk <= (x / tk).saturating_add(offset)));
    Tensor::from_vec(m, &[tq, tk])
}

/// The probabilities `softmax(s)` over the last axis, 0 on a row whose
/// scores are all `-inf` (a mask hides every key: the fused kernels' and
/// PyTorch's convention) instead of the softmax's NaN. Such a row's scores
/// are replaced by zeros before the softmax and its probabilities by zeros
/// after, so no NaN arises on any path, derivatives included (its scores
/// get no gradient: the probabilities do not depend on them). A row with a
/// NaN score (its maximum NaN) is not hidden: NaN, as the fused kernels'.
///
/// Returns the probabilities and, with [`HiddenRows::Mean`], those that
/// multiply the values: `1 / tk` on the hidden rows, a constant (the
/// scores get no derivative from them).
fn probabilities(s: &Tensor, hidden: HiddenRows) -> Result<(Tensor, Tensor)> {
    let ninf = Tensor::full(&[], f64::NEG_INFINITY, s.dtype()).to(s.device())?;
    let seen = s.stop_gradient().max(&[-1], true)?.ne(&ninf)?;
    let zero = Tensor::full(&[], 0.0, s.dtype()).to(s.device())?;
    let p = Tensor::where_(&seen, s, &zero)?.softmax(-1)?;
    let p = Tensor::where_(&seen, &p, &zero)?;
    let pv = match hidden {
        HiddenRows::Zeros => p.clone(),
        HiddenRows::Mean => hidden_rows::uniform(&p, &seen)?,
    };
    Ok((p, pv))
}

/// `x · f`, or `x` without dropout.
fn times(x: Tensor, f: Option<&Tensor>) -> Result<Tensor> {
    match f {
        Some(f) => x.mul(f),
        None => Ok(x),
    }
}

/// The VJP of the backward pass (a second order): the backward pass
/// written on the unfused composite, with `p = softmax(s)`,
/// `s = q kᵀ · c + mask` and `f` the dropout factors (1 without dropout),
///
/// ```text
/// dv = (p f)ᵀ dO    dp = (dO vᵀ) f    ds = c p (dp - Σ dp·p)    dq = ds k    dk = dsᵀ q
/// ```
///
/// differentiated by hand, step by step backwards, from the cotangents
/// `(gq, gk, gv)` of `(dq, dk, dv)`: `[ḡq, ḡk, ḡv, ḡdO]`. Made of
/// differentiable ops, so it differentiates again (and serves forward
/// mode through its double VJP).
fn backward_vjp(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    a: &Spec,
    dout: &Tensor,
    [gq, gk, gv]: [&Tensor; 3],
) -> Result<[Tensor; 4]> {
    let c = a.scale;
    let f = a.factors(q, k)?;
    let f = f.as_ref();
    let (p, pv) = probabilities(&scores(q, k, a)?, a.hidden)?;
    let dp = times(dout.matmul(&swap_last(v)?)?, f)?;
    let t = dp.mul(&p)?.sum(&[-1], true)?;
    let dpt = dp.sub(&t)?;
    let ds = p.mul(&dpt)?.mul_scalar(c)?;
    // dq = ds k, dk = dsᵀ q
    let g_ds = gq.matmul(&swap_last(k)?)?.add(&q.matmul(&swap_last(gk)?)?)?;
    let mut g_k = swap_last(&ds)?.matmul(gq)?;
    let mut g_q = ds.matmul(gk)?;
    // dv = (p f)ᵀ dO
    let mut g_p = times(dout.matmul(&swap_last(gv)?)?, f)?;
    let mut g_dout = times(pv, f)?.matmul(gv)?;
    // ds = c p (dp - t), t = Σ dp·p
    let cg = g_ds.mul_scalar(c)?;
    g_p = g_p.add(&cg.mul(&dpt)?)?;
    let cgp = cg.mul(&p)?;
    let g_t = cgp.sum(&[-1], true)?.neg()?;
    let g_dp = cgp.add(&g_t.mul(&p)?)?;
    g_p = g_p.add(&g_t.mul(&dp)?)?;
    // dp = (dO vᵀ) f
    let g_dp = times(g_dp, f)?;
    g_dout = g_dout.add(&g_dp.matmul(v)?)?;
    let g_v = swap_last(&g_dp)?.matmul(dout)?;
    // p = softmax(s), s = c q kᵀ + mask
    let g_s = p.mul(&g_p.sub(&g_p.mul(&p)?.sum(&[-1], true)?)?)?.mul_scalar(c)?;
    g_q = g_q.add(&g_s.matmul(k)?)?;
    g_k = g_k.add(&swap_last(&g_s)?.matmul(q)?)?;
    Ok([g_q, g_k, g_v, g_dout])
}

/// The JVP (of the packed rows) written with differentiable ops: the
/// output's tangent `(ṗ f) v + (p f) v̇` with `ṗ = p (ṡ - Σ p ṡ)` and `f`
/// the dropout factors, then the log-sum-exp's, `Σ p ṡ`.
fn composite_jvp(q: &Tensor, k: &Tensor, v: &Tensor, a: &Spec, t: &[Option<Tensor>]) -> Result<Tensor> {
    let f = a.factors(q, k)?;
    let f = f.as_ref();
    let (p, pv) = probabilities(&scores(q, k, a)?, a.hidden)?;
    let mut ts: Option<Tensor> = None;
    if let Some(tq) = &t[0] {
        ts = Some(tq.matmul(&swap_last(k)?)?);
    }
    if let Some(tk) = &t[1] {
        let b = q.matmul(&swap_last(tk)?)?;
        ts = Some(match ts {
            Some(a) => a.add(&b)?,
            None => b,
        });
    }
    let (tout, tlse) = match ts {
        Some(ts) => {
            let ts = ts.mul_scalar(a.scale)?;
            // (0 where p is: a masked score's tangent must not meet its -inf)
            let pts = p.mul(&ts)?;
            let tlse = pts.sum(&[-1], true)?;
            let tp = pts.sub(&p.mul(&tlse)?)?;
            (Some(times(tp, f)?.matmul(v)?), Some(tlse))
        }
        None => (None, None),
    };
    let tout = match (&t[2], tout) {
        (Some(tv), Some(x)) => x.add(&times(pv, f)?.matmul(tv)?)?,
        (Some(tv), None) => times(pv, f)?.matmul(tv)?,
        (None, Some(x)) => x,
        (None, None) => unreachable!("some tangent is given (the mask has none)"),
    };
    let tlse = match tlse {
        Some(t) => t,
        None => tout.narrow(-1, 0, 1)?.try_zeros_like()?,
    };
    Tensor::concat(&[&tout, &tlse], -1)
}

/// Dropout of attention's probabilities, for
/// [`Tensor::scaled_dot_product_attention_dropout`]: each probability is
/// zeroed with probability `rate` and the others scaled by
/// `1 / (1 − rate)`, decided from `seed` (the same seed, the same
/// decisions, as [`Tensor::dropout`]'s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDropout {
    /// The probability of dropping, in `[0, 1)`.
    pub rate: f64,
    /// The seed of the decisions.
    pub seed: u64,
}

impl Tensor {
    /// Scaled dot-product attention, `softmax(q kᵀ · scale + mask) v`, over
    /// `q: [..., tq, d]`, `k: [..., tk, d]`, `v: [..., tk, dv]` (the leading
    /// dims, e.g. `[batch, heads]`, equal), fused: the scores are computed
    /// block by block with an online softmax and never stored, so memory
    /// grows linearly with the sequence lengths (PyTorch's
    /// `scaled_dot_product_attention`; with dropout, see
    /// [`scaled_dot_product_attention_dropout`](Self::scaled_dot_product_attention_dropout)).
    ///
    /// - `mask`: added to the scores if of `q`'s dtype, or if `bool`, `true`
    ///   where a query may attend (PyTorch's convention); it broadcasts to
    ///   `[..., tq, tk]` and gets no gradient;
    /// - `causal`: query `i` sees keys `j <= i` only (PyTorch's top-left
    ///   alignment);
    /// - `scale`: the factor of `q·k`, `1/√d` when `None`.
    ///
    /// Half-precision inputs are computed in `f32`. A query row that may
    /// attend to no key (a mask that hides every key from it) gives zeros,
    /// and zero gradients, as PyTorch's (since 2.5) and Keras's layer, not
    /// the NaN of a softmax over only `-inf`. Gradients for
    /// `q`, `k` and `v` come from a fused backward pass (recomputing the
    /// scores); differentiated again, and in forward mode, through the
    /// unfused composite.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let q = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0], &[1, 2, 2])?;
    /// let v = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 2, 2])?;
    /// // causal: the first query sees only the first key
    /// let o = q.scaled_dot_product_attention(&q, &v, None, true, None)?;
    /// assert_eq!(o.to_vec::<f64>()?[..2], [1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scaled_dot_product_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        causal: bool,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        attention(self, k, v, mask, causal, scale, None, HiddenRows::Zeros)
    }

    /// [`scaled_dot_product_attention`](Self::scaled_dot_product_attention)
    /// with dropout of the probabilities (PyTorch's `dropout_p`, for
    /// training): `softmax(q kᵀ · scale + mask) ⊙ keep / (1 − rate) · v`.
    /// The keep decisions are recomputed from the seed in the backward
    /// pass, never stored. The seed is drawn by a random op: a traced
    /// function that calls this with a fixed seed drops the same way at
    /// every run (as [`dropout`](Self::dropout) with a seed); the layers
    /// that use it (e.g. [`nn::MultiHeadAttention`](crate::nn)) draw a new
    /// one per run. A rate of 0 is the op without dropout.
    ///
    /// ```
    /// use gradtape::{AttentionDropout, DType, Tensor};
    /// let q = Tensor::random_normal(&[2, 8, 4], 0.0, 1.0, DType::F64, 1)?;
    /// let v = Tensor::ones(&[2, 8, 3], DType::F64);
    /// let drop = AttentionDropout { rate: 0.5, seed: 7 };
    /// let o = q.scaled_dot_product_attention_dropout(&q, &v, None, false, None, drop)?;
    /// // rows of ones, each a kept share of 1 / (1 - 0.5)
    /// assert!(o.to_vec::<f64>()?.iter().all(|&x| (0.0..=2.0).contains(&x)));
    /// let again = q.scaled_dot_product_attention_dropout(&q, &v, None, false, None, drop)?;
    /// assert_eq!(o.to_vec::<f64>()?, again.to_vec::<f64>()?);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scaled_dot_product_attention_dropout(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        causal: bool,
        scale: Option<f64>,
        dropout: AttentionDropout,
    ) -> Result<Tensor> {
        attention(self, k, v, mask, causal, scale, Some(dropout), HiddenRows::Zeros)
    }
}

/// The public ops: checks, the bool mask as `0 / -inf`, half precision
/// through `f32`, the seed as an operand.
#[allow(clippy::too_many_arguments)]
fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: Option<f64>,
    dropout: Option<AttentionDropout>,
    hidden: HiddenRows,
) -> Result<Tensor> {
    let d = q.shape().last().copied().unwrap_or(0);
    let scale = scale.unwrap_or(1.0 / (d.max(1) as f64).sqrt());
    let rate = dropout.map_or(0.0, |x| x.rate);
    check(q, k, v, mask, causal, scale, rate)?;
    let mut operands: SmallVec<[&Tensor; 4]> = smallvec::smallvec![q, k, v];
    operands.extend(mask);
    // (mixed devices are this op's error, before the casts')
    crate::kernels::gpu::placement(OP, &operands)?;
    let dt = q.dtype();
    let work = if matches!(dt, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        dt
    };
    let mask = match mask {
        Some(m) if m.dtype() == DType::Bool => {
            let zero = Tensor::full(&[], 0.0, work).to(m.device())?;
            let ninf = Tensor::full(&[], f64::NEG_INFINITY, work).to(m.device())?;
            Some(Tensor::where_(m, &zero, &ninf)?)
        }
        Some(m) => Some(m.cast(work)?),
        None => None,
    };
    // the seed as an i64 scalar drawn by a random op (53 bits), so traces
    // see where it comes from
    let seed = match dropout {
        Some(x) if x.rate > 0.0 => Some(Tensor::random_uniform(
            &[],
            0.0,
            (1u64 << 53) as f64,
            DType::I64,
            x.seed,
        )?),
        _ => None,
    };
    let spec = Spec {
        mask,
        causal,
        scale,
        rate: if seed.is_some() { rate } else { 0.0 },
        seed,
        hidden,
    };
    let (qw, kw, vw) = (q.cast(work)?, k.cast(work)?, v.cast(work)?);
    let dv = v.shape()[v.rank() - 1];
    let out = attention_packed(&qw, &kw, &vw, &spec)?.narrow(-1, 0, dv)?;
    if work == dt {
        Ok(out)
    } else {
        out.cast(dt)
    }
}
