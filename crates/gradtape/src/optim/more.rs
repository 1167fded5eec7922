//! Adamax, Nadam, Adadelta and Lion, as Keras 3's (same slots, defaults
//! and order of operations).

use super::half_update::Arith;
use super::kernel::{run, ElemRule, Step};
use super::{optimizer_common, Core, LearningRate, Rule};
use crate::autodiff::gradient::Gradient;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};

/// `v` if it lies in `[0, 1)`.
fn beta(op: &'static str, v: f64) -> Result<f64> {
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(Error::invalid(op, format!("betas must lie in [0, 1), got {v}")))
    }
}

/// `v` if finite and `>= 0`.
fn non_negative(op: &'static str, v: f64) -> Result<f64> {
    if v >= 0.0 && v.is_finite() {
        Ok(v)
    } else {
        Err(Error::invalid(op, format!("epsilon must be finite and >= 0, got {v}")))
    }
}

/// The two-beta optimizers' hyper-parameters.
#[derive(Clone, Copy)]
struct Betas {
    beta_1: f64,
    beta_2: f64,
    epsilon: f64,
}

macro_rules! two_betas {
    ($ty:ident, $rule:ident, $base:literal, $b2:expr) => {
        impl $ty {
            /// With learning rate `lr` (a number or a schedule) and Keras's defaults.
            pub fn new(lr: impl Into<LearningRate>) -> $ty {
                $ty {
                    core: Core::new($base, lr.into()),
                    rule: $rule(Betas {
                        beta_1: 0.9,
                        beta_2: $b2,
                        epsilon: 1e-7,
                    }),
                }
            }

            /// Sets `β₁` and `β₂`, each in `[0, 1)`.
            pub fn betas(mut self, beta_1: f64, beta_2: f64) -> Result<Self> {
                self.rule.0.beta_1 = beta(concat!($base, "::betas"), beta_1)?;
                self.rule.0.beta_2 = beta(concat!($base, "::betas"), beta_2)?;
                Ok(self)
            }
        }
        optimizer_common!($ty);
    };
}

/// Adamax, Keras's `Adamax` (Adam with the infinity norm):
///
/// ```text
/// m = m + (g − m)·(1 − β₁)          (slot "momentum")
/// u = max(β₂·u, |g|)                (slot "norm")
/// w −= lr·m / ((1 − β₁ᵗ)·(u + ε))
/// ```
///
/// Defaults as Keras: `β₁ = 0.9`, `β₂ = 0.999`, `ε = 1e-7`.
///
/// ```
/// use gradtape::optim::{Adamax, Optimizer};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = Adamax::new(0.1).epsilon(0.0)?;
/// opt.apply_gradients([(Some(Tensor::vector(&[-2.0f64])), &w)])?;
/// // m = −0.2, u = 2: w −= 0.1 · (−0.2) / (0.1 · 2)
/// assert!((w.read().to_vec::<f64>()?[0] - 1.1).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Adamax {
    core: Core,
    rule: AdamaxRule,
}

#[derive(Clone, Copy)]
struct AdamaxRule(Betas);

two_betas!(Adamax, AdamaxRule, "adamax", 0.999);

impl Adamax {
    /// Sets `ε` (`>= 0`).
    pub fn epsilon(mut self, epsilon: f64) -> Result<Self> {
        self.rule.0.epsilon = non_negative("Adamax::epsilon", epsilon)?;
        Ok(self)
    }
}

/// Adamax's update of one element (fields: its step's constants).
#[derive(Clone)]
pub struct AdamaxElem {
    /// `lr / (1 − β₁ᵗ)`
    pub alpha: f64,
    /// `1 − β₁`
    pub b1: f64,
    /// `β₂`
    pub beta_2: f64,
    /// added to the norm
    pub eps: f64,
}

impl ElemRule<2> for AdamaxElem {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 2], g: T) {
        s[0] = s[0] + (g - s[0]) * T::from_f64(self.b1);
        s[1] = (T::from_f64(self.beta_2) * s[1]).max(g.abs());
        *w = *w - T::from_f64(self.alpha) * s[0] / (s[1] + T::from_f64(self.eps));
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            "s[0] = s[0] + (g - s[0]) * (T)p[1]; s[1] = fmax((T)p[2] * s[1], fabs(g)); \
             w = w - (T)p[0] * s[0] / (s[1] + (T)p[3]);",
            vec![self.alpha, self.b1, self.beta_2, self.eps],
        )
    }
}

impl Rule for AdamaxRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        vec![("momentum", 0.0), ("norm", 0.0)]
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        let b = self.0;
        let e = AdamaxElem {
            alpha: step.lr / (1.0 - b.beta_1.powf(step.t)),
            b1: 1.0 - b.beta_1,
            beta_2: b.beta_2,
            eps: b.epsilon,
        };
        run(&e, step, var, slots, grad)
    }
}

