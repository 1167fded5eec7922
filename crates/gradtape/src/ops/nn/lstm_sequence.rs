//! `lstm_sequence`: an LSTM layer's recurrence over a whole sequence as
//! one op, `LstmSequence`, with a fused backward op, `LstmSequenceGrad`
//! (as cuDNN's and PyTorch's CPU LSTM).
//!
//! Terms: the input projections `xw` (`[T, B, 4u]`, every step's `x W +
//! b`, computed by one product before the loop), the recurrent kernel `W`
//! (`[u, 4u]`) and the initial state `h₀`, `c₀` (`[B, u]`). Step `t` is
//!
//! ```text
//! z_t = xw_t + h_{t−1} W        (h_t, c_t) = lstm_cell(z_t, c_{t−1})
//! ```
//!
//! The composite (that loop of products, additions and `lstm_cell`s) stays
//! the definition; the op runs it in one call for `f32` and `f64` on the
//! CPU, with the same kernels (the product of [`gemm_raw`], the cell's
//! fused kernels), so its values are the composite's bits. What it saves is
//! the per-step work around the kernels: an eager tape's record, a node,
//! a cotangent, and for the backward pass the per-step products of the
//! recurrent kernel's gradient and their sum, which become one product
//! `dW = Σ_t h_{t−1}ᵀ dz_t` over all steps at once.
//!
//! - The op's output is **packed**, flat: all `h_t`, then all `c_t`, then
//!   all `z_t` (what the backward pass reads; a tape keeps the output and
//!   nothing else), recorded as `recurrence.rs` says: under a tape, one op
//!   whose outputs are the three parts, whose backward op reads an absent
//!   cotangent (of the `c_t` and `z_t` of a model that reads `h_t` alone)
//!   as zeros without a tensor of them. [`Tensor::lstm_sequence`] returns
//!   the first two parts.
//! - The VJP: with `dh_t = ḡh_t + dz_{t+1} Wᵀ` and `dc_t = ḡc_t +
//!   dc_prev(t+1)`, the cell's backward formula gives `dz_t` (plus the
//!   cotangent `ḡz_t` of the packed `z_t`) and `dc_prev(t)`, from the last
//!   step back; then `dxw = dz`, `dW = Σ h_{t−1}ᵀ dz_t`, `dh₀ = dz₀ Wᵀ`,
//!   `dc₀ = dc_prev(0)`: `LstmSequenceGrad`, one op (so a trace records
//!   it whole), on the parts and their cotangents.
//! - `LstmSequenceGrad`'s own VJP (a second order) is that loop
//!   differentiated by hand, forwards in time, with differentiable ops
//!   (the cell's backward op `LstmCellGrad` and its hand-written VJP), so
//!   higher orders work; the JVP is the composite's, step by step.
//! - Other dtypes and devices run the composite (a GPU, a graph traced on
//!   the CPU run on a GPU: the composite, packed).

use std::sync::Arc;

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::gemm_crates::Gemm;
use crate::kernels::cpu::workers::SendPtr;
use crate::kernels::cpu::{spare, uninit_buf};
use crate::ops::desc::NnOp;
use crate::ops::math::table::Lane;
use crate::ops::{bind, grads, tangent_or_zero};
use crate::tensor::alloc::try_filled;
use crate::tensor::dtype::with_types;
use crate::tensor::{DType, Element, Tensor};

use super::lstm_cell::{backward_into, forward_into, grad_vjp, jvp as cell_jvp, lstm_cell_grad_flat};
use super::recurrence::{
    add_opt, at, back_product, bind_packed, bind_sequence, cotangent, cotangents_or_markers, flat, kernel_grad,
    kernel_grad_ops, or_zeros, parts, present, shift, stack, step_product, transposed, Dims, GradFn,
};

const OP: &str = "lstm_sequence";
const GOP: &str = "lstm_sequence_grad";

