//! A traced step allocates (almost) nothing after its first calls: a
//! compiled graph's runs reuse the tensors of dead values and the results
//! the caller dropped, the fused kernels their registers, a call its
//! vectors. What remains per call is the structure returned to the caller
//! (here a `Vec` of the results).
//!
//! Allocations are counted on the calling thread only (a counting global
//! allocator with a thread-local count), so tests running beside each
//! other do not disturb the counts; the tensors here are small enough that
//! every kernel runs on the calling thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gradtape::{function, GradientTape, Result, Tensor, Variable};

mod common;
use common::values::{bits, init};

/// The system allocator, counting this thread's allocations.
struct Counting;

thread_local! {
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
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

/// Held by each test: the tests of this file run one at a time. The fused
/// kernels' scratch vectors come from a free list that the process's
/// threads share, so a test running beside another could find it emptied
/// by the other's kernels and allocate (seen in CI as one or two
/// allocations more now and then).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits for the other tests of this file (see [`SERIAL`]).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many allocations `f` makes on this thread, and its result.
fn allocations<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = COUNT.with(Cell::get);
    let out = f();
    (COUNT.with(Cell::get) - before, out)
}

/// A two-layer model's loss and the gradient of its first weight, taken on
/// a tape inside the traced function (products, fused activations and
/// sums, a transpose, a reshape).
fn step((x, w1, w2): &(Tensor, Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(w1);
        let h = x.matmul(w1)?.tanh()?.mul_scalar(2.0)?;
        let y = h.matmul(w2)?.reshape(&[8 * 40])?;
        y.mul(&y)?.sum_all()
    })?;
    let g = tape.gradient(&loss, w1)?.expect("connected");
    Ok(vec![loss, g])
}

#[test]
fn a_traced_step_allocates_only_its_returned_vec_after_the_first_calls() -> Result<()> {
    let _serial = serial();
    let args = (init(&[8, 40], 0.1), init(&[40, 48], 0.7), init(&[48, 40], 1.3));
    let f = function(step);
    let want: Vec<Vec<u64>> = f.call(&args)?.iter().map(bits).collect();
    for _ in 0..3 {
        f.call(&args)?;
    }
    for _ in 0..5 {
        let (n, out) = allocations(|| f.call(&args));
        let out = out?;
        // the `Vec` of the two results: the tensors and their buffers are
        // those of the last call's results, dropped by now
        assert_eq!(n, 1, "allocations of a call");
        let got: Vec<Vec<u64>> = out.iter().map(bits).collect();
        assert_eq!(got, want, "the same values, bit for bit");
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn a_step_returning_an_array_allocates_nothing_after_the_first_calls() -> Result<()> {
    let _serial = serial();
    // the elementwise bench's step: loss = sum(exp(sin x) * x) and the sum
    // of |dloss/dx|, both returned as an array (no `Vec` to make)
    let f = function(|x: &Tensor| -> Result<[Tensor; 2]> {
        let x = x.stop_gradient();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&x);
            x.sin()?.exp()?.mul(&x)?.sum_all()
        })?;
        let g = tape.gradient(&loss, &x)?.expect("connected");
        Ok([loss, g.abs()?.sum_all()?])
    });
    let x = init(&[5000], 0.4);
    let want: Vec<Vec<u64>> = f.call(&x)?.iter().map(bits).collect();
    for _ in 0..3 {
        f.call(&x)?;
    }
    for _ in 0..5 {
        let (n, out) = allocations(|| f.call(&x));
        let got: Vec<Vec<u64>> = out?.iter().map(bits).collect();
        assert_eq!(got, want);
        assert_eq!(n, 0);
    }
    Ok(())
}

#[test]
fn results_the_caller_keeps_are_never_written_by_later_calls() -> Result<()> {
    let _serial = serial();
    let args = (init(&[8, 40], 0.2), init(&[40, 48], 0.5), init(&[48, 40], 0.9));
    let f = function(step);
    let kept: Vec<Vec<Tensor>> = (0..4).map(|_| f.call(&args)).collect::<Result<_>>()?;
    let want: Vec<Vec<u64>> = kept[0].iter().map(bits).collect();
    for _ in 0..4 {
        f.call(&args)?;
    }
    for k in &kept {
        let got: Vec<Vec<u64>> = k.iter().map(bits).collect();
        assert_eq!(got, want);
    }
    // the arguments are as they were
    assert_eq!(bits(&args.0), bits(&init(&[8, 40], 0.2)));
    Ok(())
}

#[test]
fn a_training_step_with_variables_allocates_a_bounded_number_per_call() -> Result<()> {
    let _serial = serial();
    // an update of a variable in the graph: its new value escapes to the
    // variable; the old value dies in the run
    let w = Variable::new(init(&[40, 48], 0.3));
    let x = init(&[8, 40], 0.6);
    let wc = w.clone();
    let f = function(move |x: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| x.matmul(&wc.read())?.tanh()?.sum_all())?;
        let g = tape.gradient(&loss, &wc)?.expect("connected");
        wc.assign_sub(&g.mul_scalar(0.01)?)?;
        Ok(vec![loss])
    });
    for _ in 0..4 {
        f.call(&x)?;
    }
    let mut counts = Vec::new();
    for _ in 0..5 {
        let (n, out) = allocations(|| f.call(&x));
        out?;
        counts.push(n);
    }
    // nothing grows from call to call
    assert!(counts[4] <= counts[0], "{counts:?}");
    // at most: the returned `Vec`; the variable's new value, computed by
    // the eager `sub` of `assign_sub`, whose kernel allocates its buffer
    // outside the bin (and then its storage `Arc`); the gathered copy of a
    // transposed operand that a fused kernel reads (a plain vector, freed
    // as such)
    assert!(counts.iter().all(|&n| n <= 4), "{counts:?}");
    Ok(())
}
