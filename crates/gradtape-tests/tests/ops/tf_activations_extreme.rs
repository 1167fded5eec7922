//! The activation functions at extreme inputs against TensorFlow 2.21, in
//! `f32` and `f64`: 0, -0, the smallest subnormal, ±1e-30, ±1, ±20, ±40,
//! ±88, ±700, ±max/4, ±max/2, ±max, ±inf and NaN. Each op's value, first
//! and second derivative (nested tapes), eager and traced
//! (`gradtape::function`, the tapes inside the traced body), and the
//! forward-mode tangent against the first derivative. The numbers are
//! TensorFlow's (`tf.nn.*`, `tf.math.*`, nested `tf.GradientTape`s),
//! printed with JAX's (f64, `jax.nn.*`, `jax.grad` of `jax.grad`) beside
//! them by `tests/reference/tf_activations_extreme.py` into
//! `tests/data/tf_activations_extreme.txt`. Where TensorFlow is wrong JAX
//! or mpmath (exact closed forms of f, f', f'', also printed by the
//! script) referees, and where this crate deliberately differs the point
//! is listed in [`KNOWN`] with its reason.
//!
//! Agreement: NaN with NaN, an infinity only with itself (sign included),
//! zeros of either sign alike, else within 1e-5 (`f32`) or 1e-12 (`f64`)
//! of the reference's magnitude; differences below the dtype's smallest
//! normal number count as equal (TensorFlow's kernels flush subnormal
//! results to zero in places).

use gradtape::{function, DType, ForwardAccumulator, GradientTape, Result, Tensor};

use super::tf_util::{floats, magnitude};

const DATA: &str = include_str!("../data/tf_activations_extreme.txt");

/// leaky_relu's slope in the reference script (exact in `f32`).
const ALPHA: f64 = 0.25;

type Op = fn(&Tensor) -> Result<Tensor>;

fn op(name: &str) -> Op {
    match name {
        "relu" => |x| x.relu(),
        "relu6" => |x| x.relu6(),
        "leaky_relu" => |x| x.leaky_relu(ALPHA),
        "elu" => |x| x.elu(),
        "selu" => |x| x.selu(),
        "softplus" => |x| x.softplus(),
        "softsign" => |x| x.softsign(),
        "sigmoid" => |x| x.sigmoid(),
        "log_sigmoid" => |x| x.log_sigmoid(),
        "tanh" => |x| x.tanh(),
        "silu" => |x| x.silu(),
        "gelu" => |x| x.gelu(false),
        "gelu_tanh" => |x| x.gelu(true),
        "softmax" => |x| x.softmax(-1),
        "log_softmax" => |x| x.log_softmax(-1),
        _ => panic!("no op {name}"),
    }
}

/// The ops the script applies to rows `[p, 1]` (last axis).
fn rows(name: &str) -> bool {
    matches!(name, "softmax" | "log_softmax")
}

/// `w[i] = 1 + i/2` over the flattened `t`, in `t`'s dtype and shape.
fn weights(t: &Tensor) -> Result<Tensor> {
    let w: Vec<f64> = (0..t.numel()).map(|i| 1.0 + 0.5 * i as f64).collect();
    Tensor::vector(&w).cast(t.dtype())?.reshape(t.shape())
}

/// The reduction whose gradient is taken, `Σ w·t`: weights above 1, so
/// that a rule's product of the cotangent with a huge `x` overflows where
/// a rule is written so.
fn reduce(t: &Tensor) -> Result<Tensor> {
    t.mul(&weights(t)?)?.sum_all()
}

/// `[y, d1, d2]` at `x`: the value, the gradient of `Σ w·y` and the
/// gradient of `Σ w·d1` (zeros where a tape gives none): `w·f'(x)` and
/// `w²·f''(x)` for the elementwise ops.
fn derivatives(name: &str, x: &Tensor) -> Result<Vec<Tensor>> {
    let f = op(name);
    let outer = GradientTape::new();
    let (y, d1) = outer.record(|| {
        outer.watch(x);
        let inner = GradientTape::new();
        let y = inner.record(|| {
            inner.watch(x);
            f(x)
        })?;
        let s = inner.record(|| reduce(&y))?;
        let d1 = inner.gradient(&s, x)?.unwrap_or_else(|| x.zeros_like());
        Ok((y, d1))
    })?;
    let s1 = outer.record(|| reduce(&d1))?;
    let d2 = outer.gradient(&s1, x)?.unwrap_or_else(|| x.zeros_like());
    Ok(vec![y, d1, d2])
}

