//! The elementwise table: every real elementwise function, defined once,
//! on slices of `f32` or `f64` ([`Lane::unary`] and [`binary`]).
//!
//! Three readers make their code from it:
//!
//! - the **eager ops** (`sqrt`, `exp`, `erf`, `softplus`, `floor`, `add`,
//!   `pow`, `floor_mod`, ...) compute their `f32` and `f64` results by
//!   running these functions over blocks of their input ([`unary_map`],
//!   [`float_unary`], [`binary_zip`]);
//! - the graph compiler's **fused kernels** run the same functions over the
//!   registers of a program (every op here fuses: `kernel::fusible_unary`
//!   is [`defined`]);
//! - **constant folding** and the `f64` evaluator take their values from
//!   them (`Unary::apply_f64` and `Binary::apply_f64` call [`unary_f64`]
//!   and [`binary_f64`] for every op here).
//!
//! So an eager call, a traced call and a folded constant give the same bits
//! by construction, and a new elementwise function is one arm here, beside
//! its descriptor variant (`ops::desc::elementwise`) and its public op with
//! its rules. [`defined`] and [`defined_binary`] are read off the arms, so
//! they cannot disagree with them.
//!
//! The arms come in four groups: [`with_elem_unary`] (ops cheap enough
//! that a fused kernel composes them per element rather than making a pass
//! over a register), `ln` and `powf` (in `unary_common`), the `f32` forms
//! with vectorised code of their own (`exp`, `sin`, `cos`, `tanh`,
//! `sigmoid`, in [`Lane::unary`]), all inline in the kernels' loops; and
//! [`with_float_unary`], the rarer ones, behind one call (`unary_rare`). Outside the table are only the
//! complex and logical ops. Half-precision tensors compute the one-input
//! functions through `f32` (as TensorFlow's half kernels) and the
//! two-input ones in their own arithmetic; integers run their own wrapping
//! kernels.

use super::cuda_expr;
use super::table_half::half_binary;
pub(crate) use super::table_half::in_f32;
use crate::dispatch::device::offload;
use crate::error::Result;
use crate::kernels::cpu::elementwise::{map, map_slices, zip, zip_slices};
use crate::kernels::cpu::lockstep::{self, chunks, chunks_mut, zip3};
use crate::kernels::cpu::log;
use crate::kernels::cpu::math::{self, sigmoid_of, GELU_TANH};
use crate::kernels::cpu::pow;
use crate::ops::desc::{Binary, Unary};
use crate::ops::math::elementary::LibmExt;
use crate::ops::unsupported;
use crate::tensor::{bf16, f16, DType, Float, Tensor};

/// The element types the functions run on (`f32`, `f64`).
pub trait Lane: Float + LibmExt {
    /// `out[i] = op(x[i])`.
    fn unary(op: &Unary, x: &[Self], out: &mut [Self]);
    /// `s[i] = sin x[i]` and `c[i] = cos x[i]`, the bits of the `Sin` and
    /// `Cos` ops, from one range reduction where the type has one.
    fn sin_and_cos(x: &[Self], s: &mut [Self], c: &mut [Self]);
    /// `g[i] = gelu(x[i])` and `d[i] = gelu'(x[i])`, the bits of the `Gelu`
    /// and `GeluGrad` ops, with their shared `erf` computed once where the
    /// type's kernels share one (`f32`).
    #[inline(always)]
    fn gelu_and_grad(x: &[Self], g: &mut [Self], d: &mut [Self]) {
        Self::unary(&Unary::Gelu, x, g);
        Self::unary(&Unary::GeluGrad, x, d);
    }
}

/// Two one-input ops of one value that a fused program computes together
/// (their shared work once, each op's bits): the members of a pair are
/// [`Pair::ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pair {
    /// `Sin` and `Cos` (one range reduction).
    SinCos,
    /// `Gelu` and `GeluGrad` (one `erf`): a traced GELU's forward and the
    /// derivative its gradient needs.
    GeluAndGrad,
}

impl Pair {
    /// Every pair.
    pub const ALL: [Pair; 2] = [Pair::SinCos, Pair::GeluAndGrad];

    /// The two ops, in the order of the pair's outputs.
    pub fn ops(self) -> [Unary; 2] {
        match self {
            Pair::SinCos => [Unary::Sin, Unary::Cos],
            Pair::GeluAndGrad => [Unary::Gelu, Unary::GeluGrad],
        }
    }

