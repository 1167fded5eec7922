//! gradtape's compute threads: a small pool that splits one kernel's work
//! between the calling thread and helpers that wait for work by spinning.
//!
//! Why not rayon's pool (used before): an eager step runs hundreds of short
//! kernels, and each parallel one handed to rayon from the user's thread
//! paid for waking a sleeping worker, putting the caller to sleep on a latch
//! and waking it again. In the `mlp_step` bench that was about 170 context
//! switches per step, and two threads ran its matrix products no faster than
//! one. Here the caller takes a share of the work itself, helpers spin for
//! a while after each job before they park (as OpenMP runtimes do), so a
//! burst of kernels meets helpers that are already awake.
//!
//! A job is `f(0..n)`: every participant claims task indices from one
//! counter until none are left. The caller then closes the job and waits
//! only for helpers that have joined it; a helper that wakes late finds the
//! job closed and skips it, so the caller never waits for a sleeper. A job
//! started while another runs (another user thread, or a task that itself
//! calls [`parallel_for`]) runs on the calling thread alone. Helpers take on
//! the caller's floating-point control word (denormal flushing) for the job.
//!
//! A caller may run its jobs alone ([`alone`]): a compiled graph does on a
//! machine where its runs took longer shared than alone (another busy
//! process beside the step; `function/compile/sharing.rs`). Its jobs take
//! the nested path, whose kernels split their work by the pool's size, not
//! by who runs it: the same bits.
//!
//! The pool has `GRADTAPE_NUM_THREADS` threads, else `RAYON_NUM_THREADS`,
//! else one per core, the caller included.

use std::cell::{Cell, UnsafeCell};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a helper spins for the next job before it parks.
const SPIN: Duration = Duration::from_micros(200);
/// The `state` bit that marks a job closed; the low bits count the helpers inside it.
const CLOSED: usize = 1 << (usize::BITS - 1);

type Task = dyn Fn(usize) + Sync;

struct Slot {
    thread: Thread,
    sleeping: AtomicBool,
}

struct Pool {
    /// Serialises jobs; a caller that cannot take it runs its job alone.
    busy: Mutex<()>,
    /// Bumped once per job, after the job's fields are written.
    seq: AtomicUsize,
    /// `CLOSED` | number of helpers running tasks of the current job.
    state: AtomicUsize,
    /// The next task index to claim.
    next: AtomicUsize,
    /// Number of tasks in the current job.
    n: AtomicUsize,
    /// The caller's MXCSR, for the helpers.
    csr: AtomicUsize,
    /// The current job's function (valid while the job is open or joined).
    task: UnsafeCell<Option<*const Task>>,
    /// A panic payload from a helper, re-raised on the caller.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    slots: OnceLock<Vec<Slot>>,
}

// SAFETY: `task` is written only by the thread holding `busy`, before it
// publishes the job through `state` (release), and read by helpers only
// after they joined the job through `state` (acquire); the pointee is `Sync`.
unsafe impl Sync for Pool {}

static POOL: Pool = Pool {
    busy: Mutex::new(()),
    seq: AtomicUsize::new(0),
    state: AtomicUsize::new(CLOSED),
    next: AtomicUsize::new(0),
    n: AtomicUsize::new(0),
    csr: AtomicUsize::new(0),
    task: UnsafeCell::new(None),
    panic: Mutex::new(None),
    slots: OnceLock::new(),
};

thread_local! {
    /// Whether this thread runs its jobs alone (see [`alone`]).
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every job this thread starts run on it alone, as a job
/// nested in another is: the same splits, so the same bits, without the
/// helpers (which park after their spin).
pub fn alone<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            ALONE.with(|a| a.set(self.0));
        }
    }
    let _reset = Reset(ALONE.with(|a| a.replace(true)));
    f()
}

/// Whether this thread runs its jobs alone now (inside [`alone`]).
pub fn is_alone() -> bool {
    ALONE.with(Cell::get)
}

/// Whether the pool's helpers are all awake now, spinning for the next
/// job rather than parked (false before the pool exists). A job started
/// now is joined within a spin; a parked helper is woken by a futex call
/// and a reschedule, tens of microseconds, by which time a job of a few
/// microseconds has been run by its caller alone, which paid for the wake.
pub(crate) fn helpers_awake() -> bool {
    POOL.slots
        .get()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|s| !s.sleeping.load(Relaxed)))
}

/// Number of threads a kernel may use, the caller included.
pub fn threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<usize>().ok());
        env("GRADTAPE_NUM_THREADS")
            .or_else(|| env("RAYON_NUM_THREADS"))
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .clamp(1, 256)
    })
}

fn slots() -> &'static [Slot] {
    POOL.slots.get_or_init(|| {
        (1..threads())
            .filter_map(|i| {
                std::thread::Builder::new()
                    .name(format!("gradtape-{i}"))
                    .spawn(helper)
                    .ok()
                    .map(|h| Slot {
                        thread: h.thread().clone(),
                        sleeping: AtomicBool::new(false),
                    })
            })
            .collect()
    })
}

