//! Optimizers applying `(gradient, variable)` pairs as Keras 3's
//! `apply_gradients` does: [`Sgd`] (momentum, Nesterov), [`Adam`],
//! [`AdamW`], [`RmsProp`] (momentum, centred), [`Adagrad`], [`Adamax`],
//! [`Nadam`], [`Adadelta`] and [`Lion`], with
//! learning-rate [schedules](schedule), decoupled weight decay, and
//! gradient clipping ([`clip_by_norm`], [`clip_by_global_norm`], or the
//! `clipnorm` / `global_clipnorm` / `clipvalue` options).
//!
//! ```
//! use gradtape::optim::{Optimizer, Sgd};
//! use gradtape::{GradientTape, Tensor, Variable};
//! let w = Variable::new(Tensor::scalar(3.0f64));
//! let mut opt = Sgd::new(0.1);
//! for _ in 0..100 {
//!     let tape = GradientTape::new();
//!     let loss = tape.record(|| w.read().square())?;        // minimum at 0
//!     opt.minimize(&tape, &loss, &[w.clone()])?;
//! }
//! assert!(w.read().to_scalar::<f64>()?.abs() < 1e-6);
//! assert_eq!(opt.iterations(), 100);
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! What one `apply_gradients` call does, in Keras's order:
//!
//! 1. An empty list does nothing. Pairs whose gradient is `None` are
//!    skipped; if every gradient is `None` the call fails ("no gradients
//!    provided for any variable"), otherwise the skipped variables' names
//!    are logged as a warning (through the `log` crate, once per distinct
//!    list; [`Optimizer::skipped`] returns them after each call).
//! 2. Slot variables are created for variables not seen before
//!    ([`Optimizer::build`] creates them up front, e.g. before loading a
//!    checkpoint), named `"{optimizer}/{variable}/{slot}"`.
//! 3. Gradients are clipped if a clip option is set.
//! 4. Each variable gets weight decay `w -= w · wd · lr` (if set and the
//!    variable is not excluded) and its optimizer's update, fused into one
//!    in-place pass over its buffer (see `kernel`): the variable, its slots
//!    and the gradient are read once, and nothing is allocated per element.
//! 5. The step counter [`iterations`](Optimizer::iterations) (itself a
//!    variable, `"{optimizer}/iterations"`, so it is checkpointed) advances;
//!    schedules are evaluated at its value before the step.
//!
//! With [`gradient_accumulation_steps(n)`](Sgd::gradient_accumulation_steps)
//! (Keras's `gradient_accumulation_steps`) steps 3 and 4 happen at every
//! `n`-th call only, to the mean of the `n` calls' gradients (summed in an
//! accumulator variable per weight meanwhile); the counter counts calls,
//! [`iterations`](Optimizer::iterations) reports updates.
//!
//! Inside a traced [`function`](crate::function()) the whole update (steps
//! 4 and 5) becomes one `ApplyUpdates` graph node whose inputs are the
//! (clipped) gradients: it runs at each call of the function, in program
//! order, reading the step counter then (so schedules and Adam's bias
//! correction follow it) and writing the variables, their slots and the
//! counter; tracing itself changes nothing. Slots are created when the
//! step is first traced.
//!
//! ```
//! use std::sync::Mutex;
//! use gradtape::optim::{Adam, Optimizer};
//! use gradtape::{function, GradientTape, Tensor, Variable};
//! let w = Variable::new(Tensor::vector(&[3.0f64, -1.0]));
//! let opt = Mutex::new(Adam::new(0.1));
//! let step = {
//!     let w = w.clone();
//!     function(move |target: &Tensor| {
//!         let tape = GradientTape::new();
//!         let loss = tape.record(|| w.read().sub(target)?.square()?.sum_all())?;
//!         opt.lock().unwrap().minimize(&tape, &loss, &[w.clone()])?;
//!         Ok(loss)
//!     })
//! };
//! let target = Tensor::vector(&[1.0f64, 1.0]);
//! for _ in 0..3 {
//!     step.call(&target)?;
//! }
//! assert_eq!(step.trace_count(), 1);
//! assert_eq!(step.graph(&target)?.count("ApplyUpdates"), 1);
//! // three Adam steps of about lr each, towards the target
//! let w = w.read().to_vec::<f64>()?;
//! assert!((w[0] - 2.7).abs() < 1e-3 && (w[1] + 0.7).abs() < 1e-3, "{w:?}");
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! Sparse gradients ([`IndexedSlices`](crate::IndexedSlices), from an
//! embedding) are applied without building the dense gradient. By default
//! the result equals the dense gradient's, as in Keras 3 (whose optimizer
//! tests require exactly that): SGD without momentum and Adagrad then touch
//! only the given rows, while optimizers whose state decays on every step
//! (momentum, Adam's moments, RMSprop's average) update every row, the rows
//! without gradient as with a zero gradient. With
//! [`lazy_sparse(true)`](Adam::lazy_sparse) only the given rows of the
//! variable and of its slots are updated: TensorFlow's sparse kernels
//! (`SparseApplyMomentum`, `SparseApplyRMSProp`, `SparseApplyAdagrad`) and,
//! for Adam, TF Addons' `LazyAdam` and PyTorch's `SparseAdam`. Repeated
//! indices are summed before the update, as in the dense gradient (Keras 3
//! squares an `IndexedSlices`' values before summing repeated rows, so its
//! Adam, seen with a repeated row, differs there from its own dense result;
//! gradtape and PyTorch's `SparseAdam` do not).

pub(crate) mod adam;
mod batch;
mod clip;
pub(crate) mod half_update;
pub(crate) mod kernel;
pub mod loss_scale;
pub(crate) mod more;
pub(crate) mod rmsprop;
pub mod schedule;
pub(crate) mod sgd;
mod traced;

pub use adam::{Adam, AdamW};
pub use clip::{clip_by_global_norm, clip_by_norm, clip_gradients_by_global_norm, global_norm};
pub use loss_scale::LossScaleOptimizer;
pub use more::{Adadelta, Adamax, Lion, Nadam};
pub use rmsprop::{Adagrad, RmsProp};
pub use schedule::{CosineDecay, ExponentialDecay, LearningRate, LearningRateSchedule, Warmup};
pub use sgd::Sgd;

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use rustc_hash::FxHashMap;

use crate::autodiff::gradient::Gradient;
use crate::autodiff::gradient_tape::GradientTape;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::{Tensor, TensorId};
use kernel::Step;

/// An optimizer's update rule: its slots and its per-variable step.
pub(crate) trait Rule {
    /// The per-variable slots: name and initial value.
    fn slots(&self) -> Vec<(&'static str, f64)>;
    /// Updates `var` (and its slots) from `grad`.
    fn update(&self, step: &Step, var: &Variable, slots: &[Variable], grad: &Gradient) -> Result<()>;
    /// The rule as a shared value (held by a traced update's graph node).
    fn shared(&self) -> Arc<dyn Rule + Send + Sync>;
}

/// Gradient clipping applied before the update (Keras's `clipnorm`,
/// `global_clipnorm`, `clipvalue`; at most one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Clip {
    None,
    Norm(f64),
    GlobalNorm(f64),
    Value(f64),
}

/// What every optimizer holds: settings, step counter, slots.
pub(crate) struct Core {
    name: String,
    /// shared with the `ApplyUpdates` nodes of traced steps, which read it
    /// when they run (so that a rate set later reaches them)
    lr: Arc<RwLock<LearningRate>>,
    weight_decay: Option<f64>,
    exclude_from_weight_decay: Vec<String>,
    clip: Clip,
    lazy: bool,
    iterations: Variable,
    /// Keras's `gradient_accumulation_steps`: update every this many calls
    /// with the mean of the gradients since the last update
    accumulate: Option<u64>,
    /// each variable's gradient accumulator (with `accumulate`), by handle
    accumulators: FxHashMap<TensorId, Variable>,
    /// Keras's `use_ema` / `ema_momentum`: the momentum of the moving
    /// averages of the variables, kept after each update
    ema: Option<f64>,
    /// each variable's moving average (with `ema`), by handle
    averages: FxHashMap<TensorId, Variable>,
    /// Each variable's slots, by handle, in the order variables were seen.
    slots: FxHashMap<TensorId, Vec<Variable>>,
    order: Vec<TensorId>,
    skipped: Vec<String>,
    warned: HashSet<Vec<String>>,
}

impl Core {
    pub(crate) fn new(base: &str, lr: LearningRate) -> Core {
        Core::with_name(crate::nn::unique_name(base), Arc::new(RwLock::new(lr)))
    }

    fn with_name(name: String, lr: Arc<RwLock<LearningRate>>) -> Core {
        let iterations = Variable::builder(Tensor::scalar(0i64))
            .name(format!("{name}/iterations"))
            .trainable(false)
            .build();
        Core {
            name,
            lr,
            weight_decay: None,
            exclude_from_weight_decay: Vec::new(),
            clip: Clip::None,
            lazy: false,
            iterations,
            accumulate: None,
            accumulators: FxHashMap::default(),
            ema: None,
            averages: FxHashMap::default(),
            slots: FxHashMap::default(),
            order: Vec::new(),
            skipped: Vec::new(),
            warned: HashSet::new(),
        }
    }

    /// Keras's `iterations`: the updates made (with gradient accumulation,
    /// the calls divided by the steps per update).
    fn iterations(&self) -> u64 {
        traced::counter(&self.iterations) / self.accumulate.unwrap_or(1)
    }

    /// The rate of the next call: a schedule is evaluated at the count of
    /// calls (with gradient accumulation too, as Keras's).
    fn learning_rate(&self) -> f64 {
        traced::rate(&self.lr).at(traced::counter(&self.iterations))
    }

    /// Sets a constant rate for the next updates, those of traced steps
    /// included; an optimizer made with a schedule refuses (as Keras's).
    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        const OP: &str = "set_learning_rate";
        if !lr.is_finite() {
            return Err(Error::invalid(
                OP,
                format!("{}: the learning rate must be finite, got {lr}", self.name),
            ));
        }
        let mut rate = self.lr.write().unwrap_or_else(|e| e.into_inner());
        if let LearningRate::Schedule(_) = *rate {
            return Err(Error::invalid(
                OP,
                format!(
                    "{} was made with a learning-rate schedule, which sets the rate at every step; \
                     make it with a constant rate to set the rate by hand",
                    self.name
                ),
            ));
        }
        *rate = LearningRate::Constant(lr);
        Ok(())
    }

    fn build(&mut self, rule: &dyn Rule, vars: &[&Variable]) -> Result<()> {
        for v in vars {
            if self.slots.contains_key(&v.handle()) {
                continue;
            }
            if !v.dtype().is_float() {
                return Err(Error::UnsupportedDType {
                    op: "Optimizer::build",
                    dtype: v.dtype(),
                    expected: "float variables (f32, f64, f16 or bf16)",
                });
            }
            let slots = rule
                .slots()
                .into_iter()
                .map(|(slot, init)| {
                    // (fallible: a slot of a huge variable is an error)
                    Ok(Variable::builder(crate::kernels::gpu::filled(
                        "apply_gradients",
                        &v.shape(),
                        init,
                        v.dtype(),
                        v.device(),
                    )?)
                    .name(format!("{}/{}/{slot}", self.name, v.name()))
                    .trainable(false)
                    .build())
                })
                .collect::<Result<_>>()?;
            self.slots.insert(v.handle(), slots);
            self.order.push(v.handle());
            if self.accumulate.is_some() {
                let acc = crate::kernels::gpu::filled("apply_gradients", &v.shape(), 0.0, v.dtype(), v.device())?;
                let acc = Variable::builder(acc)
                    .name(format!("{}/{}/gradient_accumulator", self.name, v.name()))
                    .trainable(false)
                    .build();
                self.accumulators.insert(v.handle(), acc);
            }
            if self.ema.is_some() {
                let avg = crate::kernels::gpu::filled("apply_gradients", &v.shape(), 0.0, v.dtype(), v.device())?;
                let avg = Variable::builder(avg)
                    .name(format!("{}/{}/average", self.name, v.name()))
                    .trainable(false)
                    .build();
                self.averages.insert(v.handle(), avg);
            }
        }
        Ok(())
    }

    /// Keras's `finalize_variable_values`: with moving averages, each of
    /// `vars` takes its average's value (nothing without).
    fn finalize_variable_values(&self, vars: &[Variable]) -> Result<()> {
        if self.ema.is_none() {
            return Ok(());
        }
        for v in vars {
            let avg = self.averages.get(&v.handle()).ok_or_else(|| {
                Error::invalid(
                    "finalize_variable_values",
                    format!(
                        "{}: variable '{}' has no moving average (this optimizer never updated it)",
                        self.name,
                        v.name()
                    ),
                )
            })?;
            v.assign(&avg.read())?;
        }
        Ok(())
    }

    fn variables(&self) -> Vec<Variable> {
        let slots = self.order.iter().flat_map(|h| {
            self.slots[h]
                .iter()
                .cloned()
                .chain(self.accumulators.get(h).cloned())
                .chain(self.averages.get(h).cloned())
        });
        std::iter::once(self.iterations.clone()).chain(slots).collect()
    }

    fn uses_weight_decay(&self, v: &Variable) -> bool {
        !self
            .exclude_from_weight_decay
            .iter()
            .any(|p| v.name().contains(p.as_str()))
    }

    fn apply(&mut self, rule: &dyn Rule, pairs: Vec<(Option<Gradient>, Variable)>) -> Result<()> {
        self.apply_with(rule, pairs, None)
    }

    /// [`apply`](Self::apply), with dynamic loss scaling inside the update
    /// when `loss_scale` is given (the gradients then clipped after they
    /// are unscaled, when the update runs).
    fn apply_with(
        &mut self,
        rule: &dyn Rule,
        pairs: Vec<(Option<Gradient>, Variable)>,
        loss_scale: Option<loss_scale::LossScaleState>,
    ) -> Result<()> {
        const OP: &str = "apply_gradients";
        self.skipped.clear();
        if pairs.is_empty() {
            return Ok(());
        }
        let mut grads = Vec::with_capacity(pairs.len());
        let mut vars = Vec::with_capacity(pairs.len());
        for (g, v) in pairs {
            match g {
                Some(g) => {
                    if g.shape() != v.shape().as_slice() || g.dtype() != v.dtype() {
                        return Err(Error::VariableMismatch {
                            op: OP,
                            name: v.name().to_string(),
                            expected: v.shape(),
                            expected_dtype: v.dtype(),
                            got: g.shape().to_vec(),
                            got_dtype: g.dtype(),
                        });
                    }
                    grads.push(g);
                    vars.push(v);
                }
                None => self.skipped.push(v.name().to_string()),
            }
        }
        if grads.is_empty() {
            return Err(Error::invalid(
                OP,
                format!("no gradients provided for any variable: {:?}", self.skipped),
            ));
        }
        if !self.skipped.is_empty() && self.warned.insert(self.skipped.clone()) {
            log::warn!(
                "{}: gradients do not exist for variables {:?} when minimizing the loss",
                self.name,
                self.skipped
            );
        }
        self.build(rule, &vars.iter().collect::<Vec<_>>())?;
        // with accumulation, the mean gradient is clipped when the update
        // runs (see `traced`); with loss scaling, the unscaled gradient
        let late = self.accumulate.is_some() || loss_scale.is_some();
        let grads = if late { grads } else { clip_all(self.clip, grads)? };
        let targets = vars
            .iter()
            .map(|v| traced::Target {
                var: v.clone(),
                slots: self.slots[&v.handle()].clone(),
                wd: match self.weight_decay {
                    Some(wd) if self.uses_weight_decay(v) => wd,
                    _ => 0.0,
                },
                acc: self.accumulators.get(&v.handle()).cloned(),
                average: self.averages.get(&v.handle()).cloned(),
            })
            .collect();
        let updates = Arc::new(traced::Updates {
            name: self.name.clone(),
            rule: rule.shared(),
            lr: self.lr.clone(),
            lazy: self.lazy,
            iterations: self.iterations.clone(),
            targets,
            accumulate: self
                .accumulate
                .map(|steps| traced::Accumulation { steps, clip: self.clip }),
            ema: self.ema,
            loss_scale: loss_scale.map(|state| traced::LossScaled { state, clip: self.clip }),
        });
        traced::apply(&updates, &grads)
    }
}

