//! Least squares, the pseudo-inverse and matrix norms: compositions of
//! the decompositions (`cholesky`, `svd`) and reductions, so their
//! gradients (any order) come from those ops' rules.

use crate::dispatch::{paused, vjp, Kind};
use crate::error::{Error, Result};
use crate::ops::desc::{DecompOp, Op};
use crate::ops::expect_float;
use crate::ops::{bind, grads};
use crate::tensor::{DType, Tensor};

/// Which matrix norm [`Tensor::matrix_norm`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixNorm {
    /// Frobenius: `sqrt(Σ a_ij²)`.
    Fro,
    /// Nuclear: the sum of the singular values.
    Nuc,
    /// The largest column sum of `|a_ij|`.
    One,
    /// The largest row sum of `|a_ij|`.
    Inf,
    /// Spectral: the largest singular value.
    Two,
}

/// `(C + λ I)⁻¹ R` through a Cholesky factor (`C` symmetric positive
/// definite `[..., n, n]`).
fn cholesky_solve(c: &Tensor, l2: f64, r: &Tensor) -> Result<Tensor> {
    let n = c.shape()[c.rank() - 1];
    let c = if l2 != 0.0 {
        c.add(&Tensor::try_eye(n, c.dtype())?.to(c.device())?.mul_scalar(l2)?)?
    } else {
        c.clone()
    };
    let l = c.cholesky()?;
    let y = l.triangular_solve(r, true, false)?;
    l.triangular_solve(&y, true, true)
}

