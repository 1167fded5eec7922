//! The unit tests of `src/function/compile/kernel/epilogue.rs`, moved out of the library.

use gradtape::__internals::function::compile::kernel::epilogue::*;

#[test]
fn gather_reads_rows_and_columns_by_index() {
    let src = [1.0f64, 2.0, 3.0];
    let mut out = [0.0; 7];
    gather(&src, 1, 3, 2, &mut out);
    assert_eq!(out, [3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    gather(&src, 2, 3, 1, &mut out);
    assert_eq!(out, [1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0]);
}

#[test]
fn a_gather_is_the_broadcast_element_by_element_at_any_start_and_length() {
    // rows (q = 1) shorter and longer than the piece, pieces starting
    // inside a row; columns (q > 1)
    for p in [1usize, 2, 3, 7, 64, 100, 1000] {
        let src: Vec<f32> = (0..p).map(|i| i as f32 + 0.5).collect();
        for q in [1usize, 3] {
            for start in [0usize, 1, p / 2, p, 3 * p + 1] {
                for n in [0usize, 1, 5, p, p + 1, 2 * p - 1, 1024, 4097] {
                    let mut out = vec![f32::NAN; n];
                    gather(&src, q, p, start, &mut out);
                    let want: Vec<f32> = (start..start + n).map(|j| src[(j / q) % p]).collect();
                    assert_eq!(out, want, "p {p}, q {q}, start {start}, n {n}");
                }
            }
        }
    }
}

#[test]
fn a_periodic_broadcast_read_from_its_repeats_is_the_gather() {
    // what a register reads in place of a gather: `n` repeats from
    // `start % period`, for any start and any n up to the width
    let width = 1024;
    for (q, p) in [(1usize, 1usize), (1, 3), (1, 100), (1, 4096), (3, 7), (64, 5)] {
        let src: Vec<f64> = (0..p).map(|i| i as f64 * 1.5 - 2.0).collect();
        let (v, period) = periodic(&src, q, p, width).expect("a short period");
        assert_eq!(period, q * p);
        for start in [0usize, 1, period - 1, period, 5 * period + 2, 123_457] {
            for n in [1usize, 7, width - 1, width] {
                let at = start % period;
                let mut want = vec![f64::NAN; n];
                gather(&src, q, p, start, &mut want);
                assert_eq!(&v[at..at + n], &want[..], "q {q}, p {p}, start {start}, n {n}");
            }
        }
    }
    // a long period is gathered, not repeated
    assert!(periodic(&vec![0.0f32; PERIOD_MAX + 1], 1, PERIOD_MAX + 1, width).is_none());
    assert!(periodic(&[0.0f32; 3], 0, 3, width).is_none());
}

#[test]
fn a_streamed_row_sum_matches_the_eager_sum_bit_for_bit() {
    // rows longer than a block, fed in pieces that cut lanes and blocks
    for q in [1usize, 7, 8, 9, 4095, 4096, 4100, 9001] {
        let row: Vec<f32> = (0..q).map(|i| ((i as f32) * 0.37).sin() * 1e3 + 0.1).collect();
        let x = gradtape::Tensor::from_vec(row.clone(), &[1, q]).unwrap();
        let want = x.sum(&[1], false).unwrap().to_vec::<f32>().unwrap()[0];
        for piece in [1usize, 3, 256, 5000] {
            let mut st = State::<f32>::new(Fold::Sum, Axis::Trailing(q), 0..0, true);
            let mut got = [f32::NAN];
            let mut s = 0;
            while s < q {
                let e = (s + piece).min(q);
                st.feed(s, &row[s..e], got.as_mut_ptr());
                s = e;
            }
            assert_eq!(got[0].to_bits(), want.to_bits(), "q = {q}, pieces of {piece}");
        }
    }
}

#[test]
fn a_blocked_fold_adds_bands_of_rows_in_the_element_type_then_in_f64() {
    // a task's partial results, fed in pieces that cut rows and bands:
    // per column, each band of `BAND` rows folded in f32 from the fold's
    // start, the bands' results folded in f64 in order
    for (rows, p) in [(1usize, 5usize), (8, 3), (9, 7), (37, 64), (100, 33)] {
        let x: Vec<f32> = (0..rows * p).map(|i| ((i as f32) * 0.73).sin() * 1e3 + 0.1).collect();
        for fold in [Fold::Sum, Fold::Max, Fold::Min] {
            let mut want = vec![fold.init::<f64>(); p];
            for band in x.chunks(BAND * p) {
                let mut b = vec![fold.init::<f32>(); p];
                for (j, &v) in band.iter().enumerate() {
                    b[j % p] = fold.combine(b[j % p], v);
                }
                for (w, v) in want.iter_mut().zip(b) {
                    *w = fold.combine(*w, v as f64);
                }
            }
            for piece in [1usize, 2, p, 3 * p + 1, 10_000] {
                let mut st = State::<f32>::new(fold, Axis::Blocked(p), 0..0, true);
                let mut s = 0;
                while s < x.len() {
                    let e = (s + piece).min(x.len());
                    st.feed(s, &x[s..e], std::ptr::null_mut());
                    s = e;
                }
                let got = st
                    .finish(std::ptr::null_mut())
                    .expect("a blocked fold's partial results");
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{rows} x {p}, {fold:?}, pieces of {piece}");
            }
        }
    }
}
