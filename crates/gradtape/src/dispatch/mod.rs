//! The dispatch layer: the one point every op passes, and the interpreters
//! that watch ops go by.
//!
//! Terms, after JAX's autodidax:
//!
//! - An op runs **eagerly**: its kernel has already computed the output when
//!   the op **binds** it here ([`bind`] and its variants). The op hands over
//!   what a watcher may need: its name, a [`Describe`] value (the descriptor
//!   a trace stores, built only when asked), its **operands** (tensors, or
//!   variable handles), its outputs, and a maker of its **rule** (the VJP
//!   closure, built at most once and only when asked; [`VjpFn`]), and
//!   optionally a **JVP rule**.
//! - An **interpreter** is a transformation that watches ops: the trace
//!   (`function::trace`, which records a graph), the tape (`autodiff::tape`,
//!   which records rules for reverse mode) and forward mode
//!   (`autodiff::forward`, which computes tangents). Each implements
//!   [`Interpreter`] and **registers** itself here under its [`Kind`] the
//!   first time it becomes active; this layer never names them.
//! - An interpreter **listens** on a thread while it has work there (a tape
//!   entered, a trace recording, an accumulator active): one bit per kind in
//!   a thread-local mask, which the interpreter sets and clears. [`bind`]
//!   reads the mask once: when nothing listens an op costs that one read and
//!   nothing else (no rule, no descriptor, no allocation).
//! - When something listens, the op becomes a [`Call`] offered to the
//!   listening interpreters in the order of [`Kind`]: the trace first (so a
//!   tape's or accumulator's own work on an output finds it known), then
//!   the tapes, then forward mode (a tangent computation that uses an output
//!   must find it already recorded on the tapes: reverse over forward).
//!
//! Departure from autodidax: interpreters do not form one stack of levels
//! here. Their *kinds* are ordered as above; the nesting within a kind
//! (tapes and accumulators by entry, traces by nesting) and across the two
//! differentiating kinds (an accumulator hides the tapes entered after it)
//! is state each interpreter keeps, as TensorFlow keeps its tape and
//! accumulator stacks. What this layer fixes is the single entry point, the
//! single check, and that a transformation plugs in without the ops or this
//! layer knowing it.
//!
//! Layering: this module sits above `tensor` and `kernels` and below `ops`;
//! it imports nothing above it. The descriptor a trace stores is an `ops`
//! type, so it crosses this layer type-erased ([`Descriptor`]).

pub(crate) mod device;
mod rule;
pub(crate) mod site;

use std::any::Any;
use std::cell::Cell;
use std::sync::OnceLock;

pub(crate) use rule::pass_through;
pub use rule::{vjp, Gradient, Grads, IndexedSlices, SparseClosure, SparseGrads, VjpClosure, VjpFn};

use crate::error::Result;
use crate::tensor::{DType, Tensor, TensorId};

/// A JVP rule: `(input tangents, None = zero; the op's output) -> output
/// tangent`. At least one tangent is `Some`. The result may have a shape
/// that broadcasts to the output's.
pub(crate) type JvpRule<'a> = dyn Fn(&[Option<Tensor>], &Tensor) -> Result<Tensor> + 'a;

/// An op's name, read on every bind, and its descriptor, made only when an
/// interpreter asks for it (a trace).
pub(crate) trait Describe {
    /// The op's name as tapes record it (`"Mul"`, `"MatMul"`, ...).
    fn name(&self) -> &'static str;
    /// The descriptor a trace stores.
    fn descriptor(&self) -> Descriptor;
}

/// A descriptor crossing this layer without its type (an `ops::desc::Op`,
/// which a trace downcasts).
pub(crate) struct Descriptor(pub Box<dyn Any>);

/// The kinds of interpreter, in the order they see each op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Graph tracing (`function`).
    Trace = 0,
    /// Gradient tapes (reverse mode).
    Tape = 1,
    /// Forward accumulators (forward mode).
    Forward = 2,
}

const KINDS: usize = 3;

