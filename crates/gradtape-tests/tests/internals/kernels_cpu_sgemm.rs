//! The unit tests of `src/kernels/cpu/sgemm.rs`, moved out of the library.

use gradtape::__internals::kernels::cpu::sgemm::*;

/// Compares with a plain triple loop over shapes that hit every edge
/// (partial tiles, several K slices, both thread splits, transposes).
#[test]
fn matches_the_naive_product() {
    if !available() {
        return;
    }
    let shapes = [
        (1usize, 1usize, 1usize),
        (5, 17, 3),
        (8, 48, 8),
        (13, 50, 300),
        (128, 130, 784),
        (200, 40, 513),
        (37, 1600, 20),
        (9, 16, 2000),
        (40, 24, 700),
        (300, 10, 9),
        // B read in place (few rows of A), with an edge panel
        (32, 128, 128),
        (16, 100, 64),
        (96, 1600, 33),
        // outputs the 32-column tile takes (48 would pad the last panel)
        (70, 256, 300),
        (24, 1024, 40),
        // an output the 8×48 tile pads slightly more than the 12×32 one
        // (2064 columns for 2048, rows exact both ways), and still takes
        // (`wide_tile`), over two slices of k
        (24, 2048, 300),
        // packed B of 16 panels or more, the tiles a row of tiles at a time
        // (`ROWS_OUTER_PANELS`): several blocks of rows of A (the next one
        // fetched ahead), part-height last tiles, a part-width last panel,
        // two and three slices of k, one row, one step of k
        (200, 800, 300),
        (130, 1000, 517),
        (1, 2000, 5),
        (5, 777, 1),
        // a row-major A packed: taller than one block of rows and times
        // four panels or more (partial
        // tiles, slices of k not a multiple of 16), or rows a multiple of
        // 2 KiB apart
        (130, 200, 37),
        (97, 33, 1024),
        (40, 50, 512),
    ];
    for &(m, n, k) in &shapes {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 23) as f32 * 0.25 - 2.5).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 104729) % 19) as f32 * 0.5 - 4.0).collect();
            // logical A[r][c] at r*rs + c*cs
            let av = if ta {
                View {
                    ptr: a.as_ptr(),
                    rs: 1,
                    cs: m as isize,
                }
            } else {
                View {
                    ptr: a.as_ptr(),
                    rs: k as isize,
                    cs: 1,
                }
            };
            let bv = if tb {
                View {
                    ptr: b.as_ptr(),
                    rs: 1,
                    cs: k as isize,
                }
            } else {
                View {
                    ptr: b.as_ptr(),
                    rs: n as isize,
                    cs: 1,
                }
            };
            let ldc = n + 3;
            let mut c = vec![f32::NAN; m * ldc];
            // SAFETY: the views cover the vectors; `c` has m rows of ldc.
            unsafe { sgemm(m, n, k, av, bv, c.as_mut_ptr(), ldc, false, true) };
            // accumulating doubles it
            let mut c2 = c.clone();
            // SAFETY: as above.
            unsafe { sgemm(m, n, k, av, bv, c2.as_mut_ptr(), ldc, true, true) };
            for i in 0..m {
                for j in 0..n {
                    assert_eq!(c2[i * ldc + j], 2.0 * c[i * ldc + j]);
                }
            }
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0f64;
                    for p in 0..k {
                        // SAFETY: in bounds by construction.
                        let (x, y) = unsafe { (*av.at(i, p), *bv.at(p, j)) };
                        s += x as f64 * y as f64;
                    }
                    let got = c[i * ldc + j] as f64;
                    assert!(
                        (got - s).abs() <= 1e-4 * (1.0 + s.abs()),
                        "{m}x{n}x{k} ta={ta} tb={tb} at ({i},{j}): {got} vs {s}"
                    );
                }
                for j in n..ldc {
                    assert!(c[i * ldc + j].is_nan(), "wrote past n");
                }
            }
        }
    }
}

