//! The unit tests of `src/function/sizes.rs`, moved out of the library.

use gradtape::__internals::function::sizes::*;
use gradtape::Tensor;

#[test]
fn constants_compare_by_bits() {
    let a = Tensor::vector(&[0.0f64, 1.0]);
    assert!(same_const(&a, &Tensor::vector(&[0.0f64, 1.0])));
    assert!(!same_const(&a, &Tensor::vector(&[-0.0f64, 1.0])));
    assert!(!same_const(&a, &Tensor::vector(&[0.0f32, 1.0])));
    assert!(!same_const(&a, &Tensor::vector(&[0.0f64, 1.0, 2.0])));
}
