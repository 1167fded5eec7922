//! The deliberate differences of `tf_programs.rs`'s replays from
//! TensorFlow, each with its reason and the campaign that found it: the
//! values, refusals and gradients that may differ, and why.

use gradtape::DType;

use super::tf_programs::{gradient_tolerance, Entry, Program, Vals, Value};
use super::tf_programs_ops::Attrs;
use super::tf_util::{agrees, magnitude};

/// Whether `x` is NaN or at least `limit` in magnitude.
fn beyond(x: f64, limit: f64) -> bool {
    x.is_nan() || x.abs() >= limit
}

/// Whether some float element of `v` passes `pred` (with `v`'s dtype).
fn holds(v: &Value, pred: fn(f64, DType) -> bool) -> bool {
    matches!(&v.vals, Vals::F(f) if f.iter().any(|x| pred(*x, v.dtype)))
}

/// Whether `x²` overflows `dt` (|x| past √max, or ±inf).
fn past_sqrt_max(x: f64, dt: DType) -> bool {
    x.abs() >= if dt == DType::F32 { 1.8e19 } else { 1.3e154 }
}

/// Why a step's value may deliberately differ from TensorFlow's, given
/// TensorFlow's values of its operands:
/// - a float cast to an integer from NaN, ±inf or out of the integer's
///   range is undefined in C++; TensorFlow's CPU gives the x86 "integer
///   indefinite" (the lowest integer), this crate Rust's saturating cast;
/// - NaN in `searchsorted` (sequence or values): TensorFlow's binary search
///   compares it false both ways, so where it lands depends on the
///   search's steps; this crate orders NaN last, as its `sort`;
/// - the order of NaN among numbers in `sort`, `argsort`, `top_k`,
///   `argmax` and `argmin` (seed 42's program 259):
///   TensorFlow's comparison sort has none (it leaves NaN where the
///   partial sort happens to), this crate puts NaN first (largest); and
///   NaN in a segment's max or min, which TensorFlow keeps or drops by
///   its position;
/// - TensorFlow's `erf` in f64 is NaN at ±inf and huge |x| (a bug: it is
///   ±1);
/// - matmul and einsum overflowing: TensorFlow's fused multiply-adds keep
///   -inf where separate products give -inf + inf = NaN;
/// - a quotient of a huge value (1e200, or 1e30 in f32; `f64::MAX` from
///   an empty segment's min) in the subnormal range: TensorFlow's CPU
///   kernels run with denormals flushed to zero (FTZ/DAZ), so 1/1e308 is
///   0 there and `floor_div(-1, 6.4e307)` is -0, not -1 (seed 25's
///   program 183, seed 26's 735; seed 25's program 1141, 1/3.4e38 in f32);
/// - an f32 product through 1e30 (and 1e-30): whether it overflows on the
///   way depends on the order of the factors (seed 25's program 219: a
///   product of 40 factors, -inf here, TensorFlow's -8.8e10);
/// - TensorFlow's f32 `softmax` of a row holding +inf or NaN: NaN at
///   those and 0 at the finite elements, where its f64 softmax, its f32
///   `log_softmax`, and JAX in f32 and f64 give NaN for the whole row (the
///   row's normalizer is NaN): this crate's NaN throughout.
/// - Keras's `squareplus`, `(x + √(x² + b))/2`, at |x| past √max (1.3e154,
///   1.8e19 in f32) or ±inf: its `x²` overflows, so it is inf where the
///   value is `x` (at 1e200) or `b/(4|x|)` (1.25e-201 at -1e200, b = 0.5:
///   mpmath at 600 digits), and NaN at -inf (`-inf + inf`) where the limit
///   is 0; this crate's forms do not square `x` (seed 5151's programs 70,
///   515, 1108; `tf_activations_more.rs` has the points);
/// - Keras's `hard_silu` at -inf, `-inf · hard_sigmoid(-inf) = -inf · 0`:
///   NaN, where it is 0 for every x ≤ −3 and this crate gives 0 (seed
///   5151's program 796).
pub(super) fn known_value(op: &str, operands: &[&Value], to: Option<DType>) -> Option<&'static str> {
    let floats = |v: &Value| match &v.vals {
        Vals::F(f) => f.clone(),
        Vals::I(_) => vec![],
    };
    let limit = match to {
        Some(DType::I32) => 2f64.powi(31),
        _ => 2f64.powi(63),
    };
    let x = operands.first().map(|v| floats(v)).unwrap_or_default();
    if op == "cast" && to.is_some_and(|t| t.is_int()) && x.iter().any(|v| beyond(*v, limit)) {
        return Some("cast of a non-finite or out-of-range float to an integer");
    }
    let sorts = ["sort", "argsort", "top_k_values", "top_k_indices"];
    if (sorts.contains(&op) || op == "argmax" || op == "argmin") && x.iter().any(|v| v.is_nan()) {
        return Some("order of NaN in a sort");
    }
    if op == "searchsorted"
        && operands
            .iter()
            .any(|v| matches!(&v.vals, Vals::F(f) if f.iter().any(|x| x.is_nan())))
    {
        return Some("NaN in searchsorted: TensorFlow's binary search compares it false both ways");
    }
    let extrema = ["segment_max", "segment_min", "usegment_max", "usegment_min"];
    if extrema.contains(&op) && x.iter().any(|v| v.is_nan()) {
        return Some("NaN in a segment's extremum: TensorFlow's depends on the order");
    }
    let f32_row = operands.first().is_some_and(|v| v.dtype == DType::F32);
    if op == "softmax" && f32_row && x.iter().any(|v| v.is_nan() || *v == f64::INFINITY) {
        return Some("TensorFlow's f32 softmax of a row with +inf or NaN: 0 at its finite elements");
    }
    if (op == "erf" || op == "erfc") && x.iter().any(|v| beyond(*v, 1e100)) {
        return Some("TensorFlow's f64 erf is NaN at ±inf and |x| ≥ ~1e100 (1 is right)");
    }
    let huge = |v: &Value| match &v.vals {
        Vals::F(f) => f
            .iter()
            .any(|x| beyond(*x, if v.dtype == DType::F32 { 1e30 } else { 1e200 })),
        Vals::I(_) => false,
    };
    let quotients = ["div", "floor_div", "floor_mod", "reciprocal", "divide_no_nan", "pow"];
    if quotients.contains(&op) && operands.iter().any(|v| huge(v)) {
        return Some("a quotient in the subnormal range: TensorFlow's CPU flushes it to ±0 (FTZ)");
    }
    if op == "squareplus" && operands.first().is_some_and(|v| holds(v, past_sqrt_max)) {
        return Some("Keras's squareplus squares x: inf or NaN past √max and at ±inf");
    }
    if op == "hard_silu" && x.contains(&f64::NEG_INFINITY) {
        return Some("Keras's hard_silu at -inf: -inf · 0 = NaN (the limit is 0)");
    }
    let products = ["prod", "cumprod", "segment_prod", "usegment_prod"];
    if products.contains(&op) && operands.first().is_some_and(|v| v.dtype == DType::F32 && huge(v)) {
        return Some("an f32 product through 1e30: its overflow depends on the order of the factors");
    }
    ((op == "matmul" || op == "einsum") && operands.iter().any(|v| huge(v)))
        .then_some("overflow in a sum of products: ±inf or NaN by the order of the terms (TensorFlow's FMA)")
}

