//! Rounding: `floor`, `ceil`, `round` (halves to even). Step functions:
//! their gradient is zero (recorded, as TensorFlow's `None`). Integer
//! tensors are returned unchanged.

use crate::dispatch::vjp_batched;
use crate::error::Result;
use crate::kernels::cpu::elementwise::map;
use crate::ops::desc::Unary;
use crate::ops::{bind, grads};
use crate::tensor::{bf16, f16, Tensor};

/// Records an op whose gradient is zero (a step function).
fn stepwise(op: Unary, x: &Tensor, y: Tensor) -> Tensor {
    bind(op, &[x], y, |_| vjp_batched(|_, _| Ok(grads![None])))
}

impl Tensor {
    /// Largest integer not above x. Integer tensors are returned unchanged.
    /// The gradient is zero (recorded, as TensorFlow's `None`).
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-1.5f64, 1.5]);
    /// assert_eq!(x.floor()?.to_vec::<f64>()?, vec![-2.0, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn floor(&self) -> Result<Tensor> {
        self.rounding("floor", Unary::Floor, |v| v.floor(), |v| v.floor())
    }

    /// Smallest integer not below x. Integers unchanged; gradient zero.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-1.5f64, 1.5]);
    /// assert_eq!(x.ceil()?.to_vec::<f64>()?, vec![-1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn ceil(&self) -> Result<Tensor> {
        self.rounding("ceil", Unary::Ceil, |v| v.ceil(), |v| v.ceil())
    }

    /// Nearest integer, halves to even (as TensorFlow's `round`: 0.5 → 0,
    /// 1.5 → 2, 2.5 → 2, -0.5 → -0). Integers unchanged; gradient zero.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[0.5f64, 1.5, 2.5, -2.5, 2.6]);
    /// assert_eq!(x.round()?.to_vec::<f64>()?, vec![0.0, 2.0, 2.0, -2.0, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn round(&self) -> Result<Tensor> {
        self.rounding("round", Unary::Round, |v| v.round_ties_even(), |v| v.round_ties_even())
    }

    fn rounding(&self, op: &'static str, desc: Unary, f32_: fn(f32) -> f32, f64_: fn(f64) -> f64) -> Result<Tensor> {
        let y = match self.dtype() {
            crate::DType::F32 => map::<f32, f32>(op, self, f32_)?,
            crate::DType::F64 => map::<f64, f64>(op, self, f64_)?,
            // half values round exactly through f32
            crate::DType::F16 => map::<f16, f16>(op, self, |v| f16::from_f32(f32_(v.to_f32())))?,
            crate::DType::BF16 => map::<bf16, bf16>(op, self, |v| bf16::from_f32(f32_(v.to_f32())))?,
            dt if dt.is_int() => return Ok(self.clone()),
            dt => return Err(crate::ops::unsupported(op, dt, "a numeric dtype")),
        };
        Ok(stepwise(desc, self, y))
    }
}
