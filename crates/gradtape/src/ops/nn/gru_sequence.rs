//! `gru_sequence`: a GRU layer's recurrence over a whole sequence as one
//! op, `GruSequence`, with a fused backward op, `GruSequenceGrad` (as
//! `lstm_sequence` for the LSTM: the same recording, products and packed
//! parts, `recurrence.rs`).
//!
//! Terms: Keras's GRU with `reset_after=True` (the only form of
//! [`GRUCell`](crate::nn::GRUCell)): the input projections `xw` (`[T, B,
//! 3u]`, every step's `x W + b_in`, gates update `z`, reset `r`, candidate
//! `h̃`), the recurrent kernel `R` (`[u, 3u]`), the recurrent bias `b`
//! (`[3u]`) and the initial state `h₀` (`[B, u]`). Step `t` is
//!
//! ```text
//! m = h_{t−1} R + b          z = σ(xw_z + m_z)     r = σ(xw_r + m_r)
//! h̃ = tanh(xw_h + r·m_h)     h_t = z·h_{t−1} + (1 − z)·h̃
//! ```
//!
//! The composite (that step with differentiable ops, [`gru_step`], which
//! the cell's own step is) stays the definition; the op runs it in one call
//! for `f32` and `f64` on the CPU with the same kernels (the product of
//! `gemm_raw`, the vectorised sigmoid and tanh, the sums and products in
//! the composite's order), so its values are the composite's bits.
//!
//! - The output is **packed**, flat: all `h_t` (`[T, B, u]`), then every
//!   step's `[z, r, h̃, m_h]` (`[T, B, 4u]`), what the backward pass reads.
//! - The VJP, from the last step back, with `D_t = ḡh_t + D_{t+1}·z_{t+1}
//!   + dm_{t+1} Rᵀ` the cotangent of `h_t`:
//!
//!   ```text
//!   dz = D·(h_{t−1} − h̃)    dh̃ = D·(1 − z)    dp_h = dh̃·(1 − h̃²)
//!   dr = dp_h·m_h           dp_z = dz·z(1 − z)  dp_r = dr·r(1 − r)
//!   dxw_t = [dp_z, dp_r, dp_h]     dm_t = [dp_z, dp_r, dp_h·r]
//!   ```
//!
//!   (each of `dz`, `dr`, `dh̃`, `dm_h` plus the cotangent of its packed
//!   part, when that part got one); then `dR = Σ h_{t−1}ᵀ dm_t` (one
//!   product), `db = Σ dm_t` over steps and rows, `dh₀ = D₀·z₀ + dm₀ Rᵀ`:
//!   `GruSequenceGrad`, one op.
//! - `GruSequenceGrad`'s own VJP (a second order) is that loop
//!   differentiated by hand, forwards in time, with differentiable ops
//!   (`gru_steps.rs`), so higher orders work; the JVP is the composite's,
//!   step by step.
//! - Other dtypes and devices run the composite.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::kernels::cpu::gemm_crates::Gemm;
use crate::kernels::cpu::workers::{self, SendPtr};
use crate::kernels::cpu::{spare, uninit_buf};
use crate::ops::desc::{NnOp, Unary};
use crate::ops::grads;
use crate::ops::math::table::{unary_run, Lane};
use crate::tensor::alloc::try_filled;
use crate::tensor::dtype::with_types;
use crate::tensor::{DType, Element, Tensor};

use super::gru_steps::{composite, grad_vjp_sequence, jvp, steps_backward};
use super::recurrence::{
    back_product, bind_packed, bind_sequence, cotangent, cotangents_or_markers, flat, kernel_grad, parts, present,
    step_product, transposed, Dims, GradFn,
};

pub(crate) use super::gru_steps::gru_step;

const OP: &str = "gru_sequence";
const GOP: &str = "gru_sequence_grad";

/// Elements of a row handled at a time (the gates' values on the stack).
const RUN: usize = 64;

/// State elements a parallel task takes at least.
const TASK: usize = 1024;

