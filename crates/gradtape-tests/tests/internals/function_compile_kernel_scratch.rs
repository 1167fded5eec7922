//! The unit tests of `src/function/compile/kernel/scratch.rs`, moved out of the library.

use gradtape::__internals::function::compile::kernel::scratch::*;

#[test]
fn vectors_come_back_filled_and_the_list_stays_bounded() {
    // f64 lists are shared with concurrent tests: check only what this
    // test can see alone
    let v = take::<f64>(100, 1.5);
    assert_eq!(v, vec![1.5; 100]);
    give(v);
    let w = take::<f64>(50, 0.0);
    assert_eq!(w, vec![0.0; 50]);
    give(w);
    for _ in 0..2 * MAX_KEPT {
        give(vec![0.0f64; 8]);
    }
    assert!(kept::<f64>() <= MAX_KEPT);
    give(vec![0.0f64; MAX_LEN + 1]);
    assert!(kept::<f64>() <= MAX_KEPT);
}
