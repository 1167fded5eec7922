//! The CUDA C of the elementwise table's functions: for every one-input
//! and two-input op that `ops::math::table` defines, a C expression of its
//! operands, in `float` or `double`.
//!
//! The GPU backend makes its elementwise kernels from these strings: one
//! op's kernel is `out[i] = <expr>(in[i])`, and a fused kernel nests the
//! expressions of a chain of ops (or binds each to a local variable), all
//! compiled at run time by NVRTC. The expressions call small functions of
//! [`PRELUDE`] (all named `gt_*`, overloaded for `float` and `double`),
//! which is prepended to every generated source. An op's scalar attributes
//! (`MulScalar`'s `c`, `ClipByValue`'s bounds, ...; [`unary_attrs`]) are
//! never baked into the source: the expression names them `c0`, `c1`
//! (kernel parameters of type `double`, converted to the element type as
//! the table converts them), so that one compiled kernel serves every
//! constant.
//!
//! The expressions follow the table's code: the same branches, the same
//! order of operations, the same NaN, zero and infinity cases, so that
//! wherever the table is exact (arithmetic, rounding, comparisons, the
//! relu family, clipping, `FloorMod`, ...) the GPU gives the same bits.
//! Products go through `gt_mul` (`__fmul_rn`/`__dmul_rn` on the device),
//! which NVRTC never contracts into a fused multiply-add with a following
//! addition, whatever its `--fmad` option. The transcendental functions
//! are CUDA's own (`expf`, `erff`, `tanhf`, ...: within a few ulps of the
//! table's, which for `f32` `exp`, `sin`, `cos`, `tanh`, `sigmoid` and
//! `erf` is itself a vectorised approximation).
//!
//! Checked by the tests here: every op of the table has an expression for
//! both types (and the right attributes); one host program, compiled by the
//! system C++ compiler from [`PRELUDE`] and every expression (the prelude
//! is valid C++ as well as CUDA C++), evaluates them over a grid of inputs
//! (zeros of both signs, halves, the branches' thresholds, huge values,
//! infinities, NaN; zero and negative divisors) and is compared with the
//! table, bit for bit where the table is exact, within 4 ulps for the
//! transcendental functions; and with the `cuda` feature, NVRTC compiles a
//! kernel of every expression (skipped where no NVRTC library is found).
//! The table's kernels on a GPU (`cuda_unary`, `cuda_binary`) launch them.

use crate::error::Result;
use crate::kernels::cuda;
use crate::kernels::gpu::no_kernel;
use crate::ops::desc::{Binary, Unary};
use crate::ops::{SELU_ALPHA, SELU_SCALE};
use crate::tensor::layout::broadcast_shapes;
use crate::tensor::{DType, Tensor};

/// A CUDA C scalar type the expressions compute in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CType {
    /// `float` (`f32`)
    F32,
    /// `double` (`f64`)
    F64,
}

impl CType {
    /// The C name of the type: `float` or `double`.
    pub fn name(self) -> &'static str {
        match self {
            CType::F32 => "float",
            CType::F64 => "double",
        }
    }
}

/// Device (and host) functions the expressions call, all named `gt_*`,
/// for `float` and `double`: valid as CUDA C++ compiled by NVRTC (which
/// has the CUDA math functions built in: no system header is included) and
/// as host C++ (there `<math.h>` is included and `__device__` and
/// `__forceinline__` are defined away), so that the host can check them.
pub const PRELUDE: &str = r#"// gradtape: the elementwise table's functions (cuda_expr::PRELUDE)
#ifndef __CUDACC__
#include <cmath>
#include <math.h>
#define __device__
#define __forceinline__ inline
#endif
#define GT_FN __device__ __forceinline__

// the math functions, one name for both types
#define GT_MATH1(name, f32, f64) \
    GT_FN float gt_##name(float x) { return f32(x); } \
    GT_FN double gt_##name(double x) { return f64(x); }
