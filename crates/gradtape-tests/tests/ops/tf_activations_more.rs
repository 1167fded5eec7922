//! Keras 3's further activations (`activation_more.rs`: hard_sigmoid,
//! hard_silu, mish, celu, exponential, relu with its arguments, hard_tanh,
//! soft_shrink, hard_shrink, tanh_shrink, glu, sparse_plus, squareplus)
//! against TensorFlow 2.21 (`keras.activations.*` on its TensorFlow
//! backend, nested `tf.GradientTape`s), in `f32` and `f64`, at ordinary
//! points (±0.7, ±1.3, ±2.5), at the kinks (0, ±0.5, ±1, ±3, 6) and at
//! extreme ones (0, -0, ±1e-30, ±20, ±40, ±88, ±700, ±max/2, ±max, ±inf,
//! NaN): value, first and second derivative, eager and traced, and the
//! forward-mode tangent. The numbers are printed by
//! `tests/reference/tf_activations_more.py` into
//! `tests/data/tf_activations_more.txt`, with JAX's (Keras's definitions
//! in f64) and mpmath's closed forms beside them; where TensorFlow is
//! wrong, or where this crate deliberately differs, the points are listed
//! in [`KNOWN`] with the reason. Every op here is Keras's; where PyTorch's
//! differs it says so in the op's doc (hardtanh's and softshrink's
//! gradient at the bounds: 0 in PyTorch, for softshrink as here).
//!
//! The harness is `activation_check.rs`'s.

use gradtape::{DType, Result};

use super::activation_check::{finite, run, Fixture, Known, Op, Reference};

const DATA: &str = include_str!("../data/tf_activations_more.txt");

fn op(name: &str) -> Op {
    match name {
        "hard_sigmoid" => |x| x.hard_sigmoid(),
        "hard_silu" => |x| x.hard_silu(),
        "mish" => |x| x.mish(),
        "celu" => |x| x.celu(1.0),
        "celu_half" => |x| x.celu(0.5),
        "exponential" => |x| x.exp(),
        "relu_slope" => |x| x.relu_with(0.25, None, 0.0),
        "relu_cap" => |x| x.relu_with(0.0, Some(2.5), 0.0),
        "relu_cap6" => |x| x.relu_with(0.0, Some(6.0), 0.0),
        "relu_threshold" => |x| x.relu_with(0.0, None, 1.0),
        "relu_all" => |x| x.relu_with(0.25, Some(2.5), 1.0),
        "hard_tanh" => |x| x.hard_tanh(),
        "soft_shrink" => |x| x.soft_shrink(0.5),
        "hard_shrink" => |x| x.hard_shrink(0.5),
        "tanh_shrink" => |x| x.tanh_shrink(),
        "glu_a" | "glu_b" => |x| x.glu(-1),
        "sparse_plus" => |x| x.sparse_plus(),
        "squareplus" => |x| x.squareplus(4.0),
        "squareplus_half" => |x| x.squareplus(0.5),
        _ => panic!("no op {name}"),
    }
}

fn rows(name: &str) -> bool {
    name.starts_with("glu")
}

#[test]
fn more_activations_match_tensorflow_eager_traced_and_forward() -> Result<()> {
    run(&Fixture {
        data: DATA,
        op,
        rows,
        // (glu's Jacobian is not square)
        forward: |name| !rows(name),
        known: KNOWN,
        min_checked: 8000,
    })
}

/// `|x|` at least max/2 of either dtype, finite.
fn huge(p: f64) -> bool {
    p.is_finite() && p.abs() > 1e38
}

