//! The `f32` compute paths against the same computation in `f64`.
//!
//! The gradient tables check every op in `f64`; `f32` matrix products and
//! convolutions take other routes (the AVX-512 kernel, `gemm` for thin
//! products, splits over the compute threads by rows, columns or the shared
//! dimension). Each shape below is chosen to land on one of those routes,
//! and the result must match `f64` to within `f32` rounding: the bound grows
//! with the length of the sums (`k`), while any wrong element would be off
//! by a term of order one.

use gradtape::{DType, GradientTape, Padding, Result, Tensor};

/// Deterministic values in [-1, 1].
fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn pair(shape: &[usize], seed: u64) -> Result<(Tensor, Tensor)> {
    let x = Tensor::from_vec(vals(shape.iter().product(), seed), shape)?;
    Ok((x.cast(DType::F32)?, x))
}

/// `got` (f32) against `want` (f64): same shape, every element within `tol`.
fn close(what: &str, got: &Tensor, want: &Tensor, tol: f64) -> Result<()> {
    assert_eq!(got.dtype(), DType::F32, "{what}");
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (g, w) = (got.cast(DType::F64)?.to_vec::<f64>()?, want.to_vec::<f64>()?);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!((a - b).abs() <= tol, "{what}: element {i}: {a} vs {b} (tol {tol})");
    }
    Ok(())
}

#[test]
fn matrix_products_match_f64_on_every_route() -> Result<()> {
    // (m, k, n, transpose a, transpose b)
    let cases: &[(usize, usize, usize, bool, bool)] = &[
        (128, 784, 512, false, false), // wide, split by columns
        (784, 128, 512, true, false),  // split by rows, transposed a
        (128, 512, 512, false, true),  // transposed b (gathered)
        (200, 300, 24, true, false),   // 17..=32 columns
        (300, 70, 16, true, true),     // <= 16 columns
        (9, 9000, 16, true, false),    // thin output, long k: split over k
        (6000, 40, 20, false, false),  // thin row-major a: the gemm route
        (5, 7, 3, false, false),       // tiny
        (33, 1, 65, false, false),     // k = 1
    ];
    for (i, &(m, k, n, ta, tb)) in cases.iter().enumerate() {
        let sa = if ta { [k, m] } else { [m, k] };
        let sb = if tb { [n, k] } else { [k, n] };
        let (a32, a64) = pair(&sa, 2 * i as u64)?;
        let (b32, b64) = pair(&sb, 2 * i as u64 + 1)?;
        let got = a32.matmul_with(&b32, ta, tb)?;
        let want = a64.matmul_with(&b64, ta, tb)?;
        close(
            &format!("{m}x{k}x{n} ta={ta} tb={tb}"),
            &got,
            &want,
            1e-6 * k as f64 + 1e-5,
        )?;
    }
    // batched, with a broadcast batch dim
    let (a32, a64) = pair(&[3, 64, 96], 40)?;
    let (b32, b64) = pair(&[96, 80], 41)?;
    close("batched", &a32.matmul(&b32)?, &a64.matmul(&b64)?, 1e-4)?;
    Ok(())
}

#[test]
fn convolutions_and_their_gradients_match_f64() -> Result<()> {
    // (x shape, filter shape, strides): the bench's layers and an odd one
    let cases: &[(&[usize], &[usize], [i64; 2])] = &[
        (&[8, 28, 28, 1], &[3, 3, 1, 16], [1, 1]),
        (&[8, 14, 14, 16], &[3, 3, 16, 32], [1, 1]),
        (&[3, 11, 9, 5], &[3, 2, 5, 40], [2, 1]),
    ];
    for (i, &(xs, fs, st)) in cases.iter().enumerate() {
        let (x32, x64) = pair(xs, 50 + i as u64)?;
        let (f32_, f64_) = pair(fs, 60 + i as u64)?;
        let run = |x: &Tensor, f: &Tensor| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            tape.watch(x);
            tape.watch(f);
            let y = tape.record(|| x.conv2d(f, st, Padding::Same, [1, 1]))?;
            let loss = tape.record(|| y.square()?.sum_all())?;
            let g = tape.gradient(&loss, &[x, f])?;
            let mut out = vec![y];
            out.extend(g.into_iter().map(|t| t.expect("both are watched")));
            Ok(out)
        };
        let (got, want) = (run(&x32, &f32_)?, run(&x64, &f64_)?);
        let kd = (fs[0] * fs[1] * fs[2]) as f64;
        let rows = (xs[0] * xs[1] * xs[2]) as f64;
        close(&format!("conv {i} forward"), &got[0], &want[0], 1e-6 * kd + 1e-5)?;
        close(&format!("conv {i} dx"), &got[1], &want[1], 1e-5 * kd * fs[3] as f64)?;
        close(&format!("conv {i} df"), &got[2], &want[2], 1e-6 * kd * rows)?;
    }
    Ok(())
}
