//! The public differentiable operations, one folder per family, each op's
//! forward call beside its VJP rule:
//!
//! - `math/`: elementwise math (arithmetic, unary and special functions,
//!   comparisons, complex numbers)
//! - `reduce/`: reductions over axes and scans along one
//! - `array/`: shapes, views, slicing, joining and constructors
//! - `index/`: gather / scatter by index tensors
//! - `sorting/`: sorting, searching and segment reductions
//! - `linalg/`: matmul, decompositions, solvers, einsum
//! - `nn/`: convolutions, pooling, normalisation, softmax and losses
//! - `signal/`: Fourier transforms
//! - `image/`: image resizing
//! - `random.rs`: seeded random tensors and dropout
//! - `desc/`: the op descriptors a trace records and a graph re-runs
//! - `ct.rs`: cotangent helpers for batched (Jacobian) VJP rules
//!
//! Every op passes through [`bind`]: the forward kernel has already run, and
//! `bind` offers the result to the active tapes, which record it (with its
//! name and its rule) when they watch an input. The rule is built lazily, so
//! an op that no tape records captures nothing; with no tape active the whole
//! cost of `bind` is one thread-local read. `bind` is the one place where
//! later transformations (forward mode, tracing, batching) hook in.
//!
//! Forward mode hooks in there too: while a forward accumulator is active
//! (one more thread-local read otherwise), [`bind_jvp`] gives the op's JVP
//! rule (`input tangents, output -> output tangent`, written with public
//! ops, free to borrow the op's arguments); ops bound with plain [`bind`]
//! get their tangents from their VJP rule (see `autodiff::forward`). The
//! VJP rule is then built once and shared by the tapes and the accumulators.
//!
//! Departure from the design sketch: op *attributes* (axes, flags, scalars)
//! are not passed to `bind` as data but captured by the rule closure, which
//! is what the tape needs and keeps the untaped path allocation-free. A hook
//! that needs to re-run an op can be given a replay closure the same way.
//!
//! Layering: ops sit below `autodiff`, yet `bind` must reach the tape
//! stack. Only the recording half (`autodiff::tape`: the stack and
//! `record`) is used here; the backward algorithm and the user-facing tape
//! stay above, as in TensorFlow, where ops call `record_gradient`.
//!
//! Rules are written with these same public ops, never raw kernels, so
//! running a rule under another tape records it there: that is what makes
//! gradients of gradients work. Broadcasting is undone in one place,
//! [`Tensor::sum_to_shape`].

pub(crate) mod array;
pub mod ct;
pub mod desc;
mod image;
pub(crate) mod index;
pub(crate) mod linalg;
mod math;
mod nn;
pub(crate) mod random;
pub(crate) mod reduce;
mod signal;
pub(crate) mod sorting;

pub use math::activation::{SELU_ALPHA, SELU_SCALE};
// the old module paths, for the ops outside `math` that use them
pub(crate) use array::strided;
use desc::Describe;
pub use image::ResizeMethod;
pub use linalg::{EinsumPath, MatrixNorm};
pub(crate) use math::binary::{relu_grad, tanh_grad};
use math::{binary, complex};
pub(crate) use nn::max_pool2d_with_argmax;
pub(crate) use nn::{conv2d_backprop_filter_from_cols, conv2d_with_cols};
pub use nn::{DataFormat, Padding};
pub(crate) use sorting::segment;

use crate::autodiff::forward;
use crate::autodiff::tape::{self, VjpFn};
use crate::error::{Error, Result};
use crate::function::trace;
use crate::tensor::{DType, Tensor};

/// Offers a single-output op to the active traces, tapes and forward
/// accumulators, and returns its output.
///
/// `op` names the op (tapes record the name) and describes it (a trace
/// records the descriptor, built only then; see [`desc`]). `rule` receives
/// the output and builds the VJP closure; it runs only if some tape records
/// the op or an accumulator needs it (an op without a JVP rule gets its
/// tangents from its VJP rule). A gradient override in force for the name
/// (`with_gradient_override`) replaces the rule.
#[inline]
pub(crate) fn bind(
    op: impl Describe,
    inputs: &[&Tensor],
    output: Tensor,
    rule: impl FnOnce(&Tensor) -> VjpFn,
) -> Tensor {
    bind_impl(op, inputs, output, rule, None)
}

/// [`bind`] for an op with a JVP rule: `jvp(input tangents, output)` gives
/// the output tangent (`None` tangents are zeros; at least one is `Some`).
/// It runs only while a forward accumulator has a tangent for an input, and
/// may borrow the op's arguments.
#[inline]
pub(crate) fn bind_jvp(
    op: impl Describe,
    inputs: &[&Tensor],
    output: Tensor,
    rule: impl FnOnce(&Tensor) -> VjpFn,
    jvp: impl Fn(&[Option<Tensor>], &Tensor) -> Result<Tensor>,
) -> Tensor {
    bind_impl(op, inputs, output, rule, Some(&jvp))
}

