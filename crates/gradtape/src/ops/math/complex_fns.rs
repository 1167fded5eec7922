//! The holomorphic elementary functions of complex tensors: `sqrt`,
//! `rsqrt`, `reciprocal`, `sin`, `cos`, `tan`, `sinh`, `cosh`, `tanh`,
//! `sigmoid`, `exp`, `log`, `square`, and powers (`pow_scalar`, `pow`), to
//! which the real ops hand a complex input.
//!
//! For holomorphic `f` with derivative `f'(z)`, the reverse rule is
//! TensorFlow's `g · conj(f'(z))` (see `complex.rs`) and the forward rule
//! is the complex-linear `t · f'(z)`. Both are written with differentiable
//! ops from one expression of `f'`, so gradients of every order and forward
//! mode over complex primals follow; [`holomorphic`] binds them together.

use std::sync::Arc;

use crate::dispatch::vjp;
use crate::error::Result;
use crate::kernels::cpu::complex as kc;
use crate::kernels::cpu::complex_fns::{self as kf, Fn1};
use crate::ops::desc::{Binary, Unary, F64};
use crate::ops::{bind_jvp, grads, only, sum_terms};
use crate::tensor::Tensor;

/// `f'(z)` from the input `z` and the output `y`.
type Deriv = dyn Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync;

/// Binds a holomorphic one-input op with output `y`: reverse rule
/// `g · conj(d(z, y))`, forward rule `t · d(z, y)`.
fn holomorphic(
    op: Unary,
    x: &Tensor,
    y: Tensor,
    d: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Tensor {
    let d: Arc<Deriv> = Arc::new(d);
    let (xc, dr) = (x.clone(), d.clone());
    bind_jvp(
        op,
        &[x],
        y,
        move |y| {
            let y = y.clone();
            vjp(move |g, _| Ok(grads![Some(g[0].mul(&dr(&xc, &y)?.conj()?)?)]))
        },
        move |t, y| only(t)?.mul(&d(x, y)?),
    )
}

/// `f(z)` by the kernel `f`, bound with derivative `d`.
fn unary(
    op: Unary,
    name: &'static str,
    x: &Tensor,
    f: Fn1,
    d: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Result<Tensor> {
    let y = kf::unary(name, x, f)?;
    Ok(holomorphic(op, x, y, d))
}

/// Principal `√z`: `f' = 1 / 2√z`.
pub(crate) fn sqrt(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Sqrt, "sqrt", x, Fn1::Sqrt, |_, y| {
        y.mul_scalar(2.0)?.reciprocal()
    })
}

/// `1 / √z`: `f' = -y³ / 2`.
pub(crate) fn rsqrt(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Rsqrt, "rsqrt", x, Fn1::Rsqrt, |_, y| {
        y.square()?.mul(y)?.mul_scalar(-0.5)
    })
}

/// `1 / z`: `f' = -y²`.
pub(crate) fn reciprocal(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Reciprocal, "reciprocal", x, Fn1::Reciprocal, |_, y| {
        y.square()?.neg()
    })
}

/// `sin z`: `f' = cos z`.
pub(crate) fn sin(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Sin, "sin", x, Fn1::Sin, |z, _| z.cos())
}

/// `cos z`: `f' = -sin z`.
pub(crate) fn cos(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Cos, "cos", x, Fn1::Cos, |z, _| z.sin()?.neg())
}

/// `tan z`: `f' = 1 / cos² z` (TensorFlow's; `1 + tan² z` cancels where
/// `tan z → ±i`, far from the real axis: at 1 + 30i it was off by a
/// factor of 5).
pub(crate) fn tan(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Tan, "tan", x, Fn1::Tan, |z, _| z.cos()?.square()?.reciprocal())
}

/// `sinh z`: `f' = cosh z`.
pub(crate) fn sinh(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Sinh, "sinh", x, Fn1::Sinh, |z, _| z.cosh())
}

