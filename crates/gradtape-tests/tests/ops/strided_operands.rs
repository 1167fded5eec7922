//! Binary elementwise ops with operands read through strides (a transpose
//! or permutation of one or both, as `x + y.transpose(1, 2)`): the kernel
//! copies such an operand's runs, tiles of neighbouring rows column by
//! column where its rows are columns of its buffer. Every element against
//! the op of the two elements its index names, in `f64` and rounded to the
//! dtype (exact: the `f64` sum, difference or product of two `f32`s rounds
//! to the `f32` result, double rounding being harmless at that width).

use gradtape::{DType, Result, Tensor};

use super::strided_copies::unravel;

/// Distinct values (`i·0.37` modulo 97, minus 48), exact in `f32`
/// to within their rounding, from a seed.
fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (((i * 37 + seed * 101) % 9700) as f64 / 100.0 - 48.0) as f32 as f64)
        .collect()
}

/// `x op y.permute(perm)` (and `x.permute(perm) op y` with `x` made in
/// the permuted shape's order), `shape` the result's, in `dtype`, against
/// the reference element by element.
fn check(shape: &[usize], perm: &[usize], dtype: DType) -> Result<()> {
    let n: usize = shape.iter().product();
    // `y`'s buffer has the shape whose permutation by `perm` is `shape`
    let mut yshape = vec![0; shape.len()];
    for (d, &p) in perm.iter().enumerate() {
        yshape[p] = shape[d];
    }
    let (xv, yv) = (values(n, 1), values(n, 2));
    let x = Tensor::from_vec(xv.clone(), shape)?.cast(dtype)?;
    let y = Tensor::from_vec(yv.clone(), &yshape)?.cast(dtype)?;
    let yp = y.permute(perm)?;
    assert_eq!(yp.shape(), shape);
    // the element of `y` at index `idx` of the permuted view
    let y_at = |idx: &[usize]| {
        let mut src = vec![0; idx.len()];
        for (d, &p) in perm.iter().enumerate() {
            src[p] = idx[d];
        }
        yv[src.iter().zip(&yshape).fold(0, |acc, (&i, &m)| acc * m + i)]
    };
    let round = |v: f64| if dtype == DType::F32 { v as f32 as f64 } else { v };
    type Op = (
        &'static str,
        fn(&Tensor, &Tensor) -> Result<Tensor>,
        fn(f64, f64) -> f64,
    );
    let ops: [Op; 4] = [
        ("add", |a, b| a.add(b), |a, b| a + b),
        ("sub", |a, b| a.sub(b), |a, b| a - b),
        ("mul", |a, b| a.mul(b), |a, b| a * b),
        ("maximum", |a, b| a.maximum(b), f64::max),
    ];
    for (name, op, f) in ops {
        let want: Vec<f64> = (0..n).map(|i| round(f(xv[i], y_at(&unravel(i, shape))))).collect();
        let got = op(&x, &yp)?.to_vec_f64();
        assert_eq!(got, want, "{name} {dtype:?} {shape:?} perm {perm:?}: x op y.permute");
        // the strided operand first
        let want: Vec<f64> = (0..n).map(|i| round(f(y_at(&unravel(i, shape)), xv[i]))).collect();
        let got = op(&yp, &x)?.to_vec_f64();
        assert_eq!(got, want, "{name} {dtype:?} {shape:?} perm {perm:?}: y.permute op x");
    }
    // both strided: `y.permute(perm) + y.permute(perm)` doubles `y`'s elements
    let got = yp.add(&yp)?.to_vec_f64();
    let want: Vec<f64> = (0..n).map(|i| round(2.0 * y_at(&unravel(i, shape)))).collect();
    assert_eq!(got, want, "{dtype:?} {shape:?} perm {perm:?}: both strided");
    Ok(())
}

#[test]
fn transposed_operands_give_each_elements_op() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        // the last two axes swapped: an attention score's shape, odd
        // sizes (partial tiles), rows of 1000 (too long for a tile), many
        // rows per matrix (tasks that start and end inside a matrix)
        for shape in [
            &[32, 64, 128][..],
            &[3, 17, 33],
            &[2, 5, 1000],
            &[3, 1001, 48],
            &[7, 40, 3],
        ] {
            check(shape, &[0, 2, 1], dtype)?;
        }
        // matrices (rows of a run taken several at a time)
        for shape in [&[512, 256][..], &[4099, 40], &[19, 1]] {
            check(shape, &[1, 0], dtype)?;
        }
        // heads split from a row and permuted (attention's layouts)
        check(&[8, 128, 4, 64], &[0, 2, 1, 3], dtype)?;
        check(&[2, 9, 5, 11], &[0, 3, 1, 2], dtype)?;
        check(&[5, 6, 7], &[2, 0, 1], dtype)?;
    }
    Ok(())
}
