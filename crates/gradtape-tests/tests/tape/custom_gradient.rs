//! Custom gradients: custom_gradient, custom_gradient_with_variables,
//! record_gradient, with_gradient_override. Expected values are derived by
//! hand.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gradtape::{
    custom_gradient, custom_gradient_with_variables, grad, record_gradient, with_gradient_override, Error,
    GradientTape, Result, SourceRef, Tensor, Variable,
};

fn val(t: &Option<Tensor>) -> Vec<f64> {
    t.as_ref().expect("a gradient").to_vec_f64()
}

fn s(v: f64) -> Tensor {
    Tensor::scalar(v)
}

fn invalid_msg(e: Error) -> (&'static str, String) {
    match e {
        Error::InvalidArgument { op, msg } => (op, msg),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// log(1 + eˣ) with the gradient 1 - 1/(1 + eˣ), written with the forward's eˣ.
fn log1pexp(x: &Tensor) -> Result<Tensor> {
    let ys = custom_gradient("log1pexp", std::slice::from_ref(x), |xs| {
        let e = xs[0].exp()?;
        let y = e.add_scalar(1.0)?.log()?;
        let backward = move |dy: &[Tensor]| {
            let s = e.add_scalar(1.0)?;
            let one = s.ones_like();
            Ok(vec![Some(dy[0].mul(&one.sub(&one.div(&s)?)?)?)])
        };
        Ok((vec![y], backward))
    })?;
    Ok(ys[0].clone())
}

#[test]
fn the_custom_gradient_is_used_instead_of_the_ops_own() -> Result<()> {
    // at x = 100 in f32, e^x overflows: the ops' own gradient is inf/inf = NaN,
    // the custom one is 1 - 1/inf = 1
    let x = Tensor::scalar(100.0f32);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        log1pexp(&x)
    })?;
    assert_eq!(tape.gradient(&y, &x)?.expect("connected").to_scalar::<f32>()?, 1.0);
    let plain = GradientTape::new();
    let y = plain.record(|| {
        plain.watch(&x);
        x.exp()?.add_scalar(1.0)?.log()
    })?;
    assert!(plain.gradient(&y, &x)?.expect("connected").to_scalar::<f32>()?.is_nan());
    Ok(())
}

#[test]
fn second_order_goes_through_the_backward() -> Result<()> {
    // d/dx (1 - 1/(1 + eˣ)) = eˣ/(1 + eˣ)² = 1/4 at x = 0, exactly
    let x = s(0.0);
    let outer = GradientTape::new();
    let inner = GradientTape::new();
    let dy = outer.record(|| {
        outer.watch(&x);
        let y = inner.record(|| {
            inner.watch(&x);
            log1pexp(&x)
        })?;
        Ok(inner.gradient(&y, &x)?.expect("connected"))
    })?;
    assert_eq!(dy.to_scalar::<f64>()?, 0.5);
    assert_eq!(val(&outer.gradient(&dy, &x)?), vec![0.25]);
    // and through the functional API
    let d2 = grad(|a: &[Tensor]| {
        Ok(grad(|b: &[Tensor]| log1pexp(&b[0])).call(a)?[0]
            .clone()
            .expect("connected"))
    })
    .call(&[s(0.0)])?;
    assert_eq!(val(&d2[0]), vec![0.25]);
    Ok(())
}

#[test]
fn a_deliberately_different_gradient_shows_it_is_the_one_used() -> Result<()> {
    // forward: the inputs themselves (x, y) -> (x, x y); backward: halve dx
    // of the first output, true gradients for the second. Returning an input
    // as an output is allowed (it gets a fresh identity).
    let (x, y) = (s(3.0), s(4.0));
    let tape = GradientTape::persistent();
    let outs = tape.record(|| {
        tape.watch(&[&x, &y]);
        custom_gradient("halve", &[x.clone(), y.clone()], |xs| {
            let (a, b) = (xs[0].clone(), xs[1].clone());
            let p = a.mul(&b)?;
            let backward = move |dy: &[Tensor]| {
                let dx = dy[0].mul_scalar(0.5)?.add(&dy[1].mul(&b)?)?;
                let dyy = dy[1].mul(&a)?;
                Ok(vec![Some(dx), Some(dyy)])
            };
            Ok((vec![xs[0].clone(), p], backward))
        })
    })?;
    assert_ne!(outs[0].id(), x.id());
    assert_eq!(outs[1].to_scalar::<f64>()?, 12.0);
    // d(out0)/dx = 0.5, d(out1)/dx = y = 4, d(out1)/dy = x = 3
    assert_eq!(val(&tape.gradient(&outs[0], &x)?), vec![0.5]);
    // the backward ran with a zero cotangent for out1: 0 * x
    assert_eq!(val(&tape.gradient(&outs[0], &y)?), vec![0.0]);
    let [dx, dy] = tape.gradient(&outs[..], &[&x, &y])?;
    assert_eq!((val(&dx), val(&dy)), (vec![4.5], vec![3.0]));
    Ok(())
}