    /// The name a program prints.
    pub fn name(self) -> &'static str {
        match self {
            Pair::SinCos => "SinCos",
            Pair::GeluAndGrad => "GeluAndGrad",
        }
    }

    /// `a[i], b[i] = ops(x[i])`.
    #[inline(always)]
    pub fn run<T: Lane>(self, x: &[T], a: &mut [T], b: &mut [T]) {
        match self {
            Pair::SinCos => T::sin_and_cos(x, a, b),
            Pair::GeluAndGrad => T::gelu_and_grad(x, a, b),
        }
    }
}

/// `out[i] = f(x[i])`.
#[inline(always)]
fn each<T: Copy>(x: &[T], out: &mut [T], f: impl Fn(T) -> T) {
    for (o, &v) in lockstep::zip(out, x) {
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

/// Whether [`with_elem_unary`] has an element function for `op` (ops cheap
/// enough that a pass over a register costs more than the op).
pub(crate) fn elem_unary(op: &Unary) -> bool {
    fn has<T: Float>(op: &Unary) -> bool {
        with_elem_unary!(op, T, |_f| true, false)
    }
    has::<f32>(op)
}

/// Runs `$body` with `$f` bound to the element function of a one-input op
/// that is not cheap enough for [`with_elem_unary`] (a pass of its own over
/// a register in a fused kernel), the same generic code for `f32` and
/// `f64`, or `$other` for any other op. (`exp`, `sin`, `cos`, `tanh` and
/// `sigmoid` are in [`Lane::unary`]: their `f32` forms are vectorised.)
macro_rules! with_float_unary {
    ($op:expr, $T:ty, |$f:ident| $body:expr, $other:expr) => {{
        #[allow(unused_imports)]
        use $crate::ops::math::elementary::LibmExt as _;
        let (zero, one) = (<$T>::zero(), <$T>::one());
        match $op {
            Unary::Sign => {
                let $f = |v: $T| {
                    if v > zero {
                        one
                    } else if v < zero {
                        -one
                    } else if v == zero {
                        // +0 for -0 too, as TensorFlow
                        zero
                    } else {
                        v // NaN
                    }
                };
                $body
            }
            Unary::Rsqrt => {
                let $f = |v: $T| one / v.sqrt();
                $body
            }
            Unary::Expm1 => {
                let $f = |v: $T| v.expm1_();
                $body
            }
            Unary::Log1p => {
                let $f = |v: $T| v.log1p_();
                $body
            }
            Unary::Tan => {
                let $f = |v: $T| v.tan();
                $body
            }
            Unary::Asin => {
                let $f = |v: $T| v.asin();
                $body
            }
            Unary::Acos => {
                let $f = |v: $T| v.acos();
                $body
            }
            Unary::Atan => {
                let $f = |v: $T| v.atan();
                $body
            }
            Unary::Sinh => {
                let $f = |v: $T| v.sinh();
                $body
            }
            Unary::Cosh => {
                let $f = |v: $T| v.cosh();
                $body
            }
            Unary::Asinh => {
                let $f = |v: $T| v.asinh_();
                $body
            }
            Unary::Acosh => {
                let $f = |v: $T| v.acosh_();
                $body
            }
            Unary::Atanh => {
                let $f = |v: $T| v.atanh_();
                $body
            }
            Unary::Erf => {
                let $f = |v: $T| v.erf_();
                $body
            }
            Unary::Erfc => {
                let $f = |v: $T| v.erfc_();
                $body
            }
            // (with erfc, where 1 + erf(x/√2) cancels for negative x; the
            // `f32` kernels take 1 + erf, see `Lane for f32`)
            Unary::Gelu => {
                let (h, r) = (<$T>::from_f64(0.5), <$T>::from_f64(std::f64::consts::FRAC_1_SQRT_2));
                let $f = |v: $T| h * v * (-(v * r)).erfc_();
                $body
            }
            Unary::GeluGrad => {
                let (h, r) = (<$T>::from_f64(0.5), <$T>::from_f64(std::f64::consts::FRAC_1_SQRT_2));
                let c = <$T>::from_f64(0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2);
                let $f = |v: $T| h * (-(v * r)).erfc_() + v * c * (-(h * v * v)).exp();
                $body
            }
            // (TensorFlow's function, `x/2 · (1 + tanh u)` with `u = √(2/π) ·
            // (x + 0.044715 x³)`, written as `x · σ(2u)`, and its derivative
            // `s + 2x · s · σ(−2u) · u'` with `s = σ(2u)`: the same values,
            // without the cancellation of `1 + tanh u` where u ≪ 0; see
            // kernels::cpu::math::gelu_tanh_f32)
            Unary::GeluTanh => {
                let [_, c, a] = lockstep::map(GELU_TANH, <$T>::from_f64);
                let two = <$T>::from_f64(2.0);
                let $f = |v: $T| v * sigmoid_of(two * c * (v + a * (v * v * v)));
                $body
            }
            Unary::GeluTanhGrad => {
                let [_, c, a] = lockstep::map(GELU_TANH, <$T>::from_f64);
                let a3 = <$T>::from_f64(3.0 * GELU_TANH[2]);
                let bound = <$T>::from_f64(math::GELU_TANH_SATURATED);
                let two = <$T>::from_f64(2.0);
                let $f = |v: $T| {
                    // (clamped where the second term is 0: GELU_TANH_SATURATED)
                    let v = (if v > bound {
                        bound
                    } else if v < -bound {
                        -bound
                    } else {
                        v
                    }) + (v - v);
                    let u2 = two * c * (v + a * (v * v * v));
                    let (s, sn) = (sigmoid_of(u2), sigmoid_of(-u2));
                    s + two * v * s * sn * c * (<$T>::one() + a3 * (v * v))
                };
                $body
            }
            // (x·σ(x) and its derivative σ(x)·(1 + x·σ(−x)) = s + x·s·s̄:
            // x times factors of at most 1, finite wherever x is; the
            // composite x · sigmoid(x)'s rule multiplied the cotangent by x)
            Unary::Silu => {
                let $f = |v: $T| v * sigmoid_of(v);
                $body
            }
            Unary::SiluGrad => {
                let $f = |v: $T| sigmoid_of(v) + v * sigmoid_of(v) * sigmoid_of(-v);
                $body
            }
            // (kernels::cpu::math's mish_of, mish_grad_of, tanh_shrink_of:
            // Mish without overflow, its derivative without cancellation,
            // x − tanh x by its series near 0)
            Unary::Mish => {
                let $f = math::mish_of::<$T>;
                $body
            }
            Unary::MishGrad => {
                let $f = math::mish_grad_of::<$T>;
                $body
            }
            Unary::TanhShrink => {
                let $f = math::tanh_shrink_of::<$T>;
                $body
            }
            Unary::Floor => {
                let $f = |v: $T| v.floor();
                $body
            }
            Unary::Ceil => {
                let $f = |v: $T| v.ceil();
                $body
            }
            Unary::Round => {
                let $f = |v: $T| v.round_even_();
                $body
            }
            Unary::Relu6 => {
                let six = <$T>::from_f64(6.0);
                let $f = |v: $T| {
                    if v <= zero {
                        zero
                    } else if v >= six {
                        six
                    } else {
                        v
                    }
                };
                $body
            }
            Unary::LeakyRelu(a) => {
                let a = <$T>::from_f64(a.0);
                let $f = |v: $T| if v > zero { v } else { v * a };
                $body
            }
            Unary::Elu => {
                let $f = |v: $T| if v > zero { v } else { v.expm1_() };
                $body
            }
            Unary::Selu => {
                use $crate::ops::{SELU_ALPHA, SELU_SCALE};
                let (s, sa) = (<$T>::from_f64(SELU_SCALE), <$T>::from_f64(SELU_SCALE * SELU_ALPHA));
                let $f = |v: $T| if v > zero { s * v } else { sa * v.expm1_() };
                $body
            }
            Unary::Softplus => {
                // max(x, 0) + ln(1 + e^-|x|), without overflow
                let $f = |v: $T| {
                    if v > zero {
                        v + (-v).exp().log1p_()
                    } else {
                        v.exp().log1p_()
                    }
                };
                $body
            }
            Unary::Softsign => {
                let $f = |v: $T| v / (v.abs() + one);
                $body
            }
            Unary::ClipByValue(lo, hi) => {
                let (l, h) = (<$T>::from_f64(lo.0), <$T>::from_f64(hi.0));
                let $f = |v: $T| {
                    if v < l {
                        l
                    } else if v > h {
                        h
                    } else {
                        v
                    }
                };
                $body
            }
            _ => $other,
        }
    }};
}

/// The ops whose kernels are the same generic code for `f32` and `f64`:
/// the cheap ones and `ln`, `powf` inline (in the fused kernels' loop over
/// registers, as in the eager kernels), the others behind one call
/// ([`unary_rare`]), which keeps that loop small enough for the compiler to
/// treat the hot ops well.
#[inline(always)]
fn unary_common<T: Float + LibmExt>(op: &Unary, x: &[T], out: &mut [T]) {
    with_elem_unary!(
        op,
        T,
        |f| each(x, out, f),
        match op {
            Unary::Log => each(x, out, |v| v.ln()),
            Unary::PowScalar(c) => pow::pow_scalar_slice(x, out, c.0),
            _ => unary_rare(op, x, out),
        }
    )
}

/// [`with_float_unary`]'s ops (and, for an op the table does not define,
/// the `f64` evaluator's value), out of line.
/// Its loops are compiled for the CPU's vector extensions too
/// ([`math::with_simd`]): as one baseline copy, `floor`, `ceil` and
/// `round` were C library calls per element (SSE2 has no rounding
/// instruction; 0.87 ms for a `[32, 64, 128]` floor, against 0.02 ms for
/// `abs`), and no loop vectorised wider than SSE2.
#[inline(never)]
fn unary_rare<T: Float + LibmExt>(op: &Unary, x: &[T], out: &mut [T]) {
    math::with_simd(
        #[inline(always)]
        || {
            with_float_unary!(
                op,
                T,
                |f| each(x, out, f),
                // not defined here (see `defined`): computed as the f64 evaluator does
                each(x, out, |v| T::from_f64(op.apply_f64(v.to_f64())))
            )
        },
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
            Unary::Log => log::log_slice(x, out),
            Unary::Log1p => log::log1p_slice(x, out),
            Unary::Softplus => log::softplus_slice(x, out),
            Unary::Expm1 => log::expm1_slice(x, out),
            Unary::Elu => log::elu_slice(x, out),
            Unary::Selu => {
                use crate::ops::{SELU_ALPHA, SELU_SCALE};
                log::selu_slice(x, out, SELU_SCALE as f32, (SELU_SCALE * SELU_ALPHA) as f32)
            }
            Unary::PowScalar(c) => pow::pow_scalar_f32(x, out, c.0),
            Unary::Silu => each(x, out, math::silu_f32),
            Unary::Mish => math::mish_slice(x, out),
            Unary::MishGrad => math::mish_grad_slice(x, out),
            Unary::SiluGrad => each(x, out, math::silu_grad_f32),
            Unary::Erf => crate::kernels::cpu::erf::erf_slice(x, out),
            // (inlined here, in `with_simd`: out of line, erf's fused
            // multiply-adds are library calls)
            Unary::Gelu => crate::kernels::cpu::erf::gelu_slice(x, out),
            Unary::GeluGrad => crate::kernels::cpu::erf::gelu_grad_slice(x, out),
            Unary::GeluTanh => each(x, out, math::gelu_tanh_f32),
            Unary::GeluTanhGrad => each(x, out, math::gelu_tanh_grad_f32),
            _ => unary_common(op, x, out),
        }
    }

    #[inline(always)]
    fn sin_and_cos(x: &[f32], s: &mut [f32], c: &mut [f32]) {
        math::sin_cos_slice(x, s, c);
    }

    #[inline(always)]
    fn gelu_and_grad(x: &[f32], g: &mut [f32], d: &mut [f32]) {
        crate::kernels::cpu::erf::gelu_and_grad_slice(x, g, d);
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

/// `op(x)` of one element, as [`Lane::unary`] gives it: the cheap ops as
/// their element function itself (no one-element loop: a scalar graph's
/// program runs thousands of them), the others through their slice
/// function.
#[inline(always)]
pub fn unary_one<T: Lane>(op: &Unary, x: T) -> T {
    with_elem_unary!(op, T, |f| f(x), {
        let mut y = [T::zero()];
        T::unary(op, &[x], &mut y);
        y[0]
    })
}

/// Runs `$body` with `$f` bound to the element function of a two-input
/// op, as the eager kernels compute it (a closure per op, so that each use
/// is its own vectorised loop).
macro_rules! with_elem_binary {
    ($op:expr, $T:ty, |$f:ident| $body:expr) => {
        with_elem_binary!($op, $T, |$f| $body, {
            // not defined here (see `defined_binary`)
            let op = $op;
            let $f = |x: $T, y: $T| <$T>::from_f64(op.apply_f64(x.to_f64(), y.to_f64()));
            $body
        })
    };
    ($op:expr, $T:ty, |$f:ident| $body:expr, $other:expr) => {{
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
                // (a product, as TensorFlow's: inf or NaN times 0 is NaN)
                let $f = |x: $T, y: $T| x * if y > zero { <$T>::one() } else { zero };
                $body
            }
            Binary::TanhGrad => {
                let $f = |x: $T, y: $T| y * (<$T>::one() - x * x);
                $body
            }
            Binary::Pow => {
                let $f = |x: $T, y: $T| x.powf(y);
                $body
            }
            Binary::Atan2 => {
                let $f = |x: $T, y: $T| x.atan2(y);
                $body
            }
            Binary::FloorDiv => {
                let $f = |x: $T, y: $T| (x / y).floor();
                $body
            }
            Binary::FloorMod => {
                // the remainder with the divisor's sign
                let $f = |x: $T, y: $T| {
                    let r = x % y;
                    if r != zero && ((r < zero) != (y < zero)) {
                        r + y
                    } else {
                        r
                    }
                };
                $body
            }
            _ => $other,
        }
    }};
}

/// `out[i] = op(a[i], b[i])`, as the eager kernels compute it.
#[inline(always)]
pub fn binary<T: Float>(op: &Binary, a: &[T], b: &[T], out: &mut [T]) {
    with_elem_binary!(op, T, |f| {
        for (o, &x, &y) in zip3(out, a, b) {
            *o = f(x, y);
        }
    })
}

/// Whether `op`'s function is defined here (and so fuses): whether one of
/// the table's arms names it.
pub fn defined(op: &Unary) -> bool {
    fn has<T: Float + LibmExt>(op: &Unary) -> bool {
        // (the arms of `unary_common` and `Lane::unary`)
        let own = matches!(
            op,
            Unary::Log | Unary::PowScalar(_) | Unary::Exp | Unary::Sin | Unary::Cos | Unary::Tanh | Unary::Sigmoid
        );
        with_elem_unary!(op, T, |_f| true, with_float_unary!(op, T, |_f| true, own))
    }
    has::<f64>(op)
}

/// Whether the two-input `op`'s function is defined here (and so fuses).
pub fn defined_binary(op: &Binary) -> bool {
    fn has<T: Float>(op: &Binary) -> bool {
        with_elem_binary!(op, T, |_f| true, false)
    }
    has::<f64>(op)
}

/// `op` of one `f64` (constant folding), as the `f64` kernels compute it.
pub fn unary_f64(op: &Unary, x: f64) -> f64 {
    let mut out = [0.0];
    f64::unary(op, &[x], &mut out);
    out[0]
}

/// `op` of two `f64`s, as the `f64` kernels compute it.
pub fn binary_f64(op: &Binary, a: f64, b: f64) -> f64 {
    let mut out = [0.0];
    binary(op, &[a], &[b], &mut out);
    out[0]
}

/// The eager kernel of a [`defined`] op on an `f32` or `f64` tensor
/// (`None` for another dtype); errors name `name`.
pub fn unary_map(name: &'static str, op: &Unary, x: &Tensor) -> Option<Result<Tensor>> {
    debug_assert!(defined(op), "{op:?} has no function in the table");
    if x.device_buffer().is_some() && x.dtype().is_float() {
        // (on a GPU the half types compute in f32 and round once, as
        // `in_f32` on the host)
        return offload(
            name,
            &[x],
            |_| cuda_expr::cuda_unary(name, op, x),
            |h| {
                in_f32(op.clone(), name, &h[0], |x| {
                    unary_map(name, op, x).unwrap_or_else(|| Err(unsupported(name, x.dtype(), "a float dtype")))
                })
            },
        );
    }
    if x.numel() <= 2 {
        // a scalar or so (a chain of scalar ops costs per op): element by
        // element, no block dispatch
        return match x.dtype() {
            DType::F32 => Some(map::<f32, f32>(name, x, |v| unary_one(op, v))),
            DType::F64 => Some(map::<f64, f64>(name, x, |v| unary_one(op, v))),
            _ => None,
        };
    }
    match x.dtype() {
        DType::F32 => Some(map_slices::<f32>(name, x, |s, o| unary_run(op, s, o))),
        DType::F64 => Some(map_slices::<f64>(name, x, |s, o| unary_run(op, s, o))),
        _ => None,
    }
}

/// The runs of elements the table's functions are handed: a fused kernel's
/// register (at most `kernel::MAX_WIDTH`, this many) or a block of an
/// eager map's input, from the start of its parallel chunk.
pub(crate) const RUN: usize = crate::kernels::cpu::elementwise::RUN;

/// [`Lane::unary`] over `x`, a run of at most [`RUN`] elements at a time,
/// compiled for the CPU's widest vector extension ([`math::with_simd`];
/// without it, the `f32` functions' fused multiply-adds are libm calls,
/// 10x slower), in one copy per type that both readers call: the eager
/// maps (a call per parallel chunk) and each fused kernel's loop (a call
/// per register run). Inlined into each reader instead, every vectorised
/// function of the table was compiled once more per reader, type and
/// vector level.
#[inline(never)]
pub(crate) fn unary_run<T: Lane>(op: &Unary, x: &[T], out: &mut [T]) {
    math::with_simd(
        #[inline(always)]
        || {
            for (x, out) in lockstep::zip(chunks(x, RUN), chunks_mut(out, RUN)) {
                T::unary(op, x, out)
            }
        },
    )
}

/// [`binary`] over runs of at most [`RUN`] elements, compiled for the
/// CPU's widest vector extension, in one copy per type, as [`unary_run`]:
/// the fused kernels' loop calls it for each register run (inlined there,
/// each of the table's two-input functions was compiled into the loop once
/// per type and vector level, and again into its sums).
#[inline(never)]
pub(crate) fn binary_run<T: Lane>(op: &Binary, a: &[T], b: &[T], out: &mut [T]) {
    math::with_simd(
        #[inline(always)]
        || {
            for (a, b, out) in zip3(chunks(a, RUN), chunks(b, RUN), chunks_mut(out, RUN)) {
                binary(op, a, b, out)
            }
        },
    )
}

/// The eager kernel of a [`defined_binary`] op on two tensors of one float
/// dtype, broadcasting (`None` for another dtype, or two dtypes). The half
/// types run the same functions in their own arithmetic (each operation
/// rounded to the type, as TensorFlow's half kernels).
pub fn binary_zip(name: &'static str, op: &Binary, a: &Tensor, b: &Tensor) -> Option<Result<Tensor>> {
    debug_assert!(defined_binary(op), "{op:?} has no function in the table");
    if a.dtype() != b.dtype() {
        // (the caller's kernel reports the mismatch)
        return None;
    }
    if (a.device_buffer().is_some() || b.device_buffer().is_some()) && a.dtype().is_float() {
        return offload(
            name,
            &[a, b],
            |_| cuda_expr::cuda_binary(name, op, a, b),
            |h| binary_zip(name, op, &h[0], &h[1]).unwrap_or_else(|| Err(unsupported(name, a.dtype(), "f32 or f64"))),
        );
    }
    match a.dtype() {
        DType::F32 => Some(zip_slices::<f32>(name, a, b, |x, y, o| binary_run(op, x, y, o))),
        DType::F64 => Some(zip_slices::<f64>(name, a, b, |x, y, o| binary_run(op, x, y, o))),
        DType::F16 => Some(half_binary::<f16>(name, op, a, b)),
        DType::BF16 => Some(half_binary::<bf16>(name, op, a, b)),
        _ => None,
    }
}

/// `op(a, b)` of two tensors of one float dtype, broadcasting, in the
/// dtype's own arithmetic (each step rounded to `T`); errors name `name`.
pub(super) fn binary_typed<T: Float>(name: &'static str, op: &Binary, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    with_elem_binary!(op, T, |f| zip::<T, T, T>(name, a, b, f))
}

/// [`unary_map`] for an `f32` or `f64` tensor, for a half tensor the ops
/// of `table_half::half_exact_unary` through `f32` blocks, else `other()`
/// (integers, the other half-precision ops done natively, or the op's
/// dtype error).
#[inline]
pub(crate) fn unary_or(
    op: Unary,
    name: &'static str,
    x: &Tensor,
    other: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    unary_map(name, &op, x)
        .or_else(|| super::table_half::half_exact_unary(name, &op, x))
        .unwrap_or_else(other)
}

/// The eager kernel of a [`defined`] op on a float tensor: [`unary_map`],
/// and for the half types the `f32` function rounded back (as TensorFlow's
/// half kernels compute); any other dtype is an error naming `name`.
pub(crate) fn float_unary(op: Unary, name: &'static str, x: &Tensor) -> Result<Tensor> {
    in_f32(op.clone(), name, x, |x| {
        unary_or(op, name, x, || Err(unsupported(name, x.dtype(), "a float dtype")))
    })
}

/// [`binary_zip`] for float tensors, else `other()`.
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
