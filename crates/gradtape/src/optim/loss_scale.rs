//! Dynamic loss scaling for mixed-precision training (Keras's
//! `LossScaleOptimizer`).
//!
//! Gradients computed in `f16` underflow to zero when they are smaller than
//! about `6e-8` (and lose precision below `6e-5`). Loss scaling multiplies
//! the loss by a large factor `s` before differentiating, so every gradient
//! on the way back is `s` times larger and stays representable, then
//! divides the gradients by `s` before the update. [`LossScaleOptimizer`]
//! picks `s` dynamically, as Keras 3 does:
//!
//! - `s` starts at `2^15` ([`initial_scale`](LossScaleOptimizer::initial_scale));
//! - a step whose scaled gradients are all finite is applied (unscaled) by
//!   the wrapped optimizer; after [`dynamic_growth_steps`](LossScaleOptimizer::dynamic_growth_steps)
//!   (2000) such steps in a row, `s` doubles;
//! - a step with an infinite or NaN gradient is skipped (the wrapped
//!   optimizer, its slots and its step counter are left as they were), `s`
//!   halves and the count of finite steps restarts.
//!
//! The scale and the count are variables (`"{name}/loss_scale"`,
//! `"{name}/loss_scale_steps"`), returned by
//! [`variables`](Optimizer::variables) with the wrapped optimizer's, so a
//! checkpoint keeps them.
//!
//! # The f32 master-weights pattern
//!
//! Keep the variables in `f32` (the optimizer's updates, often much
//! smaller than a weight, would round away in `f16`), and compute in `f16`
//! by casting the variables where they are read, under the tape: the cast's
//! gradient casts back, so the gradients arrive in `f32`, ready for the
//! `f32` update. Cast the loss to `f32` before scaling it.
//!
//! ```
//! use gradtape::optim::{LossScaleOptimizer, Optimizer, Sgd};
//! use gradtape::{DType, GradientTape, Tensor, Variable};
//! let w = Variable::new(Tensor::vector(&[0.5f32, -0.25]));          // f32 master weights
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?.cast(DType::F16)?;
//! let target = Tensor::vector(&[1.0f32, 2.0]);
//! let mut opt = LossScaleOptimizer::new(Sgd::new(0.02));
//! let mut losses = Vec::new();
//! for _ in 0..20 {
//!     let tape = GradientTape::new();
//!     let loss = tape.record(|| {
//!         let w16 = w.read().cast(DType::F16)?;                     // compute in f16
//!         let y = x.matmul(&w16.reshape(&[2, 1])?)?.reshape(&[2])?;
//!         y.cast(DType::F32)?.sub(&target)?.square()?.mean_all()     // loss in f32
//!     })?;
//!     losses.push(loss.to_scalar::<f32>()?);
//!     opt.minimize(&tape, &loss, &[w.clone()])?;                     // scales, unscales, skips on overflow
//! }
//! assert!(losses[19] < 0.1 * losses[0]);
//! assert_eq!(w.read().dtype(), DType::F32);
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! # In a traced step
//!
//! Inside a traced [`function`](crate::function()) the whole step is one
//! graph node, as Keras's `LossScaleOptimizer` inside `tf.function`
//! (`tf.cond` on the gradients' finiteness): each call of the graph
//! checks the gradients it computed, then skips (halving the scale) or
//! unscales, clips and applies them and counts the finite step, reading
//! and writing the scale and the count in their variables. The wrapped
//! optimizer must be one of [`optim`](crate::optim)'s (a user-made
//! [`Optimizer`] is refused inside a trace; eagerly any works).
//! [`scale_loss`](LossScaleOptimizer::scale_loss) reads the scale when the
//! graph runs, so one trace serves every scale.
//!
//! ```
//! use gradtape::optim::{LossScaleOptimizer, Optimizer, Sgd};
//! use gradtape::{function, DType, GradientTape, Tensor, Variable};
//! use std::sync::{Arc, Mutex};
//! let w = Variable::new(Tensor::vector(&[0.5f32, -0.25]));
//! let opt = Arc::new(Mutex::new(LossScaleOptimizer::new(Sgd::new(0.5)).initial_scale(65536.0)?));
//! let step = {
//!     let (w, opt) = (w.clone(), opt.clone());
//!     function(move |x: &Tensor| {
//!         let tape = GradientTape::new();
//!         let loss = tape.record(|| w.read().cast(DType::F16)?.mul(x)?.sum_all()?.cast(DType::F32))?;
//!         opt.lock().unwrap().minimize(&tape, &loss, &[w.clone()])?;
//!         Ok(loss)
//!     })
//! };
//! let x = Tensor::vector(&[1.0f32, 2.0]).cast(DType::F16)?;
//! step.call(&x)?; // 2^16 overflows f16 (its largest is 65504): skipped
//! assert!(opt.lock().unwrap().last_step_skipped());
//! assert_eq!(opt.lock().unwrap().loss_scale(), 32768.0);
//! step.call(&x)?; // 2 · 2^15 still does
//! step.call(&x)?; // 2^14 · (1, 2) fit: applied, w -= 0.5 · (1, 2)
//! assert!(!opt.lock().unwrap().last_step_skipped());
//! assert_eq!(w.read().to_vec::<f32>()?, vec![0.0, -1.25]);
//! assert_eq!((opt.lock().unwrap().iterations(), step.trace_count()), (1, 1));
//! # Ok::<(), gradtape::Error>(())
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::Optimizer;
use crate::autodiff::gradient::Gradient;
use crate::autodiff::gradient_tape::GradientTape;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Keras's default initial loss scale, `2^15`.
pub const DEFAULT_INITIAL_SCALE: f64 = 32768.0;
/// Keras's default number of finite steps before the scale doubles.
pub const DEFAULT_GROWTH_STEPS: u64 = 2000;

