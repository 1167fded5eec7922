//! Comparisons, elementwise with broadcasting, producing bool (not
//! differentiable: bound for traces only): `eq`, `ne`, `lt`, `le`, `gt`,
//! `ge`, against a scalar `gt_scalar`, `lt_scalar`; and `scalar_like`.

use crate::error::Result;
use crate::kernels::cpu::elementwise::zip;
use crate::ops::desc::Binary;
use crate::ops::{expect_same_dtype, unsupported};
use crate::tensor::{with_dtype, with_real_dtype, Element, Tensor};

/// An ordering comparison producing bool, broadcasting (real dtypes only:
/// complex numbers are not ordered).
macro_rules! compare {
    ($op:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
        expect_same_dtype($op, $a, $b)?;
        with_real_dtype!($a.dtype(), T => zip::<T, T, bool>($op, $a, $b, |$x: T, $y: T| $body),
            _ => Err(unsupported($op, $a.dtype(), "a real (ordered) dtype")))
    }};
}

/// An equality test producing bool, broadcasting (every dtype).
macro_rules! equality {
    ($op:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
        expect_same_dtype($op, $a, $b)?;
        with_dtype!($a.dtype(), T => zip::<T, T, bool>($op, $a, $b, |$x: T, $y: T| $body))
    }};
}

impl Tensor {
    /// `a == b` elementwise (bool, broadcasting; not differentiable).
    pub fn eq(&self, rhs: &Tensor) -> Result<Tensor> {
        Ok(crate::ops::bind_nondiff(
            Binary::Equal,
            &[self, rhs],
            equality!("eq", self, rhs, |x, y| x == y)?,
        ))
    }

    /// `a != b` elementwise.
    pub fn ne(&self, rhs: &Tensor) -> Result<Tensor> {
        Ok(crate::ops::bind_nondiff(
            Binary::NotEqual,
            &[self, rhs],
            equality!("ne", self, rhs, |x, y| x != y)?,
        ))
    }

    /// `a < b` elementwise.
    #[allow(clippy::bool_comparison)]
    pub fn lt(&self, rhs: &Tensor) -> Result<Tensor> {
        Ok(crate::ops::bind_nondiff(
            Binary::Less,
            &[self, rhs],
            compare!("lt", self, rhs, |x, y| x < y)?,
        ))
    }

    /// `a <= b` elementwise.
    pub fn le(&self, rhs: &Tensor) -> Result<Tensor> {
        Ok(crate::ops::bind_nondiff(
            Binary::LessEqual,
            &[self, rhs],
            compare!("le", self, rhs, |x, y| x <= y)?,
        ))
    }

    /// `a > b` elementwise.
    #[allow(clippy::bool_comparison)]
    pub fn gt(&self, rhs: &Tensor) -> Result<Tensor> {
        Ok(crate::ops::bind_nondiff(
            Binary::Greater,
            &[self, rhs],
            compare!("gt", self, rhs, |x, y| x > y)?,
        ))
    }

    /// `a >= b` elementwise.
    pub fn ge(&self, rhs: &Tensor) -> Result<Tensor> {
        Ok(crate::ops::bind_nondiff(
            Binary::GreaterEqual,
            &[self, rhs],
            compare!("ge", self, rhs, |x, y| x >= y)?,
        ))
    }

    /// `x > c` elementwise against a scalar (bool). On an integer tensor
    /// `c` must be an integer in the dtype's range.
    pub fn gt_scalar(&self, c: f64) -> Result<Tensor> {
        self.gt(&scalar_for("gt_scalar", self, c)?)
    }

    /// `x < c` elementwise against a scalar (bool). On an integer tensor
    /// `c` must be an integer in the dtype's range.
    pub fn lt_scalar(&self, c: f64) -> Result<Tensor> {
        self.lt(&scalar_for("lt_scalar", self, c)?)
    }

    /// A rank-0 tensor of this tensor's dtype holding `c`. For an integer
    /// (or bool) dtype `c` must be exactly representable: `2.0` is, `0.5`,
    /// NaN and `1e30` are errors, never truncated.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let i = Tensor::vector(&[1i64, 2]);
    /// assert_eq!(i.scalar_like(-3.0)?.to_scalar::<i64>()?, -3);
    /// assert!(i.scalar_like(0.5).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scalar_like(&self, c: f64) -> Result<Tensor> {
        scalar_for("scalar_like", self, c)
    }
}

/// `c` as a rank-0 tensor of `x`'s dtype, checked for `op` (see
/// [`check_scalar`](super::check_scalar)).
pub(crate) fn scalar_for(op: &'static str, x: &Tensor, c: f64) -> Result<Tensor> {
    crate::ops::check_scalar_for(op, x.dtype(), x.shape(), c)?;
    Ok(with_dtype!(x.dtype(), T => Tensor::scalar(T::from_f64(c))))
}

/// Whether `v` is NaN (never for integers): it is unordered with itself.
#[inline(always)]
pub(crate) fn is_nan<T: PartialOrd>(v: T) -> bool {
    v.partial_cmp(&v).is_none()
}