#define GT_MATH2(name, f32, f64) \
    GT_FN float gt_##name(float x, float y) { return f32(x, y); } \
    GT_FN double gt_##name(double x, double y) { return f64(x, y); }
GT_MATH1(abs, fabsf, fabs)
GT_MATH1(sqrt, sqrtf, sqrt)
GT_MATH1(exp, expf, exp)
GT_MATH1(expm1, expm1f, expm1)
GT_MATH1(log, logf, log)
GT_MATH1(log1p, log1pf, log1p)
GT_MATH1(sin, sinf, sin)
GT_MATH1(cos, cosf, cos)
GT_MATH1(tan, tanf, tan)
GT_MATH1(asin, asinf, asin)
GT_MATH1(acos, acosf, acos)
GT_MATH1(atan, atanf, atan)
GT_MATH1(sinh, sinhf, sinh)
GT_MATH1(cosh, coshf, cosh)
GT_MATH1(tanh, tanhf, tanh)
GT_MATH1(asinh, asinhf, asinh)
GT_MATH1(acosh, acoshf, acosh)
GT_MATH1(atanh, atanhf, atanh)
GT_MATH1(erf, erff, erf)
GT_MATH1(erfc, erfcf, erfc)
GT_MATH1(floor, floorf, floor)
GT_MATH1(ceil, ceilf, ceil)
GT_MATH1(rint, rintf, rint)
GT_MATH2(pow, powf, pow)
GT_MATH2(atan2, atan2f, atan2)
GT_MATH2(fmod, fmodf, fmod)
#undef GT_MATH1
#undef GT_MATH2

// a product rounded on its own, never contracted into a multiply-add
#ifdef __CUDACC__
GT_FN float gt_mul(float x, float y) { return __fmul_rn(x, y); }
GT_FN double gt_mul(double x, double y) { return __dmul_rn(x, y); }
#else
GT_FN float gt_mul(float x, float y) { return x * y; }
GT_FN double gt_mul(double x, double y) { return x * y; }
#endif

