//! The unit tests of `src/kernels/cpu/workers.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::workers::*;
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

#[test]
fn every_index_runs_once() {
    for n in [0usize, 1, 2, 3, 17, 1000] {
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        parallel_for(n, |i| {
            hits[i].fetch_add(1, Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "n = {n}");
    }
}

#[test]
fn nested_and_concurrent_jobs_complete() {
    let total = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..50 {
                    parallel_for(4, |_| {
                        parallel_for(3, |_| {
                            total.fetch_add(1, Relaxed);
                        })
                    });
                }
            });
        }
    });
    assert_eq!(total.load(Relaxed), 3 * 50 * 12);
}

#[test]
fn chunks_cover_the_slice() {
    let mut v = vec![0usize; 1003];
    for_each_chunk_mut(&mut v, 100, |i, c| c.iter_mut().for_each(|x| *x = i + 1));
    assert!(v.iter().enumerate().all(|(j, &x)| x == j / 100 + 1));
}

#[test]
fn a_panicking_task_reaches_the_caller() {
    let r = catch_unwind(|| parallel_for(8, |i| assert!(i != 5, "task five")));
    assert!(r.is_err());
    // the pool still works afterwards
    let c = AtomicUsize::new(0);
    parallel_for(8, |_| {
        c.fetch_add(1, Relaxed);
    });
    assert_eq!(c.load(Relaxed), 8);
}
