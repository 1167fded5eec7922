//! Operator sugar: `&a + &b`, `&a * 2.0`, `-&a`.
//!
//! These call the fallible methods and **panic** on error (incompatible
//! shapes or dtypes), with the error's message. Use the methods (`add`,
//! `mul_scalar`, ...) where input can be bad.
//!
//! ```
//! use gradtape::Tensor;
//! let a = Tensor::vector(&[1.0f32, 2.0]);
//! let b = &(&a * &a) + 1.0;
//! assert_eq!(b.to_vec::<f32>().unwrap(), vec![2.0, 5.0]);
//! ```

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::tensor::Tensor;

macro_rules! sugar {
    ($trait:ident, $method:ident, $op:ident, $scalar:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.$op(rhs).unwrap_or_else(|e| panic!("{e}"))
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                (&self).$op(&rhs).unwrap_or_else(|e| panic!("{e}"))
            }
        }
        impl $trait<f64> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                self.$scalar(rhs).unwrap_or_else(|e| panic!("{e}"))
            }
        }
        impl $trait<f64> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                (&self).$scalar(rhs).unwrap_or_else(|e| panic!("{e}"))
            }
        }
    };
}

sugar!(Add, add, add, add_scalar);
sugar!(Sub, sub, sub, sub_scalar);
sugar!(Mul, mul, mul, mul_scalar);
sugar!(Div, div, div, div_scalar);

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(&self).unwrap_or_else(|e| panic!("{e}"))
    }
}