#[test]
fn a_wrong_number_of_gradients_is_an_error_naming_the_function() -> Result<()> {
    let x = s(1.0);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        let ys = custom_gradient("two_grads", std::slice::from_ref(&x), |xs| {
            Ok((vec![xs[0].square()?], |dy: &[Tensor]| {
                Ok(vec![Some(dy[0].clone()), None])
            }))
        })?;
        Ok(ys[0].clone())
    })?;
    let (op, msg) = invalid_msg(tape.gradient(&y, &x).unwrap_err());
    assert_eq!(op, "two_grads");
    assert!(msg.contains("returned 2 gradients for 1 inputs"), "{msg}");
    Ok(())
}

#[test]
fn a_wrong_shape_or_dtype_is_an_error_naming_the_function() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    for (bad, needle) in [
        (Tensor::vector(&[1.0f64, 2.0, 3.0]), "shape [3]"),
        (Tensor::vector(&[1.0f32, 2.0]), "dtype F32"),
    ] {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            let ys = custom_gradient("bad_shape", std::slice::from_ref(&x), move |xs| {
                let bad = bad.clone();
                Ok((vec![xs[0].square()?], move |_: &[Tensor]| Ok(vec![Some(bad.clone())])))
            })?;
            Ok(ys[0].clone())
        })?;
        let (op, msg) = invalid_msg(tape.gradient(&y, &x).unwrap_err());
        assert_eq!(op, "bad_shape");
        assert!(msg.contains(needle) && msg.contains("input 0 of shape [2]"), "{msg}");
    }
    Ok(())
}

/// y = 2x with a backward that counts its calls.
fn counted(x: &Tensor, calls: &Arc<AtomicUsize>) -> Result<Tensor> {
    let calls = calls.clone();
    let ys = custom_gradient("counted", std::slice::from_ref(x), move |xs| {
        let backward = move |dy: &[Tensor]| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(vec![Some(dy[0].mul_scalar(2.0)?)])
        };
        Ok((vec![xs[0].mul_scalar(2.0)?], backward))
    })?;
    Ok(ys[0].clone())
}

#[test]
fn stop_gradient_upstream_means_the_backward_is_never_called() -> Result<()> {
    let x = s(3.0);
    let calls = Arc::new(AtomicUsize::new(0));
    let tape = GradientTape::new();
    let (y, z) = tape.record(|| {
        tape.watch(&x);
        let y = counted(&x.stop_gradient(), &calls)?;
        Ok((y.add(&x)?, y))
    })?;
    // only the direct path counts: d(y + x)/dx = 1
    assert_eq!(val(&tape.gradient(&y, &x)?), vec![1.0]);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(z.to_scalar::<f64>()?, 6.0);
    // control: without stop_gradient it is called once per gradient
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        counted(&x, &calls)
    })?;
    assert_eq!(val(&tape.gradient(&y, &x)?), vec![2.0]);
    assert_eq!(val(&tape.gradient(&y, &x)?), vec![2.0]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // and no tape at all: the forward runs, nothing is recorded or called
    assert_eq!(counted(&x, &calls)?.to_scalar::<f64>()?, 6.0);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    Ok(())
}

#[test]
fn custom_gradient_rejects_a_forward_that_reads_variables() {
    let w = Variable::builder(s(2.0)).name("w").build();
    let x = s(1.0);
    let tape = GradientTape::new();
    let e = tape
        .record(|| {
            tape.watch(&x);
            custom_gradient("uses_w", std::slice::from_ref(&x), |xs| {
                Ok((vec![xs[0].mul(&w.read())?], |dy: &[Tensor]| {
                    Ok(vec![Some(dy[0].clone())])
                }))
            })
        })
        .unwrap_err();
    let (op, msg) = invalid_msg(e);
    assert_eq!(op, "uses_w");
    assert!(
        msg.contains("\"w\"") && msg.contains("custom_gradient_with_variables"),
        "{msg}"
    );
}

