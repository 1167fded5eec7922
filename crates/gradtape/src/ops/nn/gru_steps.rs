//! `gru_sequence` with differentiable ops (terms as in `gru_sequence.rs`):
//! the step that defines it ([`gru_step`], also the cell's), the loop of
//! steps (devices and dtypes without the fused kernels), the backward
//! loop (their backward pass, and the second order's replay), the backward
//! loop's VJP by hand (the second order) and the JVP.

use crate::error::Result;
use crate::ops::tangent_or_zero;
use crate::tensor::Tensor;

use super::recurrence::{add_opt, at, flat, kernel_grad_ops, or_zeros, shift, stack, Dims};

/// One GRU step with differentiable ops (Keras's `reset_after=True`
/// cell, [`GRUCell`](crate::nn::GRUCell)'s step): from the projection `xw`
/// (`[b, 3u]`), the state `h`, the recurrent kernel and bias, the new
/// state and the step's `[z, r, h̃, m_h]`.
pub(crate) fn gru_step(xw: &Tensor, h: &Tensor, w: &Tensor, bias: &Tensor) -> Result<(Tensor, [Tensor; 4])> {
    let mx = xw.split(3, -1)?;
    let mh = h.matmul(w)?.bias_add(bias)?.split(3, -1)?;
    let z = mx[0].add(&mh[0])?.sigmoid()?;
    let r = mx[1].add(&mh[1])?.sigmoid()?;
    let hh = mx[2].add(&r.mul(&mh[2])?)?.tanh()?;
    // z · h + (1 − z) · hh
    let h = z.mul(h)?.add(&one_minus(&z)?.mul(&hh)?)?;
    Ok((h, [z, r, hh, mh[2].clone()]))
}

/// `1 − x`.
fn one_minus(x: &Tensor) -> Result<Tensor> {
    x.neg()?.add_scalar(1.0)
}

/// `x(1 − x)`, the sigmoid's slope at its value `x`.
fn slope(x: &Tensor) -> Result<Tensor> {
    x.mul(&one_minus(x)?)
}

/// `1 − x²`, tanh's slope at its value `x`.
fn tanh_slope(x: &Tensor) -> Result<Tensor> {
    one_minus(&x.square()?)
}

/// The definition, with differentiable ops: all `h_t` (`[T, B, u]`) and
/// all `[z, r, h̃, m_h]` (`[T, B, 4u]`).
pub(super) fn composite(xw: &Tensor, w: &Tensor, bias: &Tensor, h0: &Tensor) -> Result<(Tensor, Tensor)> {
    let mut h = h0.clone();
    let (mut hs, mut gs) = (vec![], vec![]);
    for x in xw.unstack(0)? {
        let (next, g) = gru_step(&x, &h, w, bias)?;
        h = next;
        hs.push(h.clone());
        gs.push(Tensor::concat(&[&g[0], &g[1], &g[2], &g[3]], -1)?);
    }
    Ok((stack(&hs)?, stack(&gs)?))
}

/// Step `t`'s gates `[z, r, h̃, m_h]` (or their cotangents).
fn gates(gs: &Tensor, t: usize) -> Result<Vec<Tensor>> {
    at(gs, t)?.split(4, -1)
}

/// `h_{t−1}`.
fn previous(h0: &Tensor, hs: &Tensor, t: usize) -> Result<Tensor> {
    if t == 0 {
        Ok(h0.clone())
    } else {
        at(hs, t - 1)
    }
}

/// `x + g[k]`, the part `k` of a step's gates' cotangent, when there is one.
fn plus(x: Tensor, g: &Option<Vec<Tensor>>, k: usize) -> Result<Tensor> {
    match g {
        Some(g) => x.add(&g[k]),
        None => Ok(x),
    }
}

/// One step of the backward loop, as the second order reads it.
pub(super) struct Step {
    /// `D_t`, the cotangent of `h_t`
    d: Tensor,
    dz: Tensor,
    dhh: Tensor,
    dph: Tensor,
    dr: Tensor,
    dm: Tensor,
}

/// The backward loop with differentiable ops: the gradients and each
/// step's terms.
pub(super) struct Steps {
    pub dxw: Tensor,
    pub dw: Tensor,
    pub db: Tensor,
    pub dh0: Tensor,
    steps: Vec<Step>,
}

