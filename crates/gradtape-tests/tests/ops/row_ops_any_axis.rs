//! The row ops over any axis against loops written out here: `max`/`min`
//! (vectorised in lanes along a last axis), `argmax`/`argmin` and
//! `softmax`/`log_softmax` (columns read in place over a middle axis),
//! `prod`, `cumsum` and `cumprod` (many folds side by side).
//!
//! Each kernel keeps the result of the fold in order, bit for bit, so
//! the references below are that fold in the tensor's own dtype (or the
//! last-axis softmax of a contiguous copy, itself checked against `f64`
//! here): ranks 1 to 4, every axis, lengths 1, 3, 17 and 4097 along it,
//! views (permuted, sliced, reversed), `-0.0` beside `+0.0`, NaN, ±inf,
//! integers with ties.

use gradtape::__internals::kernels::cpu::{arg_extremum, softmax_columns};
use gradtape::{DType, Result, Tensor};

use crate::common::values::uniform;

/// The shapes (each axis reduced in turn) and, per shape, the views
/// taken of it: 0 as is, 1 axes reversed (a transpose), 2 the last axis
/// cut by one on each side, 3 the first axis reversed.
const SHAPES: &[&[usize]] = &[
    &[4097],
    &[17],
    &[3, 17],
    &[17, 5],
    &[2, 4097],
    &[4097, 3],
    &[3, 1, 17],
    &[2, 17, 33],
    &[5, 3, 70],
    &[2, 3, 4, 19],
    &[3, 2, 17, 66],
];

/// `n` values with the special cases sprinkled in: every seventh -0.0,
/// every 41st +0.0, NaN at 97 and 1000, -inf at 5 and +inf at 3001.
fn special(n: usize, seed: u64) -> Vec<f64> {
    let mut v = uniform(n, seed);
    for (i, x) in v.iter_mut().enumerate() {
        if i % 7 == 3 {
            *x = -0.0;
        } else if i % 41 == 2 {
            *x = 0.0;
        }
    }
    for (i, x) in [
        (97, f64::NAN),
        (1000, f64::NAN),
        (5, f64::NEG_INFINITY),
        (3001, f64::INFINITY),
    ] {
        if i < n {
            v[i] = x;
        }
    }
    v
}

/// The views of `t` tested (see [`SHAPES`]).
fn views(t: &Tensor) -> Result<Vec<Tensor>> {
    let r = t.rank();
    let mut out = vec![t.clone()];
    out.push(t.permute(&(0..r).rev().collect::<Vec<_>>())?);
    let last = t.shape()[r - 1];
    if last > 2 {
        out.push(t.narrow(-1, 1, last - 2)?);
    }
    out.push(t.reverse(&[0])?);
    Ok(out)
}

/// The elements of `x` (any layout) along `axis`: one `Vec` per output
/// position, in the kept axes' row-major order.
fn lines(x: &Tensor, axis: usize) -> Result<Vec<Vec<f64>>> {
    let r = x.rank();
    let perm: Vec<usize> = (0..r).filter(|&d| d != axis).chain([axis]).collect();
    let v = x.permute(&perm)?.contiguous()?.to_vec_f64();
    let n = x.shape()[axis];
    Ok(v.chunks(n.max(1)).map(|c| c.to_vec()).collect())
}

/// The max (`largest`) or min fold in order: NaN wins (the last one),
/// ties keep the first.
fn fold_extremum(line: &[f64], largest: bool) -> f64 {
    line.iter()
        .fold(if largest { f64::NEG_INFINITY } else { f64::INFINITY }, |a, &b| {
            let better = if largest { b > a } else { b < a };
            if better || b.is_nan() {
                b
            } else {
                a
            }
        })
}

/// Bits that tell `-0.0` from `+0.0`, any NaN one value.
fn key(v: f64) -> u64 {
    if v.is_nan() {
        u64::MAX
    } else {
        v.to_bits()
    }
}

/// Runs `check(dtype, view, axis)` over every dtype of `dtypes` (integer
/// ones from `ints`, the others `base` cast), every view of it and every
/// axis of the view.
fn each_case(
    base: &Tensor,
    ints: &Tensor,
    dtypes: &[DType],
    mut check: impl FnMut(DType, &Tensor, usize) -> Result<()>,
) -> Result<()> {
    for &dtype in dtypes {
        let t = if dtype.is_float() {
            base.cast(dtype)?
        } else {
            ints.clone()
        };
        for x in views(&t)? {
            for axis in 0..x.rank() {
                check(dtype, &x, axis)?;
            }
        }
    }
    Ok(())
}