/// `cosh z`: `f' = sinh z`.
pub(crate) fn cosh(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Cosh, "cosh", x, Fn1::Cosh, |z, _| z.sinh())
}

/// `tanh z`: `f' = 1 - tanh² z`.
pub(crate) fn tanh(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Tanh, "tanh", x, Fn1::Tanh, |_, y| {
        y.square()?.neg()?.add_scalar(1.0)
    })
}

/// `1 / (1 + e^{-z})`: `f' = y (1 - y)`.
pub(crate) fn sigmoid(x: &Tensor) -> Result<Tensor> {
    unary(Unary::Sigmoid, "sigmoid", x, Fn1::Sigmoid, |_, y| {
        y.mul(&y.neg()?.add_scalar(1.0)?)
    })
}

/// `e^z`: `f' = e^z`.
pub(crate) fn exp(x: &Tensor) -> Result<Tensor> {
    let y = kc::exp(x)?;
    Ok(holomorphic(Unary::Exp, x, y, |_, y| Ok(y.clone())))
}

/// Principal `ln z`: `f' = 1 / z`.
pub(crate) fn log(x: &Tensor) -> Result<Tensor> {
    let y = kc::log(x)?;
    Ok(holomorphic(Unary::Log, x, y, |z, _| z.reciprocal()))
}

/// `z²`: `f' = 2z`.
pub(crate) fn square(x: &Tensor) -> Result<Tensor> {
    let y = kc::square(x)?;
    Ok(holomorphic(Unary::Square, x, y, |z, _| z.mul_scalar(2.0)))
}

/// `z^c = exp(c ln z)` for a real constant `c`: `f' = c z^(c-1)`.
pub(crate) fn pow_scalar(x: &Tensor, c: f64) -> Result<Tensor> {
    let y = kf::pow_scalar(x, c)?;
    Ok(holomorphic(Unary::PowScalar(F64(c)), x, y, move |z, _| {
        z.pow_scalar(c - 1.0)?.mul_scalar(c)
    }))
}

/// `ln a` where `a ≠ 0`, else 0 (TensorFlow's guard in the exponent's
/// gradient of a power).
fn log_nonzero(a: &Tensor) -> Result<Tensor> {
    let nz = a.abs()?.gt_scalar(0.0)?;
    let safe = Tensor::where_(&nz, a, &a.scalar_like(1.0)?)?;
    Tensor::where_(&nz, &safe.log()?, &a.scalar_like(0.0)?)
}

/// `a^b = exp(b ln a)` for complex `a`, `b` (broadcasting): `∂/∂a = b a^(b-1)`,
/// `∂/∂b = a^b ln a` (0 where `a = 0`, as TensorFlow); reverse rules
/// conjugate them.
pub(crate) fn pow(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let y = kf::pow(a, b)?;
    let (ca, cb) = (a.clone(), b.clone());
    let da = |a: &Tensor, b: &Tensor| b.mul(&a.pow(&b.sub_scalar(1.0)?)?);
    let db = |a: &Tensor, y: &Tensor| y.mul(&log_nonzero(a)?);
    Ok(bind_jvp(
        Binary::Pow,
        &[a, b],
        y,
        move |y| {
            let y = y.clone();
            vjp(move |g, needs| {
                let ga = needs[0]
                    .then(|| g[0].mul(&da(&ca, &cb)?.conj()?)?.sum_to_shape(ca.shape()))
                    .transpose()?;
                let gb = needs[1]
                    .then(|| g[0].mul(&db(&ca, &y)?.conj()?)?.sum_to_shape(cb.shape()))
                    .transpose()?;
                Ok(grads![ga, gb])
            })
        },
        move |t, y| {
            sum_terms([
                t[0].as_ref().map(|ta| ta.mul(&da(a, b)?)).transpose(),
                t[1].as_ref().map(|tb| tb.mul(&db(a, y)?)).transpose(),
            ])
        },
    ))
}
