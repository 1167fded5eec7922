//! Random programs against TensorFlow 2.21: seeded programs of 2 to 9
//! steps over ~120 ops (elementwise ops broadcasting across ranks 0 to 4
//! and size-0 and size-1 dims, reductions, shape and index ops, batched
//! matmul, einsum, softmaxes, scans, sorts, segments, one_hot, casts,
//! integer and bool ops; values with ties, zeros, huge and tiny
//! magnitudes, now and then NaN and infinities), in f64, f32 and with
//! integers. TensorFlow ran each program and printed every step's value
//! (or its refusal of a step) and the gradients of the weighted sum of the
//! program's leaves w.r.t. its float inputs (`None` where unconnected):
//! `tests/reference/tf_programs.py 1 300 16` (seed 1, 300 programs, at
//! most 16 elements an input) wrote `tests/data/tf_programs.txt`.
//!
//! gradtape runs each program eagerly on a tape, and one in three also
//! traced (`gradtape::function`), and must give the same values (within
//! roundoff for floats, exactly for integers and bools), refuse the same
//! steps, and give the same gradients, `None` where TensorFlow has none.
//! A value that differs is a difference only where the step, run on
//! TensorFlow's own values of its operands, differs too (a kink reached by
//! a roundoff-sized difference upstream is not; its program's gradients
//! are then not compared).
//!
//! `tests/data/tf_programs_act.txt` (`tf_programs.py 2 200 16 act`) adds
//! Keras 3's activations (`tests/reference/tf_programs_act.py`: mish,
//! hard_sigmoid, hard_silu, celu, relu with its arguments, squareplus,
//! sparse_plus, glu; silu, log_sigmoid, softsign) and the fused LSTM step
//! against TensorFlow's composite of it, three steps in ten.
//! The deliberate differences, each with its reason and the campaign
//! that found it, are `tf_programs_known.rs`'s.
//!
//! `GRADTAPE_TF_PROGRAMS=file` replays another file of the same format (a
//! campaign: `tf_programs.py SEED COUNT [MAXNUMEL [more,act]] > file`).

use gradtape::{function, DType, GradientTape, Result, Tensor};

use super::tf_programs_known::{
    from_a_norm, infinities_of_a_sum, known_gradients, known_refusal, known_value, nan_of_a_product, tf_only_refusal,
    zero_sign_of_a_sum,
};
use super::tf_programs_ops::{apply, dtype, Attrs};
use super::tf_util::{agrees, magnitude, weighted};

const DATA: &str = include_str!("../data/tf_programs.txt");
const ACT_DATA: &str = include_str!("../data/tf_programs_act.txt");

#[derive(Clone, Debug)]
pub(super) enum Vals {
    F(Vec<f64>),
    I(Vec<i64>),
}

/// A value as TensorFlow gave it.
#[derive(Clone, Debug)]
pub(super) struct Value {
    pub(super) dtype: DType,
    pub(super) shape: Vec<usize>,
    pub(super) vals: Vals,
}

pub(super) enum Entry {
    Input(Value),
    Step {
        op: String,
        args: Vec<usize>,
        attrs: Attrs,
        /// TensorFlow's value, or its message refusing the step
        want: std::result::Result<Value, String>,
    },
}

pub(super) struct Program {
    pub(super) id: usize,
    pub(super) mode: String,
    pub(super) entries: Vec<Entry>,
    pub(super) leaves: Vec<usize>,
    pub(super) grads: Vec<Option<Vec<f64>>>,
    /// TensorFlow's gradient raised an error (see `known_gradients`)
    pub(super) tf_gradient_failed: bool,
}

impl Program {
    pub(super) fn fdt(&self) -> DType {
        if self.mode == "f32" {
            DType::F32
        } else {
            DType::F64
        }
    }
    fn refused(&self) -> bool {
        matches!(self.entries.last(), Some(Entry::Step { want: Err(_), .. }))
    }
}

