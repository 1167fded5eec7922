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
//! The mask is a constant: no gradient flows to it.

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::attention::{self as kernel, Dims, Mask};
use crate::ops::desc::{NnOp, F64};
use crate::ops::{bind, bind_jvp, grads};
use crate::tensor::{with_float_dtype, DType, Float, Tensor};

const OP: &str = "scaled_dot_product_attention";

/// The shapes of a call, checked.
struct Shapes {
    batch: Vec<usize>,
    dims: Dims,
}

fn shape_err(msg: String) -> Error {
    Error::invalid(OP, msg)
}

/// Checks `q`, `k`, `v` (and the mask) and returns their sizes.
fn check(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool, scale: f64) -> Result<Shapes> {
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
    let batch = qs[..r - 2].to_vec();
    let (tq, tk) = (qs[r - 2], ks[r - 2]);
    if let Some(m) = mask {
        if m.dtype() != dt && m.dtype() != DType::Bool {
            return Err(shape_err(format!("the mask must be bool or {dt}, got {}", m.dtype())));
        }
        let full: Vec<usize> = batch.iter().copied().chain([tq, tk]).collect();
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
    };
    Ok(Shapes { batch, dims })
}

/// The mask's layout for the kernel: its values (contiguous, in its own
/// shape, padded with leading 1s to the scores' rank) and strides, 0 along
/// broadcast dims.
fn mask_layout<'a, T: Float>(m: &'a [T], shape: &[usize], s: &Shapes) -> Mask<'a, T> {
    let r = s.batch.len() + 2;
    let mut dims = vec![1; r - shape.len()];
    dims.extend_from_slice(shape);
    let mut strides = vec![0; r];
    let mut acc = 1;
    for a in (0..r).rev() {
        strides[a] = if dims[a] == 1 { 0 } else { acc };
        acc *= dims[a];
    }
    // each batch element's offset, walking the batch index
    let mut base = Vec::with_capacity(s.dims.batch);
    for b in 0..s.dims.batch {
        let (mut rem, mut off) = (b, 0);
        for a in (0..s.batch.len()).rev() {
            off += (rem % s.batch[a]) * strides[a];
            rem /= s.batch[a];
        }
        base.push(off);
    }
    Mask {
        data: m,
        base,
        row: strides[r - 2],
        col: strides[r - 1],
    }
}

/// The fused forward op: the packed rows `[..., tq, dv + 1]` (output, then
/// log-sum-exp) of `q`, `k`, `v` of one float type (not half), with an
/// additive mask of that type.
pub(crate) fn attention_packed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
) -> Result<Tensor> {
    let s = check(q, k, v, mask, causal, scale)?;
    let d = s.dims;
    let packed = with_float_dtype!(q.dtype(), T => {
        let (qv, kv, vv) = (q.values::<T>(OP)?, k.values::<T>(OP)?, v.values::<T>(OP)?);
        let mv = mask.map(|m| m.values::<T>(OP)).transpose()?;
        let ml = mv.as_deref().zip(mask).map(|(mv, m)| mask_layout(mv, m.shape(), &s));
        let out = kernel::forward::<T>(OP, &d, &qv, &kv, &vv, ml.as_ref())?;
        let shape: Vec<usize> = s.batch.iter().copied().chain([d.tq, d.dv + 1]).collect();
        Tensor::from_vec(out, &shape)
    }, _ => unreachable!("checked: a float dtype"))?;
    let mut inputs = vec![q, k, v];
    inputs.extend(mask);
    let (qc, kc, vc, mc) = (q.clone(), k.clone(), v.clone(), mask.cloned());
    let desc = NnOp::Attention {
        causal,
        scale: F64(scale),
    };
    Ok(bind_jvp(
        desc,
        &inputs,
        packed,
        move |packed| {
            let packed = packed.clone();
            vjp(move |g, _| {
                let dout = g[0].narrow(-1, 0, d.dv)?;
                let [dq, dk, dv] = fused_vjp(&qc, &kc, &vc, mc.as_ref(), causal, scale, &packed, &dout)?;
                let mut gs = grads![Some(dq), Some(dk), Some(dv)];
                if mc.is_some() {
                    gs.push(None);
                }
                Ok(gs)
            })
        },
        |t, packed| {
            if t[..3].iter().all(Option::is_none) {
                // only the mask has a tangent, and it gets no derivative
                return packed.try_zeros_like();
            }
            composite_jvp(q, k, v, mask, causal, scale, t)
        },
    ))
}

