//! Elementwise functions of one tensor, and tensor-with-scalar arithmetic.
//!
//! Each op: the forward kernel, then its rule (`g` is the output cotangent).

// (the half types take their math from `num_traits::Float`)
use super::table::in_f32;
use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::elementwise::map;
use crate::kernels::cuda::{INT_ABS, INT_ADD_C, INT_DIV_C, INT_MUL_C, INT_NEG, INT_RELU, INT_SIGN, INT_SQUARE};
use crate::ops::desc::{Unary, F64};
use crate::ops::{bind_jvp, check_scalar, expect_float, grads, only, unsupported};
#[allow(unused_imports)]
use num_traits::Float as _;
use num_traits::{One, Zero};

use crate::tensor::{with_float_dtype, with_num_dtype, DType, Element, Num, Tensor};

/// `f(v)` on every element of a float tensor (`v` is `f32` or `f64`).
macro_rules! float_map {
    ($op:expr, $x:expr, |$v:ident| $body:expr) => {
        with_float_dtype!($x.dtype(), T => map::<T, T>($op, $x, |$v: T| $body),
            _ => Err(unsupported($op, $x.dtype(), "f32 or f64")))
    };
}

/// `f(v)` on every element of a numeric tensor. On a GPU, integer
/// tensors (`i32`, `i64`) take the CUDA kernel of the C expression `$c`
/// of `v` and the attribute `c0 = $c0` (`None`: no GPU kernel, an error).
macro_rules! num_map {
    ($op:expr, $x:expr, $c:expr, $c0:expr, |$v:ident| $body:expr) => {{
        let host = |x: &Tensor| {
            with_num_dtype!(x.dtype(), T => map::<T, T>($op, x, |$v: T| $body),
                _ => Err(unsupported($op, x.dtype(), "a numeric dtype")))
        };
        match int_on_device($op, $x, $c, $c0, |h| host(&h[0])) {
            Some(r) => r,
            None => host($x),
        }
    }};
}

/// An integer op of one tensor on a GPU: the CUDA kernel of the C
/// expression `c` (of `v` and `c0`), or `host` on the host copy of an
/// emulated GPU. `None` (the CPU kernel, which reports a tensor on a
/// device as having no kernel there) on the CPU, for other dtypes, and
/// without an expression.
fn int_on_device(
    op: &'static str,
    x: &Tensor,
    c: Option<&str>,
    c0: f64,
    host: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    let expr = c.filter(|_| x.device_buffer().is_some() && matches!(x.dtype(), DType::I32 | DType::I64))?;
    crate::dispatch::device::offload(op, &[x], |_| crate::kernels::cuda::int_map(op, x, expr, c0), host)
}

