//! Floor division and floor modulo of two tensors, broadcasting, on every
//! numeric dtype (integers round toward -inf, as TensorFlow and Python;
//! integer division by zero is an error). `floor_mod` is differentiable
//! for floats (its rule undoes broadcasting with `sum_to_shape`).

// (the half types take their math from `num_traits::Float`)
use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::zip;
use crate::ops::desc::Binary;
use crate::ops::{bind_jvp, bind_nondiff, expect_same_dtype, grads, sum_terms, unsupported};
use crate::tensor::{DType, Tensor};
#[allow(unused_imports)]
use num_traits::Float as _;

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
    if b.dtype().is_int() && crate::kernels::gpu::host_f64s(op, b)?.contains(&0.0) {
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

impl Tensor {
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
        let _site = crate::dispatch::site::user_op("floor_div", &[("x", self), ("y", rhs)]);
        expect_same_dtype("floor_div", self, rhs)?;
        no_int_zero("floor_div", self, rhs)?;
        let y = match self.dtype() {
            DType::I32 => zip::<i32, i32, i32>("floor_div", self, rhs, |x, y| int_floor_div!(x, y)),
            DType::I64 => zip::<i64, i64, i64>("floor_div", self, rhs, |x, y| int_floor_div!(x, y)),
            dt => super::table::binary_or(Binary::FloorDiv, "floor_div", self, rhs, || {
                Err(unsupported("floor_div", dt, "a numeric dtype"))
            }),
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
        let _site = crate::dispatch::site::user_op("floor_mod", &[("x", self), ("y", rhs)]);
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
            dt => super::table::binary_or(Binary::FloorMod, "floor_mod", self, rhs, || {
                Err(unsupported("floor_mod", dt, "a numeric dtype"))
            }),
        }?;
        let (a, b) = (self.clone(), rhs.clone());
        Ok(bind_jvp(
            Binary::FloorMod,
            &[self, rhs],
            y,
            move |_| {
                vjp(move |g, needs| {
                    let ga = needs[0].then(|| g[0].sum_to_shape(a.shape())).transpose()?;
                    let gb = needs[1]
                        .then(|| g[0].mul(&a.floor_div(&b)?)?.neg()?.sum_to_shape(b.shape()))
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
}