fn parse_value(dt: &str, shape: &str, vals: &str) -> Value {
    let dtype = dtype(dt);
    let shape = match shape {
        "-" => vec![],
        s => s.split(',').map(|d| d.parse().expect("dim")).collect(),
    };
    let items: Vec<&str> = if vals == "." { vec![] } else { vals.split(',').collect() };
    let vals = if dtype.is_float() {
        Vals::F(items.iter().map(|v| v.parse().expect("float")).collect())
    } else {
        Vals::I(items.iter().map(|v| v.parse().expect("int")).collect())
    };
    Value { dtype, shape, vals }
}

fn parse(data: &str) -> Vec<Program> {
    let mut out: Vec<Program> = Vec::new();
    for line in data.lines() {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        let words: Vec<&str> = rest.splitn(3, ' ').collect();
        if tag == "P" {
            out.push(Program {
                id: words[0].parse().expect("id"),
                mode: words[1].to_string(),
                entries: vec![],
                leaves: vec![],
                grads: vec![],
                tf_gradient_failed: false,
            });
            continue;
        }
        let p = out.last_mut().expect("a P line first");
        match tag {
            "I" => p.entries.push(Entry::Input(parse_value(words[0], words[1], words[2]))),
            "S" => p.entries.push(Entry::Step {
                op: words[0].to_string(),
                args: words[1].split(',').map(|a| a.parse().expect("operand")).collect(),
                attrs: Attrs::parse(words[2]),
                want: Err(String::new()),
            }),
            "V" | "E" => {
                let Some(Entry::Step { want, .. }) = p.entries.last_mut() else {
                    panic!("{tag} without a step: {line}");
                };
                *want = match tag {
                    "V" => Ok(parse_value(words[0], words[1], words[2])),
                    _ => Err(rest.to_string()),
                };
            }
            "L" if rest != "-" => p.leaves = rest.split(',').map(|a| a.parse().expect("leaf")).collect(),
            "L" => {}
            "X" => p.tf_gradient_failed = true,
            "G" if rest == "." => p.grads.push(Some(vec![])),
            "G" => p.grads.push(super::tf_util::floats(rest)),
            _ => panic!("bad line {line}"),
        }
    }
    out
}

/// TensorFlow's value of entry `k` (an input, or a step that ran).
fn value_of(p: &Program, k: usize) -> &Value {
    match &p.entries[k] {
        Entry::Input(v) | Entry::Step { want: Ok(v), .. } => v,
        Entry::Step { .. } => unreachable!("an operand is a step that ran"),
    }
}

fn tensor(v: &Value) -> Result<Tensor> {
    match (&v.vals, v.dtype) {
        (Vals::F(f), dt) => Tensor::from_vec(f.clone(), &v.shape)?.cast(dt),
        (Vals::I(i), DType::Bool) => Tensor::from_vec(i.iter().map(|&b| b != 0).collect::<Vec<_>>(), &v.shape),
        (Vals::I(i), dt) => Tensor::from_vec(i.clone(), &v.shape)?.cast(dt),
    }
}

/// Why `got` is not TensorFlow's `want` (`rel` of the larger of each
/// element and the largest finite element, for floats), if it is not.
fn differs(got: &Tensor, want: &Value, (rel, least): (f64, f64)) -> Option<String> {
    if got.dtype() != want.dtype || got.shape() != want.shape.as_slice() {
        return Some(format!(
            "{} {:?}, TensorFlow {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype,
            want.shape
        ));
    }
    match &want.vals {
        Vals::F(w) => {
            let g = got.try_to_vec_f64().ok()?;
            let scale = magnitude(w).max(least);
            let bad = g.iter().zip(w).any(|(a, b)| !agrees(*a, *b, rel, scale));
            bad.then(|| format!("{g:?}, TensorFlow {w:?}"))
        }
        Vals::I(w) => {
            let g: Vec<i64> = match got.dtype() {
                DType::Bool => got.to_vec::<bool>().ok()?.into_iter().map(i64::from).collect(),
                _ => got.cast(DType::I64).ok()?.to_vec::<i64>().ok()?,
            };
            (&g != w).then(|| format!("{g:?}, TensorFlow {w:?}"))
        }
    }
}

/// What one replay found.
#[derive(Default)]
struct Report {
    programs: usize,
    steps: usize,
    grads: usize,
    traced: usize,
    /// steps whose value differed only through roundoff upstream
    amplified: usize,
    /// differences of the kinds [`known_value`] and [`known_gradients`] list
    known: usize,
    bad: Vec<String>,
}