/// The forward-mode tangent of `y` for the tangent `w`: `J·w`, which is
/// the gradient of `Σ w·y` (`Jᵀw`) where the Jacobian is symmetric (the
/// elementwise ops' diagonal one, softmax's). `None` for log_softmax.
fn tangent(name: &str, x: &Tensor) -> Result<Option<Tensor>> {
    if name == "log_softmax" {
        return Ok(None);
    }
    let acc = ForwardAccumulator::new();
    acc.watch(x, &weights(x)?)?;
    let y = acc.record(|| op(name)(x))?;
    acc.jvp(&y)
}

/// NaN with NaN, an infinity only with itself, else within `rel` of
/// `scale` (at least `|want|`) or `floor`.
fn agrees(got: f64, want: f64, rel: f64, scale: f64, floor: f64) -> bool {
    (got.is_nan() && want.is_nan())
        || got == want
        || (want.is_finite() && got.is_finite() && (got - want).abs() <= (rel * want.abs().max(scale)).max(floor))
}

struct Case {
    name: String,
    dtype: DType,
    x: Tensor,
    /// each element's point (of a row: the row's `p`)
    points: Vec<f64>,
    /// TensorFlow's value, d1, d2 (`None`: no rule)
    tf: [Option<Vec<f64>>; 3],
    /// JAX's (f64)
    jax: [Vec<f64>; 3],
    /// mpmath's (NaN where not computed)
    exact: [Vec<f64>; 3],
}

fn cases() -> Vec<Case> {
    DATA.lines()
        .map(|line| {
            let p: Vec<&str> = line.split('|').collect();
            let [name, dtype, points, v, d1, d2, jv, jd1, jd2, ev, ed1, ed2] = p[..] else {
                panic!("bad line {line}");
            };
            let dtype = if dtype == "f32" { DType::F32 } else { DType::F64 };
            let mut points = floats(points).unwrap();
            let mut x = Tensor::vector(&points).cast(dtype).unwrap();
            if rows(name) {
                x = x.reshape(&[points.len() / 2, 2]).unwrap();
                points = points.chunks(2).flat_map(|r| [r[0], r[0]]).collect();
            }
            Case {
                name: name.to_string(),
                dtype,
                x,
                points,
                tf: [floats(v), floats(d1), floats(d2)],
                jax: [jv, jd1, jd2].map(|s| floats(s).unwrap()),
                exact: [ev, ed1, ed2].map(|s| floats(s).unwrap()),
            }
        })
        .collect()
}

const WHAT: [&str; 3] = ["value", "d1", "d2"];

/// Compares `got` (the `order`th of value, d1, d2 of one run) with the
/// reference, pushing each difference onto `bad`; the number compared.
fn compare(case: &Case, run: &str, order: usize, got: &[f64], bad: &mut Vec<String>) -> usize {
    let (rel, floor) = match case.dtype {
        DType::F32 => (1e-5, f32::MIN_POSITIVE as f64),
        _ => (1e-12, f64::MIN_POSITIVE),
    };
    let name = case.name.as_str();
    let dt = if case.dtype == DType::F32 { "f32" } else { "f64" };
    let tf = case.tf[order].as_ref().unwrap_or(&case.jax[order]);
    // (a row's elements carry the roundoff of its largest: for the
    // softmaxes, the result's magnitude)
    let scale = if rows(name) { magnitude(tf) } else { 0.0 };
    let mut checked = 0;
    for (i, &a) in got.iter().enumerate() {
        let p = case.points[i];
        let (want, from, rel) = match known(name, case.dtype, order, p) {
            Some(Reference::Jax) => (case.jax[order][i], "JAX", rel),
            Some(Reference::Exact) => (case.exact[order][i], "mpmath", rel),
            Some(Reference::ExactWithin(loose)) => (case.exact[order][i], "mpmath", loose),
            Some(Reference::JaxWithin(loose)) => (case.jax[order][i], "JAX", loose),
            Some(Reference::Zero) => (0.0, "zero", rel),
            None => (tf[i], "TensorFlow", rel),
        };
        checked += 1;
        if !agrees(a, want, rel, scale, floor) {
            bad.push(format!(
                "{name} {dt} {run} {} at {p:e} (#{i}): got {a:e}, {from} {want:e} (TensorFlow {}, JAX {:e}, mpmath {:e})",
                WHAT[order],
                case.tf[order].as_ref().map_or("none".into(), |t| format!("{:e}", t[i])),
                case.jax[order][i],
                case.exact[order][i],
            ));
        }
    }
    checked
}

