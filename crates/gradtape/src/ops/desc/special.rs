//! Descriptor of the special functions computed by their own kernels
//! (`ops/math/special.rs`); the guarded forms (`xlogy`, `divide_no_nan`, ...)
//! are compositions. All are elementwise (binary and ternary ones on
//! broadcast operands).

use std::fmt;

use super::Outputs;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A special function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecialOp {
    /// `log |Γ(x)|`
    Lgamma,
    /// `ψ(x)`
    Digamma,
    /// `ψ⁽ⁿ⁾(x)` (`n`, `x`)
    Polygamma,
    /// `P(a, x)` (`a`, `x`)
    Igamma,
    /// `Q(a, x)` (`a`, `x`)
    Igammac,
    /// `I_x(a, b)` (`a`, `b`, `x`)
    Betainc,
    /// `∂P(a, x)/∂a` (`a`, `x`; TF's `IgammaGradA`)
    IgammaGradA,
    /// `∂P(a, x)/∂x = x^(a-1) e^-x / Γ(a)` (`a`, `x`; TF's `igamma` gradient
    /// in `x`, formed in f64)
    IgammaGradX,
    /// `erf⁻¹(x)`
    Erfinv,
    /// `Φ⁻¹(p)`
    Ndtri,
    /// `e^-|x| I₀(x)`
    I0e,
    /// `e^-|x| I₁(x)`
    I1e,
}

impl SpecialOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            SpecialOp::Lgamma => "Lgamma",
            SpecialOp::Digamma => "Digamma",
            SpecialOp::Polygamma => "Polygamma",
            SpecialOp::Igamma => "Igamma",
            SpecialOp::Igammac => "Igammac",
            SpecialOp::Betainc => "Betainc",
            SpecialOp::IgammaGradA => "IgammaGradA",
            SpecialOp::IgammaGradX => "IgammaGradX",
            SpecialOp::Erfinv => "Erfinv",
            SpecialOp::Ndtri => "Ndtri",
            SpecialOp::I0e => "BesselI0e",
            SpecialOp::I1e => "BesselI1e",
        }
    }

    /// The public method's name (for errors).
    pub(crate) fn public_name(&self) -> &'static str {
        match self {
            SpecialOp::Lgamma => "lgamma",
            SpecialOp::Digamma => "digamma",
            SpecialOp::Polygamma => "polygamma",
            SpecialOp::Igamma => "igamma",
            SpecialOp::Igammac => "igammac",
            SpecialOp::Betainc => "betainc",
            SpecialOp::IgammaGradA => "igamma_grad_a",
            SpecialOp::IgammaGradX => "igamma_grad_x",
            SpecialOp::Erfinv => "erfinv",
            SpecialOp::Ndtri => "ndtri",
            SpecialOp::I0e => "bessel_i0e",
            SpecialOp::I1e => "bessel_i1e",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let y = match (self, inputs) {
            (SpecialOp::Lgamma, [x]) => x.lgamma()?,
            (SpecialOp::Digamma, [x]) => x.digamma()?,
            (SpecialOp::Erfinv, [x]) => x.erfinv()?,
            (SpecialOp::Ndtri, [x]) => x.ndtri()?,
            (SpecialOp::I0e, [x]) => x.bessel_i0e()?,
            (SpecialOp::I1e, [x]) => x.bessel_i1e()?,
            (SpecialOp::Polygamma, [n, x]) => Tensor::polygamma(n, x)?,
            (SpecialOp::Igamma, [a, x]) => Tensor::igamma(a, x)?,
            (SpecialOp::Igammac, [a, x]) => Tensor::igammac(a, x)?,
            (SpecialOp::Betainc, [a, b, x]) => Tensor::betainc(a, b, x)?,
            (SpecialOp::IgammaGradA, [a, x]) => crate::ops::math::special::igamma_grad_a(a, x)?,
            (SpecialOp::IgammaGradX, [a, x]) => crate::ops::math::special::igamma_grad_x(a, x)?,
            _ => {
                return Err(Error::invalid(
                    self.name(),
                    format!("wrong number of inputs: {}", inputs.len()),
                ))
            }
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}
