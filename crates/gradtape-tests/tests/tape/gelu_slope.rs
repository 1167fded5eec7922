//! The exact GELU under a one-shot tape makes its slope with its value and
//! keeps it for the rule (`ops/math/gelu_slope.rs`): the gradients against
//! TensorFlow's, bit for bit those of the usual rule (a persistent tape,
//! which keeps `x`), the path taken on two shapes and not where another
//! interpreter could need the slope as a function of `x`, and second
//! derivatives through a tape entered after the forward pass.
//!
//! Reference values: TensorFlow 2.21, `tf.nn.gelu(x, approximate=False)`
//! in `f64` at the points of `POINTS`, first and second derivatives by
//! nested `tf.GradientTape`s (/work/refvenv).

use gradtape::__internals::ops::math::gelu_slope::slopes_kept;
use gradtape::{DType, GradientTape, Result, Tensor};

const POINTS: [f64; 7] = [-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];
/// d/dx gelu(x) at `POINTS` (TensorFlow).
const TF_SLOPE: [f64; 7] = [
    -0.011945648796988968,
    -0.08331546644653365,
    0.1325048806160109,
    0.5,
    0.8674951193839892,
    1.0833154664465336,
    1.011945648796989,
];
/// d²/dx² gelu(x) at `POINTS` (TensorFlow).
const TF_CURVE: [f64; 7] = [
    -0.031022941765784608,
    0.2419707328014484,
    0.6161143169419341,
    0.7978845471476527,
    0.6161143169419341,
    0.2419707328014484,
    -0.031022941765784615,
];

fn points() -> Tensor {
    Tensor::from_vec(POINTS.iter().map(|&v| v as f32).collect(), &[7]).unwrap()
}

/// `n` deterministic values in about [-4, 4].
fn spread(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919 % 8001) as f32 / 1000.0) - 4.0).collect()
}

/// d/dx of `sum(gelu(x) · r)` on a one-shot or persistent tape, and
/// whether the slope was kept.
fn grad(x: &Tensor, r: &Tensor, persistent: bool) -> Result<(Vec<f32>, bool)> {
    let tape = if persistent {
        GradientTape::persistent()
    } else {
        GradientTape::new()
    };
    let before = slopes_kept();
    let y = tape.record(|| {
        tape.watch(x);
        x.gelu(false)?.mul(r)?.sum_all()
    })?;
    let kept = slopes_kept() > before;
    Ok((tape.gradient(&y, x)?.expect("a gradient").to_vec::<f32>()?, kept))
}

#[test]
fn the_kept_slope_gives_tensorflows_gradient_with_the_bits_of_the_usual_rule() -> Result<()> {
    let x = points();
    let r = Tensor::ones(&[7], DType::F32);
    let (g, kept) = grad(&x, &r, false)?;
    assert!(kept, "a one-shot tape keeps the slope");
    for ((&got, &want), p) in g.iter().zip(&TF_SLOPE).zip(POINTS) {
        assert!(
            (got as f64 - want).abs() <= 5e-7 * (1.0 + want.abs()),
            "at {p}: {got} against {want}"
        );
    }
    let (usual, kept) = grad(&x, &r, true)?;
    assert!(!kept, "a persistent tape keeps x");
    assert_eq!(
        g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        usual.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn a_second_shape_keeps_the_slope_over_the_threads_with_the_same_bits() -> Result<()> {
    // [64, 300]: an MLP's activations, in parallel chunks
    let x = Tensor::from_vec(spread(64 * 300), &[64, 300])?;
    let r = Tensor::from_vec(spread(64 * 300).iter().map(|v| v * 0.25 + 0.1).collect(), &[64, 300])?;
    let (g, kept) = grad(&x, &r, false)?;
    assert!(kept);
    let (usual, kept) = grad(&x, &r, true)?;
    assert!(!kept);
    assert_eq!(
        g.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        usual.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // the forward value too, against the op outside any tape
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(&x);
        x.gelu(false)
    })?;
    let plain = x.gelu(false)?;
    assert_eq!(
        y.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        plain.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn nested_tapes_and_other_dtypes_keep_x() -> Result<()> {
    let x = points();
    let before = slopes_kept();
    let outer = GradientTape::new();
    let inner = GradientTape::new();
    outer.record(|| {
        inner.record(|| {
            outer.watch(&x);
            inner.watch(&x);
            x.gelu(false)
        })
    })?;
    assert_eq!(
        slopes_kept(),
        before,
        "two tapes: the outer one may differentiate the rule"
    );
    let x64 = Tensor::vector(&POINTS);
    let t = GradientTape::new();
    t.record(|| {
        t.watch(&x64);
        x64.gelu(false)
    })?;
    assert_eq!(slopes_kept(), before, "f64 keeps x");
    Ok(())
}

#[test]
fn a_tape_entered_after_the_forward_pass_gets_the_second_derivative() -> Result<()> {
    // the inner tape keeps the slope; the outer one, entered after, records
    // the backward pass and watches x, which the rule still reaches
    let x = points();
    let inner = GradientTape::new();
    let before = slopes_kept();
    let y = inner.record(|| {
        inner.watch(&x);
        x.gelu(false)?.sum_all()
    })?;
    assert_eq!(slopes_kept(), before + 1);
    let outer = GradientTape::new();
    let s = outer.record(|| {
        outer.watch(&x);
        inner.gradient(&y, &x)?.expect("a gradient").sum_all()
    })?;
    let h = outer.gradient(&s, &x)?.expect("a second derivative").to_vec::<f32>()?;
    for ((&got, &want), p) in h.iter().zip(&TF_CURVE).zip(POINTS) {
        assert!((got as f64 - want).abs() <= 1e-6, "at {p}: {got} against {want}");
    }
    Ok(())
}

#[test]
fn with_x_gone_the_slope_is_a_constant_to_a_later_tape_as_x_was() -> Result<()> {
    // y = gelu(w · 2): x = w · 2 dies after the forward pass; a later tape
    // watching w (not x) sees no path from w to the slope, as it would see
    // none to x through the usual rule: d/dw of sum(dy/dw) is None there too
    let w = points();
    let inner = GradientTape::new();
    let y = inner.record(|| {
        inner.watch(&w);
        w.mul_scalar(2.0)?.gelu(false)?.sum_all()
    })?;
    let outer = GradientTape::new();
    let g = outer.record(|| {
        outer.watch(&w);
        inner.gradient(&y, &w)
    })?;
    let g = g.expect("a gradient");
    // first order: 2 · gelu'(2w), TensorFlow's slope at 2w for w = ±0.5
    let gv = g.to_vec::<f32>()?;
    assert!((gv[2] as f64 - 2.0 * TF_SLOPE[1]).abs() <= 1e-6, "{}", gv[2]);
    assert!((gv[4] as f64 - 2.0 * TF_SLOPE[5]).abs() <= 1e-6, "{}", gv[4]);
    let s = outer.record(|| g.sum_all())?;
    assert!(outer.gradient(&s, &w)?.is_none(), "the later tape recorded no op of w");
    Ok(())
}
