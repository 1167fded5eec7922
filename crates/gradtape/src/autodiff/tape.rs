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
//!   in that map. No reference cycles are possible. Each record also notes,
//!   per input, the index of the op that produced it on this tape (looked up
//!   once, when the op is recorded), so backprop walks indices rather than
//!   hashing ids again.
//! - The **stack** is per thread: ops run on another thread never see this
//!   thread's tapes. The tapes are an interpreter of the dispatch layer
//!   (`crate::dispatch`): they register there when a tape is first entered
//!   and listen on a thread while its stack is not empty, so with no tape
//!   (and nothing else) active an op costs one thread-local read.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::autodiff::variable::Variable;
use crate::tensor::{DType, Shape, Tensor, TensorId};

use crate::dispatch::{self, Call, Interpreter, Kind, Operands};
pub(crate) use crate::dispatch::{pass_through, vjp, Grads, VjpFn};

/// Metadata of one op output, enough to materialise zeros for it.
#[derive(Debug, Clone)]
pub struct OutMeta {
    pub id: TensorId,
    pub shape: Shape,
    pub dtype: DType,
    pub device: crate::tensor::Device,
}

/// One recorded op. Each tape that records an op keeps its own copy in its
/// [`OpList`] (no allocation per record); the rule is shared.
#[derive(Clone)]
pub struct OpRecord {
    pub name: &'static str,
    pub inputs: SmallVec<[TensorId; 2]>,
    /// Per input, the index in this tape's `ops` of the op that produced it
    /// when this op ran, or `NO_OP` (a watched leaf, or not on this tape).
    /// Backprop walks these instead of looking ids up.
    pub producers: SmallVec<[u32; 2]>,
    pub outputs: SmallVec<[OutMeta; 1]>,
    /// The rule; `None` only once a one-shot backprop has taken it.
    pub vjp: Option<VjpFn>,
}

/// The records of a tape, in fixed-size chunks: pushing never moves the
/// records already there (a long tape would otherwise copy them over and
/// over as a `Vec` grows).
///
/// Emptied chunks go to a small per-thread pool that the next tape draws
/// from. A training loop records and frees a tape per step; without the pool
/// every step would take its chunks fresh from the system (the allocator
/// returns the freed top of the heap), paying a page fault per 4 KiB.
#[derive(Default)]
pub struct OpList {
    pub chunks: Vec<Vec<OpRecord>>,
    pub len: usize,
}

thread_local! {
    static SPARE_CHUNKS: RefCell<Vec<Vec<OpRecord>>> = const { RefCell::new(Vec::new()) };
}

impl OpList {
    /// Records per chunk (a chunk stays below the allocator's mmap threshold).
    const CHUNK: usize = 256;
    /// Chunks kept in the pool at most (about 2 MiB).
    const SPARE: usize = 64;

    #[allow(clippy::len_without_is_empty)] // (pub for the tests only)
    pub fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, rec: OpRecord) {
        if self.len.is_multiple_of(Self::CHUNK) {
            let chunk = SPARE_CHUNKS
                .try_with(|p| p.borrow_mut().pop())
                .ok()
                .flatten()
                .unwrap_or_else(|| Vec::with_capacity(Self::CHUNK));
            self.chunks.push(chunk);
        }
        self.chunks.last_mut().expect("a chunk").push(rec);
        self.len += 1;
    }
}

impl Drop for OpList {
    fn drop(&mut self) {
        for mut chunk in self.chunks.drain(..) {
            // drop the records (and what their rules hold) before touching the pool
            chunk.clear();
            let _ = SPARE_CHUNKS.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < Self::SPARE {
                    p.push(chunk);
                }
            });
        }
    }
}

impl std::ops::Index<usize> for OpList {
    type Output = OpRecord;
    #[inline]
    fn index(&self, i: usize) -> &OpRecord {
        &self.chunks[i / Self::CHUNK][i % Self::CHUNK]
    }
}

impl std::ops::IndexMut<usize> for OpList {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut OpRecord {
        &mut self.chunks[i / Self::CHUNK][i % Self::CHUNK]
    }
}

/// Marks a watched leaf in [`TapeState::tensors`].
pub(crate) const WATCHED: u32 = u32::MAX;
/// In [`OpRecord::producers`]: no op of this tape produced the input.
pub(crate) const NO_OP: u32 = u32::MAX;

