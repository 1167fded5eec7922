//! Keras's output for query rows that see no key ([`HiddenRows::Mean`]),
//! as passes beside the fused kernels, which give such rows zeros: the
//! forward pass writes the mean of the values on them, the backward pass
//! adds their share of the output's cotangent to every value row. A hidden
//! row is one whose log-sum-exp the forward kernel wrote as `+inf` (every
//! key hidden by the mask, or by the mask and the causal band); a row that
//! has no key at all (`tk = 0`) keeps its zeros. The passes read only
//! hidden rows' data and the values of batch elements that have one, so
//! they cost nothing where no row is hidden. The unfused composite (the
//! second order, the JVP) adds `1 / tk` to such rows' probabilities
//! ([`uniform`]), as constants: no derivative reaches the scores.

use super::{attention, Shapes, OP};
use crate::error::Result;
use crate::kernels::cpu::attention::Dims;
use crate::kernels::cpu::attention_gemm::{GradDest, Rows};
use crate::kernels::gpu::{to_host, upload};
use crate::tensor::dtype::with_types;
use crate::tensor::{Float, Tensor};

/// What a query row that may attend to no key gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HiddenRows {
    /// Zeros, and no gradient (PyTorch's convention since 2.5, and
    /// [`Tensor::scaled_dot_product_attention`]'s).
    #[default]
    Zeros,
    /// The mean of the values (uniform probabilities over every key, as
    /// Keras's default attention path, whose masked scores are one large
    /// negative number), whose gradient reaches the values only.
    Mean,
}

impl Tensor {
    /// [`scaled_dot_product_attention`](Self::scaled_dot_product_attention)
    /// with a choice of what a query row that may attend to no key gives:
    /// [`HiddenRows::Zeros`] (that method's zeros) or
    /// [`HiddenRows::Mean`], the mean of the values, as Keras's
    /// `MultiHeadAttention` with a mask and no dropout (its masked scores
    /// are one large negative number, so such a row's probabilities are
    /// uniform over every key); its gradient reaches the values only
    /// (`dO / tk` to each value row), none the queries and keys. The op
    /// stays one fused kernel: the means are written on the hidden rows
    /// (those whose log-sum-exp the kernel found infinite) after it, and
    /// their gradient added after the backward kernel.
    ///
    /// ```
    /// use gradtape::{HiddenRows, Tensor};
    /// let q = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0], &[1, 2, 2])?;
    /// let v = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 2, 2])?;
    /// // the second query sees no key
    /// let mask = Tensor::from_vec(vec![true, true, false, false], &[2, 2])?;
    /// let o = q.scaled_dot_product_attention_with_hidden(&q, &v, Some(&mask), false, None, HiddenRows::Mean)?;
    /// assert_eq!(o.to_vec::<f64>()?[2..], [2.0, 3.0]);
    /// let z = q.scaled_dot_product_attention_with_hidden(&q, &v, Some(&mask), false, None, HiddenRows::Zeros)?;
    /// assert_eq!(z.to_vec::<f64>()?[2..], [0.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scaled_dot_product_attention_with_hidden(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        causal: bool,
        scale: Option<f64>,
        hidden: HiddenRows,
    ) -> Result<Tensor> {
        attention(self, k, v, mask, causal, scale, None, hidden)
    }
}

/// Whether a row of the forward kernel's output (`dv` values, then the
/// log-sum-exp) is hidden.
#[inline]
fn hidden<T: Float>(row: &[T], dv: usize) -> bool {
    row[dv] == T::infinity()
}

/// The forward pass's part, on the kernel's rows `p` (`[batch, tq, dv +
/// 1]`, contiguous): the mean of the batch element's value rows (`v`)
/// written on each hidden row. Idempotent.
pub(super) fn write_means<T: Float>(d: &Dims, p: &mut [T], v: &Rows<'_, T>) {
    let w = d.dv + 1;
    if d.tk == 0 || d.dv == 0 || d.tq == 0 {
        return;
    }
    let n = T::from_f64(d.tk as f64);
    let mut mean = vec![T::zero(); d.dv];
    for (b, rows) in p.chunks_mut(d.tq * w).enumerate().take(d.batch) {
        if !rows.chunks(w).any(|r| hidden(r, d.dv)) {
            continue;
        }
        mean.fill(T::zero());
        for j in 0..d.tk {
            let at = v.batch.offset(b) + j * v.rs;
            for (m, &x) in mean.iter_mut().zip(&v.data[at..at + d.dv]) {
                *m = *m + x;
            }
        }
        for m in mean.iter_mut() {
            *m = *m / n;
        }
        for r in rows.chunks_mut(w).filter(|r| hidden(r, d.dv)) {
            r[..d.dv].copy_from_slice(&mean);
        }
    }
}