#[test]
fn max_and_min_along_any_axis_keep_the_folds_bits() -> Result<()> {
    for (k, &shape) in SHAPES.iter().enumerate() {
        let n: usize = shape.iter().product();
        let base = Tensor::from_vec(special(n, 10 + k as u64), shape)?;
        let ints = Tensor::from_vec(
            uniform(n, 50 + k as u64)
                .iter()
                .map(|v| (v * 9.0).round() as i32)
                .collect(),
            shape,
        )?;
        each_case(&base, &ints, &[DType::F32, DType::F64, DType::I32], |dtype, x, axis| {
            for largest in [true, false] {
                let got = if largest {
                    x.max(&[axis as isize], false)?
                } else {
                    x.min(&[axis as isize], false)?
                };
                let want: Vec<u64> = lines(x, axis)?.iter().map(|l| key(fold_extremum(l, largest))).collect();
                let got: Vec<u64> = got.to_vec_f64().into_iter().map(key).collect();
                assert_eq!(got, want, "{dtype:?} {:?} axis {axis} largest {largest}", x.shape());
            }
            Ok(())
        })?;
    }
    Ok(())
}

#[test]
fn a_zero_maximum_is_the_first_of_its_signs_in_a_long_row() -> Result<()> {
    // Lanes of 16 see index 20 (+0, lane 4) before index 5 (-0, lane 5);
    // the fold in order keeps the first, -0. Likewise for the minimum.
    for n in [33usize, 128, 4097] {
        let mut v = vec![-1.0f32; n];
        v[5] = -0.0;
        v[20] = 0.0;
        let x = Tensor::from_vec(v.clone(), &[n])?;
        assert_eq!(
            x.max(&[0], false)?.to_vec::<f32>()?[0].to_bits(),
            (-0.0f32).to_bits(),
            "n {n}"
        );
        let y = Tensor::from_vec(v.iter().map(|a| -a).collect::<Vec<f32>>(), &[n])?;
        assert_eq!(
            y.min(&[0], false)?.to_vec::<f32>()?[0].to_bits(),
            0.0f32.to_bits(),
            "n {n}"
        );
        // a NaN anywhere wins, over a row of lanes
        v[n - 1] = f32::NAN;
        let x = Tensor::from_vec(v, &[n])?;
        assert!(x.max(&[0], false)?.to_vec::<f32>()?[0].is_nan(), "n {n}");
    }
    Ok(())
}

/// The first index of the best value that is not NaN, 0 when none (the
/// semantics of TensorFlow's `argmax`, as documented on the op).
fn first_best(line: &[f64], largest: bool) -> i64 {
    let mut best: Option<usize> = None;
    for (i, &v) in line.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.is_none_or(|b| if largest { v > line[b] } else { v < line[b] }) {
            best = Some(i);
        }
    }
    best.unwrap_or(0) as i64
}

#[test]
fn argmax_and_argmin_along_any_axis_return_the_first_best_index() -> Result<()> {
    let before = arg_extremum::in_place_calls();
    for (k, &shape) in SHAPES.iter().enumerate() {
        let n: usize = shape.iter().product();
        let mut vals = special(n, 20 + k as u64);
        // a run of NaN only along every axis somewhere (element 0's lines
        // where they are short), and ties in the integers
        if n < 100 {
            vals[0] = f64::NAN;
        }
        let base = Tensor::from_vec(vals, shape)?;
        let ints = Tensor::from_vec(
            uniform(n, 60 + k as u64)
                .iter()
                .map(|v| (v * 4.0).round() as i64)
                .collect(),
            shape,
        )?;
        let dtypes = [DType::F32, DType::F64, DType::I64, DType::F16];
        each_case(&base, &ints, &dtypes, |dtype, x, axis| {
            for largest in [true, false] {
                let got = if largest {
                    x.argmax(axis as isize)?
                } else {
                    x.argmin(axis as isize)?
                };
                let want: Vec<i64> = lines(x, axis)?.iter().map(|l| first_best(l, largest)).collect();
                assert_eq!(
                    got.to_vec::<i64>()?,
                    want,
                    "{dtype:?} {:?} axis {axis} largest {largest}",
                    x.shape()
                );
            }
            Ok(())
        })?;
    }
    // all NaN, all -inf, the last element best
    let x = Tensor::from_vec(
        vec![
            f32::NAN,
            f32::NAN,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            0.0,
        ],
        &[3, 3],
    )?;
    assert_eq!(x.argmax(1)?.to_vec::<i64>()?, vec![0, 0, 0]);
    assert_eq!(x.argmin(1)?.to_vec::<i64>()?, vec![0, 0, 0]);
    assert_eq!(x.argmax(0)?.to_vec::<i64>()?, vec![2, 2, 2]);
    assert_eq!(x.argmin(0)?.to_vec::<i64>()?, vec![1, 2, 1]);
    // the middle axes above were read in place (on this thread)
    assert!(
        arg_extremum::in_place_calls() > before + 20,
        "argmax over a middle axis copied its rows"
    );
    Ok(())
}

