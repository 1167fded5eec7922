//! Which `f16` and `bf16` ops join a fused group (see `kernel::half`):
//! those whose eager half kernel computes the op's `f32` function of the
//! operands' `f32` values and rounds the result once to the half type, so
//! that a program computing in `f32` and rounding after every op gives
//! the eager bits.
//!
//! The one-input ops computed through `f32` blocks (`table::in_f32`,
//! `table::float_unary`), `relu`, and `-x`, `|x|`, `x²`, `x·c`, `x / c`,
//! `x + c` (whose half arithmetic is one `f32` operation, the constant
//! first rounded to the half type: `table_half::half_exact_unary`, whose
//! rounding [`unary`] repeats); the two-input ops of one `f32` operation
//! (`table_half::half_in_one_step`). Not: `leaky_relu`, `clip_by_value`,
//! `pow_scalar`, and the two-input ops computed in half steps
//! (`squared_difference`, `tanh_grad`, `pow`, `atan2`, `floor_div`,
//! `floor_mod`), whose eager kernels round between their steps. The test
//! `half_fusion` compares every op here, traced and fused, with its eager
//! op on every f16 and bf16 value.

use crate::ops::desc::{Binary, Unary, F64};
use crate::tensor::{bf16, f16, DType};

/// The op a member of a half group of `dtype` computes for the node's op
/// `op` (its scalar constant rounded to the half type, as the eager half
/// kernel rounds it), or `None` where the op does not join half groups.
pub(super) fn unary(op: &Unary, dtype: DType) -> Option<Unary> {
    use Unary::*;
    let rounded = |c: &F64| {
        F64(match dtype {
            DType::F16 => f16::from_f64(c.0).to_f64(),
            _ => bf16::from_f64(c.0).to_f64(),
        })
    };
    Some(match op {
        MulScalar(c) => MulScalar(rounded(c)),
        DivScalar(c) => DivScalar(rounded(c)),
        AddScalar(c) => AddScalar(rounded(c)),
        Neg | Abs | Square | Relu | Sign | Sqrt | Rsqrt | Reciprocal | Exp | Expm1 | Log | Log1p | Sin | Cos | Tan
        | Asin | Acos | Atan | Sinh | Cosh | Tanh | Asinh | Acosh | Atanh | Erf | Erfc | Gelu | GeluGrad | GeluTanh
        | GeluTanhGrad | Silu | SiluGrad | Mish | MishGrad | TanhShrink | Floor | Ceil | Round | Sigmoid | Relu6
        | Elu | Selu | Softplus | Softsign => op.clone(),
        _ => return None,
    })
}

/// Whether the two-input `op` joins half groups.
pub(super) fn binary(op: &Binary) -> bool {
    matches!(
        op,
        Binary::Add | Binary::Sub | Binary::Mul | Binary::Div | Binary::Maximum | Binary::Minimum | Binary::ReluGrad
    )
}