/// The gradients clipped as `clip` says.
pub(crate) fn clip_all(clip: Clip, grads: Vec<Gradient>) -> Result<Vec<Gradient>> {
    Ok(match clip {
        Clip::None => grads,
        Clip::Norm(c) => grads
            .iter()
            .map(|g| clip::clip_gradient_by_norm(g, c))
            .collect::<Result<_>>()?,
        Clip::GlobalNorm(c) => {
            let opt: Vec<Option<Gradient>> = grads.into_iter().map(Some).collect();
            clip_gradients_by_global_norm(&opt, c)?
                .0
                .into_iter()
                .flatten()
                .collect()
        }
        Clip::Value(c) => grads
            .iter()
            .map(|g| clip::clip_gradient_by_value(g, c))
            .collect::<Result<_>>()?,
    })
}

/// Checks a clip threshold.
fn positive(op: &'static str, what: &str, v: f64) -> Result<f64> {
    if v > 0.0 && v.is_finite() {
        Ok(v)
    } else {
        Err(Error::invalid(op, format!("{what} must be finite and > 0, got {v}")))
    }
}

/// What every optimizer does; see the [module docs](self) for the steps of
/// [`apply_gradients`](Self::apply_gradients).
pub trait Optimizer {
    /// The optimizer's name (`sgd`, `adam`, ... made unique per thread, as
    /// layer names are): the prefix of its variables' names.
    fn name(&self) -> &str;

