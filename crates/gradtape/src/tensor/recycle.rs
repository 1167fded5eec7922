//! Tensors' allocations reused from run to run of a compiled graph.
//!
//! A tensor costs up to three allocations: its handle (the `Arc` of id,
//! layout and data), the `Arc` of a heap storage, and the buffer. A
//! compiled graph's run makes the same tensors at every call and drops
//! them at their last reader, so its executor keeps them in a [`Bin`]
//! instead: a value whose handle nothing else holds (no other handle, no
//! weak one) is given to the bin when it dies ([`give`]), and the tensors
//! the run makes next take their handle, storage `Arc` and buffer from it
//! ([`Tensor::from_storage`], [`Tensor::view`] and
//! [`try_buf`](super::alloc::try_buf) ask it first). A reused tensor gets a
//! fresh id: it is a new value in old memory.
//!
//! The bin is active on one thread while a run uses it ([`Bin::scope`]);
//! kernels that make tensors on other threads, and every tensor made
//! outside a run, allocate as usual. What a bin holds is bounded: a
//! tensor given during one run and not taken by the end of the next is
//! freed, so a bin never holds more than one run gave it.
//!
//! Returned values escape to the caller; the bin keeps a handle on each
//! ([`Bin::returned`]) and, at the start of the next run, takes those the
//! caller has dropped since (the bin's handle is then the only one).
//!
//! A kernel's scratch buffer (one not made into a tensor: a padded copy,
//! partial sums) goes back to the bin with [`put`], into a handle whose
//! buffer was taken, so that the next run's [`take_buf`] of its size finds
//! it. A task of a parallel job that runs a whole node on another thread
//! (the executor's pairs) runs with a bin of its own ([`Bin::task_scope`]),
//! kept from run to run, which the run's bin lends the buffers of the
//! node's outputs ([`lend`]): the outputs die on the run's thread, in its
//! bin.

use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::sync::Arc;

use super::{Buf, DType, Data, Element, Inner, Layout, Storage, Tensor, TensorId};

/// A tensor waiting for reuse, with the run that gave it.
struct Held {
    t: Tensor,
    run: u32,
}

/// The dtype and the bytes of a heap buffer, by which the bin finds a
/// buffer of the size a kernel asks for.
type Size = (DType, usize);

/// The size of a storage's heap buffer.
fn size_of(s: &Storage) -> Size {
    (s.dtype(), s.heap_bytes())
}

/// Tensors of dead values, sorted by what they still have.
#[derive(Default)]
pub struct Bin {
    /// handle, storage `Arc` and heap buffer, all held alone, by the
    /// buffer's size: finding one of a size (or none) takes one look-up
    /// whatever the bin holds (a scan of it, before, cost a step whose
    /// loop ran 128 iterations a tenth of its time: every small tensor the
    /// loop made looked at each of ~260 held buffers)
    full: rustc_hash::FxHashMap<Size, Vec<Held>>,
    /// handle and storage `Arc` (held alone), the buffer taken
    shells: Vec<Held>,
    /// a handle alone (its data inline, or shared with a view)
    bare: Vec<Held>,
    /// the last run's returned values
    returned: Vec<Tensor>,
    /// runs so far
    run: u32,
}

thread_local! {
    /// The bin of the run on this thread, if any: a pointer to the bin
    /// the run's [`Bin::scope`] (or a task's [`Bin::task_scope`]) holds
    /// by `&mut` while it runs, null otherwise. Read only while `ON` is
    /// set, through the cell's borrow (a tensor dropped while the bin is
    /// borrowed is released, never put in it). (The bin itself was moved
    /// in and out of this slot at every run: two moves of its maps and
    /// lists and a drop of the empty one left behind, a tenth of a small
    /// traced call's fixed cost.)
    static ACTIVE: RefCell<*mut Bin> = const { RefCell::new(std::ptr::null_mut()) };
    /// Whether `ACTIVE` holds a bin (read first: no borrow on the common
    /// path, tensors made outside runs).
    static ON: Cell<bool> = const { Cell::new(false) };
}

