//! The gradients of elementwise ops for a cotangent of 0, inf or NaN
//! against TensorFlow 2.21 (f64), at zeros, ±1, ±inf, NaN, ±1e300 and ±2
//! (every pair for the binary ops): whether a gradient formula selects
//! (a zero cotangent gives 0 whatever the point, an infinite or NaN one 0
//! where the derivative is structurally 0) or multiplies (NaN from 0·inf)
//! decides whether NaN spreads through a program's gradients, as in the
//! random programs of `tf_programs.rs`. The numbers are TensorFlow's,
//! printed by `tests/reference/tf_cotangents.py` into
//! `tests/data/tf_cotangents.txt`; only where the gradient is NaN is
//! compared, and the differences kept are listed in [`known`].

use gradtape::{GradientTape, Result, Tensor};

use super::tf_programs_ops::{apply, Attrs};
use super::tf_util::floats;

const DATA: &str = include_str!("../data/tf_cotangents.txt");
const PTS: [f64; 11] = [
    0.0,
    -0.0,
    -1.0,
    1.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    1e300,
    -1e300,
    2.0,
    -2.0,
];

/// The differences kept, with their reasons:
/// - `gelu_tanh`'s derivative at ±1e300 is 1 and 0, which TensorFlow's
///   formula loses to inf/inf (NaN for any cotangent);
/// - an infinite cotangent through `gelu`, `gelu_tanh`, `silu` and
///   `digamma` (and `rsqrt` at 1e300, whose y³ underflows to 0 here):
///   TensorFlow's gradients are sums of terms where this crate's are
///   one product, so inf − inf (NaN) there is ±inf here, or 0 · inf
///   here is ±inf there; either is the product of an infinite cotangent.
fn known(op: &str, c: f64, x: f64) -> bool {
    (op == "gelu_tanh" && x.abs() == 1e300)
        || (c.is_infinite() && ["gelu", "gelu_tanh", "silu", "digamma"].contains(&op))
        || (c.is_infinite() && op == "rsqrt" && x == 1e300)
}

#[test]
fn cotangents_match_tensorflow() -> Result<()> {
    let n = PTS.len();
    let xs: Vec<f64> = PTS.iter().flat_map(|&x| std::iter::repeat_n(x, n)).collect();
    let ys: Vec<f64> = (0..n).flat_map(|_| PTS).collect();
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [op, arity, k, c, attrs, want] = line.split(' ').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let k: usize = k.parse().unwrap();
        let c: f64 = c.parse().unwrap();
        let ins = match arity {
            "1" => vec![Tensor::vector(&PTS)],
            _ => vec![Tensor::vector(&xs), Tensor::vector(&ys)],
        };
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            for x in &ins {
                tape.watch(x);
            }
            let y = apply(op, &ins.iter().collect::<Vec<_>>(), &Attrs::parse(attrs))?;
            y.mul(&y.full_like(c))?.sum_all()
        })?;
        let got = tape.gradient(&loss, &ins[k])?.map(|g| g.to_vec_f64());
        let want = floats(want);
        let at = |i: usize| match arity {
            "1" => format!("x = {}", PTS[i]),
            _ => format!("x = {}, y = {}", xs[i], ys[i]),
        };
        match (&got, &want) {
            (Some(g), Some(w)) => {
                for (i, (a, b)) in g.iter().zip(w).enumerate() {
                    checked += 1;
                    if a.is_nan() != b.is_nan() && !known(op, c, ins[0].to_vec_f64()[i]) {
                        bad.push(format!("{op} d/dx{k} at {}, cotangent {c}: {a}, TensorFlow {b}", at(i)));
                    }
                }
            }
            (None, None) => {}
            (Some(v), None) | (None, Some(v)) => {
                if v.iter().any(|v| *v != 0.0) {
                    bad.push(format!("{op} d/dx{k}, cotangent {c}: {got:?}, TensorFlow {want:?}"));
                }
            }
        }
    }
    assert!(checked > 10_000, "{checked} comparisons");
    assert!(
        bad.is_empty(),
        "{} differences from TensorFlow:\n{}",
        bad.len(),
        bad.join("\n")
    );
    Ok(())
}
