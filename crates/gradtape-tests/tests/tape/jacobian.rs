//! `GradientTape::jacobian` and `batch_jacobian`: the issue's examples,
//! vectorized against non-vectorized, unconnected sources, errors, and
//! Hessians through nested tapes.

use gradtape::{DType, Error, GradientTape, JacobianOptions, Result, Tensor, Unconnected, Variable};

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn close(a: &Tensor, b: &[f64], tol: f64) {
    let a = a.to_vec_f64();
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y}\n{a:?}\n{b:?}"
        );
    }
}

fn nonvec() -> JacobianOptions {
    JacobianOptions::default().vectorized(false)
}

#[test]
fn issue_example_jacobian() -> Result<()> {
    let x = Tensor::vector(&[1.0f32, 2.0]);
    let y = Tensor::vector(&[3.0f32, 4.0]);
    for opts in [JacobianOptions::default(), nonvec(), nonvec().parallel_iterations(1)] {
        let tape = GradientTape::persistent();
        let z = tape.record(|| {
            tape.watch(&[&x, &y]);
            x.mul(&x)?.mul(&y)
        })?;
        let [jx, jy] = tape.jacobian_with(&z, &[&x, &y], opts)?;
        let (jx, jy) = (jx.unwrap(), jy.unwrap());
        assert_eq!(jx.shape(), &[2, 2]);
        assert_eq!(jx.to_vec::<f32>()?, vec![6.0, 0.0, 0.0, 16.0]);
        assert_eq!(jy.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 4.0]);
    }
    Ok(())
}

#[test]
fn issue_example_batch_jacobian() -> Result<()> {
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = t(&[3.0, 4.0, 5.0, 6.0], &[2, 2]);
    for opts in [JacobianOptions::default(), nonvec()] {
        let tape = GradientTape::persistent();
        let z = tape.record(|| {
            tape.watch(&x);
            x.mul(&x)?.mul(&y)
        })?;
        let j = tape.batch_jacobian_with(&z, &x, opts)?.unwrap();
        assert_eq!(j.shape(), &[2, 2, 2]);
        assert_eq!(j.to_vec::<f64>()?, vec![6.0, 0.0, 0.0, 16.0, 30.0, 0.0, 0.0, 48.0]);
    }
    Ok(())
}

/// `f` recorded on a persistent tape watching `xs`; vectorized and
/// non-vectorized Jacobians w.r.t. every input must agree, and equal the
/// row-by-row gradients with one-hot output gradients.
fn agree(f: impl Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor]) -> Result<()> {
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        for x in xs {
            tape.watch(x);
        }
        f(xs)
    })?;
    let jv = tape.jacobian(&y, xs)?;
    let jn = tape.jacobian_with(&y, xs, nonvec().parallel_iterations(3))?;
    for (k, (a, b)) in jv.iter().zip(&jn).enumerate() {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        let mut want = y.shape().to_vec();
        want.extend_from_slice(xs[k].shape());
        assert_eq!(a.shape(), &want[..]);
        assert_eq!(b.shape(), &want[..]);
        close(a, &b.to_vec_f64(), 1e-12);
        // row j of the Jacobian is the gradient with a one-hot output gradient
        let n = y.numel();
        let av = a.to_vec_f64();
        let per = xs[k].numel();
        for j in 0..n {
            let mut oh = vec![0.0; n];
            oh[j] = 1.0;
            let og = Tensor::from_vec(oh, y.shape())?;
            let g = tape
                .gradient_with(
                    &y,
                    &xs[k],
                    gradtape::GradientOptions::default().output_gradients(vec![og]),
                )?
                .unwrap();
            close(&g, &av[j * per..(j + 1) * per], 1e-12);
        }
    }
    Ok(())
}

