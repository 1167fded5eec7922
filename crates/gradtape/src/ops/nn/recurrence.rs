//! What the fused recurrences, `lstm_sequence` and `gru_sequence`, share:
//! their dimensions, the packed output's parts, the marker of an absent
//! cotangent, the products of their step loops (each step's `h W`, the
//! backward pass's `dz Wᵀ` with `Wᵀ` transposed once, the kernel's
//! gradient as one product over all steps) and how the op is recorded.
//!
//! **Recording.** A recurrence's output is one packed vector (its parts:
//! every step's outputs and what the backward pass reads), computed by one
//! kernel. Under a tape (and no forward accumulator) the tape records one
//! op whose outputs are the *parts* (views of the packed vector), with a
//! rule told which parts got no cotangent ([`bind_sequence`]): the usual
//! case, a model reading the outputs `h` alone, gets no zeros for the
//! other parts and no concatenation of them. Its backward op takes the
//! parts and one cotangent per part, an absent one given as the marker
//! [`absent`] (an empty vector), which its kernel reads as zeros. A trace
//! sees the packed op and the parts' slices (its graph runs the op again);
//! forward mode (which this form of rule does not serve) and calls with
//! nothing differentiating bind the packed op with its JVP and take the
//! parts as views.

use std::sync::Arc;

use crate::dispatch::{self, vjp, Grads, Kind, Operands};
use crate::error::{Error, Result};
use crate::kernels::cpu::gemm_crates::Gemm;
use crate::kernels::cpu::matmul::gemm_raw;
use crate::ops::bind_jvp;
use crate::ops::desc::NnOp;
use crate::ops::math::table::Lane;
use crate::tensor::{Element, Tensor};

/// A checked problem: `t` steps of a batch of `b`, `u` units.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub t: usize,
    pub b: usize,
    pub u: usize,
}

impl Dims {
    /// Elements of all `h_t`.
    pub fn n(&self) -> usize {
        self.t * self.b * self.u
    }

    /// `[T, B, k·u]`, the shape of a part `k` states wide.
    pub fn shape(&self, k: usize) -> Vec<usize> {
        vec![self.t, self.b, k * self.u]
    }
}

/// `t` as a vector (the packed layouts' parts).
pub(super) fn flat(t: &Tensor) -> Result<Tensor> {
    t.reshape(&[t.numel()])
}

/// The steps' tensors `v` stacked along a new first axis.
pub(super) fn stack(v: &[Tensor]) -> Result<Tensor> {
    Tensor::stack(&v.iter().collect::<Vec<_>>(), 0)
}

/// Step `t` of a `[T, ..]` tensor.
pub(super) fn at(x: &Tensor, t: usize) -> Result<Tensor> {
    x.narrow(0, t, 1)?.squeeze(&[0])
}

/// `a + b` where either may be a symbolic zero (`None`).
pub(super) fn add_opt(a: Option<Tensor>, b: Option<Tensor>) -> Result<Option<Tensor>> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(a.add(&b)?),
        (a, b) => a.or(b),
    })
}

/// `x`, or zeros shaped as `like` for a symbolic zero.
pub(super) fn or_zeros(x: Option<Tensor>, like: &Tensor) -> Result<Tensor> {
    x.map_or_else(|| like.try_zeros_like(), Ok)
}

/// The marker of a part that got no cotangent: an empty vector of the
/// parts' dtype, on their device.
pub(super) fn absent(like: &Tensor) -> Result<Tensor> {
    Tensor::zeros_on(&[0], like.dtype(), like.device())
}

/// The cotangent `g` of `part`: `None` for the marker [`absent`], else `g`
/// checked to be the part's shape and dtype.
pub(super) fn cotangent<'a>(op: &'static str, g: &'a Tensor, part: &Tensor) -> Result<Option<&'a Tensor>> {
    if g.shape() == [0] && part.rank() != 1 {
        return Ok(None);
    }
    if g.shape() != part.shape() || g.dtype() != part.dtype() {
        return Err(Error::invalid(
            op,
            format!(
                "a cotangent must be shaped as its part, {} {:?} (or the empty marker [0] of an absent one), got {} {:?}",
                part.dtype(),
                part.shape(),
                g.dtype(),
                g.shape()
            ),
        ));
    }
    Ok(Some(g))
}