    /// Applies `(gradient, variable)` pairs given as a vector; see
    /// [`apply_gradients`](Self::apply_gradients).
    fn apply(&mut self, pairs: Vec<(Option<Gradient>, Variable)>) -> Result<()>;

    /// Creates the slot variables of `vars` now (Keras's
    /// `optimizer.build(var_list)`), e.g. before loading a checkpoint that
    /// holds them; variables already known keep theirs.
    fn build(&mut self, vars: &[Variable]) -> Result<()>;

    /// The optimizer's variables: the step counter, then each variable's
    /// slots, in the order the variables were first seen.
    fn variables(&self) -> Vec<Variable>;

    /// How many updates have been applied (Keras's `iterations`).
    fn iterations(&self) -> u64;

    /// The learning rate the next update will use.
    fn learning_rate(&self) -> f64;

    /// Sets the learning rate of the next updates (Keras's
    /// `optimizer.learning_rate = lr`), in traced training steps too: their
    /// graphs read the rate when they run. An optimizer made with a
    /// schedule refuses, as Keras's does, and so does a rate that is not
    /// finite.
    ///
    /// ```
    /// use gradtape::optim::{ExponentialDecay, Optimizer, Sgd};
    /// use gradtape::{function, GradientTape, Tensor, Variable};
    /// use std::sync::{Arc, Mutex};
    /// let w = Variable::new(Tensor::scalar(1.0f64));
    /// let opt = Arc::new(Mutex::new(Sgd::new(0.5)));
    /// let step = {
    ///     let (w, opt) = (w.clone(), opt.clone());
    ///     function(move |x: &Tensor| {
    ///         let tape = GradientTape::new();
    ///         let loss = tape.record(|| w.read().mul(x))?; // d loss / dw = x
    ///         opt.lock().unwrap().minimize(&tape, &loss, &[w.clone()])?;
    ///         Ok(loss)
    ///     })
    /// };
    /// let x = Tensor::scalar(1.0f64);
    /// step.call(&x)?;                                        // w = 1 - 0.5
    /// opt.lock().unwrap().set_learning_rate(0.125)?;
    /// step.call(&x)?;                                        // the same graph: w = 0.5 - 0.125
    /// assert_eq!(w.read().to_scalar::<f64>()?, 0.375);
    /// assert_eq!(step.trace_count(), 1);
    /// let mut decayed = Sgd::new(ExponentialDecay::new(0.5, 10, 0.5));
    /// assert!(decayed.set_learning_rate(0.1).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    fn set_learning_rate(&mut self, lr: f64) -> Result<()>;