/// The relative tolerance of a step's f64 value, and the least scale of
/// its roundoff: TensorFlow's `gelu`
/// (both forms) and `leaky_relu` compute with f32 constants (`leaky_relu`'s
/// `alpha` is an f32 attribute): 1e-9 off the exact value that mpmath
/// gives and this crate's kernels give.
fn value_tolerance(op: &str, fdt: DType) -> (f64, f64) {
    match (fdt, op) {
        // (and more where 1 + erf or 1 + tanh cancels: gelu_tanh(-10) is
        // -1.2e-37, TensorFlow's -0)
        (DType::F64, "gelu" | "gelu_tanh") => (1e-5, 1e-6),
        (DType::F64, "leaky_relu") => (1e-7, 0.0),
        // (f32 gelu_tanh where 1 + tanh cancels: TensorFlow's (and JAX's
        // and PyTorch's) value at -3.9619 is -8.40686e-5, mpmath's and this
        // crate's -8.41400e-5; at -6, -0 where it is -8.44e-11; seed 25's
        // program 1495, seed 26's 894)
        (DType::F32, "gelu_tanh") => (tolerances(fdt).0, 0.01),
        _ => (tolerances(fdt).0, 0.0),
    }
}

fn tolerances(fdt: DType) -> (f64, f64) {
    match fdt {
        DType::F32 => (1e-4, 1e-3),
        _ => (1e-9, 1e-7),
    }
}

/// Runs `p` eagerly on a tape; the values of its leaves and its loss's
/// gradients, unless a step differed.
fn check_eager(p: &Program, r: &mut Report) -> Result<()> {
    let tape = GradientTape::new();
    let mut sources = Vec::new();
    let mut compare_grads = true;
    let loss = tape.record(|| {
        let mut vals: Vec<Tensor> = Vec::new(); // gradtape's
        let mut theirs: Vec<Tensor> = Vec::new(); // TensorFlow's
        for (k, e) in p.entries.iter().enumerate() {
            let (op, args, attrs, want) = match e {
                Entry::Input(v) => {
                    let x = tensor(v)?;
                    if x.dtype().is_float() {
                        tape.watch(&x);
                        sources.push(x.clone());
                    }
                    vals.push(x.clone());
                    theirs.push(x);
                    continue;
                }
                Entry::Step { op, args, attrs, want } => (op, args, attrs, want),
            };
            r.steps += 1;
            let vtol = value_tolerance(op, p.fdt());
            let at = |what: String| format!("program {} ({}) step {k} {op}: {what}", p.id, p.mode);
            let got = apply(op, &args.iter().map(|&a| &vals[a]).collect::<Vec<_>>(), attrs);
            let alone = || apply(op, &args.iter().map(|&a| &theirs[a]).collect::<Vec<_>>(), attrs);
            match (want, got) {
                (Err(msg), Ok(_)) => {
                    // (TensorFlow refuses a mirror pad of an empty dim even
                    // by 0: this crate pads it by nothing)
                    if (op == "pad" && msg.contains("0 not less than 0")) || tf_only_refusal(op, msg, attrs) {
                        r.known += 1;
                    } else if alone().is_ok() {
                        r.bad.push(at(format!("TensorFlow refused ({msg}), gradtape ran")));
                    }
                    return Ok(None);
                }
                (Err(_), Err(_)) => return Ok(None),
                (Ok(w), Err(e)) => {
                    match known_refusal(op, w) {
                        Some(_) => r.known += 1,
                        None => r.bad.push(at(format!("gradtape refused ({e})"))),
                    }
                    return Ok(None);
                }
                (Ok(w), Ok(y)) => {
                    let operands: Vec<&Value> = args.iter().map(|&a| value_of(p, a)).collect();
                    let to = attrs.get("to").map(dtype);
                    if let Some(why) = differs(&y, w, vtol) {
                        match alone().map(|y| differs(&y, w, vtol)) {
                            _ if known_value(op, &operands, to).is_some() => r.known += 1,
                            Ok(None) => r.amplified += 1,
                            Ok(Some(why)) => r.bad.push(at(format!("value {why}"))),
                            Err(e) => r
                                .bad
                                .push(at(format!("on TensorFlow's operands, refused ({e}); {why}"))),
                        }
                        compare_grads = false;
                    }
                    vals.push(y);
                    theirs.push(tensor(w)?);
                }
            }
        }
        let mut loss = Tensor::scalar(0.0).cast(p.fdt())?;
        for &k in &p.leaves {
            if vals[k].dtype().is_float() {
                loss = loss.add(&weighted(&vals[k].cast(p.fdt())?)?)?;
            }
        }
        Ok(Some(loss))
    })?;
    let Some(loss) = loss.filter(|_| compare_grads) else {
        return Ok(());
    };
    if known_gradients(p).is_some() {
        r.known += 1;
        return Ok(());
    }
    let got = tape.gradient(&loss, &sources[..])?;
    compare_gradients(p, "eager", got, r);
    Ok(())
}

