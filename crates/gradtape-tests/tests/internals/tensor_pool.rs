//! The unit tests of `src/tensor/pool.rs`, moved out of the library.

use gradtape::__internals::tensor::pool::*;
use gradtape::tensor::Buf;
use gradtape::Element;

#[test]
fn large_buffers_are_reused_small_ones_are_not() {
    // a size no other test uses, so that concurrent tests do not interfere
    let n = (MIN_BYTES / 4) + 12345;
    let mut b: Buf<f32> = Buf::with_capacity(n);
    b.resize(n, 1.5);
    let ptr = b.as_ptr();
    drop(f32::buf_into_storage(b));
    let again = take::<f32>(n).expect("cached");
    assert_eq!(again.as_ptr(), ptr);
    assert_eq!((again.len(), again.capacity()), (0, n));
    assert!(take::<f32>(n).is_none(), "taken once");
    assert!(take::<f64>(n / 2).is_none(), "typed");
    let small: Buf<f32> = Buf::from_elem(0.0, 1000);
    drop(f32::buf_into_storage(small));
    assert!(take::<f32>(1000).is_none(), "small buffers are left to malloc");
}
