//! The harness of the activation fixtures (`tf_activations_extreme`,
//! `tf_activations_more`): a fixture line per op and dtype, printed by
//! `tests/reference/tf_activations_*.py`:
//! `op|dtype|points|value|d1|d2|jax_value|jax_d1|jax_d2|exact_value|exact_d1|exact_d2`,
//! `d1` the gradient of `Σ w·y` and `d2` that of `Σ w·d1` (nested tapes,
//! `w[i] = 1 + i/2` over each flattened tensor), TensorFlow's numbers
//! first, JAX's (f64) and mpmath's beside them as referees.
//!
//! [`run`] computes each line's three quantities eager and traced
//! (`gradtape::function`, the tapes inside the traced body) and, where
//! the Jacobian is symmetric, the forward-mode tangent against `d1`, and
//! compares them with TensorFlow's, or with the referee a [`Known`] entry
//! names for its points, with its reason.
//!
//! Agreement: NaN with NaN, an infinity only with itself (sign included),
//! zeros of either sign alike, else within 1e-5 (`f32`) or 1e-12 (`f64`)
//! of the reference's magnitude (of a row's: the result's largest);
//! differences below the dtype's smallest normal number count as equal
//! (TensorFlow's kernels flush subnormal results to zero in places).

use gradtape::{function, DType, ForwardAccumulator, GradientTape, Result, Tensor};

use super::tf_util::{floats, magnitude};

pub type Op = fn(&Tensor) -> Result<Tensor>;

/// One fixture: its lines, the op of each name, which names take rows
/// `[n, 2]` (and reduce over the last axis), which have a forward-mode
/// tangent equal to `d1` (a symmetric Jacobian), the listed differences,
/// and the least number of comparisons.
pub struct Fixture {
    pub data: &'static str,
    pub op: fn(&str) -> Op,
    pub rows: fn(&str) -> bool,
    pub forward: fn(&str) -> bool,
    pub known: &'static [Known],
    pub min_checked: usize,
}

