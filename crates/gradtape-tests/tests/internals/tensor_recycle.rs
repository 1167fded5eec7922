//! The unit tests of `src/tensor/recycle.rs`, moved out of the library.

use gradtape::__internals::tensor::alloc::try_buf;
use gradtape::__internals::tensor::recycle::*;
use gradtape::tensor::Buf;
use gradtape::tensor::Storage;
use gradtape::DType;
use gradtape::Element;

/// A storage of a new buffer of exactly `n` `f32`s (from the active
/// bin, if it holds one), and the buffer's address.
fn scratch(n: usize) -> (Storage, usize) {
    let b: Buf<f32> = try_buf("t", n).unwrap();
    let p = b.as_ptr() as usize;
    (f32::buf_into_storage(b), p)
}

#[test]
fn a_scratch_buffer_put_back_is_taken_by_the_next_run_and_freed_after_one_without() {
    let mut bin = Bin::default();
    let first = bin.scope(|| {
        let (s, p) = scratch(1000);
        put(s);
        p
    });
    let second = bin.scope(|| {
        let b = take_buf::<f32>(1000).expect("the buffer put back");
        let p = b.as_ptr() as usize;
        put(f32::buf_into_storage(b));
        p
    });
    assert_eq!(first, second);
    assert_eq!(bin.len(), 1);
    // a run that does not take it: kept for one run, then freed
    bin.scope(|| ());
    assert_eq!(bin.len(), 0);
    // without a bin, put drops the storage
    put(scratch(1000).0);
}

#[test]
fn a_task_runs_with_its_own_bin_lent_a_buffer_and_the_threads_bin_comes_back() {
    let (mut run, mut task) = (Bin::default(), Bin::default());
    let (lent, taken) = run.scope(|| {
        let (s, p) = scratch(64);
        put(s);
        lend(&mut task, [(DType::F32, 64 * 4)].into_iter());
        let taken = task.task_scope(|| {
            let b = take_buf::<f32>(64).expect("lent to the task");
            let p = b.as_ptr() as usize;
            put(f32::buf_into_storage(b));
            p
        });
        // the run's bin is active again: the lent buffer is not in it
        assert!(take_buf::<f32>(64).is_none());
        put(scratch(32).0);
        (p, taken)
    });
    assert_eq!(lent, taken);
    assert_eq!(run.len(), 1, "the run's own scratch buffer");
    assert_eq!(task.len(), 1, "the lent buffer, back in the task's bin");
    // the task's next run takes it again
    let again = task.task_scope(|| take_buf::<f32>(64).map(|b| b.as_ptr() as usize));
    assert_eq!(again, Some(lent));
}

/// The bin finds a buffer by its dtype and byte count among buffers of
/// many sizes (it holds them by size: the scan it made before cost a step
/// whose `while_loop` ran 128 iterations a tenth of its time): each size
/// asked for gets a buffer put back of that size, as many as were put, an
/// `f32` buffer never serves an `i32` of as many bytes, and a size it holds
/// none of gets nothing.
#[test]
fn the_bin_finds_each_size_among_many() {
    let mut bin = Bin::default();
    let sizes = [3usize, 1000, 17, 64, 1000, 5];
    let put_back: Vec<(usize, usize)> = bin.scope(|| {
        // (all made before any is put back: a second buffer of 1000 would
        // take the first)
        let made: Vec<(usize, Storage, usize)> = sizes
            .iter()
            .map(|&n| {
                let (s, p) = scratch(n);
                (n, s, p)
            })
            .collect();
        made.into_iter()
            .map(|(n, s, p)| {
                put(s);
                (n, p)
            })
            .collect()
    });
    assert_eq!(bin.len(), sizes.len());
    bin.scope(|| {
        assert!(
            take_buf::<i32>(64).is_none(),
            "an f32 buffer of 256 bytes served an i32 one"
        );
        assert!(take_buf::<f32>(999).is_none());
        let mut want: Vec<(usize, usize)> = put_back.clone();
        let mut got: Vec<(usize, usize)> = sizes
            .iter()
            .map(|&n| {
                let b = take_buf::<f32>(n).unwrap_or_else(|| panic!("a buffer of {n} f32"));
                assert_eq!(b.capacity(), n);
                (n, b.as_ptr() as usize)
            })
            .collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want);
        assert!(
            take_buf::<f32>(1000).is_none(),
            "two buffers of 1000 were put, three taken"
        );
    });
}