/// The choice between the 8×48 and the 12×32 tile for outputs wider than
/// 32 columns: the 8×48 one unless its tiles cover more than 1/64 more
/// padding than the 12×32 one's. The expected answers are the padded
/// areas worked out by hand: `[2048, 2048]` 2048×2064 against 2052×2048
/// (0.6 % more: 8×48), `[24, 2048]` 24×2064 against 24×2048 (0.8 %: 8×48),
/// `[1024, 1024]` 1024×1056 against 1032×1024 (2.3 %: 12×32), `[70, 256]`
/// 72×288 against 72×256 (12.5 %: 12×32), `[512, 384]` exact both ways
/// (8×48), `[36, 2048]` 40×2064 against 36×2048 (12 %: 12×32).
#[test]
fn the_wide_tile_is_taken_within_a_64th_of_the_narrow_ones_padding() {
    assert!(wide_tile(2048, 2048));
    assert!(wide_tile(24, 2048));
    assert!(!wide_tile(1024, 1024));
    assert!(!wide_tile(70, 256));
    assert!(wide_tile(512, 384));
    assert!(!wide_tile(36, 2048));
}

/// A strided row-major `A`, read where it lies or packed: here a block of
/// a wider matrix (rows `rs` apart, the buffer ending at the block's last
/// element), with row counts that leave the last tile part-full.
#[test]
fn reads_a_strided_row_major_a_in_place() {
    if !available() {
        return;
    }
    // (the last two are packed: taller than a block of rows, and rows 2 KiB
    // apart)
    for &(m, n, k, rs) in &[
        (1usize, 40usize, 9usize, 16usize),
        (13, 64, 300, 307),
        (29, 48, 17, 24),
        (100, 33, 64, 71),
        (150, 160, 70, 77),
        (50, 48, 100, 512),
    ] {
        let a: Vec<f32> = (0..(m - 1) * rs + k)
            .map(|i| ((i * 31) % 17) as f32 * 0.5 - 4.0)
            .collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 13) % 11) as f32 * 0.25 - 1.0).collect();
        let av = View {
            ptr: a.as_ptr(),
            rs: rs as isize,
            cs: 1,
        };
        let bv = View {
            ptr: b.as_ptr(),
            rs: n as isize,
            cs: 1,
        };
        let mut c = vec![f32::NAN; m * n];
        // SAFETY: the views cover the vectors; `c` has m rows of n.
        unsafe { sgemm(m, n, k, av, bv, c.as_mut_ptr(), n, false, true) };
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|p| a[i * rs + p] as f64 * b[p * n + j] as f64).sum();
                // (small integers and quarters: every product and sum is exact)
                assert_eq!(c[i * n + j] as f64, s, "{m}x{n}x{k} at ({i},{j})");
            }
        }
    }
}

/// A product split by rows over the threads packs `B` once, the threads
/// together, slice of k by slice: each element must be the same sum as on
/// one thread (bit for bit: the packing is shared, the sums' order is not
/// changed), and the naive product's to rounding. The shapes take one or
/// several slices of k (up to the 16 a shared packing holds, and past
/// them, where each thread packs its own), part-width last panels, both
/// tiles (8×48, 12×32), transposed `B`s, and an output wider than one
/// block of columns (packed per thread).
#[test]
fn a_split_by_rows_shares_its_packed_b() {
    if !available() {
        return;
    }
    for &(m, n, k) in &[
        (1024usize, 256usize, 256usize),
        (600, 200, 1000),
        (777, 96, 513),
        (500, 100, 4096),
        (400, 50, 4300),
        (300, 1700, 40),
        (2000, 48, 300),
    ] {
        for tb in [false, true] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 23) as f32 * 0.125 - 1.25).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 104729) % 19) as f32 * 0.25 - 2.0).collect();
            let av = View {
                ptr: a.as_ptr(),
                rs: k as isize,
                cs: 1,
            };
            let bv = match tb {
                true => View {
                    ptr: b.as_ptr(),
                    rs: 1,
                    cs: k as isize,
                },
                false => View {
                    ptr: b.as_ptr(),
                    rs: n as isize,
                    cs: 1,
                },
            };
            let (mut split, mut alone) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            // SAFETY: the views cover the vectors; the outputs have m rows of n.
            unsafe {
                sgemm(m, n, k, av, bv, split.as_mut_ptr(), n, false, true);
                sgemm(m, n, k, av, bv, alone.as_mut_ptr(), n, false, false);
            }
            for (i, (x, y)) in split.iter().zip(&alone).enumerate() {
                assert_eq!(
                    x.to_bits(),
                    y.to_bits(),
                    "{m}x{n}x{k} tb={tb} at {i}: split {x}, one thread {y}"
                );
            }
            // every 37th row against the naive product (quarters times
            // eighths, sums of k terms: exact in f64)
            for i in (0..m).step_by(37) {
                for j in 0..n {
                    let s: f64 = (0..k)
                        .map(|p| {
                            // SAFETY: in bounds by construction.
                            unsafe { *av.at(i, p) as f64 * *bv.at(p, j) as f64 }
                        })
                        .sum();
                    let got = split[i * n + j] as f64;
                    assert!(
                        (got - s).abs() <= 1e-5 * (1.0 + s.abs()),
                        "{m}x{n}x{k} tb={tb} at ({i},{j}): {got} vs {s}"
                    );
                }
            }
        }
    }
}

