//! Long tapes across record chunks, with pooled storage reused (formerly
//! the unit tests of `src/autodiff/backprop.rs`).

use gradtape::{GradientTape, Result, Tensor};

/// `y = x * a + b` repeated `n` times: `dy/dx = a^n`.
fn chain(tape: &GradientTape, x: &Tensor, n: usize) -> Result<Tensor> {
    tape.record(|| {
        tape.watch(x);
        let mut y = x.clone();
        for _ in 0..n {
            y = y.mul_scalar(1.001)?.add_scalar(0.5)?;
        }
        Ok(y)
    })
}

#[test]
fn long_tapes_span_record_chunks_and_pooled_storage_is_reused() -> Result<()> {
    // several tapes in a row: later ones record into recycled chunks and maps
    for n in [700, 300, 1000] {
        let x = Tensor::scalar(0.25f64);
        let tape = GradientTape::new();
        let y = chain(&tape, &x, n)?;
        let d = tape.gradient(&y, &x)?.expect("connected").to_scalar::<f64>()?;
        let want = 1.001f64.powi(n as i32);
        assert!((d - want).abs() < 1e-9 * want, "n = {n}: {d} vs {want}");
    }
    Ok(())
}

#[test]
fn persistent_long_tape_gives_the_same_gradient_twice() -> Result<()> {
    let x = Tensor::scalar(0.25f64);
    let tape = GradientTape::persistent();
    let y = chain(&tape, &x, 600)?;
    let mid = tape.gradient(&y, &x)?.expect("connected").to_scalar::<f64>()?;
    let again = tape.gradient(&y, &x)?.expect("connected").to_scalar::<f64>()?;
    assert_eq!(mid, again);
    assert!((mid - 1.001f64.powi(600)).abs() < 1e-9 * mid);
    Ok(())
}