/// The backward kernel as an op (`AttentionGrad`): `[..., tq·d + tk·d +
/// tk·dv]`, each batch element's `dq`, `dk`, `dv` flattened. Its own rule
/// (a higher order) is the composite's ([`backward_vjp`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_grad_packed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
    packed: &Tensor,
    dout: &Tensor,
) -> Result<Tensor> {
    let s = check(q, k, v, mask, causal, scale)?;
    let d = s.dims;
    let want: Vec<usize> = s.batch.iter().copied().chain([d.tq, d.dv + 1]).collect();
    let want_g: Vec<usize> = s.batch.iter().copied().chain([d.tq, d.dv]).collect();
    if packed.shape() != want.as_slice() || dout.shape() != want_g.as_slice() || dout.dtype() != q.dtype() {
        return Err(shape_err(format!(
            "attention's gradient needs the packed rows {want:?} and a cotangent {want_g:?} of {}, got {:?} and {:?} of {}",
            q.dtype(),
            packed.shape(),
            dout.shape(),
            dout.dtype()
        )));
    }
    let out = with_float_dtype!(q.dtype(), T => {
        let (qv, kv, vv) = (q.values::<T>(OP)?, k.values::<T>(OP)?, v.values::<T>(OP)?);
        let mv = mask.map(|m| m.values::<T>(OP)).transpose()?;
        let ml = mv.as_deref().zip(mask).map(|(mv, m)| mask_layout(mv, m.shape(), &s));
        let (pv, gv) = (packed.values::<T>(OP)?, dout.values::<T>(OP)?);
        let out = kernel::backward::<T>(OP, &d, &qv, &kv, &vv, ml.as_ref(), &pv, &gv)?;
        let shape: Vec<usize> = s.batch.iter().copied().chain([d.tq * d.d + d.tk * d.d + d.tk * d.dv]).collect();
        Tensor::from_vec(out, &shape)
    }, _ => unreachable!("checked: a float dtype"))?;
    let mut inputs = vec![q, k, v, packed, dout];
    inputs.extend(mask);
    let (qc, kc, vc, mc, gc) = (q.clone(), k.clone(), v.clone(), mask.cloned(), dout.clone());
    let desc = NnOp::AttentionGrad {
        causal,
        scale: F64(scale),
    };
    Ok(bind(desc, &inputs, out, move |_| {
        vjp(move |g, _| {
            // the cotangents of dq, dk, dv, out of the packed rows
            let [gq, gk, gv] = unpack(&g[0], &qc, &kc, &vc)?;
            let [a, b, c, d] = backward_vjp(&qc, &kc, &vc, mc.as_ref(), causal, scale, &gc, [&gq, &gk, &gv])?;
            // (the packed rows are functions of q, k, v: their part is in
            // the composite's derivative; the mask gets none)
            let mut gs = grads![Some(a), Some(b), Some(c), None, Some(d)];
            if mc.is_some() {
                gs.push(None);
            }
            Ok(gs)
        })
    }))
}

