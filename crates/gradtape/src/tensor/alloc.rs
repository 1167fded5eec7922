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
    Ok(b)
}