/// Uninstalls the run's bin when the run ends (or unwinds): `ON` off
/// first, so the pointer is never read again, then the pointer cleared.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ON.with(|on| on.set(false));
        let _ = ACTIVE.try_with(|a| a.try_borrow_mut().map(|mut slot| *slot = std::ptr::null_mut()));
    }
}

/// Puts the thread's own bin (if any) back in place of a task's when the
/// task ends (or unwinds).
struct Back {
    prev: *mut Bin,
    was_on: bool,
}

impl Drop for Back {
    fn drop(&mut self) {
        // (off while the pointer changes: a failed borrow below leaves
        // no bin in use)
        ON.with(|on| on.set(false));
        let back = ACTIVE.try_with(|a| a.try_borrow_mut().map(|mut slot| *slot = self.prev));
        if matches!(back, Ok(Ok(()))) {
            ON.with(|on| on.set(self.was_on));
        }
    }
}

impl Bin {
    /// Runs `f` with this bin active on this thread. Within a run already
    /// using a bin (or when the thread's slot is busy), `f` runs without.
    pub fn scope<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if ON.with(Cell::get) {
            return f();
        }
        self.run = self.run.wrapping_add(1);
        // what the caller dropped of the last run's results
        let returned = std::mem::take(&mut self.returned);
        // (the bin is reached through the pointer alone until `restore`
        // drops: `self` is not touched meanwhile)
        let me: *mut Bin = self;
        let installed = ACTIVE.with(|a| match a.try_borrow_mut() {
            Ok(mut slot) => {
                *slot = me;
                true
            }
            Err(_) => false,
        });
        if !installed {
            self.returned = returned;
            return f();
        }
        ON.with(|on| on.set(true));
        let restore = Restore;
        let mut returned = returned;
        for t in returned.drain(..) {
            give(t);
        }
        let out = f();
        drop(restore);
        // (the drained vector keeps its room for the next results)
        self.returned = returned;
        // what earlier runs gave and this one did not take is freed
        self.drop_stale();
        out
    }

    /// Frees what the bin held from before the current run and the run did
    /// not take.
    fn drop_stale(&mut self) {
        let run = self.run;
        let recent = |h: &Held| h.run == run;
        for held in self.full.values_mut() {
            held.retain(recent);
        }
        // (the sizes held none of are forgotten once they are many: a bin
        // of graphs whose shapes change from call to call)
        if self.full.len() > 64 {
            self.full.retain(|_, held| !held.is_empty());
        }
        self.shells.retain(recent);
        self.bare.retain(recent);
    }

    /// Keeps a handle on each of a run's returned values, to reuse them
    /// once the caller drops them (see [`scope`](Self::scope)).
    pub(crate) fn returned(&mut self, outputs: &[Tensor]) {
        self.returned.clear();
        self.returned.extend(outputs.iter().cloned());
    }

    /// Runs `f` (a task of a parallel job, on whichever thread runs it) with
    /// this bin active on this thread in place of the thread's own, which
    /// is put back afterwards. What the task gives and does not take back
    /// stays here for its next run (see [`lend`]); what this bin held from
    /// an earlier run and the task did not take is freed, as in
    /// [`scope`](Self::scope).
    pub fn task_scope<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.run = self.run.wrapping_add(1);
        let me: *mut Bin = self;
        let installed = ACTIVE.with(|a| match a.try_borrow_mut() {
            Ok(mut slot) => Some(std::mem::replace(&mut *slot, me)),
            Err(_) => None,
        });
        let Some(prev) = installed else {
            return f();
        };
        let was_on = ON.with(|on| on.replace(true));
        let back = Back { prev, was_on };
        let out = f();
        drop(back);
        self.drop_stale();
        out
    }

    /// Tensors the bin holds (for tests of its bound).
    #[allow(clippy::len_without_is_empty)] // (pub for the tests only)
    pub fn len(&self) -> usize {
        self.full.values().map(Vec::len).sum::<usize>() + self.shells.len() + self.bare.len() + self.returned.len()
    }
}

/// Whether a run's bin is active on this thread (a graph run now runs
/// inside another's: a loop's body, a branch).
#[inline]
pub(crate) fn active() -> bool {
    ON.with(Cell::get)
}

