//! The vectorized Jacobian's fallbacks (a backward pass that cannot be
//! traced runs row by row, differentiably; a rule op without a batching
//! rule runs in vmap's loop) and `stack_rows` (was the unit tests of
//! `src/function/jacobian.rs`).

use gradtape::__internals::dispatch::vjp;
use gradtape::__internals::function::jacobian::stack_rows;
use gradtape::{GradientTape, JacobianOptions, Padding, Result, Tensor};

/// `x³` through an op without a descriptor (no graph node can stand for
/// it): the backward pass cannot be traced, so the vectorized Jacobian
/// runs one pass per row.
fn cube(x: &Tensor) -> Result<Tensor> {
    let y = x.pow_scalar(3.0)?.stop_gradient();
    let x = x.clone();
    Ok(gradtape::__internals::bind("TestCube", &[&x.clone()], y, move |_| {
        vjp(move |g, _| {
            let d = g[0].mul(&x.square()?.mul_scalar(3.0)?)?;
            Ok(smallvec::smallvec![Some(d.reshape(x.shape())?)])
        })
    }))
}

#[test]
fn an_untraceable_backward_pass_runs_row_by_row() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, -2.0, 0.5]);
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        cube(&x.sin()?)?.mul_scalar(2.0)
    })?;
    let j = tape.jacobian(&y, &x)?.expect("connected");
    let jn = tape
        .jacobian_with(&y, &x, JacobianOptions::default().vectorized(false))?
        .expect("connected");
    let xv = x.to_vec::<f64>()?;
    let mut want = vec![0.0; 9];
    for i in 0..3 {
        want[i * 4] = 6.0 * xv[i].sin().powi(2) * xv[i].cos();
    }
    for (a, b) in j.to_vec::<f64>()?.iter().zip(&want) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    assert_eq!(j.to_vec::<f64>()?, jn.to_vec::<f64>()?);
    // a one-shot tape too
    let once = GradientTape::new();
    let y = once.record(|| {
        once.watch(&x);
        cube(&x.sin()?)?.mul_scalar(2.0)
    })?;
    assert_eq!(
        once.jacobian(&y, &x)?.expect("connected").to_vec::<f64>()?,
        jn.to_vec::<f64>()?
    );
    Ok(())
}

#[test]
fn the_row_by_row_jacobian_is_differentiable() -> Result<()> {
    // J = diag(3x²) row by row, recorded on the outer tape: d/dx sum(J) = 6x
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let outer = GradientTape::new();
    let s = outer.record(|| {
        outer.watch(&x);
        let inner = GradientTape::new();
        let y = inner.record(|| {
            inner.watch(&x);
            cube(&x)
        })?;
        inner.jacobian(&y, &x)?.expect("connected").sum_all()
    })?;
    let d = outer.gradient(&s, &x)?.expect("connected");
    assert_eq!(d.to_vec::<f64>()?, vec![6.0, 12.0]);
    Ok(())
}

#[test]
fn a_rule_op_without_a_batching_rule_falls_back_to_vmaps_loop() -> Result<()> {
    // max pooling's gradient has no batching rule: vmap runs it once per
    // one-hot row, and says so
    let x = Tensor::from_vec((0..16).map(|i| ((i * 7) % 16) as f64).collect(), &[1, 4, 4, 1])?;
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        x.mul_scalar(2.0)?.max_pool2d([2, 2], [2, 2], Padding::Valid)
    })?;
    let j = tape.jacobian(&y, &x)?.expect("connected");
    assert!(gradtape::vmap_fallbacks()
        .iter()
        .any(|f| f.op == "MaxPoolGrad" && f.logged == 1));
    let jn = tape
        .jacobian_with(&y, &x, JacobianOptions::default().vectorized(false))?
        .expect("connected");
    assert_eq!(j.shape(), &[1, 2, 2, 1, 1, 4, 4, 1]);
    assert_eq!(j.to_vec::<f64>()?, jn.to_vec::<f64>()?);
    // each output element has one 2 at its window's maximum
    let v = j.to_vec::<f64>()?;
    assert_eq!(v.iter().filter(|&&e| e == 2.0).count(), 4);
    assert_eq!(v.iter().sum::<f64>(), 8.0);
    Ok(())
}

#[test]
fn stack_rows_fills_missing_rows_with_zeros() -> Result<()> {
    assert!(stack_rows(vec![None, None])?.is_none());
    let s = stack_rows(vec![None, Some(Tensor::vector(&[1.0f32, 2.0]))])?.expect("some");
    assert_eq!(s.shape(), &[2, 2]);
    assert_eq!(s.to_vec::<f32>()?, vec![0.0, 0.0, 1.0, 2.0]);
    Ok(())
}
