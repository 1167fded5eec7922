//! RMSprop (plain, with momentum, centred) and Adagrad, as Keras 3's.

use super::half_update::Arith;
use super::kernel::{run, ElemRule, Step};
use super::{optimizer_common, Core, LearningRate, Rule};
use crate::autodiff::gradient::Gradient;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};

/// RMSprop, Keras's `RMSprop`:
///
/// ```text
/// a = ρ·a + (1 − ρ)·g²                     (slot "velocity")
/// ḡ = ρ·ḡ + (1 − ρ)·g                      (centred only, slot "average_gradient")
/// δ = lr·g / sqrt(a − ḡ² + ε)  (centred)   or   lr·g / sqrt(a + ε)
/// m = μ·m + δ;  w −= m                     (momentum μ > 0, slot "momentum")
/// w −= δ                                   (otherwise)
/// ```
///
/// Defaults as Keras: `ρ = 0.9`, no momentum, `ε = 1e-7`, not centred.
///
/// ```
/// use gradtape::optim::{Optimizer, RmsProp};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = RmsProp::new(0.01).epsilon(0.0)?;
/// opt.apply_gradients([(Some(Tensor::vector(&[2.0f64])), &w)])?;
/// // a = 0.1 · 4, δ = 0.01 · 2 / sqrt(0.4)
/// assert!((w.read().to_vec::<f64>()?[0] - (1.0 - 0.02 / 0.4f64.sqrt())).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct RmsProp {
    core: Core,
    rule: RmsRule,
}

#[derive(Clone, Copy)]
struct RmsRule {
    rho: f64,
    momentum: f64,
    epsilon: f64,
    centered: bool,
}

fn unit(op: &'static str, what: &str, v: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(Error::invalid(op, format!("{what} must lie in [0, 1], got {v}")))
    }
}

fn non_negative(op: &'static str, what: &str, v: f64) -> Result<f64> {
    if v >= 0.0 && v.is_finite() {
        Ok(v)
    } else {
        Err(Error::invalid(op, format!("{what} must be finite and >= 0, got {v}")))
    }
}

impl RmsProp {
    /// With learning rate `lr` (a number or a schedule) and Keras's defaults.
    pub fn new(lr: impl Into<LearningRate>) -> RmsProp {
        RmsProp {
            core: Core::new("rmsprop", lr.into()),
            rule: RmsRule {
                rho: 0.9,
                momentum: 0.0,
                epsilon: 1e-7,
                centered: false,
            },
        }
    }

    /// Sets the discount `ρ` in `[0, 1]`.
    pub fn rho(mut self, rho: f64) -> Result<Self> {
        self.rule.rho = unit("RmsProp::rho", "rho", rho)?;
        Ok(self)
    }

    /// Sets the momentum `μ` in `[0, 1]`.
    pub fn momentum(mut self, momentum: f64) -> Result<Self> {
        self.rule.momentum = unit("RmsProp::momentum", "momentum", momentum)?;
        Ok(self)
    }

    /// Sets `ε` (`>= 0`).
    pub fn epsilon(mut self, epsilon: f64) -> Result<Self> {
        self.rule.epsilon = non_negative("RmsProp::epsilon", "epsilon", epsilon)?;
        Ok(self)
    }

    /// Centres the second moment by the mean gradient.
    pub fn centered(mut self, centered: bool) -> Self {
        self.rule.centered = centered;
        self
    }
}

optimizer_common!(RmsProp);

/// RMSprop's update of one element.
#[derive(Clone)]
pub struct RmsElem {
    /// The learning rate.
    pub lr: f64,
    /// The decay of the average of squared gradients.
    pub rho: f64,
    /// Added to the root of that average.
    pub eps: f64,
    /// The momentum.
    pub mu: f64,
}

/// [`RmsElem::delta`] in CUDA C (a lambda `delta(a, avg or null, g)`),
/// with the parameters of [`RmsElem::params`].
macro_rules! rms_c {
    () => {
        "T rho = (T)p[1], om = (T)(1.0 - p[1]), eps = (T)p[2], lr = (T)p[0]; \
         auto delta = [&](T* a, T* avg, T g) -> T { \
           *a = rho * *a + om * (g * g); \
           T denom; \
           if (avg) { *avg = rho * *avg + om * g; denom = *a - *avg * *avg + eps; } else { denom = *a + eps; } \
           return lr * g / sqrt(denom); }; "
    };
}

impl RmsElem {
    /// The parameters of the CUDA form: `[lr, rho, eps, mu]`.
    fn params(&self) -> Vec<f64> {
        vec![self.lr, self.rho, self.eps, self.mu]
    }

    /// Updates the averages and returns the increment δ.
    #[inline(always)]
    fn delta<T: Arith>(&self, a: &mut T, avg: Option<&mut T>, g: T) -> T {
        let (rho, one_minus, eps, lr) = (
            T::from_f64(self.rho),
            T::from_f64(1.0 - self.rho),
            T::from_f64(self.eps),
            T::from_f64(self.lr),
        );
        *a = rho * *a + one_minus * (g * g);
        let denom = match avg {
            Some(avg) => {
                *avg = rho * *avg + one_minus * g;
                *a - *avg * *avg + eps
            }
            None => *a + eps,
        };
        lr * g / denom.sqrt()
    }
}

/// velocity
impl ElemRule<1> for RmsElem {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 1], g: T) {
        *w = *w - self.delta(&mut s[0], None, g);
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (concat!(rms_c!(), "w = w - delta(&s[0], (T*)0, g);"), self.params())
    }
}

