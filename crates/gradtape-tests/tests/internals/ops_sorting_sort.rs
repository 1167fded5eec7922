//! The unit tests of `src/ops/sorting/sort.rs`, moved out of the library.

use gradtape::__internals::ops::sorting::sort::*;

#[test]
fn order_puts_nan_last_and_is_total() {
    let v = [f64::NAN, 1.0, -f64::INFINITY, f64::NAN, 0.0];
    let mut s = v.to_vec();
    s.sort_by(order);
    assert_eq!(s[..3], [-f64::INFINITY, 0.0, 1.0]);
    assert!(s[3].is_nan() && s[4].is_nan());
}
