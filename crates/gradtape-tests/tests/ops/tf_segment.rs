//! The segment reductions (sorted and unsorted: sum, mean, max, min,
//! prod) and gather with repeated indices against TensorFlow 2.21 (f64):
//! ties, zeros, infinities, NaN and empty segments; values and the
//! gradients of a weighted sum. The numbers are TensorFlow's, printed by
//! `tests/reference/tf_segment.py` into `tests/data/tf_segment.txt`;
//! where TensorFlow's product gradient is NaN by division, the product
//! rule referees ([`prod_grad`]).

use gradtape::{GradientTape, Result, Tensor};

use super::tf_util::{all_agree, floats, report, weighted};

const DATA: &str = include_str!("../data/tf_segment.txt");

fn op(name: &str, x: &Tensor) -> Result<Tensor> {
    let sorted = Tensor::vector(&[0i64, 0, 1, 1, 1, 3]);
    let unsorted = Tensor::vector(&[3i64, 0, 3, 1, 0, 1]);
    match name {
        "segment_sum" => x.segment_sum(&sorted),
        "segment_mean" => x.segment_mean(&sorted),
        "segment_max" => x.segment_max(&sorted),
        "segment_min" => x.segment_min(&sorted),
        "segment_prod" => x.segment_prod(&sorted),
        "unsorted_segment_sum" => x.unsorted_segment_sum(&unsorted, 5),
        "unsorted_segment_mean" => x.unsorted_segment_mean(&unsorted, 5),
        "unsorted_segment_max" => x.unsorted_segment_max(&unsorted, 5),
        "unsorted_segment_min" => x.unsorted_segment_min(&unsorted, 5),
        "unsorted_segment_prod" => x.unsorted_segment_prod(&unsorted, 5),
        "gather" => x.gather(&Tensor::vector(&[2i64, 0, 2, 5, 2]), 0),
        _ => panic!("no op {name}"),
    }
}

fn numbers(s: &str) -> Vec<f64> {
    floats(s).expect("numbers")
}

#[test]
fn segment_ops_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, x, value, grad] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let xv = numbers(x);
        let x = Tensor::from_vec(xv.clone(), &[6, 2])?;
        let tape = GradientTape::new();
        let (y, s) = tape.record(|| {
            tape.watch(&x);
            let y = op(name, &x)?;
            let s = weighted(&y)?;
            Ok((y, s))
        })?;
        let g = tape.gradient(&s, &x)?.expect("a gradient").to_vec::<f64>()?;
        for (what, got, want) in [
            ("value", y.to_vec::<f64>()?, numbers(value)),
            ("grad", g, numbers(grad)),
        ] {
            checked += 1;
            let same = all_agree(&got, &want, 1e-12, 0.0);
            // TensorFlow's prod gradient divides by x (NaN at infinities):
            // the product rule by brute force referees
            let refereed =
                what == "grad" && name.ends_with("segment_prod") && all_agree(&got, &prod_grad(name, &xv), 1e-12, 0.0);
            if !same && !refereed {
                bad.push(format!("{name} {what} at {xv:?}: got {got:?}, TensorFlow {want:?}"));
            }
        }
    }
    report(checked, 150, &bad);
    Ok(())
}

/// d/dx of Σ w·y for a segment product of `x` (`[6, 2]`, row-major) by
/// the product rule: each element gets its output's weight times the
/// product of the other elements of its segment and column, with no
/// division (TensorFlow's gradient divides the product by the element, so
/// a segment holding ±inf gives NaN where the rule gives a number).
fn prod_grad(name: &str, x: &[f64]) -> Vec<f64> {
    let ids: [usize; 6] = if name.starts_with("unsorted") {
        [3, 0, 3, 1, 0, 1]
    } else {
        [0, 0, 1, 1, 1, 3]
    };
    (0..12)
        .map(|e| {
            let (row, col) = (e / 2, e % 2);
            let others: f64 = (0..6)
                .filter(|&r| r != row && ids[r] == ids[row])
                .map(|r| x[r * 2 + col])
                .product();
            (1.0 + 0.5 * (ids[row] * 2 + col) as f64) * others
        })
        .collect()
}

/// A NaN makes its segment's maximum (minimum) NaN wherever it stands in
/// the segment: first, between numbers, or last, eagerly and traced, in
/// the sorted and unsorted forms, as `max` over an axis does (JAX's
/// `jax.ops.segment_max` and PyTorch's `segment_reduce` give the same;
/// TensorFlow 2.21's segment kernels drop a NaN that opens a segment:
/// `tf.math.segment_max([[nan], [0], [0]], [0, 0, 0])` is `[[0]]`).
/// The segments without a NaN keep their numbers.
#[test]
fn a_nan_anywhere_in_a_segment_makes_its_extremum_nan() -> Result<()> {
    let nan = f64::NAN;
    // columns: NaN first, NaN in the middle, NaN last, no NaN
    let x = Tensor::from_vec(
        vec![
            nan, 1.0, 2.0, 4.0, 0.0, nan, 3.0, -1.0, 0.0, 5.0, nan, 2.0, 7.0, 8.0, 9.0, 6.0,
        ],
        &[4, 4],
    )?;
    let sorted = Tensor::vector(&[0i64, 0, 0, 1]);
    let unsorted = Tensor::vector(&[1i64, 1, 1, 0]);
    type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 4] = [
        ("segment_max", |x, ids| x.segment_max(ids)),
        ("segment_min", |x, ids| x.segment_min(ids)),
        ("unsorted_segment_max", |x, ids| x.unsorted_segment_max(ids, 2)),
        ("unsorted_segment_min", |x, ids| x.unsorted_segment_min(ids, 2)),
    ];
    for (name, op) in ops {
        let ids = if name.starts_with("unsorted") {
            unsorted.clone()
        } else {
            sorted.clone()
        };
        let (nan_row, one_row) = if name.starts_with("unsorted") { (1, 0) } else { (0, 1) };
        let traced = {
            let ids = ids.clone();
            gradtape::function(move |x: &Tensor| op(x, &ids))
        };
        for (how, y) in [("eager", op(&x, &ids)?), ("traced", traced.call(&x)?)] {
            let y = y.to_vec::<f64>()?;
            let row = &y[nan_row * 4..nan_row * 4 + 4];
            assert!(
                row[..3].iter().all(|v| v.is_nan()),
                "{name} {how}: {row:?}, want NaN in the first three columns"
            );
            let want_last = if name.ends_with("max") { 4.0 } else { -1.0 };
            assert_eq!(row[3], want_last, "{name} {how}: the column without a NaN");
            assert_eq!(
                &y[one_row * 4..one_row * 4 + 4],
                &[7.0, 8.0, 9.0, 6.0],
                "{name} {how}: the one-row segment"
            );
        }
    }
    Ok(())
}