#[test]
fn variables_read_inside_get_the_backwards_gradients() -> Result<()> {
    // y = x w1 + w2 (w2 created first); backward gives dx = w1 dy,
    // dw2 = dy, dw1 = x dy: at x = 3, w1 = 5 that is 5, 1, 3
    let w2 = Variable::new(s(7.0));
    let w1 = Variable::new(s(5.0));
    let x = s(3.0);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        let ys = custom_gradient_with_variables("affine", std::slice::from_ref(&x), |xs| {
            let (xv, a) = (xs[0].clone(), w1.read());
            let y = xv.mul(&a)?.add(&w2.read())?;
            let (h1, h2) = (w1.handle(), w2.handle());
            let backward = move |dy: &[Tensor], vars: &[Variable]| {
                // variables in creation order
                assert_eq!(vars.iter().map(|v| v.handle()).collect::<Vec<_>>(), vec![h2, h1]);
                Ok((
                    vec![Some(dy[0].mul(&a)?)],
                    vec![Some(dy[0].clone()), Some(dy[0].mul(&xv)?)],
                ))
            };
            Ok((vec![y], backward))
        })?;
        Ok(ys[0].clone())
    })?;
    assert_eq!(y.to_scalar::<f64>()?, 22.0);
    let (dx, dw1, dw2) = tape.gradient(&y, &(SourceRef::from(&x), SourceRef::from(&w1), SourceRef::from(&w2)))?;
    assert_eq!((val(&dx), val(&dw1), val(&dw2)), (vec![5.0], vec![3.0], vec![1.0]));
    Ok(())
}

#[test]
fn a_wrong_number_of_variable_gradients_is_an_error() -> Result<()> {
    let w = Variable::new(s(5.0));
    let x = s(3.0);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        let ys = custom_gradient_with_variables("no_var_grads", std::slice::from_ref(&x), |xs| {
            let y = xs[0].mul(&w.read())?;
            let backward = |dy: &[Tensor], _: &[Variable]| Ok((vec![Some(dy[0].clone())], vec![]));
            Ok((vec![y], backward))
        })?;
        Ok(ys[0].clone())
    })?;
    let (op, msg) = invalid_msg(tape.gradient(&y, &x).unwrap_err());
    assert_eq!(op, "no_var_grads");
    assert!(msg.contains("1 inputs and 1 variables"), "{msg}");
    Ok(())
}

#[test]
fn record_gradient_records_a_user_op_on_every_watching_tape() -> Result<()> {
    // y = x³ computed where no tape sees it, recorded with rule 3x² dy
    // (itself differentiable): first derivative 27, second 6x = 18 at x = 3
    let x = s(3.0);
    let outer = GradientTape::new();
    let inner = GradientTape::new();
    let d1 = outer.record(|| {
        outer.watch(&x);
        let y = inner.record(|| {
            inner.watch(&x);
            let y = outer.stop_recording(|| inner.stop_recording(|| x.pow_scalar(3.0)))?;
            let xc = x.clone();
            record_gradient(
                "Cube",
                std::slice::from_ref(&x),
                std::slice::from_ref(&y),
                move |dy: &[Tensor]| Ok(vec![Some(dy[0].mul(&xc.square()?.mul_scalar(3.0)?)?)]),
            )?;
            Ok(y)
        })?;
        assert_eq!(y.to_scalar::<f64>()?, 27.0);
        Ok(inner.gradient(&y, &x)?.expect("connected"))
    })?;
    assert_eq!(d1.to_scalar::<f64>()?, 27.0);
    assert_eq!(val(&outer.gradient(&d1, &x)?), vec![18.0]);
    Ok(())
}

#[test]
fn record_gradient_rejects_an_input_as_output() {
    let x = s(1.0);
    let e = record_gradient(
        "Same",
        std::slice::from_ref(&x),
        std::slice::from_ref(&x),
        |dy: &[Tensor]| Ok(vec![Some(dy[0].clone())]),
    )
    .unwrap_err();
    let (op, msg) = invalid_msg(e);
    assert_eq!(op, "Same");
    assert!(msg.contains("output 0 is input 0"), "{msg}");
}

#[test]
fn gradient_override_replaces_an_ops_rule_within_its_scope() -> Result<()> {
    // straight-through tanh inside the scope; the real rule outside:
    // y = tanh(x) [overridden] + tanh(x) [own] at x = 0: 1 + 1 = 2 and at
    // x = 0.5: 1 + (1 - tanh²(0.5))
    let identity_rule = |_: &[Tensor], _: &Tensor, dy: &Tensor| Ok(vec![Some(dy.clone())]);
    for x0 in [0.0f64, 0.5] {
        let x = s(x0);
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&x);
            let a = with_gradient_override("Tanh", identity_rule, || x.tanh())?;
            a.add(&x.tanh()?)
        })?;
        let t = x0.tanh();
        let d = val(&tape.gradient(&y, &x)?)[0];
        assert!((d - (2.0 - t * t)).abs() < 1e-15, "{d}");
    }
    Ok(())
}

