//! Bad input to the convolution and pooling ops gives an `Err` naming the op
//! and the shapes or dtypes, never a panic.

use gradtape::{DType, Error, Padding, Result, Tensor};

use Padding::{Same, Valid};

#[track_caller]
fn err<T: std::fmt::Debug>(r: Result<T>, needles: &[&str]) -> Error {
    let e = r.expect_err("expected an error");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} does not contain {n:?}");
    }
    e
}

fn t(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32)
}

#[test]
fn wrong_ranks() {
    let e = err(
        t(&[2, 5, 5]).conv2d(&t(&[3, 3, 5, 4]), [1, 1], Same, [1, 1]),
        &["conv2d", "[2, 5, 5]", "rank 4"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }), "{e:?}");
    err(
        t(&[2, 5, 5, 3]).conv2d(&t(&[3, 3, 3]), [1, 1], Same, [1, 1]),
        &["conv2d", "[3, 3, 3]"],
    );
    let e = err(
        t(&[2, 5, 5, 3]).conv1d(&t(&[3, 3, 4]), 1, Same, 1),
        &["conv1d", "[2, 5, 5, 3]", "rank 3"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv1d", .. }), "{e:?}");
    err(t(&[2, 5, 3]).conv1d(&t(&[3, 4]), 1, Same, 1), &["conv1d", "[3, 4]"]);
    err(
        t(&[5, 5, 3]).depthwise_conv2d(&t(&[3, 3, 3, 1]), [1, 1], Same, [1, 1]),
        &["depthwise_conv2d", "[5, 5, 3]"],
    );
    let e = err(
        t(&[5, 5]).max_pool2d([2, 2], [2, 2], Same),
        &["max_pool2d", "[5, 5]", "rank 4"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "max_pool2d", .. }), "{e:?}");
    err(
        t(&[1, 5, 5, 1, 1]).avg_pool2d([2, 2], [2, 2], Same),
        &["avg_pool2d", "[1, 5, 5, 1, 1]"],
    );
    err(
        Tensor::conv2d_backprop_input(&[2, 5, 5], &t(&[3, 3, 5, 4]), &t(&[2, 5, 5, 4]), [1, 1], Same, [1, 1]),
        &["conv2d_backprop_input", "input_sizes", "[2, 5, 5]"],
    );
    err(
        Tensor::conv2d_backprop_filter(&t(&[2, 5, 5, 3]), &[3, 3, 3], &t(&[2, 5, 5, 4]), [1, 1], Same, [1, 1]),
        &["conv2d_backprop_filter", "filter_sizes", "[3, 3, 3]"],
    );
    err(
        t(&[2, 3, 3, 4]).conv2d_transpose(&t(&[3, 3, 2, 4]), &[2, 6, 6], [2, 2], Same, [1, 1]),
        &["conv2d_transpose", "[2, 6, 6]"],
    );
}

#[test]
fn channel_mismatch() {
    // 3 input channels are no multiple of the filter's 2 (no grouping)
    let e = err(
        t(&[2, 5, 5, 3]).conv2d(&t(&[3, 3, 2, 4]), [1, 1], Same, [1, 1]),
        &["conv2d", "[2, 5, 5, 3]", "[3, 3, 2, 4]", "not a multiple"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }), "{e:?}");
    let e = err(t(&[2, 7, 3]).conv1d(&t(&[3, 2, 4]), 1, Valid, 1), &["conv1d"]);
    assert!(matches!(e, Error::InvalidArgument { op: "conv1d", .. }), "{e:?}");
    let e = err(
        t(&[2, 5, 5, 3]).depthwise_conv2d(&t(&[3, 3, 4, 2]), [1, 1], Same, [1, 1]),
        &["depthwise_conv2d"],
    );
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "depthwise_conv2d",
                ..
            }
        ),
        "{e:?}"
    );
    // conv2d_transpose: the filter is [h, w, out, in]; `in` must match the input's channels
    let e = err(
        t(&[2, 3, 3, 4]).conv2d_transpose(&t(&[3, 3, 2, 5]), &[2, 6, 6, 2], [2, 2], Same, [1, 1]),
        &["conv2d_transpose", "[2, 3, 3, 4]", "[2, 3, 3, 5]"],
    );
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "conv2d_transpose",
                ..
            }
        ),
        "{e:?}"
    );
    // and output_shape's channels must match the filter's `out`
    err(
        t(&[2, 3, 3, 4]).conv2d_transpose(&t(&[3, 3, 2, 4]), &[2, 6, 6, 3], [2, 2], Same, [1, 1]),
        &["conv2d_transpose", "[2, 6, 6, 3]", "[3, 3, 2, 4]"],
    );
}

