//! Logical reductions of bool tensors over any set of axes: `all`, `any`.

use super::*;
use crate::error::Result;
use crate::ops::desc::{Lazy, Op, Reduce, ReduceKind};
use crate::ops::{bind_nondiff, unsupported};
use crate::tensor::{DType, Tensor};

impl Tensor {
    /// Logical AND over `axes` of a bool tensor (true over no elements).
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![true, false, true, true], &[2, 2])?;
    /// assert_eq!(x.all(&[1], false)?.to_vec::<bool>()?, vec![false, true]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn all(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        self.bool_reduce("all", axes, keepdims, true)
    }

    /// Logical OR over `axes` of a bool tensor (false over no elements).
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![true, false, false, false], &[2, 2])?;
    /// assert_eq!(x.any(&[1], false)?.to_vec::<bool>()?, vec![true, false]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn any(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        self.bool_reduce("any", axes, keepdims, false)
    }

    fn bool_reduce(&self, op: &'static str, axes: &[isize], keepdims: bool, all: bool) -> Result<Tensor> {
        if self.dtype() != DType::Bool {
            return Err(unsupported(op, self.dtype(), "bool"));
        }
        let ax = norm_axes(op, axes, self.shape())?;
        let host = |x: &Tensor| {
            reduce_rows::<bool, bool>(op, x, &ax, keepdims, |r| {
                if all {
                    r.iter().all(|&b| b)
                } else {
                    r.iter().any(|&b| b)
                }
            })
        };
        // (on a GPU: the min or max of the bools)
        let gpu = |_| {
            let y = crate::kernels::cuda::reduce(op, if all { "min" } else { "max" }, self, &ax)?;
            Ok(if keepdims {
                reshaped_raw(&y, &kept_shape(self.shape(), &ax))
            } else {
                y
            })
        };
        let y = match crate::dispatch::device::offload(op, &[self], gpu, |h| host(&h[0])) {
            Some(r) => r?,
            None => host(self)?,
        };
        let kind = if all { ReduceKind::All } else { ReduceKind::Any };
        let desc = Lazy(if all { "All" } else { "Any" }, || {
            Op::Reduce(Reduce::new(kind, axes, keepdims))
        });
        Ok(bind_nondiff(desc, &[self], y))
    }
}