impl Tensor {
    /// An LSTM's recurrence over a whole sequence, from the input
    /// projections `xw` (`[time, batch, 4u]`: each step's `x W + b`, in
    /// Keras's gate order `i, f, g, o`), the recurrent kernel (`[u, 4u]`)
    /// and the initial state `h0`, `c0` (`[batch, u]`): every step's
    /// output `h_t` and cell state `c_t`, each `[time, batch, u]`, where
    /// step `t` is `lstm_cell(xw_t + h_{t−1} W, c_{t−1})`
    /// ([`lstm_cell`](Tensor::lstm_cell)). One op each way for `f32` and
    /// `f64` on the CPU (the values are the loop's, bit for bit), the loop
    /// of ops otherwise; differentiable to any order, in both modes.
    ///
    /// ```
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let (t, b, u) = (5, 2, 3);
    /// let xw = rng.normal(&[t, b, 4 * u], 0.0, 1.0, DType::F64)?;
    /// let w = rng.normal(&[u, 4 * u], 0.0, 0.5, DType::F64)?;
    /// let (h0, c0) = (Tensor::zeros(&[b, u], DType::F64), Tensor::zeros(&[b, u], DType::F64));
    /// let (hs, cs) = Tensor::lstm_sequence(&xw, &w, &h0, &c0)?;
    /// assert_eq!(hs.shape(), &[t, b, u]);
    /// // the same as the loop of steps
    /// let (mut h, mut c) = (h0.clone(), c0.clone());
    /// for x in xw.unstack(0)? {
    ///     (h, c) = Tensor::lstm_cell(&x.add(&h.matmul(&w)?)?, &c)?;
    /// }
    /// assert_eq!(hs.narrow(0, t - 1, 1)?.reshape(&[b, u])?.to_vec::<f64>()?, h.to_vec::<f64>()?);
    /// assert_eq!(cs.narrow(0, t - 1, 1)?.reshape(&[b, u])?.to_vec::<f64>()?, c.to_vec::<f64>()?);
    /// // the state must be [batch, u]
    /// assert!(Tensor::lstm_sequence(&xw, &w, &Tensor::zeros(&[b, u + 1], DType::F64), &c0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn lstm_sequence(xw: &Tensor, recurrent: &Tensor, h0: &Tensor, c0: &Tensor) -> Result<(Tensor, Tensor)> {
        let (d, fused) = check(xw, recurrent, h0, c0)?;
        if !fused {
            let (hs, cs, _) = composite(xw, recurrent, h0, c0)?;
            return Ok((hs, cs));
        }
        let (out, grad) = fused_forward(xw, recurrent, h0, c0, d)?;
        let ps = bind_sequence(
            NnOp::LstmSequence,
            &[xw, recurrent, h0, c0],
            out,
            &shapes(d),
            grad,
            |t, packed| jvp(xw, recurrent, h0, c0, t, packed, d),
        )?;
        match ps.as_slice() {
            [h, c, _] => Ok((h.clone(), c.clone())),
            _ => Err(Error::invalid(OP, "the packed output did not split in three")),
        }
    }
}

/// The packed output's parts: all `h_t`, all `c_t`, all `z_t`.
fn shapes(d: Dims) -> [Vec<usize>; 3] {
    [d.shape(1), d.shape(1), d.shape(4)]
}

/// Checks shapes, dtypes and devices, and says whether the fused op
/// applies (`f32` or `f64` on the CPU, no empty dim).
fn check(xw: &Tensor, w: &Tensor, h0: &Tensor, c0: &Tensor) -> Result<(Dims, bool)> {
    crate::ops::expect_float(OP, xw)?;
    for x in [w, h0, c0] {
        crate::ops::expect_same_dtype(OP, xw, x)?;
    }
    let on_cpu = crate::kernels::gpu::placement(OP, &[xw, w, h0, c0])?.is_none();
    let (xs, ws, hs, cs) = (xw.shape(), w.shape(), h0.shape(), c0.shape());
    let ok = xs.len() == 3
        && ws.len() == 2
        && ws[0].checked_mul(4) == Some(ws[1])
        && xs[2] == ws[1]
        && hs == [xs[1], ws[0]]
        && cs == hs;
    if !ok || xs[0] == 0 {
        return Err(Error::invalid(
            OP,
            format!(
                "expected projections xw [time >= 1, batch, 4u], a recurrent kernel [u, 4u] and states h0, c0 \
                 [batch, u], got xw {} {xs:?}, kernel {ws:?}, h0 {hs:?}, c0 {cs:?}",
                xw.dtype()
            ),
        ));
    }
    let d = Dims {
        t: xs[0],
        b: xs[1],
        u: ws[0],
    };
    Ok((
        d,
        on_cpu && matches!(xw.dtype(), DType::F32 | DType::F64) && d.b * d.u > 0,
    ))
}

