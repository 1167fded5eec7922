//! Checkpointing with recompute_grad: the same gradients as the plain run,
//! fewer live intermediates, persistent and nested tapes, variables.

use std::sync::{Arc, Mutex};

use gradtape::{grad, recompute_grad, GradientTape, Result, SourceRef, Tensor, Variable, WeakTensor};

fn val(t: &Option<Tensor>) -> Vec<f64> {
    t.as_ref().expect("a gradient").to_vec_f64()
}

fn s(v: f64) -> Tensor {
    Tensor::scalar(v)
}

const DEPTH: usize = 40;

/// A deep chain h <- tanh(h * w + 0.1), `DEPTH` times; each layer output is
/// noted (weakly) in `seen`.
fn chain(xs: &[Tensor], seen: &Mutex<Vec<WeakTensor>>) -> Result<Vec<Tensor>> {
    let (mut h, w) = (xs[0].clone(), &xs[1]);
    for _ in 0..DEPTH {
        h = h.mul(w)?.add_scalar(0.1)?.tanh()?;
        seen.lock().expect("lock").push(h.downgrade());
    }
    Ok(vec![h])
}

fn alive(seen: &Mutex<Vec<WeakTensor>>) -> usize {
    seen.lock().expect("lock").iter().filter(|w| w.is_alive()).count()
}

fn inputs() -> (Tensor, Tensor) {
    (
        Tensor::vector(&[0.3f64, -0.7, 1.1]),
        Tensor::vector(&[0.9f64, 1.2, -0.8]),
    )
}

#[test]
fn gradients_equal_the_plain_run_and_fewer_intermediates_stay_alive() -> Result<()> {
    let (x, w) = inputs();

    // plain: the tape keeps every layer output alive until backward
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&[&x, &w]);
        chain(&[x.clone(), w.clone()], &seen)?.remove(0).sum_all()
    })?;
    assert_eq!(alive(&seen), DEPTH);
    let [px, pw] = tape.gradient(&y, &[&x, &w])?;
    let plain_y = y.to_vec_f64();

    // checkpointed: none of them survives the forward pass
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let block = recompute_grad(move |xs: &[Tensor]| chain(xs, &seen2));
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&[&x, &w]);
        block.call(&[x.clone(), w.clone()])?.remove(0).sum_all()
    })?;
    assert_eq!(seen.lock().expect("lock").len(), DEPTH);
    assert_eq!(alive(&seen), 0);
    let [rx, rw] = tape.gradient(&y, &[&x, &w])?;
    // the backward re-ran the chain once, and freed that run too
    assert_eq!(seen.lock().expect("lock").len(), 2 * DEPTH);
    assert_eq!(alive(&seen), 0);

    assert_eq!(y.to_vec_f64(), plain_y);
    // the same ops on the same values: bitwise equal
    assert_eq!(val(&px), val(&rx));
    assert_eq!(val(&pw), val(&rw));
    Ok(())
}

#[test]
fn a_small_case_by_hand() -> Result<()> {
    // f(x, w) = (sin(x) w, x w) at x = 0, w = 3, outputs summed:
    // d/dx = cos(0) w + w = 6, d/dw = sin(0) + x = 0
    let block = recompute_grad(|xs: &[Tensor]| Ok(vec![xs[0].sin()?.mul(&xs[1])?, xs[0].mul(&xs[1])?]));
    let (x, w) = (s(0.0), s(3.0));
    let tape = GradientTape::new();
    let ys = tape.record(|| {
        tape.watch(&x);
        tape.watch(&w);
        block.call(&[x.clone(), w.clone()])
    })?;
    let [dx, dw] = tape.gradient(&ys[..], &[&x, &w])?;
    assert_eq!((val(&dx), val(&dw)), (vec![6.0], vec![0.0]));
    // with no tape active it is a plain call
    let ys = block.call(&[s(0.5), s(2.0)])?;
    assert_eq!(ys[1].to_scalar::<f64>()?, 1.0);
    Ok(())
}

#[test]
fn a_persistent_tape_can_take_the_gradient_twice() -> Result<()> {
    // f = x³ w at x = 2, w = 0.5: d/dx = 3x² w = 6, d/dw = x³ = 8
    let calls = Arc::new(Mutex::new(0usize));
    let c = calls.clone();
    let block = recompute_grad(move |xs: &[Tensor]| {
        *c.lock().expect("lock") += 1;
        Ok(vec![xs[0].pow_scalar(3.0)?.mul(&xs[1])?])
    });
    let (x, w) = (s(2.0), s(0.5));
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&[&x, &w]);
        Ok(block.call(&[x.clone(), w.clone()])?.remove(0))
    })?;
    for _ in 0..2 {
        let [dx, dw] = tape.gradient(&y, &[&x, &w])?;
        assert_eq!((val(&dx), val(&dw)), (vec![6.0], vec![8.0]));
    }
    // one forward, one recomputation per gradient
    assert_eq!(*calls.lock().expect("lock"), 3);
    Ok(())
}

