//! The complex binary ops (and `abs`, `angle`, `sqrt`, `log`,
//! `reciprocal`, `pow_scalar`) in complex64 and complex128, and the
//! cumulative, sorting and indexing ops in f64, against TensorFlow 2.21 at
//! edge points: zeros of either sign, infinities, NaN, huge and tiny
//! moduli, the branch cut from both sides; ties, duplicate and
//! out-of-range indices, empty segments, negative and large shifts. Values
//! and reverse-mode gradients (a complex cotangent, TensorFlow's
//! conjugate convention; a weighted sum of the outputs for the real ops).
//! The numbers are TensorFlow's, printed by
//! `tests/reference/tf_complex_index.py` into
//! `tests/data/tf_complex_index.txt`; where TensorFlow's gradient divides
//! by the input (cumprod, the segment products) and is wrong at zeros and
//! infinities, JAX in f64 or the product rule referees (the line says
//! which). Deliberate differences are listed in [`KNOWN_C`] and
//! [`KNOWN_R`] with their reasons.

use gradtape::{Complex, DType, GradientOptions, GradientTape, Result, Tensor};

use super::tf_util::{agrees, complexes, floats, report, weighted};

type C = Complex<f64>;

const DATA: &str = include_str!("../data/tf_complex_index.txt");

/// A complex tensor of `dtype` (`complex64` rounds each part to f32).
fn ctensor(v: &[C], dtype: &str) -> Tensor {
    match dtype {
        "complex128" => Tensor::vector(v),
        "complex64" => Tensor::vector(
            &v.iter()
                .map(|z| Complex::new(z.re as f32, z.im as f32))
                .collect::<Vec<_>>(),
        ),
        _ => panic!("dtype {dtype}"),
    }
}

fn cvalues(t: &Tensor) -> Result<Vec<C>> {
    Ok(match t.dtype() {
        DType::C128 => t.to_vec::<C>()?,
        DType::C64 => t
            .to_vec::<Complex<f32>>()?
            .iter()
            .map(|z| C::new(z.re as f64, z.im as f64))
            .collect(),
        d => panic!("not complex: {d:?}"),
    })
}

/// The cotangent of the script: w[i] = (1 + i/2) − 0.5i·(i mod 3).
fn cotangent(n: usize, dtype: &str) -> Tensor {
    let w: Vec<C> = (0..n)
        .map(|i| C::new(1.0 + 0.5 * i as f64, -0.5 * (i % 3) as f64))
        .collect();
    ctensor(&w, dtype)
}

/// Both parts agree (NaN with NaN, infinities equal), within `rel` of the
/// number's modulus: 1e-12 in complex128 (a few ulps, with the error of
/// `exp(b·ln a)` growing with |b·ln a| ≤ 500 here); 2e-6 in complex64
/// (16 ulps of f32: TensorFlow's Eigen kernels and this crate's round in
/// different orders, and a power's `exp(b·ln a)` amplifies ln's rounding).
fn close(a: C, b: C, rel: f64) -> bool {
    let scale = if b.norm().is_finite() { b.norm() } else { 0.0 };
    agrees(a.re, b.re, rel, scale) && agrees(a.im, b.im, rel, scale)
}

fn rel(dtype: &str) -> f64 {
    if dtype == "complex128" {
        1e-12
    } else {
        2e-6
    }
}

fn binary(name: &str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match name.trim_end_matches("_bcast") {
        "add" => a.add(b),
        "sub" => a.sub(b),
        "mul" => a.mul(b),
        "div" => a.div(b),
        "pow" => a.pow(b),
        _ => panic!("no op {name}"),
    }
}

fn unary(name: &str, z: &Tensor) -> Result<Tensor> {
    let cd = z.dtype();
    match name.split_once(':') {
        Some(("pow_scalar", c)) => z.pow_scalar(c.parse().unwrap()),
        _ => match name {
            "abs" => z.abs()?.cast(cd),
            "angle" => z.angle()?.cast(cd),
            "exp" => z.exp(),
            "sqrt" => z.sqrt(),
            "log" => z.log(),
            "reciprocal" => z.reciprocal(),
            _ => panic!("no op {name}"),
        },
    }
}