/// The relative tolerance of a program's gradients, and the least scale
/// of their roundoff (a sum of terms that cancel leaves a few ulps of
/// the terms, not of the sum): f32 gradients are sums of weights of 1 to
/// 10; looser where TensorFlow's f32 constants enter (see
/// [`value_tolerance`]).
pub(super) fn gradient_tolerance(p: &Program) -> (f64, f64) {
    let f32_constants = p
        .entries
        .iter()
        .any(|e| matches!(e, Entry::Step { op, .. } if ["gelu", "gelu_tanh", "leaky_relu"].contains(&op.as_str())));
    match p.fdt() {
        DType::F32 => (tolerances(DType::F32).1, 1.0),
        // (an absolute 1e-7: at -0.75 gelu's derivative Φ(x) + xφ(x) is
        // 7.7e-4 from terms of 0.23 that cancel, where TensorFlow's is
        // 5.6e-9 off the exact value mpmath and JAX in f64 give and this
        // crate gives; seed 24's program 396)
        _ if f32_constants => (1e-6, 0.1),
        _ => (tolerances(DType::F64).1, 1e-6),
    }
}

fn compare_gradients(p: &Program, how: &str, got: Vec<Option<Tensor>>, r: &mut Report) {
    assert_eq!(got.len(), p.grads.len(), "program {}: float inputs", p.id);
    let (tol, least) = gradient_tolerance(p);
    for (i, (g, w)) in got.iter().zip(&p.grads).enumerate() {
        r.grads += 1;
        let at = format!("program {} ({}) {how} gradient {i}", p.id, p.mode);
        let g = g.as_ref().map(|g| g.try_to_vec_f64().expect("gradient values"));
        match (&g, w) {
            (None, None) => {}
            (Some(g), Some(w)) => {
                let scale = magnitude(w).max(least);
                if from_a_norm(p, g, w)
                    || zero_sign_of_a_sum(p, g, w)
                    || infinities_of_a_sum(p, g, w)
                    || nan_of_a_product(p, g, w)
                {
                    r.known += 1;
                } else if g.len() != w.len() || g.iter().zip(w).any(|(a, b)| !agrees(*a, *b, tol, scale)) {
                    r.bad.push(format!("{at}: {g:?}, TensorFlow {w:?}"));
                }
            }
            _ => r.bad.push(format!("{at}: {g:?}, TensorFlow {w:?} (None: unconnected)")),
        }
    }
}

/// The program as one traced function of its inputs: its leaves' values
/// and the loss.
fn traced_body(p: &Program) -> impl Fn(&Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync + 'static {
    let fdt = p.fdt();
    let plan: Vec<Option<(String, Vec<usize>, Attrs)>> = p
        .entries
        .iter()
        .map(|e| match e {
            Entry::Input(_) => None,
            Entry::Step { op, args, attrs, .. } => Some((op.clone(), args.clone(), attrs.clone())),
        })
        .collect();
    let leaves = p.leaves.clone();
    move |inputs: &Vec<Tensor>| {
        let mut next = inputs.iter();
        let mut vals: Vec<Tensor> = Vec::new();
        for e in &plan {
            vals.push(match e {
                None => next.next().expect("an input").clone(),
                Some((op, args, attrs)) => apply(op, &args.iter().map(|&a| &vals[a]).collect::<Vec<_>>(), attrs)?,
            });
        }
        let mut out = Vec::new();
        let mut loss = Tensor::scalar(0.0).cast(fdt)?;
        for &k in &leaves {
            if vals[k].dtype().is_float() {
                loss = loss.add(&weighted(&vals[k].cast(fdt)?)?)?;
            }
            out.push(vals[k].clone());
        }
        out.push(loss);
        Ok(out)
    }
}