/// Wraps an optimizer with dynamic loss scaling; see the [module
/// docs](self).
///
/// [`minimize`](Optimizer::minimize) scales the loss on the tape itself;
/// with [`apply_gradients`](Optimizer::apply_gradients), differentiate
/// [`scale_loss`](Self::scale_loss)`(loss)` (computed under the tape) and
/// pass those scaled gradients: they are unscaled here.
///
/// ```
/// use gradtape::optim::{LossScaleOptimizer, Optimizer, Sgd};
/// use gradtape::{Tensor, Variable};
/// let w = Variable::new(Tensor::scalar(1.0f32));
/// let mut opt = LossScaleOptimizer::new(Sgd::new(0.1)).initial_scale(1024.0)?;
/// // a scaled gradient that overflowed: the step is skipped, the scale halves
/// opt.apply_gradients([(Some(Tensor::scalar(f32::INFINITY)), &w)])?;
/// assert!(opt.last_step_skipped());
/// assert_eq!(opt.loss_scale(), 512.0);
/// assert_eq!(w.read().to_scalar::<f32>()?, 1.0);
/// // a finite one: applied divided by the scale (512 / 512 = 1, so w = 1 - 0.1)
/// opt.apply_gradients([(Some(Tensor::scalar(512.0f32)), &w)])?;
/// assert!((w.read().to_scalar::<f32>()? - 0.9).abs() < 1e-6);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct LossScaleOptimizer<O: Optimizer> {
    inner: O,
    name: String,
    state: LossScaleState,
}

/// The state of dynamic loss scaling (the scale, the count of finite
/// steps, the growth interval, whether the last step was skipped), shared
/// with the optimizers' traced update nodes, which run it at each call.
/// Not API: see [`LossScaleOptimizer`].
#[doc(hidden)]
#[derive(Clone)]
pub struct LossScaleState {
    pub(crate) scale: Variable,
    pub(crate) good_steps: Variable,
    pub(crate) growth_steps: u64,
    pub(crate) skipped: Arc<AtomicBool>,
}

impl LossScaleState {
    /// The same state on other variables (a trace's scratch copies).
    pub(crate) fn with_variables(&self, scale: Variable, good_steps: Variable) -> LossScaleState {
        LossScaleState {
            scale,
            good_steps,
            ..self.clone()
        }
    }

    /// The scale (the value a trace sees, else the stored one).
    pub(crate) fn scale(&self) -> f64 {
        scalar(&self.scale)
    }