#[cfg(target_arch = "x86_64")]
#[allow(deprecated)] // the intrinsics are the documented way to reach MXCSR
fn get_csr() -> usize {
    // SAFETY: reading MXCSR has no side effects.
    unsafe { std::arch::x86_64::_mm_getcsr() as usize }
}
#[cfg(target_arch = "x86_64")]
#[allow(deprecated)]
fn set_csr(v: usize) {
    // SAFETY: the value was read from another thread's MXCSR, so it is valid.
    unsafe { std::arch::x86_64::_mm_setcsr(v as u32) }
}
#[cfg(not(target_arch = "x86_64"))]
fn get_csr() -> usize {
    0
}
#[cfg(not(target_arch = "x86_64"))]
fn set_csr(_: usize) {}

/// Claims and runs tasks of the current job until none are left.
fn drain(f: &(dyn Fn(usize) + Sync)) {
    let n = POOL.n.load(Relaxed);
    loop {
        let i = POOL.next.fetch_add(1, Relaxed);
        if i >= n {
            break;
        }
        f(i);
    }
}

fn helper() {
    let me = loop {
        // the slot list is being built by the thread that spawned us
        if let Some(s) = POOL.slots.get() {
            let id = std::thread::current().id();
            if let Some(i) = s.iter().position(|s| s.thread.id() == id) {
                break i;
            }
        }
        std::thread::yield_now();
    };
    let slot = &slots()[me];
    let mut seen = POOL.seq.load(Acquire);
    loop {
        // wait for a new job: spin first, then park
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let s = POOL.seq.load(Acquire);
            if s != seen {
                seen = s;
                break;
            }
            spins += 1;
            if spins.is_multiple_of(64) && start.elapsed() > SPIN {
                slot.sleeping.store(true, SeqCst);
                if POOL.seq.load(SeqCst) == seen {
                    std::thread::park();
                }
                slot.sleeping.store(false, SeqCst);
            } else {
                std::hint::spin_loop();
            }
        }
        // join the job unless it is already closed
        let mut st = POOL.state.load(Relaxed);
        let joined = loop {
            if st & CLOSED != 0 {
                break false;
            }
            match POOL.state.compare_exchange_weak(st, st + 1, Acquire, Relaxed) {
                Ok(_) => break true,
                Err(now) => st = now,
            }
        };
        if !joined {
            continue;
        }
        let old = get_csr();
        set_csr(POOL.csr.load(Relaxed));
        // SAFETY: we joined an open job, so its caller is still inside
        // `parallel_for`, keeping the function alive until we leave.
        let f = unsafe { (*POOL.task.get()).map(|p| &*p) };
        if let Some(f) = f
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| drain(f)))
        {
            POOL.next.store(usize::MAX / 2, Relaxed);
            if let Ok(mut slot) = POOL.panic.lock() {
                *slot = Some(p);
            }
        }
        set_csr(old);
        POOL.state.fetch_sub(1, Release);
    }
}

/// Closes the current job and waits for the helpers inside it, also when
/// the caller's own share panics.
struct Close;

impl Drop for Close {
    fn drop(&mut self) {
        POOL.next.store(usize::MAX / 2, Relaxed);
        POOL.state.fetch_or(CLOSED, AcqRel);
        let mut spins = 0u32;
        while POOL.state.load(Acquire) & !CLOSED != 0 {
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: the job is closed and no helper is inside it.
        unsafe { *POOL.task.get() = None };
    }
}

/// Runs `f(i)` for every `i` in `0..n`, spread over the compute threads;
/// returns when all have run. Tasks may run in any order and concurrently.
///
/// `f` is called through one `&dyn` reference whether it runs here or on
/// the pool: its body is compiled once per task type (an inline call for
/// the one-task case besides was a second copy of every kernel loop); one
/// indirect call per task is all it costs.
#[inline]
pub fn parallel_for(n: usize, f: impl Fn(usize) + Sync) {
    run_tasks(n, &f)
}

/// [`parallel_for`] for its `&dyn` task.
#[inline(never)]
fn run_tasks(n: usize, f: &(dyn Fn(usize) + Sync)) {
    if n == 0 {
        return;
    }
    if n == 1 || threads() == 1 {
        return (0..n).for_each(f);
    }
    spread(n, f)
}

/// [`parallel_for`]'s job for the pool, in one copy for every task type
/// (generic, the pool's machinery was compiled into each of the ~900
/// kernels that call it, an eighth of the library's code).
#[inline(never)]
fn spread(n: usize, f: &(dyn Fn(usize) + Sync)) {
    let alone = || (0..n).for_each(f);
    if is_alone() {
        return alone();
    }
    // a poisoned lock only means an earlier job's task panicked
    let _busy = match POOL.busy.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return alone(),
    };
    let slots = slots();
    if slots.is_empty() {
        return alone();
    }
    // SAFETY: we hold `busy` and the previous job is closed with no helper
    // inside, so nobody reads `task`. The lifetime is erased only while
    // this call lasts: `Close` waits for every helper that joined.
    unsafe {
        *POOL.task.get() = Some(std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Task>(
            f,
        ));
    }
    // a payload left by a job whose caller panicked too is stale now
    if let Ok(mut p) = POOL.panic.lock() {
        *p = None;
    }
    POOL.n.store(n, Relaxed);
    POOL.next.store(0, Relaxed);
    POOL.csr.store(get_csr(), Relaxed);
    POOL.state.store(0, Release);
    POOL.seq.fetch_add(1, SeqCst);
    for s in slots {
        if s.sleeping.load(SeqCst) {
            s.thread.unpark();
        }
    }
    {
        let _close = Close;
        drain(f);
    }
    let p = POOL.panic.lock().ok().and_then(|mut p| p.take());
    if let Some(p) = p {
        resume_unwind(p);
    }
}

