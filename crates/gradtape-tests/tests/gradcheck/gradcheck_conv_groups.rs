//! Grouped convolutions (a filter with `c / groups` input channels, as
//! TensorFlow's) through the gradient checker in f64, first and second
//! order: conv1d, conv2d and conv3d with 2 and 4 groups, their backprop
//! ops (whose rules are written with the other two ops of the triple, so
//! they must take groups too), conv2d_transpose, and a small grouped
//! network; then forward mode against reverse mode for the grouped ops.
//! (The rows of the dense conv table, `gradcheck_conv.rs`, for groups; a
//! file of their own to keep that one short.)

use crate::common;

use common::*;
use gradtape::{jvp, Padding, Result, Tensor};

use Padding::{Same, Valid};

fn table() -> Vec<Case> {
    let rows: &[(&str, Op, &[usize], &[usize])] = &[
        // conv2d (x, f [kh, kw, c/g, o])
        (
            "conv2d groups 2 same s1",
            |x| sq(x[0].conv2d(&x[1], [1, 1], Same, [1, 1])),
            &[2, 4, 4, 4],
            &[3, 3, 2, 4],
        ),
        (
            "conv2d groups 4 valid s2",
            |x| sq(x[0].conv2d(&x[1], [2, 2], Valid, [1, 1])),
            &[1, 5, 6, 4],
            &[2, 3, 1, 8],
        ),
        (
            "conv2d groups 2 same d2",
            |x| sq(x[0].conv2d(&x[1], [1, 1], Same, [2, 1])),
            &[1, 5, 4, 4],
            &[2, 2, 2, 2],
        ),
        (
            "conv2d groups 2 1x1",
            |x| sq(x[0].conv2d(&x[1], [1, 1], Valid, [1, 1])),
            &[2, 3, 3, 4],
            &[1, 1, 2, 6],
        ),
        // conv2d_backprop_input (f, dy) and conv2d_backprop_filter (x, dy)
        (
            "conv2d_backprop_input groups 2 same s2",
            |x| {
                sq(Tensor::conv2d_backprop_input(
                    &[1, 5, 5, 4],
                    &x[0],
                    &x[1],
                    [2, 2],
                    Same,
                    [1, 1],
                ))
            },
            &[3, 3, 2, 4],
            &[1, 3, 3, 4],
        ),
        (
            "conv2d_backprop_filter groups 4 valid",
            |x| {
                sq(Tensor::conv2d_backprop_filter(
                    &x[0],
                    &[2, 2, 1, 4],
                    &x[1],
                    [1, 1],
                    Valid,
                    [1, 1],
                ))
            },
            &[2, 4, 3, 4],
            &[2, 3, 2, 4],
        ),
        // conv2d_transpose (x [n, oh, ow, o], f [kh, kw, c/g, o]) -> [n, h, w, c]
        (
            "conv2d_transpose groups 2 same s2",
            |x| sq(x[0].conv2d_transpose(&x[1], &[1, 6, 5, 4], [2, 2], Same, [1, 1])),
            &[1, 3, 3, 2],
            &[3, 3, 2, 2],
        ),
        // conv1d (x [n, w, c], f [k, c/g, o])
        (
            "conv1d groups 2 same s2",
            |x| sq(x[0].conv1d(&x[1], 2, Same, 1)),
            &[2, 7, 4],
            &[3, 2, 4],
        ),
        (
            "conv1d groups 4 valid d2",
            |x| sq(x[0].conv1d(&x[1], 1, Valid, 2)),
            &[1, 8, 4],
            &[2, 1, 4],
        ),
        // conv3d (x [n, d, h, w, c], f [kd, kh, kw, c/g, o]) and its adjoints
        (
            "conv3d groups 2 same s1",
            |x| sq(x[0].conv3d(&x[1], [1, 1, 1], Same, [1, 1, 1])),
            &[1, 3, 3, 3, 4],
            &[2, 2, 2, 2, 2],
        ),
        (
            "conv3d groups 4 valid s2",
            |x| sq(x[0].conv3d(&x[1], [2, 1, 2], Valid, [1, 1, 1])),
            &[1, 4, 3, 4, 4],
            &[2, 2, 2, 1, 4],
        ),
        (
            "conv3d_backprop_input groups 2",
            |x| {
                sq(Tensor::conv3d_backprop_input(
                    &[1, 3, 3, 3, 4],
                    &x[0],
                    &x[1],
                    [1, 2, 1],
                    Same,
                    [1, 1, 1],
                ))
            },
            &[2, 2, 2, 2, 2],
            &[1, 3, 2, 3, 2],
        ),
        (
            "conv3d_backprop_filter groups 2",
            |x| {
                sq(Tensor::conv3d_backprop_filter(
                    &x[0],
                    &[2, 2, 2, 2, 4],
                    &x[1],
                    [1, 1, 1],
                    Valid,
                    [1, 1, 1],
                ))
            },
            &[1, 3, 3, 3, 4],
            &[1, 2, 2, 2, 4],
        ),
    ];
    let mut t: Vec<Case> = rows
        .iter()
        .map(|&(name, f, a, b)| case(name, f, &[(a, Any), (b, Any)]))
        .collect();
    // a grouped network: second order through two grouped layers
    t.push(case(
        "conv2d groups chain",
        |x| {
            let h = x[0].conv2d(&x[1], [1, 1], Same, [1, 1])?.tanh()?;
            h.conv2d(&x[2], [2, 2], Valid, [1, 1])?.square()?.sum_all()
        },
        &[(&[1, 4, 4, 4], Any), (&[2, 2, 2, 4], Any), (&[2, 2, 1, 4], Any)],
    ));
    t
}

