//! One parallel pass over the updates of every variable of a step.
//!
//! An optimizer step updates many variables: a GPT of width 384 and 4
//! blocks has 68, from 384 elements (a LayerNorm's `gamma`) to 590 k (a
//! feed-forward kernel). Run one after another, each variable was its own
//! parallel job: its locks taken, its pass split over the threads and
//! joined, the variables under two tasks (every bias and norm) updated by
//! the calling thread while the helper waited, and a variable whose
//! gradient is a strided view (the query, key and value kernels' slices
//! of one `[384, 1152]` gradient, once the compiler fused their products)
//! first gathered into a copy by the calling thread alone.
//!
//! Here a step's updates are collected first ([`batched`]: each
//! `kernel::run` inside it becomes a [`Job`] instead of running), then
//! [`flush`] runs them together:
//!
//! 1. the write locks of every variable and slot are taken, in the order
//!    of their handles (any two batches lock in the same order, and the
//!    single-variable path's order, variable then slots, is that order
//!    too: slots are made after their variable);
//! 2. each job is *bound* to its buffers (made writable in place, as
//!    before) and its gradient, read where it lies: a contiguous slice, or
//!    the rows of a strided view (its contiguous inner runs, each passed to
//!    the update loop as it is), or the summed rows of a sparse gradient;
//! 3. the jobs' elements, end to end, are cut into [`TASK`]-element tasks
//!    of one `parallel_for`: a task may cover the tail of one variable and
//!    the head of the next, so both threads stream memory until the last
//!    task, and the small variables are spread like the rest.
//!
//! Each element's update reads and writes that element only, and the
//! update loop computes every element alike wherever a piece starts or
//! ends (its runs of `LANES` are local copies; see `kernel::pass`), so the
//! result is that of the variables updated one by one, bit for bit, for any
//! cut and any thread count (`tests/internals/optim_kernel_bits.rs`).
//!
//! A batch in which a variable appears twice (a variable listed twice, or
//! one that is also another's slot) runs its jobs one at a time, in their
//! order, as before. An error while collecting drops the batch: no
//! variable of the step is written.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ops::Range;

use smallvec::SmallVec;

use super::kernel::{values_mut, ZEROS};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::kernels::cpu::workers::{parallel_for, SendPtr};
use crate::tensor::layout::{coalesce, contiguous_strides, for_rows, Shape, Strides};
use crate::tensor::{Float, Tensor};

/// A rule's update loop for one dtype (`kernel::pass` or the reference
/// `kernel::pass_elementwise`, or the half types' `half_update::pass`)
/// over the weight decay, the gradient's factor, the weights, their slots
/// and the gradient, owning its rule.
pub(crate) type OwnedPass<T> = Box<Loop<T>>;

/// An update loop (see [`OwnedPass`]).
pub(crate) type Loop<T> = dyn Fn(Option<(T, T)>, Option<T>, &mut [T], &mut [&mut [T]], &[T]) + Sync;

/// Elements per task of the batch's pass, and the fewest spread at all:
/// a pass is a few nanoseconds an element at most (Adam's square root and
/// division), so a task of this size is ~10-40 µs, well above what handing
/// it to a helper costs.
pub(crate) const TASK: usize = 1 << 14;

/// A gradient as a job holds it.
pub(crate) enum Grad<T> {
    /// A dense gradient of the variable's shape and dtype.
    Dense(Tensor),
    /// Sorted distinct row numbers and their summed values (`width` each).
    Sparse {
        rows: Vec<usize>,
        vals: Vec<T>,
        width: usize,
    },
}

/// One variable's update, waiting for its batch.
pub(crate) struct Job<T: Float> {
    pub var: Variable,
    pub slots: Vec<Variable>,
    pub grad: Grad<T>,
    /// Whether every element is visited (a sparse gradient's gaps with a
    /// zero gradient), else a sparse gradient's rows only.
    pub all: bool,
    /// The weight decay and the learning rate, when the decay is on.
    pub decay: Option<(T, T)>,
    /// The factor every gradient element is multiplied by first.
    pub factor: Option<T>,
    pub pass: OwnedPass<T>,
}

