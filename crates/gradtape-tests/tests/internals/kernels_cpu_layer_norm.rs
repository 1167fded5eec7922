//! LayerNorm's row kernels (`kernels/cpu/layer_norm.rs`) called directly:
//! the forward pass's four loops (with and without `gamma`, `beta`) against
//! the formula, and the lengths the kernels refuse (the rows' loops zip the
//! parameters with each row: a shorter one would leave elements unwritten).

use gradtape::__internals::kernels::cpu::layer_norm::{backward, forward};

/// `(x - mean) / sqrt(var + eps) * gamma + beta` per row of `n`, in f64.
fn formula(x: &[f64], n: usize, gamma: Option<&[f64]>, beta: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let mut out = Vec::new();
    for row in x.chunks(n) {
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            out.push((v - mean) * rstd * gamma.map_or(1.0, |g| g[j]) + beta.map_or(0.0, |b| b[j]));
        }
    }
    out
}

#[test]
fn forward_rows_match_the_formula_with_and_without_parameters() {
    let n = 37;
    let x: Vec<f64> = (0..5 * n).map(|i| (0.37 * i as f64).sin() * 3.0 + 0.5).collect();
    let g: Vec<f64> = (0..n).map(|i| 1.0 + 0.1 * (i as f64).cos()).collect();
    let b: Vec<f64> = (0..n).map(|i| 0.2 * (i as f64).sin()).collect();
    for (gamma, beta) in [
        (Some(&g[..]), Some(&b[..])),
        (Some(&g[..]), None),
        (None, Some(&b[..])),
        (None, None),
    ] {
        let got = forward("layer_norm", &x, n, gamma, beta, 1e-5).unwrap();
        let want = formula(&x, n, gamma, beta, 1e-5);
        assert_eq!(got.len(), want.len());
        for (k, (a, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - w).abs() <= 1e-12,
                "{} {}: element {k}: {a} vs {w}",
                gamma.is_some(),
                beta.is_some()
            );
        }
    }
}

#[test]
fn parameters_or_cotangents_of_the_wrong_length_are_refused() {
    let n = 4;
    let x: Vec<f32> = (0..3 * n).map(|i| i as f32 * 0.5 - 2.0).collect();
    let (short, long, right) = (vec![1.0f32; n - 1], vec![1.0f32; n + 1], vec![1.0f32; n]);
    for bad in [&short, &long] {
        let e = forward("layer_norm", &x, n, Some(bad), None, 1e-5).expect_err("gamma of the wrong length");
        assert!(e.to_string().contains("layer_norm"), "{e}");
        assert!(
            forward("layer_norm", &x, n, Some(&right), Some(bad), 1e-5).is_err(),
            "beta"
        );
        assert!(
            backward("layer_norm_grad", &x, n, Some(bad), &x, 1e-5, None).is_err(),
            "gamma, backward"
        );
    }
    assert!(
        backward("layer_norm_grad", &x, n, Some(&right), &x[1..], 1e-5, None).is_err(),
        "dy"
    );
    for bad in [&x[1..], &[x.clone(), vec![0.0]].concat()[..]] {
        let e = backward("layer_norm_grad", &x, n, Some(&right), &x, 1e-5, Some(bad)).expect_err("added gradient");
        assert!(e.to_string().contains("layer_norm_grad"), "{e}");
    }
    let ok = backward("layer_norm_grad", &x, n, Some(&right), &x, 1e-5, None).unwrap();
    assert_eq!(ok.len(), x.len() + 2 * n);
}