/// `inputs` and the cotangents that are given (the markers hold no
/// values, so they have no device to agree on).
pub(super) fn present<'a>(inputs: &[&'a Tensor], cots: &[Option<&'a Tensor>]) -> Vec<&'a Tensor> {
    inputs.iter().copied().chain(cots.iter().flatten().copied()).collect()
}

/// The cotangents as the backward op takes them: one per part, the marker
/// for those that got none.
pub(super) fn cotangents_or_markers(cots: &[Option<Tensor>], like: &Tensor) -> Result<Vec<Tensor>> {
    cots.iter()
        .map(|c| c.clone().map_or_else(|| absent(like), Ok))
        .collect()
}

/// The parts of `packed`, each a view shaped as in `shapes` (laid out one
/// after the other).
pub(super) fn parts(packed: &Tensor, shapes: &[Vec<usize>]) -> Result<Vec<Tensor>> {
    let mut start = 0;
    shapes
        .iter()
        .map(|s| {
            let n: usize = s.iter().product();
            let part = packed.narrow(0, start, n)?.reshape(s)?;
            start += n;
            Ok(part)
        })
        .collect()
}

/// A recurrence's gradient: the inputs' cotangents from its parts and one
/// cotangent per part (`None`: none).
pub(super) type GradFn = Arc<dyn Fn(&[Tensor], &[Option<Tensor>]) -> Result<Grads> + Send + Sync>;

/// Binds a recurrence's packed output `out` of `op` on `inputs` and
/// returns its parts (shaped as `shapes`), as the module docs say: under
/// a tape alone, one recorded op whose outputs are the parts and whose
/// rule passes `grad` the cotangents that exist; otherwise the packed op
/// with its JVP `jvp` and `grad` as its rule, and views of it.
pub(super) fn bind_sequence(
    op: NnOp,
    inputs: &[&Tensor],
    out: Tensor,
    shapes: &[Vec<usize>],
    grad: GradFn,
    jvp: impl Fn(&[Option<Tensor>], &Tensor) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    if dispatch::differentiating() && !dispatch::listens(Kind::Forward) {
        // a trace records the packed op and the slices; the tapes do not
        let ps = dispatch::paused(Kind::Tape, || {
            parts(&crate::ops::bind_nondiff(op.clone(), inputs, out), shapes)
        })?;
        let saved = ps.clone();
        let mut make = move || {
            let (dense_parts, dense_grad) = (saved.clone(), grad.clone());
            let (parts, grad) = (saved.clone(), grad.clone());
            vjp(move |g, _| {
                let cots: Vec<Option<Tensor>> = g.iter().cloned().map(Some).collect();
                dense_grad(&dense_parts, &cots)
            })
            .with_optional(move |g, _| grad(&parts, g))
        };
        dispatch::bind_untraced(op.name(), Operands::Tensors(inputs), &ps, &mut make, None);
        return Ok(ps);
    }
    parts(&bind_packed(op, inputs, out, shapes, grad, jvp), shapes)
}

/// Binds a recurrence's packed output `out` as one op with the JVP `jvp`
/// and, as its rule, `grad` on its parts and the parts of its cotangent
/// (every part gets one): the packed op of a graph's node, and of calls
/// under forward mode.
pub(super) fn bind_packed(
    op: NnOp,
    inputs: &[&Tensor],
    out: Tensor,
    shapes: &[Vec<usize>],
    grad: GradFn,
    jvp: impl Fn(&[Option<Tensor>], &Tensor) -> Result<Tensor>,
) -> Tensor {
    let shapes = shapes.to_vec();
    bind_jvp(
        op,
        inputs,
        out,
        move |packed| {
            let p = packed.clone();
            vjp(move |g, _| {
                let cots: Vec<Option<Tensor>> = parts(&g[0], &shapes)?.into_iter().map(Some).collect();
                grad(&parts(&p, &shapes)?, &cots)
            })
        },
        jvp,
    )
}

/// `Wᵀ` of a row-major `u × width` kernel, row-major (each step's product
/// with it then reads it in place: a transposed operand would be packed
/// again at every step).
pub(super) fn transposed<T: Lane + Element>(op: &'static str, w: &[T], width: usize) -> Result<Vec<T>> {
    let u = w.len() / width;
    let mut wt = crate::tensor::alloc::try_filled(op, w.len(), T::zero())?;
    for (j, row) in w.chunks_exact(width).enumerate() {
        for (k, &x) in row.iter().enumerate() {
            wt[k * u + j] = x;
        }
    }
    Ok(wt)
}

/// `f` (a step's product) split over the threads as eagerly, in a
/// compiled run too (see `kernels::cpu::sgemm::eager_bound`): the same
/// speed, and the same sums, traced as eager.
fn as_eagerly<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::cpu::sgemm::eager_bound(f);
    #[cfg(not(target_arch = "x86_64"))]
    f()
}

