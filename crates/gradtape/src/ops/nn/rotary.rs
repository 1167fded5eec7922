//! The rotary position embedding's rotation as one op, `Rotary`
//! (`nn::RotaryEmbedding` builds the tables and calls it).
//!
//! `rotary(x, cos, sin)` rotates each pair `(x₁[j], x₂[j])` of the halves
//! of `x`'s last axis (the features) by the angle of its position along
//! the axis `seq_from_end + 1` places before the last: `[x₁ c − x₂ s,
//! x₂ c + x₁ s]`, with the tables `cos`, `sin` (`[t, d / 2]`, `t` the
//! positions) constants of the call. With `inverse` it rotates by `−θ`.
//!
//! It replaces a composite of five ops each way (`narrow` twice, `neg`,
//! `concat`, `mul` twice, `add`) whose values it keeps bit for bit (see
//! the kernel, `kernels::cpu::rotary`). The position axis is counted
//! from the end so that a batch dim in front (vmap) leaves the attribute
//! as it is.
//!
//! Rules: the rotation is linear in `x` and orthogonal, so
//! - its VJP is the inverse rotation (its transpose) of the cotangent: the
//!   same op with `inverse` flipped, whose own VJP flips it back, so every
//!   order of derivative is this op again;
//! - its JVP is the same rotation of the tangent;
//! - the tables are constants (no gradient flows to them).
//!
//! Off the CPU the op is the composite of the halves with differentiable
//! ops (they have GPU kernels).

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::rotary as kernel;
use crate::ops::desc::NnOp;
use crate::ops::{bind_jvp, grads};
use crate::tensor::dtype::with_types;
use crate::tensor::{Device, Element, Tensor};

const OP: &str = "Rotary";

/// The rotation of `x` by the tables `cos`, `sin` (`[t, d / 2]`, `x`'s
/// dtype), positions along axis `rank − 2 − seq_from_end` of `x`,
/// features along its last axis (`d`, even); by `−θ` with `inverse`.
pub(crate) fn rotary(x: &Tensor, cos: &Tensor, sin: &Tensor, seq_from_end: usize, inverse: bool) -> Result<Tensor> {
    let (t, inner) = check(x, cos, sin, seq_from_end)?;
    let on_host = [x, cos, sin].iter().all(|a| a.device() == Device::Cpu);
    if !on_host || x.numel() == 0 {
        return composite(x, cos, sin, seq_from_end, inverse);
    }
    let y = with_types!(x.dtype(), T => {
        let (c, s) = (cos.values::<T>(OP)?, sin.values::<T>(OP)?);
        let out = kernel::rotate::<T>(OP, x.buffer::<T>(), x.layout(), (t, inner), &c, &s, inverse)?;
        Tensor::from_storage(T::buf_into_storage(out), x.shape())
    }, [F32: f32, F64: f64, F16: crate::tensor::f16, BF16: crate::tensor::bf16],
       _ => return Err(crate::ops::unsupported(OP, x.dtype(), "a float dtype")));
    let desc = NnOp::Rotary { seq_from_end, inverse };
    let (cc, sc) = (cos.clone(), sin.clone());
    Ok(bind_jvp(
        desc,
        &[x, cos, sin],
        y,
        move |_| {
            vjp(move |g, _| {
                let dx = rotary(&g[0], &cc, &sc, seq_from_end, !inverse)?;
                Ok(grads![Some(dx), None, None])
            })
        },
        |t, _| match &t[0] {
            Some(tx) => rotary(tx, cos, sin, seq_from_end, inverse),
            // (a tangent of a table alone: the op is constant in them)
            None => x.try_zeros_like(),
        },
    ))
}

/// Checks the operands; returns the positions `t` and the rows between
/// two positions (`inner`).
fn check(x: &Tensor, cos: &Tensor, sin: &Tensor, seq_from_end: usize) -> Result<(usize, usize)> {
    let s = x.shape();
    let r = s.len();
    let d = s.last().copied().unwrap_or(0);
    let ok_axis = r >= seq_from_end + 2;
    let t = if ok_axis { s[r - 2 - seq_from_end] } else { 0 };
    let table = [t, d / 2];
    if !ok_axis
        || d % 2 != 0
        || cos.shape() != table
        || sin.shape() != table
        || cos.dtype() != x.dtype()
        || sin.dtype() != x.dtype()
        || !x.dtype().is_float()
    {
        return Err(Error::invalid(
            OP,
            format!(
                "needs a float x with an even last axis and positions {seq_from_end} axes before it, and cos and sin tables [positions, features / 2] of x's dtype, got x {} {:?}, cos {} {:?}, sin {} {:?}",
                x.dtype(),
                s,
                cos.dtype(),
                cos.shape(),
                sin.dtype(),
                sin.shape()
            ),
        ));
    }
    Ok((t, s[r - 1 - seq_from_end..r - 1].iter().product()))
}

/// The rotation with differentiable ops (off the CPU): the tables shaped
/// to broadcast against the halves of `x`.
fn composite(x: &Tensor, cos: &Tensor, sin: &Tensor, seq_from_end: usize, inverse: bool) -> Result<Tensor> {
    let r = x.rank();
    let d = x.shape()[r - 1];
    let mut bshape = vec![1; r];
    bshape[r - 2 - seq_from_end] = cos.shape()[0];
    bshape[r - 1] = d / 2;
    let (c, mut s) = (cos.reshape(&bshape)?, sin.reshape(&bshape)?);
    if inverse {
        s = s.neg()?;
    }
    let last = r as isize - 1;
    let (x1, x2) = (x.narrow(last, 0, d / 2)?, x.narrow(last, d / 2, d / 2)?);
    let y1 = x1.mul(&c)?.sub(&x2.mul(&s)?)?;
    let y2 = x2.mul(&c)?.add(&x1.mul(&s)?)?;
    Tensor::concat(&[&y1, &y2], last)
}
