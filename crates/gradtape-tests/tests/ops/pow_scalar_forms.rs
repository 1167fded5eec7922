//! `pow_scalar`'s forms for the common exponents (`kernels/cpu/pow.rs`):
//! `0, 1, 2, 0.5, −1` as one correctly rounded operation in f32 and f64,
//! and in f32 `3, −2, −0.5, 1.5` through f64, against the power computed
//! in f64 (`f64::powf`, the C library's `pow`: its special values are
//! IEEE 754's, and on f32 arguments these powers are within its error
//! of exact), on a sample of every f32 and the special values; traced
//! (a fused kernel) against eager, bit for bit.

use gradtape::{function, Result, Tensor};

/// A sample of every f32 (`f32_accuracy`'s), NaN and the least subnormal.
fn sample() -> Vec<f32> {
    let mut v = super::f32_accuracy::sample_of_every_f32();
    v.extend([f32::NAN, 1e-45]);
    v
}

/// The distance in ulps of two finite f32s of one sign, or 0 for equal bits.
fn ulps(a: f32, b: f32) -> u32 {
    a.to_bits().abs_diff(b.to_bits())
}

#[test]
fn f32_pow_scalar_forms_are_the_rounded_power() -> Result<()> {
    let xs = sample();
    let x = Tensor::from_vec(xs.clone(), &[xs.len()])?;
    // (exponent, most ulps from the f64 power rounded to f32)
    for (c, most) in [
        (0.0, 0),
        (1.0, 0),
        (2.0, 0),
        (0.5, 0),
        (-1.0, 0),
        (3.0, 1),
        (-2.0, 1),
        (-0.5, 1),
        (1.5, 1),
        (2.5, 1),
    ] {
        let got = x.pow_scalar(c)?.to_vec::<f32>()?;
        let mut off = 0;
        for (&v, &g) in xs.iter().zip(&got) {
            let want = f64::from(v).powf(c) as f32;
            let ok = if want.is_nan() {
                g.is_nan()
            } else if want == 0.0 || want.is_infinite() {
                g.to_bits() == want.to_bits()
            } else {
                g.is_sign_positive() == want.is_sign_positive() && ulps(g, want) <= most
            };
            assert!(ok, "pow({v:e}, {c}) = {g:e}, want {want:e}");
            off += usize::from(g.to_bits() != want.to_bits() && !want.is_nan());
        }
        // the forms are correctly rounded (the f64 ones but within ~2^-28
        // ulp of a midpoint: none of these points is one); the C library's
        // powf, for 2.5, is not everywhere (138 of these points)
        if c != 2.5 {
            assert_eq!(off, 0, "pow(x, {c}): {off} points not the rounded power");
        }
    }
    Ok(())
}

#[test]
fn f64_pow_scalar_forms_are_the_power() -> Result<()> {
    let mut xs: Vec<f64> = sample().iter().map(|&v| f64::from(v) * 1.000_000_3).collect();
    xs.extend([
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MAX,
        5e-324,
        -3.0,
    ]);
    let x = Tensor::from_vec(xs.clone(), &[xs.len()])?;
    for c in [0.0, 1.0, 2.0, 0.5, -1.0] {
        let got = x.pow_scalar(c)?.to_vec::<f64>()?;
        for (&v, &g) in xs.iter().zip(&got) {
            let want = v.powf(c);
            let same = g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan());
            // (the C library's pow is within an ulp; these forms are exact)
            let close = g.is_finite() && want.is_finite() && g.to_bits().abs_diff(want.to_bits()) <= 1;
            assert!(same || close, "pow({v:e}, {c}) = {g:e}, want {want:e}");
        }
    }
    Ok(())
}

#[test]
fn traced_pow_scalar_gives_the_eager_bits() -> Result<()> {
    let xs = sample();
    let n = xs.len();
    let x = Tensor::from_vec(xs, &[n])?;
    for c in [2.0, 0.5, -1.0, 3.0, -0.5, 1.5, 0.0, 1.0, 2.5] {
        // (a fused group: the power between two negations)
        let body = move |x: &Tensor| x.neg()?.pow_scalar(c)?.neg();
        let f = function(body);
        for x in [x.clone(), x.neg()?] {
            let (got, want) = (f.call(&x)?.to_vec::<f32>()?, body(&x)?.to_vec::<f32>()?);
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "pow {c}: traced {a:e}, eager {b:e}"
                );
            }
        }
        assert!(
            f.concrete(&x)?.optimized_graph().to_string().contains("Fused"),
            "pow {c} did not fuse"
        );
    }
    Ok(())
}