/// The operands of a weight gradient `Xᵀ @ dY` as blocks of wider
/// matrices: `X` (`k` rows `m + 5` floats apart, the block from column 3)
/// and `dY` (`k` rows `n + 7` apart, from column 2), each buffer ending at
/// its block's last element.
struct WeightGrad {
    x: Vec<f32>,
    y: Vec<f32>,
    lx: usize,
    ly: usize,
    k: usize,
}

impl WeightGrad {
    fn new(m: usize, n: usize, k: usize, fx: impl Fn(usize) -> f32, fy: impl Fn(usize) -> f32) -> Self {
        let (lx, ly) = (m + 5, n + 7);
        let x = (0..(k - 1) * lx + m + 3).map(fx).collect();
        let y = (0..(k - 1) * ly + n + 2).map(fy).collect();
        WeightGrad { x, y, lx, ly, k }
    }

    /// `A` (column-major: `A[i][p] = X[p][3 + i]`) and `B` (row-major:
    /// `B[p][j] = dY[p][2 + j]`).
    fn views(&self) -> (View, View) {
        let av = View {
            ptr: self.x[3..].as_ptr(),
            rs: 1,
            cs: self.lx as isize,
        };
        let bv = View {
            ptr: self.y[2..].as_ptr(),
            rs: self.ly as isize,
            cs: 1,
        };
        (av, bv)
    }

    /// Element `(i, j)` of the product, summed in `f64`.
    fn want(&self, i: usize, j: usize) -> f64 {
        (0..self.k)
            .map(|p| self.x[p * self.lx + 3 + i] as f64 * self.y[p * self.ly + 2 + j] as f64)
            .sum()
    }
}

/// A weight gradient's layout, `Xᵀ @ dY`: a column-major `A` (columns of
/// `Xᵀ` are rows of `X`) and a row-major `B`, both blocks of wider
/// matrices (`X` and `dY` rows `ld` floats apart, each buffer ending at
/// its block's last element, so that fetching rows ahead of the packing
/// runs past it). The shapes take every tile (16×16, 12×32, 8×48), rows
/// that leave the last panel and the last block of rows (96) part-full,
/// slices of k that are not a multiple of the 8 steps packed together,
/// and one or several slices. Each element must equal the naive product
/// exactly (small multiples of a quarter and a half: every product and
/// partial sum is exact in f32 and f64), written or added to `C`, and the
/// split over the threads must give the one thread's bits.
#[test]
fn packs_a_weight_gradients_strided_operands() {
    if !available() {
        return;
    }
    for &(m, n, k) in &[
        (37usize, 16usize, 517usize),
        (250, 64, 300),
        (100, 144, 71),
        (197, 1024, 70),
        (513, 200, 1030),
        (1024, 256, 261),
    ] {
        let g = WeightGrad::new(
            m,
            n,
            k,
            |i| ((i * 31) % 17) as f32 * 0.25 - 2.0,
            |i| ((i * 13) % 11) as f32 * 0.5 - 2.5,
        );
        let (av, bv) = g.views();
        let want: Vec<f64> = (0..m * n).map(|e| g.want(e / n, e % n)).collect();
        let start = |e: usize| (e % 5) as f32 - 2.0;
        let mut outs = Vec::new();
        for par in [false, true] {
            let mut c = vec![f32::NAN; m * n];
            let mut acc: Vec<f32> = (0..m * n).map(start).collect();
            // SAFETY: the views address m×k and k×n elements of the
            // buffers; the outputs have m rows of n.
            unsafe {
                sgemm(m, n, k, av, bv, c.as_mut_ptr(), n, false, par);
                sgemm(m, n, k, av, bv, acc.as_mut_ptr(), n, true, par);
            }
            for e in 0..m * n {
                assert_eq!(c[e] as f64, want[e], "{m}x{n}x{k} par={par} at {e}");
                assert_eq!(
                    acc[e] as f64,
                    want[e] + start(e) as f64,
                    "{m}x{n}x{k} par={par} += at {e}"
                );
            }
            outs.push(c);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&outs[0]), bits(&outs[1]), "{m}x{n}x{k}: split and one thread");
    }
}

