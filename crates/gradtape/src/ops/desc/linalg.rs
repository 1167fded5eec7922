//! Descriptors of the linear-algebra ops beyond `matmul` (which has its own
//! [`Op::MatMul`](super::Op::MatMul)): decompositions, solves, determinants,
//! the diagonal view.
//!
//! The products built on matmul (`matvec`, `outer`, `tensordot`, `einsum`),
//! `diag`, `trace` and `band_part` are compositions of other ops and have no
//! descriptor of their own.

use std::fmt;

use super::Outputs;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A linear-algebra op. Inputs are listed in the order the op's node reads
/// them; batch dims of two-input ops are already broadcast when traced.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LinalgOp {
    /// `cholesky(a)`: the lower factor.
    Cholesky,
    /// `triangular_solve(a, b, lower, adjoint)`.
    TriangularSolve {
        /// The lower triangle of `a` is used (else the upper).
        lower: bool,
        /// `op(a)` is the transpose.
        adjoint: bool,
    },
    /// `solve_with(a, b, adjoint)`.
    Solve {
        /// `op(a)` is the transpose.
        adjoint: bool,
    },
    /// `inverse(a)`.
    Inverse,
    /// `det(a)`.
    Det,
    /// `log|det a|`, the differentiable half of `slogdet(a)`.
    LogAbsDet,
    /// The sign of `det a`, the other half of `slogdet(a)` (not
    /// differentiable).
    DetSign,
    /// `diag_part(a)`: the main diagonal of each matrix.
    DiagPart,
}

impl LinalgOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            LinalgOp::Cholesky => "Cholesky",
            LinalgOp::TriangularSolve { .. } => "MatrixTriangularSolve",
            LinalgOp::Solve { .. } => "MatrixSolve",
            LinalgOp::Inverse => "MatrixInverse",
            LinalgOp::Det => "MatrixDeterminant",
            LinalgOp::LogAbsDet => "LogMatrixDeterminant",
            LinalgOp::DetSign => "LogMatrixDeterminantSign",
            LinalgOp::DiagPart => "MatrixDiagPart",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let y = match (self, inputs) {
            (LinalgOp::Cholesky, [a]) => a.cholesky()?,
            (LinalgOp::TriangularSolve { lower, adjoint }, [a, b]) => a.triangular_solve(b, *lower, *adjoint)?,
            (LinalgOp::Solve { adjoint }, [a, b]) => a.solve_with(b, *adjoint)?,
            (LinalgOp::Inverse, [a]) => a.inverse()?,
            (LinalgOp::Det, [a]) => a.det()?,
            (LinalgOp::LogAbsDet, [a]) => a.slogdet()?.1,
            (LinalgOp::DetSign, [a]) => a.slogdet()?.0,
            (LinalgOp::DiagPart, [a]) => a.diag_part()?,
            _ => {
                return Err(Error::invalid(
                    self.name(),
                    format!("got {} inputs, which is not this op's arity", inputs.len()),
                ))
            }
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinalgOp::TriangularSolve { lower, adjoint } => write!(f, "[lower={lower}, adjoint={adjoint}]"),
            LinalgOp::Solve { adjoint } => write!(f, "[adjoint={adjoint}]"),
            LinalgOp::Cholesky
            | LinalgOp::Inverse
            | LinalgOp::Det
            | LinalgOp::LogAbsDet
            | LinalgOp::DetSign
            | LinalgOp::DiagPart => Ok(()),
        }
    }
}
