//! The gradient of a split on a tape is one concatenation of the parts'
//! cotangents: a sequence unstacked over its `T` steps allocates one
//! buffer of its size for its gradient, not a padded cotangent per step
//! and a sum per step (`2T` buffers of the sequence's size, `O(T²)` work).

use gradtape::{GradientTape, Result, Tensor};

use crate::counting::{buffers_of, serial};

#[test]
fn an_unstacked_sequences_gradient_is_one_buffer_of_its_size() -> Result<()> {
    let _serial = serial();
    // [4, 16, 25] f32: 6400 bytes (below the buffer cache's sizes, so each
    // new buffer is one `malloc`; not a power of two, so no scratch vector)
    let (b, t, f) = (4, 16, 25);
    let v: Vec<f32> = (0..b * t * f).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect();
    let x = Tensor::from_vec(v, &[b, t, f])?;
    let bytes = b * t * f * 4;
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&x);
        let mut total = Tensor::scalar(0.0f32);
        for (k, step) in x.unstack(1)?.iter().enumerate() {
            total = total.add(&step.mul_scalar(k as f64 + 1.0)?.sum_all()?)?;
        }
        Ok(total)
    })?;
    tape.gradient(&y, &x)?; // (warm)
    let (n, g) = buffers_of(bytes, || tape.gradient(&y, &x));
    assert!(n <= 2, "{n} buffers of the sequence's size for its gradient");
    // d/dx = k + 1 at step k
    let g = g?.unwrap().to_vec::<f32>()?;
    for (i, v) in g.iter().enumerate() {
        assert_eq!(*v, ((i / f) % t + 1) as f32, "element {i}");
    }
    Ok(())
}