#[test]
fn out_backprop_of_the_wrong_shape() {
    // input 5x5, stride 2 SAME -> 3x3 output; a 5x5 out_backprop is wrong
    let e = err(
        Tensor::conv2d_backprop_input(
            &[2, 5, 5, 3],
            &t(&[3, 3, 3, 4]),
            &t(&[2, 5, 5, 4]),
            [2, 2],
            Same,
            [1, 1],
        ),
        &["conv2d_backprop_input", "[2, 5, 5, 4]", "[2, 3, 3, 4]"],
    );
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "conv2d_backprop_input",
            lhs: vec![2, 5, 5, 4],
            rhs: vec![2, 3, 3, 4]
        }
    );
    err(
        Tensor::conv2d_backprop_filter(
            &t(&[2, 5, 5, 3]),
            &[3, 3, 3, 4],
            &t(&[2, 3, 3, 5]),
            [2, 2],
            Same,
            [1, 1],
        ),
        &["conv2d_backprop_filter", "[2, 3, 3, 5]", "[2, 3, 3, 4]"],
    );
    // conv2d_transpose: the input must be what conv2d gives for output_shape
    err(
        t(&[2, 4, 4, 4]).conv2d_transpose(&t(&[3, 3, 2, 4]), &[2, 6, 6, 2], [2, 2], Same, [1, 1]),
        &["conv2d_transpose", "[2, 4, 4, 4]", "[2, 3, 3, 4]"],
    );
    err(
        t(&[1, 2, 2, 1]).avg_pool2d_grad(&[1, 5, 5, 1], [2, 2], [2, 2], Same),
        &["avg_pool2d_grad", "[1, 2, 2, 1]", "[1, 3, 3, 1]"],
    );
}

#[test]
fn zero_and_negative_strides_dilations_and_windows() {
    let (x, f) = (t(&[1, 5, 5, 2]), t(&[3, 3, 2, 2]));
    for (s, d) in [([0, 1], [1, 1]), ([1, -2], [1, 1]), ([1, 1], [0, 1]), ([1, 1], [1, -1])] {
        let e = err(x.conv2d(&f, s, Same, d), &["conv2d", ">= 1"]);
        assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }), "{e:?}");
        err(x.depthwise_conv2d(&f, s, Valid, d), &["depthwise_conv2d", ">= 1"]);
        err(
            Tensor::conv2d_backprop_filter(&x, &[3, 3, 2, 2], &t(&[1, 5, 5, 2]), s, Same, d),
            &["conv2d_backprop_filter"],
        );
    }
    err(
        t(&[1, 5, 2]).conv1d(&t(&[2, 2, 2]), 0, Same, 1),
        &["conv1d", "strides", "[1, 0]"],
    );
    err(
        t(&[1, 5, 2]).conv1d(&t(&[2, 2, 2]), 1, Same, -3),
        &["conv1d", "dilations", "[1, -3]"],
    );
    err(x.max_pool2d([2, 0], [1, 1], Same), &["max_pool2d", "ksize", "[2, 0]"]);
    err(
        x.max_pool2d([2, 2], [-1, 1], Same),
        &["max_pool2d", "strides", "[-1, 1]"],
    );
    err(x.avg_pool2d([2, 2], [1, 0], Valid), &["avg_pool2d", "strides"]);
    err(x.avg_pool2d([-2, 2], [1, 1], Valid), &["avg_pool2d", "ksize"]);
}

#[test]
fn valid_window_larger_than_input() {
    let e = err(
        t(&[1, 2, 5, 1]).conv2d(&t(&[3, 3, 1, 1]), [1, 1], Valid, [1, 1]),
        &["conv2d", "VALID", "height"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }), "{e:?}");
    // dilation makes the window 5 wide
    err(
        t(&[1, 5, 4, 1]).conv2d(&t(&[3, 3, 1, 1]), [1, 1], Valid, [1, 2]),
        &["conv2d", "width", "5"],
    );
    err(
        t(&[1, 2, 2, 1]).max_pool2d([3, 3], [1, 1], Valid),
        &["max_pool2d", "VALID"],
    );
    // SAME is fine with a window larger than the input
    assert_eq!(
        t(&[1, 2, 2, 1]).max_pool2d([3, 3], [1, 1], Same).unwrap().shape(),
        &[1, 2, 2, 1]
    );
}

#[test]
fn integer_and_mixed_dtypes() {
    let xi = Tensor::zeros(&[1, 4, 4, 2], DType::I32);
    let fi = Tensor::zeros(&[2, 2, 2, 2], DType::I32);
    let e = err(xi.conv2d(&fi, [1, 1], Same, [1, 1]), &["conv2d", "i32"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "conv2d", .. }), "{e:?}");
    let e = err(
        t(&[1, 4, 4, 2]).conv2d(&Tensor::zeros(&[2, 2, 2, 2], DType::F64), [1, 1], Same, [1, 1]),
        &["conv2d", "f32", "f64"],
    );
    assert!(matches!(e, Error::DTypeMismatch { op: "conv2d", .. }), "{e:?}");
    err(
        Tensor::zeros(&[1, 4, 2], DType::I64).conv1d(&t(&[2, 2, 2]), 1, Same, 1),
        &["conv1d", "i64"],
    );
    err(
        xi.depthwise_conv2d(&fi, [1, 1], Same, [1, 1]),
        &["depthwise_conv2d", "i32"],
    );
    let e = err(xi.max_pool2d([2, 2], [2, 2], Same), &["max_pool2d", "i32"]);
    assert!(matches!(e, Error::UnsupportedDType { op: "max_pool2d", .. }), "{e:?}");
    err(
        Tensor::zeros(&[1, 4, 4, 2], DType::Bool).avg_pool2d([2, 2], [2, 2], Same),
        &["avg_pool2d", "bool"],
    );
    err(
        Tensor::conv2d_backprop_input(
            &[1, 4, 4, 2],
            &fi,
            &Tensor::zeros(&[1, 4, 4, 2], DType::I32),
            [1, 1],
            Same,
            [1, 1],
        ),
        &["conv2d_backprop_input", "i32"],
    );
    err(
        Tensor::zeros(&[1, 2, 2, 2], DType::I64).avg_pool2d_grad(&[1, 4, 4, 2], [2, 2], [2, 2], Same),
        &["avg_pool2d_grad", "i64"],
    );
}