/// The definition, with differentiable ops: all `h_t`, all `c_t` and all
/// `z_t`, each stacked along a new first axis.
fn composite(xw: &Tensor, w: &Tensor, h0: &Tensor, c0: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let (mut h, mut c) = (h0.clone(), c0.clone());
    let (mut hs, mut cs, mut zs) = (vec![], vec![], vec![]);
    for x in xw.unstack(0)? {
        let z = x.add(&h.matmul(w)?)?;
        (h, c) = Tensor::lstm_cell(&z, &c)?;
        hs.push(h.clone());
        cs.push(c.clone());
        zs.push(z);
    }
    Ok((stack(&hs)?, stack(&cs)?, stack(&zs)?))
}

/// The fused forward op: `h`, `c`, `z` of every step, packed flat, for a
/// graph's node. Other devices and dtypes (a graph traced on the CPU run
/// on a GPU) compute the composite and pack it.
pub(crate) fn lstm_sequence_packed(xw: &Tensor, w: &Tensor, h0: &Tensor, c0: &Tensor) -> Result<Tensor> {
    let (d, fused) = check(xw, w, h0, c0)?;
    if !fused {
        let (hs, cs, zs) = composite(xw, w, h0, c0)?;
        return Tensor::concat(&[&flat(&hs)?, &flat(&cs)?, &flat(&zs)?], 0);
    }
    let (out, grad) = fused_forward(xw, w, h0, c0, d)?;
    Ok(bind_packed(
        NnOp::LstmSequence,
        &[xw, w, h0, c0],
        out,
        &shapes(d),
        grad,
        |t, packed| jvp(xw, w, h0, c0, t, packed, d),
    ))
}

