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