/// The contents of one tape.
#[derive(Default)]
pub struct TapeState {
    /// tensor id -> index of the producing op in `ops`, or `WATCHED`.
    pub tensors: FxHashMap<TensorId, u32>,
    /// records in execution order (a topological order).
    pub ops: OpList,
    /// variables watched, keyed (and so ordered) by creation.
    pub variables: BTreeMap<TensorId, Variable>,
}

thread_local! {
    /// Emptied `tensors` maps of dropped tapes, for the next tapes to fill
    /// (see [`OpList`] for why).
    static SPARE_MAPS: RefCell<Vec<FxHashMap<TensorId, u32>>> = const { RefCell::new(Vec::new()) };
}

impl TapeState {
    pub fn watch_id(&mut self, id: TensorId) {
        self.tensors.entry(id).or_insert(WATCHED);
    }

    /// Notes that op `idx` produced tensor `id`.
    #[inline]
    pub(crate) fn produced(&mut self, id: TensorId, idx: u32) {
        if self.tensors.len() == self.tensors.capacity() {
            // about to grow: continue in a pooled map if there is a bigger one
            let spare = SPARE_MAPS.try_with(|p| p.borrow_mut().pop()).ok().flatten();
            if let Some(mut m) = spare
                && m.capacity() > self.tensors.capacity()
            {
                m.extend(self.tensors.drain());
                self.tensors = m;
            }
        }
        self.tensors.insert(id, idx);
    }

    pub(crate) fn watch_variable(&mut self, v: &Variable) {
        self.watch_id(v.handle());
        self.variables.entry(v.handle()).or_insert_with(|| v.clone());
    }
}

impl Drop for TapeState {
    fn drop(&mut self) {
        let mut m = std::mem::take(&mut self.tensors);
        if m.capacity() >= 256 {
            m.clear();
            let _ = SPARE_MAPS.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < 4 {
                    p.push(m);
                }
            });
        }
    }
}

/// A tape together with its settings and recording flags.
pub struct TapeCell {
    pub state: RefCell<TapeState>,
    pub persistent: bool,
    pub watch_accessed_variables: bool,
    pub recording: Cell<bool>,
    /// A one-shot tape that already computed gradients.
    pub used: Cell<bool>,
    /// When it was last entered (see `next_entry`): forward accumulators
    /// entered before it do not show it their tangent computations.
    pub entered: Cell<u64>,
    /// A trace's own tape (see `function::trace`), not the user's.
    pub internal: bool,
}

thread_local! {
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    static STACK: RefCell<Vec<Rc<TapeCell>>> = const { RefCell::new(Vec::new()) };
}

/// Whether any tape is active on this thread.
#[inline(always)]
pub(crate) fn any_active() -> bool {
    DEPTH.with(|d| d.get() != 0)
}

/// Sets the number of active tapes, and so whether tapes listen to the
/// dispatch layer on this thread.
#[inline]
fn set_depth(n: usize) {
    DEPTH.with(|d| d.set(n));
    dispatch::listen(Kind::Tape, n != 0);
}

/// The tapes as an interpreter of the dispatch layer: each op with a rule
/// is offered to [`record`].
struct Tapes;

impl Interpreter for Tapes {
    fn process(&self, call: &Call<'_>) {
        if call.differentiable() {
            record(call.name, call.inputs, call.outputs, || {
                call.rule_or(crate::autodiff::custom::overridden_for)
                    .expect("a differentiable call has a rule")
            });
        }
    }

    fn one_shot_alone_watches(&self, id: TensorId) -> bool {
        STACK.with(|s| match &s.borrow()[..] {
            [t] => !t.persistent && !t.internal && t.state.borrow().tensors.contains_key(&id),
            _ => false,
        })
    }

    fn suspend(&self, on: bool) {
        thread_local! {
            static SUSPENDED: RefCell<Vec<(Vec<Rc<TapeCell>>, usize)>> = const { RefCell::new(Vec::new()) };
        }
        if on {
            let saved = STACK.with(|s| std::mem::take(&mut *s.borrow_mut()));
            SUSPENDED.with(|x| x.borrow_mut().push((saved, DEPTH.with(Cell::get))));
            set_depth(0);
        } else if let Some((saved, depth)) = SUSPENDED.with(|x| x.borrow_mut().pop()) {
            STACK.with(|s| *s.borrow_mut() = saved);
            set_depth(depth);
        }
    }
}

