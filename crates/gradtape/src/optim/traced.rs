//! One optimizer step as a value, so that it can run now or become a graph
//! node.
//!
//! [`Updates`] holds what an `apply_gradients` call writes once its
//! gradients are ready (clipped): the rule, the learning rate (a schedule
//! is evaluated at the step counter when the update runs), each variable
//! with its slots and weight decay, and the step counter. [`apply`] runs it:
//!
//! - outside a traced function, at once (the fused in-place kernels);
//! - inside one, as every variable write there is (see
//!   [`function::variables`](crate::function)): the update is computed on
//!   scratch copies of the variables' *shadows* (so later reads in the same
//!   trace see the new values, and shapes are checked while tracing), and
//!   an `ApplyUpdates` node is recorded whose inputs are the gradients. When
//!   the graph runs, the node reads the step counter, runs the same kernels
//!   on the variables and their slots, and advances the counter: the update
//!   happens at each call, in program order, and the learning rate and
//!   Adam's bias correction follow the step counter.

use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use smallvec::SmallVec;

use super::kernel::Step;
use super::loss_scale::{all_finite, unscale, LossScaleState};
use super::schedule::LearningRate;
use super::Rule;
use crate::autodiff::gradient::{Gradient, IndexedSlices};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::function::trace;
use crate::function::variables::{on_scratch, scratch_of, writes_traced};
use crate::ops::desc::{DynOp, Op, Outputs};
use crate::tensor::Tensor;

/// The current value of a shared learning rate.
pub(crate) fn rate(lr: &RwLock<LearningRate>) -> RwLockReadGuard<'_, LearningRate> {
    lr.read().unwrap_or_else(|e| e.into_inner())
}

/// A variable an update writes: with its slots and its weight decay.
#[derive(Clone)]
pub(crate) struct Target {
    pub var: Variable,
    pub slots: Vec<Variable>,
    /// The weight decay for this variable (0: none).
    pub wd: f64,
    /// Its gradient accumulator (with gradient accumulation).
    pub acc: Option<Variable>,
    /// Its moving average (with `use_ema`).
    pub average: Option<Variable>,
}

/// Keras's gradient accumulation: the variables are updated at every
/// `steps`-th call, with the mean of the gradients since the last update,
/// clipped then.
#[derive(Clone, Copy)]
pub(crate) struct Accumulation {
    pub steps: u64,
    pub clip: super::Clip,
}

/// Dynamic loss scaling inside the update ([`LossScaleOptimizer`]'s
/// traced path): the gradients arrive scaled; a non-finite one skips the
/// step, else they are unscaled and clipped (`clip`, unless accumulation
/// clips their mean) before the update.
///
/// [`LossScaleOptimizer`]: super::LossScaleOptimizer
#[derive(Clone)]
pub(crate) struct LossScaled {
    pub state: LossScaleState,
    pub clip: super::Clip,
}

/// One optimizer step over some variables, gradients aside.
#[derive(Clone)]
pub(crate) struct Updates {
    /// The optimizer's name (for listings).
    pub name: String,
    pub rule: Arc<dyn Rule + Send + Sync>,
    /// the optimizer's rate, read when the update runs
    pub lr: Arc<RwLock<LearningRate>>,
    pub lazy: bool,
    /// The step counter (an `i64` scalar variable).
    pub iterations: Variable,
    pub targets: Vec<Target>,
    /// With gradient accumulation: when to update, and the clipping then.
    pub accumulate: Option<Accumulation>,
    /// The moving averages' momentum (with `use_ema`).
    pub ema: Option<f64>,
    /// With dynamic loss scaling.
    pub loss_scale: Option<LossScaled>,
}

/// The value of a step counter as the innermost trace sees it (its
/// shadow), else its stored value; never recorded.
pub(crate) fn counter(v: &Variable) -> u64 {
    let t = trace::shadow_of(v).unwrap_or_else(|| v.value_untraced());
    t.to_scalar::<i64>().map_or(0, |i| i.max(0) as u64)
}

