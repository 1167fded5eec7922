//! Tracing: ops recorded into a graph as they run.
//!
//! A trace runs the user's closure *eagerly*, on the call's own arguments
//! (the example values), and, as an interpreter of the dispatch layer
//! (`crate::dispatch`), records every op into a [`Graph`]: the op's
//! descriptor, the values it read and the values it made.
//! Terms:
//!
//! - A tensor is **traced** when the trace knows it as a value: an input, a
//!   capture, or the output of a recorded node. Its id maps to the value.
//! - An op input the trace does not know is a **capture** if an enclosing
//!   trace knows it (a `cond` branch reading its function's values: it
//!   becomes an extra input of the branch), else a **constant** (a node that
//!   holds the tensor). A tensor made during the trace by a constructor
//!   (`Tensor::scalar`, `from_vec`, ...) is a legitimate constant; any other
//!   tensor made during the trace and unknown to it came from an op that
//!   bypassed the hook, and is an error rather than a silently frozen value.
//! - **Shadows**: variable writes inside a trace are recorded, not applied;
//!   the written value is kept as the variable's shadow, which later reads in
//!   the same trace (and in traces nested in it) see. The variable itself
//!   changes only when the finished graph runs.
//! - Every traced op is also recorded on the trace's own persistent tape, so
//!   that [`gradients`](crate::gradients) inside a trace can differentiate
//!   between any traced values, custom gradients included.
//! - Recording can be **paused** (running a nested graph to get its example
//!   outputs, computing a shadow): ops then run untraced, shadows still apply.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use super::graph::{Graph, Node, ValueId};
use crate::autodiff::gradient_tape::GradientTape;
use crate::autodiff::variable::Variable;
use crate::dispatch::{self, Call, Interpreter, Kind};
use crate::error::{Error, Result};
use crate::ops::desc::Op;
use crate::ops::rng_state::State as RngState;
use crate::tensor::{Tensor, TensorId};

/// One active trace.
pub(crate) struct Trace {
    pub(crate) state: RefCell<TraceState>,
    /// The trace this one is nested in (a branch or body inside a function).
    parent: Option<Rc<Trace>>,
    /// The trace's own tape, recording every traced op.
    pub(crate) tape: GradientTape,
    /// Whether only the graph is wanted: the example values of traced
    /// values are never read, so ops may give placeholders for them (see
    /// [`graph_only`]).
    graph_only: Cell<bool>,
    /// The generators the traced code advanced, with the key and counter
    /// each had before: put back when the trace ends, since the graph's
    /// runs make the draws (see [`note_rng`]).
    rngs: RefCell<Vec<(Arc<RngState>, u64, u64)>>,
}

/// What a trace has recorded so far.
#[derive(Default)]
pub(crate) struct TraceState {
    pub graph: Graph,
    /// tensor id -> value
    ids: FxHashMap<TensorId, ValueId>,
    /// tensors of enclosing traces, captured as the trailing inputs
    pub captures: Vec<Tensor>,
    /// variable handle -> value written during this trace
    shadows: FxHashMap<TensorId, Tensor>,
    /// the first failure; the trace ends with it
    pub error: Option<Error>,
    /// variables read, by handle (in order of first read)
    pub variables: Vec<Variable>,
    /// how many variables the traced code made (here or in a trace nested
    /// in this one)
    created: usize,
}

thread_local! {
    static STACK: RefCell<Vec<Rc<Trace>>> = const { RefCell::new(Vec::new()) };
    static PAUSED: Cell<usize> = const { Cell::new(0) };
    /// The first id that may belong to a tensor made during the outermost
    /// trace on this thread (ids increase within a thread).
    static WATERMARK: Cell<u64> = const { Cell::new(u64::MAX) };
    /// Constants made by constructors during the outermost trace.
    static CONSTS: RefCell<FxHashSet<TensorId>> = RefCell::new(FxHashSet::default());
}

/// Sets whether the trace listens to the dispatch layer (and observes the
/// tensors made) on this thread: a trace is active and not paused.
fn refresh() {
    let active = STACK.with(|s| !s.borrow().is_empty()) && PAUSED.with(Cell::get) == 0;
    dispatch::listen(Kind::Trace, active);
    crate::tensor::observe::observe(active);
}

/// Whether ops are being recorded into a trace.
#[inline(always)]
pub(crate) fn recording() -> bool {
    dispatch::listens(Kind::Trace)
}

/// Tracing as an interpreter of the dispatch layer, and as the observer of
/// the tensors made and read below it.
struct Traces;

