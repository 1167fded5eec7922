//! How a transformation above this layer hears of the tensors it makes.
//!
//! A trace (`function::trace`) must tell a tensor a constructor made (a
//! legitimate constant of the graph) from one an op made without binding
//! (an error), must record a `zeros_like(x)` as a node that follows `x`'s
//! shape, and must refuse to read the values of a tensor it knows only as a
//! graph value. This layer cannot name the trace: the trace installs itself
//! as the [`Observer`] and turns observing on for its thread while it
//! records. Unobserved, each hook costs one thread-local read.

use std::cell::Cell;
use std::sync::OnceLock;

use super::Tensor;

/// What a transformation is told of tensors made here.
pub(crate) trait Observer: Sync {
    /// `t` was made by a constructor from data (a constant).
    fn constant(&self, t: &Tensor);
    /// `t` is `value` everywhere, in the shape and dtype of `like`.
    fn filled_like(&self, like: &Tensor, value: f64, t: &Tensor);
    /// Whether `t`'s values may not be read now (they are known only when
    /// a graph runs).
    fn unreadable(&self, t: &Tensor) -> bool;
    /// Whether `t`'s values will never be read (a trace that only wants
    /// its graph knows `t` as a graph value): an op with such an input may
    /// give a placeholder of the right shape and dtype instead of computing.
    fn placeholder(&self, t: &Tensor) -> bool;
}

static OBSERVER: OnceLock<&'static dyn Observer> = OnceLock::new();

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
}

/// Installs the observer (the first installation stands).
pub(crate) fn install(o: &'static dyn Observer) {
    let _ = OBSERVER.set(o);
}

/// Turns observing on or off for this thread.
pub(crate) fn observe(on: bool) {
    ON.with(|c| c.set(on));
}

#[inline]
fn observer() -> Option<&'static dyn Observer> {
    if ON.with(Cell::get) {
        OBSERVER.get().copied()
    } else {
        None
    }
}

/// Whether a transformation observes the tensors made on this thread (a
/// trace records here).
#[inline]
pub(crate) fn observing() -> bool {
    ON.with(Cell::get)
}

/// Tells the observer of a constant.
#[inline]
pub(crate) fn constant(t: &Tensor) {
    if let Some(o) = observer() {
        o.constant(t);
    }
}

/// Tells the observer of a tensor filled in another's shape.
#[inline]
pub(crate) fn filled_like(like: &Tensor, value: f64, t: &Tensor) {
    if let Some(o) = observer() {
        o.filled_like(like, value, t);
    }
}

/// Whether the observer forbids reading `t`'s values now.
#[inline]
pub(crate) fn unreadable(t: &Tensor) -> bool {
    observer().is_some_and(|o| o.unreadable(t))
}

/// Whether `t`'s values will never be read, so that an op reading it may
/// make a placeholder (zeros of its result's shape) instead of computing.
#[inline]
pub(crate) fn placeholder(t: &Tensor) -> bool {
    observer().is_some_and(|o| o.placeholder(t))
}