impl Tensor {
    /// `-x`. d/dx = -1.
    pub fn neg(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::neg(self);
        }
        let y = super::table::unary_or(Unary::Neg, "neg", self, || {
            num_map!("neg", self, Some(INT_NEG), 0.0, |v| v.neg_wrap())
        })?;
        Ok(bind_jvp(
            Unary::Neg,
            &[self],
            y,
            |_| vjp(|g, _| Ok(grads![Some(g[0].neg()?)])),
            |t, _| only(t)?.neg(),
        ))
    }

    /// `|x|`. d/dx = sign(x), 0 at 0 (as TensorFlow).
    pub fn abs(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::abs(self);
        }
        let y = super::table::unary_or(Unary::Abs, "abs", self, || {
            num_map!("abs", self, Some(INT_ABS), 0.0, |v| v.abs_wrap())
        })?;
        let x = self.clone();
        Ok(bind_jvp(
            Unary::Abs,
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].mul(&x.sign()?)?)])),
            |t, _| only(t)?.mul(&self.sign()?),
        ))
    }

    /// `-1, 0, 1` by the sign of each element (0 for 0). Its gradient is
    /// zero (a float input's gradient through `sign` is a zero tensor, not
    /// `None`, as TensorFlow's; the derivative at 0 is taken as 0).
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor};
    /// let x = Tensor::vector(&[-2.0f32, 0.0, 3.0]);
    /// let tape = GradientTape::new();
    /// let y = tape.record(|| { tape.watch(&x); x.sign()?.sum_all() })?;
    /// assert_eq!(tape.gradient(&y, &x)?.unwrap().to_vec::<f32>()?, vec![0.0; 3]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sign(&self) -> Result<Tensor> {
        // (floats from the elementwise table, as the fused kernels compute
        // it: +0 for -0, as TensorFlow)
        let y = if self.dtype().is_float() {
            super::table::float_unary(Unary::Sign, "sign", self)?
        } else {
            num_map!("sign", self, Some(INT_SIGN), 0.0, |v| if v > T::zero() {
                T::one()
            } else if v < T::zero() {
                T::zero() - T::one()
            } else {
                v
            })?
        };
        if !self.dtype().is_float() {
            return Ok(crate::ops::bind_nondiff(Unary::Sign, &[self], y));
        }
        Ok(bind_jvp(
            Unary::Sign,
            &[self],
            y,
            |_| vjp(|g, _| Ok(grads![Some(g[0].try_zeros_like()?)])),
            |t, _| only(t)?.try_zeros_like(),
        ))
    }

    /// `x²`. d/dx = 2x.
    pub fn square(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::square(self);
        }
        let y = super::table::unary_or(Unary::Square, "square", self, || {
            num_map!("square", self, Some(INT_SQUARE), 0.0, |v| v.mul_wrap(v))
        })?;
        let x = self.clone();
        Ok(bind_jvp(
            Unary::Square,
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].mul(&x.mul_scalar(2.0)?)?)])),
            |t, _| only(t)?.mul(&self.mul_scalar(2.0)?),
        ))
    }

    /// `√x`. d/dx = 1 / (2√x). Of a complex tensor: the principal root
    /// (branch cut on the negative real axis), as every holomorphic function
    /// here (`sin`, `cos`, `tan`, `sinh`, `cosh`, `tanh`, `sigmoid`, `exp`,
    /// `log`, `rsqrt`, `reciprocal`, `pow`, `pow_scalar`) also accepts.
    ///
    /// ```
    /// use gradtape::{Complex, Tensor};
    /// let z = Tensor::vector(&[Complex::new(-4.0f64, 0.0), Complex::new(3.0, 4.0)]);
    /// assert_eq!(z.sqrt()?.to_vec::<Complex<f64>>()?, vec![Complex::new(0.0, 2.0), Complex::new(2.0, 1.0)]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn sqrt(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::sqrt(self);
        }
        let y = in_f32(Unary::Sqrt, "sqrt", self, |x| {
            super::table::unary_or(Unary::Sqrt, "sqrt", x, || {
                Err(unsupported("sqrt", x.dtype(), "f32 or f64"))
            })
        })?;
        Ok(bind_jvp(
            Unary::Sqrt,
            &[self],
            y,
            |y| {
                let y = y.clone();
                // (0 for a zero cotangent, as TensorFlow's SqrtGrad)
                vjp(move |g, _| {
                    let v = g[0].div(&y.mul_scalar(2.0)?)?;
                    Ok(grads![Some(super::elementary::zero_cotangent_is_zero(&g[0], v)?)])
                })
            },
            |t, y| only(t)?.div(&y.mul_scalar(2.0)?),
        ))
    }

    /// `eˣ`. d/dx = eˣ.
    pub fn exp(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::exp(self);
        }
        expect_float("exp", self)?;
        let y = in_f32(Unary::Exp, "exp", self, |x| {
            super::table::unary_or(Unary::Exp, "exp", x, || {
                Err(unsupported("exp", x.dtype(), "f32 or f64"))
            })
        })?;
        Ok(bind_jvp(
            Unary::Exp,
            &[self],
            y,
            |y| {
                let y = y.clone();
                vjp(move |g, _| Ok(grads![Some(g[0].mul(&y)?)]))
            },
            |t, y| only(t)?.mul(y),
        ))
    }

    /// Natural logarithm. d/dx = 1/x.
    pub fn log(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::log(self);
        }
        let y = in_f32(Unary::Log, "log", self, |x| {
            super::table::unary_or(Unary::Log, "log", x, || {
                Err(unsupported("log", x.dtype(), "f32 or f64"))
            })
        })?;
        let x = self.clone();
        Ok(bind_jvp(
            Unary::Log,
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].div(&x)?)])),
            |t, _| only(t)?.div(self),
        ))
    }

    /// Sine. d/dx = cos x.
    pub fn sin(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::sin(self);
        }
        expect_float("sin", self)?;
        let y = in_f32(Unary::Sin, "sin", self, |x| {
            super::table::unary_or(Unary::Sin, "sin", x, || {
                Err(unsupported("sin", x.dtype(), "f32 or f64"))
            })
        })?;
        let x = self.clone();
        Ok(bind_jvp(
            Unary::Sin,
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].mul(&x.cos()?)?)])),
            |t, _| only(t)?.mul(&self.cos()?),
        ))
    }

    /// Cosine. d/dx = -sin x.
    pub fn cos(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::cos(self);
        }
        expect_float("cos", self)?;
        let y = in_f32(Unary::Cos, "cos", self, |x| {
            super::table::unary_or(Unary::Cos, "cos", x, || {
                Err(unsupported("cos", x.dtype(), "f32 or f64"))
            })
        })?;
        let x = self.clone();
        Ok(bind_jvp(
            Unary::Cos,
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].mul(&x.sin()?.neg()?)?)])),
            |t, _| only(t)?.mul(&self.sin()?.neg()?),
        ))
    }

    /// Hyperbolic tangent. d/dx = 1 - tanh²x.
    pub fn tanh(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::tanh(self);
        }
        let y = in_f32(Unary::Tanh, "tanh", self, |x| {
            super::table::unary_or(Unary::Tanh, "tanh", x, || {
                Err(unsupported("tanh", x.dtype(), "f32 or f64"))
            })
        })?;
        Ok(bind_jvp(
            Unary::Tanh,
            &[self],
            y,
            |y| {
                let y = y.clone();
                vjp(move |g, _| Ok(grads![Some(super::binary::tanh_grad(&y, &g[0])?)]))
            },
            |t, y| super::binary::tanh_grad(y, only(t)?),
        ))
    }

    /// Logistic sigmoid `1 / (1 + e⁻ˣ)`, computed without overflow. d/dx = y(1 - y).
    pub fn sigmoid(&self) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::sigmoid(self);
        }
        let y = in_f32(Unary::Sigmoid, "sigmoid", self, |x| {
            super::table::unary_or(Unary::Sigmoid, "sigmoid", x, || {
                Err(unsupported("sigmoid", x.dtype(), "f32 or f64"))
            })
        })?;
        Ok(bind_jvp(
            Unary::Sigmoid,
            &[self],
            y,
            |y| {
                let y = y.clone();
                vjp(move |g, _| {
                    let dy = y.mul(&y.neg()?.add_scalar(1.0)?)?;
                    Ok(grads![Some(g[0].mul(&dy)?)])
                })
            },
            |t, y| only(t)?.mul(&y.mul(&y.neg()?.add_scalar(1.0)?)?),
        ))
    }

    /// `max(x, 0)`; NaN stays NaN (as TensorFlow). d/dx = 1 where x > 0,
    /// else 0 (0 at 0 and at NaN, as TensorFlow).
    pub fn relu(&self) -> Result<Tensor> {
        // `v < 0` is false for NaN (and for -0, kept as TensorFlow keeps it)
        let half = super::table_half::half_unary("relu", &Unary::Relu, self);
        let y = half.unwrap_or_else(|| {
            super::table::unary_or(Unary::Relu, "relu", self, || {
                num_map!("relu", self, Some(INT_RELU), 0.0, |v| if v < T::zero() {
                    T::zero()
                } else {
                    v
                })
            })
        })?;
        let x = self.clone();
        Ok(bind_jvp(
            Unary::Relu,
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(super::binary::relu_grad(&g[0], &x)?)])),
            |t, _| super::binary::relu_grad(only(t)?, self),
        ))
    }

    /// `xᶜ` for a constant `c`. d/dx = c·xᶜ⁻¹. Of a complex tensor,
    /// `exp(c · ln x)` as TensorFlow computes it.
    pub fn pow_scalar(&self, c: f64) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex_fns::pow_scalar(self, c);
        }
        expect_float("pow_scalar", self)?;
        let y = super::table::unary_or(Unary::PowScalar(F64(c)), "pow_scalar", self, || {
            float_map!("pow_scalar", self, |v| v.powf(T::from_f64(c)))
        })?;
        let x = self.clone();
        Ok(bind_jvp(
            Unary::PowScalar(F64(c)),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].mul(&x.pow_scalar(c - 1.0)?.mul_scalar(c)?)?)])),
            |t, _| only(t)?.mul(&self.pow_scalar(c - 1.0)?.mul_scalar(c)?),
        ))
    }

    /// `x · c`. d/dx = c. On an integer tensor `c` must be an integer in
    /// the dtype's range (else an error, never a truncation).
    ///
    /// ```
    /// use gradtape::Tensor;
    /// assert_eq!(Tensor::vector(&[1i32, -2]).mul_scalar(3.0)?.to_vec::<i32>()?, vec![3, -6]);
    /// assert!(Tensor::vector(&[1i32, -2]).mul_scalar(0.5).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn mul_scalar(&self, c: f64) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::mul_scalar(self, c);
        }
        check_scalar("mul_scalar", self, c)?;
        let y = super::table::unary_or(Unary::MulScalar(F64(c)), "mul_scalar", self, || {
            num_map!("mul_scalar", self, Some(INT_MUL_C), c, |v| v.mul_wrap(T::from_f64(c)))
        })?;
        Ok(bind_jvp(
            Unary::MulScalar(F64(c)),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].mul_scalar(c)?)])),
            |t, _| only(t)?.mul_scalar(c),
        ))
    }

    /// `x / c`. d/dx = 1/c. On an integer tensor `c` must be a non-zero
    /// integer in the dtype's range (integers divide truncating toward zero).
    pub fn div_scalar(&self, c: f64) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::div_scalar(self, c);
        }
        check_scalar("div_scalar", self, c)?;
        if self.dtype().is_int() && c == 0.0 {
            return Err(crate::Error::invalid(
                "div_scalar",
                format!(
                    "integer division by zero ({} tensor of shape {:?})",
                    self.dtype(),
                    self.shape()
                ),
            ));
        }
        // truncating toward zero; MIN / -1 wraps instead of panicking
        let ints = |x: &Tensor| match x.dtype() {
            DType::I32 => map::<i32, i32>("div_scalar", x, |v| v.wrapping_div(c as i32)),
            _ => map::<i64, i64>("div_scalar", x, |v| v.wrapping_div(c as i64)),
        };
        let y = match self.dtype() {
            DType::I32 | DType::I64 => match int_on_device("div_scalar", self, Some(INT_DIV_C), c, |h| ints(&h[0])) {
                Some(r) => r,
                None => ints(self),
            },
            _ => super::table::unary_or(Unary::DivScalar(F64(c)), "div_scalar", self, || {
                num_map!("div_scalar", self, None, c, |v| v / T::from_f64(c))
            }),
        }?;
        Ok(bind_jvp(
            Unary::DivScalar(F64(c)),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].div_scalar(c)?)])),
            |t, _| only(t)?.div_scalar(c),
        ))
    }

    /// `x + c`. d/dx = 1. On an integer tensor `c` must be an integer in
    /// the dtype's range (else an error, never a truncation).
    pub fn add_scalar(&self, c: f64) -> Result<Tensor> {
        if self.dtype().is_complex() {
            return super::complex::add_scalar(self, c);
        }
        check_scalar("add_scalar", self, c)?;
        let y = super::table::unary_or(Unary::AddScalar(F64(c)), "add_scalar", self, || {
            num_map!("add_scalar", self, Some(INT_ADD_C), c, |v| v.add_wrap(T::from_f64(c)))
        })?;
        Ok(bind_jvp(
            Unary::AddScalar(F64(c)),
            &[self],
            y,
            |_| crate::dispatch::pass_through(),
            |t, _| Ok(only(t)?.clone()),
        ))
    }

    /// `x - c`. d/dx = 1. On an integer tensor `c` must be an integer in
    /// the dtype's range.
    pub fn sub_scalar(&self, c: f64) -> Result<Tensor> {
        check_scalar("sub_scalar", self, c)?;
        self.add_scalar(-c)
    }
}
