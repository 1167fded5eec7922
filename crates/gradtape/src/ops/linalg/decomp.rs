//! Matrix decompositions and determinants (f32/f64, any leading batch
//! dims): cholesky, det, slogdet/logdet; the helpers shared with the solves
//! (`solve.rs`).
//!
//! The kernels (`kernels/cpu/decomp.rs`) work in f64 on one matrix at a
//! time. Every rule is written with differentiable public ops (matmul,
//! solves, masks), so second derivatives work.

use super::super::desc::LinalgOp;
use super::super::{bind, bind_nondiff, expect_float, expect_same_dtype, grads};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::decomp;
use crate::tensor::layout::broadcast_shapes;
use crate::tensor::{alloc, with_float_dtype, DType, Device, Element, Tensor};

/// A float tensor of `shape` from f64 values, converted to `dtype` (through
/// f32 for the half types, by `Element`: their inherent `from_f64` rounds
/// from the top 32 bits of the f64 only).
/// Made on `device`: these kernels run on the host, so on a GPU under
/// soft device placement the result is copied there ([`host_f64s`]).
pub(crate) fn from_f64s(v: Vec<f64>, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    let t = with_float_dtype!(dtype, T => Tensor::from_vec(v.into_iter().map(<T as Element>::from_f64).collect::<Vec<T>>(), shape),
        _ => Err(super::super::unsupported("from_f64s", dtype, "f32 or f64")))?;
    crate::kernels::gpu::upload("from_f64s", &t, device)
}

pub(crate) use crate::kernels::gpu::host_f64s;

/// Checks a float `[..., n, n]` input; returns (batch count, n).
/// How many of `nb` matrices of size `n` have any work: none when `n` is 0,
/// so that an empty batch of a huge count is not walked matrix by matrix.
pub(super) fn busy(nb: usize, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        nb
    }
}

pub(super) fn square(op: &'static str, a: &Tensor) -> Result<(usize, usize)> {
    expect_float(op, a)?;
    let s = a.shape();
    let r = s.len();
    if r < 2 || s[r - 1] != s[r - 2] {
        return Err(Error::invalid(
            op,
            format!("needs square matrices [..., n, n], got shape {s:?}"),
        ));
    }
    Ok((s[..r - 2].iter().product(), s[r - 1]))
}

/// Checks `a: [..., n, n]` against `b: [..., n, m]` (batch dims broadcast)
/// and broadcasts both to the common batch shape (differentiably).
pub(super) fn broadcast_pair(op: &'static str, a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
    square(op, a)?;
    expect_same_dtype(op, a, b)?;
    crate::kernels::gpu::placement(op, &[a, b])?;
    let (sa, sb) = (a.shape(), b.shape());
    let mismatch = || Error::ShapeMismatch {
        op,
        lhs: sa.to_vec(),
        rhs: sb.to_vec(),
    };
    if sb.len() < 2 || sb[sb.len() - 2] != sa[sa.len() - 1] {
        return Err(mismatch());
    }
    let batch = broadcast_shapes(op, &sa[..sa.len() - 2], &sb[..sb.len() - 2]).map_err(|_| mismatch())?;
    let target = |s: &[usize]| -> Vec<usize> {
        let mut t = batch.to_vec();
        t.extend_from_slice(&s[s.len() - 2..]);
        t
    };
    let a = a.broadcast_to(&target(sa))?;
    let b = b.broadcast_to(&target(sb))?;
    Ok((a, b))
}

/// `[..., n, n] -> [..., 1, 1]` for a cotangent or value of shape `[...]`.
fn expand2(t: &Tensor, batch: &[usize]) -> Result<Tensor> {
    let mut s = batch.to_vec();
    s.extend([1, 1]);
    t.reshape(&s)
}