/// Whether TensorFlow's refusal of a step this crate runs is one of its
/// own checks that this crate does not make (`more` campaigns, seeds 41
/// and 42), each a step whose result is well defined:
/// - `scatter_nd`/`tensor_scatter_nd_*` with rank-1 indices (one index
///   tuple): TensorFlow's shape check takes the indices' only dim for a
///   batch dim, so it wants `updates` of rank 1 or more with that many
///   rows (`Updates shape must have rank at least one`; `Dimensions [0,1)
///   of indices[shape=[1]] = 1 must match`), where the documented
///   semantics (and this crate) take one update of shape `shape[K..]`;
/// - a scatter into an empty output, a `gather_nd` from empty params
///   (`Indices and updates specified for empty output shape`, `Requested
///   more than 0 entries, but params is empty`): in-range indices whose
///   slices are empty;
/// - `searchsorted` of empty operands (`[0, 2]` in `[0, 0]`: `Leading
///   dim_size of both tensors must match`, both 0; this crate checks the
///   leading dims as shapes);
/// - `tf.where(x)` of a scalar (`WhereOp : Unhandled input dimensions: 0`):
///   here `[1, 0]` or `[0, 0]`, as NumPy's `argwhere`.
pub(super) fn tf_only_refusal(op: &str, msg: &str, attrs: &Attrs) -> bool {
    let scatter = op == "scatter_nd" || op.starts_with("tensor_scatter");
    let one_tuple = attrs.get("ishape").is_some_and(|s| !s.contains(','));
    (scatter
        && ((one_tuple && msg.contains("must match dimensio"))
            || msg.contains("Updates shape must have rank at least one")
            || msg.contains("Dimensions [0,1) of indices[shape=[")
            || msg.contains("specified for empty output shape")))
        || (op == "gather_nd" && msg.contains("but params is empty"))
        || (op == "argwhere" && msg.contains("Unhandled input dimensions: 0"))
        || (op == "searchsorted" && msg.contains("Leading dim_size of both tensors must match"))
}