#[test]
fn activations_at_extreme_inputs_match_tensorflow_eager_traced_and_forward() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for case in cases() {
        let name = case.name.clone();
        let eager = derivatives(&name, &case.x)?;
        let traced = {
            let name = name.clone();
            function(move |x: &Tensor| derivatives(&name, x)).call(&case.x)?
        };
        for (run, outs) in [("eager", &eager), ("traced", &traced)] {
            for (order, t) in outs.iter().enumerate() {
                checked += compare(&case, run, order, &t.to_vec_f64(), &mut bad);
            }
        }
        if let Some(t) = tangent(&name, &case.x)? {
            checked += compare(&case, "forward", 1, &t.to_vec_f64(), &mut bad);
        }
    }
    assert!(checked > 5000, "{checked} comparisons");
    assert!(bad.is_empty(), "{} differences:\n{}", bad.len(), bad.join("\n"));
    Ok(())
}

/// Which reference a listed point is compared with.
#[derive(Clone, Copy)]
enum Reference {
    /// JAX's f64 number: TensorFlow's is wrong there
    Jax,
    /// mpmath's: TensorFlow and JAX both compute less accurately there
    Exact,
    /// mpmath's, within this relative tolerance: this crate computes the
    /// formula TensorFlow and JAX compute, which cancels there (left to fix)
    ExactWithin(f64),
    /// JAX's, within this relative tolerance of the result's magnitude
    /// (left to investigate)
    JaxWithin(f64),
    /// 0: this crate's choice, with the reason listed
    Zero,
}

/// `x` finite and not 0 (mpmath's points).
fn finite(p: f64) -> bool {
    p.is_finite() && p != 0.0
}

/// `x` a negative subnormal or -1e-30 (of either dtype).
fn tiny_negative(p: f64) -> bool {
    (-1.1e-30..0.0).contains(&p)
}

