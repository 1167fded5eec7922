//! `bias_add`: a vector added along the last axis.

use super::super::desc::NnOp;
use super::super::{bind, expect_same_dtype, grads, unsupported};
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::zip;
use crate::tensor::Tensor;

impl Tensor {
    /// `x + bias`, `bias` a vector as long as `x`'s last axis (an error
    /// otherwise). d/dbias sums the cotangent over every other axis.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::zeros(&[2, 3], gradtape::DType::F32);
    /// let y = x.bias_add(&Tensor::vector(&[1.0f32, 2.0, 3.0]))?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    /// assert!(x.bias_add(&Tensor::vector(&[1.0f32, 2.0])).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn bias_add(&self, bias: &Tensor) -> Result<Tensor> {
        const OP: &str = "bias_add";
        expect_same_dtype(OP, self, bias)?;
        if self.rank() == 0 || bias.rank() != 1 || bias.shape()[0] != self.shape()[self.rank() - 1] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: bias.shape().to_vec(),
            });
        }
        let y = with_dtype_num(OP, self, bias)?;
        let (sx, sb) = (self.shape().to_vec(), bias.shape().to_vec());
        Ok(bind(NnOp::BiasAdd, &[self, bias], y, move |_| {
            vjp(move |g, needs| {
                let gx = needs[0].then(|| g[0].sum_to_shape(&sx)).transpose()?;
                let gb = needs[1].then(|| g[0].sum_to_shape(&sb)).transpose()?;
                Ok(grads![gx, gb])
            })
        }))
    }
}

/// The raw (untaped) broadcast sum of bias_add.
fn with_dtype_num(op: &'static str, x: &Tensor, b: &Tensor) -> Result<Tensor> {
    use crate::tensor::{with_num_dtype, Num};
    if x.device().is_cuda() || b.device().is_cuda() || x.dtype().is_half() {
        // (the float add of the elementwise table, on the inputs' GPU; for
        // the half types over f32 blocks, the bits of their own addition,
        // which had run per element: 30x the f32 kernel)
        if let Some(r) = crate::ops::math::table::binary_zip(op, &crate::ops::desc::Binary::Add, x, b) {
            return r;
        }
    }
    with_num_dtype!(x.dtype(), T => zip::<T, T, T>(op, x, b, |u: T, v: T| u.add_wrap(v)),
        _ => Err(unsupported(op, x.dtype(), "a numeric dtype")))
}
