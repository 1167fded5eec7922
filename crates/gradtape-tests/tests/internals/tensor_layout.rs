//! The unit tests of `src/tensor/layout.rs`, moved out of the library.

use gradtape::__internals::tensor::layout::*;
use gradtape::Error;

#[test]
fn element_counts_are_checked() {
    assert_eq!(checked_numel("t", &[]).unwrap(), 1);
    assert_eq!(checked_numel("t", &[2, 3, 4]).unwrap(), 24);
    assert_eq!(checked_numel("t", &[0, 1 << 62]).unwrap(), 0);
    assert_eq!(checked_numel("t", &[isize::MAX as usize]).unwrap(), isize::MAX as usize);
    for bad in [
        &[4, (1 << 62) + 1][..],
        &[1 << 32, 1 << 32],
        &[isize::MAX as usize + 1],
        &[0, 1 << 62, 1 << 62],
        &[usize::MAX, usize::MAX, 0],
    ] {
        assert_eq!(
            checked_numel("t", bad),
            Err(Error::ShapeOverflow {
                op: "t",
                shape: bad.to_vec()
            })
        );
    }
    assert!(broadcast_shapes("t", &[1 << 40, 1], &[1, 1 << 40]).is_err());
    assert!(broadcast_shapes("t", &[1 << 20, 1], &[1, 1 << 20]).is_ok());
}

#[test]
fn views_inside_and_outside_their_buffer() {
    let l = |shape: &[usize], strides: &[isize], offset| Layout {
        shape: small_copy(shape),
        strides: small_copy(strides),
        offset,
    };
    assert!(Layout::contiguous(&[2, 3]).fits_in(6));
    assert!(!Layout::contiguous(&[2, 3]).fits_in(5));
    // a reversed view: offsets 5, 4, ..., 0
    assert!(l(&[6], &[-1], 5).fits_in(6));
    assert!(l(&[], &[], 5).fits_in(6));
    assert!(!l(&[], &[], 6).fits_in(6));
    assert!(!l(&[6], &[-1], 4).fits_in(6));
    // broadcast, and empty views anywhere
    assert!(l(&[1 << 40, 3], &[0, 1], 0).fits_in(3));
    assert!(l(&[0, 5], &[5, 1], 100).fits_in(1));
    // a stride that only a length-1 dim carries is never applied
    assert!(l(&[1, 2], &[isize::MAX, 1], 0).fits_in(2));
    assert!(!l(&[2, 2], &[isize::MAX, 1], 0).fits_in(2));
    assert!(!l(&[4, (1 << 62) + 1], &[(1 << 62) + 1, 1], 0).fits_in(4));
}
