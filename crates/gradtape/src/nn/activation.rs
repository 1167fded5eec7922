//! Activation functions a layer applies to its output.

use crate::error::Result;
use crate::tensor::Tensor;

/// An activation applied after a layer's affine map (Keras's
/// `activation=` argument). Each is the differentiable op of the same name.
///
/// ```
/// use gradtape::{nn::Activation, Tensor};
/// let x = Tensor::vector(&[-1.0f32, 2.0]);
/// assert_eq!(Activation::Relu.apply(&x)?.to_vec::<f32>()?, vec![0.0, 2.0]);
/// assert_eq!(Activation::Linear.apply(&x)?.to_vec::<f32>()?, vec![-1.0, 2.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Activation {
    /// The identity (Keras's `None` / `"linear"`).
    #[default]
    Linear,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// `x` for `x > 0`, `alpha · x` otherwise.
    LeakyRelu(f64),
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// Softmax over the last axis.
    Softmax,
    /// GELU (exact, erf form).
    Gelu,
    /// GELU's tanh form (GPT-2's; Keras's `gelu(x, approximate=True)`).
    GeluTanh,
    /// `x · sigmoid(x)` (swish).
    Silu,
    /// `x` for `x > 0`, `e^x − 1` otherwise.
    Elu,
    /// Scaled ELU.
    Selu,
    /// `log(1 + e^x)`.
    Softplus,
}

impl Activation {
    /// Applies the activation.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        match *self {
            Activation::Linear => Ok(x.clone()),
            Activation::Relu => x.relu(),
            Activation::Relu6 => x.relu6(),
            Activation::LeakyRelu(a) => x.leaky_relu(a),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Tanh => x.tanh(),
            Activation::Softmax => x.softmax(-1),
            Activation::Gelu => x.gelu(false),
            Activation::GeluTanh => x.gelu(true),
            Activation::Silu => x.silu(),
            Activation::Elu => x.elu(),
            Activation::Selu => x.selu(),
            Activation::Softplus => x.softplus(),
        }
    }
}
