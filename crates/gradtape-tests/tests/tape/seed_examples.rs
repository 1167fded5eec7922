//! The documented examples of `tf.GradientTape` (the seed page and the class
//! docstring), with their literal numbers.

use gradtape::{GradientTape, Result, Tensor, Variable};

fn f32_of(t: Option<Tensor>) -> f32 {
    t.expect("a gradient").to_scalar::<f32>().unwrap()
}

#[test]
fn square_at_three_is_six() -> Result<()> {
    let x = Tensor::scalar(3.0f32);
    let g = GradientTape::new();
    let y = g.record(|| {
        g.watch(&x);
        x.mul(&x)
    })?;
    let dy_dx = g.gradient(&y, &x)?;
    assert_eq!(f32_of(dy_dx), 6.0);
    Ok(())
}

fn nested(x0: f32) -> Result<(f32, f32)> {
    let x = Tensor::scalar(x0);
    let g = GradientTape::new();
    let dy_dx = g.record(|| {
        g.watch(&x);
        let gg = GradientTape::new();
        let y = gg.record(|| {
            gg.watch(&x);
            x.mul(&x)
        })?;
        Ok(gg.gradient(&y, &x)?.unwrap())
    })?;
    let d2y_dx2 = g.gradient(&dy_dx, &x)?;
    Ok((dy_dx.to_scalar::<f32>()?, f32_of(d2y_dx2)))
}

#[test]
fn nested_tapes_give_second_derivative() -> Result<()> {
    assert_eq!(nested(3.0)?, (6.0, 2.0)); // the API page
    assert_eq!(nested(5.0)?, (10.0, 2.0)); // the class docstring
    Ok(())
}

#[test]
fn persistent_tape_gives_several_gradients() -> Result<()> {
    let x = Tensor::scalar(3.0f32);
    let g = GradientTape::persistent();
    let (y, z) = g.record(|| {
        g.watch(&x);
        let y = x.mul(&x)?;
        let z = y.mul(&y)?;
        Ok((y, z))
    })?;
    assert_eq!(f32_of(g.gradient(&z, &x)?), 108.0);
    assert_eq!(f32_of(g.gradient(&y, &x)?), 6.0);
    drop(g);
    Ok(())
}

#[test]
fn selective_watching_of_variables() -> Result<()> {
    let x = Variable::new(Tensor::scalar(2.0f32));
    let w = Variable::new(Tensor::scalar(5.0f32));
    let tape = GradientTape::persistent().watch_accessed_variables(false);
    let (y, z) = tape.record(|| {
        tape.watch(&x);
        let y = x.read().pow_scalar(2.0)?;
        let z = w.read().pow_scalar(3.0)?;
        Ok((y, z))
    })?;
    assert_eq!(f32_of(tape.gradient(&y, &x)?), 4.0);
    assert!(tape.gradient(&z, &w)?.is_none());
    assert_eq!(tape.watched_variables().len(), 1);
    assert_eq!(tape.watched_variables()[0].handle(), x.handle());
    Ok(())
}

#[test]
fn watching_an_empty_list_gives_no_gradients() -> Result<()> {
    // The page's warning: watching a layer's variables before they exist.
    let not_yet_built: Vec<Variable> = Vec::new();
    let tape = GradientTape::new().watch_accessed_variables(false);
    let (result, vars) = tape.record(|| {
        tape.watch(&not_yet_built);
        let a = Variable::new(Tensor::vector(&[1.0f32, 2.0]));
        let b = Variable::new(Tensor::vector(&[3.0f32, 4.0]));
        Ok((a.read().mul(&b.read())?.sum_all()?, vec![a, b]))
    })?;
    let grads = tape.gradient(&result, &vars)?;
    assert_eq!(grads.len(), 2);
    assert!(grads.iter().all(|g| g.is_none()));
    Ok(())
}

#[test]
fn stop_recording_hides_ops() -> Result<()> {
    let x = Tensor::scalar(4.0f32);
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x); // watched, so only stop_recording explains the None
        tape.stop_recording(|| x.pow_scalar(2.0))
    })?;
    assert!(tape.gradient(&y, &x)?.is_none());

    // the page's other use: a persistent tape's gradient computed unrecorded
    let t = GradientTape::persistent();
    let x = Tensor::scalar(4.0f32);
    let before = t.record(|| {
        t.watch(&x);
        let loss = x.pow_scalar(2.0)?;
        let grads = t.stop_recording(|| t.gradient(&loss, &x))?;
        assert_eq!(f32_of(grads), 8.0);
        Ok(loss)
    })?;
    // nothing from the backward pass was recorded, so the gradient is unchanged
    assert_eq!(f32_of(t.gradient(&before, &x)?), 8.0);
    Ok(())
}

fn loss_fn(x: &Tensor) -> Result<Tensor> {
    x.mul_scalar(3.0)
}

fn other_loss_fn(x: &Tensor) -> Result<Tensor> {
    x.square()
}

#[test]
fn reset_is_exit_and_reenter() -> Result<()> {
    let x = Tensor::scalar(2.0f64);

    // two tapes: only the second records other_loss_fn
    let t = GradientTape::new();
    let loss = t.record(|| {
        t.watch(&x);
        loss_fn(&x)
    })?;
    let t = GradientTape::new();
    let loss = t.record(|| {
        t.watch(&x);
        loss.add(&other_loss_fn(&x)?)
    })?;
    let separate = t.gradient(&loss, &x)?.unwrap().to_scalar::<f64>()?;

    // one tape, reset in the middle
    let t = GradientTape::new();
    let loss = t.record(|| {
        t.watch(&x);
        let loss = loss_fn(&x)?;
        t.reset();
        t.watch(&x);
        loss.add(&other_loss_fn(&x)?)
    })?;
    let with_reset = t.gradient(&loss, &x)?.unwrap().to_scalar::<f64>()?;

    assert_eq!(separate, 4.0); // d(x²)/dx at 2, not 3 + 4
    assert_eq!(with_reset, separate);
    Ok(())
}

#[test]
fn reset_inside_control_flow() -> Result<()> {
    let x = Tensor::scalar(3.0f32);
    let t = GradientTape::new();
    let loss = t.record(|| {
        t.watch(&x);
        let loss = x.mul_scalar(10.0)?;
        if loss.to_scalar::<f32>()? > 5.0 {
            t.reset();
        }
        Ok(loss)
    })?;
    assert!(t.gradient(&loss, &x)?.is_none());
    Ok(())
}
