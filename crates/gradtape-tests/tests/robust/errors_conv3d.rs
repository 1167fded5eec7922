//! Bad input to conv3d, the 3-D and 1-D pools, separable_conv2d and the
//! channels-first forms gives an `Err` naming the op and the shapes or
//! dtypes, never a panic, a hang or a huge allocation.

use gradtape::{DType, DataFormat, Error, Padding, Result, Tensor};

use DataFormat::ChannelsFirst;
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
fn conv3d_rejects_bad_ranks_channels_and_attributes() {
    let e = err(
        t(&[2, 5, 5, 3]).conv3d(&t(&[3, 3, 3, 3, 4]), [1, 1, 1], Same, [1, 1, 1]),
        &["conv3d", "[2, 5, 5, 3]", "rank 5"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv3d", .. }), "{e:?}");
    err(
        t(&[1, 4, 4, 4, 3]).conv3d(&t(&[3, 3, 3, 4]), [1, 1, 1], Same, [1, 1, 1]),
        &["conv3d", "[3, 3, 3, 4]"],
    );
    // channels: input 3, filter in-channels 2 (no multiple: no grouping)
    let e = err(
        t(&[1, 4, 4, 4, 3]).conv3d(&t(&[2, 2, 2, 2, 4]), [1, 1, 1], Same, [1, 1, 1]),
        &["conv3d", "[1, 4, 4, 4, 3]", "[2, 2, 2, 2, 4]"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv3d", .. }), "{e:?}");
    err(
        t(&[1, 4, 4, 4, 1]).conv3d(&t(&[2, 2, 2, 1, 1]), [1, 0, 1], Same, [1, 1, 1]),
        &["conv3d", "strides", "[1, 0, 1]"],
    );
    err(
        t(&[1, 4, 4, 4, 1]).conv3d(&t(&[2, 2, 2, 1, 1]), [1, 1, 1], Same, [1, 1, -2]),
        &["conv3d", "dilations", "[1, 1, -2]"],
    );
    // VALID with a window larger than the input
    err(
        t(&[1, 4, 2, 4, 1]).conv3d(&t(&[2, 3, 2, 1, 1]), [1, 1, 1], Valid, [1, 1, 1]),
        &["conv3d", "height", "VALID"],
    );
    err(
        t(&[1, 4, 4, 4, 1]).conv3d(&t(&[2, 2, 2, 1, 1]), [1, 1, 1], Valid, [1, 1, 4]),
        &["conv3d", "width", "VALID"],
    );
    // dtypes
    let e = err(
        Tensor::zeros(&[1, 2, 2, 2, 1], DType::I32).conv3d(
            &Tensor::zeros(&[1, 1, 1, 1, 1], DType::I32),
            [1, 1, 1],
            Same,
            [1, 1, 1],
        ),
        &["conv3d"],
    );
    assert!(matches!(e, Error::UnsupportedDType { op: "conv3d", .. }), "{e:?}");
    err(
        t(&[1, 2, 2, 2, 1]).conv3d(&Tensor::zeros(&[1, 1, 1, 1, 1], DType::F64), [1, 1, 1], Same, [1, 1, 1]),
        &["conv3d"],
    );
    // huge strides and dilations: an error or a small result, never a hang
    let y = t(&[1, 3, 3, 3, 1]).conv3d(&t(&[2, 2, 2, 1, 1]), [i64::MAX, 1, 1], Same, [1, 1, 1]);
    assert_eq!(y.expect("huge stride").shape(), &[1, 1, 3, 3, 1]);
    err(
        t(&[1, 3, 3, 3, 1]).conv3d(&t(&[3, 1, 1, 1, 1]), [1, 1, 1], Valid, [i64::MAX, 1, 1]),
        &["conv3d", "depth"],
    );
}

#[test]
fn conv3d_backprops_check_their_sizes() {
    err(
        Tensor::conv3d_backprop_input(
            &[1, 4, 4, 4],
            &t(&[2, 2, 2, 1, 1]),
            &t(&[1, 4, 4, 4, 1]),
            [1, 1, 1],
            Same,
            [1, 1, 1],
        ),
        &["conv3d_backprop_input", "input_sizes", "[1, 4, 4, 4]"],
    );
    let e = err(
        Tensor::conv3d_backprop_input(
            &[1, 4, 4, 4, 1],
            &t(&[2, 2, 2, 1, 1]),
            &t(&[1, 4, 4, 3, 1]),
            [1, 1, 1],
            Same,
            [1, 1, 1],
        ),
        &["conv3d_backprop_input", "[1, 4, 4, 3, 1]", "[1, 4, 4, 4, 1]"],
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    err(
        Tensor::conv3d_backprop_filter(
            &t(&[1, 4, 4, 4, 1]),
            &[2, 2, 1, 1],
            &t(&[1, 4, 4, 4, 1]),
            [1, 1, 1],
            Same,
            [1, 1, 1],
        ),
        &["conv3d_backprop_filter", "filter_sizes", "[2, 2, 1, 1]"],
    );
    err(
        Tensor::conv3d_backprop_filter(
            &t(&[1, 4, 4, 4, 1]),
            &[2, 2, 2, 1, 1],
            &t(&[1, 3, 3, 3, 1]),
            [1, 1, 1],
            Same,
            [1, 1, 1],
        ),
        &["conv3d_backprop_filter", "[1, 3, 3, 3, 1]"],
    );
}

#[test]
fn pools_3d_reject_bad_input() {
    let e = err(
        t(&[1, 4, 4, 4]).max_pool3d([2, 2, 2], [2, 2, 2], Same),
        &["max_pool3d", "[1, 4, 4, 4]", "rank 5"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "max_pool3d", .. }), "{e:?}");
    err(
        t(&[1, 4, 4, 4, 1]).avg_pool3d([2, 0, 2], [2, 2, 2], Same),
        &["avg_pool3d", "ksize", "[2, 0, 2]"],
    );
    err(
        t(&[1, 4, 4, 4, 1]).max_pool3d([2, 2, 2], [2, 2, -1], Same),
        &["max_pool3d", "strides", "[2, 2, -1]"],
    );
    err(
        t(&[1, 4, 4, 4, 1]).avg_pool3d([5, 2, 2], [1, 1, 1], Valid),
        &["avg_pool3d", "depth", "VALID"],
    );
    err(
        Tensor::zeros(&[1, 2, 2, 2, 1], DType::I64).max_pool3d([1, 1, 1], [1, 1, 1], Same),
        &["max_pool3d"],
    );
    err(
        t(&[1, 1, 1, 1, 1]).avg_pool3d_grad(&[1, 4, 4, 4, 1], [2, 2, 2], [2, 2, 2], Same),
        &["avg_pool3d_grad", "[1, 1, 1, 1, 1]", "[1, 2, 2, 2, 1]"],
    );
    err(
        t(&[1, 2, 2, 2, 1]).avg_pool3d_grad(&[1, 4, 4, 4], [2, 2, 2], [2, 2, 2], Same),
        &["avg_pool3d_grad", "[1, 4, 4, 4]"],
    );
    // a window of 2^40 over a small input: a result, quickly
    let y = t(&[1, 3, 3, 3, 1]).max_pool3d([1 << 40, 1, 1], [1, 1, 1], Same);
    assert_eq!(y.expect("huge window").shape(), &[1, 3, 3, 3, 1]);
}

#[test]
fn pools_1d_reject_bad_input() {
    let e = err(
        t(&[1, 5, 5, 1]).max_pool1d(2, 2, Same),
        &["max_pool1d", "[1, 5, 5, 1]", "rank 3"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "max_pool1d", .. }), "{e:?}");
    err(t(&[1, 5, 1]).avg_pool1d(0, 1, Same), &["avg_pool1d", "ksize", "[0]"]);
    err(t(&[1, 5, 1]).max_pool1d(2, -3, Same), &["max_pool1d", "stride", "[-3]"]);
    err(t(&[1, 5, 1]).avg_pool1d(6, 1, Valid), &["avg_pool1d", "width", "VALID"]);
    err(
        Tensor::zeros(&[1, 5, 1], DType::Bool).max_pool1d(2, 1, Same),
        &["max_pool1d"],
    );
}

#[test]
fn separable_conv2d_checks_its_filters() {
    let x = t(&[1, 5, 5, 3]);
    let dw = t(&[3, 3, 3, 2]);
    err(
        x.separable_conv2d(&dw, &t(&[1, 1, 5, 4]), [1, 1], Same, [1, 1]),
        &["separable_conv2d", "[1, 1, 5, 4]", "[3, 3, 3, 2]"],
    );
    err(
        x.separable_conv2d(&dw, &t(&[2, 1, 6, 4]), [1, 1], Same, [1, 1]),
        &["separable_conv2d", "[2, 1, 6, 4]"],
    );
    err(
        x.separable_conv2d(&dw, &t(&[6, 4]), [1, 1], Same, [1, 1]),
        &["separable_conv2d", "[6, 4]"],
    );
    err(
        x.separable_conv2d(&t(&[3, 3, 2]), &t(&[1, 1, 6, 4]), [1, 1], Same, [1, 1]),
        &["separable_conv2d", "[3, 3, 2]"],
    );
    err(
        t(&[1, 5, 5, 4]).separable_conv2d(&dw, &t(&[1, 1, 6, 4]), [1, 1], Same, [1, 1]),
        &["separable_conv2d", "[1, 5, 5, 4]", "[3, 3, 3, 2]"],
    );
    err(
        t(&[5, 5, 3]).separable_conv2d(&dw, &t(&[1, 1, 6, 4]), [1, 1], Same, [1, 1]),
        &["separable_conv2d", "[5, 5, 3]"],
    );
    err(
        x.separable_conv2d(&dw, &t(&[1, 1, 6, 4]), [0, 1], Same, [1, 1]),
        &["depthwise_conv2d", "strides"],
    );
}

#[test]
fn channels_first_forms_check_ranks_and_channels() {
    let e = err(
        t(&[1, 3, 5]).conv2d_with_format(&t(&[2, 2, 3, 1]), [1, 1], Same, [1, 1], ChannelsFirst),
        &["conv2d", "NCHW", "[1, 3, 5]"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }), "{e:?}");
    // NCHW input [1, 3, 5, 5] has 3 channels; the filter wants 5
    err(
        t(&[1, 3, 5, 5]).conv2d_with_format(&t(&[2, 2, 5, 1]), [1, 1], Same, [1, 1], ChannelsFirst),
        &["conv2d", "[1, 5, 5, 3]", "[2, 2, 5, 1]"],
    );
    err(
        t(&[1, 3, 5, 5, 5]).max_pool2d_with_format([2, 2], [2, 2], Same, ChannelsFirst),
        &["max_pool2d", "NCHW", "rank 4"],
    );
    err(
        t(&[1, 3, 5]).avg_pool2d_with_format([2, 2], [2, 2], Same, ChannelsFirst),
        &["avg_pool2d", "NCHW"],
    );
    err(
        t(&[1, 3, 5, 5]).conv3d_with_format(&t(&[1, 1, 1, 3, 1]), [1, 1, 1], Same, [1, 1, 1], ChannelsFirst),
        &["conv3d", "NCDHW", "rank 5"],
    );
    err(
        t(&[1, 3, 5, 5]).max_pool3d_with_format([1, 1, 1], [1, 1, 1], Same, ChannelsFirst),
        &["max_pool3d", "NCDHW"],
    );
    err(
        t(&[1, 3, 5, 5]).avg_pool3d_with_format([1, 1, 1], [1, 1, 1], Same, DataFormat::ChannelsLast),
        &["avg_pool3d", "NDHWC"],
    );
    err(
        t(&[1, 3, 5, 5]).conv1d_with_format(&t(&[2, 3, 1]), 1, Same, 1, ChannelsFirst),
        &["conv1d", "NCW", "rank 3"],
    );
    // NCW [1, 3, 5] has 3 channels; the filter wants 5
    err(
        t(&[1, 3, 5]).conv1d_with_format(&t(&[2, 5, 1]), 1, Same, 1, ChannelsFirst),
        &["conv1d"],
    );
    err(
        t(&[3, 5]).max_pool1d_with_format(2, 1, Same, ChannelsFirst),
        &["max_pool1d", "NCW", "[3, 5]"],
    );
    err(
        t(&[1, 3, 5]).avg_pool1d_with_format(0, 1, Same, ChannelsFirst),
        &["avg_pool1d", "ksize"],
    );
    err(
        t(&[1, 3, 5]).separable_conv2d_with_format(
            &t(&[1, 1, 3, 1]),
            &t(&[1, 1, 3, 1]),
            [1, 1],
            Same,
            [1, 1],
            ChannelsFirst,
        ),
        &["separable_conv2d", "NCHW", "rank 4"],
    );
    err(
        t(&[1, 2, 5, 5]).separable_conv2d_with_format(
            &t(&[1, 1, 3, 1]),
            &t(&[1, 1, 3, 1]),
            [1, 1],
            Same,
            [1, 1],
            ChannelsFirst,
        ),
        &["separable_conv2d", "[1, 5, 5, 2]", "[1, 1, 3, 1]"],
    );
    let e = err(
        t(&[2, 3, 4]).bias_add_with_format(&t(&[4]), ChannelsFirst),
        &["bias_add", "[2, 3, 4]", "[4]"],
    );
    assert!(matches!(e, Error::InvalidArgument { op: "bias_add", .. }), "{e:?}");
    err(
        t(&[3]).bias_add_with_format(&t(&[3]), ChannelsFirst),
        &["bias_add", "[3]"],
    );
    err(
        t(&[2, 3]).bias_add_with_format(&Tensor::zeros(&[3], DType::F64), ChannelsFirst),
        &["bias_add"],
    );
}