/// `out = (acc ? out : 0) + a b` of row-major matrices (`a` `[m, k]`, `b`
/// `[k, n]`, `out` `[m, n]`), split over the threads as eagerly.
///
/// # Safety
/// The pointers hold those matrices; `out` overlaps neither operand.
unsafe fn product<T: Gemm>((m, n, k): (usize, usize, usize), out: *mut T, acc: bool, a: *const T, b: *const T) {
    // SAFETY: as the caller vouches.
    as_eagerly(|| unsafe {
        gemm_raw::<T>(
            (m, n, k),
            out,
            (n as isize, 1),
            acc,
            a,
            (k as isize, 1),
            b,
            (n as isize, 1),
            true,
        )
    })
}

/// `out = h W` for one step (`h` `[b, u]`, `W` `[u, width]`, `out` `[b,
/// width]`, all row-major): the product the composite's `matmul` makes.
///
/// # Safety
/// The pointers hold those matrices; `out` overlaps neither operand.
pub(super) unsafe fn step_product<T: Gemm>(
    (b, u, width): (usize, usize, usize),
    out: *mut T,
    h: *const T,
    w: *const T,
) {
    // SAFETY: as the caller vouches.
    unsafe { product((b, width, u), out, false, h, w) }
}

/// `dh = (acc ? dh : 0) + dz Wᵀ` for one step (`dz` `[b, width]`, `wt`
/// from [`transposed`], `dh` `[b, u]`).
///
/// # Safety
/// The pointers hold those matrices; `dh` overlaps neither operand.
pub(super) unsafe fn back_product<T: Gemm>(
    (b, u, width): (usize, usize, usize),
    dh: *mut T,
    acc: bool,
    dz: *const T,
    wt: *const T,
) {
    // SAFETY: as the caller vouches.
    unsafe { product((b, u, width), dh, acc, dz, wt) }
}

/// The recurrent kernel's gradient `dW = h₀ᵀ dz₀ + Σ_{t ≥ 1} h_{t−1}ᵀ dz_t`
/// (`[u, width]`), one product over the steps: `hs` all `h_t` (`[T, b,
/// u]`), `dz` all `dz_t` (`[T, b, width]`).
///
/// # Safety
/// The pointers hold those arrays; `dw` overlaps none of them.
pub(super) unsafe fn kernel_grad<T: Gemm>(d: Dims, width: usize, dw: *mut T, h0: *const T, hs: *const T, dz: *const T) {
    let (b, u) = (d.b, d.u);
    // SAFETY: as the caller vouches: `h₀` is `b × u`, `hs` and `dz` hold
    // `t` steps of `b` rows.
    unsafe {
        gemm_raw::<T>(
            (u, width, b),
            dw,
            (width as isize, 1),
            false,
            h0,
            (1, u as isize),
            dz,
            (width as isize, 1),
            true,
        );
        if d.t > 1 {
            gemm_raw::<T>(
                (u, width, (d.t - 1) * b),
                dw,
                (width as isize, 1),
                true,
                hs,
                (1, u as isize),
                dz.add(b * width),
                (width as isize, 1),
                true,
            );
        }
    }
}

/// `h_{t−1}` for every step, `[T, b, u]`: `h₀`, then all `h_t` but the
/// last (what the kernel's gradient multiplies, with differentiable ops).
pub(super) fn previous(h0: &Tensor, hs: &Tensor, d: Dims) -> Result<Tensor> {
    Tensor::concat(&[&h0.reshape(&[1, d.b, d.u])?, &hs.narrow(0, 0, d.t - 1)?], 0)
}

/// `dW = Σ_t h_{t−1}ᵀ dz_t` with differentiable ops (`dz` `[T, b, width]`).
pub(super) fn kernel_grad_ops(h0: &Tensor, hs: &Tensor, dz: &Tensor, d: Dims) -> Result<Tensor> {
    let width = dz.shape()[2];
    previous(h0, hs, d)?
        .reshape(&[d.t * d.b, d.u])?
        .matmul_with(&dz.reshape(&[d.t * d.b, width])?, true, false)
}

/// The cotangents of every step's `h_{t−1}` (`v[t]`, `[b, u]`) as the
/// cotangent of `h₀` (`v[0]`) and of the part of all `h_t` (`v[1..]`, then
/// zeros for the last step, which no step reads).
pub(super) fn shift(v: &[Tensor]) -> Result<(Tensor, Tensor)> {
    let first = v
        .first()
        .ok_or_else(|| Error::invalid("recurrence", "the sequence has no steps"))?;
    let mut rest: Vec<Tensor> = v[1..].to_vec();
    rest.push(first.try_zeros_like()?);
    Ok((first.clone(), stack(&rest)?))
}