/// `w[i] = 1 + i/2` over the flattened `t`, in `t`'s dtype and shape.
pub fn weights(t: &Tensor) -> Result<Tensor> {
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
pub fn derivatives(f: Op, x: &Tensor) -> Result<Vec<Tensor>> {
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

/// The forward-mode tangent of `f` at `x` for the tangent `w`: `J·w`, the
/// gradient of `Σ w·y` (`Jᵀw`) where the Jacobian is symmetric.
fn tangent(f: Op, x: &Tensor) -> Result<Option<Tensor>> {
    let acc = ForwardAccumulator::new();
    acc.watch(x, &weights(x)?)?;
    let y = acc.record(|| f(x))?;
    acc.jvp(&y)
}

/// NaN with NaN, an infinity only with itself, else within `rel` of
/// `scale` (at least `|want|`) or `floor`.
pub fn agrees(got: f64, want: f64, rel: f64, scale: f64, floor: f64) -> bool {
    (got.is_nan() && want.is_nan())
        || got == want
        || (want.is_finite() && got.is_finite() && (got - want).abs() <= (rel * want.abs().max(scale)).max(floor))
}

struct Case {
    name: String,
    dtype: DType,
    x: Tensor,
    /// each input element's point (of a row: the row's `p`)
    points: Vec<f64>,
    /// TensorFlow's value, d1, d2 (`None`: no rule)
    tf: [Option<Vec<f64>>; 3],
    /// JAX's (f64)
    jax: [Vec<f64>; 3],
    /// mpmath's (NaN where not computed)
    exact: [Vec<f64>; 3],
}

impl Case {
    /// The point of element `i` of a result of `n` elements (a row's
    /// result has fewer elements than the input: glu's halves).
    fn point(&self, i: usize, n: usize) -> f64 {
        self.points[i * self.points.len() / n.max(1)]
    }
}

fn cases(fx: &Fixture) -> Vec<Case> {
    fx.data
        .lines()
        .map(|line| {
            let p: Vec<&str> = line.split('|').collect();
            let [name, dtype, points, v, d1, d2, jv, jd1, jd2, ev, ed1, ed2] = p[..] else {
                panic!("bad line {line}");
            };
            let dtype = if dtype == "f32" { DType::F32 } else { DType::F64 };
            let mut points = floats(points).unwrap();
            let mut x = Tensor::vector(&points).cast(dtype).unwrap();
            if (fx.rows)(name) {
                x = x.reshape(&[points.len() / 2, 2]).unwrap();
                // (the row's point: the one of its two that varies down
                // the rows, not the fixed partner)
                let fixed_first = points.chunks(2).all(|r| r[0].to_bits() == points[0].to_bits());
                let varies = usize::from(fixed_first);
                points = points.chunks(2).flat_map(|r| [r[varies], r[varies]]).collect();
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
fn compare(fx: &Fixture, case: &Case, run: &str, order: usize, got: &[f64], bad: &mut Vec<String>) -> usize {
    let (rel, floor) = match case.dtype {
        DType::F32 => (1e-5, f32::MIN_POSITIVE as f64),
        _ => (1e-12, f64::MIN_POSITIVE),
    };
    let name = case.name.as_str();
    let dt = if case.dtype == DType::F32 { "f32" } else { "f64" };
    let tf = case.tf[order].as_ref().unwrap_or(&case.jax[order]);
    assert_eq!(got.len(), tf.len(), "{name} {dt} {run} {}: length", WHAT[order]);
    // (a row's elements carry the roundoff of its largest: for the
    // softmaxes, the result's magnitude)
    let scale = if (fx.rows)(name) { magnitude(tf) } else { 0.0 };
    for (i, &a) in got.iter().enumerate() {
        let p = case.point(i, got.len());
        let (want, from, rel) = match known(fx.known, name, case.dtype, order, p) {
            Some(Reference::Jax) => (case.jax[order][i], "JAX", rel),
            Some(Reference::Exact) => (case.exact[order][i], "mpmath", rel),
            Some(Reference::ExactWithin(loose)) => (case.exact[order][i], "mpmath", loose),
            Some(Reference::JaxWithin(loose)) => (case.jax[order][i], "JAX", loose),
            Some(Reference::Zero) => (0.0, "zero", rel),
            // (an elementwise op's derivatives carry the weights w, w²)
            Some(Reference::Value(v)) => (v * (1.0 + 0.5 * i as f64).powi(order as i32), "listed", rel),
            None => (tf[i], "TensorFlow", rel),
        };
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
    got.len()
}

/// Runs every line of `fx`, eager, traced and forward, and fails with
/// every difference.
pub fn run(fx: &Fixture) -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for case in cases(fx) {
        let f = (fx.op)(&case.name);
        let eager = derivatives(f, &case.x)?;
        let traced = function(move |x: &Tensor| derivatives(f, x)).call(&case.x)?;
        for (run, outs) in [("eager", &eager), ("traced", &traced)] {
            for (order, t) in outs.iter().enumerate() {
                checked += compare(fx, &case, run, order, &t.to_vec_f64(), &mut bad);
            }
        }
        if (fx.forward)(&case.name)
            && let Some(t) = tangent(f, &case.x)?
        {
            checked += compare(fx, &case, "forward", 1, &t.to_vec_f64(), &mut bad);
        }
    }
    assert!(checked > fx.min_checked, "{checked} comparisons");
    assert!(bad.is_empty(), "{} differences:\n{}", bad.len(), bad.join("\n"));
    Ok(())
}

/// Which reference a listed point is compared with.
#[derive(Clone, Copy)]
#[allow(dead_code)]
pub enum Reference {
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
    /// this value or derivative (times the element's weight for a
    /// derivative of an elementwise op): this crate's choice (a limit, a
    /// branch's slope), with the reason listed
    Value(f64),
}

/// Where TensorFlow is wrong or this crate deliberately differs: (ops,
/// dtype (`None`: both), orders (0 the value, 1 and 2 the derivatives),
/// which points, the reference used, why).
pub type Known = (
    &'static [&'static str],
    Option<DType>,
    &'static [usize],
    fn(f64) -> bool,
    Reference,
    &'static str,
);

fn known(list: &[Known], name: &str, dtype: DType, order: usize, p: f64) -> Option<Reference> {
    list.iter()
        .find(|(n, d, o, at, _, _)| n.contains(&name) && d.is_none_or(|d| d == dtype) && o.contains(&order) && at(p))
        .map(|k| k.4)
}

/// `x` finite and not 0 (mpmath's points).
pub fn finite(p: f64) -> bool {
    p.is_finite() && p != 0.0
}
