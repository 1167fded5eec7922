//! The public differentiable operations, one file per family, each op's
//! forward call beside its VJP rule.
//!
//! Every op passes through [`bind`]: the forward kernel has already run, and
//! `bind` offers the result to the active tapes, which record it (with its
//! name and its rule) when they watch an input. The rule is built lazily, so
//! an op that no tape records captures nothing; with no tape active the whole
//! cost of `bind` is one thread-local read. `bind` is the one place where
//! later transformations (forward mode, tracing, batching) hook in.
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

mod binary;
pub mod ct;
mod index;
mod linalg;
mod nn;
mod norm;
mod random;
mod reduce;
mod shape;
mod slice;
mod sugar;
mod unary;

use crate::autodiff::tape::{self, VjpFn};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Offers a single-output op to the active tapes and returns its output.
///
/// `rule` receives the output and builds the VJP closure; it runs only if
/// some tape records the op.
#[inline]
pub(crate) fn bind(
    name: &'static str,
    inputs: &[&Tensor],
    output: Tensor,
    rule: impl FnOnce(&Tensor) -> VjpFn,
) -> Tensor {
    if tape::any_active() {
        tape::record(name, inputs, std::slice::from_ref(&output), || rule(&output));
    }
    output
}

/// `SmallVec` of input gradients, the return type of every rule.
macro_rules! grads {
    ($($g:expr),* $(,)?) => { smallvec::smallvec![$($g),*] };
}
pub(crate) use grads;

/// The error for an op given a dtype it does not accept.
pub(crate) fn unsupported(op: &'static str, dtype: DType, expected: &'static str) -> Error {
    Error::UnsupportedDType { op, dtype, expected }
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