/// A [`Job`] of any dtype.
pub(crate) trait Pending {
    /// The variable and its slots.
    fn variables(&self) -> (&Variable, &[Variable]);
    /// The job on its buffers: `w` the variable's value, `s` its slots'
    /// (locked by the caller for as long as the result lives); with
    /// `gather`, a strided gradient is gathered into a copy first (the
    /// tests' reference) rather than read row by row where it lies.
    fn bind<'a>(&'a self, w: &'a mut Tensor, s: Vec<&'a mut Tensor>, gather: bool) -> Result<Box<dyn Bound + 'a>>;
}

/// A job bound to its buffers: its work as `units()` units (elements, or
/// a sparse gradient's listed elements), any range of which can run.
pub(crate) trait Bound: Sync {
    fn units(&self) -> usize;
    /// Updates the elements of `units`.
    ///
    /// # Safety
    /// Calls that may run at the same time must be given disjoint ranges,
    /// within `0..units()`.
    unsafe fn run(&self, units: Range<usize>);
}

thread_local! {
    /// The jobs of the batch being collected on this thread ([`batched`]).
    static BATCH: RefCell<Option<Vec<Box<dyn Pending>>>> = const { RefCell::new(None) };
}

/// Runs `f` (an optimizer step's per-variable updates) with the host
/// updates it starts collected, then runs them in one pass ([`flush`]).
/// Inside another `batched`, `f` just runs (the outer one flushes). If `f`
/// fails, nothing it collected is written.
pub(crate) fn batched(f: impl FnOnce() -> Result<()>) -> Result<()> {
    if BATCH.with(|b| b.borrow().is_some()) {
        return f();
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BATCH.with(|b| b.borrow_mut().take());
        }
    }
    let reset = Reset;
    BATCH.with(|b| *b.borrow_mut() = Some(Vec::new()));
    let done = f();
    let jobs = BATCH.with(|b| b.borrow_mut().take()).unwrap_or_default();
    drop(reset);
    done?;
    flush(jobs, false)
}

/// Runs `job` now, or adds it to this thread's batch when one is being
/// collected; with `sequential` (the tests' reference) now, on this
/// thread, in one call of its pass per contiguous piece.
pub(crate) fn submit(job: Box<dyn Pending>, sequential: bool) -> Result<()> {
    if sequential {
        return flush(vec![job], true);
    }
    let job = BATCH.with(|b| match b.borrow_mut().as_mut() {
        Some(batch) => {
            batch.push(job);
            None
        }
        None => Some(job),
    });
    match job {
        Some(job) => flush(vec![job], false),
        None => Ok(()),
    }
}

/// Locks every variable and slot of `jobs`, binds the jobs and runs them
/// in one pass (see the [module docs](self)); one at a time when a
/// variable appears twice.
pub(crate) fn flush(jobs: Vec<Box<dyn Pending>>, sequential: bool) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    let vars: Vec<&Variable> = jobs
        .iter()
        .flat_map(|j| {
            let (v, s) = j.variables();
            std::iter::once(v).chain(s)
        })
        .collect();
    let mut order: Vec<usize> = (0..vars.len()).collect();
    order.sort_unstable_by_key(|&i| vars[i].handle());
    if jobs.len() > 1 && order.windows(2).any(|p| vars[p[0]].handle() == vars[p[1]].handle()) {
        for job in jobs {
            flush(vec![job], sequential)?;
        }
        return Ok(());
    }
    let mut guards: Vec<Option<std::sync::RwLockWriteGuard<'_, Tensor>>> = vars.iter().map(|_| None).collect();
    for &i in &order {
        guards[i] = Some(vars[i].write_value());
    }
    let mut locked = guards.iter_mut().flatten().map(|g| &mut **g);
    let mut bound: Vec<Box<dyn Bound + '_>> = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let k = job.variables().1.len();
        let w = locked.next().ok_or_else(|| internal("a variable's lock"))?;
        let s: Vec<&mut Tensor> = locked.by_ref().take(k).collect();
        bound.push(job.bind(w, s, sequential)?);
    }
    run_all(&bound, sequential);
    Ok(())
}

fn internal(what: &str) -> Error {
    Error::invalid("apply_gradients", format!("internal: {what} is missing"))
}