#[test]
fn vectorized_equals_row_by_row() -> Result<()> {
    let a = t(&[0.3, -1.2, 0.8, 0.5, 1.1, -0.4], &[2, 3]);
    let b = t(&[0.7, 0.2, -0.9, 1.3, 0.1, -0.6], &[3, 2]);
    let v = t(&[0.5, -0.25, 2.0], &[3]);
    // matmul + tanh + broadcasting add
    agree(
        |x| x[0].matmul(&x[1])?.add(&x[2].narrow(0, 0, 2)?)?.tanh(),
        &[a.clone(), b.clone(), v.clone()],
    )?;
    // reductions and broadcasting
    agree(|x| x[0].mul(&x[1])?.sum(&[0], false)?.exp(), &[a.clone(), v.clone()])?;
    agree(
        |x| x[0].max(&[1], true)?.mul(&x[0])?.mean(&[0], false),
        std::slice::from_ref(&a),
    )?;
    // shape ops, slicing, padding, gather
    agree(
        |x| {
            let p = x[0].transpose()?.reshape(&[6])?.pad(&[(1, 2)])?;
            let g = p.gather(&Tensor::vector(&[0i64, 3, 3, 7]), 0)?;
            g.sin()?.mul(&x[1].slice(&[1], &[1])?.broadcast_to(&[4])?)
        },
        &[a.clone(), v.clone()],
    )?;
    // division, pow, maximum, where, scalar output
    agree(
        |x| {
            let q = x[0].div(&x[1].abs()?.add_scalar(1.0)?)?;
            let m = q.maximum(&x[1].mul_scalar(0.3)?)?;
            let w = Tensor::where_(&x[1].gt_scalar(0.0)?, &m, &q.square()?)?;
            w.pow(&x[1].abs()?.add_scalar(1.0)?)?.sum_all()
        },
        &[a.clone(), v.clone()],
    )?;
    // batched matmul with a rank-3 operand and transposed flags
    let c = t(
        &[0.1, 0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 1.0, 1.1, -1.2],
        &[2, 3, 2],
    );
    agree(|x| x[0].matmul_with(&x[1], true, true)?.relu(), &[c, a])?;
    Ok(())
}

#[test]
fn target_shape_and_source_shape_concatenate() -> Result<()> {
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.sum(&[0], false)?.expand_dims(0)
    })?;
    let j = tape.jacobian(&y, &x)?.unwrap();
    assert_eq!(j.shape(), &[1, 2, 3, 2]);
    assert_eq!(
        j.to_vec::<f64>()?,
        vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    );
    // scalar target and scalar source
    let s = Tensor::scalar(3.0f64);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&s);
        s.pow_scalar(3.0)
    })?;
    let j = tape.jacobian(&y, &s)?.unwrap();
    assert_eq!(j.shape(), &[] as &[usize]);
    assert_eq!(j.to_scalar::<f64>()?, 27.0);
    Ok(())
}

#[test]
fn the_jacobian_of_a_source_is_the_identity_and_variables_work() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::persistent();
    tape.watch(&x);
    let j = tape.jacobian(&x, &x)?.unwrap();
    assert_eq!(j.to_vec::<f64>()?, vec![1.0, 0.0, 0.0, 1.0]);
    let v = Variable::new(Tensor::vector(&[2.0f64, -1.0, 0.5]));
    let tape = GradientTape::persistent();
    let y = tape.record(|| v.read().square())?;
    let j = tape.jacobian(&y, &v)?.unwrap();
    assert_eq!(j.to_vec::<f64>()?, vec![4.0, 0.0, 0.0, 0.0, -2.0, 0.0, 0.0, 0.0, 1.0]);
    let jn = tape.jacobian_with(&y, &v, nonvec())?.unwrap();
    assert_eq!(jn.to_vec::<f64>()?, j.to_vec::<f64>()?);
    Ok(())
}

