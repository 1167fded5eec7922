//! Indexing: gather along an axis and its adjoint, scatter-add.

use super::{bind_jvp, grads, only};
use crate::autodiff::tape::vjp;
use crate::error::Result;
use crate::kernels::cpu::index;
use crate::tensor::layout::norm_axis;
use crate::tensor::Tensor;

impl Tensor {
    /// Slices of `self` along `axis` picked by integer `indices`: the output
    /// shape is `shape[..axis] + indices.shape + shape[axis+1..]`. An index
    /// outside `0..shape[axis]` is an error. d/dparams scatters the cotangent
    /// back (densely, for now); indices get no gradient.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// let rows = x.gather(&Tensor::vector(&[2i64, 0]), 0)?;
    /// assert_eq!(rows.to_vec::<f32>()?, vec![5.0, 6.0, 1.0, 2.0]);
    /// assert!(x.gather(&Tensor::vector(&[3i64]), 0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn gather(&self, indices: &Tensor, axis: isize) -> Result<Tensor> {
        let ax = norm_axis("gather", axis, self.shape())?;
        let y = index::gather(self, indices, ax)?;
        let (idx, dim) = (indices.clone(), self.shape()[ax]);
        Ok(bind_jvp(
            "Gather",
            &[self, indices],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].scatter_add(&idx, ax as isize, dim)?), None])),
            |t, _| only(t)?.gather(indices, axis),
        ))
    }

    /// The adjoint of [`gather`](Self::gather): zeros of shape
    /// `shape[..axis] + [dim] + shape[axis + indices.rank()..]` with each
    /// slice of `self` added at its index (repeated indices accumulate).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let u = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    /// let s = u.scatter_add(&Tensor::vector(&[0i32, 2, 0]), 0, 3)?;
    /// assert_eq!(s.to_vec::<f64>()?, vec![4.0, 0.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scatter_add(&self, indices: &Tensor, axis: isize, dim: usize) -> Result<Tensor> {
        let ax = norm_axis("scatter_add", axis, self.shape())?;
        let y = index::scatter_add(self, indices, ax, dim)?;
        let idx = indices.clone();
        Ok(bind_jvp(
            "ScatterAdd",
            &[self, indices],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].gather(&idx, ax as isize)?), None])),
            |t, _| only(t)?.scatter_add(indices, axis, dim),
        ))
    }
}
