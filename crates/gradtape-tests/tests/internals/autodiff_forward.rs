//! The unit tests of `src/autodiff/forward.rs`, moved out of the library.

use gradtape::__internals::autodiff::forward::*;
use gradtape::__internals::autodiff::tape;
use gradtape::__internals::dispatch;
use gradtape::__internals::dispatch::Operands;
use gradtape::vjp;
use gradtape::Error;
use gradtape::GradientTape;
use gradtape::Result;
use gradtape::Tensor;
use smallvec::smallvec;

/// A two-output op `(2x, x²)` offered through `bind_untraced` without a JVP
/// rule: its tangents come from the double-VJP construction.
fn two_outputs(x: &Tensor) -> Result<(Tensor, Tensor)> {
    let (a, b) = tape::without_tapes(|| Ok::<_, Error>((x.mul_scalar(2.0)?, x.square()?)))?;
    let xc = x.clone();
    let mut make = || {
        let x = xc.clone();
        vjp(move |g, _| {
            Ok(smallvec![Some(
                g[0].mul_scalar(2.0)?.add(&g[1].mul(&x.mul_scalar(2.0)?)?)?
            )])
        })
    };
    dispatch::bind_untraced(
        "TwoOutputs",
        Operands::Tensors(&[x]),
        &[a.clone(), b.clone()],
        &mut make,
        None,
    );
    Ok((a, b))
}

#[test]
fn multi_output_ops_get_tangents_from_their_vjp_rule() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let t = Tensor::vector(&[1.0f64, 3.0]);
    let outer = ForwardAccumulator::watching(&x, std::slice::from_ref(&t))?;
    let inner = ForwardAccumulator::watching(&x, std::slice::from_ref(&t))?;
    let tape = GradientTape::new();
    let (a, b) = tape.record(|| {
        tape.watch(&x);
        outer.record(|| inner.record(|| two_outputs(&x)))
    })?;
    assert_eq!(inner.jvp(&a)?.unwrap().to_vec::<f64>()?, vec![2.0, 6.0]);
    let db = inner.jvp(&b)?.unwrap();
    assert_eq!(db.to_vec::<f64>()?, vec![2.0, 12.0]);
    // second order: the outer accumulator saw the inner double-VJP
    assert_eq!(outer.jvp(&db)?.unwrap().to_vec::<f64>()?, vec![2.0, 18.0]);
    // reverse over forward through it: d/dx Σ 2 x t = 2 t
    assert_eq!(tape.gradient(&db, &x)?.unwrap().to_vec::<f64>()?, vec![2.0, 6.0]);
    Ok(())
}

#[test]
fn a_failing_tangent_computation_is_reported_by_jvp() -> Result<()> {
    let x = Tensor::scalar(1.0f32);
    let acc = ForwardAccumulator::watching(&x, &[Tensor::scalar(1.0f32)])?;
    let y = acc.record(|| {
        let y = tape::without_tapes(|| x.add(&x))?;
        // a rule that returns one gradient for two inputs
        let mut make = || vjp(|g, _| Ok(smallvec![Some(g[0].clone())]));
        dispatch::bind_untraced(
            "Broken",
            Operands::Tensors(&[&x, &x]),
            std::slice::from_ref(&y),
            &mut make,
            None,
        );
        Ok(y)
    })?;
    let e = acc.jvp(&y).unwrap_err();
    assert!(
        e.to_string().contains("Broken") && e.to_string().contains("1 gradients for 2 inputs"),
        "{e}"
    );
    Ok(())
}