#[test]
fn unconnected_and_integer_sources() -> Result<()> {
    let x = Tensor::vector(&[1.0f32, 2.0]);
    let c = t(&[1.0, 2.0, 3.0], &[3]).cast(DType::F32)?;
    let i = Tensor::vector(&[1i64, 2]);
    for vectorized in [true, false] {
        let tape = GradientTape::persistent();
        let y = tape.record(|| {
            tape.watch(&[&x, &c, &i]);
            x.exp()
        })?;
        let opts = JacobianOptions::default().vectorized(vectorized);
        let (jx, jc, ji) = tape.jacobian_with(&y, &(&x, &c, &i), opts)?;
        assert!(jx.is_some() && jc.is_none() && ji.is_none());
        let (_, jc, ji) = tape.jacobian_with(&y, &(&x, &c, &i), opts.unconnected(Unconnected::Zero))?;
        let jc = jc.unwrap();
        assert_eq!(jc.shape(), &[2, 3]);
        assert_eq!(jc.dtype(), DType::F32);
        assert_eq!(jc.to_vec::<f32>()?, vec![0.0; 6]);
        assert!(ji.is_none(), "integer sources get no Jacobian");
    }
    Ok(())
}

#[test]
fn non_vectorized_needs_a_persistent_tape_and_one_shot_works_once() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.square()
    })?;
    let err = tape.jacobian_with(&y, &x, nonvec()).unwrap_err();
    assert!(matches!(err, Error::TapeNotPersistent { op: "jacobian" }), "{err}");
    // a vectorized jacobian on a one-shot tape works once
    let j = tape.jacobian(&y, &x)?.unwrap();
    assert_eq!(j.to_vec::<f64>()?, vec![2.0, 0.0, 0.0, 4.0]);
    assert!(matches!(tape.jacobian(&y, &x), Err(Error::TapeNotPersistent { .. })));
    assert!(matches!(tape.gradient(&y, &x), Err(Error::TapeNotPersistent { .. })));
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.square()?.expand_dims(0)
    })?;
    let err = tape.batch_jacobian_with(&y, &x.expand_dims(0)?, nonvec()).unwrap_err();
    assert!(
        matches!(err, Error::TapeNotPersistent { op: "batch_jacobian" }),
        "{err}"
    );
    Ok(())
}

#[test]
fn batch_jacobian_errors_name_the_shapes() -> Result<()> {
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let v = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::persistent();
    let (y, yv) = tape.record(|| {
        tape.watch(&[&x, &v]);
        Ok((x.square()?, v.square()?))
    })?;
    // rank below 2
    let e = tape.batch_jacobian(&yv, &v).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "batch_jacobian",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("[2]") && msg.contains("rank"), "{msg}");
    let e = tape.batch_jacobian(&y, &v).unwrap_err().to_string();
    assert!(e.contains("[2, 3]") && e.contains("[2]"), "{e}");
    // first dims differ
    let xt = x.transpose()?;
    let e = tape.batch_jacobian(&y, &xt).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "batch_jacobian",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("[2, 3]") && msg.contains("[3, 2]") && msg.contains("first dim"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn batch_jacobian_matches_the_diagonal_blocks_of_the_jacobian() -> Result<()> {
    let x = t(
        &[0.3, -1.2, 0.8, 0.5, 1.1, -0.4, 0.9, 0.2, -0.7, 0.6, 0.05, 1.4],
        &[3, 4],
    );
    let w = t(
        &[0.5, -0.3, 0.2, 0.9, 0.4, -0.1, 0.7, 0.3, -0.6, 0.8, 0.25, -0.45],
        &[4, 3],
    );
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        // [3, 3] -> reshape [3, 3, 1] to test a target of rank 3
        x.matmul(&w)?.tanh()?.mul(&x.sum(&[1], true)?)?.reshape(&[3, 3, 1])
    })?;
    let bj = tape.batch_jacobian(&y, &x)?.unwrap();
    assert_eq!(bj.shape(), &[3, 3, 1, 4]);
    let full = tape.jacobian(&y, &x)?.unwrap(); // [3, 3, 1, 3, 4]
    let fv = full.to_vec_f64();
    let mut want = Vec::new();
    for b in 0..3 {
        for j in 0..3 {
            for k in 0..4 {
                want.push(fv[((b * 3 + j) * 3 + b) * 4 + k]);
            }
        }
    }
    close(&bj, &want, 1e-12);
    let bn = tape.batch_jacobian_with(&y, &x, nonvec())?.unwrap();
    close(&bn, &want, 1e-12);
    Ok(())
}

