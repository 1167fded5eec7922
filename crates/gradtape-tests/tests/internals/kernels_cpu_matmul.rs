//! The unit tests of `src/kernels/cpu/matmul.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::matmul::*;
use gradtape::Tensor;

#[test]
fn matmul_with_flags_and_batches() {
    let a = Tensor::from_vec(vec![1.0f64, 2., 3., 4., 5., 6.], &[2, 3]).unwrap();
    let b = Tensor::from_vec(vec![1.0f64, 0., 0., 1., 1., 1.], &[3, 2]).unwrap();
    let c = matmul(&a, &b, false, false).unwrap();
    assert_eq!(c.to_vec::<f64>().unwrap(), vec![4., 5., 10., 11.]);
    // a^T a : [3,3]
    let g = matmul(&a, &a, true, false).unwrap();
    assert_eq!(g.shape(), &[3, 3]);
    assert_eq!(g.to_vec::<f64>().unwrap()[..3], [17., 22., 27.]);
    // batch broadcast: [2,2,3] @ [3,2]
    let ab = Tensor::from_vec(
        [a.to_vec::<f64>().unwrap(), a.to_vec::<f64>().unwrap()].concat(),
        &[2, 2, 3],
    )
    .unwrap();
    let cb = matmul(&ab, &b, false, false).unwrap();
    assert_eq!(cb.shape(), &[2, 2, 2]);
    assert_eq!(cb.to_vec::<f64>().unwrap(), vec![4., 5., 10., 11., 4., 5., 10., 11.]);
    assert!(matmul(&a, &a, false, false).is_err());
}
