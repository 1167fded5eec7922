//! The elementwise functions that both run eagerly and fuse, each defined
//! once, on slices of `f32` or `f64`: [`Lane::unary`] and [`binary`].
//!
//! The eager ops (`sqrt`, `exp`, `sin`, `add`, `maximum`, ...) compute
//! their `f32` and `f64` results by running these functions over blocks of
//! their input ([`unary_map`], [`binary_zip`]); the graph compiler's fused
//! kernels run the same functions over the registers of a program; constant
//! folding takes the `f64` values from them (`Unary::apply_f64`). So an
//! eager call, a traced call and a folded constant give the same bits by
//! construction, and a new fusible function is one arm here (beside its
//! descriptor variant and its public op with its rules). The ops whose
//! functions are here are those of [`defined`] and [`defined_binary`]; the
//! others run their own kernels and never fuse. Half-precision tensors go
//! through `f32`, integers through their own wrapping kernels.

use crate::error::Result;
use crate::kernels::cpu::elementwise::{map_slices, zip};
use crate::kernels::cpu::math;
use crate::ops::desc::{Binary, Unary};
use crate::tensor::{DType, Float, Tensor};

/// The element types the functions run on (`f32`, `f64`).
pub(crate) trait Lane: Float {
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
pub(crate) use with_elem_unary;

/// Whether [`with_elem_unary`] has an element function for `op` (ops cheap
/// enough that a pass over a register costs more than the op).
pub(crate) fn elem_unary(op: &Unary) -> bool {
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
            // not defined here (see `defined`): computed as the f64 evaluator does
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
            // not defined here (see `defined_binary`)
            other => {
                let $f = |x: $T, y: $T| <$T>::from_f64(other.apply_f64(x.to_f64(), y.to_f64()));
                $body
            }
        }
    }};
}
pub(crate) use with_elem_binary;

/// `out[i] = op(a[i], b[i])`, as the eager kernels compute it.
#[inline(always)]
pub(crate) fn binary<T: Float>(op: &Binary, a: &[T], b: &[T], out: &mut [T]) {
    with_elem_binary!(op, T, |f| {
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    })
}

/// Whether `op`'s function is defined here (and so fuses).
pub(crate) fn defined(op: &Unary) -> bool {
    use Unary::*;
    matches!(
        op,
        Neg | Abs
            | Square
            | Sqrt
            | Reciprocal
            | Exp
            | Log
            | Sin
            | Cos
            | Tanh
            | Sigmoid
            | Relu
            | PowScalar(_)
            | MulScalar(_)
            | DivScalar(_)
            | AddScalar(_)
    )
}

/// Whether the two-input `op`'s function is defined here (and so fuses).
pub(crate) fn defined_binary(op: &Binary) -> bool {
    use Binary::*;
    matches!(
        op,
        Add | Sub | Mul | Div | Maximum | Minimum | SquaredDifference | ReluGrad | TanhGrad
    )
}

/// `op` of one `f64` (constant folding), as the `f64` kernels compute it.
pub(crate) fn unary_f64(op: &Unary, x: f64) -> f64 {
    let mut out = [0.0];
    f64::unary(op, &[x], &mut out);
    out[0]
}

/// `op` of two `f64`s, as the `f64` kernels compute it.
pub(crate) fn binary_f64(op: &Binary, a: f64, b: f64) -> f64 {
    let mut out = [0.0];
    binary(op, &[a], &[b], &mut out);
    out[0]
}

/// The eager kernel of a [`defined`] op on an `f32` or `f64` tensor
/// (`None` for another dtype); errors name `name`.
pub(crate) fn unary_map(name: &'static str, op: &Unary, x: &Tensor) -> Option<Result<Tensor>> {
    debug_assert!(defined(op), "{op:?} has no function in the table");
    match x.dtype() {
        // (inlined into the vectorised loop's function, or the `f32`
        // functions' fused multiply-adds become libm calls: 10x slower)
        DType::F32 => Some(map_slices::<f32>(
            name,
            x,
            #[inline(always)]
            |s, o| f32::unary(op, s, o),
        )),
        DType::F64 => Some(map_slices::<f64>(
            name,
            x,
            #[inline(always)]
            |s, o| f64::unary(op, s, o),
        )),
        _ => None,
    }
}