/// Why this crate may refuse a step TensorFlow ran: an index out of range
/// where nothing is read (a gather or unsorted segment reduction whose
/// result, or whose data, has no elements): TensorFlow's CPU kernels check
/// indices only as they read (so its `unsorted_segment_sum` of a `[3, 0]`
/// tensor takes an id its `unsorted_segment_mean` refuses, and its GPU
/// gather checks none), this crate's always, on every device.
pub(super) fn known_refusal(op: &str, want: &Value) -> Option<&'static str> {
    let empty = want.shape.contains(&0);
    (empty && (op == "gather" || op.starts_with("usegment_"))).then_some("index into an empty slice")
}

/// Why a program's gradients may deliberately differ from TensorFlow's:
/// - TensorFlow's gradient raised an error where there is one to compute
///   (`MirrorPadGrad` of an empty dim; `Range` with delta 0);
/// - `cumprod` of a tensor holding a zero, an infinity or a huge value
///   (whose products overflow), and the segment products: TensorFlow's
///   gradients divide by the input and are wrong there, 0 or NaN where
///   the product of the others is finite (JAX in
///   f64 and the product rule agree with this crate; `tf_vector.rs` has
///   the vectors); `prod` alike where infinities make inf/inf;
/// - f32 `digamma` below -6: TensorFlow's f32 `polygamma(1, x)` there is
///   garbage (-0.084 at -11.337, -2.9e12 at -8.5, where mpmath's trigamma
///   is 12.90 and 9.759; its f64 one is right), this crate's is mpmath's;
/// - `gelu_tanh` of a huge |x| (1e100, or 1e30 in f32): TensorFlow's
///   gradient (and JAX's, f64 too) computes x³, which overflows, and is
///   NaN where the derivative is 0 (x → -inf) or 1 (x → +inf), which this
///   crate gives (seed 21's program 525, at -1e200);
/// - a division by a tiny nonzero value (1e-200, or 1e-30 in f32): its
///   cotangents of ~1e200 (1e30) that cancel downstream leave roundoff of
///   that size, whose value depends on the order of the terms (seed 7's
///   program 561: a softmax over two equal copies, true gradient 0,
///   JAX in f64 and this crate 105, TensorFlow 0).
/// - a `sort` or `top_k` of values TensorFlow computed a few ulps apart
///   where this crate's are equal: the order of the two, and so which
///   input each output's cotangent reaches, follows that roundoff
///   (seed 5151's program 853: TensorFlow's vectorised `atan2(-1, 1.25)`
///   is -0.6747409422235527 in one lane and ...526 in the tail, its
///   `top_k` puts the second first; this crate's are equal and keep the
///   input's order);
/// - the activations of `act` campaigns where this crate departs from
///   Keras's compositions on purpose ([`activation_gradient`]).
pub(super) fn known_gradients(p: &Program) -> Option<&'static str> {
    if p.tf_gradient_failed {
        return Some("TensorFlow's gradient raised");
    }
    let value = |k: usize| match &p.entries[k] {
        Entry::Input(v) => Some(v),
        Entry::Step { want, .. } => want.as_ref().ok(),
    };
    // (1e30 is huge in f32: two such factors overflow; seed 24's program
    // 987, a reversed exclusive cumprod through -1e30 and 7e30: TensorFlow's
    // -inf, this crate's and the product rule's -1.17e32)
    let huge = |v: &Value| if v.dtype == DType::F32 { 1e30 } else { 1e100 };
    let zero_or_inf = |v: &Value| match &v.vals {
        Vals::F(f) => f.iter().any(|x| *x == 0.0 || beyond(*x, huge(v))),
        Vals::I(_) => false,
    };
    let below = |v: &Value, x0: f64| match &v.vals {
        Vals::F(f) => f.iter().any(|x| *x < x0),
        Vals::I(_) => false,
    };
    for e in &p.entries {
        if let Entry::Step { op, args, .. } = e
            && op == "digamma"
            && value(args[0]).is_some_and(|v| v.dtype == DType::F32 && below(v, -6.0))
        {
            return Some("TensorFlow's f32 trigamma below -6");
        }
    }
    for e in &p.entries {
        if let Entry::Step { op, args, .. } = e
            && op == "gelu_tanh"
            && value(args[0]).is_some_and(|v| matches!(&v.vals, Vals::F(f) if f.iter().any(|x| beyond(*x, huge(v)))))
        {
            return Some("TensorFlow's gelu_tanh gradient at a huge |x|: NaN (x³ overflows)");
        }
    }
    let tiny = |v: &Value| match &v.vals {
        Vals::F(f) => f
            .iter()
            .any(|x| *x != 0.0 && x.abs() < if v.dtype == DType::F32 { 1e-20 } else { 1e-100 }),
        Vals::I(_) => false,
    };
    for e in &p.entries {
        if let Entry::Step { op, args, .. } = e
            && op == "div"
            && value(args[1]).is_some_and(tiny)
        {
            return Some("a division by a tiny value: roundoff of huge cotangents");
        }
    }
    for e in &p.entries {
        if let Entry::Step { op, args, .. } = e
            && let Some(v) = value(args[0])
        {
            if (op == "sort" || op == "top_k_values") && near_tie(v) {
                return Some("near-ties in a sort: their order follows roundoff");
            }
            if let Some(why) = activation_gradient(op, v) {
                return Some(why);
            }
        }
    }
    let products = ["cumprod", "prod", "segment_prod", "usegment_prod"];
    for e in &p.entries {
        // (or a product that overflowed: seed 41's program 339, an f32
        // cumprod of factors of 1e29 reaching ±inf)
        let overflowed = |w: &std::result::Result<Value, String>| matches!(w, Ok(Value { vals: Vals::F(f), .. }) if f.iter().any(|x| x.is_infinite()));
        if let Entry::Step { op, args, want, .. } = e
            && products.contains(&op.as_str())
            && (value(args[0]).is_some_and(zero_or_inf) || overflowed(want))
        {
            return Some("a product of a zero, an infinity or a huge value");
        }
    }
    None
}