/// The forward kernel's packed output on operands [`check`] found
/// fusable, and the op's gradient (from the parts and their cotangents).
fn fused_forward(xw: &Tensor, w: &Tensor, h0: &Tensor, c0: &Tensor, d: Dims) -> Result<(Tensor, GradFn)> {
    let out = with_types!(xw.dtype(), T => {
        let (x, wv, hv, cv) = (xw.values::<T>(OP)?, w.values::<T>(OP)?, h0.values::<T>(OP)?, c0.values::<T>(OP)?);
        Tensor::from_storage(T::buf_into_storage(forward::<T>(&x, &wv, &hv, &cv, d)?), &[6 * d.n()])
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"));
    let (wc, hc, cc) = (w.clone(), h0.clone(), c0.clone());
    let grad: GradFn = Arc::new(move |p, g| {
        if g.iter().all(Option::is_none) {
            return Ok(grads![None, None, None, None]);
        }
        let c = cotangents_or_markers(g, &p[0])?;
        let all = lstm_sequence_grad_flat(&wc, &hc, &cc, [&p[0], &p[1], &p[2]], [&c[0], &c[1], &c[2]])?;
        let [dxw, dw, dh0, dc0] = unpack_grads(&all, d)?;
        Ok(grads![Some(dxw), Some(dw), Some(dh0), Some(dc0)])
    });
    Ok((out, grad))
}

/// The forward kernel: the loop of the module docs, each step a product
/// into `z_t`, the projection added, then the cell's fused kernel.
fn forward<T: Lane + Element + Gemm>(xw: &[T], w: &[T], h0: &[T], c0: &[T], d: Dims) -> Result<crate::tensor::Buf<T>> {
    let (n, b, u) = (d.n(), d.b, d.u);
    let len = 6 * n;
    let mut out = uninit_buf::<T>(OP, len)?;
    let base = spare(&mut out)[..len].as_mut_ptr().cast::<T>();
    let step = b * u;
    for t in 0..d.t {
        // SAFETY: the parts of the buffer of `len` elements: `h` and `c`
        // of step `t` (written here) and of step `t − 1` (written before),
        // and `z_t`, each inside its third.
        unsafe {
            let (hp, cp): (*const T, *const T) = match t {
                0 => (h0.as_ptr(), c0.as_ptr()),
                _ => (base.add((t - 1) * step), base.add(n + (t - 1) * step)),
            };
            let z = base.add(2 * n + 4 * t * step);
            // z_t = h_{t−1} W + xw_t (the sum in the composite's order:
            // the product, then the addition of the projection)
            step_product((b, u, 4 * u), z, hp, w.as_ptr());
            let zs = std::slice::from_raw_parts_mut(z, 4 * step);
            for (z, &x) in zs.iter_mut().zip(&xw[4 * t * step..4 * (t + 1) * step]) {
                *z = x + *z;
            }
            let cprev = std::slice::from_raw_parts(cp, step);
            forward_into(
                zs,
                cprev,
                SendPtr(base.add(t * step)),
                SendPtr(base.add(n + t * step)),
                u,
            );
        }
    }
    // SAFETY: every step wrote its `h`, `c` and `z`.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// The fused backward op (`LstmSequenceGrad`): `dxw`, `dW`, `dh₀`, `dc₀`
/// flattened into one vector, from the recurrent kernel, the initial
/// state, the packed output's parts `[hs, cs, zs]` and their cotangents
/// (each the empty marker of an absent one).
pub(crate) fn lstm_sequence_grad_flat(
    w: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    p: [&Tensor; 3],
    g: [&Tensor; 3],
) -> Result<Tensor> {
    let [hs, cs, zs] = p;
    let ok = w.rank() == 2
        && hs.rank() == 3
        && w.shape()[0] > 0
        && w.shape()[1] == 4 * w.shape()[0]
        && hs.shape()[0] > 0
        && hs.shape()[2] == w.shape()[0]
        && h0.shape() == &hs.shape()[1..]
        && c0.shape() == h0.shape()
        && cs.shape() == hs.shape()
        && zs.shape() == [hs.shape()[0], hs.shape()[1], 4 * w.shape()[0]];
    if !ok {
        return Err(Error::invalid(
            GOP,
            format!(
                "expected a recurrent kernel [u, 4u], states h0, c0 [batch, u], outputs hs, cs [time >= 1, batch, u] \
                 and gates zs [time, batch, 4u], got {:?}, {:?}, {:?}, {:?}, {:?} and {:?}",
                w.shape(),
                h0.shape(),
                c0.shape(),
                hs.shape(),
                cs.shape(),
                zs.shape()
            ),
        ));
    }
    for x in [h0, c0, hs, cs, zs] {
        crate::ops::expect_same_dtype(GOP, w, x)?;
    }
    let cots = [
        cotangent(GOP, g[0], hs)?,
        cotangent(GOP, g[1], cs)?,
        cotangent(GOP, g[2], zs)?,
    ];
    let d = Dims {
        t: hs.shape()[0],
        b: hs.shape()[1],
        u: hs.shape()[2],
    };
    let fused = matches!(w.dtype(), DType::F32 | DType::F64)
        && d.b > 0
        && crate::kernels::gpu::placement(GOP, &present(&[w, h0, c0, hs, cs, zs], &cots))?.is_none();
    let out = if fused {
        with_types!(w.dtype(), T => {
            let (wv, hv, cv) = (w.values::<T>(GOP)?, h0.values::<T>(GOP)?, c0.values::<T>(GOP)?);
            let pv = [hs.values::<T>(GOP)?, cs.values::<T>(GOP)?, zs.values::<T>(GOP)?];
            let gv = cots.map(|c| c.map(|g| g.values::<T>(GOP)).transpose());
            let [gh, gc, gz] = gv;
            let (gh, gc, gz) = (gh?, gc?, gz?);
            let buf = backward::<T>(&wv, &hv, &cv, [&pv[0], &pv[1], &pv[2]], [gh.as_deref(), gc.as_deref(), gz.as_deref()], d)?;
            Tensor::from_storage(T::buf_into_storage(buf), &[grad_len(d)])
        }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"))
    } else {
        let s = steps_backward(w, h0, c0, p, cots, d)?;
        Tensor::concat(&[&flat(&s.dxw)?, &flat(&s.dw)?, &flat(&s.dh0)?, &flat(&s.dc0)?], 0)?
    };
    let ins = [w, h0, c0, hs, cs, zs, g[0], g[1], g[2]].map(Tensor::clone);
    Ok(bind(
        NnOp::LstmSequenceGrad,
        &[w, h0, c0, hs, cs, zs, g[0], g[1], g[2]],
        out,
        move |_| {
            vjp(move |a, _| {
                let [w, h0, c0, hs, cs, zs, gh, gc, gz] = &ins;
                let cots = [
                    cotangent(GOP, gh, hs)?,
                    cotangent(GOP, gc, cs)?,
                    cotangent(GOP, gz, zs)?,
                ];
                let g = grad_vjp_sequence(w, h0, c0, [hs, cs, zs], cots, &a[0], d)?;
                let [gw, gh0, gc0, ghs, gcs, gzs] = g.inputs;
                let [ggh, ggc, ggz] = g.cotangents;
                Ok(grads![
                    Some(gw),
                    Some(gh0),
                    Some(gc0),
                    Some(ghs),
                    Some(gcs),
                    Some(gzs),
                    ggh,
                    ggc,
                    ggz
                ])
            })
        },
    ))
}

/// Elements of `LstmSequenceGrad`'s output.
fn grad_len(d: Dims) -> usize {
    4 * d.n() + 4 * d.u * d.u + 2 * d.b * d.u
}

/// `dxw`, `dW`, `dh₀`, `dc₀` out of [`lstm_sequence_grad_flat`]'s vector
/// (or its cotangent), as views.
fn unpack_grads(all: &Tensor, d: Dims) -> Result<[Tensor; 4]> {
    let s = vec![d.b, d.u];
    let v = parts(all, &[d.shape(4), vec![d.u, 4 * d.u], s.clone(), s])?;
    Ok([v[0].clone(), v[1].clone(), v[2].clone(), v[3].clone()])
}

/// The backward kernel: the loop of the module docs from the last step
/// back, then the recurrent kernel's gradient as one product; an absent
/// cotangent (`None`) is zeros.
fn backward<T: Lane + Element + Gemm>(
    w: &[T],
    h0: &[T],
    c0: &[T],
    p: [&[T]; 3],
    g: [Option<&[T]>; 3],
    d: Dims,
) -> Result<crate::tensor::Buf<T>> {
    let (n, b, u) = (d.n(), d.b, d.u);
    let step = b * u;
    let len = grad_len(d);
    let mut out = uninit_buf::<T>(GOP, len)?;
    let base = spare(&mut out)[..len].as_mut_ptr().cast::<T>();
    let [hs, cs, zs] = p;
    let [ghs, gcs, gzs] = g;
    let mut dh = try_filled(GOP, step, T::zero())?;
    let mut dc = try_filled(GOP, step, T::zero())?;
    let mut dcp = try_filled(GOP, step, T::zero())?;
    let z4 = 4 * step;
    let wt = transposed(GOP, w, 4 * u)?;
    for t in (0..d.t).rev() {
        let later = t + 1 < d.t;
        let gh = ghs.map(|g| &g[t * step..(t + 1) * step]);
        // dh_t = ḡh_t + dz_{t+1} Wᵀ
        match gh {
            Some(g) => dh.copy_from_slice(g),
            None if !later => dh.fill(T::zero()),
            None => {}
        }
        // SAFETY: rows of the buffer of `len` elements: `dz_{t+1}`
        // (written by the previous iteration) read, `dz_t` written; the
        // product writes `dh`, which it does not read from.
        unsafe {
            if later {
                back_product(
                    (b, u, 4 * u),
                    dh.as_mut_ptr(),
                    gh.is_some(),
                    base.add((t + 1) * z4),
                    wt.as_ptr(),
                );
            }
            let cprev = if t == 0 { c0 } else { &cs[(t - 1) * step..t * step] };
            // dc_t = ḡc_t + dc_prev(t+1) (in the kernel; dcp is read
            // there before it is written, row by row); dz_t gets ḡz_t
            dc.copy_from_slice(&dcp);
            let dcs = match (gcs.map(|g| &g[t * step..(t + 1) * step]), later) {
                (Some(g), true) => (g, Some(&dc[..])),
                (Some(g), false) => (g, None),
                (None, _) => (&dc[..], None),
            };
            backward_into(
                &zs[t * z4..(t + 1) * z4],
                cprev,
                &dh,
                dcs,
                gzs.map(|g| &g[t * z4..(t + 1) * z4]),
                SendPtr(base.add(t * z4)),
                SendPtr(dcp.as_mut_ptr()),
                u,
            );
        }
    }
    // SAFETY: the parts after `dxw` (all of whose rows are written above):
    // `dW` (`u·4u`), `dh₀`, `dc₀` (`b·u` each), inside the `len` elements.
    unsafe {
        let (dw, dh0, dc0) = (
            base.add(4 * n),
            base.add(4 * n + 4 * u * u),
            base.add(4 * n + 4 * u * u + step),
        );
        // dh₀ = dz₀ Wᵀ, dc₀ = dc_prev(0)
        back_product((b, u, 4 * u), dh0, false, base, wt.as_ptr());
        std::ptr::copy_nonoverlapping(dcp.as_ptr(), dc0, step);
        // dW = h₀ᵀ dz₀ + Σ_{t ≥ 1} h_{t−1}ᵀ dz_t (one product over the steps)
        kernel_grad(d, 4 * u, dw, h0.as_ptr(), hs.as_ptr(), base);
        out.set_len(len);
    }
    Ok(out)
}

/// What the backward loop computes, with differentiable ops: the input
/// gradients, and per step the cotangents `dh_t`, `dc_t` it gave the cell
/// and its `dz_t` (for the second order).
struct Steps {
    dxw: Tensor,
    dw: Tensor,
    dh0: Tensor,
    dc0: Tensor,
    dh: Vec<Tensor>,
    dc: Vec<Tensor>,
    dz: Vec<Tensor>,
}

/// Step `t` of an optional `[T, ..]` cotangent.
fn step_of(g: Option<&Tensor>, t: usize) -> Result<Option<Tensor>> {
    g.map(|g| at(g, t)).transpose()
}

/// The backward pass of the module docs with differentiable ops (devices
/// and dtypes without the fused kernel; and the second order's replay),
/// from the parts and their cotangents (`None`: zeros).
fn steps_backward(
    w: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    p: [&Tensor; 3],
    g: [Option<&Tensor>; 3],
    d: Dims,
) -> Result<Steps> {
    let [_, cs, zs] = p;
    let [ghs, gcs, gzs] = g;
    let (mut dh, mut dc, mut dz) = (vec![], vec![], vec![]);
    let (mut carry_h, mut carry_c): (Option<Tensor>, Option<Tensor>) = (None, None);
    for t in (0..d.t).rev() {
        let dh_t = or_zeros(add_opt(step_of(ghs, t)?, carry_h)?, h0)?;
        let dc_t = or_zeros(add_opt(step_of(gcs, t)?, carry_c)?, c0)?;
        let cprev = if t == 0 { c0.clone() } else { at(cs, t - 1)? };
        let z = at(zs, t)?;
        let cell = lstm_cell_grad_flat(&z, &cprev, &Tensor::concat(&[&dh_t, &dc_t], 0)?)?;
        let dz_cell = cell.narrow(0, 0, z.numel())?.reshape(z.shape())?;
        let dz_t = match step_of(gzs, t)? {
            Some(g) => dz_cell.add(&g)?,
            None => dz_cell,
        };
        let dcp = cell.narrow(0, z.numel(), cprev.numel())?.reshape(cprev.shape())?;
        carry_h = Some(dz_t.matmul_with(w, false, true)?);
        carry_c = Some(dcp);
        dh.push(dh_t);
        dc.push(dc_t);
        dz.push(dz_t);
    }
    dh.reverse();
    dc.reverse();
    dz.reverse();
    let dxw = stack(&dz)?;
    let dw = kernel_grad_ops(h0, p[0], &dxw, d)?;
    let (dh0, dc0) = match (carry_h, carry_c) {
        (Some(h), Some(c)) => (h, c),
        _ => return Err(Error::invalid(OP, "the sequence has no steps")),
    };
    Ok(Steps {
        dxw,
        dw,
        dh0,
        dc0,
        dh,
        dc,
        dz,
    })
}

/// The cotangents the second order gives `LstmSequenceGrad`'s inputs:
/// `[W, h₀, c₀, hs, cs, zs]`, then those of the given cotangents.
struct SecondOrder {
    inputs: [Tensor; 6],
    cotangents: [Option<Tensor>; 3],
}

/// The VJP of the backward pass (a second order): the loop of
/// [`steps_backward`] differentiated by hand, forwards in time (the
/// carries flow from `dh₀`, `dc₀` to the last step), from the cotangent
/// `a` of `LstmSequenceGrad`'s flat output. With `ā` the cotangents of
/// the carries `dh_c(t) = dz_t Wᵀ` and `dc_c(t) = dc_prev(t)`, step `t`:
///
/// ```text
/// ādz_t = ā(dxw)_t + h_{t−1} ā(dW) + ā(dh_c(t)) W
/// ḡW += ā(dh_c(t))ᵀ dz_t          ḡh_{t−1} += dz_t ā(dW)ᵀ       ḡz̄_t = ādz_t
/// (ḡz_t, ḡc_{t−1}, [ādh_t; ādc_t]) = LstmCellGrad's VJP(ādz_t, ā(dc_c(t)))
/// ḡh̄_t = ādh_t   ḡc̄_t = ādc_t   ā(dh_c(t+1)) = ādh_t   ā(dc_c(t+1)) = ādc_t
/// ```
///
/// (`h̄`, `c̄`, `z̄` the cotangents of the parts), with differentiable ops.
fn grad_vjp_sequence(
    w: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    p: [&Tensor; 3],
    g: [Option<&Tensor>; 3],
    a: &Tensor,
    d: Dims,
) -> Result<SecondOrder> {
    let s = steps_backward(w, h0, c0, p, g, d)?;
    let [hs, cs, zs] = p;
    let [a_dxw, a_dw, mut a_h, mut a_c] = unpack_grads(a, d)?;
    let mut g_w: Option<Tensor> = None;
    let (mut g_hprev, mut g_cprev, mut g_z, mut g_gh, mut g_gc, mut g_gz) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in 0..d.t {
        let hprev = if t == 0 { h0.clone() } else { at(hs, t - 1)? };
        let cprev = if t == 0 { c0.clone() } else { at(cs, t - 1)? };
        let dz = &s.dz[t];
        let a_dz = at(&a_dxw, t)?.add(&hprev.matmul(&a_dw)?)?.add(&a_h.matmul(w)?)?;
        g_w = add_opt(g_w, Some(a_h.matmul_with(dz, true, false)?))?;
        g_hprev.push(dz.matmul_with(&a_dw, false, true)?);
        g_gz.push(a_dz.clone());
        let cot = Tensor::concat(&[&s.dh[t], &s.dc[t]], 0)?;
        let [gz, gcp, gcot] = grad_vjp(&at(zs, t)?, &cprev, &cot, &a_dz, &a_c)?;
        g_z.push(gz);
        g_cprev.push(gcp);
        let (adh, adc) = (gcot.narrow(0, 0, d.b)?, gcot.narrow(0, d.b, d.b)?);
        g_gh.push(adh.clone());
        g_gc.push(adc.clone());
        a_h = adh;
        a_c = adc;
    }
    // h_{t−1} and c_{t−1} for t ≥ 1 are the parts' h_0 .. h_{T−2}
    let ((g_h0, g_hs), (g_c0, g_cs)) = (shift(&g_hprev)?, shift(&g_cprev)?);
    let g_w = g_w.ok_or_else(|| Error::invalid(OP, "the sequence has no steps"))?;
    let given = |c: Option<&Tensor>, v: &[Tensor]| c.map(|_| stack(v)).transpose();
    Ok(SecondOrder {
        inputs: [g_w, g_h0, g_c0, g_hs, g_cs, stack(&g_z)?],
        cotangents: [given(g[0], &g_gh)?, given(g[1], &g_gc)?, given(g[2], &g_gz)?],
    })
}

/// The JVP: the packed tangent of every step's `h`, `c` and `z`, step by
/// step with the cell's JVP.
fn jvp(
    xw: &Tensor,
    w: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    t: &[Option<Tensor>],
    packed: &Tensor,
    d: Dims,
) -> Result<Tensor> {
    let ps = parts(packed, &shapes(d))?;
    let (hs, cs, zs) = (&ps[0], &ps[1], &ps[2]);
    let txw = tangent_or_zero(&t[0], xw)?;
    let mut th = tangent_or_zero(&t[2], h0)?;
    let mut tc = tangent_or_zero(&t[3], c0)?;
    let (mut ths, mut tcs, mut tzs) = (vec![], vec![], vec![]);
    for s in 0..d.t {
        let mut tz = at(&txw, s)?.add(&th.matmul(w)?)?;
        if let Some(tw) = &t[1] {
            let hprev = if s == 0 { h0.clone() } else { at(hs, s - 1)? };
            tz = tz.add(&hprev.matmul(tw)?)?;
        }
        let cprev = if s == 0 { c0.clone() } else { at(cs, s - 1)? };
        let tp = cell_jvp(&at(zs, s)?, &cprev, &[Some(tz.clone()), Some(tc)])?;
        th = tp.narrow(0, 0, d.b)?;
        tc = tp.narrow(0, d.b, d.b)?;
        ths.push(th.clone());
        tcs.push(tc.clone());
        tzs.push(tz);
    }
    Tensor::concat(
        &[&flat(&stack(&ths)?)?, &flat(&stack(&tcs)?)?, &flat(&stack(&tzs)?)?],
        0,
    )
}
