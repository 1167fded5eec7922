//! The traced mode: an op's closure run as a traced `Function`, compared
//! with the same closure run eagerly on the same arguments, call after
//! call.
//!
//! Two functions are built over the op's closure:
//!
//! 1. one over `(Tensor, Option<Tensor>, Vec<Tensor>)` (`b` is `a` when
//!    absent, `c` the vector's last tensor or `a`), called with the case's
//!    operands, with operands whose leading dim is one longer or shorter
//!    (rows sliced off or repeated), with `b` absent and the vector empty,
//!    with a vector of two, and with the case's operands again: new shapes
//!    and new structures trace again, a structure never runs another's
//!    graph, and the first graph still serves the last call;
//! 2. one over `(Tensor, Tensor, Tensor)` with an `input_signature` whose
//!    leading dims (or, by a flag, all dims) are `None`, compiled or not
//!    (by a flag), called with the case's operands, operands one row
//!    longer and the case's operands again (a graph that serves every size must give
//!    eager's answer at each; one that does not is specialised).
//!
//! **What must agree**, at each call: the outcome (eager refuses ⇔ traced
//! refuses), the result's shape and dtype, and its values (up to
//! [`MAX_COMPARED`] elements) bit for bit, NaN matching NaN. Where the
//! compiled graph may add in another order (a fused sum, a joined sum of
//! products), values may differ by a relative 1e-5 (f32, complex64) or
//! 1e-12 (f64, complex128), or by more when the same call without the
//! compiler gives eager's bits (cancellation among the fuzz's extreme
//! values makes any order's rounding show). And for a float (f32, f64)
//! result, the gradient of its sum with respect to the f32/f64 operands
//! under a tape, through the call (the function's symbolic gradient)
//! against the eager tape's, to the same relative tolerances (an
//! unconnected operand's gradient is zeros in both), or to a cancellation's
//! rounding where the operands hold extreme values (see `cancels`).

use std::sync::Arc;

use gradtape::{
    DType, Function, FunctionOptions, GradientOptions, GradientTape, Leaf, Result, Tensor, TensorSpec, TensorStruct,
    Unconnected,
};

use crate::ops::{Env, OpFn};
use crate::run::inspect;

/// Results with more elements than this are compared by shape and dtype
/// only (a huge broadcast view is not read).
pub const MAX_COMPARED: usize = 4096;

/// The most elements an operand may have to be resized.
const MAX_RESIZED: usize = 256;

type Body<I> = Arc<dyn Fn(&I) -> Result<Tensor> + Send + Sync>;

/// `(a, b, c)` with `b` maybe absent and `c` the last of a vector.
type Structured = (Tensor, Option<Tensor>, Vec<Tensor>);
type Plain = (Tensor, Tensor, Tensor);

/// Runs the case's op traced, in both functions, against eager.
pub fn traced_calls(e: &Env, f: OpFn) {
    let k = Arc::new(e.k.clone());
    let orig: Plain = (e.a.clone(), e.b.clone(), e.c.clone());
    let other = resized(&orig, e.k.a.seed.is_multiple_of(2));
    // (the signature's calls only grow: one row more is the size the
    // probe traces at when only leading dims are `None`, and between the
    // traced and the probe's sizes otherwise, so that a Rust branch of the
    // op's closure on a size, which the docs say is fixed at trace time,
    // cannot flip unseen between the two)
    let grown = resized(&orig, true);

    let kk = k.clone();
    let body: Body<Structured> = Arc::new(move |(a, b, cs): &Structured| {
        let b = b.as_ref().unwrap_or(a);
        let c = cs.last().unwrap_or(a);
        f(&Env { a, b, c, k: &kk })
    });
    let (a, b, c) = orig.clone();
    let mut seq: Vec<Structured> = vec![(a.clone(), Some(b.clone()), vec![c.clone()])];
    if let Some((a2, b2, c2)) = &other {
        seq.push((a2.clone(), Some(b2.clone()), vec![c2.clone()]));
    }
    seq.push((a.clone(), None, vec![]));
    if let Some((a2, b2, c2)) = &other {
        seq.push((a2.clone(), Some(b2.clone()), vec![b2.clone(), c2.clone()]));
    }
    seq.push((a, Some(b), vec![c]));
    check_calls("structured", &body, FunctionOptions::default(), &seq);

    if let Some(sig) = signature(&orig, e.k.flags[1]) {
        let body: Body<Plain> = Arc::new(move |(a, b, c): &Plain| f(&Env { a, b, c, k: &k }));
        let mut seq = vec![orig.clone()];
        seq.extend(grown);
        seq.push(orig);
        let opts = FunctionOptions {
            input_signature: Some(sig),
            optimize: !e.k.flags[0],
            ..Default::default()
        };
        check_calls("signature", &body, opts, &seq);
    }
}