// the table's functions of more than one step (each operand used once)
template <typename T> GT_FN T gt_square(T x) { return gt_mul(x, x); }
template <typename T> GT_FN T gt_rsqrt(T x) { return T(1) / gt_sqrt(x); }
template <typename T> GT_FN T gt_sign(T x) {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : (x == T(0) ? T(0) : x));
}
template <typename T> GT_FN T gt_relu(T x) { return x < T(0) ? T(0) : x; }
template <typename T> GT_FN T gt_relu6(T x) {
    return x <= T(0) ? T(0) : (x >= T(6) ? T(6) : x);
}
template <typename T> GT_FN T gt_leaky_relu(T x, T a) { return x > T(0) ? x : gt_mul(x, a); }
template <typename T> GT_FN T gt_elu(T x) { return x > T(0) ? x : gt_expm1(x); }
template <typename T> GT_FN T gt_selu(T x, T s, T sa) {
    return x > T(0) ? gt_mul(s, x) : gt_mul(sa, gt_expm1(x));
}
// max(x, 0) + ln(1 + e^-|x|), without overflow
template <typename T> GT_FN T gt_softplus(T x) {
    return x > T(0) ? x + gt_log1p(gt_exp(-x)) : gt_log1p(gt_exp(x));
}
template <typename T> GT_FN T gt_softsign(T x) { return x / (gt_abs(x) + T(1)); }
// the exact GELU and its derivative (c = 1/sqrt(2 pi)), with erfc (1 +
// erf(x/sqrt 2) cancels for negative x)
template <typename T> GT_FN T gt_gelu(T x, T h, T r) { return gt_mul(gt_mul(h, x), gt_erfc(-gt_mul(x, r))); }
template <typename T> GT_FN T gt_gelu_grad(T x, T h, T r, T c) {
    return gt_mul(h, gt_erfc(-gt_mul(x, r))) + gt_mul(gt_mul(x, c), gt_exp(-gt_mul(gt_mul(h, x), x)));
}
// 1 / (1 + e^-x) from e = e^-|x| (never overflowing)
template <typename T> GT_FN T gt_sigmoid(T x) {
    T e = gt_exp(-gt_abs(x));
    T d = T(1) + e;
    return x >= T(0) ? T(1) / d : (x < T(0) ? e / d : x);
}
// SiLU and its derivative, as the table writes them: x * sigmoid(x) and
// s + x s sigmoid(-x) (never overflowing where x is finite)
template <typename T> GT_FN T gt_silu(T x) { return gt_mul(x, gt_sigmoid(x)); }
template <typename T> GT_FN T gt_silu_grad(T x) {
    return gt_sigmoid(x) + gt_mul(gt_mul(x, gt_sigmoid(x)), gt_sigmoid(-x));
}
// Mish and its derivative, as the table writes them: x * n / (n + 2) with
// n = e^x (e^x + 2) (x beyond 20), and t + x s u (1 + t) with t = n / (n +
// 2), u = 2 / (n + 2) (e^x capped at x = 40, u = 0 beyond)
template <typename T> GT_FN T gt_mish(T x) {
    if (x > T(20)) return x;
    T e = gt_exp(x);
    T n = gt_mul(e, e + T(2));
    return gt_mul(x, n / (n + T(2)));
}
template <typename T> GT_FN T gt_mish_grad(T x) {
    T e = gt_exp(x > T(40) ? T(40) : x);
    T n = gt_mul(e, e + T(2));
    T t = n / (n + T(2));
    T u = x > T(40) ? T(0) : T(2) / (n + T(2));
    return t + gt_mul(gt_mul(gt_mul(x, gt_sigmoid(x)), u), T(1) + t);
}
// x - tanh x, below |x| = 0.3 its series x^3 P(x^2) (the table's
// TANH_SHRINK_SERIES and TANH_SHRINK_SMALL, kernels/cpu/math.rs)
template <typename T> GT_FN T gt_tanh_shrink(T x) {
    if (!(gt_abs(x) < T(0.3))) return x - gt_tanh(x);
    const double c[12] = {0.3333333333333333, -0.13333333333333333, 0.05396825396825397,
                          -0.021869488536155203, 0.008863235529902197, -0.003592128036572481,
                          0.0014558343870513183, -0.000590027440945586, 0.00023912911424355248,
                          -9.691537956929451e-05, 3.927832388331683e-05, -1.5918905069328964e-05};
    T z = gt_mul(x, x);
    T p = T(c[11]);
    for (int k = 10; k >= 0; --k) p = gt_mul(p, z) + T(c[k]);
    return gt_mul(gt_mul(x, z), p);
}
// GELU's tanh form and its derivative (h = 1/2, c = sqrt(2/pi), a =
// 0.044715, a3 = 3a), as the table writes them: x * sigmoid(2u) and
// s + 2x s sigmoid(-2u) u' (x clamped to +-30 in the derivative, where it
// is exactly 1 or 0: GELU_TANH_SATURATED; NaN at +-inf)
template <typename T> GT_FN T gt_gelu_tanh(T x, T h, T c, T a) {
    return gt_mul(x, gt_sigmoid(gt_mul(T(2), gt_mul(c, x + gt_mul(a, gt_mul(gt_mul(x, x), x))))));
}
template <typename T> GT_FN T gt_gelu_tanh_grad(T x, T h, T c, T a, T a3) {
    x = (x > T(30) ? T(30) : (x < T(-30) ? T(-30) : x)) + (x - x);
    T u2 = gt_mul(T(2), gt_mul(c, x + gt_mul(a, gt_mul(gt_mul(x, x), x))));
    T s = gt_sigmoid(u2);
    return s + gt_mul(gt_mul(gt_mul(gt_mul(gt_mul(T(2), x), s), gt_sigmoid(-u2)), c), T(1) + gt_mul(a3, gt_mul(x, x)));
}
template <typename T> GT_FN T gt_clip(T x, T lo, T hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}
// NaN in x propagates (in y only where x is not NaN and compares false)
template <typename T> GT_FN T gt_maximum(T x, T y) { return (x >= y || x != x) ? x : y; }
template <typename T> GT_FN T gt_minimum(T x, T y) { return (x <= y || x != x) ? x : y; }
template <typename T> GT_FN T gt_squared_difference(T x, T y) {
    T d = x - y;
    return gt_mul(d, d);
}
// the remainder with the divisor's sign
template <typename T> GT_FN T gt_floor_mod(T x, T y) {
    T r = gt_fmod(x, y);
    return (r != T(0) && ((r < T(0)) != (y < T(0)))) ? r + y : r;
}
// relu's gradient: g [x > 0], a product (NaN for an infinite g where x <= 0)
template <typename T> GT_FN T gt_relu_grad(T g, T x) { return gt_mul(g, x > T(0) ? T(1) : T(0)); }
// tanh's gradient: g (1 - y^2)
template <typename T> GT_FN T gt_tanh_grad(T y, T g) { return gt_mul(g, T(1) - gt_mul(y, y)); }
"#;