/// velocity and momentum, or velocity and average gradient
#[derive(Clone)]
pub struct Rms2 {
    /// The update's parameters.
    pub e: RmsElem,
    /// Whether the second slot is the average gradient (centered), or the
    /// momentum.
    pub centered: bool,
}

impl ElemRule<2> for Rms2 {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 2], g: T) {
        let [a, b] = s;
        if self.centered {
            *w = *w - self.e.delta(a, Some(b), g);
        } else {
            *b = T::from_f64(self.e.mu) * *b + self.e.delta(a, None, g);
            *w = *w - *b;
        }
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        let mut p = self.e.params();
        p.push(f64::from(u8::from(self.centered)));
        (
            concat!(
                rms_c!(),
                "if (p[4] != 0) { w = w - delta(&s[0], &s[1], g); } \
                 else { s[1] = (T)p[3] * s[1] + delta(&s[0], (T*)0, g); w = w - s[1]; }"
            ),
            p,
        )
    }
}

/// velocity, momentum, average gradient
impl ElemRule<3> for RmsElem {
    const ZERO_GRAD_IS_NOOP: bool = false;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 3], g: T) {
        let [a, m, avg] = s;
        *m = T::from_f64(self.mu) * *m + self.delta(a, Some(avg), g);
        *w = *w - *m;
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            concat!(
                rms_c!(),
                "s[1] = (T)p[3] * s[1] + delta(&s[0], &s[2], g); w = w - s[1];"
            ),
            self.params(),
        )
    }
}

impl Rule for RmsRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        let mut s = vec![("velocity", 0.0)];
        if self.momentum > 0.0 {
            s.push(("momentum", 0.0));
        }
        if self.centered {
            s.push(("average_gradient", 0.0));
        }
        s
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        let e = RmsElem {
            lr: step.lr,
            rho: self.rho,
            eps: self.epsilon,
            mu: self.momentum,
        };
        match (self.momentum > 0.0, self.centered) {
            (false, false) => run::<_, 1>(&e, step, var, slots, grad),
            (true, true) => run::<_, 3>(&e, step, var, slots, grad),
            (_, centered) => run::<_, 2>(&Rms2 { e, centered }, step, var, slots, grad),
        }
    }
}

/// Adagrad, Keras's `Adagrad`: the slot `accumulator` (starting at
/// `initial_accumulator_value`, default 0.1) adds `g²`, and `w −= lr·g /
/// sqrt(accumulator + ε)` (`ε = 1e-7`). A zero gradient changes nothing,
/// so a sparse gradient touches only its rows.
///
/// ```
/// use gradtape::optim::{Adagrad, Optimizer};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::vector(&[1.0f64]));
/// let mut opt = Adagrad::new(0.1).epsilon(0.0)?;
/// opt.apply_gradients([(Some(Tensor::vector(&[0.3f64])), &w)])?;   // acc = 0.1 + 0.09
/// assert!((w.read().to_vec::<f64>()?[0] - (1.0 - 0.03 / 0.19f64.sqrt())).abs() < 1e-12);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Adagrad {
    core: Core,
    rule: AdagradRule,
}

#[derive(Clone, Copy)]
struct AdagradRule {
    initial: f64,
    epsilon: f64,
}

impl Adagrad {
    /// With learning rate `lr` (a number or a schedule) and Keras's defaults.
    pub fn new(lr: impl Into<LearningRate>) -> Adagrad {
        Adagrad {
            core: Core::new("adagrad", lr.into()),
            rule: AdagradRule {
                initial: 0.1,
                epsilon: 1e-7,
            },
        }
    }

    /// Sets the accumulator's starting value (`>= 0`).
    pub fn initial_accumulator_value(mut self, v: f64) -> Result<Self> {
        self.rule.initial = non_negative("Adagrad::initial_accumulator_value", "initial_accumulator_value", v)?;
        Ok(self)
    }

    /// Sets `ε` (`>= 0`).
    pub fn epsilon(mut self, epsilon: f64) -> Result<Self> {
        self.rule.epsilon = non_negative("Adagrad::epsilon", "epsilon", epsilon)?;
        Ok(self)
    }
}

optimizer_common!(Adagrad);

/// Adagrad's update of one element.
#[derive(Clone)]
pub struct AdagradElem {
    /// The learning rate.
    pub lr: f64,
    /// Added to the root of the accumulator.
    pub eps: f64,
}

impl ElemRule<1> for AdagradElem {
    const ZERO_GRAD_IS_NOOP: bool = true;
    #[inline(always)]
    fn apply<T: Arith>(&self, w: &mut T, s: &mut [T; 1], g: T) {
        s[0] = s[0] + g * g;
        *w = *w - T::from_f64(self.lr) * g / (s[0] + T::from_f64(self.eps)).sqrt();
    }
    fn cuda(&self) -> (&'static str, Vec<f64>) {
        (
            "s[0] = s[0] + g * g; w = w - (T)p[0] * g / sqrt(s[0] + (T)p[1]);",
            vec![self.lr, self.eps],
        )
    }
}

impl Rule for AdagradRule {
    fn shared(&self) -> std::sync::Arc<dyn Rule + Send + Sync> {
        std::sync::Arc::new(*self)
    }

    fn slots(&self) -> Vec<(&'static str, f64)> {
        vec![("accumulator", self.initial)]
    }

    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()> {
        run(
            &AdagradElem {
                lr: step.lr,
                eps: self.epsilon,
            },
            step,
            var,
            slots,
            grad,
        )
    }
}
