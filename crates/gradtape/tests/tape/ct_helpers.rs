//! The cotangent helpers of `gradtape::ct` under batch dims (formerly the
//! unit tests of `src/ops/ct.rs`).

use gradtape::ct::*;
use gradtape::{DType, Result, Tensor};

#[test]
fn helpers_keep_the_batch_dims_in_front() -> Result<()> {
    let g = Tensor::ones(&[5, 2, 3], DType::F64);
    with_batch_dims(1, || -> Result<()> {
        assert_eq!(logical_shape(&g), &[2, 3]);
        assert_eq!(unbroadcast(&g, &[3])?.shape(), &[5, 3]);
        assert_eq!(unbroadcast(&g, &[3])?.to_vec::<f64>()?, vec![2.0; 15]);
        assert_eq!(unbroadcast(&g, &[2, 1])?.shape(), &[5, 2, 1]);
        assert_eq!(unbroadcast(&g, &[])?.to_vec::<f64>()?, vec![6.0; 5]);
        assert_eq!(reshape(&g, &[6])?.shape(), &[5, 6]);
        let v = Tensor::ones(&[5, 3], DType::F64);
        assert_eq!(broadcast_to(&v, &[2, 3])?.shape(), &[5, 2, 3]);
        assert_eq!(perm(&[1, 0]), vec![0, 2, 1]);
        assert_eq!(axes(&[0, 1]), vec![1, 2]);
        Ok(())
    })?;
    assert_eq!(batch_dims(), 0);
    assert_eq!(unbroadcast(&g, &[3])?.shape(), &[3]);
    Ok(())
}