impl Interpreter for Traces {
    fn process(&self, call: &Call<'_>) {
        // ops bound without a descriptor (custom gradients, variable reads)
        // are recorded by the trace its own way
        if let (Some(d), Some(inputs)) = (call.descriptor(), call.inputs.tensors()) {
            let op = d.0.downcast::<Op>().expect("a descriptor is an ops::desc::Op");
            record(*op, inputs, call.outputs);
        }
    }

    fn suspend(&self, on: bool) {
        if on {
            PAUSED.with(|p| p.set(p.get() + 1));
        } else {
            PAUSED.with(|p| p.set(p.get().saturating_sub(1)));
        }
        refresh();
    }
}

impl crate::tensor::observe::Observer for Traces {
    fn constant(&self, t: &Tensor) {
        constant_made(t);
    }
    fn filled_like(&self, like: &Tensor, value: f64, t: &Tensor) {
        made_like(like, value, t);
    }
    fn unreadable(&self, t: &Tensor) -> bool {
        is_traced_value(t)
    }
    fn placeholder(&self, t: &Tensor) -> bool {
        recording() && current().is_some_and(|tr| tr.graph_only.get()) && is_traced_value(t)
    }
}

/// The innermost trace, if any (recording or paused).
pub(crate) fn current() -> Option<Rc<Trace>> {
    STACK.with(|s| s.borrow().last().cloned())
}

/// Declares that the innermost trace is run for its graph only: the
/// example values of its traced values (those of its arguments and what is
/// computed from them) are never read, neither by the traced code (reading
/// them is an error anyway) nor by its caller, which drops the example
/// outputs. Ops whose cost grows faster than their output's size (products)
/// then give zeros of the right shape for a result computed from such a
/// value, instead of computing it. Nested traces are not affected.
pub(crate) fn graph_only() {
    if let Some(t) = current() {
        t.graph_only.set(true);
    }
}

/// Runs `f` with recording paused (shadows still apply).
pub(crate) fn paused<T>(f: impl FnOnce() -> T) -> T {
    dispatch::paused(Kind::Trace, f)
}

/// Notes a tensor made by a constructor, so that a trace takes it for a
/// constant.
fn constant_made(t: &Tensor) {
    if recording() {
        CONSTS.with(|c| c.borrow_mut().insert(t.id()));
    }
}

/// Notes `t`, `value` everywhere in the shape and dtype of `like`: a trace
/// records it as a node of `like` (so the shape follows it when the graph
/// runs).
fn made_like(like: &Tensor, value: f64, t: &Tensor) {
    if recording() {
        let op = Op::Shape(crate::ops::desc::ShapeOp::FullLike(crate::ops::desc::F64(value)));
        record(op, &[like], std::slice::from_ref(t));
    }
}

impl Trace {
    /// The value of `t` in this trace, capturing it from an enclosing trace
    /// when one knows it; `None` if no trace on the chain knows it.
    fn known(&self, t: &Tensor) -> Option<ValueId> {
        if let Some(&v) = self.state.borrow().ids.get(&t.id()) {
            return Some(v);
        }
        let parent = self.parent.as_ref()?;
        parent.known(t)?;
        let mut st = self.state.borrow_mut();
        let v = st.graph.add_value(t.dtype(), t.shape());
        st.graph.inputs.push(v);
        st.captures.push(t.clone());
        st.ids.insert(t.id(), v);
        drop(st);
        self.tape.watch(t);
        Some(v)
    }

    /// The value of an op input: known, captured, or a new constant.
    fn value_of(&self, t: &Tensor) -> ValueId {
        if let Some(v) = self.known(t) {
            return v;
        }
        let made_here = t.id().0 >= WATERMARK.with(Cell::get);
        let registered = CONSTS.with(|c| c.borrow().contains(&t.id()));
        let mut st = self.state.borrow_mut();
        if made_here && !registered && st.error.is_none() {
            st.error = Some(Error::invalid(
                "function",
                format!(
                    "a {} tensor of shape {:?} was computed inside the traced function by an op that \
                     bypasses tracing; its value would be frozen into the graph",
                    t.dtype(),
                    t.shape()
                ),
            ));
        }
        let v = st.graph.add_value(t.dtype(), t.shape());
        st.graph.nodes.push(Node {
            op: Op::Const(t.clone()),
            inputs: SmallVec::new(),
            outputs: smallvec::smallvec![v],
            site: None,
        });
        st.ids.insert(t.id(), v);
        drop(st);
        self.tape.watch(t);
        v
    }

