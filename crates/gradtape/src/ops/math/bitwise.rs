//! Bitwise ops on integer tensors, broadcasting (TensorFlow's
//! `tf.bitwise`): `bitwise_and`, `bitwise_or`, `bitwise_xor`, `invert`,
//! `left_shift`, `right_shift`. Not differentiable (bound for traces only).
//!
//! Shifts follow TensorFlow's CPU kernels where C leaves them undefined: a
//! shift amount below zero counts as zero and one at or above the width as
//! the width minus one (`1 << 40` on `i32` is `1 << 31`, `i32::MIN`);
//! `right_shift` is arithmetic (the sign bit is copied in).

use crate::error::Result;
use crate::kernels::cpu::elementwise::{map, zip};
use crate::ops::desc::{Binary, Unary};
use crate::ops::{bind_nondiff, expect_same_dtype, unsupported};
use crate::tensor::{DType, Tensor};

/// The integer types of the bitwise ops: their operations on one element.
trait Bits: Copy {
    /// The width in bits, less one: the largest shift that is defined.
    const MAX_SHIFT: Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
    /// `self << s`, `s` clamped to `0..=MAX_SHIFT`.
    fn shl(self, s: Self) -> Self;
    /// `self >> s` (arithmetic), `s` clamped to `0..=MAX_SHIFT`.
    fn shr(self, s: Self) -> Self;
}

macro_rules! bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            const MAX_SHIFT: $t = <$t>::BITS as $t - 1;
            fn and(self, o: Self) -> Self { self & o }
            fn or(self, o: Self) -> Self { self | o }
            fn xor(self, o: Self) -> Self { self ^ o }
            fn not(self) -> Self { !self }
            fn shl(self, s: Self) -> Self { self << s.clamp(0, Self::MAX_SHIFT) }
            fn shr(self, s: Self) -> Self { self >> s.clamp(0, Self::MAX_SHIFT) }
        }
    )*};
}
bits!(i32, i64);

impl Tensor {
    /// `a & b` elementwise on integer tensors of one dtype, broadcasting.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let r = Tensor::vector(&[12i32, -1]).bitwise_and(&Tensor::vector(&[10i32, 5]))?;
    /// assert_eq!(r.to_vec::<i32>()?, vec![8, 5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn bitwise_and(&self, rhs: &Tensor) -> Result<Tensor> {
        self.bitwise("bitwise_and", Binary::BitwiseAnd, rhs, Bits::and, Bits::and)
    }

    /// `a | b` elementwise on integer tensors of one dtype, broadcasting.
    pub fn bitwise_or(&self, rhs: &Tensor) -> Result<Tensor> {
        self.bitwise("bitwise_or", Binary::BitwiseOr, rhs, Bits::or, Bits::or)
    }

    /// `a ^ b` elementwise on integer tensors of one dtype, broadcasting.
    pub fn bitwise_xor(&self, rhs: &Tensor) -> Result<Tensor> {
        self.bitwise("bitwise_xor", Binary::BitwiseXor, rhs, Bits::xor, Bits::xor)
    }

    /// `a << b` elementwise on integer tensors of one dtype, broadcasting;
    /// bits shifted past the top are lost, and the shift is clamped to
    /// `0..width` (see the module docs).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let r = Tensor::vector(&[1i32, -8, 1]).left_shift(&Tensor::vector(&[3i32, 1, 40]))?;
    /// assert_eq!(r.to_vec::<i32>()?, vec![8, -16, i32::MIN]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn left_shift(&self, rhs: &Tensor) -> Result<Tensor> {
        self.bitwise("left_shift", Binary::LeftShift, rhs, Bits::shl, Bits::shl)
    }

    /// `a >> b` elementwise on integer tensors of one dtype, broadcasting:
    /// arithmetic (negative numbers stay negative), the shift clamped to
    /// `0..width`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let r = Tensor::vector(&[-8i64, 8, -8]).right_shift(&Tensor::vector(&[1i64, 1, 99]))?;
    /// assert_eq!(r.to_vec::<i64>()?, vec![-4, 4, -1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn right_shift(&self, rhs: &Tensor) -> Result<Tensor> {
        self.bitwise("right_shift", Binary::RightShift, rhs, Bits::shr, Bits::shr)
    }

    /// `!a` (every bit flipped) elementwise on an integer tensor: `-a - 1`.
    ///
    /// ```
    /// let r = gradtape::Tensor::vector(&[12i32, -1, 0]).invert()?;
    /// assert_eq!(r.to_vec::<i32>()?, vec![-13, 0, -1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn invert(&self) -> Result<Tensor> {
        let y = match self.dtype() {
            DType::I32 => map::<i32, i32>("invert", self, Bits::not)?,
            DType::I64 => map::<i64, i64>("invert", self, Bits::not)?,
            dt => return Err(unsupported("invert", dt, "i32 or i64")),
        };
        Ok(bind_nondiff(Unary::Invert, &[self], y))
    }

    fn bitwise(
        &self,
        op: &'static str,
        desc: Binary,
        rhs: &Tensor,
        on_i32: fn(i32, i32) -> i32,
        on_i64: fn(i64, i64) -> i64,
    ) -> Result<Tensor> {
        expect_same_dtype(op, self, rhs)?;
        let y = match self.dtype() {
            DType::I32 => zip::<i32, i32, i32>(op, self, rhs, on_i32)?,
            DType::I64 => zip::<i64, i64, i64>(op, self, rhs, on_i64)?,
            dt => return Err(unsupported(op, dt, "i32 or i64")),
        };
        Ok(bind_nondiff(desc, &[self, rhs], y))
    }
}
