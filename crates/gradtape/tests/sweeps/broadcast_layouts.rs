//! The broadcasting two-input ops of the elementwise table (`add`, `sub`,
//! `mul`, `div`, `maximum`, `squared_difference`) in f32 and f64 on every
//! kind of operand the eager kernel cuts into runs: contiguous, transposed
//! and reversed views, rows broadcast along either axis, scalars, short
//! rows gathered many to a run, rows longer than a run, and tensors large
//! enough to split over threads. Each result is compared bit for bit with
//! a plain loop over the broadcast indices computing the same function in
//! the same type (the functions are single IEEE operations, so the bits
//! are fixed), including signed zeros and NaNs in broadcast rows.

use gradtape::{DType, Tensor};

use crate::common::values::uniform;

/// How an operand of logical shape `[rows, cols]` is laid out.
#[derive(Clone, Copy, Debug)]
enum Layout {
    RowMajor,
    /// a column-major buffer, seen through `permute([1, 0])`
    Transposed,
    /// rows stored last to first, seen through `reverse([0])`
    Reversed,
}

/// A tensor of logical `shape` and `dt` holding `vals` (row-major), laid
/// out as `l` when it is a matrix.
fn operand(vals: &[f64], shape: &[usize], dt: DType, l: Layout) -> Tensor {
    match (l, shape) {
        (Layout::Transposed, &[r, c]) => {
            let mut t = vec![0.0; r * c];
            for i in 0..r {
                for j in 0..c {
                    t[j * r + i] = vals[i * c + j];
                }
            }
            Tensor::from_vec(t, &[c, r])
                .unwrap()
                .cast(dt)
                .unwrap()
                .permute(&[1, 0])
                .unwrap()
        }
        (Layout::Reversed, &[r, c]) => {
            let t: Vec<f64> = (0..r).rev().flat_map(|i| vals[i * c..(i + 1) * c].to_vec()).collect();
            Tensor::from_vec(t, &[r, c])
                .unwrap()
                .cast(dt)
                .unwrap()
                .reverse(&[0])
                .unwrap()
        }
        _ => Tensor::from_vec(vals.to_vec(), shape).unwrap().cast(dt).unwrap(),
    }
}

/// The row-major index into an operand of `shape` (right-aligned against
/// `out`, with broadcasting) of the output element at multi-index `idx`.
fn source_index(shape: &[usize], out: &[usize], idx: &[usize]) -> usize {
    let lead = out.len() - shape.len();
    let mut i = 0;
    for (d, &n) in shape.iter().enumerate() {
        let k = if n == 1 { 0 } else { idx[lead + d] };
        i = i * n + k;
    }
    i
}

/// The broadcast result shape of `a` and `b`.
fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let y = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            if x == 1 {
                y
            } else {
                x
            }
        })
        .collect()
}

type Op = (
    &'static str,
    fn(&Tensor, &Tensor) -> gradtape::Result<Tensor>,
    fn(f64, f64) -> f64,
    fn(f32, f32) -> f32,
);

fn ops() -> Vec<Op> {
    vec![
        ("add", |a, b| a.add(b), |x, y| x + y, |x, y| x + y),
        ("sub", |a, b| a.sub(b), |x, y| x - y, |x, y| x - y),
        ("mul", |a, b| a.mul(b), |x, y| x * y, |x, y| x * y),
        ("div", |a, b| a.div(b), |x, y| x / y, |x, y| x / y),
        (
            "maximum",
            |a, b| a.maximum(b),
            |x, y| if x >= y || x.is_nan() { x } else { y },
            |x, y| if x >= y || x.is_nan() { x } else { y },
        ),
        (
            "squared_difference",
            |a, b| a.squared_difference(b),
            |x, y| (x - y) * (x - y),
            |x, y| (x - y) * (x - y),
        ),
    ]
}