/// Runs `f` on the active bin, if this thread has one.
#[inline]
fn with_bin<R>(f: impl FnOnce(&mut Bin) -> R) -> Option<R> {
    if !ON.with(Cell::get) {
        return None;
    }
    ACTIVE
        .try_with(|a| {
            let slot = a.try_borrow_mut().ok()?;
            // SAFETY: a non-null pointer is the bin of the `scope` or
            // `task_scope` running on this thread, which holds it by
            // `&mut` and does not touch it until it clears the pointer
            // (`Restore`, `Back`); the cell's borrow, held while `f` runs,
            // makes this the only reference to it.
            unsafe { slot.as_mut() }.map(f)
        })
        .ok()
        .flatten()
}

/// Gives a dead value's tensor to the active bin, when nothing else holds
/// its handle; otherwise (or without a bin) drops it. (What dropping it
/// does: see [`dropped`].)
pub(crate) fn give(t: Tensor) {
    drop(t)
}

/// Where a dropped tensor's handle goes: to the active bin when nothing
/// else holds it (no other handle, no weak one) and a run is active on this
/// thread, so that tensors a run's ops make and drop within it (a kernel's
/// temporaries) are reused as the graph's dead values are; otherwise it is
/// released.
#[inline]
pub(super) fn dropped(inner: Arc<Inner>) {
    if !ON.with(Cell::get) {
        return;
    }
    keep(inner);
}

/// [`dropped`] within a run: sorts a handle held alone into the bin.
fn keep(mut arc: Arc<Inner>) {
    // (a handle another one shares is dropped with one atomic operation,
    // not a failed `get_mut` then the drop: clones of a run's values die
    // by the thousand in a loop's iterations)
    if Arc::strong_count(&arc) != 1 {
        return;
    }
    let Some(inner) = Arc::get_mut(&mut arc) else {
        return;
    };
    // (0: full, of this size; 1: a shell; 2: a handle alone)
    let (kind, size) = match &mut inner.data {
        Data::Shared(s) => match Arc::get_mut(s) {
            Some(s) if s.heap_bytes() == 0 => (1, None),
            Some(s) => (0, Some(size_of(s))),
            None => {
                // a view still holds the buffer: keep the handle alone
                inner.data = Data::Inline(Storage::empty(s.dtype()));
                (2, None)
            }
        },
        Data::Inline(_) => (2, None),
        Data::Device(b) => {
            // (device memory goes back to its own allocator)
            inner.data = Data::Inline(Storage::empty(b.dtype));
            (2, None)
        }
    };
    // (a handle the bin cannot take, its slot busy, is released: dropping
    // an `Arc` of the bin's thread never comes back here)
    let _ = with_bin(move |b| {
        let t = Tensor {
            inner: ManuallyDrop::new(arc),
        };
        let held = Held { t, run: b.run };
        match (kind, size) {
            (0, Some(size)) => b.full.entry(size).or_default().push(held),
            (1, _) => b.shells.push(held),
            _ => b.bare.push(held),
        }
    });
}

/// The handle of a reused tensor, given a fresh id, `layout` and `data`.
fn renew(mut t: Tensor, layout: Layout, data: Data) -> Tensor {
    if let Some(inner) = Arc::get_mut(&mut t.inner) {
        inner.id = TensorId::fresh();
        inner.layout = layout;
        inner.data = data;
        return t;
    }
    // (never: the bin holds handles held alone)
    Tensor {
        inner: ManuallyDrop::new(Arc::new(Inner {
            id: TensorId::fresh(),
            layout,
            data,
        })),
    }
}

/// A tensor of a heap `storage` in a reused handle and storage `Arc`, or
/// the storage back when the bin has none.
pub(super) fn shared(storage: Storage, shape: &[usize]) -> std::result::Result<Tensor, Storage> {
    let Some(Some(held)) = with_bin(|b| b.shells.pop().or_else(|| b.bare.pop())) else {
        return Err(storage);
    };
    let mut t = held.t;
    if let Some(inner) = Arc::get_mut(&mut t.inner)
        && let Data::Shared(arc) = &mut inner.data
        && let Some(s) = Arc::get_mut(arc)
    {
        *s = storage;
        inner.id = TensorId::fresh();
        inner.layout = Layout::contiguous(shape);
        return Ok(t);
    }
    Ok(renew(t, Layout::contiguous(shape), Data::Shared(Arc::new(storage))))
}

