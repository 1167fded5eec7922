//! The gradient of a split (`split`, `split_sizes`, `unstack`) on a tape:
//! one op whose rule concatenates the parts' cotangents (zeros for parts
//! that got none), eagerly, to second order, beside forward mode, and
//! inside a traced function. (That it is one concatenation, not a padded
//! cotangent per part, is checked by what it allocates: `tests/alloc`.)

use gradtape::{function, DType, ForwardAccumulator, GradientTape, Result, Tensor};

/// `[2, 5, 3]`, element `i` = `(i + 1) / 10`.
fn x() -> Tensor {
    let v: Vec<f64> = (0..30).map(|i| (i + 1) as f64 / 10.0).collect();
    Tensor::from_vec(v, &[2, 5, 3]).unwrap()
}

/// `Σ_t (t + 1) Σ part_t³` over the steps `used` of `x` unstacked along
/// axis 1.
fn loss(x: &Tensor, used: &[usize]) -> Result<Tensor> {
    let steps = x.unstack(1)?;
    let mut total = Tensor::scalar(0.0f64);
    for &t in used {
        total = total.add(&steps[t].pow_scalar(3.0)?.sum_all()?.mul_scalar((t + 1) as f64)?)?;
    }
    Ok(total)
}

/// `d loss / dx` by hand: `3 (t + 1) x²` at the used steps, 0 elsewhere.
fn want_grad(used: &[usize]) -> Vec<f64> {
    let x = x().to_vec::<f64>().unwrap();
    (0..30)
        .map(|i| {
            let t = (i / 3) % 5;
            if used.contains(&t) {
                3.0 * (t + 1) as f64 * x[i] * x[i]
            } else {
                0.0
            }
        })
        .collect()
}

/// The diagonal of `d² loss / dx²` (the Hessian is diagonal): `6 (t + 1)
/// x` at the used steps, 0 elsewhere.
fn want_hessian_diagonal(used: &[usize]) -> Vec<f64> {
    let x = x().to_vec::<f64>().unwrap();
    (0..30)
        .map(|i| {
            let t = (i / 3) % 5;
            if used.contains(&t) {
                6.0 * (t + 1) as f64 * x[i]
            } else {
                0.0
            }
        })
        .collect()
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "element {i}: {g} vs {w}");
    }
}

#[test]
fn unstack_gradient_is_each_steps_cotangent_in_place_and_zeros_for_unused_steps() -> Result<()> {
    for used in [vec![0, 1, 2, 3, 4], vec![1, 3], vec![4]] {
        let x = x();
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            loss(&x, &used)
        })?;
        let g = tape.gradient(&y, &x)?.unwrap();
        close(&g.to_vec::<f64>()?, &want_grad(&used));
    }
    Ok(())
}

#[test]
fn split_gradient_to_second_order() -> Result<()> {
    // d²/dx² of Σ_t (t + 1) Σ part_t³ is diagonal: 6 (t + 1) x
    let x = x();
    let outer = GradientTape::new();
    let g_sum = outer.record(|| {
        outer.watch(&x);
        let inner = GradientTape::new();
        let y = inner.record(|| {
            inner.watch(&x);
            loss(&x, &[0, 2, 4])
        })?;
        inner.gradient(&y, &x)?.unwrap().sum_all()
    })?;
    let h = outer.gradient(&g_sum, &x)?.unwrap().to_vec::<f64>()?;
    let want = want_hessian_diagonal(&[0, 2, 4]);
    close(&h, &want);
    Ok(())
}

#[test]
fn split_sizes_gradient_with_parts_of_different_sizes() -> Result<()> {
    // parts of 1, 3 and 1 along axis 1; the middle one unused
    let x = x();
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        let p = x.split_sizes(&[1, 3, 1], 1)?;
        p[0].mul_scalar(2.0)?.sum_all()?.add(&p[2].square()?.sum_all()?)
    })?;
    let g = tape.gradient(&y, &x)?.unwrap().to_vec::<f64>()?;
    let xv = x.to_vec::<f64>()?;
    let want: Vec<f64> = (0..30)
        .map(|i| match (i / 3) % 5 {
            0 => 2.0,
            4 => 2.0 * xv[i],
            _ => 0.0,
        })
        .collect();
    close(&g, &want);
    Ok(())
}

#[test]
fn split_under_a_forward_accumulator_and_a_tape_together() -> Result<()> {
    // forward over reverse: the Hessian-vector product of the loss with
    // v = ones: 6 (t + 1) x at the used steps
    let x = x();
    let acc = ForwardAccumulator::new();
    acc.watch(&x, &Tensor::ones(&[2, 5, 3], DType::F64))?;
    let g = acc.record(|| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            loss(&x, &[1, 2])
        })?;
        Ok(tape.gradient(&y, &x)?.unwrap())
    })?;
    let hv = acc.jvp(&g)?.unwrap().to_vec::<f64>()?;
    let want = want_hessian_diagonal(&[1, 2]);
    close(&hv, &want);
    Ok(())
}

#[test]
fn split_gradient_inside_a_traced_function_equals_eager() -> Result<()> {
    let f = function(|x: &Tensor| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            loss(x, &[0, 3, 4])
        })?;
        Ok(tape.gradient(&y, x)?.unwrap())
    });
    for _ in 0..2 {
        close(&f.call(&x())?.to_vec::<f64>()?, &want_grad(&[0, 3, 4]));
    }
    Ok(())
}