impl Tensor {
    /// A GRU's recurrence over a whole sequence (Keras's `reset_after=True`
    /// cell, as [`GRUCell`](crate::nn::GRUCell)), from the input
    /// projections `xw` (`[time, batch, 3u]`: each step's `x W + b_in`, in
    /// Keras's gate order update, reset, candidate), the recurrent kernel
    /// (`[u, 3u]`), the recurrent bias (`[3u]`) and the initial state `h0`
    /// (`[batch, u]`): every step's output `h_t`, `[time, batch, u]`, where
    /// with `m = h_{t−1} R + b`, `z = σ(xw_z + m_z)`, `r = σ(xw_r + m_r)`
    /// and `h̃ = tanh(xw_h + r·m_h)`, `h_t = z·h_{t−1} + (1 − z)·h̃`. One op
    /// each way for `f32` and `f64` on the CPU (the values are the loop's,
    /// bit for bit), the loop of ops otherwise; differentiable to any
    /// order, in both modes.
    ///
    /// ```
    /// use gradtape::{DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let (t, b, u) = (5, 2, 3);
    /// let xw = rng.normal(&[t, b, 3 * u], 0.0, 1.0, DType::F64)?;
    /// let r = rng.normal(&[u, 3 * u], 0.0, 0.5, DType::F64)?;
    /// let bias = rng.normal(&[3 * u], 0.0, 0.1, DType::F64)?;
    /// let h0 = Tensor::zeros(&[b, u], DType::F64);
    /// let hs = Tensor::gru_sequence(&xw, &r, &bias, &h0)?;
    /// assert_eq!(hs.shape(), &[t, b, u]);
    /// // the same as the loop of steps
    /// let mut h = h0.clone();
    /// for x in xw.unstack(0)? {
    ///     let mx = x.split(3, -1)?;
    ///     let mh = h.matmul(&r)?.bias_add(&bias)?.split(3, -1)?;
    ///     let z = mx[0].add(&mh[0])?.sigmoid()?;
    ///     let g = mx[1].add(&mh[1])?.sigmoid()?;
    ///     let hh = mx[2].add(&g.mul(&mh[2])?)?.tanh()?;
    ///     h = z.mul(&h)?.add(&z.neg()?.add_scalar(1.0)?.mul(&hh)?)?;
    /// }
    /// assert_eq!(hs.narrow(0, t - 1, 1)?.reshape(&[b, u])?.to_vec::<f64>()?, h.to_vec::<f64>()?);
    /// // the bias must be [3u]
    /// assert!(Tensor::gru_sequence(&xw, &r, &Tensor::zeros(&[u], DType::F64), &h0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gru_sequence(xw: &Tensor, recurrent: &Tensor, recurrent_bias: &Tensor, h0: &Tensor) -> Result<Tensor> {
        let (d, fused) = check(xw, recurrent, recurrent_bias, h0)?;
        if !fused {
            return Ok(composite(xw, recurrent, recurrent_bias, h0)?.0);
        }
        let (out, grad) = fused_forward(xw, recurrent, recurrent_bias, h0, d)?;
        let ps = bind_sequence(
            NnOp::GruSequence,
            &[xw, recurrent, recurrent_bias, h0],
            out,
            &shapes(d),
            grad,
            |t, packed| jvp(xw, recurrent, h0, t, packed, d),
        )?;
        ps.into_iter()
            .next()
            .ok_or_else(|| Error::invalid(OP, "the packed output has no parts"))
    }
}

/// The packed output's parts: all `h_t`, every step's `[z, r, h̃, m_h]`.
fn shapes(d: Dims) -> [Vec<usize>; 2] {
    [d.shape(1), d.shape(4)]
}

