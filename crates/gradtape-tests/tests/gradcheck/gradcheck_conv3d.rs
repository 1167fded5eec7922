//! conv3d and its adjoints, 3-D and 1-D pools, separable_conv2d and the
//! channels-first forms through the gradient checker (f64, first and second
//! order, and each case again as a traced function), plus forward mode
//! against reverse mode for the ops with JVP rules.

use crate::common;

use common::*;
use gradtape::{jvp, DataFormat, Padding, Result, Tensor};

use DataFormat::ChannelsFirst;
use Padding::{Same, Valid};

fn table() -> Vec<Case> {
    let mut t = Vec::new();
    let two: &[(&str, Op, &[usize], &[usize])] = &[
        // conv3d (x, f)
        (
            "conv3d same s1",
            |x| sq(x[0].conv3d(&x[1], [1, 1, 1], Same, [1, 1, 1])),
            &[2, 3, 4, 3, 2],
            &[2, 3, 2, 2, 2],
        ),
        (
            "conv3d valid s2",
            |x| sq(x[0].conv3d(&x[1], [2, 1, 2], Valid, [1, 1, 1])),
            &[1, 5, 3, 5, 2],
            &[2, 2, 3, 2, 2],
        ),
        (
            "conv3d same s2 odd",
            |x| sq(x[0].conv3d(&x[1], [2, 2, 3], Same, [1, 1, 1])),
            &[1, 5, 3, 4, 1],
            &[3, 2, 2, 1, 2],
        ),
        (
            "conv3d same dilation",
            |x| sq(x[0].conv3d(&x[1], [1, 1, 1], Same, [2, 1, 2])),
            &[1, 4, 3, 4, 1],
            &[2, 2, 2, 1, 2],
        ),
        (
            "conv3d 1x1x1",
            |x| sq(x[0].conv3d(&x[1], [1, 1, 1], Valid, [1, 1, 1])),
            &[2, 2, 3, 2, 3],
            &[1, 1, 1, 3, 2],
        ),
        (
            "conv3d zero batch",
            |x| sq(x[0].conv3d(&x[1], [1, 1, 1], Same, [1, 1, 1])),
            &[0, 3, 3, 3, 2],
            &[2, 2, 2, 2, 2],
        ),
        (
            "conv3d ncdhw",
            |x| sq(x[0].conv3d_with_format(&x[1], [1, 2, 1], Same, [1, 1, 1], ChannelsFirst)),
            &[1, 2, 3, 4, 3],
            &[2, 2, 2, 2, 2],
        ),
        // conv3d_backprop_input (f, dy)
        (
            "conv3d_backprop_input same s2",
            |x| {
                sq(Tensor::conv3d_backprop_input(
                    &[1, 4, 3, 5, 2],
                    &x[0],
                    &x[1],
                    [2, 1, 2],
                    Same,
                    [1, 1, 1],
                ))
            },
            &[2, 2, 3, 2, 2],
            &[1, 2, 3, 3, 2],
        ),
        (
            "conv3d_backprop_input valid d2",
            |x| {
                sq(Tensor::conv3d_backprop_input(
                    &[1, 4, 3, 4, 1],
                    &x[0],
                    &x[1],
                    [1, 1, 1],
                    Valid,
                    [2, 1, 1],
                ))
            },
            &[2, 2, 2, 1, 2],
            &[1, 2, 2, 3, 2],
        ),
        // conv3d_backprop_filter (x, dy)
        (
            "conv3d_backprop_filter same s2",
            |x| {
                sq(Tensor::conv3d_backprop_filter(
                    &x[0],
                    &[2, 2, 3, 2, 2],
                    &x[1],
                    [2, 1, 2],
                    Same,
                    [1, 1, 1],
                ))
            },
            &[1, 4, 3, 5, 2],
            &[1, 2, 3, 3, 2],
        ),
        (
            "conv3d_backprop_filter valid d2",
            |x| {
                sq(Tensor::conv3d_backprop_filter(
                    &x[0],
                    &[2, 2, 2, 1, 2],
                    &x[1],
                    [1, 1, 1],
                    Valid,
                    [1, 2, 1],
                ))
            },
            &[2, 3, 4, 3, 1],
            &[2, 2, 2, 2, 2],
        ),
        // channels-first conv2d and bias_add
        (
            "conv2d nchw same s2",
            |x| sq(x[0].conv2d_with_format(&x[1], [2, 1], Same, [1, 1], ChannelsFirst)),
            &[2, 2, 5, 4],
            &[3, 2, 2, 3],
        ),
        (
            "conv1d ncw same s2",
            |x| sq(x[0].conv1d_with_format(&x[1], 2, Same, 1, ChannelsFirst)),
            &[2, 2, 7],
            &[3, 2, 2],
        ),
        (
            "bias_add nchw",
            |x| sq(x[0].bias_add_with_format(&x[1], ChannelsFirst)),
            &[2, 3, 2, 2],
            &[3],
        ),
    ];
    for &(name, f, a, b) in two {
        t.push(case(name, f, &[(a, Any), (b, Any)]));
    }
    let three: &[(&str, Op, [&[usize]; 3])] = &[
        (
            "separable_conv2d same s2",
            |x| sq(x[0].separable_conv2d(&x[1], &x[2], [2, 2], Same, [1, 1])),
            [&[1, 5, 4, 2], &[3, 2, 2, 2], &[1, 1, 4, 3]],
        ),
        (
            "separable_conv2d nchw",
            |x| sq(x[0].separable_conv2d_with_format(&x[1], &x[2], [1, 2], Same, [1, 1], ChannelsFirst)),
            [&[1, 2, 4, 5], &[2, 3, 2, 2], &[1, 1, 4, 2]],
        ),
        (
            "separable_conv2d valid d2",
            |x| sq(x[0].separable_conv2d(&x[1], &x[2], [1, 1], Valid, [2, 2])),
            [&[2, 5, 5, 1], &[2, 2, 1, 2], &[1, 1, 2, 2]],
        ),
    ];
    for &(name, f, [a, b, c]) in three {
        t.push(case(name, f, &[(a, Any), (b, Any), (c, Any)]));
    }
    let pools: &[(&str, Op, &[usize], Dom)] = &[
        (
            "max_pool3d same 2x2x2 s2",
            |x| sq(x[0].max_pool3d([2, 2, 2], [2, 2, 2], Same)),
            &[1, 3, 4, 3, 2],
            Distinct,
        ),
        (
            "max_pool3d valid 2x3x1 s1x2x1",
            |x| sq(x[0].max_pool3d([2, 3, 1], [1, 2, 1], Valid)),
            &[2, 3, 4, 2, 2],
            Distinct,
        ),
        (
            "max_pool3d ncdhw",
            |x| sq(x[0].max_pool3d_with_format([2, 2, 1], [2, 1, 1], Same, ChannelsFirst)),
            &[1, 2, 3, 3, 2],
            Distinct,
        ),
        (
            "avg_pool3d same 2x3x2 s2",
            |x| sq(x[0].avg_pool3d([2, 3, 2], [2, 2, 2], Same)),
            &[2, 3, 4, 5, 2],
            Any,
        ),
        (
            "avg_pool3d valid 2x2x2 s1",
            |x| sq(x[0].avg_pool3d([2, 2, 2], [1, 1, 1], Valid)),
            &[1, 3, 3, 4, 2],
            Any,
        ),
        (
            "avg_pool3d ncdhw",
            |x| sq(x[0].avg_pool3d_with_format([1, 2, 2], [1, 2, 1], Valid, ChannelsFirst)),
            &[1, 2, 2, 4, 3],
            Any,
        ),
        (
            "avg_pool3d_grad same",
            |x| sq(x[0].avg_pool3d_grad(&[1, 3, 4, 5, 2], [2, 3, 2], [2, 2, 2], Same)),
            &[1, 2, 2, 3, 2],
            Any,
        ),
        (
            "avg_pool3d_grad valid",
            |x| sq(x[0].avg_pool3d_grad(&[2, 3, 3, 3, 1], [2, 2, 2], [1, 2, 1], Valid)),
            &[2, 2, 1, 2, 1],
            Any,
        ),
        (
            "max_pool1d same 3 s2",
            |x| sq(x[0].max_pool1d(3, 2, Same)),
            &[2, 7, 3],
            Distinct,
        ),
        (
            "max_pool1d valid 2 s1",
            |x| sq(x[0].max_pool1d(2, 1, Valid)),
            &[1, 6, 2],
            Distinct,
        ),
        (
            "avg_pool1d same 3 s2",
            |x| sq(x[0].avg_pool1d(3, 2, Same)),
            &[2, 7, 3],
            Any,
        ),
        (
            "avg_pool1d valid 2 s1",
            |x| sq(x[0].avg_pool1d(2, 1, Valid)),
            &[1, 6, 2],
            Any,
        ),
        (
            "max_pool1d ncw",
            |x| sq(x[0].max_pool1d_with_format(3, 2, Same, ChannelsFirst)),
            &[2, 2, 7],
            Distinct,
        ),
        (
            "avg_pool1d ncw",
            |x| sq(x[0].avg_pool1d_with_format(2, 1, Valid, ChannelsFirst)),
            &[1, 3, 6],
            Any,
        ),
        (
            "max_pool2d nchw",
            |x| sq(x[0].max_pool2d_with_format([2, 2], [2, 1], Same, ChannelsFirst)),
            &[2, 2, 3, 4],
            Distinct,
        ),
        (
            "avg_pool2d nchw",
            |x| sq(x[0].avg_pool2d_with_format([2, 3], [1, 2], Same, ChannelsFirst)),
            &[1, 3, 4, 5],
            Any,
        ),
    ];
    for &(name, f, s, d) in pools {
        t.push(case(name, f, &[(s, d)]));
    }
    // a small 3-D network: conv, tanh, pool, conv, sum of squares
    t.push(case(
        "conv3d chain",
        |x| {
            let h = x[0]
                .conv3d(&x[1], [1, 1, 1], Same, [1, 1, 1])?
                .tanh()?
                .avg_pool3d([2, 2, 2], [2, 2, 2], Same)?;
            h.conv3d(&x[2], [1, 1, 1], Valid, [1, 1, 1])?.square()?.sum_all()
        },
        &[
            (&[1, 3, 4, 4, 1], Any),
            (&[2, 2, 2, 1, 2], Any),
            (&[2, 2, 2, 2, 1], Any),
        ],
    ));
    t
}

