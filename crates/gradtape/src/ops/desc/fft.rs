//! Descriptor of the complex Fourier transforms (the real ones are
//! compositions of them; see `ops/signal/fft.rs`).

use std::fmt;

use super::Outputs;
use crate::error::Result;
use crate::tensor::Tensor;

/// A complex DFT (or its `1/N`-scaled inverse) over the last `rank` axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FftOp {
    /// How many trailing axes are transformed (1 or 2).
    pub rank: u8,
    /// The inverse transform.
    pub inverse: bool,
}

impl FftOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match (self.rank, self.inverse) {
            (1, false) => "FFT",
            (1, true) => "IFFT",
            (_, false) => "FFT2D",
            (_, true) => "IFFT2D",
        }
    }

    /// The public method's name (for errors).
    pub(crate) fn public_name(&self) -> &'static str {
        match (self.rank, self.inverse) {
            (1, false) => "fft",
            (1, true) => "ifft",
            (_, false) => "fft2d",
            (_, true) => "ifft2d",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let x = super::one_input(self.name(), inputs)?;
        let y = match (self.rank, self.inverse) {
            (1, false) => x.fft()?,
            (1, true) => x.ifft()?,
            (_, false) => x.fft2d()?,
            (_, true) => x.ifft2d()?,
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}
