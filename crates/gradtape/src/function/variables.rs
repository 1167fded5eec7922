//! Variables inside traces: reads and writes become graph nodes that refer
//! to the variable itself (captured by reference), so each run of the graph
//! reads the variable's value at that point and writes it in program order.
//!
//! During the trace a write is not applied: the new value becomes the
//! variable's *shadow* (see [`trace`](super::trace)), computed by applying
//! the same write to a scratch variable holding the current shadow, so the
//! write is validated (shapes, dtypes) when traced.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use super::trace;
use crate::autodiff::tape;
use crate::autodiff::variable::{Variable, Write};
use crate::error::Result;
use crate::ops::desc::{DynOp, Op, Outputs};
use crate::tensor::Tensor;

/// A read of a variable (its value at that point of the run).
pub(crate) struct ReadVariable(pub Variable);

impl DynOp for ReadVariable {
    fn name(&self) -> &'static str {
        "ReadVariable"
    }
    fn eval(&self, _: &[Tensor]) -> Result<Outputs> {
        Ok(smallvec::smallvec![self.0.read()])
    }
    fn stateful(&self) -> bool {
        true
    }
    fn writes(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "['{}']", self.0.name())
    }
}

/// A write to a variable.
pub(crate) struct WriteVariable(pub Variable, pub Write);

impl DynOp for WriteVariable {
    fn name(&self) -> &'static str {
        self.1.name()
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        self.1.apply(&self.0, inputs)?;
        Ok(Outputs::new())
    }
    fn stateful(&self) -> bool {
        true
    }
    fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.1 {
            Write::GradientDescent(lr) | Write::SparseGradientDescent(lr, _) => {
                write!(f, "['{}', lr={lr}]", self.0.name())
            }
            _ => write!(f, "['{}']", self.0.name()),
        }
    }
}

thread_local! {
    /// Set while a write is applied to a scratch variable for a shadow.
    static SHADOWING: Cell<bool> = const { Cell::new(false) };
}

/// Whether a variable write now goes to a shadow (a trace is active and
/// the write is not itself the computation of a shadow).
pub(crate) fn writes_traced() -> bool {
    trace::any() && !SHADOWING.with(Cell::get)
}

/// A scratch variable holding `v`'s value as the innermost trace sees it
/// (its shadow, else its value), named as `v`.
pub(crate) fn scratch_of(v: &Variable) -> Variable {
    let current = trace::shadow_of(v).unwrap_or_else(|| v.value_untraced());
    // (the tracer's own variable: not one the traced code makes)
    crate::scoped::with_flag(&SHADOWING, true, || {
        Variable::builder(current)
            .name(v.name())
            .trainable(v.trainable())
            .build()
    })
}

/// Runs `f`, which writes scratch variables, with writes applied directly
/// (not shadowed), recording paused and tapes hidden.
pub(crate) fn on_scratch<R>(f: impl FnOnce() -> R) -> R {
    trace::paused(|| tape::without_tapes(|| crate::scoped::with_flag(&SHADOWING, true, f)))
}

/// The hook at the top of every variable write: inside a trace the write
/// is recorded (when recording) and applied to the variable's shadow, and
/// `Some(result)` is returned; outside, `None` (the write goes ahead).
pub(crate) fn traced_write(v: &Variable, w: Write, args: &[&Tensor]) -> Option<Result<()>> {
    if !writes_traced() {
        return None;
    }
    let owned: Vec<Tensor> = args.iter().map(|t| (*t).clone()).collect();
    let scratch = scratch_of(v);
    if let Err(e) = on_scratch(|| w.apply(&scratch, &owned)) {
        return Some(Err(e));
    }
    trace::set_shadow(v, scratch.value_untraced());
    if trace::recording() {
        trace::record(Op::Dyn(Arc::new(WriteVariable(v.clone(), w))), args, &[]);
    }
    Some(Ok(()))
}

/// The hook in [`Variable::read`] while recording: the read becomes a node
/// whose output is `out` (an alias of the value the trace sees).
pub(crate) fn traced_read(v: &Variable, out: &Tensor) {
    trace::variable_read(v);
    trace::record(
        Op::Dyn(Arc::new(ReadVariable(v.clone()))),
        &[],
        std::slice::from_ref(out),
    );
}

/// The trace's handling of variables, installed into `autodiff::variable`
/// (which cannot name the trace) when a trace starts.
pub(crate) struct TracedVariables;

impl crate::autodiff::variable::VariableHook for TracedVariables {
    fn shadow(&self, v: &Variable) -> Option<Tensor> {
        trace::shadow_of(v)
    }
    fn read(&self, v: &Variable, out: &Tensor) {
        traced_read(v, out);
    }
    fn write(&self, v: &Variable, w: Write, args: &[&Tensor]) -> Option<Result<()>> {
        traced_write(v, w, args)
    }
    fn created(&self, _: &Variable) {
        if trace::any() && !SHADOWING.with(Cell::get) {
            trace::variable_created();
        }
    }
}