/// The eager kernel of a [`defined_binary`] op on two `f32` or two `f64`
/// tensors, broadcasting (`None` for another dtype, or two dtypes).
pub(crate) fn binary_zip(name: &'static str, op: &Binary, a: &Tensor, b: &Tensor) -> Option<Result<Tensor>> {
    debug_assert!(defined_binary(op), "{op:?} has no function in the table");
    fn typed<T: Float>(name: &'static str, op: &Binary, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        with_elem_binary!(op, T, |f| zip::<T, T, T>(name, a, b, f))
    }
    if a.dtype() != b.dtype() {
        // (the caller's kernel reports the mismatch)
        return None;
    }
    match a.dtype() {
        DType::F32 => Some(typed::<f32>(name, op, a, b)),
        DType::F64 => Some(typed::<f64>(name, op, a, b)),
        _ => None,
    }
}

/// [`unary_map`] for an `f32` or `f64` tensor, else `other()` (integers,
/// half precision done natively, or the op's dtype error).
#[inline]
pub(crate) fn unary_or(
    op: Unary,
    name: &'static str,
    x: &Tensor,
    other: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    unary_map(name, &op, x).unwrap_or_else(other)
}

/// [`binary_zip`] for `f32` or `f64` tensors, else `other()`.
#[inline]
pub(crate) fn binary_or(
    op: Binary,
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    other: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    binary_zip(name, &op, a, b).unwrap_or_else(other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::desc::F64;

    /// Every op the table defines has its own function for both types (one
    /// that fell back to `apply_f64` would come back here for ever), and the
    /// eager kernel, the slice function and the folded `f64` value agree.
    #[test]
    fn defined_ops_run_their_own_functions_everywhere() {
        let ops = [
            Unary::Neg,
            Unary::Abs,
            Unary::Square,
            Unary::Sqrt,
            Unary::Reciprocal,
            Unary::Exp,
            Unary::Log,
            Unary::Sin,
            Unary::Cos,
            Unary::Tanh,
            Unary::Sigmoid,
            Unary::Relu,
            Unary::PowScalar(F64(1.5)),
            Unary::MulScalar(F64(-3.0)),
            Unary::DivScalar(F64(7.0)),
            Unary::AddScalar(F64(0.25)),
        ];
        let xs: Vec<f64> = (0..300).map(|i| (i as f64 - 150.0) * 0.0731).collect();
        let t = Tensor::from_vec(xs.clone(), &[300]).unwrap();
        for op in &ops {
            assert!(defined(op), "{op:?}");
            let eager = unary_map("test", op, &t).unwrap().unwrap().to_vec::<f64>().unwrap();
            let mut slice = vec![0.0; xs.len()];
            f64::unary(op, &xs, &mut slice);
            for (i, &x) in xs.iter().enumerate() {
                let folded = op.apply_f64(x);
                assert_eq!(eager[i].to_bits(), slice[i].to_bits(), "{op:?}({x})");
                assert_eq!(folded.to_bits(), slice[i].to_bits(), "{op:?}({x})");
            }
        }
        assert!(!defined(&Unary::Erf) && !defined_binary(&Binary::Pow));
        for op in [Binary::Add, Binary::Maximum, Binary::TanhGrad, Binary::ReluGrad] {
            assert!(defined_binary(&op));
            let a = Tensor::vector(&[1.5f64, -2.0, f64::NAN]);
            let b = Tensor::vector(&[0.5f64, 3.0, 1.0]);
            let z = binary_zip("test", &op, &a, &b)
                .unwrap()
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            for (i, (x, y)) in [(1.5, 0.5), (-2.0, 3.0), (f64::NAN, 1.0)].into_iter().enumerate() {
                assert_eq!(z[i].to_bits(), op.apply_f64(x, y).to_bits(), "{op:?}");
            }
        }
    }
}
