//! f16 and bf16 for the window ops that came with or after the half types
//! (issue 15 follow-up): conv3d and its backprops, the 3-D and 1-D pools,
//! separable_conv2d, the channels-first forms, the resizes and their
//! gradients, ctc_loss and n-ary einsum. Each computes in `f32` and rounds
//! its result to the half type once (maxima and nearest-neighbour copies,
//! being exact, stay in the half type).
//!
//! Reference values are TensorFlow 2.21's (the peers' venv): the script
//! `tests/reference/half_nn_tf.py` writes `tests/data/half_nn_tf.txt`, the
//! bit patterns of each result. The inputs are exact in both half types
//! (multiples of 1/64, see [`inp`]), so the references need no rounding of
//! inputs. Where TensorFlow's CPU kernel for a half type accumulates in that
//! type (conv3d, depthwise_conv2d: up to 80 bf16 ulps off here), or does not
//! exist (f16 3-D pools), or returns `float32` (bilinear resize), the
//! reference is TensorFlow's `float32` op on the same inputs rounded by
//! `tf.cast`, and the script says so beside the case.

use crate::half_util::{bits, check_half_gradient, lin, ulps};
use gradtape::{DType, DataFormat, GradientTape, Padding, ResizeMethod, Result, Tensor};

const REFS: &str = include_str!("../data/half_nn_tf.txt");
const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// Element `i` of an input of `shape` is `((37 i + 11 + seed) mod 101 -
/// 50) / 64`: exact in f16 and bf16 (7 significant bits), as the script's.
fn inp(shape: &[usize], seed: usize, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| (((i * 37 + 11 + seed) % 101) as f64 - 50.0) / 64.0)
        .collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// The shape and bits of TensorFlow's result `name` in `dtype`.
fn tf(name: &str, dtype: DType) -> (Vec<usize>, Vec<u16>) {
    let key = format!("{name} {dtype}:");
    let line = REFS
        .lines()
        .find(|l| l.starts_with(&key))
        .unwrap_or_else(|| panic!("no reference {key}"));
    let mut parts = line[key.len()..].split(':');
    let mut nums = || -> Vec<u64> {
        let p = parts.next().unwrap();
        p.split_whitespace().map(|v| v.parse().unwrap()).collect()
    };
    let shape = nums().into_iter().map(|v| v as usize).collect();
    let bits = nums().into_iter().map(|v| v as u16).collect();
    (shape, bits)
}

/// `got` has TensorFlow's dtype, shape and values for `name`, each within
/// `max_ulps` units in the last place (0: bit for bit).
fn assert_tf(got: &Tensor, name: &str, dtype: DType, max_ulps: u32) {
    let (shape, want) = tf(name, dtype);
    assert_eq!(got.dtype(), dtype, "{name}");
    assert_eq!(got.shape(), &shape[..], "{name} {dtype}");
    let got = bits(got);
    let bad: Vec<(usize, u16, u16)> = got
        .iter()
        .zip(&want)
        .enumerate()
        .filter(|(_, (g, w))| ulps(**g, **w) > max_ulps)
        .map(|(i, (g, w))| (i, *g, *w))
        .collect();
    assert!(
        bad.is_empty(),
        "{name} {dtype}: (index, got, TF) beyond {max_ulps} ulps: {bad:?}"
    );
}

const S3: [i64; 3] = [1, 1, 1];

#[test]
fn conv3d_and_its_backprops_round_an_f32_accumulation_once() -> Result<()> {
    for d in HALVES {
        let (x, f) = (inp(&[1, 3, 4, 4, 2], 0, d), inp(&[2, 2, 3, 2, 3], 5, d));
        let y = x.conv3d(&f, S3, Padding::Same, S3)?;
        assert_tf(&y, "conv3d (f32 rounded)", d, 0);
        let dy = inp(&[1, 3, 4, 4, 3], 9, d);
        let dx = Tensor::conv3d_backprop_input(&[1, 3, 4, 4, 2], &f, &dy, S3, Padding::Same, S3)?;
        assert_tf(&dx, "conv3d_backprop_input (f32 rounded)", d, 0);
        let df = Tensor::conv3d_backprop_filter(&x, &[2, 2, 3, 2, 3], &dy, S3, Padding::Same, S3)?;
        assert_tf(&df, "conv3d_backprop_filter (f32 rounded)", d, 0);
    }
    Ok(())
}

