//! Descriptor of the decompositions with several outputs (each output is
//! its own node, which recomputes the decomposition and picks its part)
//! and of the matrix exponential and the pseudo-inverse; see
//! `ops/spectral.rs` and `ops/linalg/lstsq.rs`.

use std::fmt;

use super::Outputs;
use crate::error::Result;
use crate::tensor::Tensor;

/// A decomposition's output, or the matrix exponential.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecompOp {
    /// `eigh`: 0 the eigenvalues, 1 the eigenvectors.
    Eigh(u8),
    /// `svd`: 0 `s`, 1 `U`, 2 `V`.
    Svd(u8),
    /// `qr`: 0 `Q`, 1 `R`.
    Qr(u8),
    /// `lu`: 0 `L`, 1 `U`, 2 the permutation.
    Lu(u8),
    /// `matrix_exp`.
    MatrixExp,
    /// `pinv`, with its `rcond` (the bits of the `f64`), if given.
    Pinv(Option<u64>),
}

impl DecompOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            DecompOp::Eigh(_) => "SelfAdjointEigV2",
            DecompOp::Svd(_) => "Svd",
            DecompOp::Qr(_) => "Qr",
            DecompOp::Lu(_) => "Lu",
            DecompOp::MatrixExp => "MatrixExponential",
            DecompOp::Pinv(_) => "Pinv",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let a = super::one_input(self.name(), inputs)?;
        let pick3 = |(x, y, z): (Tensor, Tensor, Tensor), k: u8| match k {
            0 => x,
            1 => y,
            _ => z,
        };
        let y = match *self {
            DecompOp::Eigh(k) => {
                let (e, v) = a.eigh()?;
                if k == 0 {
                    e
                } else {
                    v
                }
            }
            DecompOp::Svd(k) => pick3(a.svd()?, k),
            DecompOp::Qr(k) => {
                let (q, r) = a.qr()?;
                if k == 0 {
                    q
                } else {
                    r
                }
            }
            DecompOp::Lu(k) => pick3(a.lu()?, k),
            DecompOp::MatrixExp => a.matrix_exp()?,
            DecompOp::Pinv(rcond) => a.pinv(rcond.map(f64::from_bits))?,
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecompOp::Eigh(k) | DecompOp::Svd(k) | DecompOp::Qr(k) | DecompOp::Lu(k) => write!(f, "[output={k}]"),
            DecompOp::MatrixExp | DecompOp::Pinv(None) => Ok(()),
            DecompOp::Pinv(Some(r)) => write!(f, "[rcond={}]", f64::from_bits(*r)),
        }
    }
}
