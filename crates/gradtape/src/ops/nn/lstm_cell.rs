//! `lstm_cell`: the elementwise part of an LSTM step as one op,
//! `LstmCell`, with a fused kernel each way.
//!
//! Terms: the gate pre-activations `z` (`[.., 4u]`, Keras's order: input
//! `i`, forget `f`, candidate `g`, output `o`, each `u` wide) and the
//! previous cell state `c` (`[.., u]`) give
//!
//! ```text
//! i = σ(z_i)   f = σ(z_f)   g = tanh(z_g)   o = σ(z_o)
//! c' = f·c + i·g                  h = o·tanh(c')
//! ```
//!
//! The composite (a split, three sigmoids, two tanh, three products and a
//! sum: about ten ops each way, each a pass over the state, each paying an
//! eager op's cost, at every time step) stays the definition; the op is the
//! same function in one sweep, taken for `f32` and `f64` on the CPU (other
//! calls run the composite). Its kernels call the same vectorised sigmoid
//! and tanh as the eager ops, so the two give the same bits.
//!
//! - The op's output is **packed**: `h` then `c'` along the first axis
//!   (`[2·d0, .., u]`), which [`Tensor::lstm_cell`] splits into two views
//!   (one recorded split, whose gradient is one concatenation).
//! - The VJP, with `dh`, `dc` the packed cotangent's halves and
//!   `d = dc + dh·o·(1 − tanh²c')`:
//!   `dz = [d·g·i(1−i), d·c·f(1−f), d·i·(1−g²), dh·tanh c'·o(1−o)]`,
//!   `dc_prev = d·f`: `LstmCellGrad`, the fused backward kernel as an op
//!   (so a trace records it);
//! - `LstmCellGrad`'s own VJP (a second order) is that formula
//!   differentiated by hand and written with differentiable ops
//!   ([`grad_vjp`]), so higher orders work;
//! - The JVP is the composite's, with differentiable ops.
//!
//! Departure from TensorFlow: TF's `LSTMBlockCell` takes the weights and
//! the peepholes too; this op is only the part between the products, so
//! the layers keep their products (one per sequence for the input,
//! `stack_products` and `join_products` for the state's in a trace).

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::workers::{self, SendPtr};
use crate::kernels::cpu::{spare, uninit_buf};
use crate::ops::desc::{NnOp, Unary};
use crate::ops::math::table::{unary_run, Lane};
use crate::ops::{bind, bind_jvp, grads, tangent_or_zero};
use crate::tensor::dtype::with_types;
use crate::tensor::{DType, Element, Tensor};

const OP: &str = "lstm_cell";

/// Elements of a row handled at a time (the gates' values on the stack).
const RUN: usize = 64;

/// Gate elements a parallel task takes at least (each costs five
/// transcendental functions: worth a second thread from fewer elements
/// than an addition).
const TASK: usize = 2048;

impl Tensor {
    /// One LSTM step's gates and state update: from the pre-activations
    /// `z` (`[.., 4u]`, Keras's gate order `i, f, g, o`) and the previous
    /// cell state `c` (`[.., u]`), the output `h = o·tanh(c')` and the new
    /// state `c' = f·c + i·g`, where `i, f, o` are the sigmoids and `g` the
    /// tanh of the four parts of `z`. One fused op (both ways) for `f32`
    /// and `f64` on the CPU, the composite of the elementwise ops
    /// otherwise; differentiable to any order, in both modes.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let z = Tensor::from_vec(vec![0.0f64, 0.0, 0.0, 0.0], &[1, 4])?; // u = 1
    /// let c = Tensor::from_vec(vec![2.0f64], &[1, 1])?;
    /// let (h, c1) = Tensor::lstm_cell(&z, &c)?;
    /// // i = f = o = 1/2, g = 0: c' = c/2, h = tanh(1)/2
    /// assert_eq!(c1.to_vec::<f64>()?, vec![1.0]);
    /// assert!((h.to_vec::<f64>()?[0] - 1f64.tanh() / 2.0).abs() < 1e-15);
    /// // the gates must be four states wide
    /// assert!(Tensor::lstm_cell(&Tensor::zeros(&[1, 3], z.dtype()), &c).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn lstm_cell(z: &Tensor, c: &Tensor) -> Result<(Tensor, Tensor)> {
        if !check(z, c)? {
            return composite(z, c);
        }
        let d0 = c.shape()[0];
        let parts = fused_packed(z, c)?.split_sizes(&[d0, d0], 0)?;
        let mut parts = parts.into_iter();
        match (parts.next(), parts.next()) {
            (Some(h), Some(c1)) => Ok((h, c1)),
            _ => Err(Error::invalid(OP, "the packed state did not split in two")),
        }
    }
}

