//! The binary's one global allocator: the system allocator, counting
//! allocations for the two files of this binary.
//!
//! - [`allocations`] / [`allocations_all`] (`function_alloc.rs`): every
//!   allocation of the calling thread (a thread-local count) and, while a
//!   test measures, those of gradtape's compute threads (named
//!   `gradtape-N`).
//! - [`buffers_of`] (`function_exec.rs`): the calling thread's
//!   allocations of one size.
//!
//! `alloc`, `alloc_zeroed` and `realloc` (by its new size) each count as
//! one allocation, as they did in the two files' own allocators (where
//! `function_exec.rs` left `alloc_zeroed` and `realloc` to the trait's
//! defaults, which allocate through `alloc`).
//!
//! Every test of this binary holds [`serial`] while it runs: the counts of
//! the compute threads would take in the work of a test running beside the
//! one measuring, and the fused kernels' scratch vectors come from a free
//! list that the process's threads share, so a test running beside another
//! could find it emptied by the other's kernels and allocate (seen in CI
//! as one or two allocations more now and then).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The system allocator, counting this thread's allocations.
struct Counting;

thread_local! {
    static COUNT: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread is one of gradtape's compute threads (found
    /// from its name at its first allocation).
    static WORKER: Cell<Option<bool>> = const { Cell::new(None) };
    /// (the size counted, allocations of that size so far)
    static SIZED: Cell<(usize, usize)> = const { Cell::new((usize::MAX, 0)) };
}

/// Allocations on gradtape's compute threads while [`MEASURING`].
static WORKERS: AtomicUsize = AtomicUsize::new(0);
/// Whether the compute threads' allocations are counted now.
static MEASURING: AtomicBool = AtomicBool::new(false);

/// Counts an allocation of `size` bytes by this thread.
fn count(size: usize) {
    let _ = COUNT.try_with(|c| c.set(c.get() + 1));
    let _ = SIZED.try_with(|c| {
        let (counted, n) = c.get();
        if size == counted {
            c.set((counted, n + 1));
        }
    });
    if MEASURING.load(Ordering::Relaxed) && is_worker() {
        WORKERS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether this thread is a compute thread (`gradtape-N`).
fn is_worker() -> bool {
    WORKER
        .try_with(|w| match w.get() {
            Some(known) => known,
            None => {
                // (not one while finding out: an allocation made by
                // `current` comes back here)
                w.set(Some(false));
                let named = std::thread::current()
                    .name()
                    .is_some_and(|n| n.starts_with("gradtape-"));
                w.set(Some(named));
                named
            }
        })
        .unwrap_or(false)
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Held by each test of this binary: they run one at a time (see the
/// module's documentation).
static SERIAL: Mutex<()> = Mutex::new(());

/// Waits for the other tests of this binary (see [`SERIAL`]).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many allocations `f` makes on this thread, and its result.
pub fn allocations<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = COUNT.with(Cell::get);
    let out = f();
    (COUNT.with(Cell::get) - before, out)
}

/// How many allocations `f` makes on this thread and on the compute
/// threads, and its result.
pub fn allocations_all<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let workers = WORKERS.load(Ordering::Relaxed);
    MEASURING.store(true, Ordering::Relaxed);
    let (n, out) = allocations(f);
    MEASURING.store(false, Ordering::Relaxed);
    (n + WORKERS.load(Ordering::Relaxed) - workers, out)
}

/// How many buffers of `bytes` bytes `f` allocates on this thread.
pub fn buffers_of<T>(bytes: usize, f: impl FnOnce() -> T) -> (usize, T) {
    SIZED.with(|c| c.set((bytes, 0)));
    let out = f();
    let n = SIZED.with(|c| c.replace((usize::MAX, 0)).1);
    (n, out)
}