    /// Adds a node for `op` reading `inputs` and making `outputs`.
    fn push(&self, op: Op, inputs: &[&Tensor], outputs: &[Tensor]) {
        let ins: SmallVec<[ValueId; 2]> = inputs.iter().map(|t| self.value_of(t)).collect();
        let mut st = self.state.borrow_mut();
        if let Op::Opaque(name) = op
            && st.error.is_none()
        {
            st.error = Some(Error::invalid(name, "this op cannot be traced into a graph yet"));
        }
        let mut outs: SmallVec<[ValueId; 1]> = SmallVec::new();
        for o in outputs {
            let v = st.graph.add_value(o.dtype(), o.shape());
            st.ids.insert(o.id(), v);
            outs.push(v);
        }
        st.graph.nodes.push(Node {
            op,
            inputs: ins,
            outputs: outs,
            site: crate::dispatch::site::current(),
        });
    }

    /// Whether value `v` is a constant node's output.
    fn is_constant(&self, v: ValueId) -> bool {
        self.state
            .borrow()
            .graph
            .nodes
            .iter()
            .any(|n| matches!(n.op, Op::Const(_)) && n.outputs.contains(&v))
    }

    /// The shadow of a variable in this trace or an enclosing one.
    fn shadow(&self, handle: TensorId) -> Option<Tensor> {
        if let Some(t) = self.state.borrow().shadows.get(&handle) {
            return Some(t.clone());
        }
        self.parent.as_ref()?.shadow(handle)
    }

    /// Whether `t` is a value of this trace or of one it is nested in.
    fn is_traced(&self, t: &Tensor) -> bool {
        self.state.borrow().ids.contains_key(&t.id()) || self.parent.as_ref().is_some_and(|p| p.is_traced(t))
    }
}

/// Whether `t` is a value a recording trace knows (not a constant): its
/// value is known only when the graph runs.
fn is_traced_value(t: &Tensor) -> bool {
    recording()
        && current().is_some_and(|tr| {
            tr.is_traced(t) && !tr.state.borrow().ids.get(&t.id()).is_some_and(|&v| tr.is_constant(v))
        })
}

/// Records an op into the innermost trace (the hook `bind` calls while
/// [`recording`]).
pub(crate) fn record(op: Op, inputs: &[&Tensor], outputs: &[Tensor]) {
    if let Some(t) = current() {
        t.push(op, inputs, outputs);
    }
}

/// The value a variable has for the innermost trace (its shadow), if it was
/// written during a trace; `None` when no trace is active.
#[inline]
pub(crate) fn shadow_of(v: &Variable) -> Option<Tensor> {
    if STACK.with(|s| s.borrow().is_empty()) {
        return None;
    }
    current()?.shadow(v.handle())
}

/// Whether any trace is active (recording or not): variable writes go to
/// shadows.
#[inline]
pub(crate) fn any() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

/// Notes that the traced code (or a graph run while tracing) is about to
/// advance the generator `rng`: every trace on this thread's stack that has
/// not noted it yet keeps its key and counter, and puts them back when it
/// ends. A trace is a dry run: the draws it made at trace time are made
/// again by its graph, at each run, from where the generator stands then
/// (so a traced call draws what the eager call would, and advances the
/// generator as far). Variable writes are kept apart the same way (as
/// shadows).
pub(crate) fn note_rng(rng: &Arc<RngState>) {
    STACK.with(|s| {
        for t in s.borrow().iter().rev() {
            let mut kept = t.rngs.borrow_mut();
            if kept.iter().any(|(r, ..)| Arc::ptr_eq(r, rng)) {
                // (the traces around it noted it when it did)
                break;
            }
            let (key, counter) = rng.get();
            kept.push((rng.clone(), key, counter));
        }
    });
}

/// [`note_rng`] where a trace is on this thread's stack (the hook the
/// generators call: `ops::rng_state::install_note`).
fn note_if_tracing(rng: &Arc<RngState>) {
    if any() {
        note_rng(rng);
    }
}

/// Sets a variable's shadow in the innermost trace.
pub(crate) fn set_shadow(v: &Variable, value: Tensor) {
    if let Some(t) = current() {
        t.state.borrow_mut().shadows.insert(v.handle(), value);
    }
}

/// Notes a read of `v` in the innermost trace (its tape watches it, so that
/// `gradients` can reach variables).
///
/// The read is noted in every enclosing trace too: a variable read only in
/// a `cond` branch or a `while_loop` body is read by the function around
/// it, whose gradient must reach it.
pub(crate) fn variable_read(v: &Variable) {
    let mut next = current();
    while let Some(t) = next {
        let mut st = t.state.borrow_mut();
        if !st.variables.iter().any(|w| w.handle() == v.handle()) {
            st.variables.push(v.clone());
        }
        drop(st);
        if v.dtype().is_differentiable() {
            t.tape.watch(v);
        }
        next = t.parent.clone();
    }
}