/// A signature of the operands with `None` leading dims (all dims when
/// `all`); none when every operand is a scalar.
fn signature(args: &Plain, all: bool) -> Option<Vec<TensorSpec>> {
    let ts = [&args.0, &args.1, &args.2];
    if ts.iter().all(|t| t.rank() == 0) {
        return None;
    }
    let spec = |t: &Tensor| TensorSpec {
        dtype: t.dtype(),
        shape: t
            .shape()
            .iter()
            .enumerate()
            .map(|(i, &d)| if i == 0 || all { None } else { Some(d) })
            .collect(),
    };
    Some(ts.iter().map(|t| spec(t)).collect())
}

/// The operands with their leading dim one longer (the first row
/// repeated, or a row of zeros) or one shorter (the last row sliced off);
/// scalars and large operands kept. `None` when nothing changed.
fn resized(args: &Plain, grow: bool) -> Option<Plain> {
    let r = |t: &Tensor| -> Tensor {
        let go = || -> Result<Tensor> {
            if t.rank() == 0 || t.numel() > MAX_RESIZED {
                return Ok(t.clone());
            }
            let d = t.shape()[0];
            if grow || d == 0 {
                let row = if d == 0 {
                    let mut s = t.shape().to_vec();
                    s[0] = 1;
                    Tensor::try_zeros(&s, t.dtype())?
                } else {
                    t.narrow(0, 0, 1)?
                };
                Tensor::concat(&[t, &row], 0)
            } else {
                t.narrow(0, 0, d - 1)
            }
        };
        go().unwrap_or_else(|_| t.clone())
    };
    let out = (r(&args.0), r(&args.1), r(&args.2));
    let changed = out.0.shape() != args.0.shape() || out.1.shape() != args.1.shape() || out.2.shape() != args.2.shape();
    changed.then_some(out)
}

fn make<I>(
    body: &Body<I>,
    opts: FunctionOptions,
) -> Function<I, Tensor, impl Fn(&I) -> Result<Tensor> + Send + Sync + use<I>>
where
    I: TensorStruct + Send + Sync + 'static,
{
    let b = body.clone();
    Function::with_options(move |x: &I| b(x), opts)
}

/// The dtype's tolerance where numbers may be added in another order.
fn tolerance(d: DType) -> f64 {
    match d {
        DType::F32 | DType::C64 => 1e-5,
        DType::F64 | DType::C128 => 1e-12,
        _ => 0.0,
    }
}

