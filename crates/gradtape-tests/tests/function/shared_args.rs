//! One tensor passed as two arguments of a traced function: inside the
//! closure it is one tensor, as it is eagerly (`function`'s
//! `shared_args`). A tape or a forward accumulator inside the closure that
//! watches either argument watches both, so a gradient or a tangent with
//! respect to either is the total derivative, traced as eagerly; a call
//! whose arguments repeat differently is another trace; and a tape outside
//! the call, differentiating through it to any order, gets eager's
//! numbers.
//!
//! TensorFlow 2.21 (`/work/scratch` script, not kept): with
//! `x = [2, 3]` and the closure below, its eager mode gives `[4, 6]` for
//! both gradients, its `tf.function` `[2, 3]` (a placeholder per
//! argument). gradtape gives eager's `[4, 6]` in both modes.

use gradtape::{function, ForwardAccumulator, GradientTape, Result, Tensor};

/// The gradients of `Σ a·b` with respect to `a` and `b` (a tape inside the
/// closure) and its tangent along `a` (an accumulator inside it).
fn inner((a, b): &(Tensor, Tensor)) -> Result<(Tensor, Tensor, Tensor)> {
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(a);
        tape.watch(b);
        a.mul(b)?.sum_all()
    })?;
    let ga = tape.gradient(&y, a)?.expect("a is watched");
    let gb = tape.gradient(&y, b)?.expect("b is watched");
    let acc = ForwardAccumulator::new();
    acc.watch(a, &a.ones_like())?;
    let z = acc.record(|| a.mul(b)?.sum_all())?;
    let jz = acc.jvp(&z)?.expect("z depends on a");
    Ok((ga, gb, jz))
}

fn vals(t: &(Tensor, Tensor, Tensor)) -> Result<[Vec<f64>; 3]> {
    Ok([t.0.to_vec()?, t.1.to_vec()?, t.2.to_vec()?])
}

#[test]
fn a_tensor_passed_twice_is_one_tensor_inside_the_trace() -> Result<()> {
    let x = Tensor::vector(&[2.0f64, 3.0]);
    let y = Tensor::vector(&[5.0f64, 7.0]);
    let f = function(inner);
    // TF 2.21 eager: [4, 6], [4, 6]; the tangent Σ 2x = 10
    let want = [vec![4.0, 6.0], vec![4.0, 6.0], vec![10.0]];
    assert_eq!(vals(&inner(&(x.clone(), x.clone()))?)?, want);
    assert_eq!(vals(&f.call(&(x.clone(), x.clone()))?)?, want);
    // two tensors: the partial derivatives, from a trace of their own
    let partial = [vec![5.0, 7.0], vec![2.0, 3.0], vec![12.0]];
    assert_eq!(vals(&inner(&(x.clone(), y.clone()))?)?, partial);
    assert_eq!(vals(&f.call(&(x.clone(), y.clone()))?)?, partial);
    assert_eq!(f.trace_count(), 2);
    // each graph serves the calls that repeat as it was traced
    assert_eq!(
        vals(&f.call(&(y.clone(), y.clone()))?)?,
        [vec![10.0, 14.0], vec![10.0, 14.0], vec![24.0]]
    );
    assert_eq!(
        vals(&f.call(&(y.clone(), x.clone()))?)?,
        [vec![2.0, 3.0], vec![5.0, 7.0], vec![5.0]]
    );
    assert_eq!(f.trace_count(), 2);
    Ok(())
}

/// `Σ ∂(Σ a²·b + sin a)/∂a` (a gradient inside the closure), and the
/// value itself.
fn grad_inside((a, b): &(Tensor, Tensor)) -> Result<(Tensor, Tensor)> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(a);
        a.mul(a)?.mul(b)?.add(&a.sin()?)?.sum_all()
    })?;
    let ga = tape.gradient(&y, a)?.expect("a is watched");
    Ok((ga.sum_all()?, y))
}

#[test]
fn tapes_outside_a_call_with_a_repeated_tensor_get_eager_numbers() -> Result<()> {
    let x = Tensor::vector(&[0.5f64, -1.25, 2.0]);
    let f = function(grad_inside);
    // with a = b = x: y = Σ x³ + sin x, the inner gradient 3x² + cos x;
    // through the call: dy/dx = 3x² + cos x, d(Σ 3x² + cos x)/dx = 6x − sin x
    let through = |traced: bool| -> Result<(Vec<f64>, Vec<f64>)> {
        let tape = GradientTape::persistent();
        let (g, y) = tape.record(|| {
            tape.watch(&x);
            let args = (x.clone(), x.clone());
            if traced {
                f.call(&args)
            } else {
                grad_inside(&args)
            }
        })?;
        Ok((
            tape.gradient(&y, &x)?.expect("y depends on x").to_vec()?,
            tape.gradient(&g, &x)?.expect("g depends on x").to_vec()?,
        ))
    };
    let (dy, dg) = through(false)?;
    let xs = x.to_vec::<f64>()?;
    for (i, &v) in xs.iter().enumerate() {
        assert!((dy[i] - (3.0 * v * v + v.cos())).abs() < 1e-12, "eager dy {dy:?}");
        assert!((dg[i] - (6.0 * v - v.sin())).abs() < 1e-12, "eager dg {dg:?}");
    }
    let (ty, tg) = through(true)?;
    for i in 0..xs.len() {
        assert!((ty[i] - dy[i]).abs() < 1e-12, "traced dy {ty:?} against eager {dy:?}");
        assert!((tg[i] - dg[i]).abs() < 1e-12, "traced dg {tg:?} against eager {dg:?}");
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// `∂(Σᵢ xs[i]·xs[0])/∂xs[0]`, summed.
fn many(xs: &[Tensor]) -> Result<Tensor> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&xs[0]);
        let mut s = xs[0].mul(&xs[1])?;
        for t in &xs[2..] {
            s = s.add(&t.mul(&xs[0])?)?;
        }
        s.sum_all()
    })?;
    tape.gradient(&y, &xs[0])?.expect("watched").sum_all()
}

#[test]
fn repeats_among_many_arguments_are_found() -> Result<()> {
    // 40 tensor arguments (past the pairwise search: the ids are sorted)
    let distinct: Vec<Tensor> = (0..40).map(|i| Tensor::vector(&[1.0 + i as f64])).collect();
    let mut repeated = distinct.clone();
    repeated[5] = distinct[0].clone();
    repeated[39] = distinct[0].clone();
    repeated[12] = distinct[7].clone();
    let f = function(|xs: &Vec<Tensor>| many(xs));
    for args in [&repeated, &distinct, &repeated] {
        let want = many(args)?.to_vec::<f64>()?;
        assert_eq!(f.call(args)?.to_vec::<f64>()?, want);
    }
    // d/dxs[0]: Σ of the other xs[i] (i ≥ 1), and 2·xs[0] for each of the
    // two products xs[0]·xs[0] (positions 5 and 39): 772
    let others: f64 = (1..40)
        .filter(|i| ![5, 39].contains(i))
        .map(|i| repeated[i].to_vec::<f64>().map(|v| v[0]))
        .sum::<Result<f64>>()?;
    let total = others + 4.0;
    assert_eq!(total, 772.0);
    assert_eq!(f.call(&repeated)?.to_vec::<f64>()?, vec![total]);
    assert_eq!(f.trace_count(), 2);
    Ok(())
}
