//! The tests of `src/ops/random.rs`: dropout's keep-mask, made on integers
//! and vectorised, and the vectorised uniform fill, against the scalar
//! formulas on the counter generator they replaced, bit for bit.
//!
//! (These were unit tests of the library, which `cargo test` never built
//! once the library's own tests were turned off.)

use gradtape::__internals::kernels::cpu::counter::CounterRng;
use gradtape::__internals::ops::random::{dropout_mask, keep_from};
use gradtape::{DType, Tensor};

/// The keep-mask keeps exactly the elements whose uniform draw `unit(i)`
/// is at least `rate` (the float comparison it replaced), in f32 and f64,
/// on lengths that leave vector tails and chunks split between threads.
#[test]
fn dropout_mask_keeps_the_draws_at_or_above_the_rate() {
    let just_above = (0.25 * (1u64 << 53) as f64 + 1.0) / (1u64 << 53) as f64;
    for &rate in &[0.1, 0.5, 0.25, just_above, 1e-12, 0.999_999] {
        for &n in &[1usize, 7, 9, 1001, 70_003] {
            for (seed, dtype) in [(3u64, DType::F32), (11, DType::F64)] {
                let got = dropout_mask(&[n], rate, dtype, seed).unwrap().to_vec_f64();
                assert_eq!(got.len(), n);
                let g = CounterRng::new(seed, 4);
                let scale = 1.0 / (1.0 - rate);
                let scale = if dtype == DType::F32 {
                    scale as f32 as f64
                } else {
                    scale
                };
                let mut kept = 0;
                for (i, &v) in got.iter().enumerate() {
                    let keep = g.unit(i as u64) >= rate;
                    kept += usize::from(keep);
                    let want = if keep { scale } else { 0.0 };
                    assert_eq!(v, want, "rate {rate}, n {n}, {dtype}, element {i}");
                }
                // the draws are uniform: at 70,003 elements the kept share
                // is within 1 % of 1 - rate
                if n == 70_003 {
                    let share = kept as f64 / n as f64;
                    assert!((share - (1.0 - rate)).abs() < 0.01, "rate {rate}: kept {share}");
                }
            }
        }
    }
}

/// The threshold at its edges: a draw of exactly `rate` is kept, the one
/// below it dropped; rate 0 keeps everything.
#[test]
fn keep_threshold_matches_the_float_comparison_at_its_edge() {
    let unit = |k: u64| k as f64 / (1u64 << 53) as f64;
    for &rate in &[0.1, 0.5, 1.0 / 3.0, unit(12345), 0.0] {
        let k = keep_from(rate);
        assert!(unit(k) >= rate, "rate {rate}");
        if k > 0 {
            assert!(unit(k - 1) < rate, "rate {rate}");
        }
    }
    assert_eq!(keep_from(0.0), 0);
    assert_eq!(keep_from(0.5), 1u64 << 52);
}

/// The vectorised uniform fill gives the scalar formula's values, bit for
/// bit, at a length with a vector tail.
#[test]
fn uniform_draws_are_the_scalar_formula() {
    let (lo, hi) = (-2.0, 3.0);
    let got = Tensor::random_uniform(&[5003], lo, hi, DType::F32, 9)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let g = CounterRng::new(9, 1);
    for (i, &v) in got.iter().enumerate() {
        let want = (lo + g.unit(i as u64) * (hi - lo)) as f32;
        assert_eq!(v.to_bits(), want.to_bits(), "element {i}");
    }
}
