//! Fused kernels over inputs that are views with contiguous rows (a column
//! slice of a joined product, a narrowed tensor, a block of rows and
//! columns), which the kernel reads where they lie instead of copying them
//! first (`compile/kernel/rows.rs`): the same bits as the same program
//! over a contiguous copy of the view, and, for elementwise values, as
//! the eager ops. (That the view is not copied is checked by the `alloc`
//! binary, `function_exec.rs`.)

use gradtape::{function, DType, Result, Tensor};

/// Bit patterns of all tensors, with their shapes.
pub(crate) fn all_bits(ts: &[Tensor]) -> Vec<(Vec<usize>, Vec<u64>)> {
    ts.iter()
        .map(|t| (t.shape().to_vec(), t.to_vec_f64().iter().map(|v| v.to_bits()).collect()))
        .collect()
}

/// Deterministic data of `shape` in `dtype`, with a few signed zeros.
fn data(shape: &[usize], seed: f64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| match i % 17 {
            5 => -0.0,
            11 => 0.0,
            _ => (i as f64 * 0.731 + seed).sin() * 2.5,
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// A contiguous copy of `t` (its elements, read out and put back).
fn contiguous(t: &Tensor) -> Tensor {
    Tensor::from_vec(t.to_vec_f64(), t.shape())
        .unwrap()
        .cast(t.dtype())
        .unwrap()
}

/// The views of `x` the tests read: (name, view). Rows of 37, 33, 120,
/// 1100 elements (none a multiple of 16; 1100 wider than a register, so
/// that some pieces lie in one row and some cross rows), lying 50 to 3300
/// elements apart.
type View = fn(&Tensor) -> Result<Tensor>;
const VIEWS: [(&str, &[usize], View); 5] = [
    // the middle third of a joined product's columns (the key weights'
    // gradient of joined query/key/value products)
    ("column slice", &[96, 3 * 37], |x| x.narrow(1, 37, 37)),
    // the last axis narrowed: rows of 37 of 50
    ("last axis narrowed", &[4, 7, 50], |x| x.narrow(2, 3, 37)),
    // the middle axis narrowed: rows of 5 x 24 = 120 of 240 (merged)
    ("middle axis narrowed", &[3, 10, 24], |x| x.narrow(1, 2, 5)),
    // a block of rows and columns
    ("block", &[50, 40], |x| x.slice(&[7, 5], &[30, 33])),
    // a wide slice: 300 rows of 1100 of 3300 (330,000 elements: tasks
    // spread over the threads)
    ("wide column slice", &[300, 3300], |x| x.narrow(1, 1100, 1100)),
];

/// An elementwise chain of two inputs, each read once.
fn chain(x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    Ok(vec![x.mul_scalar(0.5)?.add(y)?.tanh()?, x.mul(y)?.sub_scalar(1.0)?])
}

/// A chain with sums of all elements.
fn sums(x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    Ok(vec![x.square()?.sum_all()?, x.mul_scalar(0.25)?, x.mul(y)?.sum_all()?])
}

#[test]
fn fused_chains_over_views_with_contiguous_rows_give_the_bits_of_eager() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (name, shape, view) in VIEWS {
            let x = data(shape, 0.3, dtype);
            let y = contiguous(&view(&data(shape, 1.7, dtype))?);
            let xv = view(&x)?;
            assert!(!xv.is_contiguous(), "{name}: a view");
            let f = function(move |(x, y): &(Tensor, Tensor)| chain(&view(x)?, y));
            let g = f.concrete(&(x.clone(), y.clone()))?.optimized_graph().to_string();
            assert!(g.contains("Fused"), "{name} {dtype}: {g}");
            let want = chain(&xv, &y)?;
            let got = f.call(&(x.clone(), y.clone()))?;
            assert_eq!(all_bits(&got), all_bits(&want), "{name} {dtype}");
            // and the same program over the contiguous copy
            let h = function(|(x, y): &(Tensor, Tensor)| chain(x, y));
            assert_eq!(
                all_bits(&h.call(&(contiguous(&xv), y))?),
                all_bits(&want),
                "{name} {dtype}"
            );
        }
    }
    Ok(())
}

#[test]
fn fused_sums_over_views_with_contiguous_rows_give_the_bits_of_the_contiguous_copy() -> Result<()> {
    // (half programs hold no sums: f32 and f64)
    for dtype in [DType::F32, DType::F64] {
        for (name, shape, view) in VIEWS {
            let x = data(shape, 0.9, dtype);
            let y = contiguous(&view(&data(shape, 2.3, dtype))?);
            let xv = view(&x)?;
            let f = function(move |(x, y): &(Tensor, Tensor)| sums(&view(x)?, y));
            let h = function(|(x, y): &(Tensor, Tensor)| sums(x, y));
            let got = f.call(&(x.clone(), y.clone()))?;
            // the fused sums add in their own order (chunk by chunk), the
            // same over the view as over its copy
            assert_eq!(
                all_bits(&got),
                all_bits(&h.call(&(contiguous(&xv), y.clone()))?),
                "{name} {dtype}"
            );
            // the elementwise value is eager's
            assert_eq!(
                all_bits(&got[1..2]),
                all_bits(&[xv.mul_scalar(0.25)?]),
                "{name} {dtype}"
            );
        }
    }
    Ok(())
}

#[test]
fn two_slices_of_one_joined_product_read_in_one_kernel_give_eager_bits() -> Result<()> {
    // q, k, v: the thirds of one product's columns, read by one fused
    // chain (as SwiGLU's gate and up halves are)
    let a = data(&[70, 24], 0.4, DType::F32);
    let w = data(&[24, 3 * 45], 1.2, DType::F32);
    let body = |(a, w): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let p = a.matmul(w)?;
        let (q, k, v) = (p.narrow(1, 0, 45)?, p.narrow(1, 45, 45)?, p.narrow(1, 90, 45)?);
        Ok(vec![q.mul(&k)?.add(&v)?.sigmoid()?, v.exp()?])
    };
    let f = function(body);
    let args = (a, w);
    assert_eq!(all_bits(&f.call(&args)?), all_bits(&body(&args)?));
    Ok(())
}

#[test]
fn fused_chains_over_transposed_and_short_row_views_stay_right() -> Result<()> {
    // views that are copied first: innermost elements apart (a transpose),
    // rows shorter than the kernel reads in place (3 of 9)
    let views: [(&[usize], View); 2] = [(&[40, 30], |x| x.transpose()), (&[60, 9], |x| x.narrow(1, 2, 3))];
    for (shape, view) in views {
        let x = data(shape, 0.6, DType::F32);
        let y = contiguous(&view(&data(shape, 0.2, DType::F32))?);
        let f = function(move |(x, y): &(Tensor, Tensor)| chain(&view(x)?, y));
        let want = chain(&view(&x)?, &y)?;
        assert_eq!(all_bits(&f.call(&(x, y))?), all_bits(&want), "{shape:?}");
    }
    Ok(())
}