#[test]
fn an_added_gradient_joins_dx_bit_for_bit_and_leaves_the_column_sums() {
    // (the `residual_into_norm_grad` node: `dx + add` from the row kernel
    // must be the bits of the separate addition, the sums untouched)
    let n = 45;
    let x: Vec<f32> = (0..7 * n).map(|i| (0.37 * i as f32).sin() * 2.0 + 0.3).collect();
    let dy: Vec<f32> = (0..7 * n).map(|i| (0.11 * i as f32).cos()).collect();
    let add: Vec<f32> = (0..7 * n).map(|i| (0.23 * i as f32 + 1.0).sin() * 5.0).collect();
    let gamma: Vec<f32> = (0..n).map(|i| 1.0 + 0.05 * i as f32).collect();
    for g in [Some(&gamma[..]), None] {
        let plain = backward("layer_norm_grad", &x, n, g, &dy, 1e-5, None).unwrap();
        let joined = backward("layer_norm_grad", &x, n, g, &dy, 1e-5, Some(&add)).unwrap();
        let m = x.len();
        for k in 0..m {
            assert_eq!(joined[k].to_bits(), (plain[k] + add[k]).to_bits(), "dx[{k}]");
        }
        assert_eq!(&joined[m..], &plain[m..], "dgamma, dbeta");
    }
}

/// The row kernels written out as separate passes over a row, with the
/// order of every sum they take: `Σ v` over lanes of 8 in
/// `f64` (`sum_f64`), and `Σ f(v)` over lanes of 8, each adding runs of 8
/// terms in `f32` before its `f64` lane, then single terms, then the tail
/// (`sum_lanes`, `dot_lanes`).
mod passes {
    pub fn sum_f64(x: &[f32]) -> f64 {
        let mut acc = [0.0f64; 8];
        let whole = x.len() - x.len() % 8;
        for c in x[..whole].chunks_exact(8) {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a += v as f64;
            }
        }
        let mut tail = 0.0f64;
        for &v in &x[whole..] {
            tail += v as f64;
        }
        acc.iter().sum::<f64>() + tail
    }

    pub fn sum_lanes(t: &[f32]) -> f64 {
        let mut acc = [0.0f64; 8];
        let mut blocks = t.chunks_exact(64);
        for b in &mut blocks {
            let mut run = [0.0f32; 8];
            for c in b.chunks_exact(8) {
                for (a, &v) in run.iter_mut().zip(c) {
                    *a += v;
                }
            }
            for (a, &v) in acc.iter_mut().zip(&run) {
                *a += v as f64;
            }
        }
        let mut chunks = blocks.remainder().chunks_exact(8);
        for c in &mut chunks {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a += v as f64;
            }
        }
        let tail: f64 = chunks.remainder().iter().map(|&v| v as f64).sum();
        acc.iter().sum::<f64>() + tail
    }

    /// `(mean, rstd)` of a row.
    pub fn stats(x: &[f32], eps: f64) -> (f32, f32) {
        let n = x.len() as f64;
        let mean = (sum_f64(x) / n) as f32;
        let sq: Vec<f32> = x.iter().map(|&v| (v - mean) * (v - mean)).collect();
        let var = sum_lanes(&sq) / n;
        (mean, (1.0 / (var + eps).sqrt()) as f32)
    }

    /// The forward pass, row by row.
    pub fn forward(x: &[f32], n: usize, gamma: Option<&[f32]>, beta: Option<&[f32]>, eps: f64) -> Vec<f32> {
        let mut out = Vec::new();
        for row in x.chunks(n) {
            let (mean, rstd) = stats(row, eps);
            for (j, &v) in row.iter().enumerate() {
                let h = (v - mean) * rstd;
                out.push(match (gamma, beta) {
                    (Some(g), Some(b)) => h * g[j] + b[j],
                    (Some(g), None) => h * g[j],
                    (None, Some(b)) => h + b[j],
                    (None, None) => h,
                });
            }
        }
        out
    }

    /// The backward pass: `dx` (plus `add`), then `dgamma` and `dbeta`,
    /// their column sums per band of 8 rows in `f32`, the bands in `f64`
    /// per block of `max(⌈rows/64⌉, 8)` rows, the blocks in order.
    pub fn backward(x: &[f32], n: usize, gamma: Option<&[f32]>, dy: &[f32], eps: f64, add: Option<&[f32]>) -> Vec<f32> {
        let rows = x.len() / n;
        let per = rows.div_ceil(64).max(8);
        let mut dx = vec![0.0f32; x.len()];
        let mut total = vec![0.0f64; 2 * n];
        for first in (0..rows).step_by(per) {
            let mut block = vec![0.0f64; 2 * n];
            let mut band = vec![0.0f32; 2 * n];
            let last = (first + per).min(rows);
            for r in first..last {
                let (xr, dr) = (&x[r * n..(r + 1) * n], &dy[r * n..(r + 1) * n]);
                let (mean, rstd) = stats(xr, eps);
                let xh: Vec<f32> = xr.iter().map(|&v| (v - mean) * rstd).collect();
                for j in 0..n {
                    band[j] += dr[j] * xh[j];
                    band[n + j] += dr[j];
                }
                let g: Vec<f32> = (0..n).map(|j| gamma.map_or(dr[j], |gm| dr[j] * gm[j])).collect();
                let gh: Vec<f32> = g.iter().zip(&xh).map(|(&a, &b)| a * b).collect();
                let a = (sum_lanes(&g) / n as f64) as f32;
                let b = (sum_lanes(&gh) / n as f64) as f32;
                for j in 0..n {
                    let d = rstd * (g[j] - a - xh[j] * b);
                    dx[r * n + j] = add.map_or(d, |ad| d + ad[r * n + j]);
                }
                if (r + 1 - first) % 8 == 0 || r + 1 == last {
                    for (s, b) in block.iter_mut().zip(band.iter_mut()) {
                        *s += *b as f64;
                        *b = 0.0;
                    }
                }
            }
            for (t, &s) in total.iter_mut().zip(&block) {
                *t += s;
            }
        }
        dx.extend(total.iter().map(|&t| t as f32));
        dx
    }
}

