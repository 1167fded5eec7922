//! The unit tests of `src/kernels/cpu/narrow_matmul.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::narrow_matmul::*;

/// The sum as the kernel defines it, element by element.
fn reference(a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), init: &[f32], acc: bool) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = if acc { init[i * n + j] } else { 0.0f32 };
            for p in 0..k {
                s += a[i * k + p] * b[p * n + j];
            }
            out[i * n + j] = s;
        }
    }
    out
}

#[test]
fn every_width_and_row_count_gives_the_reference_bits() {
    for (m, n, k) in [
        (1, 1, 1),
        (3, 5, 7),
        (4, 8, 3),
        (9, 10, 33),
        (13, 16, 20),
        (6, 17, 9),
        (5, 32, 64),
        (64, 10, 256),
        // 32 lanes, an odd row count (two rows at a time on AVX2, four on
        // AVX-512: the last one alone), past a block of b's rows
        (7, 32, 300),
        (3, 25, 520),
    ] {
        let a: Vec<f32> = (0..m * k).map(|i| ((i as f32) * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i as f32) * 0.53).cos() * 0.5).collect();
        let init: Vec<f32> = (0..m * n).map(|i| i as f32 * 0.25).collect();
        for acc in [false, true] {
            let want = reference(&a, &b, (m, n, k), &init, acc);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            // `b` row-major, and stored transposed (column-major)
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            // `a` row-major, and stored transposed (a filter gradient's
            // im2col matrix)
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            for (am, a_strides) in [(&a, (k as isize, 1)), (&at, (1, m as isize))] {
                for (bm, strides) in [(&b, (n as isize, 1)), (&bt, (1, k as isize))] {
                    let mut got = init.clone();
                    unsafe {
                        matmul(
                            (m, n, k),
                            got.as_mut_ptr(),
                            n as isize,
                            acc,
                            am.as_ptr(),
                            a_strides,
                            bm.as_ptr(),
                            strides,
                        )
                    };
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{m}x{n}x{k} acc {acc}, a strides {a_strides:?}, b strides {strides:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn nan_and_infinity_propagate() {
    let a = [f32::NAN, 1.0, f32::INFINITY, 1.0];
    let b = [1.0f32, 2.0];
    let mut out = [0.0f32; 4];
    unsafe {
        matmul(
            (2, 2, 1),
            out.as_mut_ptr(),
            2,
            false,
            a.as_ptr(),
            (2, 1),
            b.as_ptr(),
            (2, 1),
        )
    };
    assert!(out[0].is_nan() && out[1].is_nan());
    assert_eq!(out[2..], [f32::INFINITY, f32::INFINITY]);
}
