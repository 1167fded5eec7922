//! The unit tests of `src/kernels/cpu/eig.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::eig::*;

#[test]
fn eigh_reconstructs_a_symmetric_matrix() {
    let a = [4.0, 1.0, -2.0, 1.0, 3.0, 0.5, -2.0, 0.5, 1.0];
    let (e, v) = eigh(&a, 3);
    assert!(e[0] <= e[1] && e[1] <= e[2]);
    for i in 0..3 {
        for j in 0..3 {
            let r: f64 = (0..3).map(|k| v[i * 3 + k] * e[k] * v[j * 3 + k]).sum();
            assert!((r - a[i * 3 + j]).abs() < 1e-13, "{r} vs {}", a[i * 3 + j]);
        }
    }
}

#[test]
fn svd_and_qr_reconstruct_tall_and_wide_matrices() {
    for (m, n) in [(4, 3), (3, 4), (3, 3)] {
        let a: Vec<f64> = (0..m * n).map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.3).collect();
        let (s, u, v) = svd(&a, m, n);
        let k = m.min(n);
        for i in 0..m {
            for j in 0..n {
                let r: f64 = (0..k).map(|c| u[i * k + c] * s[c] * v[j * k + c]).sum();
                assert!((r - a[i * n + j]).abs() < 1e-13);
            }
        }
        let (q, r) = qr(&a, m, n);
        for i in 0..m {
            for j in 0..n {
                let x: f64 = (0..k).map(|c| q[i * k + c] * r[c * n + j]).sum();
                assert!((x - a[i * n + j]).abs() < 1e-13);
            }
        }
    }
}

#[test]
fn expm_of_a_rotation_generator_is_a_rotation() {
    let t: f64 = 20.0; // large: exercises the squarings
    let e = expm(&[0.0, -t, t, 0.0], 2).unwrap();
    let want = [t.cos(), -t.sin(), t.sin(), t.cos()];
    for (x, y) in e.iter().zip(want) {
        assert!((x - y).abs() < 1e-12, "{e:?}");
    }
}