    /// After a step: a non-finite one halves the scale and restarts the
    /// count; a finite one is counted, and the `growth_steps`-th in a row
    /// doubles the scale. Not recorded on tapes or traces.
    pub(crate) fn after(&self, finite: bool) -> Result<()> {
        self.skipped.store(!finite, Ordering::Relaxed);
        let (scale, good) = (self.scale(), scalar(&self.good_steps) as u64 + 1);
        let (scale, good) = match (finite, good >= self.growth_steps) {
            (false, _) => (scale / 2.0, 0),
            (true, true) => (scale * 2.0, 0),
            (true, false) => (scale, good),
        };
        crate::function::trace::paused(|| {
            crate::autodiff::tape::without_tapes(|| {
                self.good_steps.assign(&Tensor::scalar(good as i64))?;
                self.scale.assign(&Tensor::scalar(scale as f32))
            })
        })
    }
}

impl<O: Optimizer> LossScaleOptimizer<O> {
    /// Wraps `inner`, with Keras's defaults: initial scale `2^15`, doubled
    /// after 2000 finite steps in a row.
    pub fn new(inner: O) -> Self {
        let name = format!("{}/loss_scale_optimizer", inner.name());
        let scale = Variable::builder(Tensor::scalar(DEFAULT_INITIAL_SCALE as f32))
            .name(format!("{name}/loss_scale"))
            .trainable(false)
            .build();
        let good_steps = Variable::builder(Tensor::scalar(0i64))
            .name(format!("{name}/loss_scale_steps"))
            .trainable(false)
            .build();
        LossScaleOptimizer {
            inner,
            name,
            state: LossScaleState {
                scale,
                good_steps,
                growth_steps: DEFAULT_GROWTH_STEPS,
                skipped: Arc::new(AtomicBool::new(false)),
            },
        }
    }

    /// Sets the initial scale (finite and `> 0`; a power of two keeps the
    /// scaling exact).
    pub fn initial_scale(self, s: f64) -> Result<Self> {
        if !(s > 0.0 && s.is_finite() && s <= f32::MAX as f64) {
            return Err(Error::invalid(
                "LossScaleOptimizer::initial_scale",
                format!("the scale must be finite and > 0 (as an f32), got {s}"),
            ));
        }
        self.state.scale.assign(&Tensor::scalar(s as f32))?;
        Ok(self)
    }

    /// Sets how many finite steps in a row double the scale (`>= 1`).
    pub fn dynamic_growth_steps(mut self, n: u64) -> Result<Self> {
        if n == 0 || n > i64::MAX as u64 {
            return Err(Error::invalid(
                "LossScaleOptimizer::dynamic_growth_steps",
                format!("needs at least 1 step (and at most i64::MAX), got {n}"),
            ));
        }
        self.state.growth_steps = n;
        Ok(self)
    }

    /// The current loss scale.
    pub fn loss_scale(&self) -> f64 {
        scalar(&self.state.scale)
    }

    /// The finite steps in a row since the scale last changed.
    pub fn good_steps(&self) -> u64 {
        scalar(&self.state.good_steps) as u64
    }