/// Checks shapes, dtypes and devices (`z` `[.., 4u]`, `c` `[.., u]` with
/// the same leading dims, one float dtype, one device), and says whether
/// the fused op applies: `f32` or `f64` on the CPU, not empty.
fn check(z: &Tensor, c: &Tensor) -> Result<bool> {
    crate::ops::expect_float(OP, z)?;
    crate::ops::expect_same_dtype(OP, z, c)?;
    let on_cpu = crate::kernels::gpu::placement(OP, &[z, c])?.is_none();
    let (zs, cs) = (z.shape(), c.shape());
    let ok = !zs.is_empty()
        && zs.len() == cs.len()
        && zs[..zs.len() - 1] == cs[..cs.len() - 1]
        && cs[cs.len() - 1].checked_mul(4) == Some(zs[zs.len() - 1]);
    if !ok {
        return Err(Error::invalid(
            OP,
            format!(
                "expected gates z [.., 4u] and state c [.., u] with the same leading dims, got z {} {zs:?} and c {} {cs:?}",
                z.dtype(),
                c.dtype()
            ),
        ));
    }
    Ok(on_cpu && matches!(z.dtype(), DType::F32 | DType::F64) && c.numel() > 0)
}

/// The gates of `z`: `i, f, g, o` with differentiable ops.
fn gates(z: &Tensor) -> Result<[Tensor; 4]> {
    let p = z.split(4, -1)?;
    Ok([p[0].sigmoid()?, p[1].sigmoid()?, p[2].tanh()?, p[3].sigmoid()?])
}

/// The definition, with differentiable ops: `(h, c')`.
fn composite(z: &Tensor, c: &Tensor) -> Result<(Tensor, Tensor)> {
    let [i, f, g, o] = gates(z)?;
    let c1 = f.mul(c)?.add(&i.mul(&g)?)?;
    let h = o.mul(&c1.tanh()?)?;
    Ok((h, c1))
}

/// `1 − t²` (the derivative of tanh at its value `t`).
fn one_minus_square(t: &Tensor) -> Result<Tensor> {
    t.square()?.neg()?.add_scalar(1.0)
}

/// `s(1 − s)` (the derivative of the sigmoid at its value `s`).
fn sigmoid_slope(s: &Tensor) -> Result<Tensor> {
    s.mul(&s.neg()?.add_scalar(1.0)?)
}

/// The fused forward op: `h` then `c'` packed along axis 0. Another
/// device or dtype (a graph traced on the CPU run on a GPU) computes the
/// composite and packs it.
pub(crate) fn lstm_cell_packed(z: &Tensor, c: &Tensor) -> Result<Tensor> {
    if !check(z, c)? {
        let (h, c1) = composite(z, c)?;
        return Tensor::concat(&[&h, &c1], 0);
    }
    fused_packed(z, c)
}

