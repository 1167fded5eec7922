//! The unit tests of `src/function/compile/diag_matmul.rs`, moved out of the library.

use gradtape::__internals::function::compile::diag_matmul::*;
use gradtape::__internals::ops::desc::DynOp;
use gradtape::DType;
use gradtape::Tensor;

fn mat(v: Vec<f32>, r: usize, c: usize) -> Tensor {
    Tensor::from_vec(v, &[r, c]).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
}

/// A diagonal `n × n` matrix (with `-0` off the diagonal too) and a
/// dense `n × k` one, with negative entries and no zero products.
fn operands(n: usize, k: usize) -> (Tensor, Tensor) {
    let mut d = vec![0.0f32; n * n];
    for i in 0..n {
        d[i * n + i] = match i % 3 {
            0 => -3.5,
            1 => 1e-30,
            _ => (i as f32).sin(),
        };
    }
    d[1] = -0.0;
    let w: Vec<f32> = (0..n * k).map(|i| ((i as f32) * 0.37 + 0.1).sin() * 1e-3).collect();
    (mat(d, n, n), mat(w, n, k))
}

fn op(side: Side, ta: bool, tb: bool) -> DiagMatMul {
    DiagMatMul {
        transpose_a: ta,
        transpose_b: tb,
        side,
    }
}

#[test]
fn a_scaling_equals_the_product_bit_for_bit() {
    let (n, k) = (16, 24);
    let (d, w) = operands(n, k);
    let (_, wt) = operands(k, n);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let w_used = if tb { &wt } else { &w };
        let got = op(Side::Left, ta, tb).scaled(&d, w_used).unwrap().expect("scaled");
        assert_eq!(
            bits(&got),
            bits(&d.matmul_with(w_used, ta, tb).unwrap()),
            "left {ta} {tb}"
        );
        // the other side: a dense `k × n` (or `n × k`) times `d`
        let a_used = if ta { &w } else { &wt };
        let got = op(Side::Right, ta, tb).scaled(a_used, &d).unwrap().expect("scaled");
        assert_eq!(
            bits(&got),
            bits(&a_used.matmul_with(&d, ta, tb).unwrap()),
            "right {ta} {tb}"
        );
    }
}

#[test]
fn zeros_infinities_and_denormals_run_the_product() {
    let (n, k) = (16, 8);
    let (d, w) = operands(n, k);
    let left = op(Side::Left, false, false);
    assert!(left.scaled(&d, &w).unwrap().is_some());
    let with = |t: &Tensor, at: usize, v: f32| {
        let mut x = t.to_vec::<f32>().unwrap();
        x[at] = v;
        mat(x, t.shape()[0], t.shape()[1])
    };
    // 0 · inf is NaN in the product; a zero or denormal product has
    // the product's sign of zero; a denormal off the diagonal is not 0
    let cases = [
        (d.clone(), with(&w, 5 * k + 3, f32::INFINITY)),
        (d.clone(), with(&w, 4 * k + 1, f32::NAN)),
        (d.clone(), with(&w, 2 * k + 2, 0.0)),
        (d.clone(), with(&w, 3 * k + 2, -1e-41)),
        (with(&d, 2 * n + 2, 0.0), w.clone()),
        // 1e-30 · 1e-12: a denormal, flushed to zero
        (d.clone(), with(&w, k + 6, 1e-12)),
        (with(&d, 2 * n + 7, 1e-41), w.clone()),
    ];
    for (i, (dd, ww)) in cases.iter().enumerate() {
        assert!(left.scaled(dd, ww).unwrap().is_none(), "case {i}");
        let y = left.eval(&[dd.clone(), ww.clone()]).unwrap();
        let want = dd.matmul(ww).unwrap();
        let canon = |t: &Tensor| -> Vec<u32> {
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
                .collect()
        };
        assert_eq!(canon(&y[0]), canon(&want), "case {i}");
    }
    // mismatched shapes: the product's error
    assert!(left.eval(&[d.clone(), mat(vec![1.0; 3 * k], 3, k)]).is_err());
    // f64: the product
    let d64 = d.cast(DType::F64).unwrap();
    let w64 = w.cast(DType::F64).unwrap();
    let y = left.eval(&[d64.clone(), w64.clone()]).unwrap();
    assert_eq!(y[0].to_vec_f64(), d64.matmul(&w64).unwrap().to_vec_f64());
}
