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

/// The ops whose kernels are the same generic code for `f32` and `f64`.
#[inline(always)]
fn unary_common<T: Float>(op: &Unary, x: &[T], out: &mut [T]) {
    let zero = T::zero();
    match op {
        Unary::Neg => each(x, out, |v| zero - v),
        Unary::Abs => each(x, out, |v| if v < zero { zero - v } else { v }),
        Unary::Square => each(x, out, |v| v * v),
        Unary::Sqrt => each(x, out, |v| v.sqrt()),
        Unary::Reciprocal => each(x, out, |v| T::one() / v),
        Unary::Log => each(x, out, |v| v.ln()),
        Unary::Relu => each(x, out, |v| if v < zero { zero } else { v }),
        Unary::PowScalar(c) => {
            let c = T::from_f64(c.0);
            each(x, out, |v| v.powf(c))
        }
        Unary::MulScalar(c) => {
            let c = T::from_f64(c.0);
            each(x, out, |v| v * c)
        }
        Unary::DivScalar(c) => {
            let c = T::from_f64(c.0);
            each(x, out, |v| v / c)
        }
        Unary::AddScalar(c) => {
            let c = T::from_f64(c.0);
            each(x, out, |v| v + c)
        }
        // never fused (see `fusible_unary`); computed as the f64 evaluator does
        other => each(x, out, |v| T::from_f64(other.apply_f64(v.to_f64()))),
    }
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

/// `out[i] = op(a[i], b[i])`, as the eager kernels compute it.
#[inline(always)]
pub(super) fn binary<T: Float>(op: &Binary, a: &[T], b: &[T], out: &mut [T]) {
    let zero = T::zero();
    // (a closure per op, so that each loop is its own vectorised loop)
    macro_rules! zip {
        (|$x:ident, $y:ident| $e:expr) => {
            for ((o, &$x), &$y) in out.iter_mut().zip(a).zip(b) {
                *o = $e;
            }
        };
    }
    match op {
        Binary::Add => zip!(|x, y| x + y),
        Binary::Sub => zip!(|x, y| x - y),
        Binary::Mul => zip!(|x, y| x * y),
        Binary::Div => zip!(|x, y| x / y),
        Binary::Maximum => zip!(|x, y| if x >= y || x.is_nan() { x } else { y }),
        Binary::Minimum => zip!(|x, y| if x <= y || x.is_nan() { x } else { y }),
        Binary::SquaredDifference => zip!(|x, y| (x - y) * (x - y)),
        Binary::ReluGrad => zip!(|x, y| if y > zero { x } else { zero }),
        Binary::TanhGrad => zip!(|x, y| y * (T::one() - x * x)),
        // never fused (see `fusible_binary`)
        other => zip!(|x, y| T::from_f64(other.apply_f64(x.to_f64(), y.to_f64()))),
    }
}
