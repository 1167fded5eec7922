//! The one fallible allocator of element buffers.
//!
//! Every buffer whose size follows from a shape (a kernel's output, a
//! gathered copy of a strided view, a scratch matrix) is allocated here, so
//! that a shape that is valid but too large for memory gives
//! [`Error::OutOfMemory`] naming the op and the bytes asked for, instead of
//! Rust's "capacity overflow" panic or its allocation-failure abort. A size
//! above `isize::MAX` bytes is refused without asking the system; below it,
//! the system's answer decides (`try_reserve_exact`).
//!
//! Whether an allocation the system grants can later be backed by memory is
//! the operating system's affair: with Linux's default overcommit heuristic,
//! asking for much more than the machine's memory fails here, cleanly, while
//! a request within it that the machine then cannot back ends in the
//! system's out-of-memory killer, as for any program.
//!
//! A new buffer of [`HUGE_MIN`] bytes or more asks Linux for transparent
//! huge pages (`madvise(MADV_HUGEPAGE)`) over the 2 MiB-aligned part of it,
//! before its first write: with 4 KiB pages a training step's operands
//! (a few MiB each, tens of MiB in all) span thousands of pages, more than
//! the TLB holds, and a matrix product whose operands came from memory
//! walked the page tables on top of waiting for the data (2-core Xeon,
//! one thread, after a 512 MiB pass: `[1024,768] @ [768,256]ᵀ` 94-122 →
//! 132-135 GFLOP/s median with its operands on huge pages, `[2048,2048]²`
//! 138-147 → 149-151; see `docs/compiler-notes-xeon.md`, "The Xeon machine").
//! Most systems' default (`enabled = madvise`) grants huge pages only to
//! memory so marked. The buffers are reused through the buffer cache, so
//! the call is made once per buffer, not per step; it only advises, and a
//! refusal (no huge pages configured, another system) changes nothing.
//! (With `defrag = madvise`, also common, a first write may wait for the
//! kernel to compact memory into a huge page: once per buffer.)

use super::{pool, recycle, Buf, Element};
use crate::error::{Error, Result};

/// The error for `n` elements of `size` bytes each.
pub(crate) fn oom(op: &'static str, n: usize, size: usize) -> Error {
    Error::OutOfMemory {
        op,
        bytes: n as u128 * size as u128,
    }
}

/// An empty `Vec` with room for exactly `n` elements.
pub fn try_vec<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| oom(op, n, std::mem::size_of::<T>()))?;
    Ok(v)
}

/// `n` copies of `value` in a new `Vec`.
pub fn try_filled<T: Clone>(op: &'static str, n: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_vec(op, n)?;
    v.resize(n, value);
    Ok(v)
}

/// The items of an iterator of known length in a new `Vec`, allocated
/// fallibly up front.
pub fn try_collect<T>(op: &'static str, items: impl ExactSizeIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = try_vec(op, items.len())?;
    v.extend(items);
    Ok(v)
}

/// An empty element buffer with room for exactly `n` elements: one of a
/// dead value of the compiled graph running on this thread
/// (`recycle`), else a freed one from the buffer cache when it holds one
/// of that size, else a new one.
pub fn try_buf<T: Element>(op: &'static str, n: usize) -> Result<Buf<T>> {
    if let Some(b) = recycle::take_buf(n) {
        return Ok(b);
    }
    if let Some(b) = pool::take(n) {
        return Ok(b);
    }
    let mut b = Buf::new();
    b.try_reserve_exact(n)
        .map_err(|_| oom(op, n, std::mem::size_of::<T>()))?;
    let bytes = b.capacity() * std::mem::size_of::<T>();
    if bytes >= HUGE_MIN && b.spilled() {
        advise_huge(b.as_ptr() as usize, bytes);
    }
    Ok(b)
}

/// New buffers of at least this many bytes ask for huge pages.
pub const HUGE_MIN: usize = 2 << 20;
/// The size of a transparent huge page on x86-64 and most other targets.
const HUGE_PAGE: usize = 2 << 20;

/// The part of `bytes` bytes at address `start` that whole huge pages
/// cover: its start and length (none if no aligned 2 MiB fits).
pub fn huge_range(start: usize, bytes: usize) -> Option<(usize, usize)> {
    let first = start.checked_next_multiple_of(HUGE_PAGE)?;
    let end = start.checked_add(bytes)? / HUGE_PAGE * HUGE_PAGE;
    (end > first).then(|| (first, end - first))
}

/// Asks the system to back the huge-page-aligned part of a new buffer with
/// transparent huge pages (Linux; elsewhere nothing). Only advice: the
/// result is ignored (`EINVAL` where the kernel has no huge pages).
pub(crate) fn advise_huge(start: usize, bytes: usize) {
    #[cfg(target_os = "linux")]
    if let Some((first, len)) = huge_range(start, bytes) {
        unsafe extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        /// `MADV_HUGEPAGE` of Linux's `<asm-generic/mman-common.h>`.
        const MADV_HUGEPAGE: i32 = 14;
        // SAFETY: the range lies inside the buffer just allocated (page
        // aligned, as madvise requires); advice changes no contents
        unsafe { madvise(first as *mut std::ffi::c_void, len, MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}
