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
//! - `image/`: image resizing, crops and patches
//! - `random.rs`: seeded random tensors and dropout
//! - `desc/`: the op descriptors a trace records and a graph re-runs
//!
//! Every op passes through [`bind`] (the dispatch layer, `crate::dispatch`):
//! the forward kernel has already run, and `bind` offers the result to the
//! interpreters listening on the thread (a trace, tapes, forward
//! accumulators), with a name, a descriptor ([`desc`]), the VJP rule as a
//! closure built only when one of them asks for it, and, where the op has
//! one, a JVP rule (`input tangents, output -> output tangent`, written
//! with public ops, free to borrow the op's arguments). With nothing
//! listening, the whole cost of `bind` is one thread-local read. Op
//! *attributes* (axes, flags, scalars) are captured by the rule closure
//! rather than passed as data, which is what the tape needs and keeps the
//! untaped path allocation-free. This layer knows no interpreter by name.
//!
//! Rules are written with these same public ops, never raw kernels, so
//! running a rule under another tape records it there: that is what makes
//! gradients of gradients work. Broadcasting is undone in one place,
//! [`Tensor::sum_to_shape`].

pub(crate) mod array;
pub mod desc;
pub(crate) mod device;
mod image;
pub(crate) mod index;
pub(crate) mod linalg;
pub(crate) mod math;
mod nn;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rng_state;
mod signal;
pub(crate) mod sorting;

pub use math::activation::{SELU_ALPHA, SELU_SCALE};
// the old module paths, for the ops outside `math` that use them
pub(crate) use array::strided;
pub use image::ResizeMethod;
pub use linalg::{EinsumPath, MatrixNorm};
pub(crate) use math::binary::{relu_grad, tanh_grad};
use math::{binary, complex};
pub(crate) use nn::causal_band;
pub(crate) use nn::grouped;
pub(crate) use nn::gru_step;
pub(crate) use nn::layer_norm_grad_batched;
pub(crate) use nn::layer_norm_grad_kernel;
pub(crate) use nn::max_pool2d_with_argmax;
pub(crate) use nn::rotary;
pub(crate) use nn::{attention_grad_into, AttentionSpec};
pub(crate) use nn::{conv2d_backprop_filter_from_cols, conv2d_with_cols};
pub(crate) use nn::{sparse_xent_and_softmax, sparse_xent_grad_from_softmax};
pub use nn::{AttentionDropout, DataFormat, HiddenRows, Padding};
pub(crate) use sorting::segment;

pub(crate) use crate::dispatch::{bind, bind_jvp, bind_nondiff};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

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

/// Fails unless `t` is numeric (any dtype but bool).
pub(crate) fn expect_numeric(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype() == DType::Bool {
        Err(unsupported(op, t.dtype(), "a numeric dtype"))
    } else {
        Ok(())
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
