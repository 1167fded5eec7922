//! Sums, maxima and minima of views (permuted, sliced, both) over every
//! set of axes, against a plain loop in `f64` over the view's elements.
//!
//! The kernel walks a view in one of three ways (reduced axes leading on a
//! contiguous input, reduced axes trailing, or a copy first) and splits the
//! work over the threads by output elements, by whole rows or by parts of
//! one row; the shapes below are large enough for the parallel splits and
//! include short rows (a reduced axis of 2, or none at all, where each
//! element is its own result), which once ran a task per element.

use gradtape::{DType, Result, Tensor};

use crate::common::values::uniform as vals;

/// The reference: `op` folded in `f64` over the `axes` of `x`'s
/// (row-major) elements, in the kept axes' order.
fn reference(x: &[f64], shape: &[usize], axes: &[usize], op: &str) -> Vec<f64> {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let n_out: usize = kept.iter().map(|&d| shape[d]).product();
    let init = match op {
        "sum" => 0.0,
        "max" => f64::NEG_INFINITY,
        _ => f64::INFINITY,
    };
    let mut out = vec![init; n_out];
    let mut idx = vec![0usize; shape.len()];
    for &v in x {
        let o = kept.iter().fold(0, |acc, &d| acc * shape[d] + idx[d]);
        out[o] = match op {
            "sum" => out[o] + v,
            "max" => out[o].max(v),
            _ => out[o].min(v),
        };
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Every subset of `0..rank` (as signed axes).
fn subsets(rank: usize) -> Vec<Vec<usize>> {
    (0..1usize << rank)
        .map(|m| (0..rank).filter(|d| m >> d & 1 == 1).collect())
        .collect()
}

/// `x` reduced every way, in `dtype`, against [`reference`].
fn check(what: &str, x: &Tensor, dtype: DType) -> Result<()> {
    let x = x.cast(dtype)?;
    let shape = x.shape().to_vec();
    let vals64 = x.cast(DType::F64)?.to_vec::<f64>()?;
    for axes in subsets(shape.len()) {
        let signed: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
        // the sum's bound: f32 rounding of the terms' magnitudes
        let row: usize = axes.iter().map(|&a| shape[a]).product();
        let tol = match dtype {
            DType::F32 => 1e-6 * row.max(1) as f64,
            _ => 1e-12 * row.max(1) as f64,
        };
        for op in ["sum", "max", "min"] {
            let got = match op {
                "sum" => x.sum(&signed, false)?,
                "max" => x.max(&signed, false)?,
                _ => x.min(&signed, false)?,
            };
            let want = reference(&vals64, &shape, &axes, op);
            let kept: Vec<usize> = (0..shape.len())
                .filter(|d| !axes.contains(d))
                .map(|d| shape[d])
                .collect();
            assert_eq!(got.shape(), &kept[..], "{what} {op} over {axes:?}");
            let got = got.cast(DType::F64)?.to_vec::<f64>()?;
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = match op {
                    "sum" => (g - w).abs() <= tol,
                    _ => g == w,
                };
                assert!(ok, "{what} {dtype:?} {op} over {axes:?}: element {i}: {g} vs {w}");
            }
        }
    }
    Ok(())
}

/// A view: the tensor's shape, the permutation, then the slice's start
/// and size.
type View<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize]);

#[test]
fn reductions_of_views_over_every_set_of_axes_match_a_loop() -> Result<()> {
    let cases: &[View] = &[
        // attention's packed output [.., dv + 1], its first dv columns
        (&[8, 4, 128, 65], &[0, 1, 2, 3], &[0, 0, 0, 0], &[8, 4, 128, 64]),
        // a transposed matrix with a short axis
        (&[20000, 2], &[1, 0], &[0, 0], &[2, 20000]),
        (&[3, 17000, 2], &[2, 0, 1], &[0, 0, 0], &[2, 3, 17000]),
        // permuted and cut on both sides
        (&[40, 30, 50], &[2, 0, 1], &[3, 5, 1], &[40, 30, 20]),
        (&[5, 6, 7, 8], &[3, 1, 0, 2], &[1, 2, 0, 3], &[6, 4, 5, 4]),
        // no view: contiguous
        (&[300, 2, 70], &[0, 1, 2], &[0, 0, 0], &[300, 2, 70]),
    ];
    for (k, &(shape, perm, begin, size)) in cases.iter().enumerate() {
        let x = Tensor::from_vec(vals(shape.iter().product(), 40 + k as u64), shape)?;
        let view = x.permute(perm)?.slice(begin, size)?;
        let what = format!("{shape:?} permuted {perm:?} cut to {begin:?}+{size:?}");
        for dtype in [DType::F32, DType::F64] {
            check(&what, &view, dtype)?;
        }
        check_arg(&what, &view)?;
    }
    Ok(())
}

