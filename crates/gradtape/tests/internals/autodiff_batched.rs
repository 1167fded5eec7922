//! The unit tests of `src/autodiff/batched.rs`, moved out of the library.

use gradtape::__internals::autodiff::batched::*;
use gradtape::__internals::dispatch::{vjp, vjp_batched};
use gradtape::ct;
use gradtape::Result;
use gradtape::Tensor;
use gradtape::{GradientTape, JacobianOptions};

/// A rule's gradients (the library's `ops::grads!`).
macro_rules! grads {
    ($($g:expr),* $(,)?) => { smallvec::smallvec![$($g),*] };
}

/// `x³` with an *unbatched* rule that reshapes its cotangent to `x`'s
/// shape: given batched cotangents it would fail, so a correct vectorized
/// Jacobian proves the row loop ran.
fn cube(x: &Tensor) -> Result<Tensor> {
    let y = x.pow_scalar(3.0)?.stop_gradient();
    let x = x.clone();
    Ok(gradtape::__internals::bind("TestCube", &[&x.clone()], y, move |_| {
        vjp(move |g, _| {
            assert_eq!(ct::batch_dims(), 0, "an unbatched rule sees plain cotangents");
            let d = g[0].mul(&x.square()?.mul_scalar(3.0)?)?;
            Ok(grads![Some(d.reshape(x.shape())?)])
        })
    }))
}

#[test]
fn unbatched_rules_run_row_by_row() -> Result<()> {
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
    Ok(())
}

#[test]
fn the_row_loop_is_differentiable() -> Result<()> {
    // J = diag(3x²) through the row loop, recorded on the outer tape:
    // d/dx sum(J) = 6x
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

/// `x + c` (c of shape [3], x of shape [2, 3]) whose rule claims to be
/// batched but undoes broadcasting with `sum_to_shape`, which also sums
/// the batch dim: the checker must catch it.
fn wrongly_batched_add(x: &Tensor, c: &Tensor) -> Result<Tensor> {
    let y = x.add(c)?.stop_gradient();
    let (sx, sc) = (x.shape().to_vec(), c.shape().to_vec());
    Ok(gradtape::__internals::bind("TestAdd", &[x, c], y, move |_| {
        vjp_batched(move |g, _| {
            let gc = g[0].sum_to_shape(&sc)?;
            Ok(grads![Some(ct::unbroadcast(&g[0], &sx)?), Some(gc)])
        })
    }))
}

#[test]
fn the_checker_catches_a_wrongly_batched_rule() -> Result<()> {
    let x = Tensor::from_vec(vec![0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3])?;
    let c = Tensor::vector(&[1.0f64, -1.0, 0.5]);
    let opts = gradtape::CheckOptions::default();
    // first and second order alone would pass: the unbatched behaviour is right
    let no_batch = gradtape::CheckOptions {
        second_order: false,
        ..opts.clone()
    };
    let f = |xs: &[Tensor]| wrongly_batched_add(&xs[0], &xs[1]);
    let err = gradtape::check_gradients(f, &[x.clone(), c.clone()], &no_batch).unwrap_err();
    assert!(err.to_string().contains("atched"), "{err}");
    // the same rule made with plain `vjp` passes (row loop)
    let report = gradtape::check_gradients(|xs: &[Tensor]| xs[0].add(&xs[1]), &[x, c], &opts)?;
    assert!(report.max_err_batched.is_some_and(|e| e < 1e-12));
    assert_eq!(report.compared_batched, 6 * 9);
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
