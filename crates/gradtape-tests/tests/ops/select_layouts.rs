//! `Tensor::where_` over every layout its kernel tells apart: a condition
//! constant along each output row (a mask of whole rows, as attention's
//! hidden queries: the row of one operand is copied), all three
//! contiguous along the row, and strided or broadcast rows, with views
//! (transposed, narrowed, reversed) on top, against the element each
//! index picks.

use gradtape::{DType, Result, Tensor};

use super::strided_copies::unravel;

/// The element of `v` (row-major, of `shape`) that broadcasting to an
/// output index `idx` reads (`shape` aligned to the right).
fn at<T: Copy>(v: &[T], shape: &[usize], idx: &[usize]) -> T {
    let skip = idx.len() - shape.len();
    let pos = shape
        .iter()
        .zip(&idx[skip..])
        .fold(0, |acc, (&n, &i)| acc * n + if n == 1 { 0 } else { i });
    v[pos]
}

/// `where_(c, a, b)` against the element each output index picks.
fn check(c: &Tensor, a: &Tensor, b: &Tensor, what: &str) -> Result<()> {
    let got = Tensor::where_(c, a, b)?;
    let (cv, av, bv) = (c.to_vec::<bool>()?, a.to_vec_f64(), b.to_vec_f64());
    let g = got.to_vec_f64();
    assert_eq!(got.dtype(), a.dtype(), "{what}");
    for (i, &y) in g.iter().enumerate() {
        let idx = unravel(i, got.shape());
        let want = if at(&cv, c.shape(), &idx) {
            at(&av, a.shape(), &idx)
        } else {
            at(&bv, b.shape(), &idx)
        };
        assert_eq!(y, want, "{what}: element {idx:?}");
    }
    Ok(())
}

/// Distinct values `base, base + 1, ..` of `shape` in `dtype`.
fn ramp(shape: &[usize], base: f64, dtype: DType) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| base + i as f64).collect::<Vec<_>>(), shape)?.cast(dtype)
}

/// A condition of `shape`, true where `(i * 7 + 3) % 5 < 2` (no period
/// that lines up with the rows).
fn mask(shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (i * 7 + 3) % 5 < 2).collect::<Vec<_>>(), shape)
}

