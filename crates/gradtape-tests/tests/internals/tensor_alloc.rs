//! The unit tests of `src/tensor/alloc.rs`, moved out of the library.

use gradtape::__internals::tensor::alloc::*;
use gradtape::Error;

#[test]
fn impossible_sizes_are_errors() {
    let e = try_vec::<f64>("t", usize::MAX / 4).unwrap_err();
    assert_eq!(
        e,
        Error::OutOfMemory {
            op: "t",
            bytes: (usize::MAX / 4) as u128 * 8
        }
    );
    assert!(try_buf::<f32>("t", isize::MAX as usize).is_err());
    assert!(try_filled("t", 1 << 62, 0u32).is_err());
    assert_eq!(try_collect("t", 0..3).unwrap(), vec![0, 1, 2]);
    assert_eq!(try_buf::<f32>("t", 10).unwrap().capacity(), 10);
}