impl Tensor {
    /// The lower Cholesky factor `L` of a symmetric positive-definite matrix
    /// (`A = L Lᵀ`), for each matrix of `[..., n, n]`. Only the lower
    /// triangle of `A` is read. An error if a matrix is not positive definite.
    ///
    /// The gradient is the symmetric one (Murray 2016, as TensorFlow):
    /// `Ā = ½ (S + Sᵀ)` with `S = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹`, `Φ` taking the lower
    /// triangle with the diagonal halved.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![4.0f64, 2.0, 2.0, 5.0], &[2, 2])?;
    /// assert_eq!(a.cholesky()?.to_vec::<f64>()?, vec![2.0, 0.0, 1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cholesky(&self) -> Result<Tensor> {
        let (nb, n) = square("cholesky", self)?;
        let v = host_f64s("cholesky", self)?;
        let mut out = alloc::try_vec("cholesky", v.len())?;
        for b in 0..busy(nb, n) {
            let l = decomp::cholesky(&v[b * n * n..(b + 1) * n * n], n).map_err(|k| {
                Error::invalid(
                    "cholesky",
                    format!(
                        "matrix {b} of the batch (shape {:?}) is not positive definite (pivot {k})",
                        self.shape()
                    ),
                )
            })?;
            out.extend(l);
        }
        let y = from_f64s(out, self.shape(), self.dtype(), self.device())?;
        Ok(bind(LinalgOp::Cholesky, &[self], y, |l| {
            let l = l.clone();
            vjp(move |g, _| {
                let n = l.shape()[l.rank() - 1];
                let phi = phi_mask(n, l.dtype(), l.device())?;
                let middle = l.matmul_with(&g[0], true, false)?.mul(&phi)?;
                // S = L⁻ᵀ middle L⁻¹ = (L⁻ᵀ (L⁻ᵀ middle)ᵀ)ᵀ
                let x = l.triangular_solve(&middle, true, true)?;
                let s = l.triangular_solve(&x.transpose()?, true, true)?.transpose()?;
                let ga = s.add(&s.transpose()?)?.mul_scalar(0.5)?;
                Ok(grads![Some(ga)])
            })
        }))
    }

    /// The determinant of each matrix of `[..., n, n]` (shape `[...]`; 1 for
    /// `n = 0`). d/dA = `g · det(A) · A⁻ᵀ` (which needs `A` invertible).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert!((a.det()?.to_scalar::<f64>()? + 2.0).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn det(&self) -> Result<Tensor> {
        let (nb, n) = square("det", self)?;
        let v = host_f64s("det", self)?;
        let d = alloc::try_collect(
            "det",
            (0..nb).map(|i| decomp::lu(&v[i * n * n..(i + 1) * n * n], n).det()),
        )?;
        let batch = self.shape()[..self.rank() - 2].to_vec();
        let y = from_f64s(d, &batch, self.dtype(), self.device())?;
        let a = self.clone();
        Ok(bind(LinalgOp::Det, &[self], y, move |y| {
            let y = y.clone();
            vjp(move |g, _| {
                let batch = &a.shape()[..a.rank() - 2];
                let scale = expand2(&g[0], batch)?.mul(&y.reshape(&[batch, &[1, 1]].concat())?)?;
                Ok(grads![Some(scale.mul(&inverse_for_gradient("det", &a)?.transpose()?)?)])
            })
        }))
    }

    /// `(sign, log|det|)` of each matrix of `[..., n, n]`, both of shape
    /// `[...]`; a singular matrix gives `(0, -inf)`. Only `log|det|` is
    /// differentiable: d/dA = `g · A⁻ᵀ`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![0.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let (sign, logabs) = a.slogdet()?;
    /// assert_eq!(sign.to_scalar::<f64>()?, -1.0);
    /// assert!((logabs.to_scalar::<f64>()? - 6f64.ln()).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn slogdet(&self) -> Result<(Tensor, Tensor)> {
        let (nb, n) = square("slogdet", self)?;
        let v = host_f64s("slogdet", self)?;
        let (mut signs, mut logs) = (alloc::try_vec("slogdet", nb)?, alloc::try_vec("slogdet", nb)?);
        for i in 0..nb {
            let (s, l) = decomp::lu(&v[i * n * n..(i + 1) * n * n], n).slogdet();
            signs.push(s);
            logs.push(l);
        }
        let batch = self.shape()[..self.rank() - 2].to_vec();
        let sign = bind_nondiff(
            LinalgOp::DetSign,
            &[self],
            from_f64s(signs, &batch, self.dtype(), self.device())?,
        );
        let y = from_f64s(logs, &batch, self.dtype(), self.device())?;
        let a = self.clone();
        let logabs = bind(LinalgOp::LogAbsDet, &[self], y, move |_| {
            vjp(move |g, _| {
                let batch = &a.shape()[..a.rank() - 2];
                Ok(grads![Some(
                    expand2(&g[0], batch)?.mul(&inverse_for_gradient("slogdet", &a)?.transpose()?)?
                )])
            })
        });
        Ok((sign, logabs))
    }

    /// `log|det A|` of each matrix of `[..., n, n]` (the second part of
    /// [`slogdet`](Self::slogdet)).
    pub fn logdet(&self) -> Result<Tensor> {
        Ok(self.slogdet().map_err(|e| e.for_op("logdet"))?.1)
    }
}

/// Murray's `Φ` as a mask: ones below the diagonal, ½ on it.
fn phi_mask(n: usize, dtype: DType, device: Device) -> Result<Tensor> {
    square_mask("cholesky", n, dtype, device, |i, j| match i.cmp(&j) {
        std::cmp::Ordering::Greater => 1.0,
        std::cmp::Ordering::Equal => 0.5,
        std::cmp::Ordering::Less => 0.0,
    })
}

/// The `n x n` matrix whose entry `(i, j)` is `f(i, j)`, for a gradient
/// rule of `op`: where it cannot be allocated (an empty batch of huge
/// matrices, `[0, 2^31, 2^31]`) an error naming `op`, not a panic.
pub(super) fn square_mask(
    op: &'static str,
    n: usize,
    dtype: DType,
    device: Device,
    f: impl Fn(usize, usize) -> f64,
) -> Result<Tensor> {
    let len = n
        .checked_mul(n)
        .ok_or_else(|| Error::ShapeOverflow { op, shape: vec![n, n] })?;
    let mut v = alloc::try_vec(op, len)?;
    v.extend((0..len).map(|k| f(k / n, k % n)));
    from_f64s(v, &[n, n], dtype, device)
}

/// `a⁻¹` for the gradient of `op` (`det`, `slogdet`): at a singular matrix
/// an error that names `op` and says it is the gradient that failed (the
/// value was fine; TensorFlow's gradient fails there too).
fn inverse_for_gradient(op: &'static str, a: &Tensor) -> Result<Tensor> {
    a.inverse()
        .map_err(|e| Error::invalid(op, format!("the gradient needs the inverse, and {e}")))
}
