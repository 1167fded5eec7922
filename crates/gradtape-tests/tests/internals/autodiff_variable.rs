//! The unit tests of `src/autodiff/variable.rs`, moved out of the library.

use gradtape::__internals::autodiff::variable::*;
use gradtape::__internals::TensorInternals;
use gradtape::__internals::VariableInternals;
use gradtape::DType;
use gradtape::Error;
use gradtape::GradientTape;
use gradtape::IndexedSlices;
use gradtape::Result;
use gradtape::Tensor;

/// Where the variable's elements live.
fn buffer_addr(v: &Variable) -> usize {
    v.current().buffer::<f32>().as_ptr() as usize
}

#[test]
fn gradient_descent_reuses_the_buffer_after_a_taped_step() -> Result<()> {
    let n = 100_000;
    let v = Variable::new(Tensor::from_vec(vec![1.0f32; n], &[n])?);
    let x = Tensor::from_vec(vec![2.0f32; n], &[n])?;
    let addr = buffer_addr(&v);
    for _ in 0..2 {
        let tape = GradientTape::new();
        let loss = tape.record(|| v.read().mul(&x)?.sum_all())?;
        let g = tape.gradient(&loss, std::slice::from_ref(&v))?.remove(0);
        let g = g.ok_or_else(|| Error::InvalidArgument {
            op: "test",
            msg: "no gradient".into(),
        })?;
        v.apply_gradient_descent(0.5, &g)?;
        // the tape released its saved reads, so the step wrote in place
        assert_eq!(buffer_addr(&v), addr);
    }
    assert!(v.current().to_vec::<f32>()?.iter().all(|&e| e == -1.0));
    // a live read forces a new buffer, and keeps its own value
    let held = v.read();
    v.apply_gradient_descent(1.0, &x)?;
    assert_ne!(buffer_addr(&v), addr);
    assert!(held.to_vec::<f32>()?.iter().all(|&e| e == -1.0));
    assert!(v.current().to_vec::<f32>()?.iter().all(|&e| e == -3.0));
    Ok(())
}

#[test]
fn sparse_updates_write_in_place_unless_a_read_holds_the_value() -> Result<()> {
    let n = 10_000;
    let v = Variable::new(Tensor::from_vec(vec![1.0f32; n * 4], &[n, 4])?);
    let addr = buffer_addr(&v);
    let rows = IndexedSlices::new(Tensor::ones(&[2, 4], DType::F32), Tensor::vector(&[5i64, 5]), &[n, 4])?;
    v.scatter_add(&rows)?;
    v.scatter_sub(&rows.scale(0.5)?)?;
    v.apply_sparse_gradient_descent(0.25, &rows)?;
    // no copy of the table: the same buffer, updated
    assert_eq!(buffer_addr(&v), addr);
    let row5 = |v: &Variable| v.current().narrow(0, 5, 1).and_then(|r| r.to_vec::<f32>());
    assert_eq!(row5(&v)?, vec![1.0 + 2.0 - 1.0 - 0.5; 4]);
    // a live read keeps its value: the update copies once
    let held = v.read();
    v.scatter_add(&rows)?;
    assert_ne!(buffer_addr(&v), addr);
    assert_eq!(held.narrow(0, 5, 1)?.to_vec::<f32>()?, vec![1.5; 4]);
    assert_eq!(row5(&v)?, vec![3.5; 4]);
    // and once it is gone, updates are in place again
    drop(held);
    let addr = buffer_addr(&v);
    v.scatter_sub(&rows)?;
    assert_eq!(buffer_addr(&v), addr);
    Ok(())
}
