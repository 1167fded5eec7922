//! Rounding: `floor`, `ceil`, `round` (halves to even). Step functions:
//! their gradient is zero (recorded, as TensorFlow's `None`). Integer
//! tensors are returned unchanged.

use crate::dispatch::vjp;
use crate::error::Result;
use crate::ops::desc::Unary;
use crate::ops::{bind, grads};
use crate::tensor::Tensor;

/// Records an op whose gradient is zero (a step function).
fn stepwise(op: Unary, x: &Tensor, y: Tensor) -> Tensor {
    bind(op, &[x], y, |_| vjp(|_, _| Ok(grads![None])))
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
        self.rounding("floor", Unary::Floor)
    }

    /// Smallest integer not below x. Integers unchanged; gradient zero.
    ///
    /// ```
    /// let x = gradtape::Tensor::vector(&[-1.5f64, 1.5]);
    /// assert_eq!(x.ceil()?.to_vec::<f64>()?, vec![-1.0, 2.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn ceil(&self) -> Result<Tensor> {
        self.rounding("ceil", Unary::Ceil)
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
        self.rounding("round", Unary::Round)
    }

    fn rounding(&self, op: &'static str, desc: Unary) -> Result<Tensor> {
        let y = match self.dtype() {
            // (half values round exactly through f32)
            dt if dt.is_float() => super::table::float_unary(desc.clone(), op, self)?,
            dt if dt.is_int() => return Ok(self.clone()),
            dt => return Err(crate::ops::unsupported(op, dt, "a numeric dtype")),
        };
        Ok(stepwise(desc, self, y))
    }
}