/// A transformation that watches ops as they bind.
pub(crate) trait Interpreter: Sync {
    /// Sees one op that ran (only while its kind listens on this thread).
    fn process(&self, call: &Call<'_>);
    /// Pauses (`true`) or resumes (`false`) the interpreter on this thread,
    /// for [`paused`]; pauses nest.
    fn suspend(&self, on: bool);
    /// For the tapes: whether the one active tape is a one-shot tape of the
    /// user's that watches `id` (see [`one_shot_tape_alone_watches`]).
    fn one_shot_alone_watches(&self, _id: TensorId) -> bool {
        false
    }
}

/// Whether the tapes alone listen on this thread, and the one active tape
/// is a one-shot tape of the user's that watches `id`: an op reading `id`
/// about to bind has its rule run once, by that tape's backward pass, and
/// any interpreter that records that pass was entered after the op ran.
/// An op may then keep for its rule a value it would otherwise recompute
/// there from its input (`ops::math::gelu_slope`).
pub(crate) fn one_shot_tape_alone_watches(id: TensorId) -> bool {
    LISTENING.with(Cell::get) == 1 << Kind::Tape as u8
        && REGISTERED[Kind::Tape as usize]
            .get()
            .is_some_and(|t| t.one_shot_alone_watches(id))
}

static REGISTERED: [OnceLock<&'static dyn Interpreter>; KINDS] = [const { OnceLock::new() }; KINDS];

thread_local! {
    /// Bit `k` set: interpreters of kind `k` listen on this thread.
    static LISTENING: Cell<u8> = const { Cell::new(0) };
}

/// Registers the interpreter of `kind` (the first registration stands).
pub(crate) fn register(kind: Kind, interpreter: &'static dyn Interpreter) {
    let _ = REGISTERED[kind as usize].set(interpreter);
}

/// Sets whether interpreters of `kind` listen on this thread.
#[inline]
pub(crate) fn listen(kind: Kind, on: bool) {
    LISTENING.with(|l| {
        let bit = 1u8 << kind as u8;
        l.set(if on { l.get() | bit } else { l.get() & !bit })
    });
}

/// Whether any interpreter listens on this thread: the one check an op
/// makes before doing anything for them.
#[inline(always)]
pub(crate) fn listening() -> bool {
    LISTENING.with(Cell::get) != 0
}

/// Whether interpreters of `kind` listen on this thread.
#[inline(always)]
pub(crate) fn listens(kind: Kind) -> bool {
    LISTENING.with(Cell::get) & (1 << kind as u8) != 0
}

/// Whether a tape or a forward accumulator listens on this thread (an op
/// with a rule would be differentiated).
#[inline(always)]
pub(crate) fn differentiating() -> bool {
    LISTENING.with(Cell::get) & (1 << Kind::Tape as u8 | 1 << Kind::Forward as u8) != 0
}

/// Runs `f` with the interpreter of `kind` paused on this thread (the
/// pausing compiled once, see [`scoped::once`](crate::scoped::once)).
pub(crate) fn paused<T>(kind: Kind, f: impl FnOnce() -> T) -> T {
    crate::scoped::once(f, |f| paused_dyn(kind, f))
}

#[inline(never)]
fn paused_dyn(kind: Kind, f: &mut dyn FnMut()) {
    struct Resume(&'static dyn Interpreter);
    impl Drop for Resume {
        fn drop(&mut self) {
            self.0.suspend(false);
        }
    }
    let _resume = REGISTERED[kind as usize].get().map(|&interp| {
        interp.suspend(true);
        Resume(interp)
    });
    f()
}

/// An op's operands as interpreters see them: tensors, or variable handles
/// with their values' dtypes (a variable read, a custom gradient's sources).
#[derive(Clone, Copy)]
pub enum Operands<'a> {
    /// Tensors.
    Tensors(&'a [&'a Tensor]),
    /// Ids (of tensors or variable handles) with dtypes.
    Ids(&'a [(TensorId, DType)]),
}

impl<'a> Operands<'a> {
    /// How many.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Operands::Tensors(t) => t.len(),
            Operands::Ids(t) => t.len(),
        }
    }

    /// The `i`-th operand's id and dtype.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> (TensorId, DType) {
        match self {
            Operands::Tensors(t) => (t[i].id(), t[i].dtype()),
            Operands::Ids(t) => t[i],
        }
    }

    /// Ids and dtypes in order.
    #[inline]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TensorId, DType)> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The tensors, when the operands are tensors.
    #[inline]
    pub(crate) fn tensors(&self) -> Option<&'a [&'a Tensor]> {
        match *self {
            Operands::Tensors(t) => Some(t),
            Operands::Ids(_) => None,
        }
    }
}

/// One op offered to the interpreters.
pub(crate) struct Call<'a> {
    /// The op's name.
    pub name: &'static str,
    op: Option<&'a dyn Describe>,
    /// Its operands.
    pub inputs: Operands<'a>,
    /// Its outputs.
    pub outputs: &'a [Tensor],
    /// Builds the rule (taken out when used: it runs once); `None` for a
    /// non-differentiable op.
    make: Cell<Option<&'a mut dyn FnMut() -> VjpFn>>,
    differentiable: bool,
    /// The rule once built, while an interpreter after the current one
    /// listens and may ask for it too.
    rule: Cell<Option<VjpFn>>,
    /// The kinds after the one being offered the call that listen.
    later: Cell<u8>,
    /// Its JVP rule, if it has one.
    pub jvp: Option<&'a JvpRule<'a>>,
}