impl Updates {
    /// Runs the step on the variables now: with loss scaling, skipped or
    /// unscaled first.
    fn run_now(&self, grads: &[Gradient]) -> Result<()> {
        let Some(ls) = &self.loss_scale else {
            return self.run_unscaled(grads);
        };
        // (tensor ops on the values, none of them recorded)
        let unscaled = crate::function::trace::paused(|| {
            crate::autodiff::tape::without_tapes(|| {
                for g in grads {
                    if !all_finite(g)? {
                        return Ok(None);
                    }
                }
                let scale = ls.state.scale();
                let g = grads.iter().map(|g| unscale(g.clone(), scale)).collect::<Result<_>>()?;
                let clip = if self.accumulate.is_some() {
                    super::Clip::None
                } else {
                    ls.clip
                };
                super::clip_all(clip, g).map(Some)
            })
        })?;
        if let Some(g) = &unscaled {
            self.run_unscaled(g)?;
        }
        ls.state.after(unscaled.is_some())
    }

    /// The step with gradients as they are.
    fn run_unscaled(&self, grads: &[Gradient]) -> Result<()> {
        let it = counter(&self.iterations);
        let Some(acc) = self.accumulate else {
            return self.update_now(grads, it, it);
        };
        // (tensor ops on the values, none of them recorded)
        crate::function::trace::paused(|| {
            crate::autodiff::tape::without_tapes(|| {
                let sums: Vec<Tensor> = grads
                    .iter()
                    .zip(&self.targets)
                    .map(|(g, t)| {
                        let a = t.acc.as_ref().ok_or_else(|| {
                            Error::invalid("apply_gradients", "internal: a gradient accumulator is missing")
                        })?;
                        let g = match g {
                            Gradient::Dense(d) => d.clone(),
                            Gradient::Sparse(s) => s.to_dense()?,
                        };
                        a.read().add(&g)
                    })
                    .collect::<Result<_>>()?;
                if !(it + 1).is_multiple_of(acc.steps) {
                    for (s, t) in sums.iter().zip(&self.targets) {
                        t.acc.as_ref().expect("checked").assign(s)?;
                    }
                    return self.iterations.assign(&Tensor::scalar(it as i64 + 1));
                }
                let mean: Vec<Gradient> = sums
                    .iter()
                    .map(|s| Ok(Gradient::Dense(s.div_scalar(acc.steps as f64)?)))
                    .collect::<Result<_>>()?;
                let mean = super::clip_all(acc.clip, mean)?;
                self.update_now(&mean, it, it / acc.steps)?;
                for t in &self.targets {
                    let a = t.acc.as_ref().expect("checked");
                    a.assign(&a.read().zeros_like())?;
                }
                Ok(())
            })
        })
    }

    /// The update with `grads` at call `it` (the schedule's step) and
    /// update `n + 1`, then the call counter advanced.
    fn update_now(&self, grads: &[Gradient], it: u64, n: u64) -> Result<()> {
        self.update_scaled(grads, &[], it, n)
    }

    /// [`update_now`](Self::update_now) with gradient `i` to be multiplied
    /// by `scales[i]` first where that is `Some` (missing entries: `None`).
    fn update_scaled(&self, grads: &[Gradient], scales: &[Option<f64>], it: u64, n: u64) -> Result<()> {
        let lr = rate(&self.lr).at(it);
        // a NaN or infinite rate (a schedule's 0/0, a typo) or decay would
        // turn every weight into NaN or ±inf without a word
        if !lr.is_finite() {
            return Err(Error::invalid(
                "apply_gradients",
                format!(
                    "{}: the learning rate at step {it} is {lr}; it must be finite",
                    self.name
                ),
            ));
        }
        if let Some(t) = self.targets.iter().find(|t| !t.wd.is_finite()) {
            return Err(Error::invalid(
                "apply_gradients",
                format!(
                    "{}: the weight decay of '{}' is {}; it must be finite",
                    self.name,
                    t.var.name(),
                    t.wd
                ),
            ));
        }
        // (the host updates collected, then run in one pass: see `batch`)
        super::batch::batched(|| {
            for (i, (g, t)) in grads.iter().zip(&self.targets).enumerate() {
                let step = Step {
                    lr,
                    t: (n + 1) as f64,
                    wd: t.wd,
                    lazy: self.lazy,
                    grad_scale: scales
                        .get(i)
                        .copied()
                        .flatten()
                        .or_else(|| super::kernel::forced_scale().filter(|_| matches!(g, Gradient::Dense(_)))),
                };
                self.rule.update(&step, &t.var, &t.slots, g)?;
            }
            Ok(())
        })?;
        if let Some(ema) = self.ema {
            // Keras's: the first update copies the variables
            let m = if n == 0 { 0.0 } else { ema };
            crate::function::trace::paused(|| {
                crate::autodiff::tape::without_tapes(|| {
                    for t in &self.targets {
                        if let Some(a) = &t.average {
                            a.assign(&a.read().mul_scalar(m)?.add(&t.var.read().mul_scalar(1.0 - m)?)?)?;
                        }
                    }
                    Ok(())
                })
            })?;
        }
        self.iterations.assign(&Tensor::scalar(it as i64 + 1))
    }