/// Runs every unit of `bound`: end to end, in [`TASK`]-unit tasks over the
/// compute threads, or with `sequential` each job whole, in order, on
/// this thread.
fn run_all(bound: &[Box<dyn Bound + '_>], sequential: bool) {
    if sequential {
        for b in bound {
            // SAFETY: one call, on this thread, over the job's units.
            unsafe { b.run(0..b.units()) };
        }
        return;
    }
    // ends[j]: the units of jobs 0..=j
    let ends: Vec<usize> = bound
        .iter()
        .scan(0, |at, b| {
            *at += b.units();
            Some(*at)
        })
        .collect();
    let total = ends.last().copied().unwrap_or(0);
    parallel_for(total.div_ceil(TASK), |i| {
        let (lo, hi) = (i * TASK, ((i + 1) * TASK).min(total));
        let mut j = ends.partition_point(|&e| e <= lo);
        let mut at = lo;
        while at < hi && j < bound.len() {
            let start = ends[j] - bound[j].units();
            let end = ends[j].min(hi);
            if end > at {
                // SAFETY: the tasks' ranges of the end-to-end units are
                // disjoint and each task runs once, so the pieces of every
                // job given to concurrent calls are disjoint.
                unsafe { bound[j].run(at - start..end - start) };
            }
            at = end;
            j += 1;
        }
    });
}

/// A job's gradient as its pass reads it.
enum View<'a, T: Clone> {
    /// Contiguous (borrowed), or gathered into a copy.
    Flat(Cow<'a, [T]>),
    /// A strided view whose rows (its coalesced last dimension, `len`
    /// elements at stride 1) are read where they lie.
    Rows {
        buf: &'a [T],
        shape: Shape,
        strides: [Strides; 1],
        offset: usize,
        len: usize,
    },
    Sparse {
        rows: &'a [usize],
        vals: &'a [T],
        width: usize,
    },
}

/// A [`Job`] bound to its variable's and slots' buffers.
struct BoundJob<'a, T: Float> {
    w: SendPtr<T>,
    s: SmallVec<[SendPtr<T>; 3]>,
    n: usize,
    grad: View<'a, T>,
    all: bool,
    decay: Option<(T, T)>,
    factor: Option<T>,
    pass: &'a Loop<T>,
}

/// The fewest elements per row for a strided gradient to be read row by
/// row in place (each row is one call of the update loop); shorter rows
/// are gathered into a copy first.
const ROW_FROM: usize = 64;

/// How the update reads dense gradient `g` of `n` elements (with
/// `gather`, as one slice, gathered if strided).
fn dense_view<'a, T: Float>(g: &'a Tensor, n: usize, name: &str, gather: bool) -> Result<View<'a, T>> {
    const OP: &str = "apply_gradients";
    if g.numel() != n || g.dtype() != T::DTYPE {
        return Err(Error::invalid(
            OP,
            format!(
                "variable '{name}' has {n} elements of {:?}; its gradient {:?} of {:?}",
                T::DTYPE,
                g.shape(),
                g.dtype()
            ),
        ));
    }
    crate::kernels::gpu::expect_host(OP, g)?;
    let l = g.layout();
    if !gather && !l.is_contiguous() {
        let (shape, [_, s]) = coalesce(&l.shape, [&contiguous_strides(&l.shape), &l.strides]);
        let len = *shape.last().unwrap_or(&1);
        if s.last() == Some(&1) && len >= ROW_FROM && s.iter().all(|&s| s >= 0) {
            return Ok(View::Rows {
                buf: g.buffer::<T>(),
                shape,
                strides: [s],
                offset: l.offset,
                len,
            });
        }
    }
    Ok(View::Flat(g.values::<T>(OP)?))
}

impl<T: Float> Pending for Job<T> {
    fn variables(&self) -> (&Variable, &[Variable]) {
        (&self.var, &self.slots)
    }