/// Calls a function built over `body` with each argument set of `seq` in
/// turn, comparing with `body` run eagerly.
fn check_calls<I>(what: &str, body: &Body<I>, opts: FunctionOptions, seq: &[I])
where
    I: TensorStruct + Send + Sync + 'static,
{
    let g = make(body, opts.clone());
    let plain = || {
        make(
            body,
            FunctionOptions {
                optimize: false,
                ..opts.clone()
            },
        )
    };
    for (i, args) in seq.iter().enumerate() {
        let where_ = || format!("{what} call {i} of {} ({})", seq.len(), describe(args));
        let got = g.call(args);
        let want = body(args);
        // (with a signature, a refused first call leaves the next, larger
        // one to trace first: a Rust branch of the closure on a size could
        // then flip unseen at the smaller size, see `traced_calls`)
        let last = opts.input_signature.is_some() && got.is_err();
        if let Ok(y) = &got {
            inspect(y);
        }
        if let Some(why) = differs(&got, &want, 0.0).filter(|_| !known_refusal(&got, &want)) {
            let tol = want.as_ref().map_or(0.0, |w| tolerance(w.dtype()));
            let excused = tol > 0.0
                && reassociates(&g, args)
                && (differs(&got, &want, tol).is_none() || differs(&plain().call(args), &want, 0.0).is_none());
            assert!(excused, "traced vs eager: {}: {why}\n{}", where_(), listing(&g, args));
        }
        if last {
            break;
        }
        // the gradient of the sum, through the call
        let (Ok(y), Ok(_)) = (&want, &got) else { continue };
        if !matches!(y.dtype(), DType::F32 | DType::F64) || y.numel() > MAX_COMPARED {
            continue;
        }
        let srcs = float_leaves(args);
        if srcs.is_empty() {
            continue;
        }
        let Ok(ge) = grad_of(&srcs, || body(args)) else {
            continue;
        };
        match grad_of(&srcs, || g.call(args)) {
            Err(err) => panic!(
                "traced vs eager: {}: the eager gradient is computed, through the call it is refused: {err}",
                where_()
            ),
            Ok(gt) => {
                // a gradient is as precise as the least precise float in
                // its computation: an f64 operand's gradient through an f32
                // result is f32's rounding, cast up
                let floor = srcs
                    .iter()
                    .map(|t| tolerance(t.dtype()))
                    .fold(tolerance(y.dtype()), f64::max);
                if let Some(why) = grads_differ(&gt, &ge, floor)
                    .filter(|_| !cancels(&gt, &ge, &srcs, y) && !overflowed(y, &gt, &ge, floor))
                {
                    // (a compiled gradient graph may add in another order)
                    let p = plain();
                    let again = grad_of(&srcs, || p.call(args));
                    let excused = again.is_ok_and(|gp| grads_differ(&gp, &ge, floor).is_none());
                    assert!(excused, "traced vs eager gradient: {}: {why}", where_());
                }
            }
        }
    }
}

/// Whether the graph that serves `args` may add numbers in another order
/// than eager (a fused sum, a joined sum of products).
fn reassociates<I, F>(g: &Function<I, Tensor, F>, args: &I) -> bool
where
    I: TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<Tensor> + Send + Sync + 'static,
{
    let Ok(c) = g.concrete(args) else { return true };
    let text = c.optimized_graph().to_string();
    // (a fused kernel's sums print as `sum0 += r3`, `sum1 += Mul(r1, r2)`)
    let fused_sum = text.split("sum").skip(1).any(|rest| {
        rest.trim_start_matches(|c: char| c.is_ascii_digit())
            .starts_with(" += ")
    });
    c.compile_stats().joined > 0 || fused_sum || text.contains("(blocked)")
}

/// The optimized graph that serves `args`, for a failure's message.
fn listing<I, F>(g: &Function<I, Tensor, F>, args: &I) -> String
where
    I: TensorStruct + Send + Sync + 'static,
    F: Fn(&I) -> Result<Tensor> + Send + Sync + 'static,
{
    match g.concrete(args) {
        Ok(c) => format!("the graph that served it:\n{}", c.optimized_graph()),
        Err(err) => format!("(no graph: {err})"),
    }
}

/// The f32 and f64 tensors of a structure, in order.
fn float_leaves<I: TensorStruct>(args: &I) -> Vec<Tensor> {
    let mut leaves = Vec::new();
    args.leaves(&mut leaves);
    leaves
        .into_iter()
        .filter_map(|l| match l {
            Leaf::Tensor(t) if matches!(t.dtype(), DType::F32 | DType::F64) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// The gradient of `sum(run())` with respect to `srcs` (zeros where
/// unconnected).
fn grad_of(srcs: &Vec<Tensor>, run: impl FnOnce() -> Result<Tensor>) -> Result<Vec<Option<Tensor>>> {
    let tape = GradientTape::new();
    let l = tape.record(|| {
        for s in srcs {
            tape.watch(s);
        }
        run()?.sum_all()
    })?;
    let opts = GradientOptions::default().unconnected(Unconnected::Zero);
    tape.gradient_with(&l, srcs, opts)
}

/// Why two gradient lists differ beyond their dtypes' tolerances (and at
/// least `floor`), if they do.
fn grads_differ(got: &[Option<Tensor>], want: &[Option<Tensor>], floor: f64) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} gradients, eager {}", got.len(), want.len()));
    }
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = match (g, w) {
            (Some(g), Some(w)) => (g.clone(), w.clone()),
            (None, None) => continue,
            (Some(g), None) => (g.clone(), g.zeros_like()),
            (None, Some(w)) => (w.zeros_like(), w.clone()),
        };
        if let Some(why) = differs(&Ok(g), &Ok(w.clone()), tolerance(w.dtype()).max(floor)) {
            return Some(format!("operand {j}: {why}"));
        }
    }
    None
}

