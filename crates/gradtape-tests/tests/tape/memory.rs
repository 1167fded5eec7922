//! What a tape keeps alive, checked with weak handles and reference counts.

use gradtape::{GradientTape, Result, Tensor};

#[test]
fn one_shot_tape_frees_intermediates_during_gradient() -> Result<()> {
    let x = Tensor::vector(&[0.5f32, 1.5]);
    let tape = GradientTape::new();
    let (y, weak) = tape.record(|| {
        tape.watch(&x);
        let e = x.exp()?; // exp's rule saves its output e
        let s = e.sin()?; // sin's rule saves its input e
        let weak = e.downgrade();
        Ok((s.sum_all()?, weak))
    })?;
    // before backward, the tape (through the rules) keeps `e` alive
    assert!(weak.is_alive());
    tape.gradient(&y, &x)?.expect("a gradient");
    assert!(!weak.is_alive(), "the one-shot tape freed what its rules saved");
    Ok(())
}

#[test]
fn unreached_records_are_freed_too() -> Result<()> {
    let x = Tensor::scalar(2.0f64);
    let tape = GradientTape::new();
    let (y, weak) = tape.record(|| {
        tape.watch(&x);
        let side = x.exp()?; // recorded, but not on the path to y
        let w = side.downgrade();
        drop(side.sin()?);
        Ok((x.square()?, w))
    })?;
    assert!(weak.is_alive());
    tape.gradient(&y, &x)?;
    assert!(!weak.is_alive());
    Ok(())
}

#[test]
fn persistent_tape_keeps_intermediates_until_dropped() -> Result<()> {
    let x = Tensor::vector(&[0.5f32, 1.5]);
    let tape = GradientTape::persistent();
    let (y, weak) = tape.record(|| {
        tape.watch(&x);
        let e = x.exp()?;
        let w = e.downgrade();
        Ok((e.sin()?.sum_all()?, w))
    })?;
    tape.gradient(&y, &x)?;
    tape.gradient(&y, &x)?;
    assert!(weak.is_alive(), "a persistent tape keeps its records");
    drop(tape);
    assert!(!weak.is_alive(), "dropping the tape frees them");
    Ok(())
}

#[test]
fn unwatched_ops_keep_nothing() -> Result<()> {
    let c = Tensor::vector(&[1.0f32, 2.0]);
    let tape = GradientTape::persistent();
    let weak = tape.record(|| {
        let e = c.exp()?; // c is not watched: nothing is recorded
        let w = e.downgrade();
        drop(e.sin()?);
        Ok(w)
    })?;
    assert!(!weak.is_alive());
    assert_eq!(c.ref_count(), 1);
    Ok(())
}

#[test]
fn rules_keep_only_what_they_need() -> Result<()> {
    let x = Tensor::vector(&[0.5f32, 1.5]);
    let tape = GradientTape::persistent();
    let (y, w_sin_out, w_add_in) = tape.record(|| {
        tape.watch(&x);
        let s = x.sin()?; // sin's rule needs its input x, not its output s
        let w_sin_out = s.downgrade();
        let a = s.add_scalar(1.0)?; // add's rule needs neither input nor output
        let w_add_in = a.downgrade();
        let y = a.mul_scalar(2.0)?;
        Ok((y, w_sin_out, w_add_in))
    })?;
    assert!(!w_sin_out.is_alive(), "sin does not keep its output");
    assert!(!w_add_in.is_alive(), "add_scalar and mul_scalar keep no tensors");
    // and the gradient is still right
    let g = tape.gradient(&y, &x)?.unwrap().to_vec::<f32>()?;
    assert!((g[0] - 2.0 * 0.5f32.cos()).abs() < 1e-6);
    Ok(())
}

#[test]
fn no_tape_means_no_extra_references() -> Result<()> {
    let x = Tensor::vector(&[1.0f32, 2.0]);
    let y = x.mul(&x)?;
    assert_eq!(x.ref_count(), 1);
    assert_eq!(y.ref_count(), 1);
    Ok(())
}