/// Checks shapes, dtypes and devices, and says whether the fused op
/// applies (`f32` or `f64` on the CPU, no empty dim).
fn check(xw: &Tensor, w: &Tensor, bias: &Tensor, h0: &Tensor) -> Result<(Dims, bool)> {
    crate::ops::expect_float(OP, xw)?;
    for x in [w, bias, h0] {
        crate::ops::expect_same_dtype(OP, xw, x)?;
    }
    let on_cpu = crate::kernels::gpu::placement(OP, &[xw, w, bias, h0])?.is_none();
    let (xs, ws, bs, hs) = (xw.shape(), w.shape(), bias.shape(), h0.shape());
    let ok = xs.len() == 3
        && ws.len() == 2
        && ws[0].checked_mul(3) == Some(ws[1])
        && xs[2] == ws[1]
        && bs == [ws[1]]
        && hs == [xs[1], ws[0]];
    if !ok || xs[0] == 0 {
        return Err(Error::invalid(
            OP,
            format!(
                "expected projections xw [time >= 1, batch, 3u], a recurrent kernel [u, 3u], a recurrent bias [3u] \
                 and a state h0 [batch, u], got xw {} {xs:?}, kernel {ws:?}, bias {bs:?}, h0 {hs:?}",
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

/// The fused forward op: its packed output (other devices and dtypes, a
/// graph traced on the CPU run on a GPU, compute the composite and pack
/// it), for a graph's node.
pub(crate) fn gru_sequence_packed(xw: &Tensor, w: &Tensor, bias: &Tensor, h0: &Tensor) -> Result<Tensor> {
    let (d, fused) = check(xw, w, bias, h0)?;
    if !fused {
        let (hs, gs) = composite(xw, w, bias, h0)?;
        return Tensor::concat(&[&flat(&hs)?, &flat(&gs)?], 0);
    }
    let (out, grad) = fused_forward(xw, w, bias, h0, d)?;
    Ok(bind_packed(
        NnOp::GruSequence,
        &[xw, w, bias, h0],
        out,
        &shapes(d),
        grad,
        |t, packed| jvp(xw, w, h0, t, packed, d),
    ))
}

/// The forward kernel's packed output on operands [`check`] found
/// fusable, and the op's gradient (from the parts and their cotangents).
fn fused_forward(xw: &Tensor, w: &Tensor, bias: &Tensor, h0: &Tensor, d: Dims) -> Result<(Tensor, GradFn)> {
    let out = with_types!(xw.dtype(), T => {
        let (x, wv, bv, hv) = (xw.values::<T>(OP)?, w.values::<T>(OP)?, bias.values::<T>(OP)?, h0.values::<T>(OP)?);
        Tensor::from_storage(T::buf_into_storage(forward::<T>(&x, &wv, &bv, &hv, d)?), &[5 * d.n()])
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"));
    let (wc, hc) = (w.clone(), h0.clone());
    let grad: GradFn = Arc::new(move |p, g| {
        if g.iter().all(Option::is_none) {
            return Ok(grads![None, None, None, None]);
        }
        let c = cotangents_or_markers(g, &p[0])?;
        let [dxw, dw, db, dh0] = unpack_grads(&gru_sequence_grad_flat(&wc, &hc, &p[0], &p[1], &c[0], &c[1])?, d)?;
        Ok(grads![Some(dxw), Some(dw), Some(db), Some(dh0)])
    });
    Ok((out, grad))
}

/// The forward kernel: per step the product `h_{t−1} R`, then the gates
/// (the module docs' loop).
fn forward<T: Lane + Element + Gemm>(
    xw: &[T],
    w: &[T],
    bias: &[T],
    h0: &[T],
    d: Dims,
) -> Result<crate::tensor::Buf<T>> {
    let (n, b, u) = (d.n(), d.b, d.u);
    let len = 5 * n;
    let mut out = uninit_buf::<T>(OP, len)?;
    let base = spare(&mut out)[..len].as_mut_ptr().cast::<T>();
    let step = b * u;
    let mut m = try_filled(OP, 3 * step, T::zero())?;
    for t in 0..d.t {
        // SAFETY: inside the buffer of `len` elements: `h` of step `t − 1`
        // (written before) read, `h` and the gates of step `t` written.
        unsafe {
            let hp: *const T = if t == 0 { h0.as_ptr() } else { base.add((t - 1) * step) };
            step_product((b, u, 3 * u), m.as_mut_ptr(), hp, w.as_ptr());
            cell_forward(
                &xw[3 * t * step..3 * (t + 1) * step],
                &m,
                bias,
                std::slice::from_raw_parts(hp, step),
                SendPtr(base.add(t * step)),
                SendPtr(base.add(n + 4 * t * step)),
                u,
            );
        }
    }
    // SAFETY: every step wrote its `h` and its gates.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// Rows per parallel task.
fn rows_per_task(u: usize) -> usize {
    TASK.div_ceil(u).max(1)
}

/// One step's gates and output from the projection `xw` and the product
/// `m = h_{t−1} R` (`[b, 3u]` each) and `h_{t−1}` (`hp`): `h` (`[b, u]`)
/// and `[z, r, h̃, m_h]` (`[b, 4u]`), rows split over the compute threads.
///
/// # Safety
/// `h` and `g` point to `hp.len()` and `4·hp.len()` writable elements,
/// overlapping nothing the kernel reads.
unsafe fn cell_forward<T: Lane + Element>(
    xw: &[T],
    m: &[T],
    bias: &[T],
    hp: &[T],
    h: SendPtr<T>,
    g: SendPtr<T>,
    u: usize,
) {
    let rows = hp.len() / u;
    let per = rows_per_task(u);
    let one = T::one();
    workers::parallel_for(rows.div_ceil(per), |task| {
        let (mut pz, mut pr, mut ph, mut mh) = ([T::zero(); RUN], [T::zero(); RUN], [T::zero(); RUN], [T::zero(); RUN]);
        for row in task * per..((task + 1) * per).min(rows) {
            let (xr, mr, hr) = (
                &xw[row * 3 * u..(row + 1) * 3 * u],
                &m[row * 3 * u..(row + 1) * 3 * u],
                &hp[row * u..(row + 1) * u],
            );
            // SAFETY: row `row` of each output is written by this task
            // alone, inside the elements the caller vouches for.
            let (h, g) = unsafe {
                (
                    std::slice::from_raw_parts_mut(h.get().add(row * u), u),
                    std::slice::from_raw_parts_mut(g.get().add(row * 4 * u), 4 * u),
                )
            };
            let (z, rest) = g.split_at_mut(u);
            let (r, rest) = rest.split_at_mut(u);
            let (hh, mhs) = rest.split_at_mut(u);
            for j in (0..u).step_by(RUN) {
                let n = RUN.min(u - j);
                // the composite's sums: xw + (h R + b)
                for k in 0..n {
                    let i = j + k;
                    pz[k] = xr[i] + (mr[i] + bias[i]);
                    pr[k] = xr[u + i] + (mr[u + i] + bias[u + i]);
                    mh[k] = mr[2 * u + i] + bias[2 * u + i];
                }
                unary_run(&Unary::Sigmoid, &pz[..n], &mut z[j..j + n]);
                unary_run(&Unary::Sigmoid, &pr[..n], &mut r[j..j + n]);
                for k in 0..n {
                    ph[k] = xr[2 * u + j + k] + r[j + k] * mh[k];
                }
                unary_run(&Unary::Tanh, &ph[..n], &mut hh[j..j + n]);
                mhs[j..j + n].copy_from_slice(&mh[..n]);
            }
            // z·h + (1 − z)·h̃
            for (((h, &z), &hp), &hh) in h.iter_mut().zip(&*z).zip(hr).zip(&*hh) {
                *h = z * hp + (one - z) * hh;
            }
        }
    });
}

/// The fused backward op (`GruSequenceGrad`): `dxw`, `dR`, `db`, `dh₀`
/// flattened into one vector, from the recurrent kernel, the initial
/// state, the packed output's parts (all `h_t`, all gates `gs`) and their
/// cotangents `gh`, `gg` (either the empty marker of an absent one).
pub(crate) fn gru_sequence_grad_flat(
    w: &Tensor,
    h0: &Tensor,
    hs: &Tensor,
    gs: &Tensor,
    gh: &Tensor,
    gg: &Tensor,
) -> Result<Tensor> {
    let ok = w.rank() == 2
        && hs.rank() == 3
        && w.shape()[0] > 0
        && w.shape()[1] == 3 * w.shape()[0]
        && hs.shape()[0] > 0
        && hs.shape()[2] == w.shape()[0]
        && h0.shape() == &hs.shape()[1..]
        && gs.shape() == [hs.shape()[0], hs.shape()[1], 4 * w.shape()[0]];
    if !ok {
        return Err(Error::invalid(
            GOP,
            format!(
                "expected a recurrent kernel [u, 3u], a state h0 [batch, u], outputs [time >= 1, batch, u] and gates \
                 [time, batch, 4u], got {:?}, {:?}, {:?} and {:?}",
                w.shape(),
                h0.shape(),
                hs.shape(),
                gs.shape()
            ),
        ));
    }
    for x in [h0, hs, gs] {
        crate::ops::expect_same_dtype(GOP, w, x)?;
    }
    let (ch, cg) = (cotangent(GOP, gh, hs)?, cotangent(GOP, gg, gs)?);
    let d = Dims {
        t: hs.shape()[0],
        b: hs.shape()[1],
        u: hs.shape()[2],
    };
    let fused = matches!(w.dtype(), DType::F32 | DType::F64)
        && d.b > 0
        && crate::kernels::gpu::placement(GOP, &present(&[w, h0, hs, gs], &[ch, cg]))?.is_none();
    let out = if fused {
        with_types!(w.dtype(), T => {
            let (wv, hv, hsv, gsv) = (w.values::<T>(GOP)?, h0.values::<T>(GOP)?, hs.values::<T>(GOP)?, gs.values::<T>(GOP)?);
            let ghv = ch.map(|g| g.values::<T>(GOP)).transpose()?;
            let ggv = cg.map(|g| g.values::<T>(GOP)).transpose()?;
            let buf = backward::<T>(&wv, &hv, &hsv, &gsv, ghv.as_deref(), ggv.as_deref(), d)?;
            Tensor::from_storage(T::buf_into_storage(buf), &[grad_len(d)])
        }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"))
    } else {
        let s = steps_backward(w, h0, hs, gs, ch, cg, d)?;
        Tensor::concat(&[&flat(&s.dxw)?, &flat(&s.dw)?, &flat(&s.db)?, &flat(&s.dh0)?], 0)?
    };
    let ins = [w, h0, hs, gs, gh, gg].map(Tensor::clone);
    Ok(crate::ops::bind(
        NnOp::GruSequenceGrad,
        &[w, h0, hs, gs, gh, gg],
        out,
        move |_| {
            crate::dispatch::vjp(move |a, _| {
                let [w, h0, hs, gs, gh, gg] = &ins;
                let (ch, cg) = (cotangent(GOP, gh, hs)?, cotangent(GOP, gg, gs)?);
                let g = grad_vjp_sequence(w, h0, hs, gs, ch, cg, &unpack_grads(&a[0], d)?, d)?;
                Ok(grads![Some(g.w), Some(g.h0), Some(g.hs), Some(g.gs), g.gh, g.gg])
            })
        },
    ))
}

/// Elements of `GruSequenceGrad`'s output.
fn grad_len(d: Dims) -> usize {
    3 * d.n() + 3 * d.u * d.u + 3 * d.u + d.b * d.u
}

/// `dxw`, `dR`, `db`, `dh₀` out of [`gru_sequence_grad_flat`]'s vector
/// (or its cotangent), as views.
fn unpack_grads(all: &Tensor, d: Dims) -> Result<[Tensor; 4]> {
    let shapes = [d.shape(3), vec![d.u, 3 * d.u], vec![3 * d.u], vec![d.b, d.u]];
    let v = parts(all, &shapes)?;
    Ok([v[0].clone(), v[1].clone(), v[2].clone(), v[3].clone()])
}

/// The backward kernel: the loop of the module docs from the last step
/// back, then the recurrent kernel's gradient as one product and the
/// bias's as a sum.
fn backward<T: Lane + Element + Gemm>(
    w: &[T],
    h0: &[T],
    hs: &[T],
    gs: &[T],
    gh: Option<&[T]>,
    gg: Option<&[T]>,
    d: Dims,
) -> Result<crate::tensor::Buf<T>> {
    let (n, b, u) = (d.n(), d.b, d.u);
    let step = b * u;
    let len = grad_len(d);
    let mut out = uninit_buf::<T>(GOP, len)?;
    let base = spare(&mut out)[..len].as_mut_ptr().cast::<T>();
    // every step's dm (for the products after the loop), the cotangent
    // of h_t, and its part D·z that reaches h_{t−1} directly
    let mut dm = try_filled(GOP, 3 * n, T::zero())?;
    let mut dh = try_filled(GOP, step, T::zero())?;
    let mut direct = try_filled(GOP, step, T::zero())?;
    let wt = transposed(GOP, w, 3 * u)?;
    for t in (0..d.t).rev() {
        let later = t + 1 < d.t;
        // SAFETY: `dm_{t+1}` (written by the previous iteration) read
        // into `dh`, a buffer of its own.
        unsafe {
            if later {
                back_product(
                    (b, u, 3 * u),
                    dh.as_mut_ptr(),
                    false,
                    dm.as_ptr().add(3 * (t + 1) * step),
                    wt.as_ptr(),
                );
            }
        }
        let g = gh.map(|g| &g[t * step..(t + 1) * step]);
        match (later, g) {
            (true, Some(g)) => dh
                .iter_mut()
                .zip(&direct)
                .zip(g)
                .for_each(|((x, &c), &g)| *x = g + c + *x),
            (true, None) => dh.iter_mut().zip(&direct).for_each(|(x, &c)| *x = c + *x),
            (false, Some(g)) => dh.copy_from_slice(g),
            (false, None) => dh.fill(T::zero()),
        }
        let hp = if t == 0 { h0 } else { &hs[(t - 1) * step..t * step] };
        // SAFETY: step `t` of `dxw` (in `out`), of `dm` and the carry
        // `direct`, each written by one row's task.
        unsafe {
            cell_backward(
                &gs[4 * t * step..4 * (t + 1) * step],
                hp,
                &dh,
                gg.map(|g| &g[4 * t * step..4 * (t + 1) * step]),
                SendPtr(base.add(3 * t * step)),
                SendPtr(dm.as_mut_ptr().add(3 * t * step)),
                SendPtr(direct.as_mut_ptr()),
                u,
            );
        }
    }
    // SAFETY: the parts after `dxw` (all of whose rows are written above):
    // `dR` (`u·3u`), `db` (`3u`), `dh₀` (`b·u`), inside the `len` elements.
    unsafe {
        let (dw, db, dh0) = (
            base.add(3 * n),
            base.add(3 * n + 3 * u * u),
            base.add(3 * n + 3 * u * u + 3 * u),
        );
        // dh₀ = D₀·z₀ + dm₀ Rᵀ
        back_product((b, u, 3 * u), dh0, false, dm.as_ptr(), wt.as_ptr());
        let dh0 = std::slice::from_raw_parts_mut(dh0, step);
        dh0.iter_mut().zip(&direct).for_each(|(x, &c)| *x = c + *x);
        kernel_grad(d, 3 * u, dw, h0.as_ptr(), hs.as_ptr(), dm.as_ptr());
        let mut sums = try_filled(GOP, 3 * u, T::zero())?;
        for row in dm.chunks_exact(3 * u) {
            sums.iter_mut().zip(row).for_each(|(s, &x)| *s = *s + x);
        }
        std::ptr::copy_nonoverlapping(sums.as_ptr(), db, 3 * u);
        out.set_len(len);
    }
    Ok(out)
}

/// One step of the backward loop: from the gates `g` (`[b, 4u]`),
/// `h_{t−1}` (`hp`), the cotangent `dh` of `h_t` and the gates' own
/// cotangent `gg`, the step's `dxw` and `dm` (`[b, 3u]` each) and `D·z`
/// (`direct`, `[b, u]`), rows split over the compute threads.
///
/// # Safety
/// `dxw`, `dm` and `direct` point to `3·dh.len()`, `3·dh.len()` and
/// `dh.len()` writable elements, overlapping nothing the kernel reads.
#[allow(clippy::too_many_arguments)]
unsafe fn cell_backward<T: Lane + Element>(
    g: &[T],
    hp: &[T],
    dh: &[T],
    gg: Option<&[T]>,
    dxw: SendPtr<T>,
    dm: SendPtr<T>,
    direct: SendPtr<T>,
    u: usize,
) {
    let rows = dh.len() / u;
    let per = rows_per_task(u);
    let one = T::one();
    let plus = |x: T, g: Option<&[T]>, i: usize| match g {
        Some(g) => x + g[i],
        None => x,
    };
    workers::parallel_for(rows.div_ceil(per), |task| {
        for row in task * per..((task + 1) * per).min(rows) {
            let (gr, hr, dhr) = (
                &g[row * 4 * u..(row + 1) * 4 * u],
                &hp[row * u..(row + 1) * u],
                &dh[row * u..(row + 1) * u],
            );
            let ggr = gg.map(|x| &x[row * 4 * u..(row + 1) * 4 * u]);
            // SAFETY: row `row` of each output is written by this task
            // alone, inside the elements the caller vouches for.
            let (dx, dmr, dir) = unsafe {
                (
                    std::slice::from_raw_parts_mut(dxw.get().add(row * 3 * u), 3 * u),
                    std::slice::from_raw_parts_mut(dm.get().add(row * 3 * u), 3 * u),
                    std::slice::from_raw_parts_mut(direct.get().add(row * u), u),
                )
            };
            for i in 0..u {
                let (z, r, hh, mh) = (gr[i], gr[u + i], gr[2 * u + i], gr[3 * u + i]);
                let dd = dhr[i];
                let dz = plus(dd * (hr[i] - hh), ggr, i);
                let dhh = plus(dd * (one - z), ggr, 2 * u + i);
                let dph = dhh * (one - hh * hh);
                let dr = plus(dph * mh, ggr, u + i);
                let dpz = dz * (z * (one - z));
                let dpr = dr * (r * (one - r));
                dx[i] = dpz;
                dx[u + i] = dpr;
                dx[2 * u + i] = dph;
                dmr[i] = dpz;
                dmr[u + i] = dpr;
                dmr[2 * u + i] = plus(dph * r, ggr, 3 * u + i);
                dir[i] = dd * z;
            }
        }
    });
}