impl Tensor {
    /// The least-squares solution `X` of `A X ≈ B` (`self` is `A`,
    /// `[..., m, n]`; `rhs` is `B`, `[..., m, k]`), with an optional ridge
    /// term `l2 ‖X‖²`, by the normal equations and a Cholesky factorisation
    /// as `tf.linalg.lstsq(fast=True)`: `(AᵀA + λI)⁻¹ AᵀB` when `m >= n`,
    /// `Aᵀ (AAᵀ + λI)⁻¹ B` otherwise (the minimum-norm solution). A
    /// rank-deficient `A` with `l2 = 0` is an error (not positive
    /// definite). Differentiable in both.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 0.0, 1.0, 1.0, 1.0, 2.0], &[3, 2])?;
    /// let b = Tensor::from_vec(vec![1.0f64, 2.0, 2.0], &[3, 1])?;
    /// let x = a.lstsq(&b, 0.0)?.to_vec::<f64>()?;
    /// assert!((x[0] - 7.0 / 6.0).abs() < 1e-12 && (x[1] - 0.5).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn lstsq(&self, rhs: &Tensor, l2: f64) -> Result<Tensor> {
        const OP: &str = "lstsq";
        expect_float(OP, self)?;
        let (sa, sb) = (self.shape(), rhs.shape());
        if sa.len() < 2 || sb.len() < 2 || sa[sa.len() - 2] != sb[sb.len() - 2] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: sa.to_vec(),
                rhs: sb.to_vec(),
            });
        }
        if !(l2 >= 0.0 && l2.is_finite()) {
            return Err(Error::invalid(OP, format!("l2 must be finite and >= 0, got {l2}")));
        }
        let (m, n) = (sa[sa.len() - 2], sa[sa.len() - 1]);
        let run = || {
            if m >= n {
                let c = self.matmul_with(self, true, false)?;
                cholesky_solve(&c, l2, &self.matmul_with(rhs, true, false)?)
            } else {
                let c = self.matmul_with(self, false, true)?;
                self.matmul_with(&cholesky_solve(&c, l2, rhs)?, true, false)
            }
        };
        run().map_err(|e| e.for_op(OP))
    }

    /// The Moore–Penrose pseudo-inverse of `[..., m, n]` matrices through
    /// the SVD, singular values at or below `rcond · max(s)` taken as zero
    /// (`rcond` defaults to `10 · max(m, n) · ε` of the dtype, as
    /// `tf.linalg.pinv`). Differentiable where the rank does not change,
    /// by its own rule (Golub and Pereyra's; see `pinv_vjp`), not
    /// through the SVD's, which is NaN at repeated or zero singular values
    /// (at `2·I`, or at any rank-deficient matrix). One op on tapes and in
    /// traced graphs.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0, 2.0, 4.0], &[2, 2])?;   // rank 1
    /// let p = a.pinv(None)?.to_vec::<f64>()?;
    /// let want = [0.04, 0.08, 0.08, 0.16];
    /// assert!(p.iter().zip(want).all(|(x, y)| (x - y).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn pinv(&self, rcond: Option<f64>) -> Result<Tensor> {
        // the value through the SVD, which no interpreter watches; the op
        // is bound whole, with its own rule
        let value = || self.pinv_value(rcond);
        let y = paused(Kind::Trace, || paused(Kind::Tape, || paused(Kind::Forward, value)))?;
        let a = self.clone();
        Ok(bind(
            Op::Decomp(DecompOp::Pinv(rcond.map(f64::to_bits))),
            &[self],
            y,
            move |p| {
                let (a, p) = (a.clone(), p.clone());
                vjp(move |g, _| Ok(grads![Some(pinv_vjp(&a, &p, &g[0])?)]))
            },
        ))
    }

    /// [`pinv`](Self::pinv)'s value, through the SVD.
    fn pinv_value(&self, rcond: Option<f64>) -> Result<Tensor> {
        const OP: &str = "pinv";
        let (s, u, v) = self.svd().map_err(|e| e.for_op(OP))?;
        let run = || {
            let sh = self.shape();
            let (m, n) = (sh[sh.len() - 2], sh[sh.len() - 1]);
            let eps = if self.dtype() == DType::F32 {
                f32::EPSILON as f64
            } else {
                f64::EPSILON
            };
            let rcond = rcond.unwrap_or(10.0 * m.max(n) as f64 * eps);
            let k = m.min(n);
            if k == 0 {
                return self.try_zeros_like()?.transpose();
            }
            let cutoff = s.narrow(-1, 0, 1)?.mul_scalar(rcond)?;
            let keep = s.gt(&cutoff)?;
            let safe = Tensor::where_(&keep, &s, &s.scalar_like(1.0)?)?;
            let inv = Tensor::where_(&keep, &safe.reciprocal()?, &s.scalar_like(0.0)?)?;
            v.mul(&inv.expand_dims(-2)?)?.matmul_with(&u, false, true)
        };
        run().map_err(|e| e.for_op(OP))
    }

    /// A norm of each matrix (the last two axes): Frobenius, nuclear, 1,
    /// infinity or spectral (`tf.norm(ord=...)` over `axis=[-2, -1]`).
    /// Differentiable (the nuclear and spectral norms through the SVD).
    ///
    /// ```
    /// use gradtape::{MatrixNorm, Tensor};
    /// let a = Tensor::from_vec(vec![1.0f64, -2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(a.matrix_norm(MatrixNorm::One)?.to_scalar::<f64>()?, 6.0);
    /// assert_eq!(a.matrix_norm(MatrixNorm::Inf)?.to_scalar::<f64>()?, 7.0);
    /// assert!((a.matrix_norm(MatrixNorm::Fro)?.to_scalar::<f64>()? - 30f64.sqrt()).abs() < 1e-14);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn matrix_norm(&self, ord: MatrixNorm) -> Result<Tensor> {
        const OP: &str = "matrix_norm";
        expect_float(OP, self)?;
        if self.rank() < 2 {
            return Err(Error::invalid(
                OP,
                format!("needs matrices [..., m, n], got shape {:?}", self.shape()),
            ));
        }
        let run = || match ord {
            MatrixNorm::Fro => self.norm(&[-2, -1], false),
            MatrixNorm::Nuc => self.svd()?.0.sum(&[-1], false),
            MatrixNorm::One => self.abs()?.sum(&[-2], false)?.max(&[-1], false),
            MatrixNorm::Inf => self.abs()?.sum(&[-1], false)?.max(&[-1], false),
            MatrixNorm::Two => self.svd()?.0.max(&[-1], false),
        };
        run().map_err(|e| e.for_op(OP))
    }
}

/// The gradient of `P = pinv(A)` (`A`: `[..., m, n]`) for the cotangent
/// `G` of `P`, from Golub and Pereyra's derivative of the pseudo-inverse
/// where the rank is constant, `dP = −P dA P + P Pᵀ dAᵀ (I − A P) + (I −
/// P A) dAᵀ Pᵀ P`, transposed: `−Pᵀ G Pᵀ + (I − A P) Gᵀ P Pᵀ + Pᵀ P Gᵀ
/// (I − P A)`. In products of the op's own output, so that its own
/// derivatives come through this rule again.
fn pinv_vjp(a: &Tensor, p: &Tensor, g: &Tensor) -> Result<Tensor> {
    let first = p.matmul_with(g, true, false)?.matmul_with(p, false, true)?;
    // Gᵀ P Pᵀ, and (I − A P) times it
    let x = g.matmul_with(p, true, false)?.matmul_with(p, false, true)?;
    let second = x.sub(&a.matmul(&p.matmul(&x)?)?)?;
    // Pᵀ P Gᵀ, and it times (I − P A)
    let y = p.matmul_with(p, true, false)?.matmul_with(g, false, true)?;
    let third = y.sub(&y.matmul(p)?.matmul(a)?)?;
    second.add(&third)?.sub(&first)
}
