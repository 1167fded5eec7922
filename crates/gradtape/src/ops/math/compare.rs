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
        let cpu = |a: &Tensor, b: &Tensor| -> Result<Tensor> {
            with_real_dtype!(a.dtype(), T => zip::<T, T, bool>($op, a, b, |$x: T, $y: T| $body),
                _ => Err(unsupported($op, a.dtype(), "a real (ordered) dtype")))
        };
        match on_device($op, $a, $b, |h| cpu(&h[0], &h[1])) {
            Some(r) => r,
            None => cpu($a, $b),
        }
    }};
}

/// An equality test producing bool, broadcasting (every dtype).
macro_rules! equality {
    ($op:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
        expect_same_dtype($op, $a, $b)?;
        let cpu = |a: &Tensor, b: &Tensor| -> Result<Tensor> {
            with_dtype!(a.dtype(), T => zip::<T, T, bool>($op, a, b, |$x: T, $y: T| $body))
        };
        match on_device($op, $a, $b, |h| cpu(&h[0], &h[1])) {
            Some(r) => r,
            None => cpu($a, $b),
        }
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

    /// `x >= c` elementwise against a scalar (bool), as
    /// [`gt_scalar`](Self::gt_scalar).
    pub fn ge_scalar(&self, c: f64) -> Result<Tensor> {
        self.ge(&scalar_for("ge_scalar", self, c)?)
    }

    /// `x <= c` elementwise against a scalar (bool), as
    /// [`gt_scalar`](Self::gt_scalar).
    pub fn le_scalar(&self, c: f64) -> Result<Tensor> {
        self.le(&scalar_for("le_scalar", self, c)?)
    }

    /// `x == c` elementwise against a scalar (bool; `tf.equal(x, c)`). On
    /// an integer tensor `c` must be an integer in the dtype's range.
    pub fn eq_scalar(&self, c: f64) -> Result<Tensor> {
        self.eq(&scalar_for("eq_scalar", self, c)?)
    }

    /// `x != c` elementwise against a scalar (bool; `tf.not_equal(x, c)`),
    /// as a padding mask of token ids:
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let ids = Tensor::vector(&[3i64, 5, 0, 0]);
    /// assert_eq!(ids.ne_scalar(0.0)?.to_vec::<bool>()?, vec![true, true, false, false]);
    /// assert_eq!(ids.eq_scalar(5.0)?.to_vec::<bool>()?, vec![false, true, false, false]);
    /// assert!(ids.ne_scalar(0.5).is_err()); // not an i64
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn ne_scalar(&self, c: f64) -> Result<Tensor> {
        self.ne(&scalar_for("ne_scalar", self, c)?)
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

/// `c` as a rank-0 tensor of `x`'s dtype on `x`'s device, checked for
/// `op` (see [`check_scalar`](super::check_scalar)).
pub(crate) fn scalar_for(op: &'static str, x: &Tensor, c: f64) -> Result<Tensor> {
    crate::ops::check_scalar_for(op, x.dtype(), x.shape(), c)?;
    if x.device().is_cuda() {
        return crate::kernels::gpu::filled(op, &[], c, x.dtype(), x.device());
    }
    Ok(with_dtype!(x.dtype(), T => Tensor::scalar(T::from_f64(c))))
}

/// The descriptor of a comparison, by its op's name.
fn compare_desc(op: &'static str) -> Binary {
    match op {
        "eq" => Binary::Equal,
        "ne" => Binary::NotEqual,
        "lt" => Binary::Less,
        "le" => Binary::LessEqual,
        "gt" => Binary::Greater,
        _ => Binary::GreaterEqual,
    }
}

/// A comparison on its inputs' GPU (`None` on the CPU): the CUDA kernel,
/// or `host` on an emulated GPU.
fn on_device(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    host: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    if a.device_buffer().is_none() && b.device_buffer().is_none() {
        return None;
    }
    crate::dispatch::device::offload(
        op,
        &[a, b],
        |_| {
            let shape = crate::tensor::layout::broadcast_shapes(op, a.shape(), b.shape())?;
            let expr = match compare_desc(op) {
                Binary::Equal => "a == b",
                Binary::NotEqual => "a != b",
                Binary::Less => "a < b",
                Binary::LessEqual => "a <= b",
                Binary::Greater => "a > b",
                _ => "a >= b",
            };
            crate::kernels::cuda::binary(op, a, b, &shape, "", expr, crate::tensor::DType::Bool)
        },
        |h| host(h),
    )
}

/// Whether `v` is NaN (never for integers): it is unordered with itself.
#[inline(always)]
pub(crate) fn is_nan<T: PartialOrd>(v: T) -> bool {
    v.partial_cmp(&v).is_none()
}
