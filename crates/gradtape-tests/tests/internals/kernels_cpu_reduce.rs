//! The unit tests of `src/kernels/cpu/reduce.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::reduce::*;
use gradtape::__internals::kernels::cpu::workers::threads;
use gradtape::Tensor;

#[test]
fn sum_max_min_over_axes() {
    let x = Tensor::from_vec((0..24).map(|v| v as f64).collect(), &[2, 3, 4]).unwrap();
    let s = reduce("t", &x, &[1], ReduceKind::Sum).unwrap();
    assert_eq!(s.shape(), &[2, 4]);
    assert_eq!(s.to_vec::<f64>().unwrap(), vec![12., 15., 18., 21., 48., 51., 54., 57.]);
    let m = reduce("t", &x, &[0, 2], ReduceKind::Max).unwrap();
    assert_eq!(m.to_vec::<f64>().unwrap(), vec![15., 19., 23.]);
    let c = reduce("t", &x, &[0], ReduceKind::Min).unwrap();
    assert_eq!(
        c.to_vec::<f64>().unwrap(),
        (0..12).map(|v| v as f64).collect::<Vec<_>>()
    );
    let all = reduce("t", &x, &[0, 1, 2], ReduceKind::Sum).unwrap();
    assert_eq!(all.to_vec::<f64>().unwrap(), vec![276.0]);
}

/// `n` deterministic values in about [-1, 1], of varied magnitudes.
fn spread_values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503))
                >> 8;
            ((h % 2001) as f32 / 1000.0 - 1.0) * (1.0 + (h % 7) as f32)
        })
        .collect()
}

/// A sum over the leading axes of `shape` (all but the last `kept` dims),
/// against each column's terms added in `f32` in the rows' order, written
/// out here (the kernel's documented order: the first row, then each
/// next one), bit for bit, and against the `f64` sum.
fn leading_sum(shape: &[usize], kept: usize) {
    let n: usize = shape.iter().product();
    let cols: usize = shape[shape.len() - kept..].iter().product();
    let rows = n / cols;
    let x = spread_values(n, 7);
    let t = Tensor::from_vec(x.clone(), shape).unwrap();
    let axes: Vec<usize> = (0..shape.len() - kept).collect();
    let s = reduce("t", &t, &axes, ReduceKind::Sum).unwrap();
    assert_eq!(s.shape(), &shape[shape.len() - kept..]);
    let got = s.to_vec::<f32>().unwrap();
    for j in 0..cols {
        let mut acc = x[j];
        let mut exact = x[j] as f64;
        for i in 1..rows {
            acc += x[i * cols + j];
            exact += x[i * cols + j] as f64;
        }
        assert_eq!(
            got[j].to_bits(),
            acc.to_bits(),
            "column {j} of {shape:?}: {} against {acc}",
            got[j]
        );
        assert!(
            (got[j] as f64 - exact).abs() <= 1e-4 * rows as f64,
            "column {j}: {} against {exact}",
            got[j]
        );
    }
}

#[test]
fn column_sums_split_over_the_threads_by_the_elements_read_keep_each_columns_order() {
    // a bias gradient of a 1024-wide layer over 1024 rows: split where
    // the pool has two threads (1024 outputs alone would not be)
    assert_eq!(column_chunk(1024, 1024) < 1024, threads() > 1);
    leading_sum(&[1024, 1024], 1);
    // a second shape: 100 columns, not a multiple of the 16-column share
    assert_eq!(column_chunk(512, 100) < 100, threads() > 1);
    leading_sum(&[512, 100], 1);
    // a mean over batch and time's sum, [4, 64, 300] over axes 0 and 1
    assert_eq!(column_chunk(256, 300) < 300, threads() > 1);
    leading_sum(&[4, 64, 300], 1);
    // a product of the kept dims: [64, 8, 40] over axis 0
    leading_sum(&[64, 8, 40], 2);
    // small: one task
    assert_eq!(column_chunk(8, 64), 64);
    leading_sum(&[8, 64], 1);
}

#[test]
fn column_sums_take_one_share_per_thread_in_blocks_of_1024_columns() {
    // one share per thread (the widest stretch of each row), at least 16
    // columns, a multiple of 16
    let t = threads();
    assert_eq!(
        column_chunk(1024, 768),
        768usize.div_ceil(t).max(16).next_multiple_of(16)
    );
    assert!(column_chunk(4096, 256) * t >= 256);
    // shares wider than the kernel's 1024-column block, and not a
    // multiple of it or of 16: each share's columns in blocks of 1024 and
    // a remainder (with one thread, one share of 2600 columns), each
    // column's sum bit for bit the fold in the rows' order
    leading_sum(&[40, 2600], 1);
    leading_sum(&[3, 13, 3001], 1);
    // a share narrower than a block, over many rows
    leading_sum(&[8192, 40], 1);
}