/// The op's attributes, in the order its expression names them (`c0`,
/// `c1`): kernel parameters of type `double`, never baked into the source.
pub fn unary_attrs(op: &Unary) -> Vec<f64> {
    match op {
        Unary::LeakyRelu(a) => vec![a.0],
        Unary::ClipByValue(lo, hi) => vec![lo.0, hi.0],
        Unary::PowScalar(c) | Unary::MulScalar(c) | Unary::DivScalar(c) | Unary::AddScalar(c) => vec![c.0],
        _ => Vec::new(),
    }
}

/// A `double` constant as a C literal of type `ty` (the shortest decimal
/// that reads back as `v`, converted as `T::from_f64` converts it).
fn literal(ty: CType, v: f64) -> String {
    debug_assert!(v.is_finite());
    let d = format!("{v:?}");
    match ty {
        CType::F32 => format!("((float){d})"),
        CType::F64 => format!("({d})"),
    }
}

/// The attribute named `name` (a `double`) converted to `ty`, as
/// `T::from_f64` (round to nearest for `float`).
fn attr(ty: CType, name: &str) -> String {
    match ty {
        CType::F32 => format!("((float)({name}))"),
        CType::F64 => format!("({name})"),
    }
}

/// C expression of `op` applied to the C expression `x` (of type `ty`),
/// with value type `ty`, its attributes referenced as `c0`, `c1` (doubles:
/// [`unary_attrs`]). `None` for an op with no real function in the table
/// (the complex-only ops and `LogicalNot`; see [`logical_not_expr`]).
pub fn unary_expr(op: &Unary, ty: CType, x: &str) -> Option<String> {
    unary_expr_with(op, ty, x, &["c0", "c1"])
}