pub fn push(tape: &Rc<TapeCell>) {
    dispatch::register(Kind::Tape, &Tapes);
    tape.entered.set(next_entry());
    STACK.with(|s| s.borrow_mut().push(tape.clone()));
    set_depth(DEPTH.with(Cell::get) + 1);
    tape.recording.set(true);
}

thread_local! {
    static ENTRIES: Cell<u64> = const { Cell::new(0) };
}

/// A number increasing with every entry of a tape or a forward accumulator
/// on this thread: it orders their nesting (TF's nesting ids).
pub(crate) fn next_entry() -> u64 {
    ENTRIES.with(|c| {
        c.set(c.get() + 1);
        c.get()
    })
}

/// Runs `f` with the tapes entered after `entered` taken off the stack: an
/// accumulator's tangent computations are invisible to tapes nested inside
/// it (as in TensorFlow, so that forward-over-reverse keeps no tangents).
pub(crate) fn hiding_tapes_after<T>(entered: u64, f: impl FnOnce() -> T) -> T {
    struct Restore(Vec<Rc<TapeCell>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let hidden = std::mem::take(&mut self.0);
            set_depth(DEPTH.with(Cell::get) + hidden.len());
            STACK.with(|s| s.borrow_mut().extend(hidden));
        }
    }
    let hidden: Vec<Rc<TapeCell>> = STACK.with(|s| {
        let mut s = s.borrow_mut();
        if !s.iter().any(|t| t.entered.get() > entered) {
            return Vec::new();
        }
        let (keep, hide) = std::mem::take(&mut *s)
            .into_iter()
            .partition(|t| t.entered.get() <= entered);
        *s = keep;
        hide
    });
    if hidden.is_empty() {
        return f();
    }
    set_depth(DEPTH.with(Cell::get) - hidden.len());
    let _restore = Restore(hidden);
    f()
}

/// Removes `tape` from the stack wherever it is (tapes may exit out of order).
pub fn pop(tape: &Rc<TapeCell>) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(i) = s.iter().rposition(|t| Rc::ptr_eq(t, tape)) {
            s.remove(i);
            set_depth(DEPTH.with(Cell::get) - 1);
        }
    });
    tape.recording.set(false);
}

/// Records an op on every active tape that watches one of its float inputs,
/// and marks its float outputs watched there. `rule` builds the VJP closure;
/// it runs at most once, and only when some tape records the op.
pub(crate) fn record(name: &'static str, inputs: Operands<'_>, outputs: &[Tensor], rule: impl FnOnce() -> VjpFn) {
    if !outputs.iter().any(|o| o.dtype().is_differentiable()) {
        return;
    }
    STACK.with(|s| {
        let stack = s.borrow();
        let mut rule = Some(rule);
        let mut vjp: Option<VjpFn> = None;
        // the last tape found to record the op, with its producers: it gets
        // the rule itself, earlier ones a clone (no refcount traffic when, as
        // usual, one tape records)
        let mut pending: Option<(&TapeCell, SmallVec<[u32; 2]>)> = None;
        for tape in stack.iter() {
            let st = tape.state.borrow();
            let mut watched = false;
            let mut producers: SmallVec<[u32; 2]> = SmallVec::new();
            for (id, dtype) in inputs.iter() {
                producers.push(match st.tensors.get(&id) {
                    Some(&p) => {
                        watched |= dtype.is_differentiable();
                        p
                    }
                    None => NO_OP,
                });
            }
            drop(st);
            if !watched {
                continue;
            }
            let v = vjp.get_or_insert_with(|| (rule.take().expect("built once"))());
            if let Some((prev, pp)) = pending.take() {
                push_record(prev, name, inputs, outputs, pp, v.clone());
            }
            pending = Some((tape, producers));
        }
        if let (Some((tape, producers)), Some(v)) = (pending, vjp) {
            push_record(tape, name, inputs, outputs, producers, v);
        }
    });
}