const REQUIRED: &[&str] = &[
    "conv2d groups",
    "conv2d_backprop_input groups",
    "conv2d_backprop_filter groups",
    "conv2d_transpose groups",
    "conv1d groups",
    "conv3d groups",
    "conv3d_backprop_input groups",
    "conv3d_backprop_filter groups",
];

#[test]
fn grouped_conv_ops_pass_the_gradient_checker() {
    run_table(&table(), REQUIRED, 14, 3000);
}

/// `sum(dy/dx . t)` by reverse mode (a fixed cotangent), for comparing
/// with a JVP.
fn vjp_dot(f: Op, xs: &[Tensor], ts: &[Tensor]) -> Result<f64> {
    let tape = gradtape::GradientTape::new();
    let y = tape.record(|| {
        for x in xs {
            tape.watch(x);
        }
        let y = f(xs)?;
        let w = Tensor::from_vec((0..y.numel()).map(|i| (0.3 * i as f64).cos()).collect(), y.shape())?;
        y.mul(&w)?.sum_all()
    })?;
    let mut s = 0.0;
    for (g, t) in tape.gradient(&y, xs)?.iter().zip(ts) {
        if let Some(g) = g {
            s += g.mul(t)?.sum_all()?.to_vec::<f64>()?[0];
        }
    }
    Ok(s)
}

#[test]
fn grouped_forward_mode_matches_reverse_mode() -> Result<()> {
    let ops: &[(&str, Op, &[&[usize]])] = &[
        (
            "conv2d",
            |x| x[0].conv2d(&x[1], [2, 1], Same, [1, 1]),
            &[&[1, 4, 5, 4], &[3, 2, 2, 6]],
        ),
        (
            "conv2d_backprop_input",
            |x| Tensor::conv2d_backprop_input(&[1, 4, 5, 4], &x[0], &x[1], [2, 1], Same, [1, 1]),
            &[&[3, 2, 1, 8], &[1, 2, 5, 8]],
        ),
        (
            "conv2d_backprop_filter",
            |x| Tensor::conv2d_backprop_filter(&x[0], &[3, 2, 2, 6], &x[1], [2, 1], Same, [1, 1]),
            &[&[1, 4, 5, 4], &[1, 2, 5, 6]],
        ),
        (
            "conv3d",
            |x| x[0].conv3d(&x[1], [1, 1, 1], Same, [1, 2, 1]),
            &[&[1, 3, 4, 3, 4], &[2, 2, 2, 2, 4]],
        ),
        ("conv1d", |x| x[0].conv1d(&x[1], 1, Valid, 1), &[&[2, 6, 8], &[3, 2, 4]]),
    ];
    for (k, &(name, f, shapes)) in ops.iter().enumerate() {
        let make = |j: usize, s: &[usize], phase: f64| {
            let n: usize = s.iter().product();
            let v = (0..n).map(|i| (0.71 * i as f64 + 1.3 * j as f64 + phase + k as f64).sin());
            Tensor::from_vec(v.collect(), s)
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
        let w = Tensor::from_vec(
            (0..tangent.numel()).map(|i| (0.3 * i as f64).cos()).collect(),
            tangent.shape(),
        )?;
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
