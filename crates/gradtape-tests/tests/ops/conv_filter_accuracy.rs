//! The f32 filter gradient of a convolution over many pixels keeps f32's
//! accuracy: its sum over every output pixel adds blocks of pixels, as a
//! product adds slices of its shared dimension. (The direct stride-1
//! kernel once summed all pixels in one running sum per filter element:
//! a traced step, which runs that kernel where the eager step ran
//! im2col's product, was 3.4e-4 off a filter gradient's f64 value where
//! eager was 7e-7 off: random programs, seed 63's program 574.)

use gradtape::{DType, Padding, Result, Tensor};

/// `[n, h, w, c]` of positive values (the sums only grow: a running sum's
/// rounding accumulates with nothing cancelling it).
fn positive(shape: &[usize], seed: usize) -> Tensor {
    let len: usize = shape.iter().product();
    let v: Vec<f64> = (0..len)
        .map(|i| 0.5 + ((i * 7919 + seed * 104729) % 1000) as f64 / 1000.0)
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

#[test]
fn filter_gradients_over_many_pixels_keep_f32_accuracy() -> Result<()> {
    // stride 1, few channels: the direct kernel's case; 64 x 32 x 32 =
    // 65,536 output pixels; several filter shapes, dilations and paddings
    for (k, dil, padding, c, o) in [
        (2usize, 2i64, Padding::Same, 1usize, 2usize),
        (3, 1, Padding::Same, 3, 16),
        (3, 1, Padding::Valid, 2, 8),
    ] {
        let x = positive(&[64, 32, 32, c], 1);
        let oh = match padding {
            Padding::Same => 32,
            _ => 32 - (k - 1) * dil as usize,
        };
        let dy = positive(&[64, oh, oh, o], 2);
        let fs = [k, k, c, o];
        let want = Tensor::conv2d_backprop_filter(&x, &fs, &dy, [1, 1], padding, [dil, dil])?;
        let got = Tensor::conv2d_backprop_filter(
            &x.cast(DType::F32)?,
            &fs,
            &dy.cast(DType::F32)?,
            [1, 1],
            padding,
            [dil, dil],
        )?;
        for (i, (g, w)) in got.to_vec_f64().iter().zip(want.to_vec_f64()).enumerate() {
            let rel = (g - w).abs() / w.abs();
            assert!(
                rel < 4e-6,
                "k {k}, dilation {dil}, {c} -> {o}: element {i}: {g} vs {w} (f64): {rel:e}"
            );
        }
    }
    Ok(())
}
