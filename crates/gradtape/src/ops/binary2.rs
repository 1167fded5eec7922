//! More elementwise functions of two tensors, broadcasting:
//! `squared_difference`, `atan2`, `floor_div`, `floor_mod`, and the logical
//! ops on bool tensors. Differentiable rules are batched (they undo
//! broadcasting with [`ct::unbroadcast`]).

use super::desc::{Binary, Unary};
use super::{bind, bind_jvp, bind_nondiff, ct, expect_float, expect_same_dtype, grads, sum_terms, unsupported};
use crate::autodiff::tape::vjp_batched;
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::{map, zip};
use crate::tensor::{with_float_dtype, DType, Tensor};
use num_traits::Zero;

/// Integer floor division: rounds toward -inf; `MIN / -1` wraps. The
/// divisor is non-zero (checked by the caller).
macro_rules! int_floor_div {
    ($x:expr, $y:expr) => {{
        let (x, y) = ($x, $y);
        let q = x.wrapping_div(y);
        if (x.wrapping_rem(y) != 0) && ((x < 0) != (y < 0)) {
            q - 1
        } else {
            q
        }
    }};
}

/// Integer floor modulo: the result has the divisor's sign.
macro_rules! int_floor_mod {
    ($x:expr, $y:expr) => {{
        let (x, y) = ($x, $y);
        let r = x.wrapping_rem(y);
        if r != 0 && ((r < 0) != (y < 0)) {
            r + y
        } else {
            r
        }
    }};
}

fn no_int_zero(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if b.dtype().is_int() && b.f64_values(op)?.contains(&0.0) {
        return Err(Error::invalid(
            op,
            format!(
                "integer division by zero ({} {:?} by {} {:?})",
                a.dtype(),
                a.shape(),
                b.dtype(),
                b.shape()
            ),
        ));
    }
    Ok(())
}

fn expect_bool(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype() == DType::Bool {
        Ok(())
    } else {
        Err(unsupported(op, t.dtype(), "bool"))
    }
}