    /// With moving averages (an optimizer's `use_ema`), each of `vars`
    /// takes its average's value (Keras's `finalize_variable_values`, to
    /// call once training ends); without, nothing.
    fn finalize_variable_values(&self, vars: &[Variable]) -> Result<()>;

    /// The names of the variables whose gradient was `None` in the last
    /// call.
    fn skipped(&self) -> &[String];

    /// Applies loss-scaled gradients inside a traced function, skipping
    /// the step on a non-finite one, as [`LossScaleOptimizer`] does
    /// eagerly (its traced path; not called directly). `optim`'s
    /// optimizers implement it; the default refuses.
    #[doc(hidden)]
    fn apply_loss_scaled(
        &mut self,
        pairs: Vec<(Option<Gradient>, Variable)>,
        state: &loss_scale::LossScaleState,
    ) -> Result<()> {
        let _ = (pairs, state);
        Err(Error::invalid(
            "LossScaleOptimizer::apply",
            format!(
                "inside a traced function, dynamic loss scaling needs an optimizer of gradtape::optim \
                 (its update node decides at each call whether to skip); '{}' is not one: \
                 apply the gradients outside the traced function",
                self.name()
            ),
        ))
    }

    /// Applies `(gradient, variable)` pairs, Keras's `apply_gradients`:
    /// gradients may be `Tensor`s or [`Gradient`]s (dense or sparse), or
    /// `None` (skipped).
    ///
    /// ```
    /// use gradtape::optim::{Optimizer, Sgd};
    /// use gradtape::{GradientTape, Tensor, Variable};
    /// let (a, b) = (Variable::new(Tensor::scalar(1.0f32)), Variable::new(Tensor::scalar(1.0f32)));
    /// let vars = vec![a.clone(), b.clone()];
    /// let tape = GradientTape::new();
    /// let loss = tape.record(|| a.read().mul_scalar(2.0))?;     // b unused
    /// let grads = tape.gradient(&loss, &vars)?;
    /// let mut opt = Sgd::new(0.5);
    /// opt.apply_gradients(grads.into_iter().zip(&vars))?;
    /// assert_eq!(a.read().to_scalar::<f32>()?, 0.0);
    /// assert_eq!(opt.skipped(), &[b.name().to_string()]);   // and a warning is logged
    /// assert!(opt.apply_gradients([(None::<Tensor>, &a)]).is_err()); // all None
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    fn apply_gradients<'a, G: Into<Gradient>>(
        &mut self,
        pairs: impl IntoIterator<Item = (Option<G>, &'a Variable)>,
    ) -> Result<()>
    where
        Self: Sized,
    {
        self.apply(pairs.into_iter().map(|(g, v)| (g.map(Into::into), v.clone())).collect())
    }

