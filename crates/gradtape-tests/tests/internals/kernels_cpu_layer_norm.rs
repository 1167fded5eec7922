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