/// Checks every op on `a` (`sa`, laid out `la`) and `b` against the loop.
fn check(sa: &[usize], la: Layout, va: &[f64], sb: &[usize], lb: Layout, vb: &[f64]) -> usize {
    let out = broadcast(sa, sb);
    let n: usize = out.iter().product();
    let mut checked = 0;
    for dt in [DType::F32, DType::F64] {
        let (ta, tb) = (operand(va, sa, dt, la), operand(vb, sb, dt, lb));
        // the operands' values as stored in `dt`
        let (xa, xb) = (
            ta.cast(DType::F64).unwrap().to_vec::<f64>().unwrap(),
            tb.cast(DType::F64).unwrap().to_vec::<f64>().unwrap(),
        );
        for (name, op, f64_fn, f32_fn) in ops() {
            let got = op(&ta, &tb).unwrap();
            assert_eq!(got.shape(), &out[..], "{name} {sa:?} {sb:?}");
            let got = got.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
            let mut idx = vec![0usize; out.len()];
            for (e, g) in got.iter().enumerate() {
                let mut r = e;
                for d in (0..out.len()).rev() {
                    idx[d] = r % out[d];
                    r /= out[d];
                }
                let (x, y) = (xa[source_index(sa, &out, &idx)], xb[source_index(sb, &out, &idx)]);
                let want = match dt {
                    DType::F32 => f32_fn(x as f32, y as f32) as f64,
                    _ => f64_fn(x, y),
                };
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{name} {dt:?} {sa:?} ({la:?}) with {sb:?} ({lb:?}) at {e}: {g} != {want}"
                );
            }
            checked += n;
        }
    }
    checked
}

#[test]
fn broadcast_ops_on_every_layout_equal_the_loop() {
    // (a's shape, b's shape): short rows gathered into runs, rows of about
    // half a run, rows over a run, leading and trailing broadcasts, three
    // dimensions crossing rows, scalars, empty, and sizes split over threads
    let cases: &[(&[usize], &[usize])] = &[
        (&[7, 3], &[3]),
        (&[7, 3], &[7, 1]),
        (&[1, 3], &[7, 3]),
        (&[], &[5, 4]),
        (&[5, 4], &[]),
        (&[], &[]),
        (&[2, 3, 4], &[3, 1]),
        (&[2, 1, 4], &[1, 3, 1]),
        (&[3, 511], &[511]),
        (&[3, 513], &[3, 1]),
        (&[4, 600], &[600]),
        (&[3, 1025], &[1, 1025]),
        (&[2, 3000], &[2, 3000]),
        (&[5000], &[5000]),
        (&[5000], &[1]),
        (&[0, 3], &[3]),
        (&[70000, 3], &[3]),
        (&[40000, 2], &[40000, 1]),
        (&[300, 300], &[300, 300]),
    ];
    let mut seed = 7;
    let mut checked = 0;
    for &(sa, sb) in cases {
        let (na, nb) = (sa.iter().product::<usize>(), sb.iter().product::<usize>());
        // positive divisors, kept away from zero
        let va = uniform(na, seed);
        let vb: Vec<f64> = uniform(nb, seed + 1).iter().map(|v| v + 1.5).collect();
        seed += 2;
        let layouts: &[Layout] = if sa.len() == 2 && sb.len() == 2 {
            &[Layout::RowMajor, Layout::Transposed, Layout::Reversed]
        } else {
            &[Layout::RowMajor]
        };
        for &la in layouts {
            for &lb in layouts {
                checked += check(sa, la, &va, sb, lb, &vb);
                checked += check(sb, lb, &vb, sa, la, &va);
            }
        }
    }
    assert!(checked > 1_000_000, "{checked}");
}

#[test]
fn broadcast_rows_of_signed_zeros_and_nans_keep_their_bits() {
    // a column broadcast along rows whose values alternate 0.0, -0.0 and
    // NaN: each row's run of its value is rebuilt when the value's bits
    // change, so -0.0 after 0.0 gives the signed results
    let rows = 12;
    let col: Vec<f64> = (0..rows).map(|i| [0.0, -0.0, f64::NAN, -0.0][i % 4]).collect();
    for cols in [3, 40, 700] {
        let a: Vec<f64> = (0..rows * cols).map(|i| 1.0 + i as f64).collect();
        let n = check(&[rows, cols], Layout::RowMajor, &a, &[rows, 1], Layout::RowMajor, &col);
        assert!(n > 0);
        // and as a scalar of each kind
        for v in [0.0, -0.0, f64::NAN] {
            check(&[rows, cols], Layout::Transposed, &a, &[], Layout::RowMajor, &[v]);
        }
    }
}
