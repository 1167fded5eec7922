//! Tensors printed TensorFlow-style (formerly the unit tests of
//! `src/tensor/display.rs`).

use gradtape::{DType, Tensor};

#[test]
fn display_matches_tensorflow_style() {
    assert_eq!(Tensor::scalar(6.0f32).to_string(), "Tensor(6.0, shape=[], dtype=f32)");
    let t = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2]).unwrap();
    assert_eq!(t.to_string(), "Tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=i32)");
    let e = Tensor::from_vec(Vec::<f64>::new(), &[0, 3]).unwrap();
    assert_eq!(e.to_string(), "Tensor([], shape=[0, 3], dtype=f64)");
    let big = Tensor::zeros(&[2000], DType::Bool);
    assert_eq!(
        big.to_string(),
        "Tensor([false, false, false, ..., false, false, false], shape=[2000], dtype=bool)"
    );
}
