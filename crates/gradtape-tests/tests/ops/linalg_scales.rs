//! The decompositions of matrices far from 1 in scale, and the
//! triangular solve's gradient where its values overflow.
//!
//! Jacobi sweeps and Householder reflections sum squares of the entries,
//! which leave `f64`'s range beyond about 1e±154: before the fix a matrix
//! of 1e-200s had singular values 0 (and so a pseudo-inverse of zeros) and
//! "eigenvalues" equal to its diagonal, and one of 1e160s gave NaN singular
//! values and `R`. The reference values are NumPy's (LAPACK, which scales
//! internally; JAX in f64 agrees to the last digit or two), at scale 1
//! and, divided by the scale, at 1e-300 and 1e300; TensorFlow 2.21's
//! `svd` and `eigh` agree, its `qr` does not (at 1e-300 its `R`'s diagonal
//! is `[3, 2, 4]`, at 1e160 `[-inf, nan, nan]`).

use gradtape::{GradientTape, Result, Tensor};

const BASE: [f64; 9] = [3.0, 1.0, 0.5, 1.0, 2.0, -1.0, 0.5, -1.0, 4.0];
// NumPy 2 (LAPACK) on BASE
const SVD: [f64; 3] = [4.42061103502503, 3.6074191181279636, 0.9719698468470057];
const EIGH: [f64; 3] = [0.9719698468470052, 3.607419118127964, 4.420611035025031];
const QR_DIAG: [f64; 3] = [-3.2015621187164243, -2.006088294144213, 2.4133467269007216];
const SCALES: [f64; 9] = [1e-300, 1e-250, 1e-200, 1e-160, 1.0, 1e160, 1e200, 1e250, 1e300];

fn close(what: &str, got: &[f64], want: &[f64], scale: f64) {
    assert_eq!(got.len(), want.len(), "{what} at scale {scale:e}");
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g / scale, *w);
        assert!(
            (g - w).abs() <= 1e-13 * w.abs().max(1.0),
            "{what} at scale {scale:e}: {got:?}, want {want:?} x scale"
        );
    }
}

fn matrix(scale: f64) -> Result<Tensor> {
    Tensor::from_vec(BASE.iter().map(|x| x * scale).collect::<Vec<f64>>(), &[3, 3])
}

/// `Q`/`U` columns orthonormal and the factors multiplying back to `a`
/// (relative to its scale).
fn reconstructs(what: &str, a: &Tensor, product: &Tensor, orthonormal: &Tensor, scale: f64) -> Result<()> {
    let (a, p) = (a.to_vec::<f64>()?, product.to_vec::<f64>()?);
    for (x, y) in a.iter().zip(&p) {
        assert!(
            (x - y).abs() <= 1e-13 * scale * 5.0,
            "{what} at {scale:e}: product {p:?} against {a:?}"
        );
    }
    let k = orthonormal.shape()[1];
    let gram = orthonormal.matmul_with(orthonormal, true, false)?.to_vec::<f64>()?;
    for (i, g) in gram.iter().enumerate() {
        let want = if i / k == i % k { 1.0 } else { 0.0 };
        assert!(
            (g - want).abs() < 1e-13,
            "{what} at {scale:e}: columns not orthonormal: {gram:?}"
        );
    }
    Ok(())
}

#[test]
fn decompositions_of_tiny_and_huge_matrices_scale_with_them() -> Result<()> {
    for scale in SCALES {
        let a = matrix(scale)?;
        let (s, u, v) = a.svd()?;
        close("svd", &s.to_vec::<f64>()?, &SVD, scale);
        let usv = u.mul(&s.expand_dims(0)?)?.matmul_with(&v, false, true)?;
        reconstructs("svd", &a, &usv, &u, scale)?;
        let (e, vecs) = a.eigh()?;
        close("eigh", &e.to_vec::<f64>()?, &EIGH, scale);
        let vev = vecs.mul(&e.expand_dims(0)?)?.matmul_with(&vecs, false, true)?;
        reconstructs("eigh", &a, &vev, &vecs, scale)?;
        let (q, r) = a.qr()?;
        close("qr", &r.diag_part()?.to_vec::<f64>()?, &QR_DIAG, scale);
        reconstructs("qr", &a, &q.matmul(&r)?, &q, scale)?;
        // the pseudo-inverse through the SVD: the inverse, 1/scale
        let p = a.pinv(None)?.to_vec::<f64>()?;
        let inv = a.inverse()?.to_vec::<f64>()?;
        for (x, y) in p.iter().zip(&inv) {
            assert!(
                (x - y).abs() <= 1e-12 * 2.0 / scale,
                "pinv at {scale:e}: {p:?} against the inverse {inv:?}"
            );
        }
    }
    // wide and tall (the SVD of a wide matrix goes through its transpose)
    let tall = [3.0, 1.0, 1.0, 2.0, -1.0, 0.5];
    for scale in [1e-300, 1.0, 1e300] {
        let t = Tensor::from_vec(tall.iter().map(|x| x * scale).collect::<Vec<f64>>(), &[3, 2])?;
        // NumPy 2: svd(tall) and qr(tall)'s diagonal
        close(
            "tall svd",
            &t.svd()?.0.to_vec::<f64>()?,
            &[3.6694689453411993, 1.6688312254918243],
            scale,
        );
        close(
            "wide svd",
            &t.transpose()?.svd()?.0.to_vec::<f64>()?,
            &[3.6694689453411993, 1.6688312254918243],
            scale,
        );
        close(
            "tall qr",
            &t.qr()?.1.diag_part()?.to_vec::<f64>()?,
            &[-3.3166247903554003, -1.846372364689991],
            scale,
        );
    }
    Ok(())
}

/// The pseudo-inverse of `1e-300·I` is `1e300·I` (NumPy, JAX); it was 0
/// when the SVD's squares underflowed.
#[test]
fn pinv_of_a_tiny_identity_is_huge() -> Result<()> {
    let a = Tensor::from_vec(vec![1e-300f64, 0.0, 0.0, 1e-300], &[2, 2])?;
    let p = a.pinv(None)?.to_vec::<f64>()?;
    assert!(
        (p[0] / 1e300 - 1.0).abs() < 1e-14 && (p[3] / 1e300 - 1.0).abs() < 1e-14,
        "{p:?}"
    );
    assert_eq!((p[1], p[2]), (0.0, 0.0));
    Ok(())
}

/// The gradient of a lower (upper) triangular solve with respect to the
/// triangle it never reads is 0, also where the solution overflows (it
/// was `-inf · 0 = NaN` there): TensorFlow 2.21 gives `[-inf, 0, -inf,
/// -inf]` for this lower solve of `1e-300·I`.
#[test]
fn triangular_solve_gradient_is_zero_in_the_triangle_it_does_not_read() -> Result<()> {
    let b = Tensor::from_vec(vec![1.0f64, 2.0], &[2, 1])?;
    for lower in [true, false] {
        let a = Tensor::from_vec(vec![1e-300f64, 0.0, 0.0, 1e-300], &[2, 2])?;
        let tape = GradientTape::new();
        let s = tape.record(|| {
            tape.watch(&a);
            a.triangular_solve(&b, lower, false)?.sum_all()
        })?;
        let g = tape.gradient(&s, &a)?.expect("a gradient").to_vec::<f64>()?;
        let unread = if lower { g[1] } else { g[2] };
        assert_eq!(unread, 0.0, "lower {lower}: {g:?}");
        assert!(
            g[0] == f64::NEG_INFINITY && g[3] == f64::NEG_INFINITY,
            "lower {lower}: {g:?}"
        );
    }
    Ok(())
}