/// A column-major `A` (a weight gradient's `Xᵀ`, rows of `X` `lx` floats
/// apart) times few panels of `B` is read where it lies, not packed: the
/// path fires (on one thread, where the counter is kept) for each tile
/// (16×16, 12×32, 8×48), with part-height last tiles in the last block of
/// rows and in earlier ones (`m` past one block of 96 rows), several
/// slices of k, and the operand's buffer ending at its last element; the
/// sums (quarters and halves: exact in f32) equal the f64 ones written
/// out here, written and accumulated, and bit for bit those of a split
/// over the threads. At 16 panels and past them `A` is packed (the
/// counter stays). From two panels the next block of rows (or the next
/// slice's first) is fetched ahead while the kernel runs: shapes with a
/// part-height last block (197, 97 rows) and slices of k that end inside
/// a block (1030 = 5 slices of 206) take every case of the block ahead.
#[test]
fn reads_a_column_major_a_in_place_times_few_panels() {
    if !available() {
        return;
    }
    // (m, n, k, whether A is read in place)
    for &(m, n, k, in_place) in &[
        (37usize, 16usize, 517usize, true),
        (250, 30, 300, true),
        (100, 144, 71, true),
        (197, 100, 600, true),
        (13, 256, 40, true),
        (576, 64, 700, true),
        (97, 64, 1030, true),
        (40, 768, 20, false),
        (30, 1000, 33, false),
    ] {
        let g = WeightGrad::new(
            m,
            n,
            k,
            |i| ((i * 29) % 13) as f32 * 0.25 - 1.5,
            |i| ((i * 17) % 7) as f32 * 0.5 - 1.5,
        );
        let (av, bv) = g.views();
        let want = |i: usize, j: usize| g.want(i, j);
        let ldc = n + 1;
        let mut c = vec![f32::NAN; m * ldc];
        let before = cols_in_place_calls();
        // SAFETY: the views address m×k and k×n elements of the buffers;
        // `c` has m rows of ldc.
        unsafe { sgemm(m, n, k, av, bv, c.as_mut_ptr(), ldc, false, false) };
        assert_eq!(
            cols_in_place_calls() - before,
            usize::from(in_place),
            "{m}x{n}x{k}: A read in place"
        );
        let mut acc: Vec<f32> = (0..m * ldc).map(|e| (e % 3) as f32).collect();
        // SAFETY: as above.
        unsafe { sgemm(m, n, k, av, bv, acc.as_mut_ptr(), ldc, true, false) };
        let mut split = vec![f32::NAN; m * ldc];
        // SAFETY: as above.
        unsafe { sgemm(m, n, k, av, bv, split.as_mut_ptr(), ldc, false, true) };
        for i in 0..m {
            for j in 0..n {
                let e = i * ldc + j;
                assert_eq!(c[e] as f64, want(i, j), "{m}x{n}x{k} at ({i},{j})");
                assert_eq!(
                    acc[e] as f64,
                    want(i, j) + (e % 3) as f64,
                    "{m}x{n}x{k} += at ({i},{j})"
                );
                assert_eq!(split[e].to_bits(), c[e].to_bits(), "{m}x{n}x{k} split at ({i},{j})");
            }
            assert!(c[i * ldc + n].is_nan(), "{m}x{n}x{k}: wrote past n");
        }
    }
}