/// f(x) = sum(tanh(W x)^2): gradient 2 Wᵀ (t ⊙ (1 - t²)), Hessian
/// Wᵀ diag(2 (1 - t²)(1 - 3t²)) W with t = tanh(W x).
#[test]
fn hessian_through_nested_tapes() -> Result<()> {
    let w = t(&[0.5, -0.3, 0.2, 0.9, 0.4, -0.1, 0.7, 0.3, -0.6], &[3, 3]);
    let x = t(&[0.2, -0.7, 1.1], &[3]);
    let tv = w.matmul(&x.reshape(&[3, 1])?)?.tanh()?.to_vec::<f64>()?;
    let wv = w.to_vec::<f64>()?;
    let d: Vec<f64> = tv.iter().map(|t| 2.0 * (1.0 - t * t) * (1.0 - 3.0 * t * t)).collect();
    let mut want = vec![0.0; 9];
    for i in 0..3 {
        for j in 0..3 {
            for k in 0..3 {
                want[i * 3 + j] += wv[k * 3 + i] * d[k] * wv[k * 3 + j];
            }
        }
    }
    for vectorized in [true, false] {
        let outer = GradientTape::persistent();
        let g = outer.record(|| {
            outer.watch(&x);
            let inner = GradientTape::new();
            let f = inner.record(|| {
                inner.watch(&x);
                w.matmul(&x.reshape(&[3, 1])?)?
                    .reshape(&[3])?
                    .tanh()?
                    .square()?
                    .sum_all()
            })?;
            Ok(inner.gradient(&f, &x)?.unwrap())
        })?;
        let h = outer
            .jacobian_with(&g, &x, JacobianOptions::default().vectorized(vectorized))?
            .unwrap();
        assert_eq!(h.shape(), &[3, 3]);
        close(&h, &want, 1e-12);
    }
    Ok(())
}

/// The Jacobian itself is differentiable: d/dx of J(x) for y = x³ is
/// diag(6x) arranged as [n, n, n].
#[test]
fn jacobian_under_an_outer_tape() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, -2.0]);
    for vectorized in [true, false] {
        let outer = GradientTape::persistent();
        let j = outer.record(|| {
            outer.watch(&x);
            let inner = GradientTape::persistent();
            let y = inner.record(|| {
                inner.watch(&x);
                x.pow_scalar(3.0)
            })?;
            let opts = JacobianOptions::default().vectorized(vectorized);
            Ok(inner.jacobian_with(&y, &x, opts)?.unwrap())
        })?;
        assert_eq!(j.to_vec::<f64>()?, vec![3.0, 0.0, 0.0, 12.0]);
        let jj = outer.jacobian(&j, &x)?.unwrap();
        assert_eq!(jj.shape(), &[2, 2, 2]);
        assert_eq!(jj.to_vec::<f64>()?, vec![6.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -12.0]);
    }
    Ok(())
}

#[test]
fn empty_targets_and_sources() -> Result<()> {
    let x = Tensor::zeros(&[0, 2], DType::F64);
    let s = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::persistent();
    let (y, z) = tape.record(|| {
        tape.watch(&[&x, &s]);
        Ok((x.exp()?, s.sum_all()?.mul(&x.sum_all()?)?))
    })?;
    let j = tape.jacobian(&y, &x)?.unwrap();
    assert_eq!(j.shape(), &[0, 2, 0, 2]);
    let js = tape.jacobian(&z, &s)?.unwrap();
    assert_eq!(js.to_vec::<f64>()?, vec![0.0, 0.0]);
    let jx = tape.jacobian_with(&z, &x, nonvec())?.unwrap();
    assert_eq!(jx.shape(), &[0, 2]);
    Ok(())
}