/// A grouped convolution's shapes (groups = input channels / filter
/// in-channels) that do not divide: the input's channels by the filter's
/// in-channels, or the filter's out-channels by the groups. Each op names
/// itself and both shapes.
#[test]
fn grouped_channels_that_do_not_divide() {
    // C = 6, filter in-channels 4: 6 % 4 != 0
    let e = err(
        t(&[1, 5, 5, 6]).conv2d(&t(&[3, 3, 4, 4]), [1, 1], Same, [1, 1]),
        &[
            "conv2d",
            "[1, 5, 5, 6]",
            "[3, 3, 4, 4]",
            "6 channels",
            "4 input channels",
        ],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }), "{e:?}");
    // C = 6 = 3 groups of 2, but 4 output channels: 4 % 3 != 0
    let e = err(
        t(&[1, 5, 5, 6]).conv2d(&t(&[3, 3, 2, 4]), [1, 1], Same, [1, 1]),
        &[
            "conv2d",
            "[1, 5, 5, 6]",
            "[3, 3, 2, 4]",
            "4 output channels",
            "3 groups",
        ],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }), "{e:?}");
    err(
        t(&[1, 7, 6]).conv1d(&t(&[3, 4, 4]), 1, Valid, 1),
        &["conv1d", "[1, 7, 6]", "[3, 4, 4]", "not a multiple"],
    );
    err(
        t(&[1, 7, 6]).conv1d(&t(&[3, 2, 5]), 1, Valid, 1),
        &["conv1d", "5 output channels", "3 groups"],
    );
    err(
        t(&[1, 4, 4, 4, 6]).conv3d(&t(&[2, 2, 2, 4, 4]), [1, 1, 1], Same, [1, 1, 1]),
        &["conv3d", "[1, 4, 4, 4, 6]", "[2, 2, 2, 4, 4]", "not a multiple"],
    );
    err(
        t(&[1, 4, 4, 4, 8]).conv3d(&t(&[2, 2, 2, 2, 6]), [1, 1, 1], Same, [1, 1, 1]),
        &[
            "conv3d",
            "[1, 4, 4, 4, 8]",
            "[2, 2, 2, 2, 6]",
            "6 output channels",
            "4 groups",
        ],
    );
    // the adjoints: input_sizes (or x) against the filter (or filter_sizes)
    err(
        Tensor::conv2d_backprop_input(
            &[1, 5, 5, 6],
            &t(&[3, 3, 4, 4]),
            &t(&[1, 5, 5, 4]),
            [1, 1],
            Same,
            [1, 1],
        ),
        &[
            "conv2d_backprop_input",
            "[1, 5, 5, 6]",
            "[3, 3, 4, 4]",
            "not a multiple",
        ],
    );
    err(
        Tensor::conv2d_backprop_filter(
            &t(&[1, 5, 5, 6]),
            &[3, 3, 2, 4],
            &t(&[1, 5, 5, 4]),
            [1, 1],
            Same,
            [1, 1],
        ),
        &["conv2d_backprop_filter", "[1, 5, 5, 6]", "[3, 3, 2, 4]", "3 groups"],
    );
    err(
        t(&[1, 5, 5, 4]).conv2d_transpose(&t(&[3, 3, 4, 4]), &[1, 5, 5, 6], [1, 1], Same, [1, 1]),
        &["conv2d_transpose", "[1, 5, 5, 6]", "[3, 3, 4, 4]", "not a multiple"],
    );
    err(
        Tensor::conv3d_backprop_filter(
            &t(&[1, 4, 4, 4, 8]),
            &[2, 2, 2, 2, 6],
            &t(&[1, 4, 4, 4, 6]),
            [1, 1, 1],
            Same,
            [1, 1, 1],
        ),
        &["conv3d_backprop_filter", "[2, 2, 2, 2, 6]", "4 groups"],
    );
    // a depthwise filter never groups: its in-channels must be the input's
    let e = err(
        t(&[1, 5, 5, 4]).depthwise_conv2d(&t(&[3, 3, 2, 2]), [1, 1], Same, [1, 1]),
        &["depthwise_conv2d"],
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
}
