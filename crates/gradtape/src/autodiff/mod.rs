//! Automatic differentiation: the tape stack, `GradientTape`, backprop,
//! variables and the gradient checker.

pub(crate) mod backprop;
pub mod check;
pub(crate) mod custom;
pub(crate) mod forward;
pub(crate) mod forward_helpers;
pub(crate) mod functional;
pub(crate) mod gradient;
pub(crate) mod gradient_tape;
mod guarded;
pub(crate) mod jacobian;
pub(crate) mod recompute;
pub(crate) mod sources;
#[allow(missing_docs)] // `pub` items only for the tests (`__internals`), not API
pub(crate) mod tape;
pub(crate) mod variable;
