//! Adam and AdamW (Keras 3's `Adam` and `AdamW`, AMSGrad included).
//!
//! **Half-precision variables.** The slots take the variable's dtype, as
//! in Keras and PyTorch. In `f16`, a first step's second moment
//! `(1 − β₂)·g²` rounds to 0 for every gradient smaller than about 5e-3
//! (its square, times 1e-3, is under half of `f16`'s smallest subnormal,
//! 6e-8), and the step `lr · m̂ / (√v̂ + ε)` becomes `lr · g / ε`: a
//! thousand times the learning rate for a gradient of 1e-4. A transformer
//! block in `f16` at `lr = 1e-2` reached NaN by its third step; the same
//! block in `bf16` and `f32` trained. Keep `f32` variables and cast them
//! to `f16` in the forward pass, with a
//! [`LossScaleOptimizer`](super::LossScaleOptimizer), or train in `bf16`,
//! whose range holds such moments.

use super::half_update::Arith;
use super::kernel::{run, ElemRule, Step};
use super::{optimizer_common, Core, LearningRate, Rule};
use crate::autodiff::gradient::Gradient;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};

/// Adam's hyper-parameters.
#[derive(Clone, Copy)]
struct AdamRule {
    beta_1: f64,
    beta_2: f64,
    epsilon: f64,
    amsgrad: bool,
}

/// Adam, Keras's `Adam`: with `t` the step number (from 1),
///
/// ```text
/// α = lr · sqrt(1 − β₂ᵗ) / (1 − β₁ᵗ)
/// m += (g − m) · (1 − β₁)
/// v += (g² − v) · (1 − β₂)
/// v̂ = max(v̂, v)  (AMSGrad only; then v̂ replaces v below)
/// w −= α · m / (sqrt(v) + ε)
/// ```
///
/// Slots `m`, `v` (and `vhat`). Defaults as Keras: `β₁ = 0.9`, `β₂ = 0.999`,
/// `ε = 1e-7` (the "epsilon hat" of the paper, outside the bias
/// correction; PyTorch's `eps` sits inside it).
///
/// ```
/// use gradtape::optim::{Adam, Optimizer};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = Adam::new(0.1);
/// opt.apply_gradients([(Some(Tensor::vector(&[4.0f64])), &w)])?;
/// // the first step moves by about lr whatever the gradient's scale
/// assert!((w.read().to_vec::<f64>()?[0] - 0.9).abs() < 1e-6);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Adam {
    core: Core,
    rule: AdamRule,
}

/// AdamW, Keras's `AdamW`: [`Adam`] with decoupled weight decay (default
/// `0.004`), `w −= w · wd · lr` before each update.
///
/// ```
/// use gradtape::optim::{AdamW, Optimizer};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = AdamW::new(0.1).weight_decay(0.5);
/// opt.apply_gradients([(Some(Tensor::vector(&[0.0f64])), &w)])?;  // no gradient: decay only
/// assert!((w.read().to_vec::<f64>()?[0] - 0.95).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct AdamW {
    core: Core,
    rule: AdamRule,
}

macro_rules! adam_options {
    ($ty:ident, $base:literal, $wd:expr) => {
        impl $ty {
            /// With learning rate `lr` (a number or a schedule) and Keras's defaults.
            pub fn new(lr: impl Into<LearningRate>) -> $ty {
                let mut core = Core::new($base, lr.into());
                core.weight_decay = $wd;
                $ty {
                    core,
                    rule: AdamRule {
                        beta_1: 0.9,
                        beta_2: 0.999,
                        epsilon: 1e-7,
                        amsgrad: false,
                    },
                }
            }

            /// Sets `β₁` and `β₂`, each in `[0, 1)`.
            pub fn betas(mut self, beta_1: f64, beta_2: f64) -> Result<Self> {
                for b in [beta_1, beta_2] {
                    if !(0.0..1.0).contains(&b) {
                        return Err(Error::invalid(
                            concat!($base, "::betas"),
                            format!("betas must lie in [0, 1), got {b}"),
                        ));
                    }
                }
                self.rule.beta_1 = beta_1;
                self.rule.beta_2 = beta_2;
                Ok(self)
            }

            /// Sets `ε` (`>= 0`).
            pub fn epsilon(mut self, epsilon: f64) -> Result<Self> {
                if !(epsilon >= 0.0 && epsilon.is_finite()) {
                    return Err(Error::invalid(
                        concat!($base, "::epsilon"),
                        format!("epsilon must be finite and >= 0, got {epsilon}"),
                    ));
                }
                self.rule.epsilon = epsilon;
                Ok(self)
            }

            /// Uses the AMSGrad variant (slot `vhat`).
            pub fn amsgrad(mut self, amsgrad: bool) -> Self {
                self.rule.amsgrad = amsgrad;
                self
            }
        }
        optimizer_common!($ty);
    };
}

adam_options!(Adam, "adam", None);
adam_options!(AdamW, "adamw", Some(0.004));

/// Adam's update of one element (slots `m`, `v`, and `v̂` for AMSGrad).
#[derive(Clone)]
pub struct Elem {
    /// The step's bias-corrected learning rate.
    pub alpha: f64,
    /// `1 - beta_1`: the first moment's weight of the gradient.
    pub b1: f64,
    /// `1 - beta_2`: the second moment's weight of the squared gradient.
    pub b2: f64,
    /// Added to the root of the second moment.
    pub eps: f64,
}

/// Slots `[m, v]`, or `[m, v, v̂]` (AMSGrad) when `K` is 3.
impl<const K: usize> ElemRule<K> for Elem {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; K], g: T) {
        let (alpha, b1, b2, eps) = (
            T::from_f64(self.alpha),
            T::from_f64(self.b1),
            T::from_f64(self.b2),
            T::from_f64(self.eps),
        );
        s[0] = s[0] + (g - s[0]) * b1;
        s[1] = s[1] + (g * g - s[1]) * b2;
        // the last slot: v itself, or v̂ = max(v̂, v)
        s[K - 1] = s[K - 1].max(s[1]);
        *w = *w - s[0] * alpha / (s[K - 1].sqrt() + eps);
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            "T alpha = (T)p[0], b1 = (T)p[1], b2 = (T)p[2], eps = (T)p[3]; \
             s[0] = s[0] + (g - s[0]) * b1; s[1] = s[1] + (g * g - s[1]) * b2; \
             s[K - 1] = fmax(s[K - 1], s[1]); w = w - s[0] * alpha / (sqrt(s[K - 1]) + eps);",
            vec![self.alpha, self.b1, self.b2, self.eps],
        )
    }
}

impl Rule for AdamRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        let mut s = vec![("m", 0.0), ("v", 0.0)];
        if self.amsgrad {
            s.push(("vhat", 0.0));
        }
        s
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        let elem = Elem {
            alpha: step.lr * (1.0 - self.beta_2.powf(step.t)).sqrt() / (1.0 - self.beta_1.powf(step.t)),
            // Keras multiplies by (1 - beta)
            b1: 1.0 - self.beta_1,
            b2: 1.0 - self.beta_2,
            eps: self.epsilon,
        };
        if self.amsgrad {
            run::<_, 3>(&elem, step, var, slots, grad)
        } else {
            run::<_, 2>(&elem, step, var, slots, grad)
        }
    }
}