const REQUIRED: &[&str] = &[
    "conv3d same",
    "conv3d valid",
    "conv3d ncdhw",
    "conv3d_backprop_input",
    "conv3d_backprop_filter",
    "conv2d nchw",
    "bias_add nchw",
    "separable_conv2d",
    "max_pool3d",
    "avg_pool3d",
    "avg_pool3d_grad",
    "max_pool1d",
    "avg_pool1d",
    "max_pool2d nchw",
    "avg_pool2d nchw",
    "conv1d ncw",
    "max_pool1d ncw",
    "avg_pool1d ncw",
    "separable_conv2d nchw",
];

#[test]
fn every_conv3d_and_pool_op_passes_the_gradient_checker() {
    run_table(&table(), REQUIRED, 30, 3000);
}

/// `sum(dy/dx . t)` by reverse mode, for comparing with a JVP.
fn vjp_dot(f: fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor], ts: &[Tensor]) -> Result<f64> {
    let tape = gradtape::GradientTape::new();
    let y = tape.record(|| {
        for x in xs {
            tape.watch(x);
        }
        let y = f(xs)?;
        // a fixed, non-constant cotangent
        let n = y.numel();
        let w = Tensor::from_vec((0..n).map(|i| (0.3 * i as f64).cos()).collect(), y.shape())?;
        y.mul(&w)?.sum_all()
    })?;
    let grads = tape.gradient(&y, xs)?;
    let mut s = 0.0;
    for (g, t) in grads.iter().zip(ts) {
        if let Some(g) = g {
            s += g.mul(t)?.sum_all()?.to_vec::<f64>()?[0];
        }
    }
    Ok(s)
}

