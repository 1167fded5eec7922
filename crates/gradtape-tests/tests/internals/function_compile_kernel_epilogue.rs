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
