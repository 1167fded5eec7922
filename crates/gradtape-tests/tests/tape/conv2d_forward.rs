//! Forward mode of the 2-D convolutions (their JVP rules, `op(t_a, b) +
//! op(a, t_b)` for each bilinear op): the tangent of every op of the family
//! must agree with reverse mode, `w · (J t) = (Jᵀ w) · t` for fixed
//! non-constant `w` and `t`, in f64.

use gradtape::{jvp, GradientTape, Padding, Result, Tensor};

type Op = fn(&[Tensor]) -> Result<Tensor>;

/// A fixed, non-constant tensor of `shape` (`phase` tells them apart).
fn wave(shape: &[usize], phase: f64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (0.71 * i as f64 + phase).sin()).collect(), shape)
}

/// `(Jᵀ w) · t` for the cotangent `w = wave(y.shape, 5.0)`.
fn reverse(f: Op, xs: &[Tensor], ts: &[Tensor]) -> Result<f64> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        for x in xs {
            tape.watch(x);
        }
        let y = f(xs)?;
        y.mul(&wave(y.shape(), 5.0)?)?.sum_all()
    })?;
    let mut s = 0.0;
    for (g, t) in tape.gradient(&y, xs)?.iter().zip(ts) {
        if let Some(g) = g {
            s += g.mul(t)?.sum_all()?.to_scalar::<f64>()?;
        }
    }
    Ok(s)
}

#[test]
fn forward_mode_of_the_2d_convolutions_matches_reverse_mode() -> Result<()> {
    use Padding::{Same, Valid};
    let ops: &[(&str, Op, &[&[usize]])] = &[
        (
            "conv2d",
            |x| x[0].conv2d(&x[1], [2, 1], Same, [1, 2]),
            &[&[2, 5, 4, 3], &[2, 3, 3, 2]],
        ),
        (
            "conv2d_backprop_input",
            |x| Tensor::conv2d_backprop_input(&[2, 5, 4, 3], &x[0], &x[1], [2, 1], Same, [1, 2]),
            &[&[2, 3, 3, 2], &[2, 3, 4, 2]],
        ),
        (
            "conv2d_backprop_filter",
            |x| Tensor::conv2d_backprop_filter(&x[0], &[2, 3, 3, 2], &x[1], [2, 1], Same, [1, 2]),
            &[&[2, 5, 4, 3], &[2, 3, 4, 2]],
        ),
        (
            "depthwise_conv2d",
            |x| x[0].depthwise_conv2d(&x[1], [1, 2], Valid, [1, 1]),
            &[&[1, 4, 5, 2], &[2, 2, 2, 3]],
        ),
        (
            "depthwise_conv2d_backprop_input",
            |x| Tensor::depthwise_conv2d_backprop_input(&[1, 4, 5, 2], &x[0], &x[1], [1, 2], Valid, [1, 1]),
            &[&[2, 2, 2, 3], &[1, 3, 2, 6]],
        ),
        (
            "depthwise_conv2d_backprop_filter",
            |x| Tensor::depthwise_conv2d_backprop_filter(&x[0], &[2, 2, 2, 3], &x[1], [1, 2], Valid, [1, 1]),
            &[&[1, 4, 5, 2], &[1, 3, 2, 6]],
        ),
        ("conv1d", |x| x[0].conv1d(&x[1], 2, Same, 1), &[&[2, 7, 2], &[3, 2, 3]]),
        (
            "conv2d_transpose",
            |x| x[0].conv2d_transpose(&x[1], &[1, 5, 6, 2], [2, 2], Same, [1, 1]),
            &[&[1, 3, 3, 3], &[3, 3, 2, 3]],
        ),
        (
            "separable_conv2d",
            |x| x[0].separable_conv2d(&x[1], &x[2], [1, 1], Same, [1, 1]),
            &[&[1, 4, 4, 2], &[2, 2, 2, 2], &[1, 1, 4, 3]],
        ),
    ];
    for &(name, f, shapes) in ops {
        let xs: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(j, s)| wave(s, 0.2 + 1.3 * j as f64))
            .collect::<Result<_>>()?;
        let ts: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(j, s)| wave(s, 2.9 + 0.7 * j as f64))
            .collect::<Result<_>>()?;
        let (y, tangent) = jvp(|xs: &[Tensor]| f(xs), &xs, &ts)?;
        assert_eq!(tangent.shape(), y.shape(), "{name}");
        let forward = tangent.mul(&wave(y.shape(), 5.0)?)?.sum_all()?.to_scalar::<f64>()?;
        let reverse = reverse(f, &xs, &ts)?;
        assert!(
            (forward - reverse).abs() <= 1e-10 * (1.0 + reverse.abs()),
            "{name}: forward {forward} vs reverse {reverse}"
        );
        assert!(forward.abs() > 1e-3, "{name}: degenerate check");
    }
    Ok(())
}