    /// Every variable the step writes: the targets, their slots, the
    /// counter, the loss scale's.
    fn written(&self) -> impl Iterator<Item = &Variable> {
        let scaling = self
            .loss_scale
            .iter()
            .flat_map(|l| [&l.state.scale, &l.state.good_steps]);
        self.targets
            .iter()
            .flat_map(|t| std::iter::once(&t.var).chain(&t.slots).chain(&t.acc).chain(&t.average))
            .chain(std::iter::once(&self.iterations))
            .chain(scaling)
    }

    /// The same step on scratch copies of the variables' current shadows.
    fn on_shadows(&self) -> Updates {
        Updates {
            iterations: scratch_of(&self.iterations),
            targets: self
                .targets
                .iter()
                .map(|t| Target {
                    var: scratch_of(&t.var),
                    slots: t.slots.iter().map(scratch_of).collect(),
                    wd: t.wd,
                    acc: t.acc.as_ref().map(scratch_of),
                    average: t.average.as_ref().map(scratch_of),
                })
                .collect(),
            loss_scale: self.loss_scale.as_ref().map(|l| LossScaled {
                state: l
                    .state
                    .with_variables(scratch_of(&l.state.scale), scratch_of(&l.state.good_steps)),
                clip: l.clip,
            }),
            ..self.clone()
        }
    }
}

/// Applies `updates` with `grads` (one per target, checked by the caller):
/// now, or inside a trace as a recorded node (see the [module docs](self)).
pub(crate) fn apply(updates: &Arc<Updates>, grads: &[Gradient]) -> Result<()> {
    if !writes_traced() {
        return updates.run_now(grads);
    }
    let scratch = updates.on_shadows();
    on_scratch(|| scratch.run_now(grads))?;
    for (real, s) in updates.written().zip(scratch.written()) {
        trace::set_shadow(real, s.value_untraced());
    }
    if trace::recording() {
        let mut inputs: Vec<&Tensor> = Vec::with_capacity(grads.len());
        let mut sparse = Vec::with_capacity(grads.len());
        for g in grads {
            match g {
                Gradient::Dense(t) => {
                    inputs.push(t);
                    sparse.push(None);
                }
                Gradient::Sparse(s) => {
                    inputs.extend([s.values(), s.indices()]);
                    sparse.push(Some(s.dense_shape().to_vec()));
                }
            }
        }
        let node = ApplyUpdates {
            updates: updates.clone(),
            sparse,
            scaled: Vec::new(),
        };
        trace::record(Op::Dyn(Arc::new(node)), &inputs, &[]);
    }
    Ok(())
}

/// The graph node of an optimizer step: inputs are the gradients (a dense
/// one as one value, a sparse one as its values and indices), then, after
/// the compiler's `scale_into_update` pass, one scalar per input marked in
/// `scaled`: that input's factor. A global-norm clipping's `g · s` is then
/// made by the update loop as it reads `g` (see `kernel::Step::grad_scale`),
/// where the `Mul` node wrote every clipped gradient out and the update
/// read it back: one pass over every gradient fewer, the same bits.
struct ApplyUpdates {
    updates: Arc<Updates>,
    /// Per gradient, its dense shape if it is sparse.
    sparse: Vec<Option<Vec<usize>>>,
    /// Per input (before the factors), whether a factor follows for it
    /// (empty: none).
    scaled: Vec<bool>,
}

impl ApplyUpdates {
    /// How many inputs the gradients take.
    fn gradient_inputs(&self) -> usize {
        self.sparse.iter().map(|s| if s.is_some() { 2 } else { 1 }).sum()
    }

    /// Whether input `i` is a dense gradient of an `f32` or `f64` variable.
    fn dense_float_input(&self, i: usize) -> bool {
        let mut at = 0;
        for (s, t) in self.sparse.iter().zip(&self.updates.targets) {
            if at == i {
                return s.is_none() && matches!(t.var.dtype(), crate::DType::F32 | crate::DType::F64);
            }
            at += if s.is_some() { 2 } else { 1 };
        }
        false
    }
}