impl Call<'_> {
    /// The descriptor, for a trace; `None` for an op bound without one (a
    /// trace never sees it: a custom gradient, a variable read).
    pub(crate) fn descriptor(&self) -> Option<Descriptor> {
        self.op.map(Describe::descriptor)
    }

    /// Whether the op is differentiable (has a rule): tapes and forward mode
    /// ignore the others.
    #[inline]
    pub(crate) fn differentiable(&self) -> bool {
        self.differentiable
    }

    /// The op's rule, built on the first call and shared after it; on that
    /// first call `first` may supply a rule instead (a gradient override).
    /// The last interpreter to ask gets the rule itself, earlier ones a
    /// clone (so the usual case, one tape, costs no reference count).
    /// `None` for a non-differentiable op.
    pub(crate) fn rule_or(&self, first: impl FnOnce(&Self) -> Option<VjpFn>) -> Option<VjpFn> {
        if !self.differentiable {
            return None;
        }
        let rule = match self.rule.take() {
            Some(r) => r,
            None => match first(self) {
                Some(r) => r,
                None => (self.make.take().expect("a rule is built once"))(),
            },
        };
        if self.later.get() != 0 {
            self.rule.set(Some(rule.clone()));
        }
        Some(rule)
    }
}

/// Offers a call to the listening interpreters, in the order of [`Kind`].
#[inline(never)]
fn offer(call: &Call<'_>) {
    let mask = LISTENING.with(Cell::get);
    for (k, slot) in REGISTERED.iter().enumerate() {
        if mask & (1 << k) != 0
            && let Some(interp) = slot.get()
        {
            call.later.set(mask >> (k + 1));
            interp.process(call);
        }
    }
}

/// Binds a single-output op: offers it to the listening interpreters and
/// returns its output.
///
/// `op` names and describes it; `rule` receives the output and builds the
/// VJP closure, only if an interpreter asks for it.
#[inline]
pub(crate) fn bind(
    op: impl Describe,
    inputs: &[&Tensor],
    output: Tensor,
    rule: impl FnOnce(&Tensor) -> VjpFn,
) -> Tensor {
    if listening() {
        bind_one(&op, inputs, &output, rule, None);
    }
    output
}

/// [`bind`] for an op with a JVP rule: `jvp(input tangents, output)` gives
/// the output tangent (`None` tangents are zeros; at least one is `Some`).
/// It runs only while an accumulator has a tangent for an input, and may
/// borrow the op's arguments.
#[inline]
pub(crate) fn bind_jvp(
    op: impl Describe,
    inputs: &[&Tensor],
    output: Tensor,
    rule: impl FnOnce(&Tensor) -> VjpFn,
    jvp: impl Fn(&[Option<Tensor>], &Tensor) -> Result<Tensor>,
) -> Tensor {
    if listening() {
        bind_one(&op, inputs, &output, rule, Some(&jvp));
    }
    output
}

fn bind_one(
    op: &dyn Describe,
    inputs: &[&Tensor],
    output: &Tensor,
    rule: impl FnOnce(&Tensor) -> VjpFn,
    jvp: Option<&JvpRule<'_>>,
) {
    let mut rule = Some(rule);
    let mut make = || (rule.take().expect("built once"))(output);
    offer(&Call {
        name: op.name(),
        op: Some(op),
        inputs: Operands::Tensors(inputs),
        outputs: std::slice::from_ref(output),
        make: Cell::new(Some(&mut make)),
        differentiable: true,
        rule: Cell::new(None),
        later: Cell::new(0),
        jvp,
    });
}

/// Binds a non-differentiable op (comparisons, `sign`, `argmax`, a random
/// draw, ...): only a trace sees it.
#[inline]
pub(crate) fn bind_nondiff(op: impl Describe, inputs: &[&Tensor], output: Tensor) -> Tensor {
    if listens(Kind::Trace) {
        announce(&op, inputs, std::slice::from_ref(&output));
    }
    output
}

/// Offers a non-differentiable op with any number of outputs (none for a
/// variable write) to a listening trace.
pub(crate) fn announce(op: &dyn Describe, inputs: &[&Tensor], outputs: &[Tensor]) {
    if listens(Kind::Trace) {
        offer(&Call {
            name: op.name(),
            op: Some(op),
            inputs: Operands::Tensors(inputs),
            outputs,
            make: Cell::new(None),
            differentiable: false,
            rule: Cell::new(None),
            later: Cell::new(0),
            jvp: None,
        });
    }
}

/// Binds a differentiable op with any number of outputs and no descriptor
/// (a custom gradient, a variable read): the tapes and accumulators see it,
/// a trace does not (it records such ops its own way). `make` builds the
/// rule, at most once.
pub fn bind_untraced(
    name: &'static str,
    inputs: Operands<'_>,
    outputs: &[Tensor],
    make: &mut dyn FnMut() -> VjpFn,
    jvp: Option<&JvpRule<'_>>,
) {
    if differentiating() {
        offer(&Call {
            name,
            op: None,
            inputs,
            outputs,
            make: Cell::new(Some(make)),
            differentiable: true,
            rule: Cell::new(None),
            later: Cell::new(0),
            jvp,
        });
    }
}
