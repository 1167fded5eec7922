//! Products over any set of axes, with a gradient that is right at zeros.

use super::*;
use crate::dispatch::vjp;
use crate::error::Result;
use crate::ops::desc::{Lazy, Op, Reduce, ReduceKind};
use crate::ops::{bind, grads, unsupported};
use crate::tensor::{with_num_dtype, Num, Tensor};
use num_traits::One;

impl Tensor {
    /// Product over `axes` (numeric dtypes; integers wrap). The gradient is
    /// right when inputs contain zeros: it is the product of the other
    /// elements, computed with exclusive cumulative products from both sides
    /// (as TensorFlow), never by dividing by `x`.
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(x.prod(&[1], false)?.to_vec::<f64>()?, vec![2.0, 12.0]);
    /// assert_eq!(x.prod(&[0, 1], true)?.shape(), &[1, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn prod(&self, axes: &[isize], keepdims: bool) -> Result<Tensor> {
        let ax = norm_axes("prod", axes, self.shape())?;
        if !(self.dtype().is_float() || self.dtype().is_int()) {
            return Err(unsupported("prod", self.dtype(), "a numeric dtype"));
        }
        let host = |x: &Tensor| {
            if !x.dtype().is_half() {
                // (the kernel of sum, max and min: columns in place)
                let y = crate::kernels::cpu::reduce::prod("prod", x, &ax)?;
                return Ok(reshaped_raw(&y, &out_shape(x.shape(), &ax, keepdims)));
            }
            // (half types folded in their own arithmetic, as always)
            with_num_dtype!(x.dtype(), T => reduce_rows::<T, T>("prod", x, &ax, keepdims,
                |r| r.iter().fold(T::one(), |a, &b| a.mul_wrap(b))),
                _ => Err(unsupported("prod", x.dtype(), "a numeric dtype")))
        };
        // on a GPU: the reduction kernel (`kernels::cuda::reduce`), its
        // result viewed with the kept dims
        let gpu = crate::dispatch::device::offload(
            "prod",
            &[self],
            |_| {
                let y = crate::kernels::cuda::reduce("prod", "prod", self, &ax)?;
                Ok(reshaped_raw(&y, &out_shape(self.shape(), &ax, keepdims)))
            },
            |h| host(&h[0]),
        );
        let y = gpu.unwrap_or_else(|| host(self))?;
        let x = self.clone();
        let desc = Lazy("Prod", || Op::Reduce(Reduce::new(ReduceKind::Prod, axes, keepdims)));
        Ok(bind(desc, &[self], y, move |_| {
            vjp(move |g, _| {
                let shape = x.shape();
                let kept: Vec<usize> = (0..shape.len()).filter(|d| !ax.contains(d)).collect();
                let perm: Vec<usize> = kept.iter().chain(&ax).copied().collect();
                let mut inv = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p] = i;
                }
                let pshape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
                let n_red: usize = ax.iter().map(|&d| shape[d]).product();
                let n_kept: usize = kept.iter().map(|&d| shape[d]).product();
                let xt = x.permute(&perm)?.reshape(&[n_kept, n_red])?;
                let left = xt.cumprod(1, true, false)?;
                let right = xt.cumprod(1, true, true)?;
                let others = left.mul(&right)?.reshape(&pshape)?.permute(&inv)?;
                let gx = g[0].reshape(&kept_shape(shape, &ax))?.broadcast_to(shape)?;
                Ok(grads![Some(gx.mul(&others)?)])
            })
        }))
    }
}
