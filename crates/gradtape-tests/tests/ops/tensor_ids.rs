//! Tensors are `Send + Sync`, with unique ids (formerly the unit tests of
//! `src/tensor/mod.rs`).

use gradtape::Tensor;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn tensors_are_send_and_sync() {
    assert_send_sync::<Tensor>();
}

#[test]
fn ids_are_unique_and_clone_keeps_them() {
    let a = Tensor::scalar(1.0f32);
    let b = Tensor::scalar(1.0f32);
    assert_ne!(a.id(), b.id());
    assert_eq!(a.clone().id(), a.id());
}
