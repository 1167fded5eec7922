//! Descriptors of the linear-algebra ops beyond `matmul` (which has its own
//! [`Op::MatMul`](super::Op::MatMul)): products built on it, decompositions,
//! solves, `einsum`.

use std::fmt;

use super::Outputs;
use crate::error::Result;
use crate::tensor::Tensor;

/// A linear-algebra op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LinalgOp {}

impl LinalgOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match *self {}
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, _inputs: &[Tensor]) -> Result<Outputs> {
        match *self {}
    }

    pub(crate) fn fmt_attrs(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}
