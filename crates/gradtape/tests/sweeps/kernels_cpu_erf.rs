//! The unit tests of `src/kernels/cpu/erf.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::erf::*;

/// `|got − want|` in ulps of the `f32` nearest `want`.
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    if got == w {
        return 0.0;
    }
    let ulp = if w == 0.0 {
        f32::from_bits(1) as f64
    } else {
        let b = w.abs().to_bits();
        (f32::from_bits(b + 1) as f64) - (f32::from_bits(b) as f64)
    };
    (got as f64 - want).abs() / ulp
}

#[test]
fn erf_is_within_two_ulp_everywhere() {
    let mut worst = (0.0f64, 0.0f32);
    let mut n = 0;
    // every 31st f32 from 1e-30 to 5, both signs (55 million)
    for b in (1e-30f32.to_bits()..=5.0f32.to_bits()).step_by(31) {
        for x in [f32::from_bits(b), -f32::from_bits(b)] {
            let e = ulps(erf_f32(x), libm::erf(x as f64));
            if e > worst.0 {
                worst = (e, x);
            }
            n += 1;
        }
    }
    assert!(n > 50_000_000);
    assert!(worst.0 <= 2.0, "worst {} ulp at x = {:e}", worst.0, worst.1);
    assert_eq!(erf_f32(0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(erf_f32(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(erf_f32(f32::INFINITY), 1.0);
    assert_eq!(erf_f32(f32::NEG_INFINITY), -1.0);
    assert_eq!(erf_f32(1e30), 1.0);
    assert!(erf_f32(f32::NAN).is_nan());
}

/// The exact GELU `v/2 · erfc(−v/√2)` and its derivative
/// `erfc(−v/√2)/2 + v·e^(−v²/2)/√(2π)` in `f64` (libm's `erfc` and `exp`).
fn gelu_and_slope_f64(v: f64) -> (f64, f64) {
    let c = libm::erfc(-v * std::f64::consts::FRAC_1_SQRT_2);
    let d = 0.5 * c + v * libm::exp(-0.5 * v * v) / (2.0 * std::f64::consts::PI).sqrt();
    (0.5 * v * c, d)
}

/// The GELU and its derivative (whose `e^(−v²/2)` is the CDF tail's own
/// exponential, corrected to first order for the rounding of `(v/√2)²`)
/// against `f64` over every 61st `f32` of [−13, 13] (36 million), where
/// the value is a normal number: the value within 8 ulps (the most,
/// 7.3, is where `1 + erf` cancels mildly, x in (−1.4, −1), and in the
/// far left tail), the slope within 9 ulps, or 7e-8 absolute where it
/// crosses 0 (x near −0.75, where ulps mean nothing). Measured: 7.26 and
/// 8.22 ulps, 6.1e-8 absolute (the version with a second exponential for
/// the slope: 7.67 and 9.34 ulps, 7.0e-8).
#[test]
fn gelu_and_its_slope_are_accurate_on_a_dense_sweep() {
    let (mut worst_v, mut worst_d) = ((0.0f64, 0.0f32), (0.0f64, 0.0f32));
    for b in (0..=13.0f32.to_bits()).step_by(61) {
        for x in [f32::from_bits(b), -f32::from_bits(b)] {
            let (v, d) = gelu_and_slope_f64(f64::from(x));
            if (v as f32).abs() >= f32::MIN_POSITIVE {
                let e = ulps(gelu_f32(x), v);
                if e > worst_v.0 {
                    worst_v = (e, x);
                }
            }
            let g = gelu_grad_f32(x);
            if (v as f32).abs() >= f32::MIN_POSITIVE && (f64::from(g) - d).abs() > 7e-8 {
                let e = ulps(g, d);
                if e > worst_d.0 {
                    worst_d = (e, x);
                }
            }
        }
    }
    assert!(
        worst_v.0 <= 8.0,
        "gelu: worst {} ulps at x = {:e}",
        worst_v.0,
        worst_v.1
    );
    assert!(
        worst_d.0 <= 9.0,
        "gelu's slope: worst {} ulps at x = {:e}",
        worst_d.0,
        worst_d.1
    );
}

/// Values around the magnitudes where the slice kernels switch a block of
/// 16 to another form: the small piece alone (`|x| < 1` for `erf`,
/// `|x| < 1.414` for the GELU's `erf(x/√2)`; √2 and the float above it,
/// where `x/√2` reaches 1), the GELU without its far tail (`|x| < 5.5`)
/// and without its far exponential (`|x| < 13`; 13.115, where `x²/2`
/// passes 86 and `e^(−x²/2)` leaves the normal numbers), in blocks that
/// are all below, all above, mixed, with a NaN or an infinity, and a tail
/// shorter than a block.
fn block_cases() -> Vec<f32> {
    let (up, down) = (
        |x: f32| f32::from_bits(x.to_bits() + 1),
        |x: f32| f32::from_bits(x.to_bits() - 1),
    );
    let sqrt2 = std::f32::consts::SQRT_2;
    let edges = [
        down(1.0),
        1.0,
        up(1.0),
        down(1.414),
        1.414,
        sqrt2,
        up(sqrt2),
        down(5.5),
        5.5,
        up(5.5),
        down(13.0),
        13.0,
        up(13.0),
        13.115,
    ];
    let specials = [f32::NAN, f32::INFINITY, -f32::INFINITY];
    let mut v = Vec::new();
    for k in 0..96 {
        for j in 0..16 {
            let t = (k * 16 + j) as f32;
            let x = match k % 8 {
                // all small
                0 => (t * 0.618).sin() * 0.99,
                // one edge value in a small block
                1 if j == 7 => edges[(k / 8) % edges.len()],
                1 => (t * 0.3).cos() * 0.5,
                // the edges themselves, both signs
                2 => edges[(j + k / 8) % edges.len()] * if j % 2 == 0 { 1.0 } else { -1.0 },
                // large
                3 => (t * 0.7).sin() * 6.0,
                // a NaN or an infinity among small values
                4 if j == 3 => specials[(k / 8) % 3],
                4 => (t * 0.9).sin() * 0.3,
                // wide: up to 13 (the far left tail, where the GELU and its
                // slope are smallest, included)
                5 => (t * 0.7).sin() * 12.99,
                // a NaN or an infinity among wide values
                6 if j == 9 => specials[(k / 8) % 3],
                6 => (t * 1.3).cos() * 12.0,
                // one edge value among values below 5.5
                7 if j == 12 => -edges[(k / 8 + 7) % edges.len()],
                _ => (t * 0.45).sin() * 5.0,
            };
            v.push(x);
        }
    }
    v.extend([0.5f32, -0.25, 1.2, -0.0, 0.0, 3.0, 0.1, -9.0, 12.5]);
    v
}

fn same_bits(got: &[f32], want: impl Fn(f32) -> f32, xs: &[f32], what: &str) {
    for (&g, &x) in got.iter().zip(xs) {
        let w = want(x);
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what}({x:e}): {g:e} vs {w:e}"
        );
    }
}

#[test]
fn the_blocked_kernels_give_the_element_functions_bits() -> gradtape::Result<()> {
    use gradtape::Tensor;
    let xs = block_cases();
    let x = Tensor::from_vec(xs.clone(), &[xs.len()])?;
    // (the element functions, made from `gelu_cdf`, whose small form the
    // blocks of small arguments use: `1 + erf_f32(v/√2)` there)
    let r = std::f32::consts::FRAC_1_SQRT_2;
    for &v in xs.iter().filter(|v| v.abs() < 1.414) {
        assert_eq!(
            gelu_cdf(v).to_bits(),
            (1.0 + erf_f32(v * r)).to_bits(),
            "gelu_cdf({v:e})"
        );
    }
    let (gelu, grad) = (gelu_f32, gelu_grad_f32);
    same_bits(&x.erf()?.to_vec::<f32>()?, erf_f32, &xs, "erf");
    same_bits(&x.gelu(false)?.to_vec::<f32>()?, gelu, &xs, "gelu");
    same_bits(&x.gelu_grad()?.to_vec::<f32>()?, grad, &xs, "gelu_grad");
    // the pair a traced program computes together
    let f =
        gradtape::function(|x: &Tensor| -> gradtape::Result<Vec<Tensor>> { Ok(vec![x.gelu(false)?, x.gelu_grad()?]) });
    let both = f.call(&x)?;
    assert!(f.concrete(&x)?.optimized_graph().to_string().contains("GeluAndGrad"));
    same_bits(&both[0].to_vec::<f32>()?, gelu, &xs, "traced gelu");
    same_bits(&both[1].to_vec::<f32>()?, grad, &xs, "traced gelu_grad");
    Ok(())
}
