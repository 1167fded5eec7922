//! The math ops of issue 3 (more unary functions, activations, more binary
//! functions, more reductions, scans) through the public gradient checker,
//! first and second order, at several shapes (zero-size dims and, for binary
//! ops, broadcasting pairs). Inputs stay away from singularities and kinks:
//! functions with a restricted domain are composed with an affine map into
//! it (e.g. `asin(0.7x)`, `acosh(x + 1)`).

use crate::common;

use common::*;

fn table() -> Vec<Case> {
    let mut t = Vec::new();

    // ---- unary, every shape ----
    let unary: &[(&str, Op, Dom)] = &[
        ("expm1", |x| x[0].expm1(), Any),
        ("log1p", |x| x[0].log1p(), Pos),
        ("log1p near -1", |x| x[0].mul_scalar(0.4)?.log1p(), Any),
        ("rsqrt", |x| x[0].rsqrt(), Pos),
        ("reciprocal", |x| x[0].reciprocal(), NonZero),
        ("tan", |x| x[0].tan(), Any),
        ("asin", |x| x[0].mul_scalar(0.7)?.asin(), Any),
        ("acos", |x| x[0].mul_scalar(0.7)?.acos(), Any),
        ("atan", |x| x[0].mul_scalar(2.0)?.atan(), Any),
        ("sinh", |x| x[0].sinh(), Any),
        ("cosh", |x| x[0].cosh(), Any),
        ("asinh", |x| x[0].mul_scalar(2.0)?.asinh(), Any),
        ("acosh", |x| x[0].add_scalar(1.0)?.acosh(), Pos),
        ("atanh", |x| x[0].mul_scalar(0.7)?.atanh(), Any),
        ("erf", |x| x[0].erf(), Any),
        ("erfc", |x| x[0].mul_scalar(2.0)?.erfc(), Any),
        ("floor", |x| x[0].floor()?.add(&x[0].square()?), Any),
        ("ceil", |x| x[0].ceil()?.add(&x[0].square()?), Any),
        ("round", |x| x[0].round()?.add(&x[0].square()?), Any),
        ("softplus", |x| x[0].mul_scalar(3.0)?.softplus(), Any),
        ("softsign", |x| x[0].softsign(), NonZero),
        ("relu6", |x| sq(x[0].mul_scalar(5.0)?.relu6()), NonZero),
        ("leaky_relu", |x| sq(x[0].leaky_relu(0.2)), NonZero),
        ("elu", |x| sq(x[0].elu()), NonZero),
        ("selu", |x| sq(x[0].selu()), NonZero),
        ("gelu exact", |x| x[0].mul_scalar(2.0)?.gelu(false), Any),
        ("gelu tanh", |x| x[0].mul_scalar(2.0)?.gelu(true), Any),
        ("gelu_grad", |x| x[0].mul_scalar(2.0)?.gelu_grad(), Any),
        ("gelu_tanh_grad", |x| x[0].mul_scalar(2.0)?.gelu_tanh_grad(), Any),
        ("silu", |x| x[0].mul_scalar(2.0)?.silu(), Any),
        ("silu_grad", |x| x[0].mul_scalar(2.0)?.silu_grad(), Any),
        ("clip_by_value", |x| sq(x[0].clip_by_value(-0.55, 0.65)), Any),
        // (the activations of activation_more.rs: inputs on both sides of
        // their kinks, where the step does not reach them)
        ("hard_sigmoid", |x| sq(x[0].mul_scalar(2.0)?.hard_sigmoid()), Any),
        ("hard_silu", |x| x[0].mul_scalar(2.0)?.hard_silu(), Any),
        ("hard_silu above 3", |x| sq(x[0].add_scalar(3.5)?.hard_silu()), Pos),
        ("mish", |x| x[0].mul_scalar(3.0)?.mish(), Any),
        ("mish_grad", |x| x[0].mul_scalar(3.0)?.mish_grad(), Any),
        ("celu", |x| x[0].mul_scalar(2.0)?.celu(0.7), NonZero),
        (
            "relu_with slope cap threshold",
            |x| sq(x[0].mul_scalar(2.0)?.relu_with(0.3, Some(2.3), 0.4)),
            NonZero,
        ),
        (
            "relu_with slope threshold",
            |x| sq(x[0].mul_scalar(2.0)?.relu_with(0.3, None, 0.4)),
            NonZero,
        ),
        (
            "relu_with cap",
            |x| sq(x[0].mul_scalar(2.0)?.relu_with(0.0, Some(1.7), 0.0)),
            NonZero,
        ),
        ("hard_tanh", |x| sq(x[0].mul_scalar(2.0)?.hard_tanh()), NonZero),
        ("soft_shrink", |x| sq(x[0].soft_shrink(0.2)), NonZero),
        ("hard_shrink", |x| sq(x[0].hard_shrink(0.2)), NonZero),
        ("tanh_shrink", |x| x[0].mul_scalar(2.0)?.tanh_shrink(), Any),
        (
            "glu",
            |x| {
                gradtape::Tensor::stack(&[&x[0].mul_scalar(2.0)?, &x[0].mul_scalar(-1.5)?.add_scalar(0.3)?], -1)?
                    .glu(-1)
            },
            Any,
        ),
        ("sparse_plus", |x| x[0].mul_scalar(1.5)?.sparse_plus(), Any),
        ("squareplus", |x| x[0].mul_scalar(3.0)?.squareplus(4.0), Any),
        ("squareplus small b", |x| x[0].mul_scalar(3.0)?.squareplus(0.3), Any),
    ];
    for &(name, f, d) in unary {
        for &s in SHAPES {
            t.push(case(format!("{name} {s:?}"), f, &[(s, d)]));
        }
    }

    // ---- binary, every shape pair ----
    let binary: &[(&str, Op, Dom, Dom)] = &[
        ("squared_difference", |x| x[0].squared_difference(&x[1]), Any, Any),
        ("atan2", |x| x[0].atan2(&x[1]), Any, Pos),
        ("atan2 negative x", |x| x[0].atan2(&x[1].neg()?), Any, Pos),
        // TF's gradient (1, -floor(x / y)); the inputs stay away from the
        // jumps where x / y crosses an integer
        ("floor_mod", |x| x[0].mul_scalar(3.0)?.floor_mod(&x[1]), Any, Pos),
        (
            "floor_mod negative divisor",
            |x| x[0].mul_scalar(3.0)?.floor_mod(&x[1].neg()?),
            Any,
            Pos,
        ),
    ];
    for &(name, f, da, db) in binary {
        for &(sa, sb) in PAIRS {
            t.push(case(
                format!("{name} {}", fmt_shapes(&[sa, sb])),
                f,
                &[(sa, da), (sb, db)],
            ));
        }
    }

    // ---- reductions over axes, keepdims both ways, on a [2,3,4] input ----
    const AXES: &[(&[isize], bool)] = &[
        (&[0], false),
        (&[1], true),
        (&[-1], false),
        (&[0, 2], true),
        (&[-1, -3], false),
        (&[2, 0, 1], false),
        (&[0, 1, 2], true),
    ];
    macro_rules! reduction_cases {
        ($name:expr, $method:ident, $dom:expr) => {{
            let fs: [Op; 7] = [
                |x| sq(x[0].$method(AXES[0].0, AXES[0].1)),
                |x| sq(x[0].$method(AXES[1].0, AXES[1].1)),
                |x| sq(x[0].$method(AXES[2].0, AXES[2].1)),
                |x| sq(x[0].$method(AXES[3].0, AXES[3].1)),
                |x| sq(x[0].$method(AXES[4].0, AXES[4].1)),
                |x| sq(x[0].$method(AXES[5].0, AXES[5].1)),
                |x| sq(x[0].$method(AXES[6].0, AXES[6].1)),
            ];
            for (&(axes, keep), f) in AXES.iter().zip(fs) {
                t.push(case(
                    format!("{} [2,3,4] axes={axes:?} keepdims={keep}", $name),
                    f,
                    &[(&[2, 3, 4], $dom)],
                ));
            }
            t.push(case(
                format!("{} [5] axis 0", $name),
                |x| sq(x[0].$method(&[0], false)),
                &[(&[5], $dom)],
            ));
            t.push(case(
                format!("{} [0,3] axis 1", $name),
                |x| sq(x[0].$method(&[1], false)),
                &[(&[0, 3], $dom)],
            ));
            t.push(case(
                format!("{} [3,0] axis 0", $name),
                |x| sq(x[0].$method(&[0], true)),
                &[(&[3, 0], $dom)],
            ));
        }};
    }
    reduction_cases!("prod", prod, Any);
    reduction_cases!("prod pos", prod, Pos);
    reduction_cases!("logsumexp", logsumexp, Any);
    reduction_cases!("variance", variance, Any);
    reduction_cases!("std", std, Any);
    reduction_cases!("norm", norm, NonZero);
    // axes=[] reduces nothing (std has a zero variance there: not differentiable)
    t.push(case("prod axes=[]", |x| sq(x[0].prod(&[], false)), &[(&[2, 3], Any)]));
    t.push(case(
        "logsumexp axes=[]",
        |x| sq(x[0].logsumexp(&[], true)),
        &[(&[2, 3], Any)],
    ));
    t.push(case(
        "norm axes=[]",
        |x| sq(x[0].norm(&[], false)),
        &[(&[2, 3], NonZero)],
    ));
    t.push(case("prod scalar", |x| sq(x[0].prod(&[], false)), &[(&[], Any)]));
    t.push(case(
        "logsumexp of a shifted input",
        |x| x[0].mul_scalar(30.0)?.add_scalar(500.0)?.logsumexp(&[1], false),
        &[(&[3, 4], Any)],
    ));
    // the gradient of prod at exact zeros (one and two zeros in a row)
    t.push(case(
        "prod with zeros",
        |x| {
            let mask = common::mask(&[true, false, true, true, false, false], &[2, 3]);
            let xz = gradtape::Tensor::where_(&mask, &x[0], &x[0].zeros_like())?;
            x[0].mul(&xz.prod(&[1], true)?.broadcast_to(&[2, 3])?)
        },
        &[(&[2, 3], Any)],
    ));

    // ---- scans: axis, exclusive, reverse ----
    const SCANS: &[(isize, bool, bool)] = &[
        (0, false, false),
        (1, true, false),
        (-1, false, true),
        (1, true, true),
        (-2, true, true),
    ];
    macro_rules! scan_cases {
        ($name:expr, $method:ident, $dom:expr) => {{
            let fs: [Op; 5] = [
                |x| sq(x[0].$method(SCANS[0].0, SCANS[0].1, SCANS[0].2)),
                |x| sq(x[0].$method(SCANS[1].0, SCANS[1].1, SCANS[1].2)),
                |x| sq(x[0].$method(SCANS[2].0, SCANS[2].1, SCANS[2].2)),
                |x| sq(x[0].$method(SCANS[3].0, SCANS[3].1, SCANS[3].2)),
                |x| sq(x[0].$method(SCANS[4].0, SCANS[4].1, SCANS[4].2)),
            ];
            for (&(a, ex, rev), f) in SCANS.iter().zip(fs) {
                for s in [&[3, 4][..], &[2, 3, 2], &[0, 3], &[3, 0]] {
                    t.push(case(
                        format!("{} {s:?} axis={a} exclusive={ex} reverse={rev}", $name),
                        f,
                        &[(s, $dom)],
                    ));
                }
            }
            t.push(case(
                format!("{} [5] axis 0", $name),
                |x| sq(x[0].$method(0, false, false)),
                &[(&[5], $dom)],
            ));
        }};
    }
    // cumprod at exact zeros (one per scan, in the middle and at either end)
    const ZMASK: [bool; 12] = [
        true, false, true, true, false, true, true, true, true, true, true, false,
    ];
    let zero_scans: [(&str, Op); 4] = [
        ("cumprod with zeros axis=1", |x| {
            let xz = gradtape::Tensor::where_(&common::mask(&ZMASK, &[3, 4]), &x[0], &x[0].zeros_like())?;
            x[0].mul(&xz.cumprod(1, false, false)?)
        }),
        ("cumprod with zeros axis=1 exclusive", |x| {
            let xz = gradtape::Tensor::where_(&common::mask(&ZMASK, &[3, 4]), &x[0], &x[0].zeros_like())?;
            x[0].mul(&xz.cumprod(1, true, false)?)
        }),
        ("cumprod with zeros axis=1 reverse", |x| {
            let xz = gradtape::Tensor::where_(&common::mask(&ZMASK, &[3, 4]), &x[0], &x[0].zeros_like())?;
            x[0].mul(&xz.cumprod(1, false, true)?)
        }),
        ("cumprod with zeros axis=0 exclusive reverse", |x| {
            let xz = gradtape::Tensor::where_(&common::mask(&ZMASK, &[3, 4]), &x[0], &x[0].zeros_like())?;
            x[0].mul(&xz.cumprod(0, true, true)?)
        }),
    ];
    for (name, f) in zero_scans {
        t.push(case(name, f, &[(&[3, 4], Any)]));
    }
    scan_cases!("cumsum", cumsum, Any);
    scan_cases!("cumprod", cumprod, Any);
    scan_cases!("cumprod pos", cumprod, Pos);
    t
}

const REQUIRED: &[&str] = &[
    "expm1",
    "log1p",
    "rsqrt",
    "reciprocal",
    "tan",
    "asin",
    "acos",
    "atan ",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "erf ",
    "erfc",
    "floor",
    "ceil",
    "round",
    "softplus",
    "softsign",
    "relu6",
    "leaky_relu",
    "elu",
    "selu",
    "gelu exact",
    "gelu tanh",
    "gelu_grad",
    "gelu_tanh_grad",
    "silu",
    "silu_grad",
    "clip_by_value",
    "hard_sigmoid",
    "hard_silu",
    "mish",
    "mish_grad",
    "celu",
    "relu_with",
    "hard_tanh",
    "soft_shrink",
    "hard_shrink",
    "tanh_shrink",
    "glu",
    "sparse_plus",
    "squareplus",
    "squared_difference",
    "atan2",
    "prod",
    "logsumexp",
    "variance",
    "std",
    "norm",
    "cumsum",
    "cumprod",
];

#[test]
fn every_math_op_passes_the_gradient_checker() {
    run_table(&table(), REQUIRED, 300, 4500);
}