/// Where TensorFlow is wrong or this crate deliberately differs: (ops,
/// dtype (`None`: both), orders (0 the value, 1 and 2 the derivatives),
/// which points, the reference used, why).
type Known = (
    &'static [&'static str],
    Option<DType>,
    &'static [usize],
    fn(f64) -> bool,
    Reference,
    &'static str,
);
const KNOWN: &[Known] = &[
    (
        &["relu", "relu6", "leaky_relu"],
        None,
        &[1],
        |p| p > 0.0 && p < 1e-38,
        Reference::Exact,
        "the slope right of the kink (1) at the smallest subnormal: TensorFlow's CPU kernels (and XLA's, JAX, in f64) treat a subnormal input as 0 (denormals-are-zero)",
    ),
    (
        &["elu", "selu"],
        None,
        &[0, 1, 2],
        tiny_negative,
        Reference::Exact,
        "expm1(x) = x and the slope eˣ (times λα) left of 0: TensorFlow's exp(x) − 1 gives 0 at -1e-30, and its EluGrad and SeluGrad branch on the output's sign, which is 0 there (JAX agrees with this crate)",
    ),
    (
        &["sigmoid", "softplus", "silu"],
        Some(DType::F32),
        &[0, 1, 2],
        |p| p == -88.0,
        Reference::Exact,
        "σ(−88) = 6.1e-39 is subnormal in f32: TensorFlow's kernels flush it to 0, this crate keeps it (as JAX): σ'(−88), softplus''(−88), silu(−88) are 4.5e-38 and more, normal numbers",
    ),
    (&["log_sigmoid"], Some(DType::F32), &[1, 2], |p| p == 88.0, Reference::Exact, "σ(−88) as above"),
    (
        &["sigmoid"],
        Some(DType::F64),
        &[1, 2],
        |p| p == 20.0,
        Reference::ExactWithin(1e-7),
        "σ' computed from the output as y(1 − y), as TensorFlow and JAX: 1 − y cancels for x ≫ 0 (4e-8 off at 20; 0 from 37 on, where it's e⁻ˣ)",
    ),
    (&["softplus"], Some(DType::F64), &[2], |p| p == 20.0, Reference::ExactWithin(1e-7), "σ' as above"),
    (&["log_sigmoid"], Some(DType::F64), &[2], |p| p == -20.0, Reference::ExactWithin(1e-7), "σ' as above"),
    (
        &["silu"],
        None,
        &[2],
        finite,
        Reference::Exact,
        "silu'' = σσ̄(2 + x(σ̄ − σ)) with σ̄ = σ(−x): TensorFlow's (and JAX's) is the derivative of σ(1 + x(1 − σ)), whose 1 − σ cancels for x ≫ 0 (0 at 40, where it is −5.8e-15) and whose product with x overflows to NaN at |x| ≥ max/4 (the limit is 0)",
    ),
    (
        &["softsign"],
        None,
        &[2],
        finite,
        Reference::Exact,
        "−2 sign(x)/(1 + |x|)³ (TensorFlow has no rule for SoftsignGrad): JAX's (1 + |x|)³ overflows to NaN at |x| ≥ max/4 and its CPU kernels take the subnormal -5e-324 for 0",
    ),
    (
        &["softsign"],
        None,
        &[2],
        |p| p == 0.0 || p.is_infinite(),
        Reference::Zero,
        "−2 sign(x)/(1 + |x|)³ is 0 at 0 (sign(0) = 0, as TensorFlow's Abs gradient: the mean of ∓2 either side of the kink; JAX's −2 takes the right side's) and at ±inf (the limit; JAX's NaN is 0 · inf)",
    ),
    (
        &["gelu", "gelu_tanh"],
        None,
        &[0, 1, 2],
        finite,
        Reference::Exact,
        "TensorFlow's f64 kernels round their constants to f32 (off by 5e-9), its 1 + tanh u (tanh form) cancels to 0 at -20, and its x² and x³ overflow to NaN at |x| ≥ max/4 where the derivatives' limits are 1 (0 left) and 0; JAX's overflow likewise in f64",
    ),
    (&["gelu", "gelu_tanh"], Some(DType::F64), &[0, 1, 2], |p| p == 0.0, Reference::Jax, "TensorFlow's f64 constants, as above"),
    (
        &["softmax"],
        Some(DType::F32),
        &[0],
        |p| !p.is_finite(),
        Reference::Jax,
        "TensorFlow's f32 kernel gives [NaN, 0] for the rows [inf, 1] and [NaN, 1]; its f64 kernel and JAX give NaN for the whole row, as this crate",
    ),
    (
        &["softmax"],
        Some(DType::F32),
        &[2],
        |p| p.is_finite(),
        Reference::JaxWithin(2e-4),
        "the f32 second derivative's sums cancel: TensorFlow's is within 3e-6 of JAX's f64 at the rows [0, 1] and [±1e-30, 1], this crate's within 1.6e-4 (its second-order graph rounds differently; left to investigate)",
    ),
];

fn known(name: &str, dtype: DType, order: usize, p: f64) -> Option<Reference> {
    KNOWN
        .iter()
        .find(|(n, d, o, at, _, _)| n.contains(&name) && d.is_none_or(|d| d == dtype) && o.contains(&order) && at(p))
        .map(|k| k.4)
}
