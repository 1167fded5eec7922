//! A small cache of large freed buffers, reused by the kernels' outputs.
//!
//! A step of a training loop frees and allocates the same large buffers
//! every time. Through `malloc` alone, each step would get them as fresh
//! pages (the allocator returns the freed top of its heap to the system),
//! and the kernel's page faults and zeroing cost more than the arithmetic
//! on them: on the project's machines about 0.7 ms per MiB, measured on the
//! `elementwise` bench (4 Mi-element tensors). So storages of at least
//! [`MIN_BYTES`] go here when dropped, up to [`MAX_BYTES`] in all, and
//! [`take`] hands them back to a kernel that needs a buffer of exactly that
//! many elements (the most recently freed one of that size). Smaller
//! buffers are left to `malloc`, which recycles them well.
//!
//! **When the cache is full**, a freed buffer makes room by releasing the
//! buffers cached longest, rather than being refused. A refused newcomer
//! left the cache to whatever filled it first: one-off buffers (a data set
//! built once, an evaluation at another batch size) that no later step
//! asks for again then held the cache for the rest of the program, and
//! every step of a training loop got its buffers as fresh pages again. So
//! did the `gpt` example eagerly at context 1024 (`--width 256 --heads 4
//! --layers 2 --context 1024 --batch 1`): its validation pass before
//! training (10 windows at once) filled the 256 MiB with buffers of 40, 30
//! and 10 MiB, and each training step then faulted in about 1,800 pages
//! (40 steps: 101-103 thousand page faults, 32 thousand now; median step
//! 74-82 ms, 70-72 now). Releasing the oldest also suits a training
//! step's order: the backward pass frees the last layer's buffers first
//! and the first layer's last, and the next forward pass asks for the
//! first layer's first, so the buffers kept are the ones needed soonest.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::dtype::{Buf, DType, Element, Storage};

/// Buffers smaller than this are not cached.
pub const MIN_BYTES: usize = 64 << 10;
/// At most this many bytes are cached at once, by default.
pub(crate) const MAX_BYTES: usize = 256 << 20;

static LIMIT: AtomicUsize = AtomicUsize::new(MAX_BYTES);

/// Sets how many bytes of freed large buffers (64 KiB and more) gradtape
/// keeps for reuse; 0 disables the cache. The default is 256 MiB. Buffers
/// cached beyond a lowered limit are released at once.
///
/// ```
/// gradtape::set_buffer_cache_limit(64 << 20);
/// gradtape::clear_buffer_cache();
/// assert_eq!(gradtape::buffer_cache_bytes(), 0);
/// # gradtape::set_buffer_cache_limit(256 << 20);
/// ```
pub fn set_buffer_cache_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
    let released: Vec<Storage> = match POOL.lock() {
        Ok(mut p) => {
            let mut out = Vec::new();
            while p.bytes > bytes {
                let Some(s) = p.bufs.pop() else { break };
                p.bytes -= s.heap_bytes();
                out.push(s);
            }
            out
        }
        Err(_) => Vec::new(),
    };
    release(released);
}

/// Releases every cached buffer to the system allocator.
pub fn clear_buffer_cache() {
    let released = match POOL.lock() {
        Ok(mut p) => {
            p.bytes = 0;
            std::mem::take(&mut p.bufs)
        }
        Err(_) => Vec::new(),
    };
    release(released);
}

/// Bytes currently held by the buffer cache.
pub fn buffer_cache_bytes() -> usize {
    POOL.lock().map(|p| p.bytes).unwrap_or(0)
}

/// Frees storages without sending them back to the cache.
fn release(bufs: Vec<Storage>) {
    for mut s in bufs {
        // take the buffer out so that dropping `s` does not cache it again
        super::with_dtype!(s.dtype(), T => drop(T::take_buf(&mut s)));
    }
}
/// At most this many buffers are cached at once.
const MAX_BUFFERS: usize = 128;

struct Pool {
    bufs: Vec<Storage>,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    bufs: Vec::new(),
    bytes: 0,
});

impl Storage {
    /// Bytes of the heap buffer (0 when the elements are inline).
    pub(super) fn heap_bytes(&self) -> usize {
        fn b<T>(v: &Buf<T>) -> usize {
            if v.spilled() {
                v.capacity() * std::mem::size_of::<T>()
            } else {
                0
            }
        }
        match self {
            Storage::F32(v) => b(v),
            Storage::F64(v) => b(v),
            Storage::I32(v) => b(v),
            Storage::I64(v) => b(v),
            Storage::Bool(v) => b(v),
            Storage::C64(v) => b(v),
            Storage::C128(v) => b(v),
            Storage::F16(v) => b(v),
            Storage::BF16(v) => b(v),
        }
    }

    /// An empty storage of the same dtype (no allocation).
    pub(super) fn empty(dtype: DType) -> Storage {
        match dtype {
            DType::F32 => Storage::F32(Buf::new()),
            DType::F64 => Storage::F64(Buf::new()),
            DType::I32 => Storage::I32(Buf::new()),
            DType::I64 => Storage::I64(Buf::new()),
            DType::Bool => Storage::Bool(Buf::new()),
            DType::C64 => Storage::C64(Buf::new()),
            DType::C128 => Storage::C128(Buf::new()),
            DType::F16 => Storage::F16(Buf::new()),
            DType::BF16 => Storage::BF16(Buf::new()),
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        let bytes = self.heap_bytes();
        if bytes < MIN_BYTES {
            return;
        }
        let limit = LIMIT.load(Ordering::Relaxed);
        if bytes > limit {
            return;
        }
        let Ok(mut p) = POOL.lock() else { return };
        // room for it: the buffers cached longest (at the front) go
        let (mut n, mut freed) = (0, 0);
        while p.bufs.len() - n >= MAX_BUFFERS || p.bytes - freed + bytes > limit {
            freed += p.bufs[n].heap_bytes();
            n += 1;
        }
        let evicted: Vec<Storage> = p.bufs.drain(..n).collect();
        p.bytes = p.bytes - freed + bytes;
        let buf = std::mem::replace(self, Storage::empty(self.dtype()));
        p.bufs.push(buf);
        drop(p);
        release(evicted);
    }
}

/// An empty buffer with capacity for exactly `n` elements of `T` from the
/// cache, if it holds one.
pub fn take<T: Element>(n: usize) -> Option<Buf<T>> {
    let bytes = n.checked_mul(std::mem::size_of::<T>())?;
    if bytes < MIN_BYTES {
        return None;
    }
    let mut s = {
        let mut p = POOL.lock().ok()?;
        let i = p
            .bufs
            .iter()
            .rposition(|s| s.dtype() == T::DTYPE && s.heap_bytes() == bytes)?;
        p.bytes -= bytes;
        // (in order: the front is the longest cached, released first)
        p.bufs.remove(i)
    };
    let mut b = T::take_buf(&mut s)?;
    b.clear();
    Some(b)
}