#[test]
fn forward_mode_matches_reverse_mode() -> Result<()> {
    let ops: &[(&str, Op, &[&[usize]])] = &[
        (
            "conv3d",
            |x| x[0].conv3d(&x[1], [2, 1, 1], Same, [1, 1, 2]),
            &[&[1, 4, 3, 4, 2], &[2, 2, 2, 2, 3]],
        ),
        (
            "conv3d_backprop_input",
            |x| Tensor::conv3d_backprop_input(&[1, 4, 3, 4, 2], &x[0], &x[1], [2, 1, 1], Same, [1, 1, 1]),
            &[&[2, 2, 2, 2, 3], &[1, 2, 3, 4, 3]],
        ),
        (
            "conv3d_backprop_filter",
            |x| Tensor::conv3d_backprop_filter(&x[0], &[2, 2, 2, 2, 3], &x[1], [2, 1, 1], Same, [1, 1, 1]),
            &[&[1, 4, 3, 4, 2], &[1, 2, 3, 4, 3]],
        ),
        (
            "max_pool3d",
            |x| x[0].max_pool3d([2, 2, 2], [1, 2, 1], Same),
            &[&[1, 3, 4, 3, 2]],
        ),
        (
            "avg_pool3d",
            |x| x[0].avg_pool3d([2, 2, 2], [1, 2, 1], Same),
            &[&[1, 3, 4, 3, 2]],
        ),
        (
            "avg_pool3d_grad",
            |x| x[0].avg_pool3d_grad(&[1, 3, 4, 3, 2], [2, 2, 2], [1, 2, 1], Same),
            &[&[1, 3, 2, 3, 2]],
        ),
    ];
    for (k, &(name, f, shapes)) in ops.iter().enumerate() {
        let make = |j: usize, s: &[usize], phase: f64| {
            let n: usize = s.iter().product();
            Tensor::from_vec(
                (0..n)
                    .map(|i| (0.71 * i as f64 + 1.3 * j as f64 + phase + k as f64).sin())
                    .collect(),
                s,
            )
        };
        let xs: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(j, s)| make(j, s, 0.2))
            .collect::<Result<_>>()?;
        let ts: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(j, s)| make(j, s, 2.9))
            .collect::<Result<_>>()?;
        let (_, tangent) = jvp(|xs: &[Tensor]| f(xs), &xs, &ts)?;
        let n = tangent.numel();
        let w = Tensor::from_vec((0..n).map(|i| (0.3 * i as f64).cos()).collect(), tangent.shape())?;
        let forward = tangent.mul(&w)?.sum_all()?.to_vec::<f64>()?[0];
        let reverse = vjp_dot(f, &xs, &ts)?;
        assert!(
            (forward - reverse).abs() <= 1e-10 * (1.0 + reverse.abs()),
            "{name}: forward {forward} vs reverse {reverse}"
        );
        assert!(forward.abs() > 1e-3, "{name}: degenerate check");
    }
    Ok(())
}
