//! Copies of strided views (`contiguous`, and every kernel that reads a
//! view through a row-major copy): transposes and permutations of every
//! size class (the copy is tiled where a view's rows are columns of its
//! buffer far apart, row by row elsewhere), with slices and reversals on
//! top, in each dtype, against the element each index names.

use gradtape::{DType, Result, Tensor};

/// The element of `shape` at row-major position `i`, as a multi-index
/// (`select_layouts` too).
pub(crate) fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Row-major position of `idx` in `shape`.
fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

/// `x` (values `0, 1, 2, ..` modulo 256, exact in every dtype, in `dtype`) permuted by `perm`,
/// then narrowed along its last axis to `[start, ..)` and, with `rev`,
/// reversed along its first: the copy against the element each index
/// names.
fn check(shape: &[usize], perm: &[usize], start: usize, rev: bool, dtype: DType) -> Result<()> {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n).map(|i| (i % 256) as f64).collect();
    let x = Tensor::from_vec(vals.clone(), shape)?.cast(dtype)?;
    let pshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let last = pshape.len() - 1;
    let start = start.min(pshape[last]);
    let len = pshape[last] - start;
    let mut view = x.permute(perm)?;
    view = view.narrow(last as isize, start, len)?;
    if rev {
        view = view.reverse(&[0])?;
    }
    let got = view.contiguous()?;
    // (an empty copy's strides are those of its shape's nonzero dims)
    assert!(got.numel() == 0 || got.is_contiguous());
    let vshape = view.shape().to_vec();
    let want: Vec<f64> = (0..view.numel())
        .map(|i| {
            let mut idx = unravel(i, &vshape);
            if rev {
                idx[0] = vshape[0] - 1 - idx[0];
            }
            idx[last] += start;
            // position in x: dim perm[d] of x is dim d of the view
            let mut src = vec![0; shape.len()];
            for (d, &p) in perm.iter().enumerate() {
                src[p] = idx[d];
            }
            vals[ravel(&src, shape)]
        })
        .collect();
    let got = match dtype {
        DType::C64 => got.real()?,
        _ => got,
    };
    let got = got.cast(DType::F64)?.to_vec::<f64>()?;
    let want: Vec<f64> = match dtype {
        // (0 and 1 through a bool: nonzero is true)
        DType::Bool => want.iter().map(|&v| (v != 0.0) as u8 as f64).collect(),
        _ => want,
    };
    assert_eq!(
        got, want,
        "{dtype} {shape:?} permuted {perm:?}, from {start} on the last axis, reversed {rev}"
    );
    Ok(())
}

#[test]
fn transposed_matrices_of_every_size_class_copy_exactly() -> Result<()> {
    // (rows of the copy short or long; the buffer's rows a power of two
    // apart (the tiled case) or not; fewer rows than a tile, or a ragged
    // last tile)
    let sizes = [1usize, 3, 8, 17, 64, 255, 256, 513];
    for &m in &sizes {
        for &n in &sizes {
            for dtype in [DType::F32, DType::F64] {
                check(&[m, n], &[1, 0], 0, false, dtype)?;
            }
        }
    }
    for dtype in [DType::F16, DType::BF16, DType::I32, DType::I64, DType::Bool, DType::C64] {
        for &(m, n) in &[(64usize, 300usize), (300, 64), (512, 512), (5, 1024)] {
            check(&[m, n], &[1, 0], 0, false, dtype)?;
        }
    }
    Ok(())
}

#[test]
fn permuted_slices_and_reversals_copy_exactly() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::I64] {
        // NCHW to NHWC and back, a head split's transpose, batched transposes
        for (shape, perm) in [
            (vec![4usize, 64, 16, 16], vec![0usize, 2, 3, 1]),
            (vec![4, 16, 16, 64], vec![0, 3, 1, 2]),
            (vec![2, 128, 4, 32], vec![0, 2, 1, 3]),
            (vec![3, 256, 96], vec![0, 2, 1]),
            (vec![96, 3, 256], vec![2, 0, 1]),
            (vec![2, 3, 4, 5, 6], vec![4, 2, 0, 3, 1]),
        ] {
            for start in [0, 1, 5] {
                for rev in [false, true] {
                    check(&shape, &perm, start, rev, dtype)?;
                }
            }
        }
    }
    Ok(())
}