#[test]
fn f32_rows_give_the_bits_of_the_separate_passes() {
    // (the row statistics, `mean(g)`, `mean(g·x̂)` and the column sums of
    // `dgamma`, `dbeta` each add their terms in a fixed order, by lanes,
    // runs, bands of rows and blocks of bands: a rewrite of the kernels
    // that merges their passes or reorders rows must keep those orders, at
    // row lengths with and without whole blocks of 64, lanes of 8 and a
    // tail, and at row counts that leave bands and blocks partial; the
    // expected bits are the written-out passes above, which follow the
    // kernels' documented order, not numbers taken from the kernels)
    let mut checked = 0;
    for n in [1usize, 3, 8, 13, 64, 71, 100, 384] {
        for rows in [1usize, 7, 9, 17, 600] {
            let m = rows * n;
            let x: Vec<f32> = (0..m)
                .map(|i| (0.37 * i as f32).sin() * 2.0 + 0.3 * (i / n) as f32)
                .collect();
            let dy: Vec<f32> = (0..m).map(|i| (0.11 * i as f32).cos() * 1.5).collect();
            let add: Vec<f32> = (0..m).map(|i| (0.23 * i as f32 + 1.0).sin()).collect();
            let gamma: Vec<f32> = (0..n).map(|i| 1.0 + 0.05 * (i as f32).sin()).collect();
            let beta: Vec<f32> = (0..n).map(|i| 0.1 * (i as f32).cos()).collect();
            for g in [Some(&gamma[..]), None] {
                let got = forward("layer_norm", &x, n, g, Some(&beta), 1e-5).unwrap();
                let want = passes::forward(&x, n, g, Some(&beta), 1e-5);
                for (k, (a, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), w.to_bits(), "forward n {n} rows {rows} [{k}]: {a} vs {w}");
                }
                for ad in [Some(&add[..]), None] {
                    let got = backward("layer_norm_grad", &x, n, g, &dy, 1e-5, ad).unwrap();
                    let want = passes::backward(&x, n, g, &dy, 1e-5, ad);
                    assert_eq!(got.len(), want.len());
                    for (k, (a, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(a.to_bits(), w.to_bits(), "backward n {n} rows {rows} [{k}]: {a} vs {w}");
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 8 * 5 * 4);
}