/// Appends a record to `tape` and marks its float outputs as produced there.
fn push_record(
    tape: &TapeCell,
    name: &'static str,
    inputs: Operands<'_>,
    outputs: &[Tensor],
    producers: SmallVec<[u32; 2]>,
    vjp: VjpFn,
) {
    let mut st = tape.state.borrow_mut();
    let idx = st.ops.len() as u32;
    let mut ids: SmallVec<[TensorId; 2]> = SmallVec::new();
    for (id, _) in inputs.iter() {
        ids.push(id);
    }
    let mut outs: SmallVec<[OutMeta; 1]> = SmallVec::new();
    for o in outputs {
        outs.push(OutMeta {
            id: o.id(),
            shape: crate::tensor::layout::small_copy(o.shape()),
            dtype: o.dtype(),
            device: o.device(),
        });
        if o.dtype().is_differentiable() {
            st.produced(o.id(), idx);
        }
    }
    st.ops.push(OpRecord {
        name,
        inputs: ids,
        producers,
        outputs: outs,
        vjp: Some(vjp),
    });
}

/// Whether a tape of the user's (not a trace's own) watches one of these
/// ids: an op that can save work for its gradient asks this first.
pub(crate) fn user_tape_watches(ids: &[TensorId]) -> bool {
    any_active()
        && STACK.with(|s| {
            s.borrow().iter().any(|t| {
                !t.internal && {
                    let st = t.state.borrow();
                    ids.iter().any(|id| st.tensors.contains_key(id))
                }
            })
        })
}

/// Whether a tape of the user's watches one of these variables, or will
/// watch it when an op reads it (a tape that watches accessed variables,
/// and `v` trainable and differentiable): an op that reads variables and
/// can save work for their gradients asks this first.
pub(crate) fn user_tape_watches_variables(vars: &[Variable]) -> bool {
    any_active()
        && !vars.is_empty()
        && STACK.with(|s| {
            s.borrow().iter().any(|t| {
                !t.internal && {
                    let st = t.state.borrow();
                    vars.iter().any(|v| {
                        st.tensors.contains_key(&v.handle())
                            || (t.watch_accessed_variables && v.trainable() && v.dtype().is_differentiable())
                    })
                }
            })
        })
}

/// Whether an op that reads `v` and is differentiated as one op (a
/// function's call, `cond`, `while_loop`) must give `v` a gradient, as an
/// eager read of `v` would be recorded: `v` is of a differentiable dtype,
/// and trainable (a tape that watches accessed variables watches it when
/// read) or watched now by an active tape or forward accumulator (a
/// non-trainable variable passed to `watch`).
pub(crate) fn differentiates_variable(v: &Variable) -> bool {
    if !v.dtype().is_differentiable() {
        return false;
    }
    v.trainable() || watched_now(v.handle())
}

/// Whether an active tape of the user's (not a trace's own, which watches
/// whatever its trace reads) has `id` (watched, or made by a recorded op),
/// or a visible forward accumulator has a tangent for it.
pub(crate) fn watched_now(id: TensorId) -> bool {
    let on_tape = |t: &Rc<TapeCell>| !t.internal && t.state.borrow().tensors.contains_key(&id);
    (any_active() && STACK.with(|s| s.borrow().iter().any(on_tape))) || crate::autodiff::forward::watches(id)
}

/// Tells every active tape that `v` was read: tapes that watch accessed
/// variables start watching it if it is trainable.
pub(crate) fn variable_accessed(v: &Variable) {
    if !v.trainable() || !v.dtype().is_differentiable() {
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

/// Runs `f` with every tape and forward accumulator of this thread paused
/// (used by internal helpers whose ops must not be recorded).
pub fn without_tapes<T>(f: impl FnOnce() -> T) -> T {
    crate::scoped::once(f, without_tapes_dyn)
}

#[inline(never)]
fn without_tapes_dyn(f: &mut dyn FnMut()) {
    struct Restore(Vec<Rc<TapeCell>>, usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            let saved = std::mem::take(&mut self.0);
            STACK.with(|s| *s.borrow_mut() = saved);
            set_depth(self.1);
        }
    }
    let saved = STACK.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let depth = DEPTH.with(Cell::get);
    set_depth(0);
    let _restore = Restore(saved, depth);
    crate::autodiff::forward::paused_dyn(f)
}
