//! The unit tests of `src/ops/array/join.rs`, moved out of the library.

use gradtape::__internals::ops::array::join::*;
use gradtape::Tensor;

#[test]
fn the_unrecorded_concat_gives_concat_values_and_errors() {
    // more operands than the recorded path keeps inline, and a strided one
    let parts: Vec<Tensor> = (0..40)
        .map(|i| Tensor::from_vec((0..6).map(|v| (v * 40 + i) as f32).collect(), &[2, 3]).unwrap())
        .chain([Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[3, 2])
            .unwrap()
            .transpose()
            .unwrap()])
        .collect();
    let refs: Vec<&Tensor> = parts.iter().collect();
    for axis in [0, 1, -1] {
        let want = Tensor::concat(&refs, axis).unwrap();
        let got = concat_unrecorded(&parts, axis).unwrap();
        assert_eq!(got.shape(), want.shape());
        assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    }
    let odd = [parts[0].clone(), Tensor::zeros(&[3, 3], gradtape::DType::F32)];
    let e = concat_unrecorded(&odd, 1).unwrap_err().to_string();
    assert!(
        e.contains("concat") && e.contains("[2, 3]") && e.contains("[3, 3]"),
        "{e}"
    );
    assert!(concat_unrecorded(&[], 0).is_err());
}