/// The elements as (re, im) pairs (an i64 as its high and low halves, so
/// that it compares exactly).
fn elems(t: &Tensor) -> Result<Vec<(f64, f64)>> {
    Ok(match t.dtype() {
        DType::C64 | DType::C128 => {
            let re = t.real()?.try_to_vec_f64()?;
            let im = t.imag()?.try_to_vec_f64()?;
            re.into_iter().zip(im).collect()
        }
        DType::I64 => t
            .to_vec::<i64>()?
            .into_iter()
            .map(|v| ((v >> 32) as f64, (v & 0xffff_ffff) as f64))
            .collect(),
        _ => t.try_to_vec_f64()?.into_iter().map(|v| (v, 0.0)).collect(),
    })
}

fn close(x: f64, y: f64, tol: f64) -> bool {
    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()) || (tol > 0.0 && (x - y).abs() <= tol * (1.0 + y.abs()))
}

/// Why a traced outcome is not the eager one, if it is not: refused by
/// one only, another shape or dtype, or values further apart than `tol`
/// (relative; 0: bit for bit).
fn differs(got: &Result<Tensor>, want: &Result<Tensor>, tol: f64) -> Option<String> {
    match (got, want) {
        (Err(_), Err(_)) => None,
        (Ok(y), Err(err)) => Some(format!(
            "eager refuses ({err}) but traced returns {} {:?}",
            y.dtype(),
            y.shape()
        )),
        (Err(err), Ok(y)) => Some(format!(
            "eager returns {} {:?} but traced refuses: {err}",
            y.dtype(),
            y.shape()
        )),
        (Ok(g), Ok(w)) => {
            if g.shape() != w.shape() || g.dtype() != w.dtype() {
                return Some(format!(
                    "traced returns {} {:?}, eager {} {:?}",
                    g.dtype(),
                    g.shape(),
                    w.dtype(),
                    w.shape()
                ));
            }
            if w.numel() > MAX_COMPARED {
                return None;
            }
            let (gv, wv) = match (elems(g), elems(w)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(err), Ok(_)) => return Some(format!("the traced result cannot be read: {err}")),
                (_, Err(_)) => return None,
            };
            let bad = gv
                .iter()
                .zip(&wv)
                .position(|(x, y)| !close(x.0, y.0, tol) || !close(x.1, y.1, tol))?;
            let n = gv
                .iter()
                .zip(&wv)
                .filter(|(x, y)| !close(x.0, y.0, tol) || !close(x.1, y.1, tol))
                .count();
            Some(format!(
                "{} {:?}: element {bad} traced {:?}, eager {:?} ({n} of {} differ)",
                w.dtype(),
                w.shape(),
                gv[bad],
                wv[bad],
                gv.len()
            ))
        }
    }
}

