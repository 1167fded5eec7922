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

use crate::common::values::uniform as vals;

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
    use Padding::{Same, Valid};
    // (x shape, filter shape, strides, padding, dilations): the bench's
    // layers, then shapes that reach every edge of the direct stride-1
    // kernels (output channels that fill 1, 2 or 3 vectors or leave a
    // masked tail, several column blocks, even and dilated windows with
    // uneven padding, images narrower than a tile, a window as large as the
    // image, one image), and ones that go to im2col + GEMM (many or few
    // channels, strides)
    type Case<'a> = (&'a [usize], &'a [usize], [i64; 2], Padding, [i64; 2]);
    let cases: &[Case] = &[
        (&[8, 28, 28, 1], &[3, 3, 1, 16], [1, 1], Same, [1, 1]),
        (&[8, 14, 14, 16], &[3, 3, 16, 32], [1, 1], Same, [1, 1]),
        (&[2, 7, 9, 3], &[3, 3, 3, 20], [1, 1], Same, [1, 1]),
        (&[1, 5, 6, 7], &[2, 4, 7, 9], [1, 1], Same, [1, 1]),
        (&[3, 12, 10, 4], &[3, 3, 4, 70], [1, 1], Valid, [1, 1]),
        (&[2, 13, 11, 9], &[3, 2, 9, 17], [1, 1], Same, [2, 3]),
        (&[2, 13, 11, 3], &[2, 3, 3, 33], [1, 1], Valid, [3, 2]),
        (&[2, 9, 9, 33], &[1, 1, 33, 16], [1, 1], Valid, [1, 1]),
        (&[4, 1, 1, 6], &[3, 3, 6, 8], [1, 1], Same, [1, 1]),
        (&[1, 3, 40, 1], &[1, 5, 1, 64], [1, 1], Valid, [1, 1]),
        (&[2, 6, 6, 50], &[5, 5, 50, 3], [1, 1], Same, [1, 1]),
        (&[1, 4, 4, 2], &[4, 4, 2, 3], [1, 1], Valid, [1, 1]),
        (&[1, 30, 31, 8], &[3, 3, 8, 48], [1, 1], Same, [1, 1]),
        (&[1, 4, 5, 8], &[2, 3, 8, 16], [1, 1], Same, [100_000, 100_000]),
        (&[2, 8, 9, 70], &[3, 3, 70, 96], [1, 1], Same, [1, 1]),
        (&[3, 11, 9, 5], &[3, 2, 5, 40], [2, 1], Same, [1, 1]),
        (&[2, 10, 12, 3], &[3, 3, 3, 16], [2, 2], Valid, [1, 1]),
    ];
    for (i, &(xs, fs, st, pad, dil)) in cases.iter().enumerate() {
        check_conv(&format!("conv {i}"), xs, fs, st, pad, dil, 50 + i as u64)?;
    }
    Ok(())
}

/// Random stride-1 geometries (the direct kernels' domain): window, dilation,
/// padding, channel and image sizes drawn small, so that image edges,
/// padding and partial tiles dominate.
#[test]
fn random_stride_one_convolutions_match_f64() -> Result<()> {
    let mut s = 0x9e3779b97f4a7c15u64;
    let mut draw = |lo: usize, hi: usize| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        lo + (s >> 33) as usize % (hi - lo + 1)
    };
    for i in 0..40 {
        let (kh, kw, dh, dw) = (draw(1, 4), draw(1, 4), draw(1, 2), draw(1, 2));
        let pad = if draw(0, 1) == 0 { Padding::Same } else { Padding::Valid };
        let (h, w) = (draw(1, 9) + (kh - 1) * dh, draw(1, 9) + (kw - 1) * dw);
        let xs = [draw(1, 3), h, w, draw(1, 20)];
        let fs = [kh, kw, xs[3], draw(1, 60)];
        check_conv(
            &format!("random conv {i} {xs:?} {fs:?} {pad:?} dil {dh},{dw}"),
            &xs,
            &fs,
            [1, 1],
            pad,
            [dh as i64, dw as i64],
            100 + i,
        )?;
    }
    Ok(())
}

/// `conv2d` and both its gradients (of `sum(y^2)`) in `f32` against `f64`.
fn check_conv(
    what: &str,
    xs: &[usize],
    fs: &[usize],
    st: [i64; 2],
    pad: Padding,
    dil: [i64; 2],
    seed: u64,
) -> Result<()> {
    let (x32, x64) = pair(xs, seed)?;
    let (f32_, f64_) = pair(fs, seed + 1000)?;
    let run = |x: &Tensor, f: &Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        tape.watch(x);
        tape.watch(f);
        let y = tape.record(|| x.conv2d(f, st, pad, dil))?;
        let loss = tape.record(|| y.square()?.sum_all())?;
        let g = tape.gradient(&loss, &[x, f])?;
        let mut out = vec![y];
        out.extend(g.into_iter().map(|t| t.expect("both are watched")));
        Ok(out)
    };
    let (got, want) = (run(&x32, &f32_)?, run(&x64, &f64_)?);
    let kd = (fs[0] * fs[1] * fs[2]) as f64;
    let rows = (xs[0] * xs[1] * xs[2]) as f64;
    close(&format!("{what} forward"), &got[0], &want[0], 1e-6 * kd + 1e-5)?;
    close(&format!("{what} dx"), &got[1], &want[1], 1e-5 * kd * fs[3] as f64)?;
    close(&format!("{what} df"), &got[2], &want[2], 1e-6 * kd * rows)?;
    Ok(())
}
