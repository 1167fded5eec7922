//! `layer_normalization` over trailing axes as one op, `LayerNorm`, with a
//! fused row kernel each way (`kernels::cpu::layer_norm`).
//!
//! The composite (`moments`, then `batch_normalization`: about ten ops,
//! each a pass over the tensor, and some twenty in the backward pass) stays
//! the definition; this op is the same function computed in one sweep. It
//! is taken where the kernel applies: `f32` or `f64` on the CPU, the
//! normalised axes the last `k` of `x`, and `gamma`, `beta` varying along
//! those axes only (as a layer's are). Other calls run the composite.
//!
//! With `x` seen as rows of the normalised size `n` (`x̂`, `rstd` as in
//! the kernel's docs):
//! - the VJP is `LayerNormGrad`, the fused backward kernel as an op (so a
//!   trace records it): `dx`, `dgamma`, `dbeta` in one vector;
//! - `LayerNormGrad`'s own VJP (a second order) is written with
//!   differentiable ops, from the backward formula differentiated by hand
//!   ([`grad_vjp`]), so higher orders work;
//! - the JVP is `ẋ̂ · gamma + x̂ · γ̇ + β̇` with
//!   `ẋ̂ = rstd · (ẋ − mean(ẋ) − x̂ · mean(x̂ ẋ))`.

use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::layer_norm as kernel;
use crate::ops::desc::{NnOp, F64};
use crate::ops::{bind, bind_jvp, grads};
use crate::tensor::dtype::with_types;
use crate::tensor::{DType, Device, Element, Tensor};

const OP: &str = "layer_normalization";

/// The fused op for `x.layer_normalization(axes, gamma, beta, eps)` (axes
/// normalised and sorted, arguments checked), or `None` where only the
/// composite applies.
pub(super) fn fused(
    x: &Tensor,
    axes: &[usize],
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    eps: f64,
) -> Result<Option<Tensor>> {
    let r = x.rank();
    let k = axes.len();
    let host = |t: &Tensor| t.device() == Device::Cpu;
    let params = [gamma, beta].into_iter().flatten();
    if !matches!(x.dtype(), DType::F32 | DType::F64)
        || x.numel() == 0
        || !host(x)
        || k == 0
        || axes.iter().enumerate().any(|(i, &a)| a != r - k + i)
        || params.clone().any(|p| !host(p) || !along_last(p, k))
    {
        return Ok(None);
    }
    let vector = |p: Option<&Tensor>| p.map(|p| as_vector(p, &x.shape()[r - k..])).transpose();
    let (g, b) = (vector(gamma)?, vector(beta)?);
    layer_norm(x, g.as_ref(), b.as_ref(), k, eps).map(Some)
}

/// Whether `p` (broadcasting against `x`) varies along the last `k`
/// dims only.
fn along_last(p: &Tensor, k: usize) -> bool {
    let s = p.shape();
    s.len() <= k || s[..s.len() - k].iter().all(|&d| d == 1)
}

/// `p` as a vector of the normalised size (`tail`'s), through
/// differentiable reshapes and broadcasts (none when it already is one).
fn as_vector(p: &Tensor, tail: &[usize]) -> Result<Tensor> {
    let n: usize = tail.iter().product();
    if p.shape() == [n] {
        return Ok(p.clone());
    }
    let s = p.shape();
    let own = &s[s.len().saturating_sub(tail.len())..];
    let mut v = if own.len() == s.len() {
        p.clone()
    } else {
        p.reshape(own)?
    };
    if own != tail {
        v = v.broadcast_to(tail)?;
    }
    v.reshape(&[n])
}

/// The size of the last `k` dims of `x`.
fn row_len(x: &Tensor, k: usize) -> usize {
    x.shape()[x.rank() - k..].iter().product()
}