/// `dq`, `dk`, `dv` from the fused backward op.
#[allow(clippy::too_many_arguments)]
fn fused_vjp(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
    packed: &Tensor,
    dout: &Tensor,
) -> Result<[Tensor; 3]> {
    unpack(
        &attention_grad_packed(q, k, v, mask, causal, scale, packed, dout)?,
        q,
        k,
        v,
    )
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
fn scores(q: &Tensor, k: &Tensor, mask: Option<&Tensor>, causal: bool, scale: f64) -> Result<Tensor> {
    let mut s = q.matmul(&swap_last(k)?)?.mul_scalar(scale)?;
    if let Some(m) = mask {
        s = s.add(m)?;
    }
    if causal {
        let (tq, tk) = (q.shape()[q.rank() - 2], k.shape()[k.rank() - 2]);
        let c: Vec<f64> = (0..tq * tk)
            .map(|x| if x % tk > x / tk { f64::NEG_INFINITY } else { 0.0 })
            .collect();
        s = s.add(&Tensor::from_vec(c, &[tq, tk])?.cast(q.dtype())?)?;
    }
    Ok(s)
}

/// The VJP of the backward pass (a second order): the backward pass
/// written on the unfused composite, with `p = softmax(s)`,
/// `s = q kᵀ · c + mask`,
///
/// ```text
/// dv = pᵀ dO    dp = dO vᵀ    ds = c p (dp - Σ dp·p)    dq = ds k    dk = dsᵀ q
/// ```
///
/// differentiated by hand, step by step backwards, from the cotangents
/// `(gq, gk, gv)` of `(dq, dk, dv)`: `[ḡq, ḡk, ḡv, ḡdO]`. Made of
/// differentiable ops, so it differentiates again (and serves forward
/// mode through its double VJP).
#[allow(clippy::too_many_arguments)]
fn backward_vjp(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    c: f64,
    dout: &Tensor,
    [gq, gk, gv]: [&Tensor; 3],
) -> Result<[Tensor; 4]> {
    let p = scores(q, k, mask, causal, c)?.softmax(-1)?;
    let dp = dout.matmul(&swap_last(v)?)?;
    let t = dp.mul(&p)?.sum(&[-1], true)?;
    let dpt = dp.sub(&t)?;
    let ds = p.mul(&dpt)?.mul_scalar(c)?;
    // dq = ds k, dk = dsᵀ q
    let g_ds = gq.matmul(&swap_last(k)?)?.add(&q.matmul(&swap_last(gk)?)?)?;
    let mut g_k = swap_last(&ds)?.matmul(gq)?;
    let mut g_q = ds.matmul(gk)?;
    // dv = pᵀ dO
    let mut g_p = dout.matmul(&swap_last(gv)?)?;
    let mut g_dout = p.matmul(gv)?;
    // ds = c p (dp - t), t = Σ dp·p
    let cg = g_ds.mul_scalar(c)?;
    g_p = g_p.add(&cg.mul(&dpt)?)?;
    let cgp = cg.mul(&p)?;
    let g_t = cgp.sum(&[-1], true)?.neg()?;
    let g_dp = cgp.add(&g_t.mul(&p)?)?;
    g_p = g_p.add(&g_t.mul(&dp)?)?;
    // dp = dO vᵀ
    g_dout = g_dout.add(&g_dp.matmul(v)?)?;
    let g_v = swap_last(&g_dp)?.matmul(dout)?;
    // p = softmax(s), s = c q kᵀ + mask
    let g_s = p.mul(&g_p.sub(&g_p.mul(&p)?.sum(&[-1], true)?)?)?.mul_scalar(c)?;
    g_q = g_q.add(&g_s.matmul(k)?)?;
    g_k = g_k.add(&swap_last(&g_s)?.matmul(q)?)?;
    Ok([g_q, g_k, g_v, g_dout])
}

/// The JVP (of the packed rows) written with differentiable ops: the
/// output's tangent `ṗ v + p v̇` with `ṗ = p (ṡ - Σ p ṡ)`, then the
/// log-sum-exp's, `Σ p ṡ`.
fn composite_jvp(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
    t: &[Option<Tensor>],
) -> Result<Tensor> {
    let p = scores(q, k, mask, causal, scale)?.softmax(-1)?;
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
            let ts = ts.mul_scalar(scale)?;
            // (0 where p is: a masked score's tangent must not meet its -inf)
            let pts = p.mul(&ts)?;
            let tlse = pts.sum(&[-1], true)?;
            let tp = pts.sub(&p.mul(&tlse)?)?;
            (Some(tp.matmul(v)?), Some(tlse))
        }
        None => (None, None),
    };
    let tout = match (&t[2], tout) {
        (Some(tv), Some(a)) => a.add(&p.matmul(tv)?)?,
        (Some(tv), None) => p.matmul(tv)?,
        (None, Some(a)) => a,
        (None, None) => unreachable!("some tangent is given (the mask has none)"),
    };
    let tlse = match tlse {
        Some(t) => t,
        None => tout.narrow(-1, 0, 1)?.try_zeros_like()?,
    };
    Tensor::concat(&[&tout, &tlse], -1)
}

impl Tensor {
    /// Scaled dot-product attention, `softmax(q kᵀ · scale + mask) v`, over
    /// `q: [..., tq, d]`, `k: [..., tk, d]`, `v: [..., tk, dv]` (the leading
    /// dims, e.g. `[batch, heads]`, equal), fused: the scores are computed
    /// block by block with an online softmax and never stored, so memory
    /// grows linearly with the sequence lengths (PyTorch's
    /// `scaled_dot_product_attention`, without dropout).
    ///
    /// - `mask`: added to the scores if of `q`'s dtype, or if `bool`, `true`
    ///   where a query may attend (PyTorch's convention); it broadcasts to
    ///   `[..., tq, tk]` and gets no gradient;
    /// - `causal`: query `i` sees keys `j <= i` only (PyTorch's top-left
    ///   alignment);
    /// - `scale`: the factor of `q·k`, `1/√d` when `None`.
    ///
    /// Half-precision inputs are computed in `f32`. A query row that may
    /// attend to no key gives NaN (a softmax of only `-inf`). Gradients for
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
        let q = self;
        let d = q.shape().last().copied().unwrap_or(0);
        let scale = scale.unwrap_or(1.0 / (d.max(1) as f64).sqrt());
        check(q, k, v, mask, causal, scale)?;
        let dt = q.dtype();
        // a bool mask as 0 / -inf; half precision through f32
        let work = if matches!(dt, DType::F16 | DType::BF16) {
            DType::F32
        } else {
            dt
        };
        let mask = match mask {
            Some(m) if m.dtype() == DType::Bool => {
                let zero = Tensor::scalar(0.0f64).cast(work)?;
                let ninf = Tensor::scalar(f64::NEG_INFINITY).cast(work)?;
                Some(Tensor::where_(m, &zero, &ninf)?)
            }
            Some(m) => Some(m.cast(work)?),
            None => None,
        };
        let (qw, kw, vw) = (q.cast(work)?, k.cast(work)?, v.cast(work)?);
        let dv = v.shape()[v.rank() - 1];
        let out = attention_packed(&qw, &kw, &vw, mask.as_ref(), causal, scale)?.narrow(-1, 0, dv)?;
        if work == dt {
            Ok(out)
        } else {
            out.cast(dt)
        }
    }
}
