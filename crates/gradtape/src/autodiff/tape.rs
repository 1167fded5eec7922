//! The tape: what gets recorded, where, and the thread-local stack of active
//! tapes.
//!
//! Terms used here and in [`backprop`](super::backprop):
//!
//! - A **record** ([`OpRecord`]) is one executed op as a tape sees it: its
//!   name, the ids of its inputs, the id, shape and dtype of each output, and
//!   its **VJP rule**, a closure that maps output cotangents to input
//!   cotangents. The rule holds exactly the tensors it needs (captured when
//!   the op ran); shapes and dtypes of outputs are kept as metadata only.
//! - A tape ([`TapeState`]) is keyed by ids, not by object links: a map
//!   from tensor id to the op that produced it (or to `WATCHED` for a tensor
//!   or variable handle the user watched) and a vector of records in
//!   execution order. A tensor is *watched* by a tape exactly when its id is
//!   in that map. No reference cycles are possible.
//! - The **stack** is per thread: ops run on another thread never see this
//!   thread's tapes. Its depth is mirrored in a `Cell` so that the common case,
//!   no tape active, costs one thread-local read per op.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::autodiff::variable::Variable;
use crate::error::Result;
use crate::tensor::{DType, Shape, Tensor, TensorId};

/// Input cotangents returned by a VJP rule, one per op input; `None` is a
/// symbolic zero ("no gradient"), which costs nothing.
pub type Grads = SmallVec<[Option<Tensor>; 2]>;

/// A VJP rule: `(output cotangents, which inputs need a gradient) -> input
/// cotangents`. It is written with ordinary differentiable ops, so running it
/// under another tape records it there (which is how higher orders work).
pub type VjpFn = Arc<dyn Fn(&[Tensor], &[bool]) -> Result<Grads> + Send + Sync>;

/// Wraps a closure as a [`VjpFn`].
#[inline]
pub fn vjp(f: impl Fn(&[Tensor], &[bool]) -> Result<Grads> + Send + Sync + 'static) -> VjpFn {
    Arc::new(f)
}

/// Metadata of one op output, enough to materialise zeros for it.
#[derive(Debug, Clone)]
pub(crate) struct OutMeta {
    pub id: TensorId,
    pub shape: Shape,
    pub dtype: DType,
}

/// One recorded op (shared by every tape that recorded it).
pub(crate) struct OpRecord {
    pub name: &'static str,
    pub inputs: SmallVec<[TensorId; 2]>,
    pub outputs: SmallVec<[OutMeta; 1]>,
    pub vjp: VjpFn,
}

/// Marks a watched leaf in [`TapeState::tensors`].
pub(crate) const WATCHED: u32 = u32::MAX;

/// The contents of one tape.
#[derive(Default)]
pub(crate) struct TapeState {
    /// tensor id -> index of the producing op in `ops`, or `WATCHED`.
    pub tensors: FxHashMap<TensorId, u32>,
    /// records in execution order (a topological order).
    pub ops: Vec<Arc<OpRecord>>,
    /// variables watched, keyed (and so ordered) by creation.
    pub variables: BTreeMap<TensorId, Variable>,
}

impl TapeState {
    pub(crate) fn watch_id(&mut self, id: TensorId) {
        self.tensors.entry(id).or_insert(WATCHED);
    }

    pub(crate) fn watch_variable(&mut self, v: &Variable) {
        self.watch_id(v.handle());
        self.variables.entry(v.handle()).or_insert_with(|| v.clone());
    }
}

/// A tape together with its settings and recording flags.
pub(crate) struct TapeCell {
    pub state: RefCell<TapeState>,
    pub persistent: bool,
    pub watch_accessed_variables: bool,
    pub recording: Cell<bool>,
    /// A one-shot tape that already computed gradients.
    pub used: Cell<bool>,
}

thread_local! {
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    static STACK: RefCell<Vec<Rc<TapeCell>>> = const { RefCell::new(Vec::new()) };
}

/// Whether any tape is active on this thread: the one check every op makes.
#[inline(always)]
pub(crate) fn any_active() -> bool {
    DEPTH.with(|d| d.get() != 0)
}

pub(crate) fn push(tape: &Rc<TapeCell>) {
    STACK.with(|s| s.borrow_mut().push(tape.clone()));
    DEPTH.with(|d| d.set(d.get() + 1));
    tape.recording.set(true);
}

/// Removes `tape` from the stack wherever it is (tapes may exit out of order).
pub(crate) fn pop(tape: &Rc<TapeCell>) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(i) = s.iter().rposition(|t| Rc::ptr_eq(t, tape)) {
            s.remove(i);
            DEPTH.with(|d| d.set(d.get() - 1));
        }
    });
    tape.recording.set(false);
}

/// Records an op on every active tape that watches one of its float inputs,
/// and marks its float outputs watched there. `rule` builds the VJP closure;
/// it runs at most once, and only when some tape records the op.
pub(crate) fn record(
    name: &'static str,
    inputs: &[(TensorId, DType)],
    outputs: &[Tensor],
    rule: impl FnOnce() -> VjpFn,
) {
    if !outputs.iter().any(|o| o.dtype().is_float()) {
        return;
    }
    STACK.with(|s| {
        let stack = s.borrow();
        let mut rule = Some(rule);
        let mut rec: Option<Arc<OpRecord>> = None;
        for tape in stack.iter() {
            let mut st = tape.state.borrow_mut();
            let watched = inputs
                .iter()
                .any(|(id, dt)| dt.is_float() && st.tensors.contains_key(id));
            if !watched {
                continue;
            }
            let r = rec.get_or_insert_with(|| {
                Arc::new(OpRecord {
                    name,
                    inputs: inputs.iter().map(|(id, _)| *id).collect(),
                    outputs: outputs
                        .iter()
                        .map(|o| OutMeta {
                            id: o.id(),
                            shape: o.shape().into(),
                            dtype: o.dtype(),
                        })
                        .collect(),
                    vjp: (rule.take().expect("built once"))(),
                })
            });
            let idx = st.ops.len() as u32;
            st.ops.push(r.clone());
            for o in outputs.iter().filter(|o| o.dtype().is_float()) {
                st.tensors.insert(o.id(), idx);
            }
        }
    });
}

/// Tells every active tape that `v` was read: tapes that watch accessed
/// variables start watching it if it is trainable.
pub(crate) fn variable_accessed(v: &Variable) {
    if !v.trainable() || !v.dtype().is_float() {
        return;
    }
    STACK.with(|s| {
        for tape in s.borrow().iter() {
            if tape.watch_accessed_variables {
                tape.state.borrow_mut().watch_variable(v);
            }
        }
    });
}

/// Runs `f` with every tape of this thread paused (used by internal helpers
/// whose ops must not be recorded).
pub(crate) fn without_tapes<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(Vec<Rc<TapeCell>>, usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            let saved = std::mem::take(&mut self.0);
            STACK.with(|s| *s.borrow_mut() = saved);
            DEPTH.with(|d| d.set(self.1));
        }
    }
    let saved = STACK.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let depth = DEPTH.with(|d| d.replace(0));
    let _restore = Restore(saved, depth);
    f()
}