/// Nadam, Keras's `Nadam` (Adam with Nesterov momentum, Dozat 2016), with
/// Keras's momentum schedule `μₜ = β₁·(1 − 0.5·0.96ᵗ)`:
///
/// ```text
/// m = m + (g − m)·(1 − β₁)          (slot "momentum")
/// v = v + (g² − v)·(1 − β₂)         (slot "velocity")
/// m̂ = μₜ₊₁·m / (1 − Πμ₁..ₜ₊₁) + (1 − μₜ)·g / (1 − Πμ₁..ₜ)
/// w −= lr·m̂ / (sqrt(v / (1 − β₂ᵗ)) + ε)
/// ```
///
/// Defaults as Keras: `β₁ = 0.9`, `β₂ = 0.999`, `ε = 1e-7`.
///
/// ```
/// use gradtape::optim::{Nadam, Optimizer};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = Nadam::new(0.01);
/// opt.apply_gradients([(Some(Tensor::vector(&[0.5f64])), &w)])?;
/// // the first step moves by about lr, against the gradient
/// let moved = 1.0 - w.read().to_vec::<f64>()?[0];
/// assert!(moved > 0.009 && moved < 0.011, "{moved}");
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Nadam {
    core: Core,
    rule: NadamRule,
}

#[derive(Clone, Copy)]
struct NadamRule(Betas);

two_betas!(Nadam, NadamRule, "nadam", 0.999);

impl Nadam {
    /// Sets `ε` (`>= 0`).
    pub fn epsilon(mut self, epsilon: f64) -> Result<Self> {
        self.rule.0.epsilon = non_negative("Nadam::epsilon", epsilon)?;
        Ok(self)
    }
}

/// Nadam's update of one element.
#[derive(Clone)]
pub struct NadamElem {
    /// the learning rate
    pub lr: f64,
    /// `1 − β₁`
    pub b1: f64,
    /// `1 − β₂`
    pub b2: f64,
    /// `μₜ₊₁ / (1 − Πμ₁..ₜ₊₁)`, the weight of m in m̂
    pub cm: f64,
    /// `(1 − μₜ) / (1 − Πμ₁..ₜ)`, the weight of g in m̂
    pub cg: f64,
    /// `1 − β₂ᵗ`
    pub bias_2: f64,
    /// added to the root of v̂
    pub eps: f64,
}

impl ElemRule<2> for NadamElem {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 2], g: T) {
        let f = T::from_f64;
        s[0] = s[0] + (g - s[0]) * f(self.b1);
        s[1] = s[1] + (g * g - s[1]) * f(self.b2);
        let m_hat = f(self.cm) * s[0] + f(self.cg) * g;
        let v_hat = s[1] / f(self.bias_2);
        *w = *w - m_hat * f(self.lr) / (v_hat.sqrt() + f(self.eps));
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            "s[0] = s[0] + (g - s[0]) * (T)p[1]; s[1] = s[1] + (g * g - s[1]) * (T)p[2]; \
             T m_hat = (T)p[3] * s[0] + (T)p[4] * g; T v_hat = s[1] / (T)p[5]; \
             w = w - m_hat * (T)p[0] / (sqrt(v_hat) + (T)p[6]);",
            vec![self.lr, self.b1, self.b2, self.cm, self.cg, self.bias_2, self.eps],
        )
    }
}

impl Rule for NadamRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        vec![("momentum", 0.0), ("velocity", 0.0)]
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        let b = self.0;
        let mu = |k: f64| b.beta_1 * (1.0 - 0.5 * 0.96f64.powf(k));
        // Keras keeps the product of the μs in a variable; it is a
        // function of the step
        let t = step.t;
        let product_t = (1..=t as u64).map(|k| mu(k as f64)).product::<f64>();
        let product_next = product_t * mu(t + 1.0);
        let e = NadamElem {
            lr: step.lr,
            b1: 1.0 - b.beta_1,
            b2: 1.0 - b.beta_2,
            cm: mu(t + 1.0) / (1.0 - product_next),
            cg: (1.0 - mu(t)) / (1.0 - product_t),
            bias_2: 1.0 - b.beta_2.powf(t),
            eps: b.epsilon,
        };
        run(&e, step, var, slots, grad)
    }
}

/// Lion, Keras's `Lion` (Chen et al. 2023, evolved sign momentum):
///
/// ```text
/// w −= lr·sign(β₁·m + (1 − β₁)·g)
/// m = β₂·m + (1 − β₂)·g             (slot "momentum")
/// ```
///
/// Defaults as Keras: `β₁ = 0.9`, `β₂ = 0.99` (a learning rate 3-10 times
/// smaller than Adam's is usual, with a larger weight decay).
///
/// ```
/// use gradtape::optim::{Lion, Optimizer};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64, 1.0, 1.0]));
/// let mut opt = Lion::new(0.01);
/// opt.apply_gradients([(Some(Tensor::vector(&[3.0f64, -1e-9, 0.0])), &w)])?;
/// assert_eq!(w.read().to_vec::<f64>()?, vec![0.99, 1.01, 1.0]); // by the sign only
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Lion {
    core: Core,
    rule: LionRule,
}

#[derive(Clone, Copy)]
struct LionRule(Betas);

two_betas!(Lion, LionRule, "lion", 0.99);