    /// Whether the last step skipped (a non-finite gradient): the last
    /// `apply`, or in a traced step the graph's last call.
    pub fn last_step_skipped(&self) -> bool {
        self.state.skipped.load(Ordering::Relaxed)
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// `loss · scale`, in `loss`'s dtype (a differentiable op: call it
    /// under the tape that differentiates it). Inside a traced function
    /// the scale is read from its variable when the graph runs, so a later
    /// change of the scale is seen by the same trace.
    pub fn scale_loss(&self, loss: &Tensor) -> Result<Tensor> {
        if crate::function::trace::recording() {
            return loss.mul(&self.state.scale.read().cast(loss.dtype())?);
        }
        loss.mul_scalar(self.loss_scale())
    }
}

/// The value of a scalar state variable as the innermost trace sees it
/// (its shadow), else its stored value; never recorded. The scale and the
/// count are only ever assigned real scalars, so `item` cannot fail; NaN
/// stands for the impossible case instead of a panic.
fn scalar(v: &Variable) -> f64 {
    let t = crate::function::trace::shadow_of(v).unwrap_or_else(|| v.value_untraced());
    t.item().unwrap_or(f64::NAN)
}

/// Whether every element of a gradient is finite.
pub(crate) fn all_finite(g: &Gradient) -> Result<bool> {
    let values = match g {
        Gradient::Dense(t) => t,
        Gradient::Sparse(s) => s.values(),
    };
    let axes: Vec<isize> = (0..values.rank() as isize).collect();
    values.is_finite()?.all(&axes, false)?.to_scalar::<bool>()
}

/// `g / scale`.
pub(crate) fn unscale(g: Gradient, scale: f64) -> Result<Gradient> {
    Ok(match g {
        Gradient::Dense(t) => Gradient::Dense(t.div_scalar(scale)?),
        Gradient::Sparse(s) => Gradient::Sparse(s.scale(1.0 / scale)?),
    })
}

impl<O: Optimizer> Optimizer for LossScaleOptimizer<O> {
    fn name(&self) -> &str {
        &self.name
    }

    /// Applies scaled gradients: skips the step (halving the scale) if
    /// any is infinite or NaN, else applies them divided by the scale
    /// (doubling the scale after `dynamic_growth_steps` such steps).
    /// Inside a traced function the wrapped optimizer's update node does
    /// the same at each call of the graph (see the [module docs](self)).
    fn apply(&mut self, pairs: Vec<(Option<Gradient>, Variable)>) -> Result<()> {
        if crate::function::trace::recording() {
            return self.inner.apply_loss_scaled(pairs, &self.state);
        }
        // The wrapped optimizer's slots exist from the first call on, a
        // skipped one too, as in Keras (whose `apply` builds the inner
        // optimizer before it checks the gradients) and in a traced step
        // (whose update node is made, slots and all, when it is traced):
        // otherwise a first step that overflows leaves an eager optimizer
        // without slots, whose variables (and checkpoint) differ.
        let with_grads: Vec<Variable> = pairs
            .iter()
            .filter(|(g, _)| g.is_some())
            .map(|(_, v)| v.clone())
            .collect();
        self.inner.build(&with_grads)?;
        let mut finite = true;
        for g in pairs.iter().filter_map(|(g, _)| g.as_ref()) {
            if !all_finite(g)? {
                finite = false;
                break;
            }
        }
        if finite {
            let scale = self.loss_scale();
            let unscaled = pairs
                .into_iter()
                .map(|(g, v)| Ok((g.map(|g| unscale(g, scale)).transpose()?, v)))
                .collect::<Result<Vec<_>>>()?;
            self.inner.apply(unscaled)?;
        }
        self.state.after(finite)
    }

    fn build(&mut self, vars: &[Variable]) -> Result<()> {
        self.inner.build(vars)
    }

    /// The wrapped optimizer's variables, then the scale and the count.
    fn variables(&self) -> Vec<Variable> {
        let mut v = self.inner.variables();
        v.extend([self.state.scale.clone(), self.state.good_steps.clone()]);
        v
    }

    /// The wrapped optimizer's applied steps (skipped ones not counted).
    fn iterations(&self) -> u64 {
        self.inner.iterations()
    }

    fn learning_rate(&self) -> f64 {
        self.inner.learning_rate()
    }

    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        self.inner.set_learning_rate(lr)
    }

    fn finalize_variable_values(&self, vars: &[Variable]) -> Result<()> {
        self.inner.finalize_variable_values(vars)
    }

    fn skipped(&self) -> &[String] {
        self.inner.skipped()
    }

    /// Scales `loss` on `tape` (recorded there), differentiates the scaled
    /// loss with respect to `vars` and [`apply`](Self::apply)s the result.
    fn minimize(&mut self, tape: &GradientTape, loss: &Tensor, vars: &[Variable]) -> Result<()> {
        let scaled = tape.record(|| self.scale_loss(loss))?;
        let grads = tape.sparse_gradient(&scaled, vars)?;
        self.apply(grads.into_iter().zip(vars.iter().cloned()).collect())
    }
}
