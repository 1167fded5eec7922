//! The unit tests of `src/kernels/cpu/reduce.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::reduce::*;
use gradtape::Tensor;

#[test]
fn sum_max_min_over_axes() {
    let x = Tensor::from_vec((0..24).map(|v| v as f64).collect(), &[2, 3, 4]).unwrap();
    let s = reduce("t", &x, &[1], ReduceKind::Sum).unwrap();
    assert_eq!(s.shape(), &[2, 4]);
    assert_eq!(s.to_vec::<f64>().unwrap(), vec![12., 15., 18., 21., 48., 51., 54., 57.]);
    let m = reduce("t", &x, &[0, 2], ReduceKind::Max).unwrap();
    assert_eq!(m.to_vec::<f64>().unwrap(), vec![15., 19., 23.]);
    let c = reduce("t", &x, &[0], ReduceKind::Min).unwrap();
    assert_eq!(
        c.to_vec::<f64>().unwrap(),
        (0..12).map(|v| v as f64).collect::<Vec<_>>()
    );
    let all = reduce("t", &x, &[0, 1, 2], ReduceKind::Sum).unwrap();
    assert_eq!(all.to_vec::<f64>().unwrap(), vec![276.0]);
}