#[test]
fn complex_ops_match_tensorflow_at_edges() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let fields: Vec<&str> = line.split('|').collect();
        let (name, dtype) = (fields[1], fields[2]);
        // (inputs, TensorFlow's value, TensorFlow's gradients)
        let (ins, value, grads): (Vec<Vec<C>>, _, Vec<&str>) = match fields[0] {
            "c2" => (
                vec![complexes(fields[3]), complexes(fields[4])],
                fields[5],
                vec![fields[6], fields[7]],
            ),
            "c1" => (vec![complexes(fields[3])], fields[4], vec![fields[5]]),
            _ => continue,
        };
        let xs: Vec<Tensor> = ins.iter().map(|v| ctensor(v, dtype)).collect();
        let tape = GradientTape::persistent();
        let y = tape.record(|| {
            xs.iter().for_each(|x| tape.watch(x));
            if xs.len() == 2 {
                binary(name, &xs[0], &xs[1])
            } else {
                unary(name, &xs[0])
            }
        })?;
        let opts = GradientOptions::default().output_gradients(vec![cotangent(y.numel(), dtype)]);
        let mut got = vec![("value", cvalues(&y)?, complexes(value))];
        for (k, x) in xs.iter().enumerate() {
            let g = tape.gradient_with(&y, x, opts.clone())?.expect("a gradient");
            got.push((["grad a", "grad b"][k], cvalues(&g)?, complexes(grads[k])));
        }
        // the points, as the inputs were rounded to the dtype
        let at: Vec<Vec<C>> = xs.iter().map(cvalues).collect::<Result<_>>()?;
        for (what, got, want) in got {
            assert_eq!(got.len(), want.len(), "{name} {dtype} {what}");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                checked += 1;
                let point: Vec<C> = at.iter().map(|v| v[i.min(v.len() - 1)]).collect();
                if !close(*a, *b, rel(dtype)) && !known_c(name, dtype, what, &point) {
                    bad.push(format!(
                        "{name} {dtype} {what} at {point:?}: got {a:e}, TensorFlow {b:e}"
                    ));
                }
            }
        }
    }
    report(checked, 1500, &bad);
    Ok(())
}

