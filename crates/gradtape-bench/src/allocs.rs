//! Allocations per step, counted by a wrapper around the system allocator.
//!
//! With `GRADTAPE_BENCH_ALLOCS=1` in the environment, each JSON line gets an
//! `"allocs_per_step"` field: the heap allocations (`alloc`, `alloc_zeroed`
//! and `realloc` calls, on every thread) made during the timed steps,
//! divided by their number. Without the variable the counter still counts
//! (one relaxed atomic add per allocation) but nothing is reported.
//!
//! `GRADTAPE_BENCH_ALLOC_TRACE=1` prints, to stderr, a backtrace of every
//! allocation of the first timed step (a debugging aid: slow).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The system allocator, counting.
pub(crate) struct Counting;

static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Whether allocations print their backtraces now.
static TRACING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while this thread prints a backtrace (whose own allocations are
    /// not traced).
    static IN_TRACE: Cell<bool> = const { Cell::new(false) };
}

/// Prints the backtrace of an allocation of `size` bytes when tracing.
fn trace(size: usize) {
    if !TRACING.load(Ordering::Relaxed) {
        return;
    }
    let _ = IN_TRACE.try_with(|t| {
        if t.replace(true) {
            return;
        }
        let bt = std::backtrace::Backtrace::force_capture();
        eprintln!("ALLOC {size} bytes\n{bt}\nEND");
        t.set(false);
    });
}

/// Whether `GRADTAPE_BENCH_ALLOC_TRACE` asks for backtraces.
pub(crate) fn trace_wanted() -> bool {
    std::env::var("GRADTAPE_BENCH_ALLOC_TRACE").is_ok_and(|v| v != "0")
}

/// Starts or stops printing allocations' backtraces.
pub(crate) fn set_tracing(on: bool) {
    TRACING.store(on, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        trace(layout.size());
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        trace(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        trace(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations made so far by the process.
pub(crate) fn count() -> usize {
    COUNT.load(Ordering::Relaxed)
}

/// Whether lines report allocations (`GRADTAPE_BENCH_ALLOCS` set, not `0`).
pub(crate) fn enabled() -> bool {
    std::env::var("GRADTAPE_BENCH_ALLOCS").is_ok_and(|v| v != "0")
}