impl DynOp for ApplyUpdates {
    fn name(&self) -> &'static str {
        "ApplyUpdates"
    }

    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        const OP: &str = "ApplyUpdates";
        let n = self.gradient_inputs();
        let wanted = n + self.scaled.iter().filter(|&&s| s).count();
        if inputs.len() != wanted {
            return Err(Error::invalid(
                OP,
                format!("got {} inputs, expected {wanted} ({n} for the gradients)", inputs.len()),
            ));
        }
        let (inputs, factors) = inputs.split_at(n);
        // per input, its factor
        let mut by_input: SmallVec<[Option<f64>; 8]> = SmallVec::from_elem(None, n);
        let marked = self.scaled.iter().enumerate().filter(|&(_, &s)| s).map(|(i, _)| i);
        for (i, f) in marked.zip(factors) {
            if f.rank() != 0 {
                return Err(Error::invalid(
                    OP,
                    format!("the factor of input {i} has shape {:?}; it must be a scalar", f.shape()),
                ));
            }
            by_input[i] = Some(f.f64_values(OP)?[0]);
        }
        let mut ins = inputs.iter();
        let mut next = || ins.next().cloned().ok_or_else(|| Error::invalid(OP, "too few inputs"));
        let mut grads: SmallVec<[Gradient; 8]> = SmallVec::new();
        for (shape, t) in self.sparse.iter().zip(&self.updates.targets) {
            let g = match shape {
                None => Gradient::Dense(next()?),
                Some(s) => Gradient::Sparse(IndexedSlices::new(next()?, next()?, s)?),
            };
            // the graph's values keep their traced shapes; check anyway,
            // the kernels index the gradient by the variable's elements
            let want = t.var.shape();
            if g.shape() != want.as_slice() || g.dtype() != t.var.dtype() {
                return Err(Error::VariableMismatch {
                    op: OP,
                    name: t.var.name().to_string(),
                    expected: want,
                    expected_dtype: t.var.dtype(),
                    got: g.shape().to_vec(),
                    got_dtype: g.dtype(),
                });
            }
            grads.push(g);
        }
        if by_input.iter().all(Option::is_none) {
            apply(&self.updates, &grads)?;
            return Ok(Outputs::new());
        }
        // per gradient, its factor (inputs of dense gradients only: see
        // `scalable_input`)
        let mut at = 0;
        let mut scales: SmallVec<[Option<f64>; 8]> = SmallVec::new();
        for s in &self.sparse {
            scales.push(by_input[at]);
            at += if s.is_some() { 2 } else { 1 };
        }
        let plain = self.updates.loss_scale.is_none() && self.updates.accumulate.is_none() && !writes_traced();
        if plain {
            // (`run_now` without loss scaling, `run_unscaled` without
            // accumulation)
            let it = counter(&self.updates.iterations);
            self.updates.update_scaled(&grads, &scales, it, it)?;
        } else {
            // the products first, as the `Mul` nodes made them
            let scaled = crate::function::trace::paused(|| {
                crate::autodiff::tape::without_tapes(|| {
                    grads
                        .iter()
                        .zip(&scales)
                        .map(|(g, s)| match (g, s) {
                            (Gradient::Dense(d), Some(c)) => {
                                Ok(Gradient::Dense(d.mul(&Tensor::scalar(*c).cast(d.dtype())?)?))
                            }
                            _ => Ok(g.clone()),
                        })
                        .collect::<Result<SmallVec<[Gradient; 8]>>>()
                })
            })?;
            apply(&self.updates, &scaled)?;
        }
        Ok(Outputs::new())
    }

    fn scalable_input(&self, i: usize) -> bool {
        self.scaled.is_empty() && self.dense_float_input(i)
    }

    fn with_input_scales(&self, scaled: &[bool]) -> Option<Arc<dyn DynOp>> {
        let ok = self.scaled.is_empty()
            && scaled.len() == self.gradient_inputs()
            && scaled.iter().enumerate().all(|(i, &s)| !s || self.dense_float_input(i));
        ok.then(|| {
            Arc::new(ApplyUpdates {
                updates: self.updates.clone(),
                sparse: self.sparse.clone(),
                scaled: scaled.to_vec(),
            }) as Arc<dyn DynOp>
        })
    }

    fn stateful(&self) -> bool {
        true
    }

    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.updates.targets.iter().map(|t| t.var.name()).collect();
        write!(f, "['{}', vars={names:?}", self.updates.name)?;
        match self.scaled.iter().filter(|&&s| s).count() {
            0 => write!(f, "]"),
            k => write!(f, ", scaled={k}]"),
        }
    }
}
