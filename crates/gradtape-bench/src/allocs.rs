//! Allocations per step, counted by a wrapper around the system allocator.
//!
//! With `GRADTAPE_BENCH_ALLOCS=1` in the environment, each JSON line gets an
//! `"allocs_per_step"` field: the heap allocations (`alloc`, `alloc_zeroed`
//! and `realloc` calls, on every thread) made during the timed steps,
//! divided by their number. Without the variable the counter still counts
//! (one relaxed atomic add per allocation) but nothing is reported.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting.
pub(crate) struct Counting;

static COUNT: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        COUNT.fetch_add(1, Ordering::Relaxed);
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
