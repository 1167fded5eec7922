//! conv3d, the 3-D and 1-D pools, separable_conv2d and the channels-first
//! forms against TensorFlow 2.21: values, the gradients of `sum(y * w)` for
//! a random `w`, and for conv3d a second-order gradient. The fixtures in
//! `tests/data/conv_tf/` are written by `tests/reference/conv3d_tf.py`
//! (TensorFlow 2.21.0, NumPy 2.4.6), which also holds the inputs. TF runs
//! its 3-D pools in float32 only (inputs rounded to f32 there; here they
//! run in f64 on those values, hence a looser tolerance). TF's CPU kernels
//! are NHWC-only for conv2d, the pools and conv3d, so the script's
//! channels-first references are TF's NHWC ops between transposes (the
//! meaning of `data_format`); `bias_add` runs NCHW in TF itself.

use std::path::PathBuf;

use gradtape::io::read_npy;
use gradtape::{DataFormat, GradientTape, Padding, Result, Tensor};

use DataFormat::ChannelsFirst;
use Padding::{Same, Valid};

fn load(case: &str, what: &str) -> Tensor {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/conv_tf")
        .join(format!("{case}.{what}.npy"));
    read_npy(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn exists(case: &str, what: &str) -> bool {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/conv_tf")
        .join(format!("{case}.{what}.npy"))
        .exists()
}

#[track_caller]
fn close(case: &str, what: &str, got: &Tensor, want: &Tensor, rtol: f64) {
    assert_eq!(got.shape(), want.shape(), "{case} {what}: shape");
    let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    assert!(!w.is_empty(), "{case} {what}: empty reference");
    let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= rtol * scale,
            "{case} {what}[{i}]: got {a}, TensorFlow {b} (scale {scale})"
        );
    }
}

type F = fn(&[Tensor]) -> Result<Tensor>;

/// Runs `f` on the case's inputs and compares its output, the gradients
/// of `sum(y * w)` and (when the fixture has them) the gradients of
/// `sum(g0^2)`.
fn check(case: &str, n_inputs: usize, rtol: f64, f: F) {
    let xs: Vec<Tensor> = (0..n_inputs).map(|i| load(case, &format!("in{i}"))).collect();
    let w = load(case, "w");
    let second = exists(case, "h0");
    let outer = GradientTape::persistent();
    let (y, gs, hs) = outer
        .record(|| {
            for x in &xs {
                outer.watch(x);
            }
            let tape = GradientTape::new();
            let (y, s) = tape.record(|| {
                for x in &xs {
                    tape.watch(x);
                }
                let y = f(&xs)?;
                let s = y.mul(&w)?.sum_all()?;
                Ok((y, s))
            })?;
            let gs = tape.gradient(&s, &xs[..])?;
            let s2 = match &gs[0] {
                Some(g0) if second => Some(g0.square()?.sum_all()?),
                _ => None,
            };
            Ok((y, gs, s2))
        })
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    close(case, "y", &y, &load(case, "y"), rtol);
    for (i, g) in gs.iter().enumerate() {
        let g = g
            .as_ref()
            .unwrap_or_else(|| panic!("{case}: no gradient for input {i}"));
        close(case, &format!("g{i}"), g, &load(case, &format!("g{i}")), rtol);
    }
    if let Some(s2) = hs {
        let h = outer.gradient(&s2, &xs[..]).unwrap();
        for (i, h) in h.iter().enumerate() {
            let want = load(case, &format!("h{i}"));
            match h {
                Some(h) => close(case, &format!("h{i}"), h, &want, rtol),
                None => assert!(want.to_vec::<f64>().unwrap().iter().all(|&v| v == 0.0), "{case} h{i}"),
            }
        }
    }
}

const F64: f64 = 1e-12;
const F32: f64 = 2e-6;

#[test]
fn conv3d_matches_tensorflow() {
    check("conv3d_same_s1", 2, F64, |x| {
        x[0].conv3d(&x[1], [1, 1, 1], Same, [1, 1, 1])
    });
    check("conv3d_valid_s212", 2, F64, |x| {
        x[0].conv3d(&x[1], [2, 1, 2], Valid, [1, 1, 1])
    });
    check("conv3d_same_s223", 2, F64, |x| {
        x[0].conv3d(&x[1], [2, 2, 3], Same, [1, 1, 1])
    });
    check("conv3d_same_d212", 2, F64, |x| {
        x[0].conv3d(&x[1], [1, 1, 1], Same, [2, 1, 2])
    });
    check("conv3d_valid_d122", 2, F64, |x| {
        x[0].conv3d(&x[1], [1, 1, 1], Valid, [1, 2, 2])
    });
    check("conv3d_ncdhw", 2, F64, |x| {
        x[0].conv3d_with_format(&x[1], [1, 2, 1], Same, [1, 1, 1], ChannelsFirst)
    });
}

