//! Vectors the fused kernels reuse from run to run: the registers of a
//! task, the columns a partial reduction folds, the partial results of a
//! blocked one.
//!
//! A kernel run needs a few such vectors per task, sized by the program
//! (registers of up to 24 KiB, see `REG_BYTES`); allocating them per run
//! was most of a compiled step's allocations. They come from a free list
//! per element type ([`take`]) and go back to it ([`give`]), which keeps
//! at most [`MAX_KEPT`] vectors of at most [`MAX_LEN`] elements, so the
//! memory it holds is bounded (a few MiB at most). The list is shared by
//! the threads (a partial result made by a worker is given back by the
//! caller's thread), behind a lock.
//!
//! In front of it each thread keeps a few vectors of its own ([`LOCAL`]
//! of at most [`LOCAL_LEN`] elements): a small kernel run on the calling
//! thread takes its registers and gives them back without the lock (the
//! lock's two atomic operations per take and per give, and the scan of the
//! shared list, had cost a kernel over `[2, 8]` more than its ops).

use std::cell::RefCell;
use std::sync::Mutex;

/// At most this many vectors wait on each free list.
pub const MAX_KEPT: usize = 64;
/// Vectors longer than this are not kept.
pub const MAX_LEN: usize = 1 << 16;

/// At most this many vectors wait on each thread's own list.
pub const LOCAL: usize = 4;
/// Vectors longer than this go to the shared list only (a thread's own
/// list then holds at most `LOCAL * LOCAL_LEN` elements).
pub const LOCAL_LEN: usize = 1 << 14;

/// An element type with a free list.
pub trait Scratch: Copy + Send + 'static {
    /// The type's free list.
    fn free() -> &'static Mutex<Vec<Vec<Self>>>;
    /// Runs `f` on this thread's own list of the type (`None` while the
    /// thread is being torn down).
    fn local<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R>;
}

impl Scratch for f32 {
    fn free() -> &'static Mutex<Vec<Vec<f32>>> {
        static FREE: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
        &FREE
    }
    fn local<R>(f: impl FnOnce(&mut Vec<Vec<f32>>) -> R) -> Option<R> {
        thread_local!(static MINE: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) });
        MINE.try_with(|m| m.try_borrow_mut().ok().map(|mut m| f(&mut m)))
            .ok()
            .flatten()
    }
}

impl Scratch for f64 {
    fn free() -> &'static Mutex<Vec<Vec<f64>>> {
        static FREE: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());
        &FREE
    }
    fn local<R>(f: impl FnOnce(&mut Vec<Vec<f64>>) -> R) -> Option<R> {
        thread_local!(static MINE: RefCell<Vec<Vec<f64>>> = const { RefCell::new(Vec::new()) });
        MINE.try_with(|m| m.try_borrow_mut().ok().map(|mut m| f(&mut m)))
            .ok()
            .flatten()
    }
}

/// A vector of `n` copies of `fill`: a kept one when one has the room
/// (else the longest kept one, grown), or a new one.
pub fn take<T: Scratch>(n: usize, fill: T) -> Vec<T> {
    let mut v = from_list(n);
    v.clear();
    v.resize(n, fill);
    v
}

/// A vector of `n` elements to be written before they are read (a
/// task's registers): a kept vector's old values where it has them, so
/// that no pass fills them; `fill` past those.
pub fn take_written<T: Scratch>(n: usize, fill: T) -> Vec<T> {
    let mut v = from_list(n);
    if v.len() >= n {
        v.truncate(n);
    } else {
        v.resize(n, fill);
    }
    v
}

/// A kept vector with room for `n` elements (else the longest kept one,
/// grown), or a new one; its elements as they were given back.
fn from_list<T: Scratch>(n: usize) -> Vec<T> {
    // this thread's own first (no lock)
    let mine = T::local(|l| {
        let i = l.iter().position(|v| v.capacity() >= n)?;
        Some(l.swap_remove(i))
    });
    if let Some(Some(v)) = mine {
        return v;
    }
    let mut v = T::free()
        .lock()
        .ok()
        .and_then(|mut free| {
            let i = free
                .iter()
                .position(|v| v.capacity() >= n)
                .or_else(|| (0..free.len()).max_by_key(|&i| free[i].capacity()))?;
            Some(free.swap_remove(i))
        })
        .unwrap_or_default();
    if v.capacity() < n {
        // (grown to a power of two: the threads take the kept vectors in
        // an order that depends on timing, and with few sizes in use a
        // vector grown once fits the others' needs too)
        let want = n.next_power_of_two().clamp(4096, MAX_LEN.max(n));
        v.reserve_exact(want - v.len());
    }
    v
}

/// Keeps `v` for a later [`take`] (or frees it: too long, or the list is
/// full).
pub fn give<T: Scratch>(v: Vec<T>) {
    if v.capacity() == 0 || v.capacity() > MAX_LEN {
        return;
    }
    // this thread's own list while it has room (no lock)
    let mut v = Some(v);
    if v.as_ref().is_some_and(|v| v.capacity() <= LOCAL_LEN) {
        T::local(|l| {
            if l.len() < LOCAL {
                l.extend(v.take());
            }
        });
    }
    let Some(v) = v else {
        return;
    };
    if let Ok(mut free) = T::free().lock()
        && free.len() < MAX_KEPT
    {
        free.push(v);
    }
}

/// How many vectors wait on `T`'s free list (for tests).
pub fn kept<T: Scratch>() -> usize {
    T::free().lock().map(|f| f.len()).unwrap_or(0)
}
