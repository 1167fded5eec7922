//! The gradient of a split on a tape is one concatenation of the parts'
//! cotangents: a sequence unstacked over its `T` steps allocates one
//! buffer of its size for its gradient, not a padded cotangent per step
//! and a sum per step (`2T` buffers of the sequence's size, `O(T²)` work).
//! And a weight read at every step of a loop adds its gradients in place.

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

/// A weight read at every step of a loop accumulates its gradients over
/// the buffer of the first (each step's product is the weight's gradient
/// alone, held by nothing else): one buffer of the weight's size per step
/// (the products), not two (a product and a new sum); the values are
/// those of the sums made as new tensors, bit for bit.
#[test]
fn a_weights_gradients_over_a_loop_add_in_place() -> Result<()> {
    let _serial = serial();
    // W [24, 25] f32: 2400 bytes, 12 steps
    let (n, m, steps) = (24, 25, 12);
    let w = Tensor::from_vec((0..n * m).map(|i| ((i % 11) as f32 - 5.0) * 0.01).collect(), &[n, m])?;
    let xs: Vec<Tensor> = (0..steps)
        .map(|k| Tensor::from_vec((0..3 * n).map(|i| ((i + k) % 5) as f32 * 0.5).collect(), &[3, n]))
        .collect::<Result<_>>()?;
    let tape = GradientTape::persistent();
    let y = tape.record(|| {
        tape.watch(&w);
        let mut total = Tensor::scalar(0.0f32);
        for (k, x) in xs.iter().enumerate() {
            total = total.add(&x.matmul(&w)?.mul_scalar(k as f64 + 1.0)?.sum_all()?)?;
        }
        Ok(total)
    })?;
    tape.gradient(&y, &w)?; // (warm)
    let (count, g) = buffers_of(n * m * 4, || tape.gradient(&y, &w));
    assert!(
        count <= steps + 1,
        "{count} buffers of the weight's size for {steps} steps"
    );
    // the same sums as new tensors: dW = Σ (k + 1) xₖᵀ 1, in the tape's
    // order (the last step's first)
    let mut want: Option<Tensor> = None;
    for (k, x) in xs.iter().enumerate().rev() {
        let ones = Tensor::ones(&[3, m], gradtape::DType::F32).mul_scalar(k as f64 + 1.0)?;
        let term = x.transpose()?.matmul(&ones)?;
        want = Some(match want {
            Some(acc) => acc.add(&term)?,
            None => term,
        });
    }
    let got = g?.unwrap().to_vec::<f32>()?;
    let want = want.unwrap().to_vec::<f32>()?;
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    Ok(())
}