/// Lion's update of one element.
#[derive(Clone)]
pub struct LionElem {
    /// the learning rate
    pub lr: f64,
    /// the interpolation of the update's sign
    pub beta_1: f64,
    /// the momentum's decay
    pub beta_2: f64,
}

impl ElemRule<1> for LionElem {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 1], g: T) {
        let f = T::from_f64;
        let c = s[0] * f(self.beta_1) + g * f(1.0 - self.beta_1);
        // sign, 0 at 0 (and NaN at NaN), as Keras's ops.sign
        let sign = if c > T::zero() {
            T::one()
        } else if c < T::zero() {
            -T::one()
        } else {
            c * T::zero()
        };
        *w = *w - f(self.lr) * sign;
        s[0] = s[0] * f(self.beta_2) + g * f(1.0 - self.beta_2);
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            "T c = s[0] * (T)p[1] + g * (T)(1.0 - p[1]); \
             T sign = c > (T)0 ? (T)1 : (c < (T)0 ? (T)-1 : c * (T)0); \
             w = w - (T)p[0] * sign; s[0] = s[0] * (T)p[2] + g * (T)(1.0 - p[2]);",
            vec![self.lr, self.beta_1, self.beta_2],
        )
    }
}

impl Rule for LionRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        vec![("momentum", 0.0)]
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        let e = LionElem {
            lr: step.lr,
            beta_1: self.0.beta_1,
            beta_2: self.0.beta_2,
        };
        run(&e, step, var, slots, grad)
    }
}

/// Adadelta, Keras's `Adadelta` (Zeiler 2012):
///
/// ```text
/// a = ρ·a + (1 − ρ)·g²                          (slot "accumulated_grad")
/// δ = −sqrt(d + ε)·g / sqrt(a + ε)
/// d = ρ·d + (1 − ρ)·δ²                          (slot "accumulated_delta_var")
/// w += lr·δ
/// ```
///
/// Defaults as Keras: `ρ = 0.95`, `ε = 1e-7` (and Keras's learning rate
/// 0.001; the paper's is 1).
///
/// ```
/// use gradtape::optim::{Adadelta, Optimizer};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = Adadelta::new(1.0).rho(0.5)?.epsilon(1e-4)?;
/// opt.apply_gradients([(Some(Tensor::vector(&[2.0f64])), &w)])?;
/// // a = 2, δ = −sqrt(1e-4)·2 / sqrt(2 + 1e-4)
/// let want = 1.0 - 0.02 / (2.0f64 + 1e-4).sqrt();
/// assert!((w.read().to_vec::<f64>()?[0] - want).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Adadelta {
    core: Core,
    rule: AdadeltaRule,
}

#[derive(Clone, Copy)]
struct AdadeltaRule {
    rho: f64,
    epsilon: f64,
}

impl Adadelta {
    /// With learning rate `lr` (a number or a schedule) and Keras's defaults.
    pub fn new(lr: impl Into<LearningRate>) -> Adadelta {
        Adadelta {
            core: Core::new("adadelta", lr.into()),
            rule: AdadeltaRule {
                rho: 0.95,
                epsilon: 1e-7,
            },
        }
    }

    /// Sets the decay `ρ` in `[0, 1)`.
    pub fn rho(mut self, rho: f64) -> Result<Self> {
        self.rule.rho = beta("Adadelta::rho", rho)?;
        Ok(self)
    }

    /// Sets `ε` (`>= 0`).
    pub fn epsilon(mut self, epsilon: f64) -> Result<Self> {
        self.rule.epsilon = non_negative("Adadelta::epsilon", epsilon)?;
        Ok(self)
    }
}

optimizer_common!(Adadelta);

/// Adadelta's update of one element.
#[derive(Clone)]
pub struct AdadeltaElem {
    /// the learning rate
    pub lr: f64,
    /// the averages' decay
    pub rho: f64,
    /// added inside both roots
    pub eps: f64,
}

impl ElemRule<2> for AdadeltaElem {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 2], g: T) {
        let f = T::from_f64;
        let (rho, om, eps) = (f(self.rho), f(1.0 - self.rho), f(self.eps));
        s[0] = rho * s[0] + om * (g * g);
        let delta = -((s[1] + eps).sqrt() * g / (s[0] + eps).sqrt());
        s[1] = rho * s[1] + om * (delta * delta);
        *w = *w + f(self.lr) * delta;
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            "T rho = (T)p[1], om = (T)(1.0 - p[1]), eps = (T)p[2]; \
             s[0] = rho * s[0] + om * (g * g); \
             T delta = -(sqrt(s[1] + eps) * g / sqrt(s[0] + eps)); \
             s[1] = rho * s[1] + om * (delta * delta); w = w + (T)p[0] * delta;",
            vec![self.lr, self.rho, self.eps],
        )
    }
}

impl Rule for AdadeltaRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        vec![("accumulated_grad", 0.0), ("accumulated_delta_var", 0.0)]
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        let e = AdadeltaElem {
            lr: step.lr,
            rho: self.rho,
            eps: self.epsilon,
        };
        run(&e, step, var, slots, grad)
    }
}
