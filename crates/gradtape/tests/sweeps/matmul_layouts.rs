//! Matrix products of every float and complex dtype on every operand
//! layout the kernels take without copying: row-major, transposed views
//! (`permute`), reversed rows or columns (negative strides, `reverse`), and
//! the `transpose_a`/`transpose_b` flags, each against a plain triple loop
//! in f64 on the operands' values. Sizes run from a single element to
//! products large enough for the blocked kernels and the split over
//! threads, so each path of `kernels/cpu/matmul.rs` and the `gemm` crates
//! behind it (with the complex products as four real ones) is reached.

use gradtape::{Complex, DType, Tensor};

use crate::common::values::uniform as values;

type C64 = Complex<f64>;

/// A `[rows, cols]` tensor of `dt` (complex: real and imaginary parts
/// from the sequence), with its values as complex f64 in row-major order.
fn matrix(rows: usize, cols: usize, dt: DType, seed: u64) -> (Tensor, Vec<C64>) {
    let n = rows * cols;
    let re = values(n, seed);
    let im = if dt.is_complex() {
        values(n, seed + 1000)
    } else {
        vec![0.0; n]
    };
    let z: Vec<C64> = re.iter().zip(&im).map(|(&r, &i)| C64::new(r, i)).collect();
    let t = if dt.is_complex() {
        Tensor::from_vec(z.clone(), &[rows, cols]).unwrap().cast(dt).unwrap()
    } else {
        Tensor::from_vec(re, &[rows, cols]).unwrap().cast(dt).unwrap()
    };
    // the values as stored (rounded to `dt`)
    let stored = t.cast(DType::C128).unwrap().to_vec::<C64>().unwrap();
    (t, stored)
}

/// How an operand is laid out in memory, for the same logical matrix.
#[derive(Clone, Copy, Debug)]
enum Layout {
    RowMajor,
    /// a column-major buffer, seen through `permute([1, 0])`
    Transposed,
    /// rows stored last to first, seen through `reverse([0])`
    RowsReversed,
    /// columns stored last to first, seen through `reverse([1])`
    ColsReversed,
}

const LAYOUTS: [Layout; 4] = [
    Layout::RowMajor,
    Layout::Transposed,
    Layout::RowsReversed,
    Layout::ColsReversed,
];

/// A view of logical shape `[rows, cols]` laid out as `l`, and its values
/// in row-major order.
fn operand(rows: usize, cols: usize, dt: DType, seed: u64, l: Layout) -> (Tensor, Vec<C64>) {
    match l {
        Layout::RowMajor => matrix(rows, cols, dt, seed),
        Layout::Transposed => {
            let (t, v) = matrix(cols, rows, dt, seed);
            let mut w = vec![C64::new(0.0, 0.0); rows * cols];
            for i in 0..rows {
                for j in 0..cols {
                    w[i * cols + j] = v[j * rows + i];
                }
            }
            (t.permute(&[1, 0]).unwrap(), w)
        }
        Layout::RowsReversed => {
            let (t, v) = matrix(rows, cols, dt, seed);
            let w = (0..rows)
                .rev()
                .flat_map(|i| v[i * cols..(i + 1) * cols].to_vec())
                .collect();
            (t.reverse(&[0]).unwrap(), w)
        }
        Layout::ColsReversed => {
            let (t, v) = matrix(rows, cols, dt, seed);
            let w = (0..rows)
                .flat_map(|i| (0..cols).rev().map(move |j| (i, j)))
                .map(|(i, j)| v[i * cols + j])
                .collect();
            (t.reverse(&[1]).unwrap(), w)
        }
    }
}

/// `op(a) @ op(b)` in f64 for row-major `a` (`[m, k]`, or `[k, m]` when
/// `ta`) and `b`, `op` the transpose when its flag is set.
fn reference(a: &[C64], b: &[C64], (m, k, n): (usize, usize, usize), ta: bool, tb: bool) -> Vec<C64> {
    let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
    let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
    let mut out = vec![C64::new(0.0, 0.0); m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    out
}

#[test]
fn products_on_every_layout_equal_the_triple_loop() {
    let sizes = [
        (1, 1, 1),
        (3, 5, 2),
        (7, 1, 9),
        (17, 33, 12),
        (64, 48, 80),
        (130, 70, 96),
    ];
    let mut seed = 1;
    let mut checked = 0;
    for dt in [DType::F32, DType::F64, DType::C64, DType::C128] {
        // f32 and complex64 sum in f32: a bound on the rounding of a sum of k
        // products of numbers below 1 in magnitude
        let eps = if matches!(dt, DType::F32 | DType::C64) {
            1e-6
        } else {
            1e-14
        };
        for &(m, k, n) in &sizes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for la in LAYOUTS {
                    for lb in LAYOUTS {
                        seed += 2;
                        let (ar, ac) = if ta { (k, m) } else { (m, k) };
                        let (br, bc) = if tb { (n, k) } else { (k, n) };
                        let (a, av) = operand(ar, ac, dt, seed, la);
                        let (b, bv) = operand(br, bc, dt, seed + 7, lb);
                        let y = a.matmul_with(&b, ta, tb).unwrap();
                        assert_eq!(y.dtype(), dt);
                        assert_eq!(y.shape(), &[m, n]);
                        let got = y.cast(DType::C128).unwrap().to_vec::<C64>().unwrap();
                        let want = reference(&av, &bv, (m, k, n), ta, tb);
                        let tol = 4.0 * eps * k as f64;
                        for (idx, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).norm() <= tol,
                                "{dt} {m}x{k}x{n} ta={ta} tb={tb} a {la:?} b {lb:?}: element {idx} is {g}, want {w}"
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 4 * 6 * 4 * 16);
}

#[test]
fn batched_complex_products_with_a_broadcast_operand() {
    // [2, 3, m, k] @ [k, n]: the right operand is shared by every batch
    let (m, k, n) = (9, 20, 11);
    for dt in [DType::C64, DType::C128] {
        let (a, av) = matrix(6 * m, k, dt, 40);
        let a = a.reshape(&[2, 3, m, k]).unwrap();
        let (b, bv) = operand(k, n, dt, 41, Layout::Transposed);
        let got = a
            .matmul(&b)
            .unwrap()
            .cast(DType::C128)
            .unwrap()
            .to_vec::<C64>()
            .unwrap();
        let eps = if dt == DType::C64 { 1e-6 } else { 1e-14 };
        for batch in 0..6 {
            let want = reference(&av[batch * m * k..(batch + 1) * m * k], &bv, (m, k, n), false, false);
            for (g, w) in got[batch * m * n..(batch + 1) * m * n].iter().zip(&want) {
                assert!((g - w).norm() <= 4.0 * eps * k as f64, "{dt} batch {batch}: {g} vs {w}");
            }
        }
    }
}
