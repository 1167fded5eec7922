//! The ops of a fused program on one register's elements, per element
//! type: each computes what its eager kernel computes (the same vectorised
//! `exp`, `sin`, `cos`, `tanh` and `sigmoid` for `f32`), bit for bit.

use crate::kernels::cpu::math;
use crate::ops::desc::{Binary, Unary};
use crate::tensor::Float;

/// The element types a program runs on, with each op as its eager kernel
/// computes it.
pub(crate) trait Lane: Float + super::scratch::Scratch {
    /// `out[i] = op(x[i])`.
    fn unary(op: &Unary, x: &[Self], out: &mut [Self]);
    /// `s[i] = sin x[i]` and `c[i] = cos x[i]`, the bits of the `Sin` and
    /// `Cos` ops, from one range reduction where the type has one.
    fn sin_and_cos(x: &[Self], s: &mut [Self], c: &mut [Self]);
}

/// `out[i] = f(x[i])`.
#[inline(always)]
fn each<T: Copy>(x: &[T], out: &mut [T], f: impl Fn(T) -> T) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// Runs `$body` with `$f` bound to the element function of a one-input op
/// whose kernel is the same generic code for `f32` and `f64` (a closure
/// per op, so that each use is its own vectorised loop), or `$other` for
/// any other op.
macro_rules! with_elem_unary {
    ($op:expr, $T:ty, |$f:ident| $body:expr, $other:expr) => {{
        let zero = <$T>::zero();
        match $op {
            Unary::Neg => {
                let $f = |v: $T| -v;
                $body
            }
            Unary::Abs => {
                let $f = |v: $T| v.abs();
                $body
            }
            Unary::Square => {
                let $f = |v: $T| v * v;
                $body
            }
            Unary::Sqrt => {
                let $f = |v: $T| v.sqrt();
                $body
            }
            Unary::Reciprocal => {
                let $f = |v: $T| <$T>::one() / v;
                $body
            }
            Unary::Relu => {
                let $f = |v: $T| if v < zero { zero } else { v };
                $body
            }
            Unary::MulScalar(c) => {
                let c = <$T>::from_f64(c.0);
                let $f = |v: $T| v * c;
                $body
            }
            Unary::DivScalar(c) => {
                let c = <$T>::from_f64(c.0);
                let $f = |v: $T| v / c;
                $body
            }
            Unary::AddScalar(c) => {
                let c = <$T>::from_f64(c.0);
                let $f = |v: $T| v + c;
                $body
            }
            _ => $other,
        }
    }};
}
pub(super) use with_elem_unary;

/// Whether [`with_elem_unary`] has an element function for `op` (ops cheap
/// enough that a pass over a register costs more than the op).
pub(super) fn elem_unary(op: &Unary) -> bool {
    fn has<T: Float>(op: &Unary) -> bool {
        with_elem_unary!(op, T, |_f| true, false)
    }
    has::<f32>(op)
}

/// The ops whose kernels are the same generic code for `f32` and `f64`.
#[inline(always)]
fn unary_common<T: Float>(op: &Unary, x: &[T], out: &mut [T]) {
    with_elem_unary!(
        op,
        T,
        |f| each(x, out, f),
        match op {
            Unary::Log => each(x, out, |v| v.ln()),
            Unary::PowScalar(c) => {
                let c = T::from_f64(c.0);
                each(x, out, |v| v.powf(c))
            }
            // never fused (see `fusible_unary`); computed as the f64 evaluator does
            other => each(x, out, |v| T::from_f64(other.apply_f64(v.to_f64()))),
        }
    )
}

impl Lane for f32 {
    #[inline(always)]
    fn unary(op: &Unary, x: &[f32], out: &mut [f32]) {
        match op {
            Unary::Exp => math::exp_slice(x, out),
            // (one arm each: a function pointer would not inline)
            Unary::Sin => math::sin_or_cos_slice::<false>(x, out),
            Unary::Cos => math::sin_or_cos_slice::<true>(x, out),
            Unary::Tanh => each(x, out, math::tanh_f32),
            Unary::Sigmoid => each(x, out, math::sigmoid_f32),
            _ => unary_common(op, x, out),
        }
    }

    #[inline(always)]
    fn sin_and_cos(x: &[f32], s: &mut [f32], c: &mut [f32]) {
        math::sin_cos_slice(x, s, c);
    }
}

impl Lane for f64 {
    #[inline(always)]
    fn unary(op: &Unary, x: &[f64], out: &mut [f64]) {
        match op {
            Unary::Exp => each(x, out, f64::exp),
            Unary::Sin => each(x, out, f64::sin),
            Unary::Cos => each(x, out, f64::cos),
            Unary::Tanh => each(x, out, f64::tanh),
            Unary::Sigmoid => each(x, out, |v| {
                if v >= 0.0 {
                    1.0 / (1.0 + (-v).exp())
                } else {
                    let e = v.exp();
                    e / (1.0 + e)
                }
            }),
            _ => unary_common(op, x, out),
        }
    }

    #[inline(always)]
    fn sin_and_cos(x: &[f64], s: &mut [f64], c: &mut [f64]) {
        each(x, s, f64::sin);
        each(x, c, f64::cos);
    }
}

/// Runs `$body` with `$f` bound to the element function of a two-input
/// op, as the eager kernels compute it (a closure per op, so that each use
/// is its own vectorised loop).
macro_rules! with_elem_binary {
    ($op:expr, $T:ty, |$f:ident| $body:expr) => {{
        let zero = <$T>::zero();
        match $op {
            Binary::Add => {
                let $f = |x: $T, y: $T| x + y;
                $body
            }
            Binary::Sub => {
                let $f = |x: $T, y: $T| x - y;
                $body
            }
            Binary::Mul => {
                let $f = |x: $T, y: $T| x * y;
                $body
            }
            Binary::Div => {
                let $f = |x: $T, y: $T| x / y;
                $body
            }
            Binary::Maximum => {
                let $f = |x: $T, y: $T| if x >= y || x.is_nan() { x } else { y };
                $body
            }
            Binary::Minimum => {
                let $f = |x: $T, y: $T| if x <= y || x.is_nan() { x } else { y };
                $body
            }
            Binary::SquaredDifference => {
                let $f = |x: $T, y: $T| (x - y) * (x - y);
                $body
            }
            Binary::ReluGrad => {
                let $f = |x: $T, y: $T| if y > zero { x } else { zero };
                $body
            }
            Binary::TanhGrad => {
                let $f = |x: $T, y: $T| y * (<$T>::one() - x * x);
                $body
            }
            // never fused (see `fusible_binary`)
            other => {
                let $f = |x: $T, y: $T| <$T>::from_f64(other.apply_f64(x.to_f64(), y.to_f64()));
                $body
            }
        }
    }};
}
pub(super) use with_elem_binary;

/// `out[i] = op(a[i], b[i])`, as the eager kernels compute it.
#[inline(always)]
pub(super) fn binary<T: Float>(op: &Binary, a: &[T], b: &[T], out: &mut [T]) {
    with_elem_binary!(op, T, |f| {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    })
}