/// Runs `p` traced: the leaves' values and the gradients through a call.
fn check_traced(p: &Program, r: &mut Report) -> Result<()> {
    let f = function(traced_body(p));
    let inputs: Vec<Tensor> = p
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Input(v) => Some(tensor(v)),
            _ => None,
        })
        .collect::<Result<_>>()?;
    let sources: Vec<Tensor> = inputs.iter().filter(|x| x.dtype().is_float()).cloned().collect();
    let tape = GradientTape::new();
    let out = tape.record(|| {
        for x in &sources {
            tape.watch(x);
        }
        f.call(&inputs)
    });
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            r.bad
                .push(format!("program {} ({}) traced: refused ({e})", p.id, p.mode));
            return Ok(());
        }
    };
    r.traced += 1;
    for (&k, y) in p.leaves.iter().zip(&out) {
        let Entry::Step { op, want: Ok(w), .. } = &p.entries[k] else {
            unreachable!("a leaf is a step that ran");
        };
        if let Some(why) = differs(y, w, value_tolerance(op, p.fdt())) {
            r.bad
                .push(format!("program {} ({}) traced leaf {k} {op}: {why}", p.id, p.mode));
            return Ok(());
        }
    }
    if known_gradients(p).is_some() {
        return Ok(());
    }
    let got = tape.gradient(out.last().expect("the loss"), &sources[..])?;
    compare_gradients(p, "traced", got, r);
    Ok(())
}

fn replay(data: &str) -> Report {
    let mut r = Report::default();
    for p in parse(data) {
        r.programs += 1;
        let before = (r.bad.len(), r.amplified, r.known);
        check_eager(&p, &mut r).unwrap_or_else(|e| panic!("program {}: {e}", p.id));
        if p.id % 3 == 0 && !p.refused() && (r.bad.len(), r.amplified, r.known) == before {
            check_traced(&p, &mut r).unwrap_or_else(|e| panic!("program {} traced: {e}", p.id));
        }
    }
    r
}

/// Replays `data`, which must hold at least 100 programs and agree.
fn check(data: &str) -> Report {
    let r = replay(data);
    println!(
        "{} programs, {} steps, {} gradients, {} traced, {} roundoff-amplified, {} known differences",
        r.programs, r.steps, r.grads, r.traced, r.amplified, r.known
    );
    assert!(r.programs >= 100 && r.steps > 500, "{} programs", r.programs);
    assert!(
        r.bad.is_empty(),
        "{} differences from TensorFlow:\n{}",
        r.bad.len(),
        r.bad.join("\n")
    );
    r
}

#[test]
fn random_programs_match_tensorflow() {
    let data = std::env::var("GRADTAPE_TF_PROGRAMS").map(|f| std::fs::read_to_string(f).expect("the file"));
    check(data.as_deref().unwrap_or(DATA));
}

/// Programs of an `act` campaign, three steps in ten Keras's activations
/// or the LSTM step (`tf_programs.py 2 200 16 act`).
#[test]
fn activation_programs_match_tensorflow() {
    let r = check(ACT_DATA);
    for op in [
        "mish",
        "hard_sigmoid",
        "hard_silu",
        "celu",
        "relu_with",
        "squareplus",
        "sparse_plus",
        "glu",
        "lstm_cell",
    ] {
        let n = ACT_DATA.matches(&format!("\nS {op} ")).count();
        assert!(n >= 10, "{n} steps of {op}");
    }
    assert!(
        r.grads > 300 && r.traced > 30,
        "{} gradients, {} traced",
        r.grads,
        r.traced
    );
}