    /// Computes the gradients of `loss` on `tape` with respect to `vars`
    /// (sparse ones kept sparse) and applies them (Keras's `minimize`).
    fn minimize(&mut self, tape: &GradientTape, loss: &Tensor, vars: &[Variable]) -> Result<()>
    where
        Self: Sized,
    {
        let grads = tape.sparse_gradient(loss, vars)?;
        self.apply(grads.into_iter().zip(vars.iter().cloned()).collect())
    }
}

/// The options every optimizer shares, and its `Optimizer` impl.
macro_rules! optimizer_common {
    ($ty:ty) => {
        impl $ty {
            /// Sets decoupled weight decay: before each update `w -= w · wd
            /// · lr` (Keras's `weight_decay`).
            pub fn weight_decay(mut self, wd: f64) -> Self {
                self.core.weight_decay = Some(wd);
                self
            }

            /// Exempts from weight decay the variables whose names contain
            /// any of `patterns` (Keras's `exclude_from_weight_decay(var_names=...)`).
            pub fn exclude_from_weight_decay(mut self, patterns: &[&str]) -> Self {
                self.core.exclude_from_weight_decay = patterns.iter().map(|p| p.to_string()).collect();
                self
            }

            /// Clips each gradient to norm `c` (Keras's `clipnorm`; see
            /// [`clip_by_norm`](crate::optim::clip_by_norm)). Replaces any
            /// other clip option. `c` must be positive.
            pub fn clipnorm(mut self, c: f64) -> $crate::Result<Self> {
                self.core.clip = $crate::optim::Clip::Norm($crate::optim::positive("clipnorm", "clipnorm", c)?);
                Ok(self)
            }

            /// Clips the gradients to global norm `c` (Keras's
            /// `global_clipnorm`; see
            /// [`clip_by_global_norm`](crate::optim::clip_by_global_norm)).
            /// Replaces any other clip option.
            pub fn global_clipnorm(mut self, c: f64) -> $crate::Result<Self> {
                self.core.clip =
                    $crate::optim::Clip::GlobalNorm($crate::optim::positive("global_clipnorm", "global_clipnorm", c)?);
                Ok(self)
            }

            /// Clips each gradient element to `[-c, c]` (Keras's
            /// `clipvalue`). Replaces any other clip option.
            pub fn clipvalue(mut self, c: f64) -> $crate::Result<Self> {
                self.core.clip = $crate::optim::Clip::Value($crate::optim::positive("clipvalue", "clipvalue", c)?);
                Ok(self)
            }

            /// Updates the variables every `steps` calls only, with the mean of
            /// the gradients of those calls, accumulated in a variable per
            /// weight (`"{optimizer}/{variable}/gradient_accumulator"`);
            /// Keras's `gradient_accumulation_steps`. Clipping and weight
            /// decay apply at the updates, to the mean gradient;
            /// [`iterations`](crate::optim::Optimizer::iterations) counts
            /// updates (calls / `steps`: Adam's bias correction follows it)
            /// while a learning-rate schedule sees the count of calls, as in
            /// Keras. `steps` must be at least 2. Set it before the first
            /// call (the accumulators are made with the slots).
            ///
            /// ```
            /// use gradtape::optim::{Optimizer, Sgd};
            /// use gradtape::{Tensor, Variable};
            /// let w = Variable::new(Tensor::vector(&[1.0f64]));
            /// let mut opt = Sgd::new(0.5).gradient_accumulation_steps(2)?;
            /// opt.apply_gradients([(Some(Tensor::vector(&[1.0f64])), &w)])?;
            /// assert_eq!(w.read().to_vec::<f64>()?, vec![1.0]); // accumulated
            /// opt.apply_gradients([(Some(Tensor::vector(&[3.0f64])), &w)])?;
            /// assert_eq!(w.read().to_vec::<f64>()?, vec![0.0]); // 1 - 0.5 * (1 + 3) / 2
            /// assert_eq!(opt.iterations(), 1);
            /// assert!(Sgd::new(0.1).gradient_accumulation_steps(1).is_err());
            /// # Ok::<(), gradtape::Error>(())
            /// ```
            pub fn gradient_accumulation_steps(mut self, steps: u64) -> $crate::Result<Self> {
                if steps < 2 {
                    return Err($crate::Error::invalid(
                        "gradient_accumulation_steps",
                        format!("gradient_accumulation_steps must be an integer >= 2, got {steps}"),
                    ));
                }
                if !self.core.slots.is_empty() {
                    return Err($crate::Error::invalid(
                        "gradient_accumulation_steps",
                        format!(
                            "{}: set it before the optimizer is built (its first update)",
                            self.core.name
                        ),
                    ));
                }
                self.core.accumulate = Some(steps);
                Ok(self)
            }

            /// Keeps a moving average of each variable it updates (Keras's
            /// `use_ema=True, ema_momentum=momentum`): after each update,
            /// `average = momentum · average + (1 − momentum) · variable`
            /// (the first update copies the variable; with gradient
            /// accumulation, at each update, not at each call as Keras's).
            /// The averages are optimizer variables
            /// (`{name}/{variable}/average`);
            /// [`finalize_variable_values`](crate::optim::Optimizer::finalize_variable_values)
            /// copies them into the variables. Set it before the first
            /// update.
            ///
            /// ```
            /// use gradtape::optim::{Optimizer, Sgd};
            /// use gradtape::{GradientTape, Tensor, Variable};
            /// let w = Variable::new(Tensor::scalar(1.0f64));
            /// let mut opt = Sgd::new(0.5).use_ema(0.5)?;
            /// for _ in 0..2 {
            ///     let tape = GradientTape::new();
            ///     let loss = tape.record(|| w.read().mul_scalar(2.0))?;  // d/dw = 2
            ///     opt.minimize(&tape, &loss, &[w.clone()])?;
            /// }
            /// // w: 1 -> 0 -> -1; the average: 0, then 0.5 · 0 + 0.5 · (-1)
            /// assert_eq!(w.read().to_scalar::<f64>()?, -1.0);
            /// opt.finalize_variable_values(&[w.clone()])?;
            /// assert_eq!(w.read().to_scalar::<f64>()?, -0.5);
            /// assert!(Sgd::new(0.5).use_ema(1.5).is_err());
            /// # Ok::<(), gradtape::Error>(())
            /// ```
            pub fn use_ema(mut self, momentum: f64) -> $crate::Result<Self> {
                if !(0.0..=1.0).contains(&momentum) {
                    return Err($crate::Error::invalid(
                        "use_ema",
                        format!("the moving averages' momentum must lie in [0, 1], got {momentum}"),
                    ));
                }
                if !self.core.slots.is_empty() {
                    return Err($crate::Error::invalid(
                        "use_ema",
                        format!(
                            "{}: set it before the optimizer is built (its first update)",
                            self.core.name
                        ),
                    ));
                }
                self.core.ema = Some(momentum);
                Ok(self)
            }

            /// Whether a sparse gradient updates only its rows of the
            /// variable and of its slots (default false: the dense
            /// gradient's result); see the [module docs](crate::optim).
            pub fn lazy_sparse(mut self, lazy: bool) -> Self {
                self.core.lazy = lazy;
                self
            }

            /// Sets the name (the prefix of the optimizer's variables).
            pub fn with_name(mut self, name: &str) -> Self {
                self.core = $crate::optim::Core::renamed(self.core, name);
                self
            }
        }

        impl $crate::optim::Optimizer for $ty {
            fn name(&self) -> &str {
                &self.core.name
            }
            fn apply(&mut self, pairs: Vec<(Option<$crate::Gradient>, $crate::Variable)>) -> $crate::Result<()> {
                self.core.apply(&self.rule, pairs)
            }
            fn build(&mut self, vars: &[$crate::Variable]) -> $crate::Result<()> {
                self.core.build(&self.rule, &vars.iter().collect::<Vec<_>>())
            }
            fn variables(&self) -> Vec<$crate::Variable> {
                self.core.variables()
            }
            fn iterations(&self) -> u64 {
                self.core.iterations()
            }
            fn learning_rate(&self) -> f64 {
                self.core.learning_rate()
            }
            fn set_learning_rate(&mut self, lr: f64) -> $crate::Result<()> {
                self.core.set_learning_rate(lr)
            }
            fn finalize_variable_values(&self, vars: &[$crate::Variable]) -> $crate::Result<()> {
                self.core.finalize_variable_values(vars)
            }
            fn skipped(&self) -> &[String] {
                &self.core.skipped
            }
            fn apply_loss_scaled(
                &mut self,
                pairs: Vec<(Option<$crate::Gradient>, $crate::Variable)>,
                state: &$crate::optim::loss_scale::LossScaleState,
            ) -> $crate::Result<()> {
                self.core.apply_with(&self.rule, pairs, Some(state.clone()))
            }
        }
    };
}
pub(crate) use optimizer_common;

impl Core {
    /// The same settings under another name (before any slot exists).
    fn renamed(core: Core, name: &str) -> Core {
        Core {
            weight_decay: core.weight_decay,
            exclude_from_weight_decay: core.exclude_from_weight_decay,
            clip: core.clip,
            lazy: core.lazy,
            accumulate: core.accumulate,
            ema: core.ema,
            ..Core::with_name(name.to_string(), core.lr)
        }
    }
}