/// The fused forward op: `gamma`, `beta` vectors of the normalised size.
pub(crate) fn layer_norm(
    x: &Tensor,
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    k: usize,
    eps: f64,
) -> Result<Tensor> {
    let n = row_len(x, k);
    let y = with_types!(x.dtype(), T => {
        let xv = x.values::<T>(OP)?;
        let gv = gamma.map(|g| g.values::<T>(OP)).transpose()?;
        let bv = beta.map(|b| b.values::<T>(OP)).transpose()?;
        let out = kernel::forward::<T>(OP, &xv, n, gv.as_deref(), bv.as_deref(), eps)?;
        Tensor::from_storage(T::buf_into_storage(out), x.shape())
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"));
    let inputs: smallvec::SmallVec<[&Tensor; 3]> = [Some(x), gamma, beta].into_iter().flatten().collect();
    let desc = NnOp::LayerNorm {
        axes: k,
        eps: F64(eps),
        gamma: gamma.is_some(),
        beta: beta.is_some(),
    };
    let (xc, gc, has_beta) = (x.clone(), gamma.cloned(), beta.is_some());
    Ok(bind_jvp(
        desc,
        &inputs,
        y,
        move |_| {
            vjp(move |g, _| {
                let [dx, dg, db] = unpack(&layer_norm_grad(&xc, gc.as_ref(), &g[0], k, eps)?, &xc)?;
                let mut gs = grads![Some(dx)];
                if gc.is_some() {
                    gs.push(Some(dg));
                }
                if has_beta {
                    gs.push(Some(db));
                }
                Ok(gs)
            })
        },
        |t, _| jvp(x, gamma, k, eps, t),
    ))
}

/// The backward kernel as an op: `dx`, `dgamma`, `dbeta` (`[x.numel() +
/// 2n]`) from `x`, `gamma` and the output's cotangent `dy`.
pub(crate) fn layer_norm_grad(x: &Tensor, gamma: Option<&Tensor>, dy: &Tensor, k: usize, eps: f64) -> Result<Tensor> {
    let out = grad_kernel(x, gamma, dy, None, k, eps)?;
    let inputs: smallvec::SmallVec<[&Tensor; 3]> = [Some(x), gamma, Some(dy)].into_iter().flatten().collect();
    let desc = NnOp::LayerNormGrad {
        axes: k,
        eps: F64(eps),
        gamma: gamma.is_some(),
    };
    let (xc, gc, dyc) = (x.clone(), gamma.cloned(), dy.clone());
    Ok(bind(desc, &inputs, out, move |_| {
        vjp(move |g, _| {
            let [gx, gg, gdy] = grad_vjp(&xc, gc.as_ref(), &dyc, k, eps, &g[0])?;
            let mut gs = grads![Some(gx)];
            if gc.is_some() {
                gs.push(Some(gg));
            }
            gs.push(Some(gdy));
            Ok(gs)
        })
    }))
}

/// [`layer_norm_grad`]'s vector, computed (not bound: no rule), with
/// `add` (shaped and typed as `x`) added to `dx` in the same pass when
/// given: the compiler's `residual_into_norm_grad` node, a residual
/// connection's gradient joining the normalisation's.
pub(crate) fn grad_kernel(
    x: &Tensor,
    gamma: Option<&Tensor>,
    dy: &Tensor,
    add: Option<&Tensor>,
    k: usize,
    eps: f64,
) -> Result<Tensor> {
    if let Some(a) = add.filter(|a| a.dtype() != x.dtype() || a.shape() != x.shape()) {
        return Err(crate::error::Error::invalid(
            "LayerNormGradAdd",
            format!(
                "the added gradient must have x's dtype and shape {:?} {:?}, got {:?} {:?}",
                x.dtype(),
                x.shape(),
                a.dtype(),
                a.shape()
            ),
        ));
    }
    let n = row_len(x, k);
    Ok(with_types!(x.dtype(), T => {
        let xv = x.values::<T>(OP)?;
        let gv = gamma.map(|g| g.values::<T>(OP)).transpose()?;
        let dv = dy.values::<T>(OP)?;
        let av = add.map(|a| a.values::<T>(OP)).transpose()?;
        let out = kernel::backward::<T>(OP, &xv, n, gv.as_deref(), &dv, eps, av.as_deref())?;
        Tensor::from_storage(T::buf_into_storage(out), &[x.numel() + 2 * n])
    }, [F32: f32, F64: f64], _ => return Err(crate::ops::unsupported(OP, x.dtype(), "f32 or f64"))))
}

/// `dx` (shaped as `x`), `dgamma`, `dbeta` out of [`layer_norm_grad`]'s
/// vector (views).
fn unpack(all: &Tensor, x: &Tensor) -> Result<[Tensor; 3]> {
    let m = x.numel();
    let n = (all.numel() - m) / 2;
    Ok([
        all.narrow(0, 0, m)?.reshape(x.shape())?,
        all.narrow(0, m, n)?,
        all.narrow(0, m + n, n)?,
    ])
}

/// The normalised rows `x̂` of `x` seen as rows `[m / n, n]`, and their
/// `rstd` (`[m / n, 1]`), with differentiable ops.
fn normalised(x: &Tensor, n: usize, eps: f64) -> Result<(Tensor, Tensor)> {
    let x2 = x.reshape(&[x.numel() / n, n])?;
    let xc = x2.sub(&x2.mean(&[-1], true)?)?;
    let rstd = xc.square()?.mean(&[-1], true)?.add_scalar(eps)?.rsqrt()?;
    Ok((xc.mul(&rstd)?, rstd))
}

/// `rstd · (v − mean(v) − x̂ · mean(x̂ v))` along rows: the normalisation's
/// derivative applied to `v` (it is symmetric: its VJP and its JVP).
fn through_norm(xh: &Tensor, rstd: &Tensor, v: &Tensor) -> Result<Tensor> {
    let m1 = v.mean(&[-1], true)?;
    let m2 = xh.mul(v)?.mean(&[-1], true)?;
    v.sub(&m1)?.sub(&xh.mul(&m2)?)?.mul(rstd)
}

/// The JVP of [`layer_norm`] (tangents of `x`, then `gamma`, `beta` where
/// given).
fn jvp(x: &Tensor, gamma: Option<&Tensor>, k: usize, eps: f64, t: &[Option<Tensor>]) -> Result<Tensor> {
    let n = row_len(x, k);
    let (xh, rstd) = normalised(x, n, eps)?;
    let mut it = t.iter();
    let tx = it.next().cloned().flatten();
    let tg = if gamma.is_some() {
        it.next().cloned().flatten()
    } else {
        None
    };
    let tb = it.next().cloned().flatten();
    let mut parts: Vec<Tensor> = Vec::with_capacity(3);
    if let Some(tx) = tx {
        let d = through_norm(&xh, &rstd, &tx.reshape(xh.shape())?)?;
        parts.push(match gamma {
            Some(g) => d.mul(g)?,
            None => d,
        });
    }
    if let Some(tg) = tg {
        parts.push(xh.mul(&tg)?);
    }
    if let Some(tb) = tb {
        parts.push(tb.broadcast_to(xh.shape())?);
    }
    let mut out = match parts.pop() {
        Some(p) => p,
        // (the caller gives a tangent for some input)
        None => xh.try_zeros_like()?,
    };
    for p in parts {
        out = out.add(&p)?;
    }
    out.reshape(x.shape())
}

/// The VJP of [`layer_norm_grad`] (a second order): with the cotangents
/// `Gx`, `Gγ`, `Gβ` of `dx`, `dgamma`, `dbeta` (out of `all`), per row,
/// `ẋ̂ = through_norm(Gx)`, `g = dy · gamma`, `a = mean(g)`,
/// `b = mean(g x̂)`, `m1 = mean(Gx)`, `m2 = mean(x̂ Gx)`,
/// `c = mean(g Gx) − a m1` and `u = dy · Gγ`:
///
/// ```text
/// ḡdy    = gamma · ẋ̂ + x̂ · Gγ + Gβ
/// ḡgamma = Σ_rows dy · ẋ̂
/// ḡx     = −rstd² (x̂ (c − 3 m2 b) + b (Gx − m1) + m2 (g − a)) + through_norm(u)
/// ```
///
/// (`dx = through_norm(g)` is linear in `g`; the `rstd²` terms are its
/// derivative through `rstd` and `x̂`). Checked against finite
/// differences by the gradient checker's second-order rows.
fn grad_vjp(x: &Tensor, gamma: Option<&Tensor>, dy: &Tensor, k: usize, eps: f64, all: &Tensor) -> Result<[Tensor; 3]> {
    let n = row_len(x, k);
    let [gx, gg, gb] = unpack(all, x)?;
    let (xh, rstd) = normalised(x, n, eps)?;
    let gx = gx.reshape(xh.shape())?;
    let dy = dy.reshape(xh.shape())?;
    let g = match gamma {
        Some(gm) => dy.mul(gm)?,
        None => dy.clone(),
    };
    let xdot = through_norm(&xh, &rstd, &gx)?;
    let mut g_dy = xh.mul(&gg)?.add(&gb)?;
    g_dy = g_dy.add(&match gamma {
        Some(gm) => xdot.mul(gm)?,
        None => xdot.clone(),
    })?;
    let g_gamma = dy.mul(&xdot)?.sum(&[0], false)?;
    let a = g.mean(&[-1], true)?;
    let b = g.mul(&xh)?.mean(&[-1], true)?;
    let m1 = gx.mean(&[-1], true)?;
    let m2 = xh.mul(&gx)?.mean(&[-1], true)?;
    let c = g.mul(&gx)?.mean(&[-1], true)?.sub(&a.mul(&m1)?)?;
    let inner = xh
        .mul(&c.sub(&m2.mul(&b)?.mul_scalar(3.0)?)?)?
        .add(&b.mul(&gx.sub(&m1)?)?)?
        .add(&m2.mul(&g.sub(&a)?)?)?;
    let g_x = through_norm(&xh, &rstd, &dy.mul(&gg)?)?.sub(&rstd.square()?.mul(&inner)?)?;
    Ok([g_x.reshape(x.shape())?, g_gamma, g_dy.reshape(x.shape())?])
}

/// [`layer_norm_grad`] for a batch (vmap's rule): `x` and `dy` with a
/// leading batch dim of `b`, `gamma` broadcasting against `[b, rows, n]`
/// (shared, `[n]`, or per example, `[b, 1, n]`); each example's vector
/// (`[b, m + 2n]`), written with differentiable ops.
pub(crate) fn layer_norm_grad_batched(
    x: &Tensor,
    gamma: Option<&Tensor>,
    dy: &Tensor,
    k: usize,
    eps: f64,
) -> Result<Tensor> {
    let b = x.shape()[0];
    let n = row_len(x, k);
    let m = x.numel() / b.max(1);
    let rows = [b, m / n.max(1), n];
    let (xh, rstd) = normalised(x, n, eps)?;
    let (xh, rstd) = (xh.reshape(&rows)?, rstd.reshape(&[b, m / n.max(1), 1])?);
    let dy3 = dy.reshape(&rows)?;
    let g = match gamma {
        Some(gm) => dy3.mul(gm)?,
        None => dy3.clone(),
    };
    let dx = through_norm(&xh, &rstd, &g)?.reshape(&[b, m])?;
    let dg = dy3.mul(&xh)?.sum(&[1], false)?;
    let db = dy3.sum(&[1], false)?;
    Tensor::concat(&[&dx, &dg, &db], 1)
}