#[test]
fn gradient_override_sees_inputs_and_output_and_nests() -> Result<()> {
    // Mul overridden to give (2 y, 3 x) [instead of (y, x)], the inner
    // scope giving (x y, 0) using the output; innermost wins
    let (x, y) = (s(3.0), s(5.0));
    let tape = GradientTape::persistent();
    let (p, q) = tape.record(|| {
        tape.watch(&[&x, &y]);
        with_gradient_override(
            "Mul",
            |xs: &[Tensor], _: &Tensor, dy: &Tensor| {
                Ok(vec![
                    Some(dy.mul(&xs[1])?.mul_scalar(2.0)?),
                    Some(dy.mul(&xs[0])?.mul_scalar(3.0)?),
                ])
            },
            || {
                let p = x.mul(&y)?;
                let q = with_gradient_override(
                    "Mul",
                    |_: &[Tensor], out: &Tensor, dy: &Tensor| Ok(vec![Some(dy.mul(out)?), None]),
                    || x.mul(&y),
                )?;
                Ok((p, q))
            },
        )
    })?;
    let [dx, dy] = tape.gradient(&p, &[&x, &y])?;
    assert_eq!((val(&dx), val(&dy)), (vec![10.0], vec![9.0]));
    let [dx, dy] = tape.gradient(&q, &[&x, &y])?;
    assert_eq!(val(&dx), vec![15.0]);
    assert!(dy.is_none());
    // after the scopes, Mul has its own rule again
    let r = tape.record(|| x.mul(&y))?;
    let [dx, dy] = tape.gradient(&r, &[&x, &y])?;
    assert_eq!((val(&dx), val(&dy)), (vec![5.0], vec![3.0]));
    Ok(())
}

#[test]
fn a_bad_override_is_an_error_naming_the_op() -> Result<()> {
    let x = Tensor::vector(&[1.0f64, 2.0]);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        with_gradient_override(
            "Exp",
            |_: &[Tensor], _: &Tensor, _: &Tensor| Ok(vec![None, None]),
            || x.exp(),
        )
    })?;
    let (op, msg) = invalid_msg(tape.gradient(&y, &x).unwrap_err());
    assert_eq!(op, "Exp");
    assert!(msg.contains("returned 2 gradients for 1 inputs"), "{msg}");
    Ok(())
}

#[test]
fn the_override_scope_ends_even_on_error() -> Result<()> {
    let x = s(0.5);
    let r: Result<Tensor> = with_gradient_override(
        "Tanh",
        |_: &[Tensor], _: &Tensor, dy: &Tensor| Ok(vec![Some(dy.clone())]),
        || Err(Error::TapeNotRecording),
    );
    assert!(r.is_err());
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.tanh()
    })?;
    let t = 0.5f64.tanh();
    assert!((val(&tape.gradient(&y, &x)?)[0] - (1.0 - t * t)).abs() < 1e-15);
    Ok(())
}

#[test]
fn a_gradient_for_an_integer_input_is_dropped_and_float_ones_flow() -> Result<()> {
    // y = x * n with n an i64 input: the backward returns a (meaningless)
    // gradient for n too; it is ignored, dx = n = 4
    let (x, n) = (s(2.5), Tensor::scalar(4i64));
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&[&x, &n]);
        let ys = custom_gradient("times_n", &[x.clone(), n.clone()], |xs| {
            let nf = xs[1].cast(gradtape::DType::F64)?;
            let y = xs[0].mul(&nf)?;
            let n_int = xs[1].clone();
            Ok((vec![y], move |dy: &[Tensor]| {
                Ok(vec![Some(dy[0].mul(&nf)?), Some(n_int.clone())])
            }))
        })?;
        Ok(ys[0].clone())
    })?;
    assert_eq!(y.to_scalar::<f64>()?, 10.0);
    let [dx, dn] = tape.gradient(&y, &[&x, &n])?;
    assert_eq!(val(&dx), vec![4.0]);
    assert!(dn.is_none());
    Ok(())
}

/// Forward mode sees a custom gradient too: the tangent comes from the user
/// backward (its transpose), not from the forward's own ops.
#[test]
fn forward_mode_uses_the_custom_gradient() -> Result<()> {
    let x = Tensor::scalar(0.5f64);
    let (_, t) = gradtape::jvp(|p| log1pexp(&p[0]), std::slice::from_ref(&x), &[s(2.0)])?;
    let sigmoid = 1.0 / (1.0 + (-0.5f64).exp());
    assert!((t.to_scalar::<f64>()? - 2.0 * sigmoid).abs() < 1e-12);
    // a deliberately different backward (3 dy) shows which one is used
    let (_, t) = gradtape::jvp(
        |p| {
            let ys = custom_gradient("triple", &p[..1], |xs| {
                let y = xs[0].sin()?;
                Ok((vec![y], |dy: &[Tensor]| Ok(vec![Some(dy[0].mul_scalar(3.0)?)])))
            })?;
            Ok(ys[0].clone())
        },
        std::slice::from_ref(&x),
        &[s(2.0)],
    )?;
    assert_eq!(t.to_scalar::<f64>()?, 6.0);
    Ok(())
}