/// [`unary_expr`] with the attributes named `attrs[0]`, `attrs[1]` (as a
/// fused kernel names the attributes of each of its ops).
///
/// # Panics
/// If `attrs` is shorter than the op's [`unary_attrs`].
pub fn unary_expr_with(op: &Unary, ty: CType, x: &str, attrs: &[&str]) -> Option<String> {
    let one = match ty {
        CType::F32 => "1.0f",
        CType::F64 => "1.0",
    };
    let c = |i: usize| attr(ty, attrs[i]);
    let call = |f: &str| format!("gt_{f}(({x}))");
    Some(match op {
        Unary::Neg => format!("(-({x}))"),
        Unary::Abs => call("abs"),
        Unary::Sign => call("sign"),
        Unary::Square => call("square"),
        Unary::Sqrt => call("sqrt"),
        Unary::Rsqrt => call("rsqrt"),
        Unary::Reciprocal => format!("({one} / ({x}))"),
        Unary::Exp => call("exp"),
        Unary::Expm1 => call("expm1"),
        Unary::Log => call("log"),
        Unary::Log1p => call("log1p"),
        Unary::Sin => call("sin"),
        Unary::Cos => call("cos"),
        Unary::Tan => call("tan"),
        Unary::Asin => call("asin"),
        Unary::Acos => call("acos"),
        Unary::Atan => call("atan"),
        Unary::Sinh => call("sinh"),
        Unary::Cosh => call("cosh"),
        Unary::Tanh => call("tanh"),
        Unary::Asinh => call("asinh"),
        Unary::Acosh => call("acosh"),
        Unary::Atanh => call("atanh"),
        Unary::Erf => call("erf"),
        Unary::Erfc => call("erfc"),
        Unary::Floor => call("floor"),
        Unary::Ceil => call("ceil"),
        // half to even (in the default rounding mode)
        Unary::Round => call("rint"),
        Unary::Sigmoid => call("sigmoid"),
        Unary::Relu => call("relu"),
        Unary::Relu6 => call("relu6"),
        Unary::LeakyRelu(_) => format!("gt_leaky_relu(({x}), {})", c(0)),
        Unary::Elu => call("elu"),
        Unary::Selu => format!(
            "gt_selu(({x}), {}, {})",
            literal(ty, SELU_SCALE),
            literal(ty, SELU_SCALE * SELU_ALPHA)
        ),
        Unary::Softplus => call("softplus"),
        Unary::Softsign => call("softsign"),
        Unary::Gelu => format!(
            "gt_gelu(({x}), {}, {})",
            literal(ty, 0.5),
            literal(ty, std::f64::consts::FRAC_1_SQRT_2)
        ),
        Unary::GeluGrad => format!(
            "gt_gelu_grad(({x}), {}, {}, {})",
            literal(ty, 0.5),
            literal(ty, std::f64::consts::FRAC_1_SQRT_2),
            literal(
                ty,
                0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2
            )
        ),
        Unary::GeluTanh | Unary::GeluTanhGrad => {
            let [h, gc, a] = crate::kernels::cpu::math::GELU_TANH.map(|v| literal(ty, v));
            match op {
                Unary::GeluTanh => format!("gt_gelu_tanh(({x}), {h}, {gc}, {a})"),
                _ => format!(
                    "gt_gelu_tanh_grad(({x}), {h}, {gc}, {a}, {})",
                    literal(ty, 3.0 * crate::kernels::cpu::math::GELU_TANH[2])
                ),
            }
        }
        Unary::Silu => call("silu"),
        Unary::SiluGrad => call("silu_grad"),
        Unary::Mish => call("mish"),
        Unary::MishGrad => call("mish_grad"),
        Unary::TanhShrink => call("tanh_shrink"),
        Unary::ClipByValue(..) => format!("gt_clip(({x}), {}, {})", c(0), c(1)),
        Unary::PowScalar(_) => format!("gt_pow(({x}), {})", c(0)),
        Unary::MulScalar(_) => format!("gt_mul(({x}), {})", c(0)),
        Unary::DivScalar(_) => format!("(({x}) / {})", c(0)),
        Unary::AddScalar(_) => format!("(({x}) + {})", c(0)),
        Unary::ComplexAbs
        | Unary::Real
        | Unary::Imag
        | Unary::Conj
        | Unary::Angle
        | Unary::LogicalNot
        | Unary::Invert => {
            return None;
        }
    })
}

