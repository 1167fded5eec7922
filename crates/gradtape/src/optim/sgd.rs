//! Stochastic gradient descent, with momentum and Nesterov momentum
//! (Keras 3's `SGD`).

use super::half_update::Arith;
use super::kernel::{run, ElemRule, Step};
use super::{optimizer_common, Core, LearningRate, Rule};
use crate::autodiff::gradient::Gradient;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};

/// SGD, Keras's `SGD`: without momentum `w -= lr · g`; with momentum `μ`
/// the slot `momentum` becomes `m = μ·m − lr·g` and `w += m`, or with
/// Nesterov `w += μ·m − lr·g` (the new `m`). Defaults: `lr = 0.01` in
/// Keras (given here), no momentum.
///
/// ```
/// use gradtape::optim::{Optimizer, Sgd};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = Sgd::new(0.1).momentum(0.9)?;
/// opt.apply_gradients([(Some(Tensor::vector(&[1.0f64])), &w)])?;   // m = -0.1
/// opt.apply_gradients([(Some(Tensor::vector(&[1.0f64])), &w)])?;   // m = -0.19
/// assert!((w.read().to_vec::<f64>()?[0] - 0.71).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Sgd {
    core: Core,
    rule: SgdRule,
}

#[derive(Clone, Copy)]
struct SgdRule {
    momentum: f64,
    nesterov: bool,
}

impl Sgd {
    /// Plain SGD with learning rate `lr` (a number or a schedule).
    pub fn new(lr: impl Into<LearningRate>) -> Sgd {
        Sgd {
            core: Core::new("sgd", lr.into()),
            rule: SgdRule {
                momentum: 0.0,
                nesterov: false,
            },
        }
    }

    /// Sets the momentum `μ` in `[0, 1]`.
    pub fn momentum(mut self, momentum: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&momentum) {
            return Err(Error::invalid(
                "Sgd::momentum",
                format!("momentum must lie in [0, 1], got {momentum}"),
            ));
        }
        self.rule.momentum = momentum;
        Ok(self)
    }

    /// Uses Nesterov momentum.
    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.rule.nesterov = nesterov;
        self
    }
}

optimizer_common!(Sgd);

/// Plain SGD's update of one element.
#[derive(Clone)]
pub struct Plain {
    /// The learning rate.
    pub lr: f64,
}

impl ElemRule<0> for Plain {
    const ZERO_GRAD_IS_NOOP: bool = true;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, _: &mut [T; 0], g: T) {
        *w = *w - g * T::from_f64(self.lr);
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        ("w = w - g * (T)p[0];", vec![self.lr])
    }
}

/// SGD with momentum's update of one element (slot: the velocity).
#[derive(Clone)]
pub struct Momentum {
    /// The learning rate.
    pub lr: f64,
    /// The momentum.
    pub mu: f64,
    /// Whether the step is Nesterov's.
    pub nesterov: bool,
}

impl ElemRule<1> for Momentum {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 1], g: T) {
        let (lr, mu) = (T::from_f64(self.lr), T::from_f64(self.mu));
        s[0] = s[0] * mu - g * lr;
        if self.nesterov {
            *w = *w + (s[0] * mu - g * lr);
        } else {
            *w = *w + s[0];
        }
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            "T lr = (T)p[0], mu = (T)p[1]; s[0] = s[0] * mu - g * lr; \
             if (p[2] != 0) w = w + (s[0] * mu - g * lr); else w = w + s[0];",
            vec![self.lr, self.mu, f64::from(u8::from(self.nesterov))],
        )
    }
}

impl Rule for SgdRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        if self.momentum != 0.0 {
            vec![("momentum", 0.0)]
        } else {
            Vec::new()
        }
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        if self.momentum == 0.0 {
            if let (Gradient::Dense(g), 0.0, None) = (grad, step.wd, step.grad_scale) {
                // the one-pass kernel shared with hand-written loops
                return var.apply_gradient_descent(step.lr, g);
            }
            return run(&Plain { lr: step.lr }, step, var, slots, grad);
        }
        let rule = Momentum {
            lr: step.lr,
            mu: self.momentum,
            nesterov: self.nesterov,
        };
        run(&rule, step, var, slots, grad)
    }
}