#[test]
fn pools_in_three_and_one_dimensions_match_tensorflow() -> Result<()> {
    for d in HALVES {
        let x = inp(&[1, 4, 4, 5, 2], 3, d);
        assert_tf(&x.max_pool3d([2, 2, 3], [2, 1, 2], Padding::Same)?, "max_pool3d", d, 0);
        assert_tf(&x.avg_pool3d([2, 2, 3], [2, 1, 2], Padding::Same)?, "avg_pool3d", d, 0);
        let x = inp(&[2, 9, 3], 7, d);
        assert_tf(&x.max_pool1d(3, 2, Padding::Same)?, "max_pool1d", d, 0);
        assert_tf(&x.avg_pool1d(3, 2, Padding::Same)?, "avg_pool1d", d, 0);
    }
    Ok(())
}

#[test]
fn resizes_and_their_gradients_match_tensorflow() -> Result<()> {
    for d in HALVES {
        let im = inp(&[1, 3, 4, 2], 2, d);
        // (TF gives float32 here; ours keeps the half type: TF's value rounded)
        assert_tf(
            &im.resize_images([5, 7], ResizeMethod::Bilinear)?,
            "resize bilinear",
            d,
            0,
        );
        assert_tf(
            &im.resize_images([5, 7], ResizeMethod::Nearest)?,
            "resize nearest",
            d,
            0,
        );
        let g = inp(&[1, 5, 7, 2], 4, d);
        assert_tf(
            &g.resize_bilinear_grad([3, 4], false, true)?,
            "resize_bilinear_grad",
            d,
            0,
        );
        assert_tf(
            &g.resize_nearest_neighbor_grad([3, 4], false, true)?,
            "resize_nearest_neighbor_grad",
            d,
            0,
        );
    }
    Ok(())
}

#[test]
fn separable_conv2d_and_einsum_round_each_f32_product_once() -> Result<()> {
    for d in HALVES {
        let (x, dw, pw) = (
            inp(&[1, 4, 5, 2], 6, d),
            inp(&[2, 2, 2, 2], 8, d),
            inp(&[1, 1, 4, 3], 10, d),
        );
        let y = x.separable_conv2d(&dw, &pw, [1, 1], Padding::Valid, [1, 1])?;
        assert_tf(&y, "separable_conv2d (f32 rounded)", d, 0);
        let (a, b, v) = (inp(&[3, 4], 1, d), inp(&[4, 5], 2, d), inp(&[5], 3, d));
        let e = Tensor::einsum("ij,jk,k->i", &[&a, &b, &v])?;
        assert_tf(&e, "einsum ij,jk,k->i (f32 rounded)", d, 0);
    }
    Ok(())
}

/// The CTC case of the script: two examples, four classes (blank 0).
fn ctc(logits: &Tensor) -> Result<Tensor> {
    let labels = Tensor::from_vec(vec![1i32, 2, 1, 3, 3, 0], &[2, 3])?;
    let (ll, tl) = (Tensor::vector(&[3i32, 2]), Tensor::vector(&[6i32, 5]));
    Tensor::ctc_loss(&labels, logits, &ll, &tl, true, 0)
}

#[test]
fn ctc_loss_matches_tensorflow() -> Result<()> {
    for d in HALVES {
        let logits = inp(&[6, 2, 4], 12, d).mul_scalar(2.0)?;
        assert_tf(&ctc(&logits)?, "ctc_loss", d, 0);
    }
    Ok(())
}

