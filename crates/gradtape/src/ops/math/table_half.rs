//! The elementwise table's functions on half-precision tensors: computed
//! in `f32` over blocks of converted halves and rounded once
//! ([`half_block`]), as TensorFlow's half kernels compute; the two-input
//! functions that round between their steps in half arithmetic keep their
//! own kernels ([`binary_typed`]).

use super::table::{binary_run, binary_typed, unary_run};
use crate::error::Result;
use crate::kernels::cpu::elementwise::{map_slices, zip_slices};
use crate::kernels::cpu::half_block::{self, Half};
use crate::ops::desc::{Binary, Unary};
use crate::tensor::{bf16, f16, DType, Tensor};

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