/// The dtypes and shapes of a structure's tensors, and its tags.
fn describe<I: TensorStruct>(args: &I) -> String {
    let mut leaves = Vec::new();
    args.leaves(&mut leaves);
    leaves
        .iter()
        .map(|l| match l {
            Leaf::Tensor(t) if t.numel() <= 8 => format!("{} {:?} {}", t.dtype(), t.shape(), values(t)),
            Leaf::Tensor(t) => format!("{} {:?}", t.dtype(), t.shape()),
            Leaf::Variable(_) => "variable".into(),
            Leaf::Tag(n) => format!("#{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A small tensor's elements, exactly (`{:?}` of each; complex as pairs).
fn values(t: &Tensor) -> String {
    match elems(t) {
        Ok(v) if t.dtype().is_complex() => format!("{v:?}"),
        Ok(v) if t.dtype() == DType::I64 => {
            format!(
                "{:?}",
                v.iter().map(|p| ((p.0 as i64) << 32) | p.1 as i64).collect::<Vec<_>>()
            )
        }
        Ok(v) => format!("{:?}", v.iter().map(|p| p.0).collect::<Vec<_>>()),
        Err(_) => "?".into(),
    }
}

/// A known difference, reported and not yet fixed, that the campaign steps
/// over (to be removed with its fix): eager returns a huge broadcast view
/// (`broadcast_to` of one element to 2^31 elements costs nothing), the
/// traced call refuses with out-of-memory, because the compiled graph
/// fuses the broadcast into a kernel that writes every element.
fn known_refusal(got: &Result<Tensor>, want: &Result<Tensor>) -> bool {
    match (got, want) {
        (Err(err), Ok(w)) => w.numel() > MAX_COMPARED && err.to_string().contains("out of memory"),
        _ => false,
    }
}

/// Whether two gradient lists differ only where both are non-finite (NaN
/// against ±inf, +inf against −inf) and the eager value they are the
/// gradients of is itself non-finite: an overflowed forward pass's
/// gradient sums `+inf` and `−inf` products, and whether it meets them as
/// `inf + (−inf)` (NaN) or inside one fused multiply-add (`inf`) is the
/// kernel's choice (the tape's conv2d rule reuses the forward im2col
/// matrix in a product, the graph's `Conv2DBackpropFilter` may run a
/// direct kernel). Extreme finite elements (both 2^20 or more, of one
/// sign) may differ too: their sums meet terms the forward pass had
/// overflowed with, which absorb others in an order-dependent way (case
/// 1123121 of seed 993: ±1e30 and 2^63 taps of a convolution, a gradient
/// of −1.2175e21 eagerly and −1.1806e21 traced). Other finite elements
/// must still agree within `tol`.
fn overflowed(y: &Tensor, got: &[Option<Tensor>], want: &[Option<Tensor>], tol: f64) -> bool {
    const EXTREME: f64 = (1u64 << 20) as f64;
    let extreme = |a: f64, b: f64| a.abs().min(b.abs()) >= EXTREME && (a > 0.0) == (b > 0.0);
    let Ok(ys) = elems(y) else { return false };
    if ys.iter().all(|(re, im)| re.is_finite() && im.is_finite()) {
        return false;
    }
    got.iter().zip(want).all(|(g, w)| {
        let (Some(g), Some(w)) = (g, w) else {
            return g.is_none() && w.is_none();
        };
        let tol = tolerance(w.dtype()).max(tol);
        match (elems(g), elems(w)) {
            (Ok(a), Ok(b)) => {
                a.len() == b.len()
                    && a.iter().zip(&b).all(|(x, y)| {
                        close(x.0, y.0, tol) && close(x.1, y.1, tol)
                            || !x.0.is_finite() && !y.0.is_finite()
                            || extreme(x.0, y.0) && (x.1 == y.1 || extreme(x.1, y.1))
                    })
            }
            _ => false,
        }
    })
}

/// Whether two gradient lists differ only as sums of the operands' extreme
/// values (2^20 and more: the fuzz's 1e30, 2^62, ...) may in another
/// order: by at most `4 n ε max|x|` (n the operands' elements, ε the
/// dtype's epsilon), a cancellation's rounding, which a gradient graph
/// that adds in another order than the eager tape shows. The value `y`
/// the gradients are of counts as an operand: an extreme value made
/// inside from moderate operands (a made tensor of 2^63 plus the operand
/// `a`, as in case 283551 of seed 991: `+2^63` and `−2^63` taps of a
/// convolution cancel in the gradient, which is 180 eagerly and 166
/// traced) rounds the gradient's sums as an extreme operand would.
fn cancels(got: &[Option<Tensor>], want: &[Option<Tensor>], srcs: &[Tensor], y: &Tensor) -> bool {
    let mut n = 0usize;
    let mut scale = 0.0f64;
    for t in srcs.iter().chain(std::iter::once(y)) {
        let Ok(v) = elems(t) else { return false };
        n += v.len();
        for (x, _) in v {
            if x.is_finite() {
                scale = scale.max(x.abs());
            }
        }
    }
    if scale < (1u64 << 20) as f64 {
        return false;
    }
    got.iter().zip(want).all(|(g, w)| {
        let (Some(g), Some(w)) = (g, w) else {
            return g.is_none() && w.is_none();
        };
        let eps = if w.dtype() == DType::F32 {
            f32::EPSILON as f64
        } else {
            f64::EPSILON
        };
        let bound = 4.0 * n as f64 * eps * scale;
        match (elems(g), elems(w)) {
            (Ok(a), Ok(b)) => a
                .iter()
                .zip(&b)
                .all(|(x, y)| close(x.0, y.0, 0.0) || (x.0 - y.0).abs() <= bound),
            _ => false,
        }
    })
}