/// Where this crate deliberately differs from TensorFlow on the complex
/// ops: (op, what, which points of which dtype, why). `what` is a prefix
/// of "value", "grad a", "grad b".
type KnownC = (&'static str, &'static str, fn(&str, &[C]) -> bool, &'static str);
const KNOWN_C: &[KnownC] = &[
    (
        "",
        "",
        |_, p| p.iter().any(|z| !z.re.is_finite() || !z.im.is_finite()),
        "at infinite or NaN arguments, the special values of C99's Annex G (1/(inf + 0i) = NaN, \
         d angle at inf = NaN, d sqrt at inf + inf i = 0 there) are not reproduced: this crate's \
         are IEEE arithmetic on the formulas (1/(inf + 0i) = 0, NaN parts from inf - inf), as \
         in tf_complex.rs",
    ),
    (
        "div",
        "",
        |_, p| p[1] == C::new(0.0, 0.0),
        "by 0 + 0i: C99's infinities (each part of the numerator times an infinity of the sign \
         of the zero's real part), as JAX and TensorFlow's complex64 kernel; TensorFlow's \
         complex128 kernel gives NaN in both parts (see division_by_a_complex_zero_gives_c99_infinities)",
    ),
    (
        "reciprocal",
        "value",
        |d, p| d == "complex128" && p[0] == C::new(0.0, 0.0),
        "1 / (0 + 0i) = ±inf + NaN·i, C99's, as JAX and TensorFlow's complex64 kernel; \
         TensorFlow's complex128 kernel gives NaN + NaN·i",
    ),
    (
        "log",
        "value",
        |d, p| p.iter().any(|z| z.norm() < tiny(d) || z.norm() > huge(d)),
        "ln|z| from hypot: ln(√2·1e-20) = −45.705 in complex64; TensorFlow's |z|² underflows or \
         overflows and gives NaN",
    ),
    (
        "abs",
        "grad",
        |d, p| p.iter().any(|z| z.norm() < tiny(d)),
        "w·z/|z| by hypot: 6.5·(1 + i)/√2 at 1e-20·(1 + i) in complex64; TensorFlow's is 0 \
         (|z|² underflows)",
    ),
    (
        "pow",
        "grad b",
        |d, p| p[0].norm() < tiny(d) || p[0].norm() > huge(d),
        "d/db = conj(a^b ln a)·w with ln|a| from hypot: −1840.68 − 3.14159i at a = 1e-200·(1 + i), \
         3108.49 − 345.39i at a = 1e300; TensorFlow's ln a squares |a| and gives NaN",
    ),
    (
        "pow",
        "grad a",
        |d, p| p.iter().all(|z| z.norm() > huge(d)),
        "(1e200 + 1e200i)^(1e200 − 1e200i) overflows (|b ln a| ≈ 6.5e202): both values are \
         NaN + NaN i, and so is this crate's b·a^(b−1); TensorFlow's is inf + NaN i",
    ),
    (
        "",
        "",
        |d, p| d == "complex64" && p.iter().any(|z| z.norm() < tiny(d) || z.norm() > huge(d)),
        "complex64 results below f32's normal range: TensorFlow's CPU kernels flush subnormals to \
         zero (1e-20·(1 + i) squared is 2e-40i here, 0 there; d(1/z) at 1e20·(1 − i) is \
         3.5e-40i here), and results past its range get different NaN/inf parts (z² at \
         1e20·(1 − i), whose real part is rounding noise of exp(2 ln z) beside an infinite \
         imaginary part)",
    ),
];

/// Below these moduli `|z|²` underflows, above them it overflows.
fn tiny(dtype: &str) -> f64 {
    if dtype == "complex128" {
        1e-150
    } else {
        1e-19
    }
}

fn huge(dtype: &str) -> f64 {
    if dtype == "complex128" {
        1e150
    } else {
        1e19
    }
}

fn known_c(name: &str, dtype: &str, what: &str, at: &[C]) -> bool {
    KNOWN_C
        .iter()
        .any(|(n, w, p, _)| (n.is_empty() || *n == name) && (w.is_empty() || what.starts_with(w)) && p(dtype, at))
}

fn ints(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// The real op `name` of the watched `x`, and any non-differentiable
/// outputs after it (indices, as f64). Shapes and the other arguments are
/// the script's.
fn real_op(name: &str, x: &Tensor) -> Result<Vec<Tensor>> {
    let parts: Vec<&str> = name.split(':').collect();
    let arg = |k: usize| parts[k].parse::<isize>().unwrap();
    let flag = |k: usize| parts[k] == "1";
    let g = || x.reshape(&[2, 3, 4]);
    let seg = || x.reshape(&[6, 2]);
    let scatter_ids = || ints(&[1, 3, 1, 0, 1], &[5, 1]);
    let base = || Tensor::from_vec((1..=10).map(|i| 10.0 * i as f64).collect::<Vec<_>>(), &[5, 2]).unwrap();
    let upd = || Tensor::from_vec(vec![1.0, -2.0, 3.0, 4.0, -5.0, 0.5, -0.0, 7.0, 8.0, 9.0], &[5, 2]).unwrap();
    let ids2 = || ints(&[2, 1, 0, 0, 2, 1], &[3, 2]);
    let unsorted = || ints(&[-1, 4, 0, 4, -1, 2], &[6]);
    let sorted = || ints(&[1, 1, 3, 3, 3, 5], &[6]);
    let with_index = |(v, i): (Tensor, Tensor)| -> Result<Vec<Tensor>> { Ok(vec![v, i.cast(DType::F64)?]) };
    Ok(match parts[0] {
        "cumsum" => vec![x.reshape(&[2, 4])?.cumsum(arg(1), flag(2), flag(3))?],
        "cumprod" => vec![x.reshape(&[1, 4])?.cumprod(1, flag(1), flag(2))?],
        "top_k" => with_index(x.top_k(arg(1) as usize)?)?,
        "top_k_rows" => with_index(x.reshape(&[2, 3])?.top_k(arg(1) as usize)?)?,
        "sort" => vec![x.sort(0, false)?],
        "sort_desc" => vec![x.sort(0, true)?],
        "sort_rows" => vec![x.reshape(&[2, 3])?.sort(arg(1), false)?],
        "argsort" => vec![x.argsort(0, false)?],
        "argsort_desc" => vec![x.argsort(0, true)?],
        "unique" => with_index(x.unique()?)?,
        "searchsorted" => {
            let s = Tensor::vector(&[1.0, 2.0, 2.0, 2.0, 5.0, f64::INFINITY]);
            vec![s.searchsorted(x, parts[1] == "right")?]
        }
        "searchsorted_rows" => {
            let s = Tensor::from_vec(vec![0.0, 2.0, 2.0, 3.0, -0.0, 0.0, 0.0, 7.0], &[2, 4])?;
            vec![s.searchsorted(&x.reshape(&[2, 3])?, parts[1] == "right")?]
        }
        "bincount" => vec![ints(&[1, 3, 1, 0, 3, 3, 7], &[7]).bincount(Some(x), arg(1) as usize)?],
        "bincount_counts" => vec![Tensor::vector(&[1i32, 3, 1, 0, 3, 3, 7]).bincount(None, arg(1) as usize)?],
        "argwhere" => {
            let m = if x.numel() == 6 {
                x.reshape(&[2, 3])?
            } else {
                x.reshape(&[2, 2])?
            };
            vec![m.argwhere()?]
        }
        "boolean_mask" => {
            let (t, f) = (true, false);
            let mask = match parts[1] {
                "1" => Tensor::vector(&[t, f, t]),
                "2" => Tensor::from_vec(vec![t, f, f, f, t, t], &[3, 2])?,
                _ => Tensor::vector(&[f, f, f]),
            };
            vec![x.reshape(&[3, 2])?.boolean_mask(&mask)?]
        }
        "roll" => {
            let list = |s: &str| -> Vec<isize> {
                s.trim_matches(['[', ']'])
                    .split(',')
                    .map(|v| v.parse().unwrap())
                    .collect()
            };
            vec![x.reshape(&[2, 5])?.roll(&list(parts[1]), &list(parts[2]))?]
        }
        "gather_batch" => {
            let idx = match (parts[1], parts[2]) {
                ("1", _) => ints(&[2, 0, 2, 1, 1, 0], &[2, 3]),
                ("2", "2") => ints(&[1, 1, 3, 0, 2, 2, 0, 0, 0, 3, 1, 2], &[2, 3, 2]),
                _ => ints(&[3, 0, 3, 1, 1, 2], &[2, 3]),
            };
            vec![g()?.gather_with(&idx, arg(1), arg(2))?]
        }
        "gather_nd" => {
            let idx = match parts[1] {
                "1" => ints(&[1, 0, 1], &[3, 1]),
                "2" => ints(&[1, 2, 0, 0, 1, 2], &[3, 2]),
                _ => ints(&[1, 2, 3, 1, 2, 3, 0, 1, 0, 1, 0, 0], &[2, 2, 3]),
            };
            vec![g()?.gather_nd(&idx)?]
        }
        "scatter_nd" => vec![Tensor::scatter_nd(&scatter_ids(), &x.reshape(&[5, 2])?, &[5, 2])?],
        "tsn_add" if parts[1] == "x" => vec![x.reshape(&[5, 2])?.tensor_scatter_nd_add(&scatter_ids(), &upd())?],
        "tsn_add" => vec![base().tensor_scatter_nd_add(&scatter_ids(), &x.reshape(&[5, 2])?)?],
        "tsn_update" if parts[1] == "x" => {
            vec![x.reshape(&[5, 2])?.tensor_scatter_nd_update(&scatter_ids(), &upd())?]
        }
        "tsn_update" => vec![base().tensor_scatter_nd_update(&scatter_ids(), &x.reshape(&[5, 2])?)?],
        "tsn_add2" => vec![x
            .reshape(&[5, 2])?
            .tensor_scatter_nd_add(&ids2(), &Tensor::vector(&[1.0, 2.0, 4.0]))?],
        "tsn_update2" => vec![base().tensor_scatter_nd_update(&ids2(), x)?],
        "segment_sum" => vec![seg()?.segment_sum(&sorted())?],
        "segment_mean" => vec![seg()?.segment_mean(&sorted())?],
        "segment_max" => vec![seg()?.segment_max(&sorted())?],
        "segment_min" => vec![seg()?.segment_min(&sorted())?],
        "segment_prod" => vec![seg()?.segment_prod(&sorted())?],
        "unsorted_segment_sum" => vec![seg()?.unsorted_segment_sum(&unsorted(), 6)?],
        "unsorted_segment_mean" => vec![seg()?.unsorted_segment_mean(&unsorted(), 6)?],
        "unsorted_segment_max" => vec![seg()?.unsorted_segment_max(&unsorted(), 6)?],
        "unsorted_segment_min" => vec![seg()?.unsorted_segment_min(&unsorted(), 6)?],
        "unsorted_segment_prod" => vec![seg()?.unsorted_segment_prod(&unsorted(), 6)?],
        "take_along_axis" => {
            let idx = if parts[1] == "1" {
                ints(&[2, 2, 0, 1, 1, 0, 1, 1], &[2, 4])
            } else {
                ints(&[1, 0, 1, 1, 1, 1], &[2, 3])
            };
            vec![x.reshape(&[2, 3])?.take_along_axis(&idx, arg(1))?]
        }
        "one_hot" => {
            let i = ints(&[0, 3, -1, 2, 7, 1], &[2, 3]);
            if parts[1] == "nan" {
                vec![i.one_hot(3, f64::NAN, f64::NEG_INFINITY, -1, DType::F64)?]
            } else {
                vec![i.one_hot(4, 2.5, -0.0, arg(1), DType::F64)?]
            }
        }
        _ => panic!("no op {name}"),
    })
}

/// Whether `got` is `want` exactly, NaN with NaN and zeros with their
/// sign (these ops move, count or add a few exact numbers).
fn same_bits(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(a, b)| (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative()))
}

#[test]
fn index_ops_match_tensorflow_at_edges() -> Result<()> {
    let mut bad = Vec::new();
    let mut checked = 0;
    for line in DATA.lines() {
        let ["r", name, x, value, grad, referee] = line.split('|').collect::<Vec<_>>()[..] else {
            continue;
        };
        let xv = floats(x).unwrap();
        let x = Tensor::vector(&xv);
        let tape = GradientTape::new();
        let (ys, s) = tape.record(|| {
            tape.watch(&x);
            let ys = real_op(name, &x)?;
            let s = if ys[0].dtype() == DType::F64 {
                Some(weighted(&ys[0])?)
            } else {
                None
            };
            Ok((ys, s))
        })?;
        let g = match &s {
            Some(s) => tape.gradient(s, &x)?.map(|g| g.to_vec::<f64>()).transpose()?,
            None => None,
        };
        let got: Vec<f64> = ys.iter().flat_map(|y| y.try_to_vec_f64().unwrap()).collect();
        let want = if value == "empty" {
            vec![]
        } else {
            floats(value).unwrap()
        };
        checked += 1;
        if !same_bits(&got, &want) && !known_r(name, "value", &xv) {
            bad.push(format!("{name} value at {xv:?}: got {got:?}, TensorFlow {want:?}"));
        }
        checked += 1;
        let same = match (g.as_ref(), floats(grad).as_ref()) {
            (Some(g), Some(w)) => g.len() == w.len() && g.iter().zip(w).all(|(a, b)| agrees(*a, *b, 1e-12, 0.0)),
            (None, None) => true,
            // no gradient and zeros are the same derivative
            (None, Some(w)) | (Some(w), None) => w.iter().all(|&v| v == 0.0),
        };
        if !same && !known_r(name, "grad", &xv) {
            bad.push(format!("{name} grad ({referee}) at {xv:?}: got {g:?}, want {grad}"));
        }
    }
    report(checked, 250, &bad);
    Ok(())
}

/// Where this crate deliberately differs from its referees on the real
/// ops: (op, what, which inputs, why).
type KnownR = (&'static str, &'static str, fn(&[f64]) -> bool, &'static str);
const KNOWN_R: &[KnownR] = &[
    (
        "cumprod",
        "grad",
        |x| x.iter().any(|v| v.is_infinite()),
        "at an infinite input the gradient's terms hold 0·inf: JAX's product rule evaluates \
         each term (w₀·x₀x₂x₃ = 0·2·inf = NaN at [0, −0, 2, inf] reversed), this crate's \
         division-free form P_j·r_j groups them as (x₂x₃)·(w₁ + x₀w₀) = inf",
    ),
    (
        "cumprod",
        "grad",
        |x| x.iter().any(|v| v.abs() > 1e150),
        "at [1e200, 1e200, 1e-200, 0] d/dx₂ = w₂x₀x₁ + w₃x₀x₁x₃ = 2e400 + 0 overflows to inf, \
         as here (P₂·(w₂ + x₃w₃)); JAX's x₀x₁x₃ is inf·0 = NaN",
    ),
];

fn known_r(name: &str, what: &str, x: &[f64]) -> bool {
    KNOWN_R
        .iter()
        .any(|(n, w, at, _)| name.starts_with(n) && *w == what && at(x))
}

/// `sinh`, `cosh`, `sin` and `cos` (complex128) where `sinh` or `cosh` of
/// one part overflows and the product with the other part's `cos` or `sin`
/// may not (`sinh 711 · cos 1.5 = 2.1e307`): finite where TensorFlow is
/// finite, each part to 1e-13 relative, infinities of the same sign. The
/// numbers are TensorFlow 2.21's (`tf.sinh`, `tf.cosh`, `tf.sin`, `tf.cos`
/// on `tf.constant(Z, tf.complex128)`, printed with `repr`).
#[test]
fn hyperbolic_parts_overflow_only_where_their_product_does() -> Result<()> {
    const Z: [(f64, f64); 8] = [
        (711.0, 1.5),
        (711.5, 1.57),
        (-712.0, 1.5),
        (740.0, std::f64::consts::FRAC_PI_2),
        (1.5, 711.0),
        (-0.3, 712.2),
        (0.4, -745.0),
        (1.2, -711.1),
    ];
    const INF: f64 = f64::INFINITY;
    #[rustfmt::skip]
    let want: [(&str, [(f64, f64); 8]); 4] = [
        ("sinh", [(2.147803337356502e307, INF), (3.986439356179972e305, INF), (-5.838334783039871e307, INF),
            (7.309159999291395e304, INF), (1.1503465764382506, 1.9795610597029916),
            (0.17922537588923396, 0.8451153393308964), (-0.37118307097810077, 0.46295535270553767),
            (0.6846047120475461, -1.6137190807002815)]),
        ("cosh", [(2.147803337356502e307, INF), (3.986439356179972e305, INF), (5.838334783039871e307, -INF),
            (7.309159999291395e304, INF), (1.2708929965958786, 1.791796236173544),
            (-0.6152338355038331, -0.24619275732339616), (-0.9769287663661633, 0.17589940583097063),
            (0.821209055032025, -1.3452843460492094)]),
        ("sin", [(1.9795610597029916, 1.1503465764382506), (2.5010764394459613, 0.1625078793442873),
            (-2.138980986595297, -0.8862096356309273), (-2.4791243484944467, 0.3551157734745973),
            (INF, 2.147803337356502e307), (-INF, INF), (INF, -INF), (INF, -1.2159441997570062e308)]),
        ("cos", [(1.2708929965958786, -1.791796236173544), (0.1772119019827662, -2.293551526194051),
            (-0.9790767778232164, 1.9360949045963065), (0.38719388226409823, 2.2737346866312915),
            (2.147803337356502e307, -INF), (INF, INF), (INF, INF), (1.2159441997570062e308, INF)]),
    ];
    let z: Vec<C> = Z.iter().map(|&(re, im)| C::new(re, im)).collect();
    let z = Tensor::vector(&z);
    let part = |got: f64, want: f64| {
        if want.is_infinite() {
            got == want
        } else {
            (got - want).abs() <= 1e-13 * want.abs()
        }
    };
    let mut bad = vec![];
    for (name, w) in want {
        let y = match name {
            "sinh" => z.sinh()?,
            "cosh" => z.cosh()?,
            "sin" => z.sin()?,
            _ => z.cos()?,
        };
        for (i, (g, w)) in y.to_vec::<C>()?.iter().zip(w).enumerate() {
            if !(part(g.re, w.0) && part(g.im, w.1)) {
                bad.push(format!("{name}{:?}: {g} vs TensorFlow's {w:?}", Z[i]));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    Ok(())
}

/// Division by a complex zero, and the reciprocal of one, give C99's
/// (Annex G) infinities: each part of the numerator times an infinity of
/// the sign of the denominator's real part. The numbers are JAX's (XLA,
/// complex128, `jax_enable_x64`), the referee here: TensorFlow 2.21's
/// kernels gave these with varying signs from one run to the next (`(1 +
/// i) / 0` was `inf + inf·i`, then `-inf - inf·i`).
#[test]
fn division_by_a_complex_zero_gives_c99_infinities() -> Result<()> {
    const INF: f64 = f64::INFINITY;
    const NAN: f64 = f64::NAN;
    // (numerator, denominator, JAX's quotient)
    type Part = (f64, f64);
    let cases: [(Part, Part, Part); 7] = [
        ((1.0, 1.0), (0.0, 0.0), (INF, INF)),
        ((1.0, 0.0), (0.0, 0.0), (INF, NAN)),
        ((0.0, 0.0), (0.0, 0.0), (NAN, NAN)),
        ((-1.0, 2.0), (0.0, 0.0), (-INF, INF)),
        ((1.0, 1.0), (-0.0, 0.0), (-INF, -INF)),
        ((INF, 1.0), (0.0, 0.0), (INF, INF)),
        ((2.0, -3.0), (1e-300, 0.0), (2e300, -3e300)),
    ];
    let same = |g: f64, w: f64| (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-15 * w.abs();
    for dtype in [DType::C128, DType::C64] {
        let mut bad = vec![];
        for (x, y, want) in cases {
            if dtype == DType::C64 && y.0 == 1e-300 {
                continue; // (1e-300 is zero in complex64)
            }
            let c = |(re, im): (f64, f64)| Tensor::vector(&[C::new(re, im)]).cast(dtype);
            let q = c(x)?.div(&c(y)?)?.cast(DType::C128)?.to_vec::<C>()?[0];
            if !(same(q.re, want.0) && same(q.im, want.1)) {
                bad.push(format!("{dtype}: {x:?} / {y:?} = {q}, JAX: {want:?}"));
            }
        }
        // 1 / 0 = inf + NaN·i, also as the reciprocal and as a power
        let zero = Tensor::vector(&[C::new(0.0, 0.0)]).cast(dtype)?;
        for (what, r) in [
            ("reciprocal", zero.reciprocal()?),
            ("1 / z", zero.ones_like().div(&zero)?),
        ] {
            let r = r.cast(DType::C128)?.to_vec::<C>()?[0];
            if !(r.re == INF && r.im.is_nan()) {
                bad.push(format!("{dtype}: {what} of 0 = {r}, JAX: inf+NaNi"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
    Ok(())
}

/// Complex `cumsum` and `cumprod` (complex128, every exclusive/reverse
/// flag) and their gradients under a complex cotangent, against
/// TensorFlow 2.21's, printed by `tests/reference/tf_complex_scan.py`;
/// complex64 gives the same to its precision. TensorFlow's own `cumprod`
/// gradient omits the conjugate of its convention (it gives `g · ∂y/∂x`
/// where its `multiply` gives `g · conj(∂y/∂x)`: at the first point,
/// `-1.235 - 1.115i` against `1.199 - 1.143i`), so the cumprod rows are
/// TensorFlow's gradients of the same products written as a chain of
/// `tf.multiply`.
#[test]
fn complex_cumsum_and_cumprod_match_tensorflow() -> Result<()> {
    type Z = (f64, f64);
    type Row<'a> = (&'a str, bool, bool, [Z; 4], [Z; 4]);
    #[rustfmt::skip]
    let rows: [Row; 8] = [
        ("cumsum", false, false, [(1.0, 2.0), (0.5, 2.3), (2.5, 1.2999999999999998), (3.2, 1.2999999999999998)], [(1.1, 1.3), (0.8, 1.5), (-0.2, 1.0), (0.2, 0.1)]),
        ("cumsum", false, true, [(3.2, 1.3), (2.2, -0.7), (2.7, -1.0), (0.7, 0.0)], [(0.3, -0.2), (1.3, 0.3), (0.9, 1.2), (1.1, 1.3)]),
        ("cumsum", true, false, [(0.0, 0.0), (1.0, 2.0), (0.5, 2.3), (2.5, 1.2999999999999998)], [(0.8, 1.5), (-0.2, 1.0), (0.2, 0.1), (0.0, 0.0)]),
        ("cumsum", true, true, [(2.2, -0.7), (2.7, -1.0), (0.7, 0.0), (0.0, 0.0)], [(0.0, 0.0), (0.3, -0.2), (1.3, 0.3), (0.9, 1.2)]),
        ("cumprod", false, false, [(1.0, 2.0), (-1.1, -0.7), (-2.9000000000000004, -0.2999999999999998), (-2.0300000000000002, -0.20999999999999985)], [(1.1989999999999998, -1.1429999999999998), (3.869999999999999, 3.1599999999999997), (-0.3929999999999999, -1.2489999999999999), (-0.6100000000000001, -0.23000000000000007)]),
        ("cumprod", false, true, [(-2.0300000000000002, -0.20999999999999996), (-0.49, 0.77), (1.4, -0.7), (0.7, 0.0)], [(-0.30100000000000005, -0.13299999999999998), (1.4699999999999998, 0.20999999999999985), (-0.6579999999999999, 0.5459999999999999), (-2.46, 0.7200000000000001)]),
        ("cumprod", true, false, [(1.0, 0.0), (1.0, 2.0), (-1.1, -0.7), (-2.9000000000000004, -0.2999999999999998)], [(1.44, -0.12), (2.5, 1.5), (-0.29000000000000004, 0.02999999999999997), (0.0, 0.0)]),
        ("cumprod", true, true, [(-0.49, 0.77), (1.4, -0.7), (0.7, 0.0), (1.0, 0.0)], [(0.0, 0.0), (0.5599999999999999, -0.06999999999999998), (0.5529999999999999, 0.357), (0.67, 2.71)]),
    ];
    let c = |v: &[Z]| v.iter().map(|&(re, im)| C::new(re, im)).collect::<Vec<_>>();
    let x0 = c(&[(1.0, 2.0), (-0.5, 0.3), (2.0, -1.0), (0.7, 0.0)]);
    let g = c(&[(0.3, -0.2), (1.0, 0.5), (-0.4, 0.9), (0.2, 0.1)]);
    let mut bad = vec![];
    for (dtype, tol) in [(DType::C128, 1e-14), (DType::C64, 1e-6)] {
        for (op, exclusive, reverse, y_want, d_want) in &rows {
            let x = Tensor::vector(&x0).cast(dtype)?;
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&x);
                match *op {
                    "cumsum" => x.cumsum(0, *exclusive, *reverse),
                    _ => x.cumprod(0, *exclusive, *reverse),
                }
            })?;
            let opts = GradientOptions::default().output_gradients(vec![Tensor::vector(&g).cast(dtype)?]);
            let d = tape.gradient_with(&y, &x, opts)?.expect("a gradient");
            for (what, got, want) in [("value", &y, y_want), ("gradient", &d, d_want)] {
                for (i, (a, w)) in got.cast(DType::C128)?.to_vec::<C>()?.iter().zip(c(want)).enumerate() {
                    if (a - w).norm() > tol * w.norm().max(1.0) {
                        bad.push(format!(
                            "{dtype} {op} exclusive {exclusive} reverse {reverse} {what}[{i}]: {a} vs TensorFlow's {w}"
                        ));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // central finite differences: TensorFlow's gradient of the real loss
    // L = Re Σ conj(g_k) y_k is ∂L/∂re + i ∂L/∂im, element by element
    for (op, exclusive, reverse, _, d_want) in &rows {
        let scan = |x: &[C]| -> Result<Vec<C>> {
            let x = Tensor::vector(x);
            match *op {
                "cumsum" => x.cumsum(0, *exclusive, *reverse),
                _ => x.cumprod(0, *exclusive, *reverse),
            }?
            .to_vec::<C>()
        };
        let loss = |x: &[C]| -> Result<f64> { Ok(scan(x)?.iter().zip(&g).map(|(y, g)| (g.conj() * y).re).sum()) };
        let h = 1e-6;
        for (j, w) in c(d_want).iter().enumerate() {
            let part = |dir: C| -> Result<f64> {
                let (mut up, mut down) = (x0.clone(), x0.clone());
                up[j] += dir * h;
                down[j] -= dir * h;
                Ok((loss(&up)? - loss(&down)?) / (2.0 * h))
            };
            let fd = C::new(part(C::new(1.0, 0.0))?, part(C::new(0.0, 1.0))?);
            assert!(
                (fd - w).norm() <= 1e-8 * w.norm().max(1.0),
                "{op} {exclusive} {reverse}: finite differences {fd} vs {w} at {j}"
            );
        }
    }
    // forward mode: the tangent of the scans equals that of the same sums
    // and products written element by element
    let x = Tensor::vector(&x0);
    let v = Tensor::vector(&g);
    for (op, exclusive, reverse, _, _) in &rows {
        let acc = gradtape::ForwardAccumulator::new();
        acc.watch(&x, &v)?;
        let (y, chain) = acc.record(|| {
            let y = match *op {
                "cumsum" => x.cumsum(0, *exclusive, *reverse)?,
                _ => x.cumprod(0, *exclusive, *reverse)?,
            };
            let order: Vec<usize> = if *reverse {
                (0..4).rev().collect()
            } else {
                (0..4).collect()
            };
            let mut run = Tensor::vector(&[C::new(if *op == "cumsum" { 0.0 } else { 1.0 }, 0.0)]);
            let mut out = vec![run.clone(); 4];
            for i in order {
                let xi = x.narrow(0, i, 1)?;
                let next = if *op == "cumsum" { run.add(&xi)? } else { run.mul(&xi)? };
                out[i] = if *exclusive { run.clone() } else { next.clone() };
                run = next;
            }
            Ok((y, Tensor::concat(&out.iter().collect::<Vec<_>>(), 0)?))
        })?;
        let (t, want) = (acc.jvp(&y)?.expect("a tangent"), acc.jvp(&chain)?.expect("a tangent"));
        for (a, w) in t.to_vec::<C>()?.iter().zip(want.to_vec::<C>()?) {
            assert!(
                (a - w).norm() <= 1e-14 * w.norm().max(1.0),
                "{op} {exclusive} {reverse} tangent: {a} vs {w}"
            );
        }
    }
    // traced, the same bits as eager
    let f = gradtape::function(|x: &Tensor| Ok(vec![x.cumsum(0, true, false)?, x.cumprod(0, false, true)?]));
    let (got, want) = (f.call(&x)?, [x.cumsum(0, true, false)?, x.cumprod(0, false, true)?]);
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(a.to_vec::<C>()?, b.to_vec::<C>()?);
    }
    Ok(())
}
