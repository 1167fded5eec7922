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
//!   nothing else). [`Tensor::lstm_sequence`] splits it (one recorded
//!   split, whose gradient is one concatenation) and returns the first two.
//! - The VJP: with `dh_t = ḡh_t + dz_{t+1} Wᵀ` and `dc_t = ḡc_t +
//!   dc_prev(t+1)`, the cell's backward formula gives `dz_t` (plus the
//!   cotangent `ḡz_t` of the packed `z_t`) and `dc_prev(t)`, from the last
//!   step back; then `dxw = dz`, `dW = Σ h_{t−1}ᵀ dz_t`, `dh₀ = dz₀ Wᵀ`,
//!   `dc₀ = dc_prev(0)`: `LstmSequenceGrad`, one op (so a trace records
//!   it whole).
//! - `LstmSequenceGrad`'s own VJP (a second order) is that loop
//!   differentiated by hand, forwards in time, with differentiable ops
//!   (the cell's backward op `LstmCellGrad` and its hand-written VJP), so
//!   higher orders work; the JVP is the composite's, step by step.
//! - Other dtypes and devices run the composite (a GPU, a graph traced on
//!   the CPU run on a GPU: the composite, packed).

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::gemm_crates::Gemm;
use crate::kernels::cpu::matmul::gemm_raw;
use crate::kernels::cpu::workers::SendPtr;
use crate::kernels::cpu::{spare, uninit_buf};
use crate::ops::desc::NnOp;
use crate::ops::math::table::Lane;
use crate::ops::{bind, bind_jvp, grads, tangent_or_zero};
use crate::tensor::dtype::with_types;
use crate::tensor::{DType, Element, Tensor};

use super::lstm_cell::{backward_into, forward_into, grad_vjp, jvp as cell_jvp, lstm_cell_grad_flat};

const OP: &str = "lstm_sequence";

/// A checked problem: `t` steps of a batch of `b`, `u` units.
#[derive(Clone, Copy, Debug)]
struct Dims {
    t: usize,
    b: usize,
    u: usize,
}

impl Dims {
    /// Elements of all `h_t` (and of all `c_t`).
    fn n(&self) -> usize {
        self.t * self.b * self.u
    }
}

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
        let n = d.n();
        let parts = fused_packed(xw, recurrent, h0, c0, d)?.split_sizes(&[n, n, 4 * n], 0)?;
        match parts.as_slice() {
            [h, c, _] => Ok((h.reshape(&[d.t, d.b, d.u])?, c.reshape(&[d.t, d.b, d.u])?)),
            _ => Err(Error::invalid(OP, "the packed output did not split in three")),
        }
    }
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
    let stack = |v: &[Tensor]| Tensor::stack(&v.iter().collect::<Vec<_>>(), 0);
    Ok((stack(&hs)?, stack(&cs)?, stack(&zs)?))
}

/// `t` as a vector (the packed layouts' parts).
fn flat(t: &Tensor) -> Result<Tensor> {
    t.reshape(&[t.numel()])
}

/// The steps' tensors `v` stacked along a new first axis, as a vector.
fn stack_flat(v: &[Tensor]) -> Result<Tensor> {
    flat(&Tensor::stack(&v.iter().collect::<Vec<_>>(), 0)?)
}

/// The fused forward op: `h`, `c`, `z` of every step, packed flat. Other
/// devices and dtypes (a graph traced on the CPU run on a GPU) compute
/// the composite and pack it.
pub(crate) fn lstm_sequence_packed(xw: &Tensor, w: &Tensor, h0: &Tensor, c0: &Tensor) -> Result<Tensor> {
    let (d, fused) = check(xw, w, h0, c0)?;
    if !fused {
        let (hs, cs, zs) = composite(xw, w, h0, c0)?;
        return Tensor::concat(&[&flat(&hs)?, &flat(&cs)?, &flat(&zs)?], 0);
    }
    fused_packed(xw, w, h0, c0, d)
}