/// Where TensorFlow is wrong or this crate deliberately differs.
const KNOWN: &[Known] = &[
    (
        &["hard_silu"],
        None,
        &[1],
        huge,
        Reference::Exact,
        "Keras's x · hard_sigmoid(x) sends the cotangent times x into relu6's rule, which overflows at |x| ≥ max/2 (weights above 1) and gives inf · 0 = NaN where the slope is 1 (x ≥ 3) or 0 (x ≤ −3); this crate selects between x, 0 and the middle branch on x clamped into (−3, 3) (JAX's select-based rules agree)",
    ),
    (&["hard_silu"], None, &[1], f64::is_infinite, Reference::Jax, "the slopes 1 and 0 at ±inf, as above (JAX agrees)"),
    (
        &["hard_silu"],
        None,
        &[0],
        |p| p == f64::NEG_INFINITY,
        Reference::Value(0.0),
        "hard_silu is 0 for every x ≤ −3, so 0 at −inf, its limit; Keras's −inf · hard_sigmoid(−inf) = −inf · 0 is NaN (JAX's too)",
    ),
    (
        &["mish"],
        None,
        &[0, 1, 2],
        finite,
        Reference::Exact,
        "Keras's x · tanh(softplus(x)) flushes eˣ to 0 at −88 in f32 (TensorFlow's subnormals), its gradient's x · cotangent overflows to NaN at |x| ≥ max/2 and its second derivative's 1 − tanh² cancels to 0 from x = 20 on (mpmath: −5e-14 at 20, −3e-72 at 88); this crate's Mish and MishGrad ops write tanh(softplus x) as n/(n + 2) and 1 − tanh as 2/(n + 2), n = eˣ(eˣ + 2)",
    ),
    (
        &["celu", "celu_half"],
        None,
        &[1],
        |p| p == 0.0,
        Reference::Jax,
        "celu is smooth at 0 with slope 1; Keras's max(x, 0) + α·expm1(min(x, 0)/α) passes the gradient through both max and min at the tie, 2 (JAX's max and min split it: 1; PyTorch's celu gives 1)",
    ),
    (
        &["celu", "celu_half"],
        None,
        &[1, 2],
        f64::is_nan,
        Reference::Jax,
        "NaN at NaN (JAX's); Keras's max/min gradients select 0 for a NaN input",
    ),
    (
        &["celu", "exponential"],
        Some(DType::F32),
        &[1, 2],
        |p| p == -88.0,
        Reference::Exact,
        "e^(−88) = 6e-39 is subnormal in f32: TensorFlow's kernels flush it to 0, this crate keeps it (the weighted derivatives are normal numbers)",
    ),
    (
        &["tanh_shrink"],
        None,
        &[0, 1],
        |p| finite(p) && p.abs() < 0.3,
        Reference::Exact,
        "x − tanh x cancels for small |x|: Keras's difference is 0 at ±1e-30 (mpmath: ±3.3e-91 in f64), and so is its derivative 1 − sech²x (mpmath: tanh²x = 1e-60); this crate's TanhShrink op takes its Taylor series there, and its derivative is tanh²x",
    ),
    (
        &["tanh_shrink"],
        Some(DType::F32),
        &[2],
        |p| p.abs() == 3.0,
        Reference::Exact,
        "tanh's derivative from its output, 1 − y² (TensorFlow's TanhGrad, this crate's), cancels as |x| grows: one ulp of y between the two f32 tanh kernels is 1.2e-5 here; this crate's is 4e-6 from mpmath",
    ),
    (
        &["tanh_shrink"],
        Some(DType::F64),
        &[2],
        |p| p == 6.0,
        Reference::ExactWithin(1e-11),
        "1 − y² as above: TensorFlow's is 9e-12 off mpmath at 6, this crate's 2e-12 (left: the rule of tanh from its output)",
    ),
    (
        &["sparse_plus"],
        None,
        &[1],
        |p| p == f64::INFINITY || p.is_nan(),
        Reference::Value(1.0),
        "at +inf and NaN Keras's where(x < 1, …, x) selects x, slope 1 (x < 1 is false at NaN); TensorFlow adds the unselected (x + 1)²'s gradient, 0 · inf = NaN there; this crate squares x clamped into [−1, 1]",
    ),
    (
        &["sparse_plus"],
        None,
        &[1],
        |p| p == f64::NEG_INFINITY,
        Reference::Value(0.0),
        "the slope 0 of x ≤ −1, as above",
    ),
    (
        &["squareplus", "squareplus_half"],
        None,
        &[0, 1, 2],
        |p| p.is_finite() && p.abs() >= 20.0,
        Reference::Exact,
        "Keras's (x + √(x² + b))/2 cancels for x ≪ 0 (f32: 4e-3 off at −700), its x² overflows (inf at |x| ≥ max/2 where the value is x or ~b/4|x|) and its gradients are NaN or half there; this crate computes x + (b/2)/(r + x) and (b/2)/(r − x) with r scaled by max(|x|, 1) (JAX in f32 would flush the subnormal values at −max/2 to 0)",
    ),
    (
        &["squareplus", "squareplus_half"],
        None,
        &[0],
        |p| p == f64::NEG_INFINITY,
        Reference::Value(0.0),
        "the limit 0 at −inf ((b/2)/inf); Keras's −inf + inf is NaN",
    ),
];