/// The backward pass's part, on host buffers: for each batch element with
/// hidden rows (in `packed`, the forward rows, contiguous), the sum of
/// their cotangent rows (`dout`) over `tk`, added to each of its value
/// gradient's rows in `out`, laid out as `dest`'s third part.
pub(super) fn add_mean_grads<T: Float>(d: &Dims, packed: &[T], dout: &Rows<'_, T>, out: &mut [T], dest: &GradDest) {
    let w = d.dv + 1;
    if d.tk == 0 || d.dv == 0 || d.tq == 0 {
        return;
    }
    let n = T::from_f64(d.tk as f64);
    let (batch, rs) = &dest.parts[2];
    let mut sum = vec![T::zero(); d.dv];
    for (b, rows) in packed.chunks(d.tq * w).enumerate().take(d.batch) {
        let mut any = false;
        sum.fill(T::zero());
        for (i, r) in rows.chunks(w).enumerate() {
            if hidden(r, d.dv) {
                any = true;
                let at = dout.batch.offset(b) + i * dout.rs;
                for (s, &g) in sum.iter_mut().zip(&dout.data[at..at + d.dv]) {
                    *s = *s + g;
                }
            }
        }
        if !any {
            continue;
        }
        for s in sum.iter_mut() {
            *s = *s / n;
        }
        for j in 0..d.tk {
            let at = batch.offset(b) + j * rs;
            for (o, &s) in out[at..at + d.dv].iter_mut().zip(&sum) {
                *o = *o + s;
            }
        }
    }
}

/// [`write_means`] on a CUDA kernel's rows, through host copies.
pub(super) fn means_on_device(s: &Shapes, packed: Tensor, v: &Tensor) -> Result<Tensor> {
    let d = &s.dims;
    let device = packed.device();
    let host = to_host(OP, &packed)?;
    let out = with_types!(host.dtype(), T => {
        let mut p = host.values::<T>(OP)?.into_owned();
        let vh = to_host(OP, v)?;
        let vv = super::host::rows_of::<T>(&vh)?;
        write_means(d, &mut p, &super::host::rows(&vv));
        Tensor::from_vec(p, host.shape()).map_err(|e| e.for_op(OP))?
    }, [F32: f32, F64: f64], _ => return Ok(packed));
    upload(OP, &out, device)
}

/// [`add_mean_grads`] on a CUDA kernel's gradients (`out`: `dq`, `dk`,
/// `dv` of each batch element, flattened), through host copies.
pub(super) fn mean_grads_on_device(s: &Shapes, out: Tensor, packed: &Tensor, dout: &Tensor) -> Result<Tensor> {
    let d = &s.dims;
    let device = out.device();
    let host = to_host(OP, &out)?;
    let fixed = with_types!(host.dtype(), T => {
        let ph = to_host(OP, packed)?;
        let p = ph.values::<T>(OP)?;
        let gh = to_host(OP, dout)?;
        let g = super::host::rows_of::<T>(&gh)?;
        let mut o: Vec<T> = host.values::<T>(OP)?.into_owned();
        add_mean_grads(d, &p, &super::host::rows(&g), &mut o, &GradDest::packed(d));
        Tensor::from_vec(o, host.shape()).map_err(|e| e.for_op(OP))?
    }, [F32: f32, F64: f64], _ => return Ok(out));
    upload(OP, &fixed, device)
}

/// The composite's probabilities with [`HiddenRows::Mean`]: `p` (0 on the
/// rows whose scores are all `-inf`, where `seen` is false) plus `1 / tk`
/// on those rows, a constant.
pub(super) fn uniform(p: &Tensor, seen: &Tensor) -> Result<Tensor> {
    let tk = p.shape().last().copied().unwrap_or(0);
    let u = Tensor::full(&[], 1.0 / tk.max(1) as f64, p.dtype()).to(p.device())?;
    Tensor::where_(seen, p, &u)
}