/// [`lstm_cell_packed`] on operands [`check`] found fusable.
fn fused_packed(z: &Tensor, c: &Tensor) -> Result<Tensor> {
    let mut packed_shape = c.shape().to_vec();
    packed_shape[0] *= 2;
    let u = c.shape()[c.rank() - 1];
    let out = with_types!(z.dtype(), T => {
        let (zv, cv) = (z.values::<T>(OP)?, c.values::<T>(OP)?);
        Tensor::from_storage(T::buf_into_storage(forward::<T>(&zv, &cv, u)?), &packed_shape)
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"));
    let (zc, cc) = (z.clone(), c.clone());
    Ok(bind_jvp(
        NnOp::LstmCell,
        &[z, c],
        out,
        move |_| {
            vjp(move |g, _| {
                let [dz, dc] = unpack(&lstm_cell_grad_flat(&zc, &cc, &g[0])?, &zc, &cc)?;
                Ok(grads![Some(dz), Some(dc)])
            })
        },
        |t, _| jvp(z, c, t),
    ))
}

/// The fused backward op: `dz` then `dc_prev`, flattened into one vector,
/// from `z`, `c` and the packed output's cotangent `g`.
pub(crate) fn lstm_cell_grad_flat(z: &Tensor, c: &Tensor, g: &Tensor) -> Result<Tensor> {
    let fusable = check(z, c)?;
    let mut packed_shape = c.shape().to_vec();
    packed_shape[0] *= 2;
    if g.shape() != packed_shape || g.dtype() != c.dtype() {
        return Err(Error::invalid(
            "lstm_cell_grad",
            format!(
                "the cotangent must be {} {packed_shape:?} (h and c' packed), got {} {:?}",
                c.dtype(),
                g.dtype(),
                g.shape()
            ),
        ));
    }
    if !fusable || crate::kernels::gpu::placement(OP, &[z, g])?.is_some() {
        let [dz, dc] = backward_composite(z, c, g)?;
        return Tensor::concat(&[&dz.reshape(&[z.numel()])?, &dc.reshape(&[c.numel()])?], 0);
    }
    let u = c.shape()[c.rank() - 1];
    let out = with_types!(z.dtype(), T => {
        let (zv, cv, gv) = (z.values::<T>(OP)?, c.values::<T>(OP)?, g.values::<T>(OP)?);
        Tensor::from_storage(T::buf_into_storage(backward::<T>(&zv, &cv, &gv, u)?), &[z.numel() + c.numel()])
    }, [F32: f32, F64: f64], _ => unreachable!("checked: f32 or f64"));
    let (zc, cc, gc) = (z.clone(), c.clone(), g.clone());
    Ok(bind(NnOp::LstmCellGrad, &[z, c, g], out, move |_| {
        vjp(move |a, _| {
            let [az, ac] = unpack(&a[0], &zc, &cc)?;
            let [gz, gcs, gg] = grad_vjp(&zc, &cc, &gc, &az, &ac)?;
            Ok(grads![Some(gz), Some(gcs), Some(gg)])
        })
    }))
}

/// The VJP of the backward pass (a second order): the backward formula of
/// the module docs differentiated by hand, step by step backwards, from
/// the cotangents `az` of `dz` and `ac` of `dc_prev`; with `s_x = x(1 − x)`
/// and `d` as there:
///
/// ```text
/// ḡd = a_i·g·s_i + a_f·c·s_f + a_g·i·(1 − g²) + a_c·f
/// ḡt = a_o·dh·s_o − 2·ḡd·dh·o·t           ḡc' = ḡt·(1 − t²)
/// ḡi = a_g·d·(1 − g²) + ḡc'·g + a_i·d·g·(1 − 2i)
/// ḡf = a_c·d + ḡc'·c + a_f·d·c·(1 − 2f)
/// ḡg = a_i·d·s_i − 2·a_g·d·i·g + ḡc'·i
/// ḡo = ḡd·dh·(1 − t²) + a_o·dh·t·(1 − 2o)
/// ḡz = [ḡi·s_i, ḡf·s_f, ḡg·(1 − g²), ḡo·s_o]   ḡc = a_f·d·s_f + ḡc'·f
/// ḡdh = a_o·t·s_o + ḡd·o·(1 − t²)              ḡdc = ḡd
/// ```
///
/// `[ḡz, ḡc, ḡ(packed cotangent)]`, with differentiable ops (so it
/// differentiates again, and serves forward mode through its double VJP).
pub(super) fn grad_vjp(z: &Tensor, c: &Tensor, g: &Tensor, az: &Tensor, ac: &Tensor) -> Result<[Tensor; 3]> {
    let d0 = c.shape()[0];
    let (dh, dc) = (g.narrow(0, 0, d0)?, g.narrow(0, d0, d0)?);
    let [i, f, gg, o] = gates(z)?;
    let a = az.split(4, -1)?;
    let (ai, af, ag, ao) = (&a[0], &a[1], &a[2], &a[3]);
    let (si, sf, so) = (sigmoid_slope(&i)?, sigmoid_slope(&f)?, sigmoid_slope(&o)?);
    let sg = one_minus_square(&gg)?;
    let t = f.mul(c)?.add(&i.mul(&gg)?)?.tanh()?;
    let st = one_minus_square(&t)?;
    let d = dc.add(&dh.mul(&o)?.mul(&st)?)?;
    // (1 − 2x)
    let twice = |x: &Tensor| x.mul_scalar(-2.0)?.add_scalar(1.0);
    let gd = ai
        .mul(&gg)?
        .mul(&si)?
        .add(&af.mul(c)?.mul(&sf)?)?
        .add(&ag.mul(&i)?.mul(&sg)?)?
        .add(&ac.mul(&f)?)?;
    let gt = ao
        .mul(&dh)?
        .mul(&so)?
        .sub(&gd.mul(&dh)?.mul(&o)?.mul(&t)?.mul_scalar(2.0)?)?;
    let gc1 = gt.mul(&st)?;
    let gi = ag
        .mul(&d)?
        .mul(&sg)?
        .add(&gc1.mul(&gg)?)?
        .add(&ai.mul(&d)?.mul(&gg)?.mul(&twice(&i)?)?)?;
    let gf = ac
        .mul(&d)?
        .add(&gc1.mul(c)?)?
        .add(&af.mul(&d)?.mul(c)?.mul(&twice(&f)?)?)?;
    let ggate = ai
        .mul(&d)?
        .mul(&si)?
        .sub(&ag.mul(&d)?.mul(&i)?.mul(&gg)?.mul_scalar(2.0)?)?
        .add(&gc1.mul(&i)?)?;
    let go = gd.mul(&dh)?.mul(&st)?.add(&ao.mul(&dh)?.mul(&t)?.mul(&twice(&o)?)?)?;
    let gz = Tensor::concat(&[&gi.mul(&si)?, &gf.mul(&sf)?, &ggate.mul(&sg)?, &go.mul(&so)?], -1)?;
    let gcs = af.mul(&d)?.mul(&sf)?.add(&gc1.mul(&f)?)?;
    let gdh = ao.mul(&t)?.mul(&so)?.add(&gd.mul(&o)?.mul(&st)?)?;
    Ok([gz, gcs, Tensor::concat(&[&gdh, &gd], 0)?])
}

/// `dz`, `dc_prev` out of [`lstm_cell_grad_flat`]'s vector (views).
fn unpack(all: &Tensor, z: &Tensor, c: &Tensor) -> Result<[Tensor; 2]> {
    let m = z.numel();
    Ok([
        all.narrow(0, 0, m)?.reshape(z.shape())?,
        all.narrow(0, m, c.numel())?.reshape(c.shape())?,
    ])
}

/// The VJP with differentiable ops (for devices and dtypes without the
/// fused kernel).
fn backward_composite(z: &Tensor, c: &Tensor, g: &Tensor) -> Result<[Tensor; 2]> {
    let d0 = c.shape()[0];
    let (dh, dc) = (g.narrow(0, 0, d0)?, g.narrow(0, d0, d0)?);
    let [i, f, gg, o] = gates(z)?;
    let tc = f.mul(c)?.add(&i.mul(&gg)?)?.tanh()?;
    let d = dc.add(&dh.mul(&o)?.mul(&one_minus_square(&tc)?)?)?;
    let dz = Tensor::concat(
        &[
            &d.mul(&gg)?.mul(&sigmoid_slope(&i)?)?,
            &d.mul(c)?.mul(&sigmoid_slope(&f)?)?,
            &d.mul(&i)?.mul(&one_minus_square(&gg)?)?,
            &dh.mul(&tc)?.mul(&sigmoid_slope(&o)?)?,
        ],
        -1,
    )?;
    Ok([dz, d.mul(&f)?])
}

/// The JVP: the packed tangent of `(h, c')` from those of `z` and `c`.
pub(super) fn jvp(z: &Tensor, c: &Tensor, t: &[Option<Tensor>]) -> Result<Tensor> {
    let tz = tangent_or_zero(&t[0], z)?;
    let tcp = tangent_or_zero(&t[1], c)?;
    let [i, f, g, o] = gates(z)?;
    let tp = tz.split(4, -1)?;
    let (ti, tf) = (tp[0].mul(&sigmoid_slope(&i)?)?, tp[1].mul(&sigmoid_slope(&f)?)?);
    let (tg, to) = (tp[2].mul(&one_minus_square(&g)?)?, tp[3].mul(&sigmoid_slope(&o)?)?);
    let c1 = f.mul(c)?.add(&i.mul(&g)?)?;
    let tc1 = tf.mul(c)?.add(&f.mul(&tcp)?)?.add(&ti.mul(&g)?)?.add(&i.mul(&tg)?)?;
    let th = c1.tanh()?;
    let tdh = to.mul(&th)?.add(&o.mul(&one_minus_square(&th)?)?.mul(&tc1)?)?;
    Tensor::concat(&[&tdh, &tc1], 0)
}

/// Rows per parallel task: at least [`TASK`] gate elements each.
fn rows_per_task(u: usize) -> usize {
    TASK.div_ceil(u).max(1)
}

/// The four gates of one run of a row: `zr` is the row's `4u` values, the
/// run is `j .. j + n` of each gate.
#[inline(always)]
fn run_gates<T: Lane>(zr: &[T], u: usize, j: usize, n: usize, out: &mut [[T; RUN]; 4]) {
    for (k, op) in [Unary::Sigmoid, Unary::Sigmoid, Unary::Tanh, Unary::Sigmoid]
        .iter()
        .enumerate()
    {
        unary_run(op, &zr[k * u + j..k * u + j + n], &mut out[k][..n]);
    }
}

/// The forward kernel: `h` (all rows), then `c'`.
fn forward<T: Lane + Element>(z: &[T], c: &[T], u: usize) -> Result<crate::tensor::Buf<T>> {
    let len = 2 * c.len();
    let mut out = uninit_buf::<T>(OP, len)?;
    let base = spare(&mut out)[..len].as_mut_ptr().cast::<T>();
    // SAFETY: the two halves of the buffer of `len` elements, each
    // `c.len()` long.
    unsafe { forward_into(z, c, SendPtr(base), SendPtr(base.add(c.len())), u) };
    // SAFETY: every row of both halves was written above.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// The forward kernel into `h` and `c'` (`c.len()` elements each, rows
/// split over the compute threads; `lstm_sequence` calls it per step).
///
/// # Safety
/// `h` and `c1` point to `c.len()` writable elements each, overlapping
/// neither each other nor `z` and `c`.
pub(super) unsafe fn forward_into<T: Lane + Element>(z: &[T], c: &[T], h: SendPtr<T>, c1: SendPtr<T>, u: usize) {
    let rows = c.len() / u;
    let per = rows_per_task(u);
    workers::parallel_for(rows.div_ceil(per), |task| {
        let mut gt = [[T::zero(); RUN]; 4];
        let mut tc = [T::zero(); RUN];
        for r in task * per..((task + 1) * per).min(rows) {
            let (zr, cr) = (&z[r * 4 * u..(r + 1) * 4 * u], &c[r * u..(r + 1) * u]);
            // SAFETY: row `r` of each output is written by this task alone,
            // inside the `c.len()` elements the caller vouches for.
            let (h, c1) = unsafe {
                (
                    std::slice::from_raw_parts_mut(h.get().add(r * u), u),
                    std::slice::from_raw_parts_mut(c1.get().add(r * u), u),
                )
            };
            for j in (0..u).step_by(RUN) {
                let n = RUN.min(u - j);
                run_gates(zr, u, j, n, &mut gt);
                let [i, f, g, _] = &gt;
                for k in 0..n {
                    c1[j + k] = f[k] * cr[j + k] + i[k] * g[k];
                }
                unary_run(&Unary::Tanh, &c1[j..j + n], &mut tc[..n]);
                for k in 0..n {
                    h[j + k] = gt[3][k] * tc[k];
                }
            }
        }
    });
}

/// The backward kernel: `dz` (all rows), then `dc_prev`, from the packed
/// cotangent `g` (`dh` rows, then `dc` rows).
fn backward<T: Lane + Element>(z: &[T], c: &[T], g: &[T], u: usize) -> Result<crate::tensor::Buf<T>> {
    let len = z.len() + c.len();
    let mut out = uninit_buf::<T>(OP, len)?;
    let base = spare(&mut out)[..len].as_mut_ptr().cast::<T>();
    let (dh, dc) = g.split_at(c.len());
    // SAFETY: `dz` then `dc_prev` in the buffer of `len` elements.
    unsafe { backward_into(z, c, dh, (dc, None), None, SendPtr(base), SendPtr(base.add(z.len())), u) };
    // SAFETY: every row of `dz` and `dc_prev` was written above.
    unsafe { out.set_len(len) };
    Ok(out)
}

/// The backward kernel into `dz` (`z.len()` elements) and `dc_prev`
/// (`c.len()`), from the cotangents `dh` and `dc` of `h` and `c'` (rows
/// split over the compute threads; `lstm_sequence` calls it per step,
/// with a second term of `dc`, `dc.1`, and a term `gz` added to `dz`:
/// `dc.0 + dc.1` and `dz + gz` as those additions would round).
///
/// # Safety
/// `dz` and `dcp` point to `z.len()` and `c.len()` writable elements,
/// overlapping nothing else the kernel reads or writes.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn backward_into<T: Lane + Element>(
    z: &[T],
    c: &[T],
    dh: &[T],
    dc: (&[T], Option<&[T]>),
    gz: Option<&[T]>,
    dz: SendPtr<T>,
    dcp: SendPtr<T>,
    u: usize,
) {
    let rows = c.len() / u;
    let per = rows_per_task(u);
    let one = T::one();
    workers::parallel_for(rows.div_ceil(per), |task| {
        let mut gt = [[T::zero(); RUN]; 4];
        let (mut c1, mut tc) = ([T::zero(); RUN], [T::zero(); RUN]);
        for r in task * per..((task + 1) * per).min(rows) {
            let (zr, cr) = (&z[r * 4 * u..(r + 1) * 4 * u], &c[r * u..(r + 1) * u]);
            let (dh, dc0) = (&dh[r * u..(r + 1) * u], &dc.0[r * u..(r + 1) * u]);
            let dc1 = dc.1.map(|x| &x[r * u..(r + 1) * u]);
            let gz = gz.map(|x| &x[r * 4 * u..(r + 1) * 4 * u]);
            // SAFETY: row `r` of `dz` and of `dc_prev` is written by this
            // task alone, inside the elements the caller vouches for.
            let (dz, dcp) = unsafe {
                (
                    std::slice::from_raw_parts_mut(dz.get().add(r * 4 * u), 4 * u),
                    std::slice::from_raw_parts_mut(dcp.get().add(r * u), u),
                )
            };
            for j in (0..u).step_by(RUN) {
                let n = RUN.min(u - j);
                run_gates(zr, u, j, n, &mut gt);
                let [i, f, gg, o] = &gt;
                for k in 0..n {
                    c1[k] = f[k] * cr[j + k] + i[k] * gg[k];
                }
                unary_run(&Unary::Tanh, &c1[..n], &mut tc[..n]);
                for k in 0..n {
                    let (dh, t) = (dh[j + k], tc[k]);
                    let dc = match dc1 {
                        Some(x) => dc0[j + k] + x[j + k],
                        None => dc0[j + k],
                    };
                    let d = dc + dh * o[k] * (one - t * t);
                    dz[j + k] = d * gg[k] * (i[k] * (one - i[k]));
                    dz[u + j + k] = d * cr[j + k] * (f[k] * (one - f[k]));
                    dz[2 * u + j + k] = d * i[k] * (one - gg[k] * gg[k]);
                    dz[3 * u + j + k] = dh * t * (o[k] * (one - o[k]));
                    dcp[j + k] = d * f[k];
                }
            }
            if let Some(gz) = gz {
                for (dz, &g) in dz.iter_mut().zip(gz) {
                    *dz = *dz + g;
                }
            }
        }
    });
}
