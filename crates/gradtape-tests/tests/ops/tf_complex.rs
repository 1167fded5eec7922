//! The complex functions against TensorFlow 2.21 (complex128) at edge
//! points: the branch cut of `log` and `sqrt` from both sides (±0 and
//! ±1e-300 imaginary parts), zero, the axes, huge and tiny moduli,
//! infinities; values and reverse-mode gradients seeded with a complex
//! cotangent (TensorFlow's convention). The numbers are TensorFlow's,
//! printed by `tests/reference/tf_complex.py` into
//! `tests/data/tf_complex.txt`; deliberate differences are listed in
//! [`KNOWN`] with their reasons.

use gradtape::{Complex, DType, GradientOptions, GradientTape, Result, Tensor};

use super::tf_util::{agrees, complexes, report};

type C = Complex<f64>;

const DATA: &str = include_str!("../data/tf_complex.txt");

fn op(name: &str, z: &Tensor) -> Result<Tensor> {
    match name {
        "sqrt" => z.sqrt(),
        "rsqrt" => z.rsqrt(),
        "reciprocal" => z.reciprocal(),
        "exp" => z.exp(),
        "log" => z.log(),
        "sin" => z.sin(),
        "cos" => z.cos(),
        "tan" => z.tan(),
        "sinh" => z.sinh(),
        "cosh" => z.cosh(),
        "tanh" => z.tanh(),
        "sigmoid" => z.sigmoid(),
        "square" => z.square(),
        "abs" => z.abs()?.cast(DType::C128),
        "angle" => z.angle()?.cast(DType::C128),
        "conj" => z.conj(),
        _ => panic!("no op {name}"),
    }
}

/// Both parts agree (NaN with NaN, infinities equal), within 1e-12 of
/// the number's modulus.
fn close(a: C, b: C) -> bool {
    let scale = if b.norm().is_finite() { b.norm() } else { 0.0 };
    agrees(a.re, b.re, 1e-12, scale) && agrees(a.im, b.im, 1e-12, scale)
}

#[test]
fn complex_functions_match_tensorflow_at_edges() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let [name, z, value, grad] = line.split('|').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        let zs = complexes(z);
        let z = Tensor::vector(&zs);
        let w: Vec<C> = (0..zs.len())
            .map(|i| C::new(1.0 + 0.5 * i as f64, -0.5 * (i % 3) as f64))
            .collect();
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(&z);
            op(name, &z)
        })?;
        let g = tape
            .gradient_with(
                &y,
                &z,
                GradientOptions::default().output_gradients(vec![Tensor::vector(&w)]),
            )?
            .expect("a gradient");
        for (what, got, want) in [
            ("value", y.to_vec::<C>()?, complexes(value)),
            ("grad", g.to_vec::<C>()?, complexes(grad)),
        ] {
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                checked += 1;
                if !close(*a, *b) && !known(name, what, zs[i]) {
                    bad.push(format!("{name} {what} at {:e}: got {a:e}, TensorFlow {b:e}", zs[i]));
                }
            }
        }
    }
    report(checked, 500, &bad);
    Ok(())
}

/// Where this crate deliberately differs from TensorFlow: (op, what,
/// which points, why).
type Known = (&'static str, &'static str, fn(C) -> bool, &'static str);
const KNOWN: &[Known] = &[
    (
        "",
        "",
        |z| !z.re.is_finite() || !z.im.is_finite() || z == C::new(0.0, 0.0),
        "at infinite arguments and at 0, the special values of C99's Annex G (which TensorFlow's std::complex follows, e.g. sin(i·inf) = i·inf, 1/(inf + 0i) = NaN there) are not reproduced: this crate's are IEEE arithmetic on the formulas (NaN parts, 1/(inf + 0i) = 0)",
    ),
    (
        "rsqrt",
        "",
        |z| z.re < 0.0 && z.im == 0.0 && z.im.is_sign_negative(),
        "on the branch cut from below (-1 − 0i) this crate's rsqrt is 1/sqrt(z) = 1/(−i) = i, consistent with its sqrt (and TensorFlow's); TensorFlow's rsqrt gives −i there, the value from above",
    ),
    (
        "log",
        "value",
        |z| z.norm() < 1e-150 || z.norm() > 1e150,
        "ln|z| from hypot: ln(√2·1e-200) = −460.170445008529; TensorFlow's |z|² underflows or overflows and gives NaN",
    ),
    (
        "abs",
        "grad",
        |z| z.norm() < 1e-150,
        "w·z/|z| by hypot: 5·(1 + i)/√2 at 1e-200·(1 + i); TensorFlow's is 0 (|z|² underflows)",
    ),
];

fn known(name: &str, what: &str, z: C) -> bool {
    KNOWN
        .iter()
        .any(|(n, w, at, _)| (n.is_empty() || *n == name) && (w.is_empty() || *w == what) && at(z))
}
