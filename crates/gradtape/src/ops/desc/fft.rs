//! Descriptor of the complex Fourier transforms (the real ones are
//! compositions of them; see `ops/signal/fft.rs`).

use std::fmt;

use super::Outputs;
use crate::error::Result;
use crate::tensor::Tensor;

/// A complex DFT (or its `1/N`-scaled inverse) over the last `rank` axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FftOp {
    /// How many trailing axes are transformed (1, 2 or 3).
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
            (2, false) => "FFT2D",
            (2, true) => "IFFT2D",
            (_, false) => "FFT3D",
            (_, true) => "IFFT3D",
        }
    }

    /// The public method's name (for errors).
    pub(crate) fn public_name(&self) -> &'static str {
        match (self.rank, self.inverse) {
            (1, false) => "fft",
            (1, true) => "ifft",
            (2, false) => "fft2d",
            (2, true) => "ifft2d",
            (_, false) => "fft3d",
            (_, true) => "ifft3d",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let x = super::one_input(self.name(), inputs)?;
        let y = match (self.rank, self.inverse) {
            (1, false) => x.fft()?,
            (1, true) => x.ifft()?,
            (2, false) => x.fft2d()?,
            (2, true) => x.ifft2d()?,
            (_, false) => x.fft3d()?,
            (_, true) => x.ifft3d()?,
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}