/// Notes that the traced code made a variable, in the innermost trace and
/// every enclosing one (a variable made in a `cond` branch is made by the
/// function around it).
pub(crate) fn variable_created() {
    let mut next = current();
    while let Some(t) = next {
        t.state.borrow_mut().created += 1;
        next = t.parent.clone();
    }
}

/// What a finished trace gives.
pub(crate) struct Traced<T> {
    /// The recorded graph (inputs: the arguments, then the captures;
    /// outputs: the returned tensors).
    pub graph: Graph,
    /// The tensors of enclosing traces it captured, in input order.
    pub captures: Vec<Tensor>,
    /// The variables it read.
    pub variables: Vec<Variable>,
    /// What the closure returned (example values).
    pub value: T,
    /// How many variables the traced code made.
    pub created: usize,
}

/// Traces `f` on `args`: each argument gets a fresh id (an alias sharing
/// its storage) that the graph knows as an input, and `f` receives the
/// aliases; `extras` are tensors (not aliased) known as the inputs after
/// them. `f` returns its result with the flat list of tensors to return.
/// Nested in the current trace (whose values it may capture, as further
/// inputs) when `nested`.
pub(crate) fn trace<T>(
    args: &[Tensor],
    extras: &[Tensor],
    nested: bool,
    f: impl FnOnce(&[Tensor]) -> Result<(T, Vec<Tensor>)>,
) -> Result<Traced<T>> {
    dispatch::register(Kind::Trace, &Traces);
    crate::tensor::observe::install(&Traces);
    crate::autodiff::variable::install_hook(&super::variables::TracedVariables);
    crate::ops::rng_state::install_note(note_if_tracing);
    let parent = if nested { current() } else { None };
    let tape = GradientTape::internal();
    let trace = Rc::new(Trace {
        state: RefCell::new(TraceState::default()),
        parent,
        tape,
        graph_only: Cell::new(false),
        rngs: RefCell::new(Vec::new()),
    });
    let aliases: Vec<Tensor> = args.iter().map(Tensor::alias).collect();
    {
        let mut st = trace.state.borrow_mut();
        for a in aliases.iter().chain(extras) {
            let v = st.graph.add_value(a.dtype(), a.shape());
            st.graph.inputs.push(v);
            st.ids.insert(a.id(), v);
        }
    }
    for a in aliases.iter().chain(extras) {
        trace.tape.watch(a);
    }
    let outermost = !any();
    /// Restores the thread's trace state when the trace ends (or unwinds).
    struct Pop {
        outermost: bool,
        saved_pause: usize,
        trace: Rc<Trace>,
    }
    impl Drop for Pop {
        fn drop(&mut self) {
            STACK.with(|s| s.borrow_mut().pop());
            for (rng, key, counter) in self.trace.rngs.take() {
                rng.set(key, counter);
            }
            if self.outermost {
                WATERMARK.with(|w| w.set(u64::MAX));
                CONSTS.with(|c| c.borrow_mut().clear());
            }
            PAUSED.with(|p| p.set(self.saved_pause));
            refresh();
        }
    }
    if outermost {
        WATERMARK.with(|w| w.set(TensorId::fresh().0));
    }
    // the trace's own ops are recorded even if the caller paused recording
    let saved_pause = PAUSED.with(|p| p.replace(0));
    STACK.with(|s| s.borrow_mut().push(trace.clone()));
    refresh();
    let result = {
        let _pop = Pop {
            outermost,
            saved_pause,
            trace: trace.clone(),
        };
        let _rec = trace.tape.enter()?;
        f(&aliases).map(|(value, outs)| {
            // returned tensors the trace does not know become constants (or captures)
            let ids: Vec<ValueId> = outs.iter().map(|t| trace.value_of(t)).collect();
            (value, ids)
        })
    };
    let (value, outputs) = result?;
    let mut st = trace.state.borrow_mut();
    if let Some(e) = st.error.take() {
        return Err(e);
    }
    let mut graph = std::mem::take(&mut st.graph);
    graph.outputs = outputs;
    Ok(Traced {
        graph,
        captures: std::mem::take(&mut st.captures),
        variables: std::mem::take(&mut st.variables),
        value,
        created: st.created,
    })
}
