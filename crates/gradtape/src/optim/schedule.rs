//! Learning-rate schedules, Keras's `keras.optimizers.schedules`: a
//! function of the optimizer's step counter (its value before the update),
//! evaluated in f64.
//!
//! ```
//! use gradtape::optim::{Adam, CosineDecay, Optimizer};
//! let schedule = CosineDecay::new(0.1, 100).warmup(0.5, 10);
//! let opt = Adam::new(schedule);
//! assert_eq!(opt.learning_rate(), 0.1);   // step 0: start of the warm-up
//! # Ok::<(), gradtape::Error>(())
//! ```

use std::fmt;
use std::sync::Arc;

/// A learning rate that depends on the step.
pub trait LearningRateSchedule: Send + Sync {
    /// The learning rate at `step` (0 for the first update).
    fn lr(&self, step: u64) -> f64;
}

/// A constant learning rate or a schedule: what optimizers take (`0.01`
/// or any [`LearningRateSchedule`] converts into one).
#[derive(Clone)]
pub enum LearningRate {
    /// The same rate at every step.
    Constant(f64),
    /// A schedule.
    Schedule(Arc<dyn LearningRateSchedule>),
}

impl LearningRate {
    /// The rate at `step`.
    pub fn at(&self, step: u64) -> f64 {
        match self {
            LearningRate::Constant(lr) => *lr,
            LearningRate::Schedule(s) => s.lr(step),
        }
    }
}

impl fmt::Debug for LearningRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LearningRate::Constant(lr) => write!(f, "Constant({lr})"),
            LearningRate::Schedule(_) => write!(f, "Schedule(..)"),
        }
    }
}

impl From<f64> for LearningRate {
    fn from(lr: f64) -> Self {
        LearningRate::Constant(lr)
    }
}

impl<S: LearningRateSchedule + 'static> From<S> for LearningRate {
    fn from(s: S) -> Self {
        LearningRate::Schedule(Arc::new(s))
    }
}

/// `initial · rate^(step / decay_steps)`, the exponent floored when
/// `staircase`, Keras's `ExponentialDecay`.
///
/// ```
/// use gradtape::optim::{ExponentialDecay, LearningRateSchedule};
/// let s = ExponentialDecay::new(1.0, 10, 0.5);
/// assert_eq!(s.lr(20), 0.25);
/// assert!((s.lr(5) - 0.5f64.sqrt()).abs() < 1e-15);
/// assert_eq!(s.staircase(true).lr(15), 0.5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialDecay {
    initial: f64,
    decay_steps: u64,
    decay_rate: f64,
    staircase: bool,
}

impl ExponentialDecay {
    /// Decays from `initial` by `decay_rate` every `decay_steps` steps
    /// (`decay_steps` 0 counts as 1).
    pub fn new(initial: f64, decay_steps: u64, decay_rate: f64) -> Self {
        ExponentialDecay {
            initial,
            decay_steps: decay_steps.max(1),
            decay_rate,
            staircase: false,
        }
    }

    /// Decays in whole steps of `decay_steps`.
    pub fn staircase(mut self, staircase: bool) -> Self {
        self.staircase = staircase;
        self
    }
}

impl LearningRateSchedule for ExponentialDecay {
    fn lr(&self, step: u64) -> f64 {
        let mut p = step as f64 / self.decay_steps as f64;
        if self.staircase {
            p = p.floor();
        }
        self.initial * self.decay_rate.powf(p)
    }
}

/// Cosine decay with optional linear warm-up, Keras's `CosineDecay`:
/// without warm-up `initial · ((1 − α) · (1 + cos(π · min(step, decay_steps) /
/// decay_steps)) / 2 + α)`; with [`warmup`](Self::warmup)`(target, w)` the
/// rate goes linearly from `initial` to `target` over `w` steps, then decays
/// from `target` as above over the next `decay_steps`.
///
/// ```
/// use gradtape::optim::{CosineDecay, LearningRateSchedule};
/// let s = CosineDecay::new(1.0, 100);
/// assert_eq!(s.lr(0), 1.0);
/// assert!((s.lr(50) - 0.5).abs() < 1e-15);
/// assert_eq!(s.lr(500), 0.0);
/// let w = CosineDecay::new(0.0, 100).warmup(1.0, 10);
/// assert_eq!(w.lr(5), 0.5);
/// assert_eq!(w.lr(10), 1.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineDecay {
    initial: f64,
    decay_steps: u64,
    alpha: f64,
    warmup: Option<(f64, u64)>,
}

impl CosineDecay {
    /// Decays from `initial` to 0 over `decay_steps` (0 counts as 1).
    pub fn new(initial: f64, decay_steps: u64) -> Self {
        CosineDecay {
            initial,
            decay_steps: decay_steps.max(1),
            alpha: 0.0,
            warmup: None,
        }
    }

    /// Ends at `alpha · peak` instead of 0.
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }

    /// Warms up linearly from `initial` to `target` over `steps` first.
    pub fn warmup(mut self, target: f64, steps: u64) -> Self {
        self.warmup = Some((target, steps));
        self
    }

    fn decay(&self, step: f64, from: f64) -> f64 {
        let frac = step / self.decay_steps as f64;
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * frac).cos());
        from * ((1.0 - self.alpha) * cosine + self.alpha)
    }
}

impl LearningRateSchedule for CosineDecay {
    fn lr(&self, step: u64) -> f64 {
        let d = self.decay_steps as f64;
        match self.warmup {
            None => self.decay((step as f64).min(d), self.initial),
            Some((target, w)) => {
                let s = (step as f64).min(d + w as f64);
                if s < w as f64 {
                    (target - self.initial) * (s / w as f64) + self.initial
                } else {
                    self.decay(s - w as f64, target)
                }
            }
        }
    }
}

/// A linear warm-up in front of any schedule: from `start` to the inner
/// schedule's first rate over `steps` steps, then the inner schedule
/// (started at 0 after the warm-up).
///
/// ```
/// use gradtape::optim::{ExponentialDecay, LearningRateSchedule, Warmup};
/// let s = Warmup::new(ExponentialDecay::new(1.0, 10, 0.5), 0.0, 4);
/// assert_eq!(s.lr(2), 0.5);
/// assert_eq!(s.lr(4), 1.0);
/// assert_eq!(s.lr(14), 0.5);
/// ```
pub struct Warmup<S> {
    inner: S,
    start: f64,
    steps: u64,
}

impl<S: LearningRateSchedule> Warmup<S> {
    /// Warms up from `start` over `steps` steps, then follows `inner`.
    pub fn new(inner: S, start: f64, steps: u64) -> Self {
        Warmup { inner, start, steps }
    }
}

impl<S: LearningRateSchedule> LearningRateSchedule for Warmup<S> {
    fn lr(&self, step: u64) -> f64 {
        if step < self.steps {
            self.start + (self.inner.lr(0) - self.start) * step as f64 / self.steps as f64
        } else {
            self.inner.lr(step - self.steps)
        }
    }
}