/// [`lstm_sequence_packed`] on operands [`check`] found fusable.
fn fused_packed(xw: &Tensor, w: &Tensor, h0: &Tensor, c0: &Tensor, d: Dims) -> Result<Tensor> {
    let out = with_types!(xw.dtype(), T => {
        let (x, wv, hv, cv) = (xw.values::<T>(OP)?, w.values::<T>(OP)?, h0.values::<T>(OP)?, c0.values::<T>(OP)?);
        Tensor::from_storage(T::buf_into_storage(forward::<T>(&x, &wv, &hv, &cv, d)?), &[6 * d.n()])
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"));
    let (xc, wc, hc, cc) = (xw.clone(), w.clone(), h0.clone(), c0.clone());
    Ok(bind_jvp(
        NnOp::LstmSequence,
        &[xw, w, h0, c0],
        out,
        move |packed| {
            let p = packed.clone();
            vjp(move |g, _| {
                let [dxw, dw, dh0, dc0] = unpack_grads(&lstm_sequence_grad_flat(&wc, &hc, &cc, &p, &g[0])?, &xc, &wc)?;
                Ok(grads![Some(dxw), Some(dw), Some(dh0), Some(dc0)])
            })
        },
        |t, packed| jvp(xw, w, h0, c0, t, packed, d),
    ))
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
            gemm_raw::<T>(
                (b, 4 * u, u),
                z,
                (4 * u as isize, 1),
                false,
                hp,
                (u as isize, 1),
                w.as_ptr(),
                (4 * u as isize, 1),
                true,
            );
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
/// state, the packed output and its cotangent `g`.
pub(crate) fn lstm_sequence_grad_flat(
    w: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    packed: &Tensor,
    g: &Tensor,
) -> Result<Tensor> {
    const GOP: &str = "lstm_sequence_grad";
    if w.rank() != 2 || h0.rank() != 2 || w.shape()[0] == 0 {
        return Err(Error::invalid(
            GOP,
            format!(
                "expected a recurrent kernel [u, 4u] and a state [batch, u], got {:?} and {:?}",
                w.shape(),
                h0.shape()
            ),
        ));
    }
    let (b, u) = (h0.shape()[0], w.shape()[0]);
    let step = 6 * b * u;
    let t = packed.numel().checked_div(step).unwrap_or(0);
    let want = [t * step];
    if t == 0 || packed.shape() != want || g.shape() != want || g.dtype() != w.dtype() || packed.dtype() != w.dtype() {
        return Err(Error::invalid(
            GOP,
            format!(
                "expected the packed output and its cotangent as {} vectors of 6·time·batch·u elements (batch {b}, u \
                 {u}), got {} {:?} and {} {:?}",
                w.dtype(),
                packed.dtype(),
                packed.shape(),
                g.dtype(),
                g.shape()
            ),
        ));
    }
    let d = Dims { t, b, u };
    let fused = matches!(w.dtype(), DType::F32 | DType::F64)
        && [h0, c0].iter().all(|x| x.shape() == [b, u] && x.dtype() == w.dtype())
        && crate::kernels::gpu::placement(GOP, &[w, h0, c0, packed, g])?.is_none();
    if h0.shape() != [b, u] || c0.shape() != [b, u] || w.shape()[1] != 4 * u {
        return Err(Error::invalid(
            GOP,
            format!(
                "expected a recurrent kernel [u, 4u] and states [batch, u], got {:?}, h0 {:?}, c0 {:?}",
                w.shape(),
                h0.shape(),
                c0.shape()
            ),
        ));
    }
    let out = if fused {
        with_types!(w.dtype(), T => {
            let (wv, hv, cv) = (w.values::<T>(GOP)?, h0.values::<T>(GOP)?, c0.values::<T>(GOP)?);
            let (pv, gv) = (packed.values::<T>(GOP)?, g.values::<T>(GOP)?);
            Tensor::from_storage(T::buf_into_storage(backward::<T>(&wv, &hv, &cv, &pv, &gv, d)?), &[grad_len(d)])
        }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"))
    } else {
        let s = steps_backward(w, h0, c0, packed, g, d)?;
        Tensor::concat(&[&flat(&s.dxw)?, &flat(&s.dw)?, &flat(&s.dh0)?, &flat(&s.dc0)?], 0)?
    };
    let (wc, hc, cc, pc, gc) = (w.clone(), h0.clone(), c0.clone(), packed.clone(), g.clone());
    Ok(bind(NnOp::LstmSequenceGrad, &[w, h0, c0, packed, g], out, move |_| {
        vjp(move |a, _| {
            let [gw, gh0, gc0, gp, gg] = grad_vjp_sequence(&wc, &hc, &cc, &pc, &gc, &a[0], d)?;
            Ok(grads![Some(gw), Some(gh0), Some(gc0), Some(gp), Some(gg)])
        })
    }))
}

/// Elements of `LstmSequenceGrad`'s output.
fn grad_len(d: Dims) -> usize {
    4 * d.n() + 4 * d.u * d.u + 2 * d.b * d.u
}

/// `dxw`, `dW`, `dh₀`, `dc₀` out of [`lstm_sequence_grad_flat`]'s vector
/// (views shaped as `xw`, `W` and the state).
fn unpack_grads(all: &Tensor, xw: &Tensor, w: &Tensor) -> Result<[Tensor; 4]> {
    let (nx, nw) = (xw.numel(), w.numel());
    let s = [xw.shape()[1], w.shape()[0]];
    let ns = s[0] * s[1];
    Ok([
        all.narrow(0, 0, nx)?.reshape(xw.shape())?,
        all.narrow(0, nx, nw)?.reshape(w.shape())?,
        all.narrow(0, nx + nw, ns)?.reshape(&s)?,
        all.narrow(0, nx + nw + ns, ns)?.reshape(&s)?,
    ])
}

/// The backward kernel: the loop of the module docs from the last step
/// back, then the recurrent kernel's gradient as one product.
fn backward<T: Lane + Element + Gemm>(
    w: &[T],
    h0: &[T],
    c0: &[T],
    p: &[T],
    g: &[T],
    d: Dims,
) -> Result<crate::tensor::Buf<T>> {
    let (n, b, u) = (d.n(), d.b, d.u);
    let step = b * u;
    let len = grad_len(d);
    let mut out = uninit_buf::<T>(OP, len)?;
    let base = spare(&mut out)[..len].as_mut_ptr().cast::<T>();
    let (hs, cs, zs) = (&p[..n], &p[n..2 * n], &p[2 * n..]);
    let (ghs, gcs, gzs) = (&g[..n], &g[n..2 * n], &g[2 * n..]);
    let mut dh = crate::tensor::alloc::try_filled(OP, step, T::zero())?;
    let mut dc = crate::tensor::alloc::try_filled(OP, step, T::zero())?;
    let mut dcp = crate::tensor::alloc::try_filled(OP, step, T::zero())?;
    let z4 = 4 * step;
    // Wᵀ row-major, once: each step's product reads it in place (a
    // transposed operand would be packed again at every step)
    let mut wt = crate::tensor::alloc::try_filled(OP, 4 * u * u, T::zero())?;
    for (j, row) in w.chunks_exact(4 * u).enumerate() {
        for (k, &x) in row.iter().enumerate() {
            wt[k * u + j] = x;
        }
    }
    for t in (0..d.t).rev() {
        let later = t + 1 < d.t;
        dh.copy_from_slice(&ghs[t * step..(t + 1) * step]);
        // SAFETY: rows of the buffer of `len` elements: `dz_{t+1}`
        // (written by the previous iteration) read, `dz_t` written; the
        // product writes `dh`, which it does not read from.
        unsafe {
            if later {
                // dh_t = ḡh_t + dz_{t+1} Wᵀ
                let dz_next = base.add((t + 1) * z4);
                gemm_raw::<T>(
                    (b, u, 4 * u),
                    dh.as_mut_ptr(),
                    (u as isize, 1),
                    true,
                    dz_next,
                    (4 * u as isize, 1),
                    wt.as_ptr(),
                    (u as isize, 1),
                    true,
                );
            }
            let cprev = if t == 0 { c0 } else { &cs[(t - 1) * step..t * step] };
            // dc_t = ḡc_t + dc_prev(t+1) (in the kernel; dcp is read
            // there before it is written, row by row); dz_t gets ḡz_t
            dc.copy_from_slice(&dcp);
            let later_dc = if later { Some(&dc[..]) } else { None };
            backward_into(
                &zs[t * z4..(t + 1) * z4],
                cprev,
                &dh,
                (&gcs[t * step..(t + 1) * step], later_dc),
                Some(&gzs[t * z4..(t + 1) * z4]),
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
        gemm_raw::<T>(
            (b, u, 4 * u),
            dh0,
            (u as isize, 1),
            false,
            base,
            (4 * u as isize, 1),
            wt.as_ptr(),
            (u as isize, 1),
            true,
        );
        std::ptr::copy_nonoverlapping(dcp.as_ptr(), dc0, step);
        // dW = h₀ᵀ dz₀ + Σ_{t ≥ 1} h_{t−1}ᵀ dz_t (one product over the steps)
        gemm_raw::<T>(
            (u, 4 * u, b),
            dw,
            (4 * u as isize, 1),
            false,
            h0.as_ptr(),
            (1, u as isize),
            base,
            (4 * u as isize, 1),
            true,
        );
        if d.t > 1 {
            let m = (d.t - 1) * b;
            gemm_raw::<T>(
                (u, 4 * u, m),
                dw,
                (4 * u as isize, 1),
                true,
                hs.as_ptr(),
                (1, u as isize),
                base.add(z4),
                (4 * u as isize, 1),
                true,
            );
        }
        out.set_len(len);
    }
    Ok(out)
}

/// The views of the packed output (or of its cotangent): all `h_t`, all
/// `c_t` (`[T, B, u]`), all `z_t` (`[T, B, 4u]`).
fn views(p: &Tensor, d: Dims) -> Result<[Tensor; 3]> {
    let n = d.n();
    Ok([
        p.narrow(0, 0, n)?.reshape(&[d.t, d.b, d.u])?,
        p.narrow(0, n, n)?.reshape(&[d.t, d.b, d.u])?,
        p.narrow(0, 2 * n, 4 * n)?.reshape(&[d.t, d.b, 4 * d.u])?,
    ])
}

/// Step `t` of a `[T, ..]` tensor.
fn at(x: &Tensor, t: usize) -> Result<Tensor> {
    x.narrow(0, t, 1)?.squeeze(&[0])
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

/// The backward pass of the module docs with differentiable ops (devices
/// and dtypes without the fused kernel; and the second order's replay).
fn steps_backward(w: &Tensor, h0: &Tensor, c0: &Tensor, packed: &Tensor, g: &Tensor, d: Dims) -> Result<Steps> {
    let [hs, cs, zs] = views(packed, d)?;
    let [ghs, gcs, gzs] = views(g, d)?;
    let (mut dh, mut dc, mut dz) = (vec![], vec![], vec![]);
    let (mut carry_h, mut carry_c): (Option<Tensor>, Option<Tensor>) = (None, None);
    for t in (0..d.t).rev() {
        let (gh, gc) = (at(&ghs, t)?, at(&gcs, t)?);
        let dh_t = match &carry_h {
            Some(x) => gh.add(x)?,
            None => gh,
        };
        let dc_t = match &carry_c {
            Some(x) => gc.add(x)?,
            None => gc,
        };
        let cprev = if t == 0 { c0.clone() } else { at(&cs, t - 1)? };
        let z = at(&zs, t)?;
        let cell = lstm_cell_grad_flat(&z, &cprev, &Tensor::concat(&[&dh_t, &dc_t], 0)?)?;
        let dz_t = cell.narrow(0, 0, z.numel())?.reshape(z.shape())?.add(&at(&gzs, t)?)?;
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
    let dxw = Tensor::stack(&dz.iter().collect::<Vec<_>>(), 0)?;
    let hprev = Tensor::concat(&[&h0.reshape(&[1, d.b, d.u])?, &hs.narrow(0, 0, d.t - 1)?], 0)?;
    let dw = hprev
        .reshape(&[d.t * d.b, d.u])?
        .matmul_with(&dxw.reshape(&[d.t * d.b, 4 * d.u])?, true, false)?;
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
/// (`h̄`, `c̄`, `z̄` the cotangent's parts), giving `[ḡW, ḡh₀, ḡc₀, ḡ(packed),
/// ḡ(cotangent)]`, with differentiable ops.
fn grad_vjp_sequence(
    w: &Tensor,
    h0: &Tensor,
    c0: &Tensor,
    packed: &Tensor,
    g: &Tensor,
    a: &Tensor,
    d: Dims,
) -> Result<[Tensor; 5]> {
    let s = steps_backward(w, h0, c0, packed, g, d)?;
    let [hs, cs, zs] = views(packed, d)?;
    let (nx, nw, ns) = (4 * d.n(), 4 * d.u * d.u, d.b * d.u);
    let a_dxw = a.narrow(0, 0, nx)?.reshape(&[d.t, d.b, 4 * d.u])?;
    let a_dw = a.narrow(0, nx, nw)?.reshape(&[d.u, 4 * d.u])?;
    let mut a_h = a.narrow(0, nx + nw, ns)?.reshape(&[d.b, d.u])?;
    let mut a_c = a.narrow(0, nx + nw + ns, ns)?.reshape(&[d.b, d.u])?;
    let mut g_w: Option<Tensor> = None;
    let (mut g_hprev, mut g_cprev, mut g_z, mut g_gh, mut g_gc, mut g_gz) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in 0..d.t {
        let hprev = if t == 0 { h0.clone() } else { at(&hs, t - 1)? };
        let cprev = if t == 0 { c0.clone() } else { at(&cs, t - 1)? };
        let dz = &s.dz[t];
        let a_dz = at(&a_dxw, t)?.add(&hprev.matmul(&a_dw)?)?.add(&a_h.matmul(w)?)?;
        let gw_t = a_h.matmul_with(dz, true, false)?;
        g_w = Some(match g_w {
            Some(x) => x.add(&gw_t)?,
            None => gw_t,
        });
        g_hprev.push(dz.matmul_with(&a_dw, false, true)?);
        g_gz.push(a_dz.clone());
        let cot = Tensor::concat(&[&s.dh[t], &s.dc[t]], 0)?;
        let [gz, gcp, gcot] = grad_vjp(&at(&zs, t)?, &cprev, &cot, &a_dz, &a_c)?;
        g_z.push(gz);
        g_cprev.push(gcp);
        let (adh, adc) = (gcot.narrow(0, 0, d.b)?, gcot.narrow(0, d.b, d.b)?);
        g_gh.push(adh.clone());
        g_gc.push(adc.clone());
        a_h = adh;
        a_c = adc;
    }
    // h_{t−1} and c_{t−1} for t ≥ 1 are the packed h_0 .. h_{T−2}: the
    // packed output's cotangent gets them, then zeros for the last step
    let zero = Tensor::zeros_on(&[d.b, d.u], w.dtype(), w.device())?;
    let shift = |v: &[Tensor]| -> Result<Tensor> {
        let mut rest: Vec<Tensor> = v[1..].to_vec();
        rest.push(zero.clone());
        stack_flat(&rest)
    };
    let g_packed = Tensor::concat(&[&shift(&g_hprev)?, &shift(&g_cprev)?, &stack_flat(&g_z)?], 0)?;
    let g_cot = Tensor::concat(&[&stack_flat(&g_gh)?, &stack_flat(&g_gc)?, &stack_flat(&g_gz)?], 0)?;
    let g_w = match g_w {
        Some(x) => x,
        None => return Err(Error::invalid(OP, "the sequence has no steps")),
    };
    Ok([g_w, g_hprev[0].clone(), g_cprev[0].clone(), g_packed, g_cot])
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
    let [hs, cs, zs] = views(packed, d)?;
    let txw = tangent_or_zero(&t[0], xw)?;
    let mut th = tangent_or_zero(&t[2], h0)?;
    let mut tc = tangent_or_zero(&t[3], c0)?;
    let (mut ths, mut tcs, mut tzs) = (vec![], vec![], vec![]);
    for s in 0..d.t {
        let mut tz = at(&txw, s)?.add(&th.matmul(w)?)?;
        if let Some(tw) = &t[1] {
            let hprev = if s == 0 { h0.clone() } else { at(&hs, s - 1)? };
            tz = tz.add(&hprev.matmul(tw)?)?;
        }
        let cprev = if s == 0 { c0.clone() } else { at(&cs, s - 1)? };
        let tp = cell_jvp(&at(&zs, s)?, &cprev, &[Some(tz.clone()), Some(tc)])?;
        th = tp.narrow(0, 0, d.b)?;
        tc = tp.narrow(0, d.b, d.b)?;
        ths.push(th.clone());
        tcs.push(tc.clone());
        tzs.push(tz);
    }
    Tensor::concat(&[&stack_flat(&ths)?, &stack_flat(&tcs)?, &stack_flat(&tzs)?], 0)
}
