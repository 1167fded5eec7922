//! Reductions, scans, softmaxes and sorts of vectors against TensorFlow
//! 2.21 (f64): ties, zeros, infinities, NaN, huge and tiny values; the
//! values and the gradients of a weighted sum of the outputs. The numbers
//! are TensorFlow's, printed by `tests/reference/tf_vector.py` into
//! `tests/data/tf_vector.txt`; deliberate differences are listed in
//! [`KNOWN`] with their reasons.

use gradtape::{DType, GradientTape, Result, Tensor};

use super::tf_util::{agrees, all_agree, floats, report, weighted};

const DATA: &str = include_str!("../data/tf_vector.txt");

fn op(name: &str, x: &Tensor) -> Result<Tensor> {
    match name {
        "sum" => x.sum(&[0], false),
        "mean" => x.mean(&[0], false),
        "max" => x.max(&[0], false),
        "min" => x.min(&[0], false),
        "prod" => x.prod(&[0], false),
        "logsumexp" => x.logsumexp(&[0], false),
        "norm" => x.norm(&[0], false),
        "std" => x.std(&[0], false),
        "variance" => x.variance(&[0], false),
        "cumsum" => x.cumsum(0, false, false),
        "cumsum_exclusive" => x.cumsum(0, true, false),
        "cumsum_reverse" => x.cumsum(0, false, true),
        "cumprod" => x.cumprod(0, false, false),
        "cumprod_exclusive_reverse" => x.cumprod(0, true, true),
        "softmax" => x.softmax(-1),
        "log_softmax" => x.log_softmax(-1),
        "sort" => x.sort(0, false),
        "sort_descending" => x.sort(0, true),
        "top_k" => Ok(x.top_k(x.numel().min(2))?.0),
        "argmax" => x.argmax(0)?.cast(DType::F64),
        "argmin" => x.argmin(0)?.cast(DType::F64),
        _ => panic!("no op {name}"),
    }
}

#[test]
fn vector_ops_match_tensorflow() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, x, value, grad] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let xv = floats(x).unwrap();
        let x = Tensor::vector(&xv);
        let tape = GradientTape::new();
        let (y, s) = tape.record(|| {
            tape.watch(&x);
            let y = op(name, &x)?;
            let s = weighted(&y)?;
            Ok((y, s))
        })?;
        let g = tape.gradient(&s, &x)?;
        let mut compare = |what: &str, got: Option<Vec<f64>>, want: Option<Vec<f64>>| {
            checked += 1;
            // the softmaxes' gradients y·(w − Σ w y) cancel where y → 1,
            // in TensorFlow's formula as in this crate's: absolute 1e-15
            let abs = if what == "grad" && name.contains("softmax") {
                1e-15
            } else {
                0.0
            };
            let same = match (&got, &want) {
                (Some(g), Some(w)) => {
                    g.len() == w.len()
                        && g.iter()
                            .zip(w)
                            .all(|(a, b)| agrees(*a, *b, 1e-12, 0.0) || (a - b).abs() <= abs)
                }
                (None, None) => true,
                // no gradient and zeros are the same derivative
                (None, Some(w)) | (Some(w), None) => w.iter().all(|&v| v == 0.0),
            };
            // where TensorFlow's cumprod gradient is wrong (below), the
            // product rule by brute force referees
            let refereed = match (name, what, &got) {
                ("cumprod", "grad", Some(g)) => all_agree(g, &cumprod_grad(&xv, false, false), 1e-12, 0.0),
                ("cumprod_exclusive_reverse", "grad", Some(g)) => {
                    all_agree(g, &cumprod_grad(&xv, true, true), 1e-12, 0.0)
                }
                _ => false,
            };
            if !same && !refereed && !known(name, what, &xv) {
                bad.push(format!("{name} {what} at {xv:?}: got {got:?}, TensorFlow {want:?}"));
            }
        };
        compare("value", Some(y.to_vec::<f64>()?), floats(value));
        compare("grad", g.map(|g| g.to_vec::<f64>().unwrap()), floats(grad));
    }
    report(checked, 900, &bad);
    Ok(())
}

/// d/dx_j of Σ w_k y_k for `y = cumprod(x, exclusive, reverse)`, `w_k = 1
/// + k/2`, by the product rule: Σ over the outputs whose product holds
/// `x_j` of `w_k` times the product of their other factors, in index
/// order, without division. TensorFlow's gradient divides by `x`: wrong
/// at zeros (0 where `[0, 0, 2]` gives 1), NaN at infinities, 0 where the
/// products underflow; JAX agrees with this one (`tests/ops/reductions.rs`).
fn cumprod_grad(x: &[f64], exclusive: bool, reverse: bool) -> Vec<f64> {
    let n = x.len();
    // the factors of output k
    let factors = |k: usize| -> Vec<usize> {
        (0..n)
            .filter(|&m| match (exclusive, reverse) {
                (false, false) => m <= k,
                (true, false) => m < k,
                (false, true) => m >= k,
                (true, true) => m > k,
            })
            .collect()
    };
    (0..n)
        .map(|j| {
            (0..n)
                .filter(|&k| factors(k).contains(&j))
                .map(|k| {
                    (1.0 + 0.5 * k as f64) * factors(k).iter().filter(|&&m| m != j).map(|&m| x[m]).product::<f64>()
                })
                .sum()
        })
        .collect()
}

/// Where this crate deliberately differs from TensorFlow: (op, what,
/// which inputs, why).
type Known = (&'static str, &'static str, fn(&[f64]) -> bool, &'static str);
const KNOWN: &[Known] = &[
    (
        "norm",
        "grad",
        |x| x.iter().all(|&v| v == 0.0),
        "0 at the zero vector (a subgradient, as PyTorch's); TensorFlow's x / ‖x‖ is 0 / 0",
    ),
    (
        "norm",
        "grad",
        |x| x.iter().any(|&v| v != 0.0) && x.iter().map(|v| v * v).sum::<f64>() == 0.0,
        "x / ‖x‖ where Σx² underflows (0.7071 at [1e-300, 1e-300], as JAX); TensorFlow's x / √(Σx²) is inf (see tf_edge_cases.rs)",
    ),
    (
        "sort",
        "value",
        |x| x.iter().any(|v| v.is_nan()),
        "NaN sorts last (first descending), as NumPy, JAX and PyTorch; TensorFlow leaves [1, NaN, 3] unsorted",
    ),
    ("sort", "grad", |x| x.iter().any(|v| v.is_nan()), "follows the values"),
    ("sort_descending", "value", |x| x.iter().any(|v| v.is_nan()), "as sort"),
    ("sort_descending", "grad", |x| x.iter().any(|v| v.is_nan()), "as sort"),
];

fn known(name: &str, what: &str, x: &[f64]) -> bool {
    KNOWN.iter().any(|(n, w, at, _)| *n == name && *w == what && at(x))
}