/// `argmax` and `argmin` of `x` over each axis, and `prod` over each
/// axis (of values near 1), against loops over the view's elements.
fn check_arg(what: &str, x: &Tensor) -> Result<()> {
    let shape = x.shape().to_vec();
    let v = x.to_vec::<f64>()?;
    let near_one = x.mul_scalar(0.01)?.add_scalar(1.0)?;
    let w = near_one.to_vec::<f64>()?;
    let strides: Vec<usize> = (0..shape.len()).map(|d| shape[d + 1..].iter().product()).collect();
    for a in 0..shape.len() {
        let kept: Vec<usize> = (0..shape.len()).filter(|&d| d != a).collect();
        let n_out: usize = kept.iter().map(|&d| shape[d]).product();
        let (mut amax, mut amin, mut prod) = (vec![0i64; n_out], vec![0i64; n_out], vec![1.0f64; n_out]);
        for o in 0..n_out {
            // the flat index of the row's first element
            let (mut rem, mut base) = (o, 0);
            for &d in kept.iter().rev() {
                base += (rem % shape[d]) * strides[d];
                rem /= shape[d];
            }
            let at = |k: usize| base + k * strides[a];
            for k in 0..shape[a] {
                if v[at(k)] > v[at(amax[o] as usize)] {
                    amax[o] = k as i64;
                }
                if v[at(k)] < v[at(amin[o] as usize)] {
                    amin[o] = k as i64;
                }
                prod[o] *= w[at(k)];
            }
        }
        assert_eq!(x.argmax(a as isize)?.to_vec::<i64>()?, amax, "{what}: argmax over {a}");
        assert_eq!(x.argmin(a as isize)?.to_vec::<i64>()?, amin, "{what}: argmin over {a}");
        let got = near_one.prod(&[a as isize], false)?.to_vec::<f64>()?;
        for (i, (g, e)) in got.iter().zip(&prod).enumerate() {
            assert!(
                (g - e).abs() <= 1e-12 * e.abs() * shape[a] as f64,
                "{what}: prod over {a}: element {i}: {g} vs {e}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_sum_over_no_axes_is_the_input_bit_for_bit() -> Result<()> {
    // TensorFlow: reduce_sum over axis=[] returns its input (a -0.0
    // stays -0.0); here contiguous and through a strided view.
    let mut v = vals(4 * 40000, 7);
    v[3] = -0.0;
    v[40001] = f64::NAN;
    let x = Tensor::from_vec(v.clone(), &[4, 40000])?.cast(DType::F32)?;
    for t in [x.clone(), x.permute(&[1, 0])?.slice(&[0, 0], &[40000, 3])?] {
        let want = t.to_vec::<f32>()?;
        for got in [t.sum(&[], false)?, t.max(&[], false)?, t.min(&[], false)?] {
            assert_eq!(got.shape(), t.shape());
            let got = got.to_vec::<f32>()?;
            assert!(
                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "an identity reduction changed bits"
            );
        }
    }
    Ok(())
}

/// The bits of an `f32`, `f64`, `i32` or `i64` tensor.
fn bits(t: &Tensor) -> Result<Vec<u64>> {
    Ok(match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.iter().map(|v| u64::from(v.to_bits())).collect(),
        DType::F64 => t.to_vec::<f64>()?.iter().map(|v| v.to_bits()).collect(),
        DType::I32 => t.to_vec::<i32>()?.iter().map(|&v| v as u64).collect(),
        _ => t.to_vec::<i64>()?.iter().map(|&v| v as u64).collect(),
    })
}

#[test]
fn middle_axes_reduce_in_place_with_the_bits_of_trailing_axes() -> Result<()> {
    // A run of reduced axes followed by kept axes that lie side by side is
    // reduced where it lies; each result must be the bits of the same
    // values copied with the reduced axes last (each output's terms one
    // contiguous row): the same lanes, blocks of 4096 and order. Rows of
    // 2, 7 (no whole group of 8 lanes), 9 and 30 (a remainder), 5000 (two
    // blocks); inner widths under, at and past a block of 64 columns;
    // grouped key/value heads' gradient [16, 2, 2, 64, 32] over its third
    // axis (split over the threads); views: the last axis cut (rows a
    // stride apart), kept outer axes permuted (no one step) or reversed;
    // NaN and -0.0 among the values.
    // (shape, permutation, slice begin, slice size (empty: none), axes)
    let cases: &[(View, &[usize])] = &[
        ((&[16, 2, 2, 64, 32], &[0, 1, 2, 3, 4], &[], &[]), &[2]),
        ((&[3, 7, 5], &[0, 1, 2], &[], &[]), &[1]),
        ((&[2, 9, 64], &[0, 1, 2], &[], &[]), &[1]),
        ((&[4, 30, 130], &[0, 1, 2], &[], &[]), &[1]),
        ((&[2, 5000, 3], &[0, 1, 2], &[], &[]), &[1]),
        ((&[3, 4, 5, 70], &[0, 1, 2, 3], &[], &[]), &[1, 2]),
        ((&[6, 2, 3, 2, 33], &[0, 1, 2, 3, 4], &[], &[]), &[1, 2, 3]),
        ((&[40, 64, 128], &[0, 1, 2], &[], &[]), &[1]),
        ((&[5, 6, 40], &[0, 1, 2], &[0, 0, 10], &[5, 6, 20]), &[1]),
        ((&[16, 4, 96], &[0, 1, 2], &[0, 0, 32], &[16, 4, 64]), &[1]),
        ((&[4, 3, 6, 20], &[1, 0, 2, 3], &[], &[]), &[2]),
    ];
    for (k, &((shape, perm, begin, size), axes)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let v = vals(n, 90 + k as u64);
        // (integers from the values times 1000: wrapping sums, and ties)
        let ints = Tensor::from_vec(v.iter().map(|&a| (a * 1000.0).round() as i64).collect(), shape)?;
        let mut v = v;
        v[1] = -0.0;
        if k == 1 {
            v[n / 2] = f64::NAN;
        }
        let floats = Tensor::from_vec(v, shape)?;
        let view = |t: &Tensor| -> Result<Tensor> {
            let t = t.permute(perm)?;
            match (begin.is_empty(), k + 1 == cases.len()) {
                (false, _) => t.slice(begin, size),
                // (the last case's first axis also reversed)
                (true, true) => t.reverse(&[0]),
                (true, false) => Ok(t),
            }
        };
        let (floats, ints) = (view(&floats)?, view(&ints)?);
        let rank = floats.shape().len();
        let kept: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).collect();
        let to_last: Vec<usize> = kept.iter().chain(axes).copied().collect();
        let last: Vec<isize> = (kept.len()..rank).map(|d| d as isize).collect();
        let signed: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
        for dtype in [DType::F32, DType::F64, DType::I32, DType::I64] {
            let x = match dtype.is_float() {
                true => floats.cast(dtype)?,
                false => ints.cast(dtype)?,
            };
            let rows = x.permute(&to_last)?.contiguous()?;
            for op in ["sum", "max", "min"] {
                let (got, want) = match op {
                    "sum" => (x.sum(&signed, false)?, rows.sum(&last, false)?),
                    "max" => (x.max(&signed, false)?, rows.max(&last, false)?),
                    _ => (x.min(&signed, false)?, rows.min(&last, false)?),
                };
                assert_eq!(got.shape(), want.shape());
                let (g, w) = (bits(&got)?, bits(&want)?);
                let bad = g.iter().zip(&w).position(|(a, b)| a != b);
                assert!(
                    bad.is_none(),
                    "case {k} {dtype:?} {op} over {axes:?}: element {bad:?} differs"
                );
            }
        }
        // and the values, against the loop in f64 (every set of axes)
        if k != 1 && n < 200_000 {
            check(&format!("case {k}"), &floats, DType::F32)?;
        }
    }
    Ok(())
}

/// Softmax and log-softmax of `[rows, n]` in `f64` from the definition.
fn softmax_reference(x: &[f64], n: usize, log: bool) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n) {
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            out.extend(row.iter().map(|_| f64::NAN));
            continue;
        }
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        out.extend(row.iter().map(|v| if log { v - m - s.ln() } else { (v - m).exp() / s }));
    }
    out
}

