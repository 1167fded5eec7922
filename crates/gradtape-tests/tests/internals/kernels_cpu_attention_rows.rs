//! The row passes of the fused attention kernels
//! (`src/kernels/cpu/attention_rows.rs`: the forward softmax's maximum,
//! exponentials and sum; the backward pass's `P` and `dS`), against the
//! generic helpers' bits computed here element by element (`math::exp_f32`,
//! `sum_lanes`, `max_lanes`), and whole attention calls on shapes the other
//! tests do not cover against attention written out in `f64`.

use super::kernels_cpu_causal_tiles::{against_online, full_mask, hiding, inputs, near, plain};
use gradtape::__internals::kernels::cpu::attention::{Dims, Dropout};
use gradtape::__internals::kernels::cpu::attention_gemm::{backward, forward};
use gradtape::__internals::kernels::cpu::attention_rows::{exp_sum, probs_and_ds, row_max, vector_rows};
use gradtape::__internals::kernels::cpu::math::{exp_f32, max_lanes, sum_lanes};

/// Rows of every length from 0 to 70 (whole vectors and part-width
/// tails), with the values a softmax meets: hidden keys (`-inf`), NaN,
/// scores far below the maximum (subnormal and zero exponentials) and
/// above the exponential's range.
fn rows() -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for n in 0..=70usize {
        let mut r: Vec<f32> = (0..n)
            .map(|i| ((0.71 * i as f64 + n as f64).sin() * 9.0) as f32)
            .collect();
        if n > 5 {
            r[n / 2] = f32::NEG_INFINITY;
            r[n / 3] = -95.0;
            r[1] = -120.0;
        }
        out.push(r);
    }
    let mut special = vec![0.5f32; 40];
    special[17] = f32::NAN;
    special[3] = 100.0;
    special[33] = -0.0;
    out.push(special);
    out.push(vec![f32::NEG_INFINITY; 19]);
    out
}

/// Each exponential has `exp_f32`'s bits, the sum `sum_lanes`' of them,
/// the maximum `max_lanes`' (NaN passed over), for shifts and scales of
/// either sign; and the vector kernels ran where the CPU has AVX-512.
#[test]
fn row_passes_have_the_generic_bits() {
    let before = vector_rows();
    for row in rows() {
        let m = row_max(&row);
        let want = max_lanes(&row);
        assert!(
            m == want || (m.is_nan() && want.is_nan()),
            "max of {row:?}: {m} vs {want}"
        );
        for (a, b) in [(1.0f32, m), (0.125, 0.3), (-0.7, -2.0), (1.0, 0.0)] {
            let mut x = row.clone();
            let l = exp_sum(&mut x, a, b);
            let e: Vec<f32> = row.iter().map(|&v| exp_f32(a * v - b)).collect();
            for (i, (g, w)) in x.iter().zip(&e).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "e^({a}·{} − {b}) [{i}]: {g} vs {w}", row[i]);
            }
            let lw = sum_lanes(&e);
            assert!(
                l.to_bits() == lw.to_bits() || (l.is_nan() && lw.is_nan()),
                "sum of {} exponentials: {l} vs {lw}",
                row.len()
            );
            // dS = P (dP − D) scale after P
            let mut s = row.clone();
            let mut dp: Vec<f32> = (0..row.len()).map(|i| (i as f32 * 0.37).cos()).collect();
            let dp0 = dp.clone();
            let (dd, scale) = (0.3f32, -0.125f32);
            probs_and_ds(&mut s, &mut dp, a, b, dd, scale);
            for i in 0..row.len() {
                assert_eq!(s[i].to_bits(), e[i].to_bits(), "P [{i}]");
                let w = e[i] * (dp0[i] - dd) * scale;
                assert!(
                    dp[i].to_bits() == w.to_bits() || (dp[i].is_nan() && w.is_nan()),
                    "dS [{i}]: {} vs {w}",
                    dp[i]
                );
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        assert!(vector_rows() > before, "the vector row kernels did not run");
    }
    let _ = before;
}

/// Whole calls, causal and not, on odd lengths (1, 3, 65, 129: part
/// vectors, part tiles, a block of one row) and head widths 32, 80 and
/// 128, forward and backward, against plain `f64` attention; and with a
/// mask that hides some keys and whole rows, and with dropout, against the
/// online kernel run in `f64`.
#[test]
fn odd_shapes_equal_plain_attention() {
    let before = vector_rows();
    for &t in &[1usize, 3, 65, 129] {
        for &d in &[32usize, 80, 128] {
            for causal in [false, true] {
                let (batch, tq, tk) = (2, t, t + 2 * usize::from(!causal));
                let dims = Dims {
                    batch,
                    tq,
                    tk,
                    d,
                    dv: d,
                    scale: 1.0 / (d as f64).sqrt(),
                    causal,
                    dropout: None,
                };
                let [q, k, v, g] = inputs(batch, tq, tk, d, d);
                let what = format!("{batch}x{tq}x{tk} d {d} causal {causal}");
                let (want, want_g) = plain(&dims, &q, &k, &v, None, &g);
                let fwd = forward("t", &dims, &q, &k, &v, None).unwrap();
                near(&fwd, &want, &format!("forward {what}"));
                let grads = backward("t", &dims, &q, &k, &v, None, &fwd, &g).unwrap();
                near(&grads, &want_g, &format!("backward {what}"));
            }
        }
    }
    for &(t, d, causal, dropout) in &[
        (65usize, 80usize, false, None),
        (129, 32, true, None),
        (3, 128, false, Some(Dropout::new(5, 0.3))),
        (129, 80, true, Some(Dropout::new(9, 0.2))),
    ] {
        let (batch, tq, tk) = (2, t, t);
        let [q, k, v, g] = inputs(batch, tq, tk, d, d);
        // every 5th key hidden, and all of row 1
        let (m, m64) = hiding(batch, tq, tk, 5, 2, 1);
        let mask = full_mask(&m, batch, tq, tk);
        let mask64 = full_mask(&m64, batch, tq, tk);
        let dims = Dims {
            batch,
            tq,
            tk,
            d,
            dv: d,
            scale: 0.1,
            causal,
            dropout,
        };
        let what = format!("{batch}x{tq}x{tk} d {d} causal {causal} dropout {}", dropout.is_some());
        let fwd = against_online(&what, &dims, [&q, &k, &v, &g], Some((&mask, &mask64)));
        // the hidden row: output 0, log-sum-exp +inf, in both
        let row = &fwd[(d + 1)..][..d + 1];
        assert!(
            row[..d].iter().all(|&x| x == 0.0) && row[d] == f32::INFINITY,
            "{what}: hidden row {row:?}"
        );
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        assert!(vector_rows() > before, "the vector row kernels did not run");
    }
    let _ = before;
}