#[test]
fn nested_tapes_give_second_derivatives_through_the_recomputation() -> Result<()> {
    // f = x³: f' = 3x² = 6.75, f'' = 6x = 9 at x = 1.5
    let block = recompute_grad(|xs: &[Tensor]| Ok(vec![xs[0].pow_scalar(3.0)?]));
    let x = s(1.5);
    let outer = GradientTape::new();
    let inner = GradientTape::new();
    let d1 = outer.record(|| {
        outer.watch(&x);
        let y = inner.record(|| {
            inner.watch(&x);
            Ok(block.call(std::slice::from_ref(&x))?.remove(0))
        })?;
        Ok(inner.gradient(&y, &x)?.expect("connected"))
    })?;
    assert_eq!(d1.to_scalar::<f64>()?, 6.75);
    assert_eq!(val(&outer.gradient(&d1, &x)?), vec![9.0]);
    // the same through the functional API
    let d2 = grad(|a: &[Tensor]| {
        Ok(grad(|b: &[Tensor]| Ok(block.call(b)?.remove(0))).call(a)?[0]
            .clone()
            .expect("connected"))
    })
    .call(&[s(1.5)])?;
    assert_eq!(val(&d2[0]), vec![9.0]);
    Ok(())
}

#[test]
fn second_derivatives_on_the_deep_chain_match_the_plain_run() -> Result<()> {
    // d/dx of sum(dy/dw), with and without checkpointing
    let (x, w) = inputs();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let block = recompute_grad(move |xs: &[Tensor]| chain(xs, &seen2));
    let run = |checkpoint: bool| -> Result<Vec<f64>> {
        let outer = GradientTape::new();
        let inner = GradientTape::new();
        let gw = outer.record(|| {
            outer.watch(&x);
            let y = inner.record(|| {
                inner.watch(&[&x, &w]);
                let ys = if checkpoint {
                    block.call(&[x.clone(), w.clone()])?
                } else {
                    chain(&[x.clone(), w.clone()], &seen)?
                };
                ys[0].sum_all()
            })?;
            inner.gradient(&y, &w)?.expect("connected").sum_all()
        })?;
        Ok(val(&outer.gradient(&gw, &x)?))
    };
    let (plain, ckpt) = (run(false)?, run(true)?);
    assert!(plain.iter().all(|v| v.is_finite() && *v != 0.0));
    for (a, b) in plain.iter().zip(&ckpt) {
        assert!((a - b).abs() <= 1e-12, "{a} vs {b}");
    }
    Ok(())
}

#[test]
fn variables_read_by_the_function_get_gradients() -> Result<()> {
    // f(x) = x w² + b at x = 3, w = 2: df/dx = w² = 4, df/dw = 2 x w = 12,
    // df/db = 1
    let w = Variable::new(s(2.0));
    let b = Variable::new(s(1.0));
    let (w2, b2) = (w.clone(), b.clone());
    let block = recompute_grad(move |xs: &[Tensor]| Ok(vec![xs[0].mul(&w2.read().square()?)?.add(&b2.read())?]));
    let x = s(3.0);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        Ok(block.call(std::slice::from_ref(&x))?.remove(0))
    })?;
    assert_eq!(y.to_scalar::<f64>()?, 13.0);
    // the tape watched the variables read inside
    assert_eq!(tape.watched_variables().len(), 2);
    let (dx, dw, db) = tape.gradient(&y, &(SourceRef::from(&x), SourceRef::from(&w), SourceRef::from(&b)))?;
    assert_eq!((val(&dx), val(&dw), val(&db)), (vec![4.0], vec![12.0], vec![1.0]));
    Ok(())
}

#[test]
fn errors_in_the_function_are_returned() {
    let block = recompute_grad(|xs: &[Tensor]| Ok(vec![xs[0].add(&xs[1])?]));
    let tape = GradientTape::new();
    let (a, b) = (Tensor::vector(&[1.0f64, 2.0]), Tensor::vector(&[1.0f64, 2.0, 3.0]));
    let r = tape.record(|| {
        tape.watch(&a);
        block.call(&[a.clone(), b.clone()])
    });
    assert!(matches!(r, Err(gradtape::Error::ShapeMismatch { .. })), "{r:?}");
}

/// A closure that computes something else when re-run for the gradient is
/// reported as such (the message names `recompute_grad` and both sets of
/// outputs), not as a mismatch of `output_gradients` deep in backprop.
#[test]
fn a_closure_that_changes_on_recompute_is_reported_as_such() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for extra_output in [false, true] {
        let calls = AtomicUsize::new(0);
        let block = recompute_grad(move |xs: &[Tensor]| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            let y = xs[0].sin()?;
            match (first, extra_output) {
                (true, _) => Ok(vec![y]),
                // a second output on recompute
                (false, true) => Ok(vec![y.clone(), y]),
                // another shape on recompute
                (false, false) => Ok(vec![y.reshape(&[2, 1])?]),
            }
        });
        let x = Tensor::vector(&[1.0f64, 2.0]);
        let tape = GradientTape::new();
        let y = tape
            .record(|| {
                tape.watch(&x);
                Ok(block.call(std::slice::from_ref(&x))?.remove(0))
            })
            .unwrap();
        let e = tape.gradient(&y, &x).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                gradtape::Error::InvalidArgument {
                    op: "recompute_grad",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(msg.contains("same function") && msg.contains("[2] f64"), "{msg}");
        let want = if extra_output {
            "[[2] f64, [2] f64]"
        } else {
            "[[2, 1] f64]"
        };
        assert!(msg.contains(want), "{msg}");
    }
}
