//! Scratch vectors that a kernel's tasks reuse from call to call, kept per
//! thread.
//!
//! A task of a parallel kernel often needs a vector of its own for the
//! length of the task: a block of attention scores, a row's normalised
//! values, a band's column sums. Allocated per task, they were nearly all
//! of a compiled transformer step's allocations (its tensors come back
//! from the run's bin). [`take`] hands out a
//! vector this thread kept from an earlier task ([`Kept`], which gives it
//! back when dropped), so a task's scratch costs an allocation only the
//! first time a thread needs that much. Each thread keeps at most [`KEPT`]
//! vectors per element type, of at most [`MAX_BYTES`] each: what the lists
//! hold stays bounded whatever the kernels ask for.
//!
//! The fused kernels of compiled graphs keep their vectors on one list
//! shared by the threads instead (`function::compile::kernel::scratch`),
//! since a partial result one thread makes is given back by another; a
//! task's scratch here never leaves its thread, so its list needs no lock.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use half::{bf16, f16};

/// Vectors kept per thread and element type.
pub const KEPT: usize = 4;
/// Vectors of more bytes than this are freed, not kept.
pub const MAX_BYTES: usize = 2 << 20;

/// An element type with a free list on each thread.
pub trait Local: Copy + 'static {
    /// Runs `f` on this thread's list, or returns `None` while the thread
    /// is being torn down.
    fn with_list<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R>;
}

macro_rules! local {
    ($($t:ty),*) => {$(
        impl Local for $t {
            fn with_list<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R> {
                thread_local! {
                    static LIST: RefCell<Vec<Vec<$t>>> = const { RefCell::new(Vec::new()) };
                }
                LIST.try_with(|l| l.try_borrow_mut().ok().map(|mut l| f(&mut l))).ok().flatten()
            }
        }
    )*};
}
local!(f32, f64, f16, bf16);

/// A scratch vector, given back to its thread's list when dropped.
pub struct Kept<T: Local>(Vec<T>);

impl<T: Local> Deref for Kept<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T: Local> DerefMut for Kept<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T: Local> Drop for Kept<T> {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if v.capacity() == 0 || v.capacity() * std::mem::size_of::<T>() > MAX_BYTES {
            return;
        }
        T::with_list(|l| {
            if l.len() < KEPT {
                l.push(v);
            }
        });
    }
}

/// A vector this thread kept, with room for `n` (else its largest, to be
/// grown), or a new one: its old values left in it.
fn reuse<T: Local>(n: usize) -> Vec<T> {
    T::with_list(|l| {
        let i = l
            .iter()
            .position(|v| v.capacity() >= n)
            .or_else(|| (0..l.len()).max_by_key(|&i| l[i].capacity()))?;
        Some(l.swap_remove(i))
    })
    .flatten()
    .unwrap_or_default()
}

/// A vector of `n` copies of `fill`: one this thread kept, with room for
/// `n` (else its largest, grown), or a new one.
pub fn take<T: Local>(n: usize, fill: T) -> Kept<T> {
    let mut v = reuse::<T>(n);
    v.clear();
    v.resize(n, fill);
    Kept(v)
}

/// A vector of `n` elements as [`take`]'s, but holding whatever values the
/// kept vector last held (`fill` only past them): for a kernel that
/// writes every element before it reads it, where filling it first was a
/// pass over the whole block for nothing (the fused attention kernels'
/// score blocks, `ROWS × keys` per task: some 5 % of a causal forward
/// call, `[32, 128, 64]`).
pub fn take_stale<T: Local>(n: usize, fill: T) -> Kept<T> {
    let mut v = reuse::<T>(n);
    if v.len() >= n {
        v.truncate(n);
    } else {
        v.resize(n, fill);
    }
    Kept(v)
}

/// How many vectors this thread keeps for `T` (for tests).
pub fn kept<T: Local>() -> usize {
    T::with_list(|l| l.len()).unwrap_or(0)
}