/// C expression of a two-input op on the C expressions `a`, `b` (of type
/// `ty`): of value type `ty` for the table's arithmetic ops
/// (`table::defined_binary`), `bool` for the comparisons (IEEE: NaN
/// compares false, except in `NotEqual`). `None` for the logical ops
/// (bool operands: [`logical_expr`]) and `Complex`.
pub fn binary_expr(op: &Binary, ty: CType, a: &str, b: &str) -> Option<String> {
    let _ = ty; // (every expression here is generic over the type)
    let call = |f: &str| format!("gt_{f}(({a}), ({b}))");
    let infix = |o: &str| format!("(({a}) {o} ({b}))");
    Some(match op {
        Binary::Add => infix("+"),
        Binary::Sub => infix("-"),
        Binary::Mul => call("mul"),
        Binary::Div => infix("/"),
        Binary::Pow => call("pow"),
        Binary::Maximum => call("maximum"),
        Binary::Minimum => call("minimum"),
        Binary::SquaredDifference => call("squared_difference"),
        Binary::Atan2 => call("atan2"),
        Binary::FloorDiv => format!("gt_floor(({a}) / ({b}))"),
        Binary::FloorMod => call("floor_mod"),
        Binary::ReluGrad => call("relu_grad"),
        Binary::TanhGrad => call("tanh_grad"),
        Binary::Equal => infix("=="),
        Binary::NotEqual => infix("!="),
        Binary::Less => infix("<"),
        Binary::LessEqual => infix("<="),
        Binary::Greater => infix(">"),
        Binary::GreaterEqual => infix(">="),
        Binary::LogicalAnd
        | Binary::LogicalOr
        | Binary::LogicalXor
        | Binary::Complex
        | Binary::BitwiseAnd
        | Binary::BitwiseOr
        | Binary::BitwiseXor
        | Binary::LeftShift
        | Binary::RightShift => return None,
    })
}

/// Whether `op`'s [`binary_expr`] is of type `bool` (the comparisons).
pub fn is_comparison(op: &Binary) -> bool {
    matches!(
        op,
        Binary::Equal | Binary::NotEqual | Binary::Less | Binary::LessEqual | Binary::Greater | Binary::GreaterEqual
    )
}

/// C expression of a logical op on the `bool` expressions `a`, `b` (of
/// type `bool`); `None` for any other op.
pub fn logical_expr(op: &Binary, a: &str, b: &str) -> Option<String> {
    let infix = |o: &str| format!("(({a}) {o} ({b}))");
    match op {
        Binary::LogicalAnd => Some(infix("&&")),
        Binary::LogicalOr => Some(infix("||")),
        Binary::LogicalXor => Some(infix("!=")),
        _ => None,
    }
}

/// C expression of `LogicalNot` on the `bool` expression `x`.
pub fn logical_not_expr(x: &str) -> String {
    format!("(!({x}))")
}

/// The C type the CUDA kernels of a float dtype compute in: `double` for
/// `f64`, else `float` (the half types round each result once from it:
/// at most an ulp from the host's half arithmetic, for the functions of
/// several steps).
fn compute_type(dtype: DType) -> CType {
    if dtype == DType::F64 {
        CType::F64
    } else {
        CType::F32
    }
}

/// The CUDA kernel of a float one-input op of the table.
pub(super) fn cuda_unary(name: &'static str, op: &Unary, x: &Tensor) -> Result<Tensor> {
    let expr = unary_expr(op, compute_type(x.dtype()), "v").ok_or_else(|| no_kernel(name, x.device(), x.dtype()))?;
    let attrs = unary_attrs(op);
    let at = |i: usize| attrs.get(i).copied().unwrap_or(0.0);
    cuda::unary(name, x, PRELUDE, &expr, [at(0), at(1)])
}

/// The CUDA kernel of a float two-input op of the table, broadcasting.
pub(super) fn cuda_binary(name: &'static str, op: &Binary, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let shape = broadcast_shapes(name, a.shape(), b.shape())?;
    let expr =
        binary_expr(op, compute_type(a.dtype()), "a", "b").ok_or_else(|| no_kernel(name, a.device(), a.dtype()))?;
    cuda::binary(name, a, b, &shape, PRELUDE, &expr, a.dtype())
}
