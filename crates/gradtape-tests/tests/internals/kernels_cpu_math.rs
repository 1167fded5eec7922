//! The lane-parallel row helpers of `src/kernels/cpu/math.rs` (softmax's
//! and attention's row maximum and sum).

use gradtape::__internals::kernels::cpu::math::{max_lanes, sum_lanes};

/// Rows of every length from 0 to 40 (whole blocks of eight and
/// remainders), with and without NaN and infinities.
fn rows() -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    for n in 0..41usize {
        let base: Vec<f64> = (0..n)
            .map(|i| (((i * 7919 + n * 31) % 97) as f64 - 48.0) * 0.37)
            .collect();
        out.push(base.clone());
        if n > 0 {
            for special in [f64::NAN, f64::NEG_INFINITY, f64::INFINITY] {
                let mut r = base.clone();
                r[(n * 5) % n] = special;
                out.push(r);
            }
            out.push(vec![f64::NAN; n]);
        }
    }
    out
}

/// The maximum is the same element as a fold in order: NaN is skipped,
/// a row of only NaN (or nothing) gives `-inf`.
#[test]
fn max_lanes_is_the_maximum_of_an_ordered_fold() {
    for r in rows() {
        let want = r.iter().fold(f64::NEG_INFINITY, |a, &x| if x > a { x } else { a });
        assert_eq!(max_lanes(&r).to_bits(), want.to_bits(), "{r:?}");
        let r32: Vec<f32> = r.iter().map(|&x| x as f32).collect();
        let want32 = r32.iter().fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a });
        assert_eq!(max_lanes(&r32).to_bits(), want32.to_bits(), "{r32:?}");
    }
}

/// The sum agrees with an exact (f64 of integers) sum, and propagates NaN
/// and infinities as a sum in order does.
#[test]
fn sum_lanes_sums() {
    for n in 0..41usize {
        // integers: every order of the sum is exact
        let r: Vec<f32> = (0..n).map(|i| ((i * 13) % 11) as f32 - 5.0).collect();
        let want: f64 = r.iter().map(|&x| x as f64).sum();
        assert_eq!(sum_lanes(&r) as f64, want, "n = {n}");
    }
    for r in rows() {
        let ordered: f64 = r.iter().sum();
        let got = sum_lanes(&r);
        if ordered.is_nan() {
            assert!(got.is_nan(), "{r:?}");
        } else if ordered.is_infinite() {
            assert_eq!(got, ordered, "{r:?}");
        } else {
            let scale: f64 = r.iter().map(|x| x.abs()).sum::<f64>().max(1.0);
            assert!((got - ordered).abs() <= 1e-14 * scale, "{r:?}: {got} vs {ordered}");
        }
    }
}