impl Tensor {
    /// `(a - b)²` elementwise, broadcasting (floats). d/da = 2(a - b),
    /// d/db = -2(a - b).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let d = Tensor::vector(&[1.0f64, 5.0]).squared_difference(&Tensor::scalar(3.0f64))?;
    /// assert_eq!(d.to_vec::<f64>()?, vec![4.0, 4.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn squared_difference(&self, rhs: &Tensor) -> Result<Tensor> {
        expect_float("squared_difference", self)?;
        expect_same_dtype("squared_difference", self, rhs)?;
        let y = with_float_dtype!(self.dtype(), T => zip::<T, T, T>("squared_difference", self, rhs, |x: T, y: T| (x - y) * (x - y)), _ => unreachable!())?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind(Binary::SquaredDifference, &[self, rhs], y, move |_| {
            vjp_batched(move |g, needs| {
                let d = g[0].mul(&a.sub(&b)?.mul_scalar(2.0)?)?;
                let ga = needs[0].then(|| ct::unbroadcast(&d, a.shape())).transpose()?;
                let gb = needs[1].then(|| ct::unbroadcast(&d.neg()?, b.shape())).transpose()?;
                Ok(grads![ga, gb])
            })
        }))
    }

    /// The angle of the point `(x, y)` = `(rhs, self)`: `atan2(self, rhs)` in
    /// `(-π, π]`, broadcasting (floats). d/dy = x / (x² + y²),
    /// d/dx = -y / (x² + y²).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let a = Tensor::vector(&[1.0f64, 0.0]).atan2(&Tensor::vector(&[0.0f64, -1.0]))?;
    /// assert_eq!(a.to_vec::<f64>()?, vec![std::f64::consts::FRAC_PI_2, std::f64::consts::PI]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn atan2(&self, rhs: &Tensor) -> Result<Tensor> {
        expect_float("atan2", self)?;
        expect_same_dtype("atan2", self, rhs)?;
        let y = with_float_dtype!(self.dtype(), T => zip::<T, T, T>("atan2", self, rhs, |y: T, x: T| y.atan2(x)), _ => unreachable!())?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind(Binary::Atan2, &[self, rhs], y, move |_| {
            vjp_batched(move |g, needs| {
                let r = g[0].div(&a.square()?.add(&b.square()?)?)?;
                let ga = needs[0].then(|| ct::unbroadcast(&r.mul(&b)?, a.shape())).transpose()?;
                let gb = needs[1]
                    .then(|| ct::unbroadcast(&r.mul(&a)?.neg()?, b.shape()))
                    .transpose()?;
                Ok(grads![ga, gb])
            })
        }))
    }

    /// `⌊a / b⌋` elementwise, broadcasting (numeric dtypes; rounds toward
    /// -inf, as TensorFlow's `floordiv`). Integer division by zero is an
    /// error; `MIN / -1` wraps. Not differentiable (not recorded).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let q = Tensor::vector(&[7i64, -7]).floor_div(&Tensor::scalar(2i64))?;
    /// assert_eq!(q.to_vec::<i64>()?, vec![3, -4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn floor_div(&self, rhs: &Tensor) -> Result<Tensor> {
        expect_same_dtype("floor_div", self, rhs)?;
        no_int_zero("floor_div", self, rhs)?;
        let y = match self.dtype() {
            DType::I32 => zip::<i32, i32, i32>("floor_div", self, rhs, |x, y| int_floor_div!(x, y)),
            DType::I64 => zip::<i64, i64, i64>("floor_div", self, rhs, |x, y| int_floor_div!(x, y)),
            dt => with_float_dtype!(dt, T => zip::<T, T, T>("floor_div", self, rhs, |x: T, y: T| (x / y).floor()),
                _ => Err(unsupported("floor_div", dt, "a numeric dtype"))),
        }?;
        Ok(bind_nondiff(Binary::FloorDiv, &[self, rhs], y))
    }

    /// Floor modulo `a - ⌊a / b⌋ · b`, broadcasting (numeric dtypes): the
    /// result takes the divisor's sign (TensorFlow's `floormod`, Python's
    /// `%`). Integer division by zero is an error. Differentiable for
    /// floats, with TensorFlow's gradient: d/da = 1, d/db = -⌊a / b⌋ (the
    /// jumps where `a / b` crosses an integer are ignored).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let r = Tensor::vector(&[7i64, -7, 7, -7]).floor_mod(&Tensor::vector(&[3i64, 3, -3, -3]))?;
    /// assert_eq!(r.to_vec::<i64>()?, vec![1, 2, -2, -1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn floor_mod(&self, rhs: &Tensor) -> Result<Tensor> {
        expect_same_dtype("floor_mod", self, rhs)?;
        no_int_zero("floor_mod", self, rhs)?;
        let y = match self.dtype() {
            DType::I32 => {
                let y = zip::<i32, i32, i32>("floor_mod", self, rhs, |x, y| int_floor_mod!(x, y))?;
                return Ok(bind_nondiff(Binary::FloorMod, &[self, rhs], y));
            }
            DType::I64 => {
                let y = zip::<i64, i64, i64>("floor_mod", self, rhs, |x, y| int_floor_mod!(x, y))?;
                return Ok(bind_nondiff(Binary::FloorMod, &[self, rhs], y));
            }
            dt => with_float_dtype!(dt, T => zip::<T, T, T>("floor_mod", self, rhs, |x: T, y: T| {
                let r = x % y;
                if r != T::zero() && ((r < T::zero()) != (y < T::zero())) { r + y } else { r }
            }), _ => Err(unsupported("floor_mod", dt, "a numeric dtype"))),
        }?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Binary::FloorMod,
            &[self, rhs],
            y,
            move |_| {
                vjp_batched(move |g, needs| {
                    let ga = needs[0].then(|| ct::unbroadcast(&g[0], a.shape())).transpose()?;
                    let gb = needs[1]
                        .then(|| ct::unbroadcast(&g[0].mul(&a.floor_div(&b)?)?.neg()?, b.shape()))
                        .transpose()?;
                    Ok(grads![ga, gb])
                })
            },
            |t, _| {
                sum_terms([
                    Ok(t[0].clone()),
                    t[1].as_ref().map(|tb| tb.mul(&self.floor_div(rhs)?)?.neg()).transpose(),
                ])
            },
        ))
    }

    /// `a && b` elementwise on bool tensors, broadcasting.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let r = Tensor::vector(&[true, false]).logical_and(&Tensor::scalar(true))?;
    /// assert_eq!(r.to_vec::<bool>()?, vec![true, false]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn logical_and(&self, rhs: &Tensor) -> Result<Tensor> {
        self.logical("logical_and", Binary::LogicalAnd, rhs, |x, y| x && y)
    }

    /// `a || b` elementwise on bool tensors, broadcasting.
    pub fn logical_or(&self, rhs: &Tensor) -> Result<Tensor> {
        self.logical("logical_or", Binary::LogicalOr, rhs, |x, y| x || y)
    }

    /// `a != b` (exclusive or) elementwise on bool tensors, broadcasting.
    pub fn logical_xor(&self, rhs: &Tensor) -> Result<Tensor> {
        self.logical("logical_xor", Binary::LogicalXor, rhs, |x, y| x != y)
    }

    /// `!a` elementwise on a bool tensor.
    ///
    /// ```
    /// let r = gradtape::Tensor::vector(&[true, false]).logical_not()?;
    /// assert_eq!(r.to_vec::<bool>()?, vec![false, true]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn logical_not(&self) -> Result<Tensor> {
        expect_bool("logical_not", self)?;
        let y = map::<bool, bool>("logical_not", self, |v| !v)?;
        Ok(bind_nondiff(Unary::LogicalNot, &[self], y))
    }

    fn logical(&self, op: &'static str, desc: Binary, rhs: &Tensor, f: fn(bool, bool) -> bool) -> Result<Tensor> {
        expect_bool(op, self)?;
        expect_bool(op, rhs)?;
        let y = zip::<bool, bool, bool>(op, self, rhs, f)?;
        Ok(bind_nondiff(desc, &[self, rhs], y))
    }
}
