//! The per-thread scratch vectors of the kernels' tasks.

use gradtape::__internals::kernels::cpu::scratch::{kept, take, KEPT, MAX_BYTES};

#[test]
fn a_vector_given_back_is_taken_again_filled() {
    // (each test runs on a thread of its own: the lists start empty)
    let first = take(100, 1.5f32);
    assert_eq!(&first[..], &[1.5f32; 100][..]);
    let at = first.as_ptr();
    drop(first);
    assert_eq!(kept::<f32>(), 1);
    // the same allocation, refilled, shorter
    let again = take(50, 0.0f32);
    assert_eq!(again.as_ptr(), at);
    assert_eq!(&again[..], &[0.0f32; 50][..]);
    assert_eq!(kept::<f32>(), 0);
}

#[test]
fn a_thread_keeps_a_bounded_number_of_vectors() {
    let many: Vec<_> = (0..3 * KEPT).map(|_| take(10, 0.0f64)).collect();
    drop(many);
    assert_eq!(kept::<f64>(), KEPT);
    // one too large to keep: taken from the list (grown), then freed
    drop(take(MAX_BYTES / 8 + 1, 0.0f64));
    assert_eq!(kept::<f64>(), KEPT - 1);
}