/// The backward pass of `gru_sequence.rs`'s module docs with
/// differentiable ops, from the parts `hs`, `gs` and their cotangents
/// (`None`: zero).
pub(super) fn steps_backward(
    w: &Tensor,
    h0: &Tensor,
    hs: &Tensor,
    gs: &Tensor,
    gh: Option<&Tensor>,
    gg: Option<&Tensor>,
    d: Dims,
) -> Result<Steps> {
    let mut carry: Option<Tensor> = None;
    let (mut dxw, mut steps) = (vec![], vec![]);
    for t in (0..d.t).rev() {
        let dd = or_zeros(add_opt(gh.map(|g| at(g, t)).transpose()?, carry)?, h0)?;
        let hp = previous(h0, hs, t)?;
        let [z, r, hh, mh] = <[Tensor; 4]>::try_from(gates(gs, t)?).map_err(|_| four())?;
        let ggt = gg.map(|g| gates(g, t)).transpose()?;
        let dz = plus(dd.mul(&hp.sub(&hh)?)?, &ggt, 0)?;
        let dhh = plus(dd.mul(&one_minus(&z)?)?, &ggt, 2)?;
        let dph = dhh.mul(&tanh_slope(&hh)?)?;
        let dr = plus(dph.mul(&mh)?, &ggt, 1)?;
        let (dpz, dpr) = (dz.mul(&slope(&z)?)?, dr.mul(&slope(&r)?)?);
        let dmh = plus(dph.mul(&r)?, &ggt, 3)?;
        dxw.push(Tensor::concat(&[&dpz, &dpr, &dph], -1)?);
        let dm = Tensor::concat(&[&dpz, &dpr, &dmh], -1)?;
        carry = Some(dd.mul(&z)?.add(&dm.matmul_with(w, false, true)?)?);
        steps.push(Step {
            d: dd,
            dz,
            dhh,
            dph,
            dr,
            dm,
        });
    }
    dxw.reverse();
    steps.reverse();
    let dm = stack(&steps.iter().map(|s| s.dm.clone()).collect::<Vec<_>>())?;
    Ok(Steps {
        dxw: stack(&dxw)?,
        dw: kernel_grad_ops(h0, hs, &dm, d)?,
        db: dm.sum(&[0, 1], false)?,
        dh0: carry.ok_or_else(|| crate::error::Error::invalid("gru_sequence", "the sequence has no steps"))?,
        steps,
    })
}

fn four() -> crate::error::Error {
    crate::error::Error::invalid("gru_sequence", "the gates did not split in four")
}

/// The cotangents the second order gives `GruSequenceGrad`'s inputs.
pub(super) struct SecondOrder {
    pub w: Tensor,
    pub h0: Tensor,
    pub hs: Tensor,
    pub gs: Tensor,
    /// of the outputs' cotangent, when it was given
    pub gh: Option<Tensor>,
    /// of the gates' cotangent, when it was given
    pub gg: Option<Tensor>,
}

