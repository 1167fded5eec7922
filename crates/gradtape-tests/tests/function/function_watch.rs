//! What a differentiated call (and a traced `cond` or `while_loop`) gives
//! a variable it reads: the trainable ones get gradients as an eager read
//! would, and so does a non-trainable variable that a tape or a forward
//! accumulator watches explicitly (`tape.watch(&v)`), as in TensorFlow
//! 2.21; and so does a tensor the function captured (a constant of its
//! graph) that a tape or accumulator watches. The call once gave such a
//! variable `None` (a call) or zeros (a `cond` or `while_loop`), and such a
//! tensor `None`, where the eager closure gave its gradient.

use gradtape::{cond, function, while_loop, ForwardAccumulator, GradientTape, Result, Tensor, Variable, WhileOptions};

/// A non-trainable variable `[3, 4]`.
fn frozen() -> Variable {
    Variable::builder(Tensor::vector(&[3.0f64, 4.0]))
        .trainable(false)
        .build()
}

#[test]
fn a_watched_non_trainable_variable_gets_its_gradient_through_a_call() -> Result<()> {
    let v = Variable::new(Tensor::vector(&[1.0f64, 2.0]));
    let nt = frozen();
    let (vc, ntc) = (v.clone(), nt.clone());
    let f = function(move |x: &Tensor| vc.read().mul(x)?.add(&ntc.read().mul(x)?)?.sum_all());
    let x = Tensor::vector(&[5.0f64, 6.0]);
    // TF 2.21: tape.watch(nt); y = f(x) (a tf.function): d/dnt = x = [5, 6]
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&nt);
        f.call(&x)
    })?;
    let g = tape.gradient(&y, &nt)?.expect("nt is watched");
    assert_eq!(g.to_vec::<f64>()?, vec![5.0, 6.0]);
    assert_eq!(
        tape.gradient(&y, &v)?.expect("v is trainable").to_vec::<f64>()?,
        vec![5.0, 6.0]
    );
    // and with watch_accessed_variables=False (TF: [5, 6] for nt, None
    // for v, which the call reads unwatched)
    let tape = GradientTape::persistent().watch_accessed_variables(false);
    let y = tape.record(|| {
        tape.watch(&nt);
        f.call(&x)
    })?;
    assert_eq!(
        tape.gradient(&y, &nt)?.expect("watched").to_vec::<f64>()?,
        vec![5.0, 6.0]
    );
    assert!(tape.gradient(&y, &v)?.is_none());
    // unwatched, the non-trainable variable still gets none (TF: None)
    let tape = GradientTape::new();
    let y = tape.record(|| f.call(&x))?;
    assert!(tape.gradient(&y, &nt)?.is_none());
    // forward mode: the tangent of a watched non-trainable variable
    let acc = ForwardAccumulator::new();
    acc.watch(&nt, &Tensor::vector(&[1.0f64, 0.5]))?;
    let y = acc.record(|| f.call(&x))?;
    assert_eq!(acc.jvp(&y)?.expect("watched").to_vec::<f64>()?, vec![8.0]);
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

/// `sum(cond(Σx > 0, nt·x, -nt) + x·nt²)` (the second term a `while_loop`
/// of two steps).
fn with_control_flow(nt: &Variable, x: &Tensor) -> Result<Tensor> {
    let c = cond(&x.sum_all()?.gt_scalar(0.0)?, || nt.read().mul(x), || nt.read().neg())?;
    let (w, _) = while_loop(
        |(_, i): &(Tensor, Tensor)| i.lt_scalar(2.0),
        |(w, i): &(Tensor, Tensor)| Ok((w.mul(&nt.read())?, i.add_scalar(1.0)?)),
        (x.clone(), Tensor::scalar(0.0f64)),
        WhileOptions::default(),
    )?;
    c.add(&w)?.sum_all()
}

#[test]
fn a_watched_non_trainable_variable_gets_its_gradient_through_cond_and_while_loop() -> Result<()> {
    // TF 2.21, with this function as a tf.function: d/dnt = x + 2 x nt =
    // [35, 54], from a tape around the call and from a tape inside it
    let want = vec![35.0, 54.0];
    let nt = frozen();
    let x = Tensor::vector(&[5.0f64, 6.0]);
    let f = {
        let nt = nt.clone();
        function(move |x: &Tensor| with_control_flow(&nt, x))
    };
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&nt);
        f.call(&x)
    })?;
    assert_eq!(tape.gradient(&y, &nt)?.expect("watched").to_vec::<f64>()?, want);
    let acc = ForwardAccumulator::new();
    acc.watch(&nt, &Tensor::vector(&[1.0f64, 0.0]))?;
    let y = acc.record(|| f.call(&x))?;
    assert_eq!(acc.jvp(&y)?.expect("watched").to_vec::<f64>()?, vec![35.0]);
    // a tape inside the trace (its backward pass traced too)
    let inner = {
        let nt = nt.clone();
        function(move |x: &Tensor| {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&nt);
                with_control_flow(&nt, x)
            })?;
            Ok(tape.gradient(&y, &nt)?.expect("watched"))
        })
    };
    assert_eq!(inner.call(&x)?.to_vec::<f64>()?, want);
    // the same, eagerly
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&nt);
        with_control_flow(&nt, &x)
    })?;
    assert_eq!(tape.gradient(&y, &nt)?.expect("watched").to_vec::<f64>()?, want);
    Ok(())
}

#[test]
fn a_watched_tensor_the_function_captured_gets_its_gradient_through_a_call() -> Result<()> {
    // TF 2.21: c = tf.constant(3.0); f = tf.function(lambda x: x * c);
    // tape.watch(c); y = f(2.0); tape.gradient(y, c) = 2 (the call gave None:
    // c is a constant of the graph)
    let c = Tensor::scalar(3.0f32);
    let f = {
        let c = c.clone();
        function(move |x: &Tensor| x.mul(&c))
    };
    let x = Tensor::scalar(2.0f32);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&c);
        f.call(&x)
    })?;
    assert_eq!(tape.gradient(&y, &c)?.expect("watched").to_vec::<f32>()?, vec![2.0]);
    // a captured value made by a recorded op passes the gradient on (TF:
    // c = w * 2 under the tape, y = f(2) with f capturing c: dy/dw = 4)
    let w = Tensor::scalar(1.5f32);
    let tape = GradientTape::new();
    let (made, y) = tape.record(|| {
        tape.watch(&w);
        let c = w.mul_scalar(2.0)?;
        let cc = c.clone();
        let g = function(move |x: &Tensor| x.mul(&cc));
        let y = g.call(&x)?;
        Ok((c, y))
    })?;
    assert_eq!(made.to_vec::<f32>()?, vec![3.0]);
    assert_eq!(tape.gradient(&y, &w)?.expect("watched").to_vec::<f32>()?, vec![4.0]);
    // forward mode
    let acc = ForwardAccumulator::new();
    let c3 = Tensor::scalar(3.0f32);
    acc.watch(&c3, &Tensor::scalar(1.0f32))?;
    let cc = c3.clone();
    let h = function(move |x: &Tensor| x.mul(&cc)?.square());
    let y = acc.record(|| h.call(&x))?;
    // d/dc (x c)^2 = 2 x^2 c = 24
    assert_eq!(acc.jvp(&y)?.expect("watched").to_vec::<f32>()?, vec![24.0]);
    // unwatched, it gets none
    let tape = GradientTape::new();
    let y = tape.record(|| f.call(&x))?;
    assert!(tape.gradient(&y, &c)?.is_none());
    Ok(())
}