#[test]
fn channels_first_forms_are_the_channels_last_ops_transposed() -> Result<()> {
    let cf = DataFormat::ChannelsFirst;
    for d in HALVES {
        // NCDHW [1, 2, 3, 4, 4] and its NDHWC transpose
        let x = inp(&[1, 2, 3, 4, 4], 1, d);
        let xl = x.permute(&[0, 2, 3, 4, 1])?;
        let back = |t: Tensor| t.permute(&[0, 4, 1, 2, 3]);
        let f = inp(&[2, 2, 2, 2, 3], 4, d);
        let pairs = [
            (
                x.conv3d_with_format(&f, S3, Padding::Same, S3, cf)?,
                back(xl.conv3d(&f, S3, Padding::Same, S3)?)?,
            ),
            (
                x.avg_pool3d_with_format([2, 2, 2], [1, 2, 2], Padding::Valid, cf)?,
                back(xl.avg_pool3d([2, 2, 2], [1, 2, 2], Padding::Valid)?)?,
            ),
            (
                x.max_pool3d_with_format([2, 2, 2], [1, 2, 2], Padding::Same, cf)?,
                back(xl.max_pool3d([2, 2, 2], [1, 2, 2], Padding::Same)?)?,
            ),
        ];
        // NCW [2, 3, 8]
        let x1 = inp(&[2, 3, 8], 2, d);
        let x1l = x1.permute(&[0, 2, 1])?;
        let pairs1 = [
            (
                x1.avg_pool1d_with_format(3, 2, Padding::Same, cf)?,
                x1l.avg_pool1d(3, 2, Padding::Same)?.permute(&[0, 2, 1])?,
            ),
            (
                x1.max_pool1d_with_format(3, 2, Padding::Same, cf)?,
                x1l.max_pool1d(3, 2, Padding::Same)?.permute(&[0, 2, 1])?,
            ),
        ];
        for (k, (got, want)) in pairs.iter().chain(&pairs1).enumerate() {
            assert_eq!((got.dtype(), got.shape()), (d, want.shape()), "case {k}");
            assert_eq!(bits(got), bits(want), "case {k} ({d})");
        }
    }
    Ok(())
}

#[test]
fn half_gradients_of_window_ops_agree_with_f64_gradients() {
    let same = Padding::Same;
    for d in HALVES {
        check_half_gradient(
            d,
            |x| x[0].conv3d(&x[1], [1, 2, 1], same, S3)?.square()?.sum_all(),
            &[
                lin(72, -1.0, 1.0, &[1, 3, 3, 4, 2]),
                lin(32, -0.5, 0.5, &[2, 2, 2, 2, 2]),
            ],
        );
        check_half_gradient(
            d,
            |x| {
                Tensor::conv3d_backprop_input(&[1, 3, 3, 4, 2], &x[0], &x[1], S3, same, S3)?
                    .square()?
                    .sum_all()
            },
            &[
                lin(32, -0.5, 0.5, &[2, 2, 2, 2, 2]),
                lin(72, -1.0, 1.0, &[1, 3, 3, 4, 2]),
            ],
        );
        // distinct values: no ties for the maxima
        let vol = lin(80, -1.0, 1.2, &[1, 4, 2, 5, 2]);
        check_half_gradient(
            d,
            |x| x[0].max_pool3d([2, 2, 2], [1, 1, 2], same)?.square()?.sum_all(),
            std::slice::from_ref(&vol),
        );
        check_half_gradient(
            d,
            |x| x[0].avg_pool3d([2, 2, 3], [1, 1, 2], same)?.square()?.sum_all(),
            &[vol],
        );
        check_half_gradient(
            d,
            |x| {
                x[0].max_pool1d(3, 2, same)?
                    .square()?
                    .sum_all()?
                    .add(&x[0].avg_pool1d(2, 1, Padding::Valid)?.square()?.sum_all()?)
            },
            &[lin(30, -1.0, 1.1, &[2, 5, 3])],
        );
        check_half_gradient(
            d,
            |x| {
                x[0].resize_images([5, 7], ResizeMethod::Bilinear)?
                    .square()?
                    .sum_all()?
                    .add(&x[0].resize_images([2, 7], ResizeMethod::Nearest)?.square()?.sum_all()?)
            },
            &[lin(24, -1.0, 1.0, &[1, 3, 4, 2])],
        );
        check_half_gradient(
            d,
            |x| x[0].resize_bilinear_grad([3, 4], true, false)?.square()?.sum_all(),
            &[lin(70, -1.0, 1.0, &[1, 5, 7, 2])],
        );
        check_half_gradient(d, |x| ctc(&x[0])?.sum_all(), &[lin(48, -1.5, 1.5, &[6, 2, 4])]);
        check_half_gradient(
            d,
            |x| {
                x[0].separable_conv2d(&x[1], &x[2], [1, 1], same, [1, 1])?
                    .square()?
                    .sum_all()
            },
            &[
                lin(40, -1.0, 1.0, &[1, 4, 5, 2]),
                lin(16, -0.5, 0.7, &[2, 2, 2, 2]),
                lin(12, -0.6, 0.5, &[1, 1, 4, 3]),
            ],
        );
        check_half_gradient(
            d,
            |x| {
                x[0].conv2d_with_format(&x[1], [1, 1], same, [1, 1], DataFormat::ChannelsFirst)?
                    .square()?
                    .sum_all()
            },
            &[lin(32, -1.0, 1.0, &[1, 2, 4, 4]), lin(12, -0.5, 0.5, &[2, 1, 2, 3])],
        );
        check_half_gradient(
            d,
            |x| {
                Tensor::einsum("ij,jk,k->i", &[&x[0], &x[1], &x[2]])?
                    .square()?
                    .sum_all()
            },
            &[
                lin(12, -1.0, 1.0, &[3, 4]),
                lin(20, -0.5, 0.9, &[4, 5]),
                lin(5, 0.2, 1.0, &[5]),
            ],
        );
    }
}

