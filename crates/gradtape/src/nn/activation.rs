//! Activation functions a layer applies to its output.

use crate::error::Result;
use crate::tensor::Tensor;

/// An activation applied after a layer's affine map (Keras's
/// `activation=` argument). Each is the differentiable op of the same name;
/// a bad parameter (`Celu(-1.0)`) is an error of [`apply`](Self::apply)
/// naming the op.
///
/// ```
/// use gradtape::{nn::Activation, Tensor};
/// let x = Tensor::vector(&[-1.0f32, 2.0]);
/// assert_eq!(Activation::Relu.apply(&x)?.to_vec::<f32>()?, vec![0.0, 2.0]);
/// assert_eq!(Activation::Linear.apply(&x)?.to_vec::<f32>()?, vec![-1.0, 2.0]);
/// assert_eq!(Activation::HardSigmoid.apply(&x)?.to_vec::<f32>()?, vec![2.0 / 6.0, 5.0 / 6.0]);
/// assert!(Activation::Celu(-1.0).apply(&x).is_err());
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
    /// `x / (1 + |x|)` (Keras's `"softsign"`).
    Softsign,
    /// `ln σ(x)` (Keras's `"log_sigmoid"`).
    LogSigmoid,
    /// Log-softmax over the last axis (Keras's `"log_softmax"`).
    LogSoftmax,
    /// `eˣ` (Keras's `"exponential"`).
    Exponential,
    /// `relu6(x + 3) / 6` (Keras's `"hard_sigmoid"`).
    HardSigmoid,
    /// `x · hard_sigmoid(x)` (Keras's `"hard_silu"` and `"hard_swish"`).
    HardSilu,
    /// `x · tanh(softplus(x))` (Keras's `"mish"`).
    Mish,
    /// CELU with its `alpha` (Keras's `"celu"`: `Celu(1.0)`).
    Celu(f64),
    /// Keras's `relu` with its arguments (see [`Tensor::relu_with`]).
    ReluWith {
        /// the slope at or below `threshold`
        negative_slope: f64,
        /// the cap, if any
        max_value: Option<f64>,
        /// where the function turns
        threshold: f64,
    },
    /// `x` clipped into [−1, 1] (Keras's `"hard_tanh"`).
    HardTanh,
    /// Soft shrinkage with its threshold (Keras's `"soft_shrink"`:
    /// `SoftShrink(0.5)`).
    SoftShrink(f64),
    /// Hard shrinkage with its threshold (Keras's `"hard_shrink"`:
    /// `HardShrink(0.5)`).
    HardShrink(f64),
    /// `x − tanh(x)` (Keras's `"tanh_shrink"`).
    TanhShrink,
    /// The gated linear unit over the last axis, which it halves (Keras's
    /// `"glu"`).
    Glu,
    /// Keras's `"sparse_plus"`.
    SparsePlus,
    /// Squareplus with its `b` (Keras's `"squareplus"`: `Squareplus(4.0)`).
    Squareplus(f64),
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
            Activation::Softsign => x.softsign(),
            Activation::LogSigmoid => x.log_sigmoid(),
            Activation::LogSoftmax => x.log_softmax(-1),
            Activation::Exponential => x.exp(),
            Activation::HardSigmoid => x.hard_sigmoid(),
            Activation::HardSilu => x.hard_silu(),
            Activation::Mish => x.mish(),
            Activation::Celu(a) => x.celu(a),
            Activation::ReluWith {
                negative_slope,
                max_value,
                threshold,
            } => x.relu_with(negative_slope, max_value, threshold),
            Activation::HardTanh => x.hard_tanh(),
            Activation::SoftShrink(t) => x.soft_shrink(t),
            Activation::HardShrink(t) => x.hard_shrink(t),
            Activation::TanhShrink => x.tanh_shrink(),
            Activation::Glu => x.glu(-1),
            Activation::SparsePlus => x.sparse_plus(),
            Activation::Squareplus(b) => x.squareplus(b),
        }
    }
}
