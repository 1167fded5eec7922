//! The elementwise table's functions on half-precision tensors: computed
//! in `f32` over blocks of converted halves and rounded once
//! ([`half_block`]), as TensorFlow's half kernels compute; the two-input
//! functions that round between their steps in half arithmetic keep their
//! own kernels ([`binary_typed`]).

use super::table::{binary_run, binary_typed, unary_run};
use crate::error::Result;
use crate::kernels::cpu::elementwise::{map_slices, zip_slices};
use crate::kernels::cpu::half_block::{self, Half};
use crate::ops::desc::{Binary, Unary, F64};
use crate::tensor::{bf16, f16, DType, Element, Tensor};

/// `kernel(x)` where `x` is not a half tensor on the host; for a host
/// f16/bf16 `x`, `op`'s `f32` function of the `f32` value of each element,
/// rounded once to `x`'s dtype, as TensorFlow's half kernels compute most
/// functions (a function computed in half steps rounds at every step and
/// is up to an ulp off the rounded `f32` value): one pass over blocks of
/// `x` ([`half_block`]), no `f32` tensors. Errors name `name`. A tensor on
/// a GPU goes to `kernel` as it is: the GPU's kernels compute the half
/// types in `f32` themselves (or answer that they have no half kernel).
pub(crate) fn in_f32(
    op: Unary,
    name: &'static str,
    x: &Tensor,
    kernel: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    half_unary(name, &op, x).unwrap_or_else(|| kernel(x))
}

/// [`in_f32`]'s kernel of a host half tensor (`None` for another dtype or a
/// tensor on a device): also the eager half kernel of `Relu`, whose half
/// values the `f32` function gives exactly.
pub(crate) fn half_unary(name: &'static str, op: &Unary, x: &Tensor) -> Option<Result<Tensor>> {
    fn typed<H: Half>(name: &'static str, op: &Unary, x: &Tensor) -> Result<Tensor> {
        map_slices::<H>(name, x, |s, o| half_block::unary(s, o, |s, o| unary_run(op, s, o)))
    }
    match x.dtype() {
        _ if x.device_buffer().is_some() => None,
        DType::F16 => Some(typed::<f16>(name, op, x)),
        DType::BF16 => Some(typed::<bf16>(name, op, x)),
        _ => None,
    }
}

/// The eager kernel of a host half tensor `x` (`None` for another dtype, a
/// tensor on a device, or another op) for the one-input ops whose half
/// arithmetic is one `f32` operation on operands exact in `f32`, so that
/// the `f32` function over blocks of converted halves, rounded once, gives
/// its bits: `-x`, `|x|`, `x·x`, and `x + c`, `x·c`, `x / c` with the
/// constant first rounded to the half type (as the half kernels round it,
/// through `f32`). These had run the half crate's scalar arithmetic per
/// element (an `f16` `mul_scalar` of 131,072 elements took 450 µs, 40x its
/// `f32` kernel).
pub(crate) fn half_exact_unary(name: &'static str, op: &Unary, x: &Tensor) -> Option<Result<Tensor>> {
    if !x.dtype().is_half() {
        return None;
    }
    fn rounded<H: Element>(c: &F64) -> F64 {
        F64(H::from_f64(c.0).to_f64())
    }
    let c = |c: &F64| match x.dtype() {
        DType::F16 => rounded::<f16>(c),
        _ => rounded::<bf16>(c),
    };
    let op = match op {
        Unary::Neg | Unary::Abs | Unary::Square => op.clone(),
        Unary::MulScalar(k) => Unary::MulScalar(c(k)),
        Unary::DivScalar(k) => Unary::DivScalar(c(k)),
        Unary::AddScalar(k) => Unary::AddScalar(c(k)),
        _ => return None,
    };
    half_unary(name, &op, x)
}

/// Whether the half types' own arithmetic of the two-input `op` (each
/// operation done in `f32` and rounded, as the `half` crate's) is one
/// `f32` operation or a choice of an operand: then the `f32` function over
/// blocks of converted halves, rounded once ([`half_block::binary`]), gives
/// the same bits. (`SquaredDifference`, `TanhGrad`, `FloorMod`, ... round
/// between their steps in half arithmetic, and keep their own kernels.)
fn half_in_one_step(op: &Binary) -> bool {
    matches!(
        op,
        Binary::Add | Binary::Sub | Binary::Mul | Binary::Div | Binary::Maximum | Binary::Minimum | Binary::ReluGrad
    )
}

/// The eager kernel of the two-input `op` on two host tensors of the half
/// type `H`, broadcasting: [`half_in_one_step`] ops in `f32` over blocks
/// of converted halves, rounded once (the same bits as `H`'s arithmetic),
/// the others in `H`'s arithmetic. Errors name `name`.
pub(super) fn half_binary<H: Half>(name: &'static str, op: &Binary, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if !half_in_one_step(op) {
        return binary_typed::<H>(name, op, a, b);
    }
    zip_slices::<H>(name, a, b, |x, y, o| {
        half_block::binary(x, y, o, |x, y, o| binary_run(op, x, y, o))
    })
}