#[test]
fn softmax_of_short_and_long_rows_matches_the_definition() -> Result<()> {
    // rows shorter than the f32 exponential's block of 64 are
    // exponentiated many rows at a time; 64 and longer one row at a time;
    // enough rows for several threads; a row of -inf (NaN out) and a row
    // with one -inf among finite values
    for n in [1usize, 2, 3, 7, 8, 9, 31, 63, 64, 65, 130] {
        let rows = (50_000 / n).max(3);
        let mut v = vals(rows * n, n as u64);
        for x in v.iter_mut() {
            *x *= 30.0;
        }
        v[n..2 * n].fill(f64::NEG_INFINITY);
        v[2 * n] = f64::NEG_INFINITY;
        let x64 = Tensor::from_vec(v.clone(), &[rows, n])?;
        for log in [false, true] {
            for dtype in [DType::F32, DType::F64] {
                let x = x64.cast(dtype)?;
                // (from the values as rounded to `dtype`)
                let want = softmax_reference(&x.cast(DType::F64)?.to_vec::<f64>()?, n, log);
                let y = if log { x.log_softmax(-1)? } else { x.softmax(-1)? };
                let got = y.cast(DType::F64)?.to_vec::<f64>()?;
                // a few ulp of the result, and for a probability the
                // rounding of its shifted score `x - max` (up to 60 here:
                // e^(x - max) then carries |x - max| ulp, about |ln p|)
                let ulp = if dtype == DType::F32 { 1.2e-7 } else { 2.3e-16 };
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let ok = if w.is_nan() {
                        g.is_nan()
                    } else if w.is_infinite() {
                        g == w
                    } else if log {
                        (g - w).abs() <= 8.0 * ulp * w.abs().max(1.0)
                    } else {
                        g == w || (g - w).abs() <= (8.0 + 2.0 * w.ln().abs()) * ulp * w.abs()
                    };
                    assert!(ok, "softmax(log={log}) {dtype:?} rows of {n}: element {i}: {g} vs {w}");
                }
            }
        }
    }
    Ok(())
}