#[test]
fn pools_3d_match_tensorflow() {
    check("max_pool3d_same", 1, F32, |x| {
        x[0].max_pool3d([2, 3, 2], [2, 2, 2], Same)
    });
    check("max_pool3d_valid", 1, F32, |x| {
        x[0].max_pool3d([3, 2, 2], [1, 2, 1], Valid)
    });
    check("avg_pool3d_same", 1, F32, |x| {
        x[0].avg_pool3d([2, 3, 2], [2, 2, 2], Same)
    });
    check("avg_pool3d_valid", 1, F32, |x| {
        x[0].avg_pool3d([3, 2, 2], [1, 2, 1], Valid)
    });
    check("max_pool3d_ncdhw", 1, F32, |x| {
        x[0].max_pool3d_with_format([2, 2, 2], [1, 2, 2], Same, ChannelsFirst)
    });
}

#[test]
fn pools_1d_match_tensorflow() {
    check("max_pool1d_same", 1, F64, |x| x[0].max_pool1d(3, 2, Same));
    check("avg_pool1d_same", 1, F64, |x| x[0].avg_pool1d(3, 2, Same));
    check("avg_pool1d_valid", 1, F64, |x| x[0].avg_pool1d(2, 1, Valid));
}

#[test]
fn separable_conv2d_matches_tensorflow() {
    check("separable_same_s2", 3, F64, |x| {
        x[0].separable_conv2d(&x[1], &x[2], [2, 2], Same, [1, 1])
    });
    check("separable_valid_d2", 3, F64, |x| {
        x[0].separable_conv2d(&x[1], &x[2], [1, 1], Valid, [2, 2])
    });
}

#[test]
fn channels_first_2d_ops_match_tensorflow() {
    check("bias_add_nchw", 2, F64, |x| {
        x[0].bias_add_with_format(&x[1], ChannelsFirst)
    });
    check("conv2d_nchw", 2, F64, |x| {
        x[0].conv2d_with_format(&x[1], [2, 1], Same, [1, 1], ChannelsFirst)
    });
    check("max_pool2d_nchw", 1, F64, |x| {
        x[0].max_pool2d_with_format([2, 3], [2, 1], Same, ChannelsFirst)
    });
    check("avg_pool2d_nchw", 1, F64, |x| {
        x[0].avg_pool2d_with_format([2, 3], [2, 1], Valid, ChannelsFirst)
    });
}

#[test]
fn channels_first_1d_and_separable_match_tensorflow() {
    check("conv1d_ncw", 2, F64, |x| {
        x[0].conv1d_with_format(&x[1], 2, Same, 1, ChannelsFirst)
    });
    check("max_pool1d_ncw", 1, F64, |x| {
        x[0].max_pool1d_with_format(2, 1, Valid, ChannelsFirst)
    });
    check("avg_pool1d_ncw", 1, F64, |x| {
        x[0].avg_pool1d_with_format(3, 2, Same, ChannelsFirst)
    });
    check("separable_nchw", 3, F64, |x| {
        x[0].separable_conv2d_with_format(&x[1], &x[2], [1, 1], Same, [1, 1], ChannelsFirst)
    });
}

/// The f32 kernels agree with the f64 ones (the same code, another dtype).
#[test]
fn f32_conv3d_agrees_with_f64() -> Result<()> {
    let x = load("conv3d_same_s223", "in0");
    let f = load("conv3d_same_s223", "in1");
    let y64 = x.conv3d(&f, [2, 2, 3], Same, [1, 1, 1])?;
    let y32 = x
        .cast(gradtape::DType::F32)?
        .conv3d(&f.cast(gradtape::DType::F32)?, [2, 2, 3], Same, [1, 1, 1])?
        .cast(gradtape::DType::F64)?;
    close("conv3d f32", "y", &y32, &y64, 1e-5);
    Ok(())
}
