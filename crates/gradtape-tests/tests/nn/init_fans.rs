//! The fans of the initialisers, as Keras computes them (formerly the unit
//! tests of `src/nn/init.rs`).

use gradtape::nn::init::fans;

#[test]
fn fans_follow_keras() {
    assert_eq!(fans(&[3, 4]), (3.0, 4.0));
    assert_eq!(fans(&[3, 3, 2, 8]), (18.0, 72.0));
    assert_eq!(fans(&[5]), (5.0, 5.0));
}
