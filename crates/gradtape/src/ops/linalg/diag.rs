//! Diagonals and bands of matrices: diag, diag_part, trace, band_part
//! (and tril/triu).
//!
//! `diag_part` is a strided view with its own rule and descriptor
//! (`MatrixDiagPart`); the others are compositions of differentiable ops
//! (a select on the identity, a sum, a select with a constant mask).

use super::super::desc::LinalgOp;
use super::super::{bind, grads};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::tensor::{Layout, Tensor};

impl Tensor {
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
        crate::ops::expect_numeric("diag", self)?;
        let n = self.shape()[self.rank() - 1];
        // (selected, not multiplied by the identity: `inf · 0` and `NaN · 0`
        // filled a row with NaN where TensorFlow's `MatrixDiag` has zeros
        // off the diagonal; diag_part's gradient is this op too: random
        // programs vs TF, seed 42's program 242)
        let run = || -> Result<Tensor> {
            let on = Tensor::try_eye(n, crate::tensor::DType::F32)?
                .gt_scalar(0.5)?
                .to(self.device())?;
            Tensor::where_(&on, &self.expand_dims(-1)?, &self.scalar_like(0.0)?)
        };
        run().map_err(|e| e.for_op("diag"))
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
        Ok(bind(LinalgOp::DiagPart, &[self], y, move |_| {
            vjp(move |g, _| {
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
    /// the whole triangle) and zeros the rest, as TF's `band_part`; a count
    /// above the number of rows (`num_lower`) or columns (`num_upper`) is an
    /// error, as in TensorFlow.
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
        // (TensorFlow's bounds: a count past the matrix is refused, not
        // taken as the whole triangle)
        for (what, count, dim, of) in [
            ("num_lower", num_lower, n, "rows"),
            ("num_upper", num_upper, m, "columns"),
        ] {
            if count > 0 && count as usize > dim {
                return Err(Error::invalid(
                    "band_part",
                    format!(
                        "{what} must be negative or at most the number of {of} ({dim}), got {count} for shape {:?}",
                        self.shape()
                    ),
                ));
            }
        }
        let keep = crate::tensor::alloc::try_collect(
            "band_part",
            (0..n * m).map(|q| {
                let (i, j) = ((q / m) as isize, (q % m) as isize);
                (num_lower < 0 || i - j <= num_lower) && (num_upper < 0 || j - i <= num_upper)
            }),
        )?;
        let mask = Tensor::from_vec(keep, &[n, m])?.to(self.device())?;
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