/// A tensor of `data` and `layout` in a reused handle, or both back when
/// the bin has none (not an error: the caller makes a new handle of them).
#[allow(clippy::result_large_err)]
pub(super) fn handle(data: Data, layout: Layout) -> std::result::Result<Tensor, (Data, Layout)> {
    match with_bin(|b| b.bare.pop().or_else(|| b.shells.pop())) {
        Some(Some(held)) => Ok(renew(held.t, layout, data)),
        _ => Err((data, layout)),
    }
}

/// An empty buffer with room for exactly `n` elements of `T`, taken from a
/// dead tensor of the active bin (which keeps its handle and storage `Arc`
/// for the next tensor).
pub fn take_buf<T: Element>(n: usize) -> Option<Buf<T>> {
    with_bin(|b| {
        let bytes = n.checked_mul(std::mem::size_of::<T>())?;
        let mut held = b.full.get_mut(&(T::DTYPE, bytes))?.pop()?;
        let inner = Arc::get_mut(&mut held.t.inner)?;
        let Data::Shared(arc) = &mut inner.data else {
            return None;
        };
        let mut buf = T::take_buf(Arc::get_mut(arc)?)?;
        buf.clear();
        b.shells.push(held);
        Some(buf)
    })
    .flatten()
}

/// Gives a kernel's scratch `storage`, done with, to the active bin: into a
/// handle whose buffer was taken (a new handle when it holds none, once),
/// so that the next run's [`take_buf`] of that size finds it. Without a
/// bin, and for elements held inline, the storage is dropped (a large
/// buffer goes to the buffer cache).
pub fn put(storage: Storage) {
    if storage.heap_bytes() == 0 || !ON.with(Cell::get) {
        return;
    }
    let _ = with_bin(move |b| {
        let layout = Layout::contiguous(&[storage.len()]);
        let t = match b.shells.pop() {
            Some(mut held) => match Arc::get_mut(&mut held.t.inner) {
                Some(inner) => {
                    let dst = match &mut inner.data {
                        Data::Shared(arc) => Arc::get_mut(arc),
                        Data::Inline(_) | Data::Device(_) => None,
                    };
                    match dst {
                        // (the shell's storage is empty: nothing is freed)
                        Some(dst) => *dst = storage,
                        None => inner.data = Data::Shared(Arc::new(storage)),
                    }
                    inner.layout = layout;
                    held.t
                }
                // (never: the bin holds handles held alone)
                None => return,
            },
            None => Tensor {
                inner: ManuallyDrop::new(Arc::new(Inner {
                    id: TensorId::fresh(),
                    layout,
                    data: Data::Shared(Arc::new(storage)),
                })),
            },
        };
        let size = size_of(t.inner.data.storage());
        b.full.entry(size).or_default().push(Held { t, run: b.run });
    });
}

/// Moves to `side`, the bin of a job's task (see [`Bin::task_scope`]),
/// for each of `wants` (a dtype and a byte count: an output of the node the
/// task runs) a tensor of the active bin with a buffer of exactly that
/// many bytes of that dtype, or, when it holds none, a handle, for the task
/// to make its output with.
pub fn lend(side: &mut Bin, wants: impl Iterator<Item = (DType, usize)>) {
    let _ = with_bin(|b| {
        // (tagged with the task's coming run: what it does not take then
        // is freed at the end of the one after)
        let run = side.run.wrapping_add(1);
        for (dtype, bytes) in wants {
            if let Some(mut h) = b.full.get_mut(&(dtype, bytes)).and_then(Vec::pop) {
                h.run = run;
                side.full.entry((dtype, bytes)).or_default().push(h);
            } else if let Some(mut h) = b.shells.pop() {
                h.run = run;
                side.shells.push(h);
            } else if let Some(mut h) = b.bare.pop() {
                h.run = run;
                side.bare.push(h);
            }
        }
    });
}