/// `sum(g * x0)` for the gradient `g` of `sum(op(x)^2)` with respect to
/// `x[0]`, taken on an inner tape (so the outer one differentiates the
/// gradient: second order).
fn grad_dot(x: &[Tensor], op: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<Tensor> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x[0]);
        op(x)?.square()?.sum_all()
    })?;
    tape.gradient(&y, &x[0])?.unwrap().mul(&x[0])?.sum_all()
}

#[test]
fn half_second_derivatives_of_conv3d_and_resize() {
    for d in HALVES {
        check_half_gradient(
            d,
            |x| grad_dot(x, |x| x[0].conv3d(&x[1], S3, Padding::Valid, S3)),
            &[
                lin(36, -1.0, 1.0, &[1, 3, 3, 2, 2]),
                lin(16, -0.5, 0.6, &[2, 2, 1, 2, 2]),
            ],
        );
        check_half_gradient(
            d,
            |x| grad_dot(x, |x| x[0].resize_bilinear([5, 3], false, true)?.mul(&x[1])),
            &[lin(8, -1.0, 1.0, &[1, 2, 2, 2]), lin(30, 0.5, 1.5, &[1, 5, 3, 2])],
        );
    }
}

#[test]
fn half_errors_name_the_op_and_the_dtypes() {
    let h = inp(&[1, 2, 2, 2, 1], 0, DType::F16);
    let f32_filter = Tensor::ones(&[1, 1, 1, 1, 1], DType::F32);
    let e = h.conv3d(&f32_filter, S3, Padding::Valid, S3).unwrap_err().to_string();
    assert!(e.contains("conv3d") && e.contains("f16") && e.contains("f32"), "{e}");
    let b = Tensor::ones(&[1, 1, 1, 1, 1], DType::BF16);
    let e = h.conv3d(&b, S3, Padding::Valid, S3).unwrap_err().to_string();
    assert!(e.contains("conv3d") && e.contains("f16") && e.contains("bf16"), "{e}");
    // integers are refused, naming the op and the dtype
    let i = Tensor::zeros(&[1, 2, 2, 2, 1], DType::I32);
    let e = i.avg_pool3d([1, 1, 1], S3, Padding::Valid).unwrap_err().to_string();
    assert!(e.contains("avg_pool3d") && e.contains("i32"), "{e}");
    let e = Tensor::zeros(&[1, 2, 2, 1], DType::I64)
        .resize_bilinear_grad([1, 1], false, true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("resize_bilinear_grad") && e.contains("i64"), "{e}");
    // ctc_loss has no second derivative in any dtype (as TensorFlow)
    let x = inp(&[6, 2, 4], 12, DType::BF16);
    let outer = GradientTape::new();
    let g = outer.record(|| {
        outer.watch(&x);
        let inner = GradientTape::new();
        let y = inner.record(|| {
            inner.watch(&x);
            ctc(&x)?.sum_all()
        })?;
        inner.gradient(&y, &x)?.unwrap().sum_all()
    });
    let e = g.and_then(|g| outer.gradient(&g, &x)).unwrap_err().to_string();
    assert!(e.contains("ctc_loss") && e.contains("second"), "{e}");
}