    fn bind<'a>(&'a self, w: &'a mut Tensor, s: Vec<&'a mut Tensor>, gather: bool) -> Result<Box<dyn Bound + 'a>> {
        const OP: &str = "apply_gradients";
        let name = self.var.name();
        let w = values_mut::<T>(w)?;
        let n = w.len();
        let mut sp: SmallVec<[SendPtr<T>; 3]> = SmallVec::new();
        for t in s {
            let v = values_mut::<T>(t)?;
            if v.len() != n {
                return Err(Error::invalid(
                    OP,
                    format!("a slot of '{name}' has {} elements, the variable {n}", v.len()),
                ));
            }
            sp.push(SendPtr(v.as_mut_ptr()));
        }
        let grad = match &self.grad {
            Grad::Dense(g) => dense_view::<T>(g, n, name, gather)?,
            Grad::Sparse { rows, vals, width } => {
                let last = rows.last().map_or(0, |&r| (r + 1) * width);
                if *width == 0 || last > n || vals.len() != rows.len() * width {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "the sparse gradient of '{name}' ({n} elements): {} rows of {width}, up to row {:?}",
                            rows.len(),
                            rows.last()
                        ),
                    ));
                }
                View::Sparse {
                    rows,
                    vals,
                    width: *width,
                }
            }
        };
        Ok(Box::new(BoundJob {
            w: SendPtr(w.as_mut_ptr()),
            s: sp,
            n,
            grad,
            all: self.all,
            decay: self.decay,
            factor: self.factor,
            pass: &*self.pass,
        }))
    }
}

impl<T: Float> BoundJob<'_, T> {
    /// The pass over elements `lo..hi` with gradient `g` (as long).
    ///
    /// # Safety
    /// `lo..hi` lies in `0..n` and no concurrent call touches it.
    #[inline]
    unsafe fn piece(&self, lo: usize, hi: usize, g: &[T]) {
        // SAFETY: the buffers are `n` long and locked by the caller of
        // `bind` for as long as `self` lives; the range is this call's.
        let w = unsafe { std::slice::from_raw_parts_mut(self.w.get().add(lo), hi - lo) };
        let mut parts: SmallVec<[&mut [T]; 4]> = self
            .s
            .iter()
            .map(|p| unsafe { std::slice::from_raw_parts_mut(p.get().add(lo), hi - lo) })
            .collect();
        (self.pass)(self.decay, self.factor, w, &mut parts, g);
    }
}

impl<T: Float> Bound for BoundJob<'_, T> {
    fn units(&self) -> usize {
        match &self.grad {
            View::Sparse { rows, width, .. } if !self.all => rows.len() * width,
            _ => self.n,
        }
    }

    unsafe fn run(&self, r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        // SAFETY (every `piece` below): the elements written are those of
        // units `r`, inside `0..n`, disjoint from concurrent calls' by the
        // caller's contract.
        match &self.grad {
            View::Flat(g) => unsafe { self.piece(r.start, r.end, &g[r.clone()]) },
            View::Rows {
                buf,
                shape,
                strides,
                offset,
                len,
            } => {
                let len = *len;
                let rows = r.start / len..(r.end - 1) / len + 1;
                for_rows(shape, strides, [*offset], rows, |row, [base]| {
                    let (lo, hi) = ((row * len).max(r.start), (row * len + len).min(r.end));
                    let from = base as usize + (lo - row * len);
                    unsafe { self.piece(lo, hi, &buf[from..from + (hi - lo)]) };
                });
            }
            View::Sparse { rows, vals, width } if !self.all => {
                // units: the listed rows' elements, end to end
                let mut u = r.start;
                while u < r.end {
                    let (k, off) = (u / width, u % width);
                    let m = (width - off).min(r.end - u);
                    let lo = rows[k] * width + off;
                    unsafe { self.piece(lo, lo + m, &vals[u..u + m]) };
                    u += m;
                }
            }
            View::Sparse { rows, vals, width } => {
                // every element: the listed rows with their values, the
                // gaps with a zero gradient in pieces of at most ZEROS
                let zeros = [T::zero(); ZEROS];
                let mut k = rows.partition_point(|&row| (row + 1) * width <= r.start);
                let mut at = r.start;
                while at < r.end {
                    let row_lo = rows.get(k).map_or(self.n, |&row| row * width);
                    if row_lo <= at {
                        let hi = (row_lo + width).min(r.end);
                        let from = k * width + (at - row_lo);
                        unsafe { self.piece(at, hi, &vals[from..from + (hi - at)]) };
                        at = hi;
                        k += 1;
                    } else {
                        let hi = row_lo.min(r.end).min(at + ZEROS);
                        unsafe { self.piece(at, hi, &zeros[..hi - at]) };
                        at = hi;
                    }
                }
            }
        }
    }
}
