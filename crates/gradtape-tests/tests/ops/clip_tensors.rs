//! `clip_by_tensors`, TensorFlow's `tf.clip_by_value` with tensor bounds
//! (the projection of an adversarial example on the ε-ball around its
//! clean input): values and the three gradients against TensorFlow 2.21,
//! at elements clipped below, above, inside and on either boundary, with
//! a bound broadcast along an axis (its gradient summed over it), and at
//! NaN; eager and traced; and the errors of bounds that do not fit.

use gradtape::{function, DType, GradientTape, Result, Tensor};

/// `y = clip_by_tensors(x, lo, hi)`, then the gradients of `Σ y · w` for
/// x, lo and hi.
fn clip_and_grads(x: &Tensor, lo: &Tensor, hi: &Tensor) -> Result<Vec<Tensor>> {
    let w = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?.cast(x.dtype())?;
    let tape = GradientTape::new();
    let (y, l) = tape.record(|| {
        for t in [x, lo, hi] {
            tape.watch(t);
        }
        let y = x.clip_by_tensors(lo, hi)?;
        let l = y.mul(&w)?.sum_all()?;
        Ok((y, l))
    })?;
    let g = tape.gradient(&l, &[x.clone(), lo.clone(), hi.clone()])?;
    Ok(std::iter::once(y)
        .chain(g.into_iter().map(|g| g.expect("a gradient")))
        .collect())
}

#[test]
fn clip_by_tensors_values_and_gradients_match_tensorflow() -> Result<()> {
    // (0,0) below lo; (0,1) on lo; (0,2) below lo = hi; (1,0) above
    // hi = lo; (1,1) above hi; (1,2) on hi. hi [3] is broadcast over rows.
    let x = Tensor::from_vec(vec![-2.0f64, -0.5, 0.25, 1.0, 3.0, 0.5], &[2, 3])?;
    let lo = Tensor::from_vec(vec![-1.0f64, -0.5, 0.5, 0.0, 1.0, -2.0], &[2, 3])?;
    let hi = Tensor::vector(&[0.0f64, 2.0, 0.5]);
    // TensorFlow 2.21, tf.clip_by_value(x, lo, hi) under a GradientTape
    // (float64), loss reduce_sum(y * w)
    let want: [&[f64]; 4] = [
        &[-1.0, -0.5, 0.5, 0.0, 2.0, 0.5],
        &[0.0, 2.0, 0.0, 0.0, 0.0, 6.0],
        &[1.0, 0.0, 3.0, 0.0, 0.0, 0.0],
        &[4.0, 5.0, 0.0],
    ];
    let traced = function(|a: &Vec<Tensor>| clip_and_grads(&a[0], &a[1], &a[2]));
    for dt in [DType::F64, DType::F32] {
        let args: Vec<Tensor> = [&x, &lo, &hi].iter().map(|t| t.cast(dt)).collect::<Result<_>>()?;
        for (how, got) in [
            ("eager", clip_and_grads(&args[0], &args[1], &args[2])?),
            ("traced", traced.call(&args)?),
        ] {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert_eq!(g.dtype(), dt, "{how} {dt:?} output {i}");
                assert_eq!(g.to_vec_f64(), w, "{how} {dt:?} output {i}");
            }
        }
    }
    Ok(())
}

#[test]
fn clip_by_tensors_at_nan_follows_tensorflow() -> Result<()> {
    // a NaN input, a NaN lo, a NaN hi (x inside, x above): TensorFlow 2.21
    // (float64) gives NaN everywhere and routes every gradient to lo (the
    // outer maximum's second operand where a comparison with NaN is false)
    let nan = f64::NAN;
    let x = Tensor::vector(&[nan, 0.5, 0.5, 2.0]);
    let lo = Tensor::vector(&[0.0, nan, 0.0, 0.0]);
    let hi = Tensor::vector(&[1.0, 1.0, nan, nan]);
    let w = Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]);
    let tape = GradientTape::new();
    let (y, l) = tape.record(|| {
        for t in [&x, &lo, &hi] {
            tape.watch(t);
        }
        let y = x.clip_by_tensors(&lo, &hi)?;
        let l = y.mul(&w)?.sum_all()?;
        Ok((y, l))
    })?;
    assert!(y.to_vec_f64().iter().all(|v| v.is_nan()), "{:?}", y.to_vec_f64());
    let g = tape.gradient(&l, &[x.clone(), lo.clone(), hi.clone()])?;
    let g: Vec<Vec<f64>> = g.into_iter().map(|g| g.expect("a gradient").to_vec_f64()).collect();
    assert_eq!(g, vec![vec![0.0; 4], vec![1.0, 2.0, 3.0, 4.0], vec![0.0; 4]]);
    Ok(())
}

#[test]
fn clip_by_tensors_refuses_bounds_that_do_not_fit() {
    let x = Tensor::zeros(&[2, 3], DType::F64);
    let ok = Tensor::zeros(&[3], DType::F64);
    let cases = [
        (Tensor::zeros(&[2, 3], DType::F32), ok.clone(), "dtype"),
        (ok.clone(), Tensor::zeros(&[4], DType::F64), "[4]"),
        (Tensor::zeros(&[3, 2, 3], DType::F64), ok.clone(), "[3, 2, 3]"),
    ];
    for (lo, hi, what) in cases {
        let e = x.clip_by_tensors(&lo, &hi).expect_err(what).to_string();
        assert!(e.contains("clip_by_tensors"), "{what}: {e}");
        assert!(e.contains("[2, 3]"), "{what}: {e}");
        assert!(e.contains(what), "{what}: {e}");
    }
}