/// `out.chunks_mut(chunk).enumerate().for_each(f)`, spread over the
/// compute threads.
pub fn for_each_chunk_mut<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunk = chunk.max(1);
    let len = out.len();
    let ptr = SendPtr(out.as_mut_ptr());
    parallel_for(len.div_ceil(chunk), |i| {
        let start = i * chunk;
        let end = (start + chunk).min(len);
        // SAFETY: the chunks are disjoint ranges of `out`, which is
        // borrowed mutably for the whole call, and each index runs once.
        let part = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(start), end - start) };
        f(i, part)
    });
}

/// Like [`for_each_chunk_mut`] over two slices chunked in step.
pub(crate) fn for_each_chunk2_mut<T: Send, U: Send>(
    a: &mut [T],
    ca: usize,
    b: &mut [U],
    cb: usize,
    f: impl Fn(usize, &mut [T], &mut [U]) + Sync,
) {
    let (ca, cb) = (ca.max(1), cb.max(1));
    let n = a.len().div_ceil(ca).min(b.len().div_ceil(cb));
    let (la, lb) = (a.len(), b.len());
    let (pa, pb) = (SendPtr(a.as_mut_ptr()), SendPtr(b.as_mut_ptr()));
    parallel_for(n, |i| {
        // SAFETY: as in `for_each_chunk_mut`, for each slice.
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts_mut(pa.get().add(i * ca), ((i + 1) * ca).min(la) - i * ca),
                std::slice::from_raw_parts_mut(pb.get().add(i * cb), ((i + 1) * cb).min(lb) - i * cb),
            )
        };
        f(i, x, y)
    });
}

/// Splits an `m`×`n` output into one block per thread along its longer side
/// (columns in multiples of `col_align`, rows in multiples of `row_align`)
/// and runs `piece(rows, cols)` for each, in parallel. The other side is
/// split instead when the longer side's largest block is more than a
/// quarter larger than the other side's (a `32×128` output in 48-column
/// tiles splits 96 + 32 by columns, 16 + 16 by rows); a near tie keeps the
/// longer side, whose split packs less of the operands twice; a square
/// output splits by rows if `rows_on_tie` (else by columns). Returns
/// false, doing nothing, when neither side holds two aligned blocks.
pub(crate) fn split_output(
    m: usize,
    n: usize,
    (row_align, col_align): (usize, usize),
    rows_on_tie: bool,
    piece: impl Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Sync,
) -> bool {
    let t = threads();
    let w = n.div_ceil(t).next_multiple_of(col_align);
    let h = m.div_ceil(t).next_multiple_of(row_align);
    // the largest block of each split, in elements
    let cols = (n >= 2 * col_align).then_some(m * w);
    let rows = (m >= 2 * row_align).then_some(h * n);
    let by_cols = match (cols, rows) {
        (Some(c), Some(r)) if n > m || (n == m && !rows_on_tie) => 4 * c <= 5 * r,
        (Some(c), Some(r)) => 4 * r > 5 * c,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => return false,
    };
    if by_cols {
        parallel_for(n.div_ceil(w), |i| piece(0..m, i * w..((i + 1) * w).min(n)));
    } else {
        parallel_for(m.div_ceil(h), |i| piece(i * h..((i + 1) * h).min(m), 0..n));
    }
    true
}

/// `(0..n).map(f).collect()`, spread over the compute threads.
pub(crate) fn map<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let mut out: Vec<R> = Vec::with_capacity(n);
    for_each_chunk_mut(&mut out.spare_capacity_mut()[..n], 1, |i, slot| {
        slot[0].write(f(i));
    });
    // SAFETY: every index in 0..n ran once and wrote its slot (a panic
    // would have unwound past this line, leaking the written ones).
    unsafe { out.set_len(n) };
    out
}

/// [`map`] into a vector that holds up to 16 results inline (no
/// allocation for as many tasks).
pub(crate) fn map_small<R: Send + Default>(n: usize, f: impl Fn(usize) -> R + Sync) -> smallvec::SmallVec<[R; 16]> {
    let mut out: smallvec::SmallVec<[R; 16]> = (0..n).map(|_| R::default()).collect();
    for_each_chunk_mut(&mut out, 1, |i, slot| slot[0] = f(i));
    out
}

/// A raw pointer that may cross threads (the callers guarantee disjoint use).
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used for disjoint ranges handed to one task each.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the `Sync` wrapper).
    #[inline]
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}
