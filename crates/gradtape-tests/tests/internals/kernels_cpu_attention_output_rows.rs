//! The forward pass of the blocked attention kernels
//! (`src/kernels/cpu/attention_gemm.rs`) writes every element of its
//! output (it starts from an uncleared buffer): each query row's output
//! and log-sum-exp, against attention written out in `f64` here, on
//! shapes the other tests leave out. Before each call a forward pass of
//! the same size on NaN inputs is dropped, so that a block the allocator
//! hands back holds NaN where a row was left unwritten.

use gradtape::__internals::kernels::cpu::attention::{Dims, Dropout, Mask};
use gradtape::__internals::kernels::cpu::attention_gemm::forward;
use gradtape::__internals::kernels::cpu::causal_tiles::{products, runs_f32};
use gradtape::tensor::Float;

use crate::kernels_cpu_causal_tiles::{full_mask, hiding, inputs};

/// Per query row, its output and log-sum-exp (`dv + 1` values, as the
/// kernels lay them out), in `f64`: `p = softmax(scale·q·kᵀ + mask)` over
/// the keys the row sees, each kept probability times the dropout's
/// factor; a row whose scores are all `-inf` has output 0 and
/// log-sum-exp `+inf`.
fn reference(dims: &Dims, [q, k, v]: [&[f64]; 3], mask: Option<&[f64]>) -> Vec<f64> {
    let Dims {
        batch, tq, tk, d, dv, ..
    } = *dims;
    let mut out = vec![0.0; batch * tq * (dv + 1)];
    for b in 0..batch {
        for i in 0..tq {
            let seen = if dims.causal { (i + 1).min(tk) } else { tk };
            let s: Vec<f64> = (0..seen)
                .map(|j| {
                    let dot: f64 = (0..d).map(|c| q[(b * tq + i) * d + c] * k[(b * tk + j) * d + c]).sum();
                    dims.scale * dot + mask.map_or(0.0, |m| m[(b * tq + i) * tk + j])
                })
                .collect();
            let o = &mut out[(b * tq + i) * (dv + 1)..][..dv + 1];
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY {
                o[dv] = f64::INFINITY;
                continue;
            }
            let sum: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for (j, x) in s.iter().enumerate() {
                let f = dims.dropout.map_or(1.0, |dr| dr.factor((b * tq + i) * tk + j));
                let p = (x - m).exp() / sum * f;
                for c in 0..dv {
                    o[c] += p * v[(b * tk + j) * dv + c];
                }
            }
            o[dv] = m + sum.ln();
        }
    }
    out
}

/// `x` against `want` within `tol` of the largest finite reference value;
/// infinities where the reference has them.
fn near<T: Float>(x: &[T], want: &[f64], tol: f64, what: &str) {
    assert_eq!(x.len(), want.len(), "{what}");
    let top = want
        .iter()
        .filter(|y| y.is_finite())
        .fold(1.0f64, |a, b| a.max(b.abs()));
    for (i, (a, b)) in x.iter().zip(want).enumerate() {
        let a = gradtape::Element::to_f64(*a);
        let ok = if b.is_finite() {
            (a - b).abs() <= tol * top
        } else {
            a == *b
        };
        assert!(ok, "{what} [{i}]: {a} vs {b} (largest {top})");
    }
}

/// The forward pass on `[q, k, v]` (as `T`) after a dropped pass of the
/// same size on NaN inputs (everything else allocated first, so that the
/// next block asked for is the output).
fn poisoned_forward<T: Float>(dims: &Dims, [q, k, v]: [&[f64]; 3], mask: Option<&Mask<'_, T>>) -> Vec<T> {
    let t = |x: &[f64]| x.iter().map(|&y| T::from_f64(y)).collect::<Vec<T>>();
    let nan = |x: &[f64]| vec![T::nan(); x.len()];
    let (q, k, v, nq, nk, nv) = (t(q), t(k), t(v), nan(q), nan(k), nan(v));
    let dirty = forward("t", dims, &nq, &nk, &nv, None).unwrap();
    assert!(dirty.iter().all(|x| x.is_nan()), "the poison is NaN throughout");
    drop(dirty);
    forward("t", dims, &q, &k, &v, mask).unwrap()
}

/// Query lengths 1, 3, 17, 65, 129 (causal and not), heads of 32, 80 and
/// 128, fewer queries than keys (cross-attention, 300 keys), a mask that
/// hides whole rows, dropout: `f32` (the register tiles, where the CPU has
/// AVX-512) within `f32` rounding of the reference, `f64` (the generic
/// products) within `f64` rounding.
#[test]
fn every_output_row_is_written() {
    let cases = [
        (2, 1, 17, 32, 32),
        (2, 3, 65, 80, 80),
        (3, 17, 17, 32, 48),
        (2, 65, 65, 80, 80),
        (1, 129, 129, 128, 128),
        (2, 64, 300, 64, 64),
        (1, 129, 200, 32, 32),
    ];
    let before = products();
    for (batch, tq, tk, d, dv) in cases {
        let [q, k, v, _] = inputs(batch, tq, tk, d, dv);
        let f64s = |x: &[f32]| x.iter().map(|&y| y as f64).collect::<Vec<_>>();
        let (q, k, v) = (f64s(&q), f64s(&k), f64s(&v));
        // every 5th key hidden, and all of row 2 (row 0 where there is one)
        let (m32, m64) = hiding(batch, tq, tk, 5, 1, 2.min(tq - 1));
        let (mask32, mask64) = (full_mask(&m32, batch, tq, tk), full_mask(&m64, batch, tq, tk));
        for causal in [false, true] {
            for masked in [false, true] {
                for dropout in [None, Some(Dropout::new(3, 0.25))] {
                    let dims = Dims {
                        batch,
                        tq,
                        tk,
                        d,
                        dv,
                        scale: 1.0 / (d as f64).sqrt(),
                        causal,
                        dropout,
                    };
                    let what = format!(
                        "{batch}x{tq}x{tk} d {d} dv {dv} causal {causal} mask {masked} dropout {}",
                        dropout.is_some()
                    );
                    let want = reference(&dims, [&q, &k, &v], masked.then_some(&m64[..]));
                    let got = poisoned_forward::<f32>(&dims, [&q, &k, &v], masked.then_some(&mask32));
                    near(&got, &want, 1e-4, &format!("f32 {what}"));
                    let got = poisoned_forward::<f64>(&dims, [&q, &k, &v], masked.then_some(&mask64));
                    near(&got, &want, 1e-10, &format!("f64 {what}"));
                }
            }
        }
    }
    if runs_f32() {
        assert!(products() > before, "the f32 blocks ran on the register tiles");
    }
}