/// Whether `v` holds two finite values a few ulps apart, not equal.
fn near_tie(v: &Value) -> bool {
    let Vals::F(f) = &v.vals else { return false };
    let mut s: Vec<f64> = f.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    let rel = if v.dtype == DType::F32 { 1e-6 } else { 1e-14 };
    s.windows(2)
        .any(|w| w[0] != w[1] && w[1] - w[0] <= rel * w[0].abs().max(w[1].abs()))
}

/// Why the gradient of the activation `op` of TensorFlow's value `v` may
/// deliberately differ from Keras's composition's (the points, with JAX's
/// and mpmath's numbers, are `tf_activations_more.rs`'s):
/// - `celu` at ±0: Keras's `max(x, 0) + α·expm1(min(x, 0)/α)` passes the
///   cotangent through both `max` and `min` at the tie, slope 2; celu is
///   smooth there with slope 1, this crate's (and JAX's `jax.nn.celu` in
///   f64); at NaN Keras's selects give 0, this crate NaN (seed 5151's
///   programs 903, 1069: 1 here, 2 in TensorFlow; 780: NaN here, a
///   number there);
/// - `squareplus` past √max or at ±inf: Keras's `x²` overflows (see
///   [`known_value`]).
fn activation_gradient(op: &str, v: &Value) -> Option<&'static str> {
    match op {
        "celu" if holds(v, |x, _| x == 0.0 || x.is_nan()) => Some("celu at 0 (Keras's slope 2) or NaN"),
        "squareplus" if holds(v, past_sqrt_max) => Some("Keras's squareplus squares x: its gradient overflows"),
        _ => None,
    }
}

/// Whether `got` differs from TensorFlow's `want` by TensorFlow's NaN
/// where this crate has a number, or its infinity where this crate has a
/// finite number, in a program with
/// `norm`: its gradient at 0 is 0 here, NaN in TensorFlow's composite
/// (documented at `Tensor::norm`), and where the sum of squares underflows
/// (`‖[1e-200]‖`, `‖[1e-30]‖` in f32) it is `x / ‖x‖` here, TensorFlow's
/// `x / √0 = ±inf` (see `tf_edge_cases.rs`).
pub(super) fn from_a_norm(p: &Program, got: &[f64], want: &[f64]) -> bool {
    let norm = p
        .entries
        .iter()
        .any(|e| matches!(e, Entry::Step { op, .. } if op == "norm"));
    norm && got
        .iter()
        .zip(want)
        .any(|(g, w)| (w.is_nan() && !g.is_nan()) || (w.is_infinite() && g.is_finite()))
}