#[test]
fn where_picks_the_indexed_element_for_every_layout() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::I32, DType::I64, DType::F16, DType::BF16] {
        // the condition constant along rows: attention's hidden queries
        // `[b, 1, tq, 1]` choosing between `[b, h, 1, d]` and `[b, h, tq, d]`
        let (c, a, b) = (
            mask(&[3, 1, 5, 1])?,
            ramp(&[3, 2, 1, 7], 100.0, dtype)?,
            ramp(&[3, 2, 5, 7], -50.0, dtype)?,
        );
        check(&c, &a, &b, &format!("{dtype:?} row mask"))?;
        check(&c, &b, &a, &format!("{dtype:?} row mask, swapped"))?;
        check(
            &c,
            &a,
            &Tensor::scalar(0.0f64).cast(dtype)?,
            &format!("{dtype:?} row mask, zero"),
        )?;
        // all contiguous, rows long enough for several threads
        let (c, a, b) = (
            mask(&[300, 257])?,
            ramp(&[300, 257], 1.0, dtype)?,
            ramp(&[300, 257], -9.0e3, dtype)?,
        );
        check(&c, &a, &b, &format!("{dtype:?} contiguous"))?;
        // contiguous from offsets into their buffers (rows cut off the
        // front), one run split over the threads
        let (c, a, b) = (
            mask(&[303, 257])?.narrow(0, 3, 300)?,
            ramp(&[301, 257], 1.0, dtype)?.narrow(0, 1, 300)?,
            ramp(&[302, 257], -9.0e3, dtype)?.narrow(0, 2, 300)?,
        );
        check(&c, &a, &b, &format!("{dtype:?} contiguous at offsets"))?;
        // condition varying along the row, an operand broadcast along it
        let (c, a, b) = (mask(&[4, 9])?, ramp(&[4, 1], 5.0, dtype)?, ramp(&[9], -5.0, dtype)?);
        check(&c, &a, &b, &format!("{dtype:?} broadcast operands"))?;
        // one run with a scalar operand, long enough to be split over the
        // threads (`where(mask, 0, x)`), either side, and both scalars
        let zero = Tensor::scalar(0.0f64).cast(dtype)?;
        let (c, a) = (mask(&[300, 257])?, ramp(&[300, 257], 1.0, dtype)?);
        check(&c, &zero, &a, &format!("{dtype:?} scalar, run"))?;
        check(&c, &a, &zero, &format!("{dtype:?} run, scalar"))?;
        check(
            &c,
            &zero,
            &Tensor::scalar(7.0f64).cast(dtype)?,
            &format!("{dtype:?} two scalars"),
        )?;
        // a scalar condition, and a condition narrowed from a wider one
        check(
            &Tensor::scalar(false),
            &a,
            &zero,
            &format!("{dtype:?} scalar condition"),
        )?;
        let cn = mask(&[300, 260])?.narrow(1, 3, 257)?;
        check(&cn, &a, &zero, &format!("{dtype:?} narrowed condition, scalar"))?;
        // rows: an operand broadcast over the leading axis (a bias row), a
        // condition broadcast over it (a key mask), each with the other
        // operand a run or a scalar
        let row = ramp(&[257], -300.0, dtype)?;
        check(&c, &a, &row, &format!("{dtype:?} run, row"))?;
        check(&c, &row, &zero, &format!("{dtype:?} row, scalar"))?;
        let ck = mask(&[1, 257])?;
        check(&ck, &a, &zero, &format!("{dtype:?} key mask, scalar"))?;
        check(&ck, &row, &a, &format!("{dtype:?} key mask, row and run"))?;
        // views: a transposed condition, a narrowed and a reversed operand
        let c = mask(&[6, 4])?.permute(&[1, 0])?;
        let a = ramp(&[4, 9], 0.0, dtype)?.narrow(1, 2, 6)?;
        let b = ramp(&[4, 6], 40.0, dtype)?.reverse(&[1])?;
        check(&c, &a, &b, &format!("{dtype:?} views"))?;
        // a row-constant condition with a transposed and a reversed operand
        let c = mask(&[5, 1])?;
        let a = ramp(&[8, 5], 0.0, dtype)?.permute(&[1, 0])?;
        let b = ramp(&[5, 8], 70.0, dtype)?.reverse(&[1])?;
        check(&c, &a, &b, &format!("{dtype:?} row mask over views"))?;
    }
    Ok(())
}

/// The chosen elements' bits are kept: `-0.0` and NaN payloads (the
/// kernels blend the operands' bits), in one run and in rows, and for
/// booleans.
#[test]
fn where_keeps_the_bits_of_the_chosen_elements() -> Result<()> {
    let payload = f32::from_bits(0x7fc0_1234);
    let n = 3 * 4099;
    let xs: Vec<f32> = (0..n).map(|i| [-0.0, payload, 1.5, -f32::INFINITY][i % 4]).collect();
    let x = Tensor::from_vec(xs.clone(), &[3, 4099])?;
    let c = mask(&[3, 4099])?;
    let cv = c.to_vec::<bool>()?;
    let neg_zero = Tensor::scalar(-0.0f32);
    // (each picks `x` where `c` holds, else -0.0)
    for got in [
        Tensor::where_(&c, &x, &neg_zero)?,
        Tensor::where_(&c.logical_not()?, &neg_zero, &x)?,
        Tensor::where_(&c, &x, &Tensor::from_vec(vec![-0.0f32; 4099], &[4099])?)?,
    ] {
        for (i, (&g, &ci)) in got.to_vec::<f32>()?.iter().zip(&cv).enumerate() {
            let want = if ci { xs[i] } else { -0.0 };
            assert_eq!(g.to_bits(), want.to_bits(), "element {i}");
        }
    }
    let (t, f) = (Tensor::from_vec(vec![true; n], &[3, 4099])?, Tensor::scalar(false));
    assert_eq!(Tensor::where_(&c, &t, &f)?.to_vec::<bool>()?, cv);
    Ok(())
}