/// Softmax (or log-softmax) of `x` along `axis` in `f64`, the maximum
/// subtracted; NaN for a line without one.
fn softmax_f64(line: &[f64], log: bool) -> Vec<f64> {
    let m = line
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return vec![f64::NAN; line.len()];
    }
    let s: f64 = line.iter().map(|&v| (v - m).exp()).sum();
    line.iter()
        .map(|&v| if log { (v - m) - s.ln() } else { (v - m).exp() / s })
        .collect()
}

#[test]
fn softmax_over_a_middle_axis_has_the_bits_of_the_last_axis() -> Result<()> {
    let before = softmax_columns::calls();
    let shapes: &[&[usize]] = &[
        &[17, 5],
        &[3, 17, 2],
        &[4097, 3],
        &[2, 3, 65],
        &[3, 64, 70],
        &[2, 3, 17, 130],
        &[1, 5, 3],
    ];
    for (k, &shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let mut v: Vec<f64> = uniform(n, 30 + k as u64).iter().map(|a| a * 12.0).collect();
        // -0.0, a value whose exponential underflows, a NaN, and (below) a
        // column of -inf only
        v[1] = -0.0;
        v[2] = -120.0;
        if n > 40 {
            v[40] = f64::NAN;
        }
        let base = Tensor::from_vec(v, shape)?;
        for dtype in [DType::F32, DType::F64, DType::BF16] {
            for x in views(&base.cast(dtype)?)? {
                for axis in 0..x.rank() - 1 {
                    let mut x = x.clone();
                    if k == 0 {
                        // column 0 along axis 0: -inf only
                        let mask = Tensor::from_vec(
                            (0..x.shape()[1]).map(|i| i == 0).collect::<Vec<bool>>(),
                            &[x.shape()[1]],
                        )?;
                        x = Tensor::where_(&mask, &x.full_like(f64::NEG_INFINITY), &x)?;
                    }
                    let r = x.rank();
                    let perm: Vec<usize> = (0..r).filter(|&d| d != axis).chain([axis]).collect();
                    let mut inv = vec![0; r];
                    for (i, &p) in perm.iter().enumerate() {
                        inv[p] = i;
                    }
                    let rows = x.permute(&perm)?.contiguous()?;
                    for log in [false, true] {
                        let (got, want) = match log {
                            false => (x.softmax(axis as isize)?, rows.softmax(-1)?.permute(&inv)?),
                            true => (x.log_softmax(axis as isize)?, rows.log_softmax(-1)?.permute(&inv)?),
                        };
                        let what = format!("{dtype:?} {:?} axis {axis} log {log}", x.shape());
                        let (g, w) = (got.to_vec_f64(), want.to_vec_f64());
                        let same = g.iter().zip(&w).all(|(a, b)| key(*a) == key(*b));
                        assert!(same, "{what}: not the bits of the last axis");
                        // and the values: f64 written out (f32 within a few ulp)
                        let tol = match dtype {
                            DType::F64 => 1e-13,
                            DType::F32 => 2e-6,
                            _ => 1e-2,
                        };
                        let wl: Vec<Vec<f64>> = lines(&x, axis)?.iter().map(|l| softmax_f64(l, log)).collect();
                        let gl = lines(&got, axis)?;
                        for (gl, wl) in gl.iter().zip(&wl) {
                            for (a, b) in gl.iter().zip(wl) {
                                let ok = if b.is_nan() {
                                    a.is_nan()
                                } else {
                                    (a - b).abs() <= tol * (1.0 + b.abs())
                                };
                                assert!(ok, "{what}: {a} vs {b} (f64)");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        softmax_columns::calls() > before + 50,
        "a softmax over a middle axis gathered its columns"
    );
    // empty tensors, empty along each axis in turn
    for shape in [[0usize, 3, 4], [2, 0, 4], [2, 3, 0]] {
        let x = Tensor::zeros(&shape, DType::F32);
        for axis in 0..3isize {
            assert_eq!(x.softmax(axis)?.shape(), &shape[..]);
            assert_eq!(x.log_softmax(axis)?.shape(), &shape[..]);
            assert_eq!(x.cumsum(axis, false, true)?.shape(), &shape[..]);
            let kept: Vec<usize> = (0..3).filter(|&d| d != axis as usize).map(|d| shape[d]).collect();
            assert_eq!(x.prod(&[axis], false)?.shape(), &kept[..]);
            if shape[axis as usize] > 0 {
                assert_eq!(x.argmax(axis)?.shape(), &kept[..]);
            }
        }
    }
    Ok(())
}

#[test]
fn prod_cumsum_and_cumprod_along_any_axis_fold_in_order() -> Result<()> {
    for (k, &shape) in SHAPES.iter().enumerate() {
        let n: usize = shape.iter().product();
        // products near 1 (finite over 4097 terms), with the specials
        let v: Vec<f64> = special(n, 40 + k as u64).iter().map(|a| 1.0 + a / 64.0).collect();
        let base = Tensor::from_vec(v, shape)?;
        let ints = Tensor::from_vec(
            uniform(n, 70 + k as u64).iter().map(|v| (v * 1e9) as i32).collect(),
            shape,
        )?;
        each_case(&base, &ints, &[DType::F32, DType::F64, DType::I32], |dtype, x, axis| {
            let ls = lines(x, axis)?;
            let what = format!("{dtype:?} {:?} axis {axis}", x.shape());
            // the folds in the dtype's arithmetic (i32 wrapping)
            let step = |a: f64, b: f64, mul: bool| -> f64 {
                match (dtype, mul) {
                    (DType::F32, false) => (a as f32 + b as f32) as f64,
                    (DType::F32, true) => (a as f32 * b as f32) as f64,
                    (DType::I32, false) => (a as i32).wrapping_add(b as i32) as f64,
                    (DType::I32, true) => (a as i32).wrapping_mul(b as i32) as f64,
                    (_, false) => a + b,
                    (_, true) => a * b,
                }
            };
            let want: Vec<u64> = ls
                .iter()
                .map(|l| key(l.iter().fold(1.0, |a, &b| step(a, b, true))))
                .collect();
            let got: Vec<u64> = x
                .prod(&[axis as isize], false)?
                .to_vec_f64()
                .into_iter()
                .map(key)
                .collect();
            assert_eq!(got, want, "prod {what}");
            for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
                for mul in [false, true] {
                    let y = match mul {
                        false => x.cumsum(axis as isize, exclusive, reverse)?,
                        true => x.cumprod(axis as isize, exclusive, reverse)?,
                    };
                    let got: Vec<u64> = lines(&y, axis)?.concat().into_iter().map(key).collect();
                    let mut want = Vec::new();
                    for l in &ls {
                        let mut acc = if mul { 1.0 } else { 0.0 };
                        let mut out = vec![0.0; l.len()];
                        let order: Vec<usize> = match reverse {
                            false => (0..l.len()).collect(),
                            true => (0..l.len()).rev().collect(),
                        };
                        for i in order {
                            let next = step(acc, l[i], mul);
                            out[i] = if exclusive { acc } else { next };
                            acc = next;
                        }
                        want.extend(out.into_iter().map(key));
                    }
                    assert_eq!(
                        got, want,
                        "cum mul {mul} exclusive {exclusive} reverse {reverse} {what}"
                    );
                }
            }
            Ok(())
        })?;
    }
    Ok(())
}
