//! Products built on matmul: matvec, outer, tensordot.
//!
//! All are compositions of differentiable ops (reshapes, permutes, one
//! matmul or a broadcast multiply), so their gradients, to any order, and
//! their traces follow.

use super::super::expect_same_dtype;
use super::super::reduce::norm_axes;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// Matrix-vector product: `self` is `[..., m, n]`, `v` is `[..., n]`
    /// (batch dims broadcast); the result is `[..., m]`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(a.matvec(&Tensor::vector(&[1.0f64, 1.0]))?.to_vec::<f64>()?, vec![3.0, 7.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn matvec(&self, v: &Tensor) -> Result<Tensor> {
        if v.rank() == 0 || self.rank() < 2 {
            return Err(Error::ShapeMismatch {
                op: "matvec",
                lhs: self.shape().to_vec(),
                rhs: v.shape().to_vec(),
            });
        }
        self.matmul(&v.expand_dims(-1)?)
            .map_err(|e| rename(e, "matvec", self, v))?
            .squeeze(&[-1])
    }

    /// Outer product: every element of `self` times every element of `b`;
    /// the shape is `self.shape ++ b.shape`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let o = Tensor::vector(&[1.0f32, 2.0]).outer(&Tensor::vector(&[3.0f32, 4.0, 5.0]))?;
    /// assert_eq!(o.shape(), &[2, 3]);
    /// assert_eq!(o.to_vec::<f32>()?, vec![3.0, 4.0, 5.0, 6.0, 8.0, 10.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn outer(&self, b: &Tensor) -> Result<Tensor> {
        expect_same_dtype("outer", self, b)?;
        super::super::expect_numeric("outer", self)?;
        let mut s = self.shape().to_vec();
        s.extend(std::iter::repeat_n(1, b.rank()));
        self.reshape(&s)?.mul(b)
    }

    /// Contracts `axes_a` of `self` with `axes_b` of `b` (pairwise, equal
    /// sizes); the result has the free dims of `self` then those of `b`.
    /// Computed by permute, reshape and one matmul (numeric dtypes).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// let b = Tensor::from_vec(vec![1.0f64, 0.0, 1.0], &[3])?;
    /// assert_eq!(a.tensordot(&b, &[1], &[0])?.to_vec::<f64>()?, vec![4.0, 10.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn tensordot(&self, b: &Tensor, axes_a: &[isize], axes_b: &[isize]) -> Result<Tensor> {
        const OP: &str = "tensordot";
        expect_same_dtype(OP, self, b)?;
        super::super::expect_numeric(OP, self)?;
        let (sa, sb) = (self.shape(), b.shape());
        let mismatch = || Error::ShapeMismatch {
            op: OP,
            lhs: sa.to_vec(),
            rhs: sb.to_vec(),
        };
        if axes_a.len() != axes_b.len() {
            return Err(Error::invalid(
                OP,
                format!("{axes_a:?} and {axes_b:?} list different numbers of axes (shapes {sa:?}, {sb:?})"),
            ));
        }
        // normalised, in the given (pairing) order
        let ca: Vec<usize> = axes_a
            .iter()
            .map(|&a| crate::tensor::layout::norm_axis(OP, a, sa))
            .collect::<Result<_>>()?;
        let cb: Vec<usize> = axes_b
            .iter()
            .map(|&a| crate::tensor::layout::norm_axis(OP, a, sb))
            .collect::<Result<_>>()?;
        norm_axes(OP, axes_a, sa)?;
        norm_axes(OP, axes_b, sb)?;
        if ca.iter().zip(&cb).any(|(&i, &j)| sa[i] != sb[j]) {
            return Err(mismatch());
        }
        let fa: Vec<usize> = (0..sa.len()).filter(|i| !ca.contains(i)).collect();
        let fb: Vec<usize> = (0..sb.len()).filter(|i| !cb.contains(i)).collect();
        let k: usize = ca.iter().map(|&i| sa[i]).product();
        let m: usize = fa.iter().map(|&i| sa[i]).product();
        let n: usize = fb.iter().map(|&i| sb[i]).product();
        let pa: Vec<usize> = fa.iter().chain(&ca).copied().collect();
        let pb: Vec<usize> = cb.iter().chain(&fb).copied().collect();
        let a2 = self.permute(&pa)?.reshape(&[m, k])?;
        let b2 = b.permute(&pb)?.reshape(&[k, n])?;
        let out: Vec<usize> = fa.iter().map(|&i| sa[i]).chain(fb.iter().map(|&i| sb[i])).collect();
        a2.matmul(&b2).map_err(|e| e.for_op(OP))?.reshape(&out)
    }
}

/// Renames a matmul error to the calling op.
fn rename(e: Error, op: &'static str, a: &Tensor, b: &Tensor) -> Error {
    match e {
        Error::ShapeMismatch { .. } | Error::InnerDimMismatch { .. } | Error::InvalidArgument { .. } => {
            Error::ShapeMismatch {
                op,
                lhs: a.shape().to_vec(),
                rhs: b.shape().to_vec(),
            }
        }
        Error::UnsupportedDType { dtype, expected, .. } => Error::UnsupportedDType { op, dtype, expected },
        Error::DTypeMismatch { lhs, rhs, .. } => Error::DTypeMismatch { op, lhs, rhs },
        other => other,
    }
}