/// The VJP of the backward pass (a second order): [`steps_backward`]
/// differentiated by hand, forwards in time (the adjoint `āD` of the
/// carried cotangent flows from `dh₀` to the last step), from the
/// cotangents `a` = `[ādxw, ādR, ādb, ādh₀]` of `GruSequenceGrad`'s output.
/// Step `t`, with `āD_{t−1}` from the step before (`ādh₀` first):
///
/// ```text
/// ādm = h_{t−1} ādR + ādb + āD_{t−1} R     ḡR += āD_{t−1}ᵀ dm     ḡh_{t−1} = dm ādRᵀ + ādz·D
/// ādp_z = ādxw_z + ādm_z   ādp_r = ādxw_r + ādm_r   ādm_h = ādm_h'
/// ādr = ādp_r·r(1−r)       ādp_h = ādxw_h + ādr·m_h + ādm_h·r
/// ādh̃ = ādp_h·(1−h̃²)       ādz = ādp_z·z(1−z)
/// āD_t = āD_{t−1}·z + ādz·(h_{t−1} − h̃) + ādh̃·(1 − z)
/// ḡz = ādp_z·dz·(1−2z) − ādh̃·D + āD_{t−1}·D     ḡr = ādp_r·dr·(1−2r) + ādm_h·dp_h
/// ḡh̃ = −2·ādp_h·dh̃·h̃ − ādz·D                    ḡm_h = ādr·dp_h
/// ```
///
/// and the cotangents' cotangents `āD_t` (of `ḡh_t`) and `[ādz, ādr, ādh̃,
/// ādm_h]` (of the gates'), with differentiable ops.
#[allow(clippy::too_many_arguments)]
pub(super) fn grad_vjp_sequence(
    w: &Tensor,
    h0: &Tensor,
    hs: &Tensor,
    gs: &Tensor,
    gh: Option<&Tensor>,
    gg: Option<&Tensor>,
    a: &[Tensor; 4],
    d: Dims,
) -> Result<SecondOrder> {
    let s = steps_backward(w, h0, hs, gs, gh, gg, d)?;
    let [a_xw, a_w, a_b, a_h0] = a;
    let mut a_prev = a_h0.clone();
    let mut g_w: Option<Tensor> = None;
    let (mut g_hp, mut g_gs, mut g_gh, mut g_gg) = (vec![], vec![], vec![], vec![]);
    for (t, st) in s.steps.iter().enumerate() {
        let hp = previous(h0, hs, t)?;
        let [z, r, hh, mh] = <[Tensor; 4]>::try_from(gates(gs, t)?).map_err(|_| four())?;
        let a_dm = hp.matmul(a_w)?.add(a_b)?.add(&a_prev.matmul(w)?)?;
        g_w = add_opt(g_w, Some(a_prev.matmul_with(&st.dm, true, false)?))?;
        let ax = at(a_xw, t)?.split(3, -1)?;
        let am = a_dm.split(3, -1)?;
        let (a_dpz, a_dpr, a_dmh) = (ax[0].add(&am[0])?, ax[1].add(&am[1])?, am[2].clone());
        let a_dr = a_dpr.mul(&slope(&r)?)?;
        let a_dph = ax[2].add(&a_dr.mul(&mh)?)?.add(&a_dmh.mul(&r)?)?;
        let a_dhh = a_dph.mul(&tanh_slope(&hh)?)?;
        let a_dz = a_dpz.mul(&slope(&z)?)?;
        // (1 − 2x)
        let twice = |x: &Tensor| x.mul_scalar(-2.0)?.add_scalar(1.0);
        let g_z = a_dpz
            .mul(&st.dz)?
            .mul(&twice(&z)?)?
            .sub(&a_dhh.mul(&st.d)?)?
            .add(&a_prev.mul(&st.d)?)?;
        let g_r = a_dpr.mul(&st.dr)?.mul(&twice(&r)?)?.add(&a_dmh.mul(&st.dph)?)?;
        let g_hh = a_dph.mul(&st.dhh)?.mul(&hh)?.mul_scalar(-2.0)?.sub(&a_dz.mul(&st.d)?)?;
        let g_mh = a_dr.mul(&st.dph)?;
        g_hp.push(st.dm.matmul_with(a_w, false, true)?.add(&a_dz.mul(&st.d)?)?);
        g_gs.push(Tensor::concat(&[&g_z, &g_r, &g_hh, &g_mh], -1)?);
        g_gg.push(Tensor::concat(&[&a_dz, &a_dr, &a_dhh, &a_dmh], -1)?);
        a_prev = a_prev
            .mul(&z)?
            .add(&a_dz.mul(&hp.sub(&hh)?)?)?
            .add(&a_dhh.mul(&one_minus(&z)?)?)?;
        g_gh.push(a_prev.clone());
    }
    let (g_h0, g_hs) = shift(&g_hp)?;
    Ok(SecondOrder {
        w: g_w.ok_or_else(|| crate::error::Error::invalid("gru_sequence", "the sequence has no steps"))?,
        h0: g_h0,
        hs: g_hs,
        gs: stack(&g_gs)?,
        gh: gh.map(|_| stack(&g_gh)).transpose()?,
        gg: gg.map(|_| stack(&g_gg)).transpose()?,
    })
}

/// The JVP: the packed tangent of every step's `h` and `[z, r, h̃, m_h]`,
/// step by step (`t`: the tangents of `xw`, `R`, `b`, `h₀`).
pub(super) fn jvp(
    xw: &Tensor,
    w: &Tensor,
    h0: &Tensor,
    t: &[Option<Tensor>],
    packed: &Tensor,
    d: Dims,
) -> Result<Tensor> {
    let ps = super::recurrence::parts(packed, &[d.shape(1), d.shape(4)])?;
    let (hs, gs) = (&ps[0], &ps[1]);
    let txw = tangent_or_zero(&t[0], xw)?;
    let mut th = tangent_or_zero(&t[3], h0)?;
    let (mut ths, mut tgs) = (vec![], vec![]);
    for s in 0..d.t {
        let hp = previous(h0, hs, s)?;
        let [z, r, hh, mh] = <[Tensor; 4]>::try_from(gates(gs, s)?).map_err(|_| four())?;
        let mut tm = th.matmul(w)?;
        if let Some(tw) = &t[1] {
            tm = tm.add(&hp.matmul(tw)?)?;
        }
        if let Some(tb) = &t[2] {
            tm = tm.add(tb)?;
        }
        let tx = at(&txw, s)?.split(3, -1)?;
        let tms = tm.split(3, -1)?;
        let tz = tx[0].add(&tms[0])?.mul(&slope(&z)?)?;
        let tr = tx[1].add(&tms[1])?.mul(&slope(&r)?)?;
        let thh = tx[2]
            .add(&tr.mul(&mh)?)?
            .add(&r.mul(&tms[2])?)?
            .mul(&tanh_slope(&hh)?)?;
        th = tz
            .mul(&hp.sub(&hh)?)?
            .add(&z.mul(&th)?)?
            .add(&one_minus(&z)?.mul(&thh)?)?;
        ths.push(th.clone());
        tgs.push(Tensor::concat(&[&tz, &tr, &thh, &tms[2]], -1)?);
    }
    Tensor::concat(&[&flat(&stack(&ths)?)?, &flat(&stack(&tgs)?)?], 0)
}