/// Whether `got` differs from TensorFlow's `want` only by infinities of
/// opposite signs, in a program with `matmul` or `einsum`: a product
/// summed to -0 by TensorFlow (`-0.57 · 0`, its first term) is +0 here (a
/// sum from +0), equal values whose sign reaches an infinite derivative
/// (`sqrt`'s ±inf at ±0; seed 9's program 497).
pub(super) fn zero_sign_of_a_sum(p: &Program, got: &[f64], want: &[f64]) -> bool {
    let sums = p
        .entries
        .iter()
        .any(|e| matches!(e, Entry::Step { op, .. } if op == "matmul" || op == "einsum"));
    let (tol, least) = gradient_tolerance(p);
    let scale = magnitude(want).max(least);
    let flipped = |g: f64, w: f64| g.is_infinite() && w.is_infinite() && g.signum() != w.signum();
    let pairs = || got.iter().zip(want);
    sums && pairs().any(|(g, w)| flipped(*g, *w)) && pairs().all(|(g, w)| agrees(*g, *w, tol, scale) || flipped(*g, *w))
}

/// Whether `got` differs from TensorFlow's `want` only by TensorFlow's
/// NaN where this crate has a number or an infinity, in a program with a
/// step of Keras's compositions that multiply a cotangent by a value this
/// crate's rules select instead (deliberate; `tf_activations_more.rs` has
/// the points, with JAX's numbers):
/// - `mish` and `hard_silu`, `x · f(x)`: the product rule sends the
///   cotangent times `x` into `f`'s rule, so a cotangent or an `x` near the
///   largest float makes `inf · 0` or `inf − inf` (seed 5152's program
///   721: hard_silu at -1e200 under a cotangent of ~1e200, 37 here; 795:
///   mish at -1.2481 under a cotangent of +inf from an LSTM state of -inf
///   (JAX in f64 gives the LSTM step's input the same +inf): -inf here,
///   the cotangent times mish'(-1.2481) < 0; seed 5151's program 2,
///   hard_silu at +inf, slope 1);
/// - `squareplus`, `(x + √(x² + b))/2`: an infinite cotangent reaches
///   both terms, `inf − inf` for x < 0, where this crate's rule is the
///   cotangent times the slope `y/r` > 0 (seed 5153's program 684: a
///   cotangent of -inf from an LSTM state of +inf, then a matmul: ±inf
///   here, as TensorFlow's own matmul gradient of that cotangent gives);
/// - `sparse_plus` at ±inf or NaN: TensorFlow's `where` adds the rule of
///   the `(x + 1)²` it left out, `0 · inf` (seed 5151's programs 179,
///   1017; seed 5152's 534, at -inf where the slope is 0).
pub(super) fn nan_of_a_product(p: &Program, got: &[f64], want: &[f64]) -> bool {
    let products = ["mish", "hard_silu", "squareplus", "sparse_plus"];
    let composite = p
        .entries
        .iter()
        .any(|e| matches!(e, Entry::Step { op, .. } if products.contains(&op.as_str())));
    let (tol, least) = gradient_tolerance(p);
    let scale = magnitude(want).max(least);
    let pairs = || got.iter().zip(want);
    composite
        && got.len() == want.len()
        && pairs().any(|(g, w)| w.is_nan() && !g.is_nan())
        && pairs().all(|(g, w)| w.is_nan() || agrees(*g, *w, tol, scale))
}

/// Whether `got` differs from TensorFlow's `want` only where both are
/// non-finite (±inf against NaN or the other infinity), in a program with a
/// `matmul` or `einsum` of an operand holding an infinity or a value near
/// the largest float (1e300 and up, 1e36 in f32): the gradient's sums of
/// products meet +inf and -inf in an order of their own (seed 26's
/// program 98: NaN in TensorFlow, inf here).
pub(super) fn infinities_of_a_sum(p: &Program, got: &[f64], want: &[f64]) -> bool {
    let value = |k: usize| match &p.entries[k] {
        Entry::Input(v) => Some(v),
        Entry::Step { want, .. } => want.as_ref().ok(),
    };
    let near_max = |v: &Value| if v.dtype == DType::F32 { 1e36 } else { 1e300 };
    let overflowing =
        |v: &Value| matches!(&v.vals, Vals::F(f) if f.iter().any(|x| x.is_infinite() || x.abs() >= near_max(v)));
    let sums = p.entries.iter().any(|e| {
        matches!(e, Entry::Step { op, args, .. }
            if (op == "matmul" || op == "einsum") && args.iter().any(|&a| value(a).is_some_and(overflowing)))
    });
    let (tol, least) = gradient_tolerance(p);
    let scale = magnitude(want).max(least);
    let both = |g: f64, w: f64| !g.is_finite() && !w.is_finite();
    let pairs = || got.iter().zip(want);
    sums && got.len() == want.len()
        && pairs().any(|(g, w)| !agrees(*g, *w, tol, scale))
        && pairs().all(|(g, w)| agrees(*g, *w, tol, scale) || both(*g, *w))
}
