//! More linear algebra built on matmul and views: matvec, outer, tensordot,
//! diag, diag_part, trace, band_part (and tril/triu).
//!
//! Most are compositions of differentiable ops (their gradients, to any
//! order, follow); `diag_part` is a strided view with its own rule.

use super::reduce::norm_axes;
use super::{bind, expect_same_dtype, grads, unsupported};
use crate::autodiff::tape::vjp_batched;
use crate::error::{Error, Result};
use crate::tensor::{DType, Layout, Tensor};

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
        if self.dtype() == DType::Bool {
            return Err(unsupported("outer", self.dtype(), "a numeric dtype"));
        }
        let mut s = self.shape().to_vec();
        s.extend(std::iter::repeat_n(1, b.rank()));
        self.reshape(&s)?.mul(b)
    }

    /// Contracts `axes_a` of `self` with `axes_b` of `b` (pairwise, equal
    /// sizes); the result has the free dims of `self` then those of `b`.
    /// Computed by permute, reshape and one matmul (floats).
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
        super::expect_float(OP, self)?;
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
        a2.matmul(&b2)?.reshape(&out)
    }

    /// A diagonal matrix from each vector of `[..., n]`: `[..., n, n]` with
    /// the vector on the diagonal (numeric dtypes).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let d = Tensor::vector(&[1i32, 2]).diag()?;
    /// assert_eq!(d.to_vec::<i32>()?, vec![1, 0, 0, 2]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn diag(&self) -> Result<Tensor> {
        if self.rank() == 0 {
            return Err(Error::invalid("diag", "needs a tensor of rank >= 1, got shape []"));
        }
        if self.dtype() == DType::Bool {
            return Err(unsupported("diag", self.dtype(), "a numeric dtype"));
        }
        let n = self.shape()[self.rank() - 1];
        self.expand_dims(-1)?.mul(&Tensor::eye(n, self.dtype()))
    }

    /// The main diagonal of each matrix of `[..., n, m]`: `[..., min(n, m)]`.
    /// A view (no copy); d/dx puts the cotangent back on a zero diagonal.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec((0..6).collect::<Vec<i64>>(), &[2, 3])?;
    /// assert_eq!(a.diag_part()?.to_vec::<i64>()?, vec![0, 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn diag_part(&self) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::invalid(
                "diag_part",
                format!("needs a tensor of rank >= 2, got shape {:?}", self.shape()),
            ));
        }
        let (n, m) = (self.shape()[r - 2], self.shape()[r - 1]);
        let k = n.min(m);
        let l = self.layout();
        let mut shape = l.shape.clone();
        let mut strides = l.strides.clone();
        shape.truncate(r - 2);
        shape.push(k);
        let s = strides[r - 2] + strides[r - 1];
        strides.truncate(r - 2);
        strides.push(s);
        let y = self.view(Layout {
            shape,
            strides,
            offset: l.offset,
        });
        Ok(bind("MatrixDiagPart", &[self], y, move |_| {
            vjp_batched(move |g, _| {
                let d = g[0].diag()?;
                let mut pads = vec![(0, 0); d.rank()];
                let r = pads.len();
                pads[r - 2].1 = n - k;
                pads[r - 1].1 = m - k;
                Ok(grads![Some(d.pad(&pads)?)])
            })
        }))
    }

    /// The sum of the main diagonal of each matrix of `[..., n, m]`: `[...]`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(a.trace()?.to_scalar::<f32>()?, 5.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn trace(&self) -> Result<Tensor> {
        self.diag_part()
            .map_err(|_| Error::invalid("trace", format!("needs rank >= 2, got shape {:?}", self.shape())))?
            .sum(&[-1], false)
    }

    /// Keeps, in each matrix of `[..., n, m]`, the band of `num_lower`
    /// sub-diagonals and `num_upper` super-diagonals (a negative count keeps
    /// the whole triangle) and zeros the rest, as TF's `band_part`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(a.band_part(-1, 0)?.to_vec::<i32>()?, vec![1, 0, 3, 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn band_part(&self, num_lower: isize, num_upper: isize) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::invalid(
                "band_part",
                format!("needs a tensor of rank >= 2, got shape {:?}", self.shape()),
            ));
        }
        let (n, m) = (self.shape()[r - 2], self.shape()[r - 1]);
        let keep: Vec<bool> = (0..n * m)
            .map(|q| {
                let (i, j) = ((q / m) as isize, (q % m) as isize);
                (num_lower < 0 || i - j <= num_lower) && (num_upper < 0 || j - i <= num_upper)
            })
            .collect();
        let mask = Tensor::from_vec(keep, &[n, m])?;
        Tensor::where_(&mask, self, &self.scalar_like(0.0)?)
    }

    /// The lower triangle (on and below the diagonal) of each matrix.
    pub fn tril(&self) -> Result<Tensor> {
        self.band_part(-1, 0).map_err(|e| e.for_op("tril"))
    }

    /// The upper triangle (on and above the diagonal) of each matrix.
    pub fn triu(&self) -> Result<Tensor> {
        self.band_part(0, -1).map_err(|e| e.for_op("triu"))
    }
}

/// Renames a matmul error to the calling op.
fn rename(e: Error, op: &'static str, a: &Tensor, b: &Tensor) -> Error {
    match e {
        Error::ShapeMismatch { .. } | Error::InvalidArgument { .. } => Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        },
        Error::UnsupportedDType { dtype, expected, .. } => Error::UnsupportedDType { op, dtype, expected },
        Error::DTypeMismatch { lhs, rhs, .. } => Error::DTypeMismatch { op, lhs, rhs },
        other => other,
    }
}