/// Offers a non-differentiable op (comparisons, `sign`, `argmax`, ...) to
/// the active traces only: tapes never record it.
#[inline]
pub(crate) fn bind_nondiff(op: impl Describe, inputs: &[&Tensor], output: Tensor) -> Tensor {
    if trace::recording() {
        trace::record(op.describe(), inputs, std::slice::from_ref(&output));
    }
    output
}

#[inline]
fn bind_impl(
    op: impl Describe,
    inputs: &[&Tensor],
    output: Tensor,
    rule: impl FnOnce(&Tensor) -> VjpFn,
    jvp: Option<&forward::JvpRule<'_>>,
) -> Tensor {
    let name = op.name();
    if trace::recording() {
        trace::record(op.describe(), inputs, std::slice::from_ref(&output));
    }
    let rule = |out: &Tensor| crate::autodiff::custom::overridden(name, inputs, out).unwrap_or_else(|| rule(out));
    if forward::any_active() {
        let mut rule = Some(rule);
        let mut make = || (rule.take().expect("built once"))(&output);
        forward::bind_slow(name, inputs, std::slice::from_ref(&output), &mut make, jvp);
    } else if tape::any_active() {
        tape::record(name, inputs, std::slice::from_ref(&output), || rule(&output));
    }
    output
}

/// The tangent of a one-input op's input (always present when its JVP rule runs).
pub(crate) fn only(t: &[Option<Tensor>]) -> Result<&Tensor> {
    t.first()
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::invalid("jvp", "missing input tangent"))
}

/// A tangent, or zeros shaped like `like` (for JVP rules that need both).
pub(crate) fn tangent_or_zero(t: &Option<Tensor>, like: &Tensor) -> Result<Tensor> {
    t.clone().map_or_else(|| like.try_zeros_like(), Ok)
}

/// Sums optional tangent terms; `None` if all are zero.
pub(crate) fn sum_terms(terms: impl IntoIterator<Item = Result<Option<Tensor>>>) -> Result<Tensor> {
    let mut acc: Option<Tensor> = None;
    for t in terms {
        if let Some(t) = t? {
            acc = Some(match acc {
                Some(a) => a.add(&t)?,
                None => t,
            });
        }
    }
    acc.ok_or_else(|| Error::invalid("jvp", "no tangent term"))
}

/// `SmallVec` of input gradients, the return type of every rule.
macro_rules! grads {
    ($($g:expr),* $(,)?) => { smallvec::smallvec![$($g),*] };
}
pub(crate) use grads;
pub(crate) use index::concat_rows;

/// The error for an op given a dtype it does not accept.
pub(crate) fn unsupported(op: &'static str, dtype: DType, expected: &'static str) -> Error {
    Error::UnsupportedDType { op, dtype, expected }
}

/// Fails unless the scalar operand `c` of `op` is exactly representable in
/// `x`'s dtype, when that is an integer (or bool) dtype: a fractional, NaN,
/// infinite or out-of-range scalar would otherwise be truncated or wrapped
/// silently (TensorFlow refuses to convert such a Python number too). Float
/// and complex tensors take any `c`, rounded to their precision.
/// A bool tensor is left to the op (the arithmetic ones reject it with
/// their own error).
pub(crate) fn check_scalar(op: &'static str, x: &Tensor, c: f64) -> Result<()> {
    if x.dtype() == DType::Bool {
        return Ok(());
    }
    check_scalar_for(op, x.dtype(), x.shape(), c)
}

/// [`check_scalar`] for a tensor of `dtype` and `shape` not yet made.
pub(crate) fn check_scalar_for(op: &'static str, dtype: DType, shape: &[usize], c: f64) -> Result<()> {
    // 2^63: i64's range is [-2^63, 2^63)
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    let ok = match dtype {
        DType::I32 => c.fract() == 0.0 && c >= i32::MIN as f64 && c <= i32::MAX as f64,
        DType::I64 => c.fract() == 0.0 && (-I64_END..I64_END).contains(&c),
        DType::Bool => c == 0.0 || c == 1.0,
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!(
                "the scalar {c} is not exactly representable in {dtype} (tensor of shape {shape:?}); use a float dtype for it"
            ),
        ))
    }
}

/// Fails unless `t` is f32 or f64.
pub(crate) fn expect_float(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(unsupported(op, t.dtype(), "f32 or f64"))
    }
}

/// Fails unless `a` and `b` have the same dtype.
pub(crate) fn expect_same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() == b.dtype() {
        Ok(())
    } else {
        Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        })
    }
}
