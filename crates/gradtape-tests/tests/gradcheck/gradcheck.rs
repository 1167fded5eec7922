//! Every differentiable op through the public gradient checker, first and
//! second order, from one table of cases; then exact tests of the kink
//! conventions (TensorFlow's) and tests that a wrong gradient is rejected.
//!
//! Each case is an op (usually composed with `square`, so that the second
//! order check differentiates the op's own rule, not a constant), a list of
//! input shapes, and a domain per input that keeps the inputs away from
//! singularities (log, sqrt, division), kinks (relu, abs) and ties (max,
//! min, maximum, minimum). Inputs are deterministic.

use crate::common;

use common::*;
use gradtape::{check_gradients, CheckOptions, DType, Error, GradientTape, Result, Tensor};

fn table() -> Vec<Case> {
    let mut t = Vec::new();

    // ---- binary elementwise, every shape pair ----
    let binary: &[(&str, Op, Dom, Dom)] = &[
        ("add", |x| sq(x[0].add(&x[1])), Any, Any),
        ("sub", |x| sq(x[0].sub(&x[1])), Any, Any),
        ("mul", |x| x[0].mul(&x[1]), Any, Any),
        ("div", |x| x[0].div(&x[1]), Any, Pos),
        ("pow", |x| x[0].pow(&x[1]), Pos, Any),
        ("maximum", |x| sq(x[0].maximum(&x[1])), Distinct, Distinct),
        ("minimum", |x| sq(x[0].minimum(&x[1])), Distinct, Distinct),
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
    // clipping to tensor bounds (TensorFlow's clip_by_value with tensors),
    // hi broadcast over rows: x, lo and hi distinct, so away from the kinks
    // (where lo > hi the value is lo, also differentiable there)
    t.push(case(
        "clip_by_tensors",
        |x| sq(x[0].clip_by_tensors(&x[1], &x[2])),
        &[(&[2, 3], Distinct), (&[2, 3], Distinct), (&[3], Distinct)],
    ));
    // one input used twice (gradient aggregation); a constant exponent with a negative base
    t.push(case("mul self", |x| x[0].mul(&x[0]), &[(&[2, 3], Any)]));
    t.push(case("div by its own exp", |x| x[0].div(&x[0].exp()?), &[(&[4], Any)]));
    // tanh's gradient (its one-pass TanhGrad op) as a function of x and of
    // the incoming cotangent w: the checker's first and second orders check
    // TanhGrad's own rule and the rule of that
    t.push(case(
        "tanh gradient (TanhGrad)",
        |x| {
            let tape = GradientTape::new();
            let y = tape.record(|| {
                tape.watch(&x[0]);
                x[0].tanh()?.mul(&x[1])?.sum_all()
            })?;
            tape.gradient(&y, &x[0])?.ok_or_else(|| Error::InvalidArgument {
                op: "test",
                msg: "no gradient".into(),
            })
        },
        &[(&[2, 3], Any), (&[2, 3], Any)],
    ));
    t.push(case(
        "pow with negative base, integer exponent",
        |x| x[0].pow(&Tensor::scalar(3.0f64)),
        &[(&[5], Any)],
    ));

    // ---- unary elementwise and scalar arithmetic, every shape ----
    let unary: &[(&str, Op, Dom)] = &[
        ("neg", |x| sq(x[0].neg()), Any),
        ("square", |x| x[0].square(), Any),
        ("sqrt", |x| x[0].sqrt(), Pos),
        ("exp", |x| x[0].exp(), Any),
        ("log", |x| x[0].log(), Pos),
        ("sin", |x| x[0].sin(), Any),
        ("cos", |x| x[0].cos(), Any),
        ("tanh", |x| x[0].tanh(), Any),
        ("sigmoid", |x| x[0].mul_scalar(3.0)?.sigmoid(), Distinct),
        ("relu", |x| sq(x[0].relu()), NonZero),
        ("abs", |x| sq(x[0].abs()), NonZero),
        ("pow_scalar 2.5", |x| x[0].pow_scalar(2.5), Pos),
        ("pow_scalar 3", |x| x[0].pow_scalar(3.0), Any),
        ("pow_scalar -1.5", |x| x[0].pow_scalar(-1.5), Pos),
        ("pow_scalar 0.5", |x| x[0].pow_scalar(0.5), Pos),
        ("mul_scalar", |x| sq(x[0].mul_scalar(-1.7)), Any),
        ("add_scalar", |x| sq(x[0].add_scalar(0.3)), Any),
        ("sub_scalar", |x| sq(x[0].sub_scalar(2.0)), Any),
        ("div_scalar", |x| sq(x[0].div_scalar(-0.8)), Any),
        ("identity", |x| sq(Ok(x[0].identity())), Any),
    ];
    for &(name, f, d) in unary {
        for &s in SHAPES {
            t.push(case(format!("{name} {s:?}"), f, &[(s, d)]));
        }
    }

    // ---- reductions: axes single / several / negative / unsorted / none, keepdims both ----
    // (axes, keepdims) on a [2,3,4] input; fn pointers cannot capture, so the
    // case functions index this table
    const AXES: &[(&[isize], bool)] = &[
        (&[0], false),
        (&[1], true),
        (&[-1], false),
        (&[-2], true),
        (&[0, 2], true),
        (&[-1, -3], false),
        (&[2, 0, 1], false),
        (&[0, 1, 2], true),
        (&[], false),
    ];
    macro_rules! reduction_cases {
        ($name:expr, $method:ident, $dom:expr) => {{
            let fs: [Op; 9] = [
                |x| sq(x[0].$method(AXES[0].0, AXES[0].1)),
                |x| sq(x[0].$method(AXES[1].0, AXES[1].1)),
                |x| sq(x[0].$method(AXES[2].0, AXES[2].1)),
                |x| sq(x[0].$method(AXES[3].0, AXES[3].1)),
                |x| sq(x[0].$method(AXES[4].0, AXES[4].1)),
                |x| sq(x[0].$method(AXES[5].0, AXES[5].1)),
                |x| sq(x[0].$method(AXES[6].0, AXES[6].1)),
                |x| sq(x[0].$method(AXES[7].0, AXES[7].1)),
                |x| sq(x[0].$method(AXES[8].0, AXES[8].1)),
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
                format!("{} [5] axis -1 keepdims", $name),
                |x| sq(x[0].$method(&[-1], true)),
                &[(&[5], $dom)],
            ));
            t.push(case(
                format!("{} scalar axes=[]", $name),
                |x| sq(x[0].$method(&[], false)),
                &[(&[], $dom)],
            ));
            t.push(case(
                format!("{} [2,3] axis 1", $name),
                |x| sq(x[0].$method(&[1], false)),
                &[(&[2, 3], $dom)],
            ));
            t.push(case(
                format!("{} [0,3] axis 1", $name),
                |x| sq(x[0].$method(&[1], false)),
                &[(&[0, 3], $dom)],
            ));
        }};
    }
    reduction_cases!("sum", sum, Any);
    reduction_cases!("mean", mean, Any);
    reduction_cases!("max", max, Distinct);
    reduction_cases!("min", min, Distinct);
    t.push(case(
        "sum [0,3] axis 0 (empty reduction)",
        |x| x[0].sum(&[0], false)?.add_scalar(1.0)?.square(),
        &[(&[0, 3], Any)],
    ));
    let all: &[(&str, Op, Dom)] = &[
        ("sum_all", |x| sq(x[0].sum_all()), Any),
        ("mean_all", |x| sq(x[0].mean_all()), Any),
        ("max_all", |x| sq(x[0].max_all()), Distinct),
        ("min_all", |x| sq(x[0].min_all()), Distinct),
    ];
    for &(name, f, d) in all {
        for s in [&[][..], &[5], &[2, 3, 4]] {
            t.push(case(format!("{name} {s:?}"), f, &[(s, d)]));
        }
    }
    t.push(case(
        "sum_all [0,3]",
        |x| x[0].sum_all()?.add_scalar(1.0)?.square(),
        &[(&[0, 3], Any)],
    ));

    // ---- matmul ----
    let mm: &[(&str, Op, &[usize], &[usize])] = &[
        ("matmul nn [2,3]@[3,4]", |x| x[0].matmul(&x[1]), &[2, 3], &[3, 4]),
        (
            "matmul_with tn [3,2]ᵀ@[3,4]",
            |x| x[0].matmul_with(&x[1], true, false),
            &[3, 2],
            &[3, 4],
        ),
        (
            "matmul_with nt [2,3]@[4,3]ᵀ",
            |x| x[0].matmul_with(&x[1], false, true),
            &[2, 3],
            &[4, 3],
        ),
        (
            "matmul_with tt [3,2]ᵀ@[4,3]ᵀ",
            |x| x[0].matmul_with(&x[1], true, true),
            &[3, 2],
            &[4, 3],
        ),
        ("matmul [3,4]@[4,1]", |x| x[0].matmul(&x[1]), &[3, 4], &[4, 1]),
        ("matmul [1,4]@[4,1]", |x| x[0].matmul(&x[1]), &[1, 4], &[4, 1]),
        (
            "matmul batched [2,3,4]@[2,4,5]",
            |x| x[0].matmul(&x[1]),
            &[2, 3, 4],
            &[2, 4, 5],
        ),
        (
            "matmul batch-broadcast [2,3,4]@[4,5]",
            |x| x[0].matmul(&x[1]),
            &[2, 3, 4],
            &[4, 5],
        ),
        (
            "matmul batch-broadcast [3,4]@[2,4,5]",
            |x| x[0].matmul(&x[1]),
            &[3, 4],
            &[2, 4, 5],
        ),
        (
            "matmul batch-broadcast [1,3,4]@[2,4,5]",
            |x| x[0].matmul(&x[1]),
            &[1, 3, 4],
            &[2, 4, 5],
        ),
        (
            "matmul batch-broadcast [2,1,2,3]@[3,3,2]",
            |x| x[0].matmul(&x[1]),
            &[2, 1, 2, 3],
            &[3, 3, 2],
        ),
        (
            "matmul_with batched tn [2,4,3]ᵀ@[2,4,2]",
            |x| x[0].matmul_with(&x[1], true, false),
            &[2, 4, 3],
            &[2, 4, 2],
        ),
        (
            "matmul_with batched nt [2,3,4]@[5,4]ᵀ",
            |x| x[0].matmul_with(&x[1], false, true),
            &[2, 3, 4],
            &[5, 4],
        ),
        (
            "matmul_with batched tt [1,4,3]ᵀ@[2,5,4]ᵀ",
            |x| x[0].matmul_with(&x[1], true, true),
            &[1, 4, 3],
            &[2, 5, 4],
        ),
        ("matmul [0,3]@[3,2]", |x| x[0].matmul(&x[1]), &[0, 3], &[3, 2]),
        ("matmul k=0 [2,0]@[0,3]", |x| x[0].matmul(&x[1]), &[2, 0], &[0, 3]),
        (
            "matmul of a transposed view [3,2]ᵀ@[3,2]",
            |x| x[0].transpose()?.matmul(&x[1]),
            &[3, 2],
            &[3, 2],
        ),
        ("matmul of itself [3,3]@[3,3]", |x| x[0].matmul(&x[0]), &[3, 3], &[3, 3]),
    ];
    for &(name, f, sa, sb) in mm {
        t.push(case(name, f, &[(sa, Any), (sb, Any)]));
    }
    t.push(case(
        "matmul k=0 [2,0]@[0,3] plus c",
        |x| sq(x[0].matmul(&x[1])?.add(&x[2])),
        &[(&[2, 0], Any), (&[0, 3], Any), (&[2, 3], Any)],
    ));

    // ---- shape ops (composed with square: they are linear) ----
    let shape_ops: &[(&str, Op, &[usize])] = &[
        ("reshape [2,3]->[3,2]", |x| sq(x[0].reshape(&[3, 2])), &[2, 3]),
        ("reshape [6]->[2,1,3]", |x| sq(x[0].reshape(&[2, 1, 3])), &[6]),
        ("reshape []->[1,1]", |x| sq(x[0].reshape(&[1, 1])), &[]),
        ("reshape [2,3,2]->[12]", |x| sq(x[0].reshape(&[12])), &[2, 3, 2]),
        (
            "reshape of a permuted view",
            |x| sq(x[0].transpose()?.reshape(&[6])),
            &[2, 3],
        ),
        ("reshape [0,3]->[3,0]", |x| sq(x[0].reshape(&[3, 0])), &[0, 3]),
        ("permute [2,3,4] [2,0,1]", |x| sq(x[0].permute(&[2, 0, 1])), &[2, 3, 4]),
        ("permute [2,3,4] [1,2,0]", |x| sq(x[0].permute(&[1, 2, 0])), &[2, 3, 4]),
        ("permute [2,3] identity", |x| sq(x[0].permute(&[0, 1])), &[2, 3]),
        ("permute scalar", |x| sq(x[0].permute(&[])), &[]),
        ("transpose [2,3]", |x| sq(x[0].transpose()), &[2, 3]),
        ("transpose [2,3,4]", |x| sq(x[0].transpose()), &[2, 3, 4]),
        ("transpose [1,3]", |x| sq(x[0].transpose()), &[1, 3]),
        ("broadcast_to [3]->[2,3]", |x| sq(x[0].broadcast_to(&[2, 3])), &[3]),
        ("broadcast_to [2,1]->[2,3]", |x| sq(x[0].broadcast_to(&[2, 3])), &[2, 1]),
        ("broadcast_to []->[2,3]", |x| sq(x[0].broadcast_to(&[2, 3])), &[]),
        (
            "broadcast_to [1,3]->[4,2,3]",
            |x| sq(x[0].broadcast_to(&[4, 2, 3])),
            &[1, 3],
        ),
        ("broadcast_to [3]->[3]", |x| sq(x[0].broadcast_to(&[3])), &[3]),
        (
            "broadcast_to [1,3]->[0,3]",
            |x| {
                x[0].broadcast_to(&[0, 3])?
                    .sum(&[0], false)?
                    .add(&x[0].sin()?.reshape(&[3])?)
            },
            &[1, 3],
        ),
        ("expand_dims [2,3] 0", |x| sq(x[0].expand_dims(0)), &[2, 3]),
        ("expand_dims [2,3] 1", |x| sq(x[0].expand_dims(1)), &[2, 3]),
        ("expand_dims [2,3] -1", |x| sq(x[0].expand_dims(-1)), &[2, 3]),
        ("expand_dims scalar 0", |x| sq(x[0].expand_dims(0)), &[]),
        ("squeeze [1,3,1] all", |x| sq(x[0].squeeze(&[])), &[1, 3, 1]),
        ("squeeze [1,3,1] -1", |x| sq(x[0].squeeze(&[-1])), &[1, 3, 1]),
        ("squeeze [2,1,3] 1", |x| sq(x[0].squeeze(&[1])), &[2, 1, 3]),
        ("squeeze [1,1] all", |x| sq(x[0].squeeze(&[])), &[1, 1]),
        (
            "contiguous of a permuted view",
            |x| sq(x[0].permute(&[1, 0])?.contiguous()),
            &[2, 3],
        ),
        (
            "contiguous of a permuted rank-3 view",
            |x| sq(x[0].permute(&[2, 0, 1])?.contiguous()),
            &[2, 3, 4],
        ),
        (
            "contiguous of a broadcast view",
            |x| sq(x[0].broadcast_to(&[2, 3])?.contiguous()),
            &[3],
        ),
        ("contiguous of a contiguous tensor", |x| sq(x[0].contiguous()), &[2, 3]),
        (
            "slice [3,4] rows 1..3 cols 1..3",
            |x| sq(x[0].slice(&[1, 1], &[2, 2])),
            &[3, 4],
        ),
        (
            "slice [2,3,4] inner block",
            |x| sq(x[0].slice(&[1, 0, 2], &[1, 3, 2])),
            &[2, 3, 4],
        ),
        ("slice scalar", |x| sq(x[0].slice(&[], &[])), &[]),
        (
            "slice to an empty block",
            |x| x[0].slice(&[1, 0], &[0, 3])?.sum_all()?.add(&x[0].sin()?.sum_all()?),
            &[2, 3],
        ),
        (
            "slice of a transposed view",
            |x| sq(x[0].transpose()?.slice(&[1, 0], &[2, 2])),
            &[2, 3],
        ),
        ("narrow axis 1", |x| sq(x[0].narrow(1, 1, 2)), &[2, 3]),
        ("narrow axis -1 of rank 3", |x| sq(x[0].narrow(-1, 0, 3)), &[2, 3, 4]),
        ("pad [2,3]", |x| sq(x[0].pad(&[(1, 0), (2, 1)])), &[2, 3]),
        ("pad [4] nothing", |x| sq(x[0].pad(&[(0, 0)])), &[4]),
        ("pad [2,1,3]", |x| sq(x[0].pad(&[(0, 1), (1, 1), (0, 2)])), &[2, 1, 3]),
        (
            "pad of a permuted view",
            |x| sq(x[0].permute(&[1, 0])?.pad(&[(1, 1), (0, 1)])),
            &[2, 3],
        ),
        (
            "pad [0,3]",
            |x| x[0].pad(&[(1, 1), (0, 0)])?.sum_all()?.add_scalar(1.0)?.square(),
            &[0, 3],
        ),
        ("sum_to_shape [2,3]->[3]", |x| sq(x[0].sum_to_shape(&[3])), &[2, 3]),
        ("sum_to_shape [2,3]->[1,3]", |x| sq(x[0].sum_to_shape(&[1, 3])), &[2, 3]),
        ("sum_to_shape [2,3]->[2,1]", |x| sq(x[0].sum_to_shape(&[2, 1])), &[2, 3]),
        ("sum_to_shape [2,3]->[]", |x| sq(x[0].sum_to_shape(&[])), &[2, 3]),
        (
            "sum_to_shape [2,3,4]->[3,1]",
            |x| sq(x[0].sum_to_shape(&[3, 1])),
            &[2, 3, 4],
        ),
        ("sum_to_shape [2,3]->[2,3]", |x| sq(x[0].sum_to_shape(&[2, 3])), &[2, 3]),
        (
            "cast f64->f32->f64",
            |x| x[0].cast(DType::F32)?.square()?.cast(DType::F64),
            &[2, 3],
        ),
        (
            "cast f64->f32 (f32 result)",
            |x| x[0].cast(DType::F32)?.mul_scalar(1.5)?.square(),
            &[4],
        ),
        ("cast to the same dtype", |x| sq(x[0].cast(DType::F64)), &[3]),
    ];
    for &(name, f, s) in shape_ops {
        let c = case(name, f, &[(s, Any)]);
        t.push(if name.starts_with("cast f64->f32") {
            c.loose()
        } else {
            c
        });
    }

    // ---- where_, both branches, with broadcasting ----
    t.push(case(
        "where_ [2,3] both branches",
        |x| {
            sq(Tensor::where_(
                &mask(&[true, false, true, false, false, true], &[2, 3]),
                &x[0],
                &x[1],
            ))
        },
        &[(&[2, 3], Any), (&[2, 3], Any)],
    ));
    t.push(case(
        "where_ cond [2,3], a [3], b []",
        |x| {
            sq(Tensor::where_(
                &mask(&[true, false, true, true, false, false], &[2, 3]),
                &x[0],
                &x[1],
            ))
        },
        &[(&[3], Any), (&[], Any)],
    ));
    t.push(case(
        "where_ cond [3], a [2,3], b [2,1]",
        |x| sq(Tensor::where_(&mask(&[false, true, false], &[3]), &x[0], &x[1])),
        &[(&[2, 3], Any), (&[2, 1], Any)],
    ));
    t.push(case(
        "where_ all true / all false",
        |x| {
            let t = Tensor::where_(&mask(&[true; 4], &[4]), &x[0], &x[1])?;
            let f = Tensor::where_(&mask(&[false; 4], &[4]), &x[0], &x[1])?;
            t.mul(&f.sin()?)
        },
        &[(&[4], Any), (&[4], Any)],
    ));

    // ---- gather / scatter_add ----
    t.push(case(
        "gather axis 0 repeated",
        |x| sq(x[0].gather(&idx(&[2, 0, 2, 3], &[4]), 0)),
        &[(&[4, 3], Any)],
    ));
    t.push(case(
        "gather axis 1 rank-2 indices (i32)",
        |x| sq(x[0].gather(&Tensor::from_vec(vec![1i32, 1, 3, 0], &[2, 2])?, 1)),
        &[(&[3, 4], Any)],
    ));
    t.push(case(
        "gather axis -1 of rank 3",
        |x| sq(x[0].gather(&idx(&[3, 3, 0], &[3]), -1)),
        &[(&[2, 3, 4], Any)],
    ));
    t.push(case(
        "gather axis 1 of rank 3",
        |x| sq(x[0].gather(&idx(&[2, 2], &[2]), 1)),
        &[(&[2, 3, 2], Any)],
    ));
    t.push(case(
        "gather scalar index",
        |x| sq(x[0].gather(&Tensor::scalar(1i64), 0)),
        &[(&[3, 2], Any)],
    ));
    t.push(case(
        "gather scalar index, last axis",
        |x| sq(x[0].gather(&Tensor::scalar(2i64), -1)),
        &[(&[3, 4], Any)],
    ));
    t.push(case(
        "gather scalar index, axis 1",
        |x| sq(x[0].gather(&Tensor::scalar(1i32), 1)),
        &[(&[3, 4], Any)],
    ));
    t.push(case(
        "gather scalar index, middle axis",
        |x| sq(x[0].gather(&Tensor::scalar(0i64), 1)),
        &[(&[2, 3, 2], Any)],
    ));
    t.push(case(
        "gather no indices",
        |x| sq(x[0].gather(&idx(&[], &[0]), 0)?.sum_all()?.add(&x[0].sum_all()?)),
        &[(&[3, 2], Any)],
    ));
    t.push(case(
        "gather of a vector",
        |x| sq(x[0].gather(&idx(&[4, 4, 4, 1], &[4]), 0)),
        &[(&[5], Any)],
    ));
    t.push(case(
        "scatter_add axis 0 repeated",
        |x| sq(x[0].scatter_add(&idx(&[0, 2, 0], &[3]), 0, 4)),
        &[(&[3, 2], Any)],
    ));
    t.push(case(
        "scatter_add axis 1",
        |x| sq(x[0].scatter_add(&idx(&[1, 1, 0], &[3]), 1, 2)),
        &[(&[2, 3], Any)],
    ));
    t.push(case(
        "scatter_add rank-2 indices",
        |x| sq(x[0].scatter_add(&idx(&[0, 1, 1, 1], &[2, 2]), 0, 3)),
        &[(&[2, 2, 3], Any)],
    ));
    t.push(case(
        "scatter_add scalar index, axis -1 (appended)",
        |x| sq(x[0].scatter_add(&Tensor::scalar(1i64), -1, 3)),
        &[(&[2, 2], Any)],
    ));
    t.push(case(
        "scatter_add axis -1",
        |x| sq(x[0].scatter_add(&idx(&[2, 0], &[2]), -1, 3)),
        &[(&[2, 2], Any)],
    ));

    // ---- compositions ----
    t.push(case(
        "dense layer tanh(x@W + b)",
        |x| x[0].matmul(&x[1])?.add(&x[2])?.tanh(),
        &[(&[2, 3], Any), (&[3, 4], Any), (&[4], Any)],
    ));
    t.push(case(
        "log-sum-exp over axis 1",
        |x| {
            let m = x[0].max(&[1], true)?.stop_gradient();
            x[0].sub(&m)?.exp()?.sum(&[1], true)?.log()?.add(&m)
        },
        &[(&[2, 4], Distinct)],
    ));
    t.push(case(
        "softmax",
        |x| {
            let e = x[0].exp()?;
            e.div(&e.sum(&[-1], true)?)
        },
        &[(&[2, 3], Any)],
    ));
    t.push(case(
        "mse loss",
        |x| x[0].sub(&x[1])?.square()?.mean_all(),
        &[(&[3, 2], Any), (&[3, 2], Pos)],
    ));
    t
}

/// Every differentiable op must appear in some case name.
const REQUIRED: &[&str] = &[
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "pow ",
    "pow_scalar",
    "square",
    "sqrt",
    "exp",
    "log",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "relu",
    "abs",
    "maximum",
    "minimum",
    "clip_by_tensors",
    "mul_scalar",
    "add_scalar",
    "sub_scalar",
    "div_scalar",
    "sum ",
    "mean ",
    "max ",
    "min ",
    "sum_all",
    "mean_all",
    "max_all",
    "min_all",
    "matmul nn",
    "matmul_with tn",
    "matmul_with nt",
    "matmul_with tt",
    "matmul batched",
    "matmul batch-broadcast",
    "reshape",
    "permute",
    "transpose",
    "broadcast_to",
    "expand_dims",
    "squeeze",
    "cast",
    "identity",
    "where_",
    "gather axis 0",
    "gather axis 1",
    "scatter_add",
    "sum_to_shape",
    "contiguous of a permuted view",
    "slice",
    "narrow",
    "pad",
];

#[test]
fn every_op_passes_the_gradient_checker() {
    run_table(&table(), REQUIRED, 250, 5000);
}

// ---------------------------------------------------------------------------
// The checker can fail.

#[test]
fn a_wrong_first_derivative_is_rejected() {
    // d/dx (x · sg(x)) is reported as x, the truth is 2x
    let wrong = |xs: &[Tensor]| xs[0].mul(&xs[0].stop_gradient());
    let x = Tensor::vector(&[0.5f64, -1.5, 2.0]);
    let err = check_gradients(wrong, std::slice::from_ref(&x), &CheckOptions::default()).unwrap_err();
    assert!(matches!(err, Error::GradientCheck(_)), "{err:?}");
    assert!(err.to_string().contains("order 1"), "{err}");
    // and the right one passes at the same point
    check_gradients(|xs: &[Tensor]| xs[0].mul(&xs[0]), &[x], &CheckOptions::default()).unwrap();
}

#[test]
fn a_wrong_second_derivative_is_rejected() {
    // value x³ and first derivative 3x², but the gradient is built from
    // stopped values, so its own derivative is 0 instead of 6x
    let f = |xs: &[Tensor]| {
        let s = xs[0].stop_gradient();
        s.square()?
            .mul_scalar(3.0)?
            .mul(&xs[0])?
            .sub(&s.pow_scalar(3.0)?.mul_scalar(2.0)?)
    };
    let x = Tensor::vector(&[0.5f64, -1.5, 2.0]);
    let first_only = CheckOptions {
        second_order: false,
        ..CheckOptions::default()
    };
    check_gradients(f, std::slice::from_ref(&x), &first_only).unwrap();
    let err = check_gradients(f, &[x], &CheckOptions::default()).unwrap_err();
    assert!(err.to_string().contains("order 2"), "{err}");
}

#[test]
fn a_slightly_wrong_gradient_is_rejected() {
    // off by 1e-4 relative: the tolerances are tight enough to notice
    // value x², gradient 2x·(1 + 1e-4)
    let f = |xs: &[Tensor]| {
        let s = xs[0].stop_gradient();
        let nudge = xs[0].mul(&s.mul_scalar(2.0)?)?.sub(&s.square()?.mul_scalar(2.0)?)?;
        xs[0].square()?.add(&nudge.mul_scalar(1e-4)?)
    };
    let x = Tensor::vector(&[1.0f64, 2.0]);
    assert!(check_gradients(f, &[x], &CheckOptions::default()).is_err());
}

// ---------------------------------------------------------------------------
// Kinks and ties, TensorFlow's conventions, exact numbers.

fn grads_of(f: impl Fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor]) -> Vec<Vec<f64>> {
    let tape = GradientTape::new();
    let y = tape
        .record(|| {
            tape.watch(xs);
            f(xs)
        })
        .unwrap();
    tape.gradient(&y, xs)
        .unwrap()
        .into_iter()
        .map(|g| g.unwrap().to_vec::<f64>().unwrap())
        .collect()
}

#[test]
fn relu_gradient_at_zero_is_zero() {
    let x = Tensor::vector(&[-1.0f64, 0.0, 2.0]);
    assert_eq!(grads_of(|x| x[0].relu(), &[x]), vec![vec![0.0, 0.0, 1.0]]);
    let x32 = Tensor::vector(&[0.0f32, 3.0]);
    let tape = GradientTape::new();
    let y = tape
        .record(|| {
            tape.watch(&x32);
            x32.relu()
        })
        .unwrap();
    assert_eq!(
        tape.gradient(&y, &x32).unwrap().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 1.0]
    );
}

#[test]
fn abs_gradient_at_zero_is_zero() {
    let x = Tensor::vector(&[-1.5f64, 0.0, 2.0]);
    assert_eq!(grads_of(|x| x[0].abs(), &[x]), vec![vec![-1.0, 0.0, 1.0]]);
}

#[test]
fn max_reduction_ties_split_the_gradient_evenly() {
    let x = Tensor::vector(&[1.0f64, 3.0, 3.0, 2.0]);
    assert_eq!(grads_of(|x| x[0].max_all(), &[x]), vec![vec![0.0, 0.5, 0.5, 0.0]]);

    let x = Tensor::from_vec(vec![1.0f64, 3.0, 3.0, 2.0, 2.0, 0.0], &[2, 3]).unwrap();
    let g = grads_of(
        |x| x[0].max(&[1], false)?.mul(&Tensor::vector(&[1.0f64, 10.0])),
        std::slice::from_ref(&x),
    );
    assert_eq!(g, vec![vec![0.0, 0.5, 0.5, 5.0, 5.0, 0.0]]);
    // over axis 0 no column ties: the maxima are 2, 3, 3
    let g = grads_of(|x| x[0].max(&[0], true), &[x]);
    assert_eq!(g, vec![vec![0.0, 1.0, 1.0, 1.0, 0.0, 0.0]]);

    let x = Tensor::vector(&[7.0f64, 7.0, 7.0]);
    let g = grads_of(|x| x[0].max_all(), &[x])[0].clone();
    for v in g {
        assert!((v - 1.0 / 3.0).abs() < 1e-15, "{v}");
    }
}

#[test]
fn min_reduction_ties_split_the_gradient_evenly() {
    let x = Tensor::from_vec(vec![1.0f64, 1.0, 3.0, 0.0, 4.0, 0.0], &[2, 3]).unwrap();
    let g = grads_of(|x| x[0].min(&[-1], true)?.mul_scalar(4.0), std::slice::from_ref(&x));
    assert_eq!(g, vec![vec![2.0, 2.0, 0.0, 2.0, 0.0, 2.0]]);
    let g = grads_of(|x| x[0].min_all(), &[x]);
    assert_eq!(g, vec![vec![0.0, 0.0, 0.0, 0.5, 0.0, 0.5]]);
}

#[test]
fn maximum_and_minimum_ties_go_to_the_first_argument() {
    let a = Tensor::vector(&[1.0f64, 2.0, 3.0]);
    let b = Tensor::vector(&[1.0f64, 0.0, 3.0]);
    assert_eq!(
        grads_of(|x| x[0].maximum(&x[1]), &[a.clone(), b.clone()]),
        vec![vec![1.0, 1.0, 1.0], vec![0.0, 0.0, 0.0]]
    );
    // swapped arguments: the ties now go to b, the other element to a
    assert_eq!(
        grads_of(|x| x[1].maximum(&x[0]), &[a.clone(), b.clone()]),
        vec![vec![0.0, 1.0, 0.0], vec![1.0, 0.0, 1.0]]
    );

    let b = Tensor::vector(&[1.0f64, 5.0, 0.0]);
    assert_eq!(
        grads_of(|x| x[0].minimum(&x[1]), &[a.clone(), b.clone()]),
        vec![vec![1.0, 1.0, 0.0], vec![0.0, 0.0, 1.0]]
    );
    assert_eq!(
        grads_of(|x| x[1].minimum(&x[0]), &[a, b]),
        vec![vec![0.0, 1.0, 0.0], vec![1.0, 0.0, 1.0]]
    );

    // broadcast: a scalar tied with two of three elements keeps their gradient
    let a = Tensor::scalar(2.0f64);
    let b = Tensor::vector(&[2.0f64, 1.0, 2.0]);
    assert_eq!(
        grads_of(|x| x[0].maximum(&x[1]), &[a, b]),
        vec![vec![3.0], vec![0.0, 0.0, 0.0]]
    );
}

#[test]
fn second_derivatives_at_kinks_are_zero() {
    // relu'' and abs'' are zero everywhere they are defined, including the TF value at 0
    for f in [|t: &Tensor| t.relu(), |t: &Tensor| t.abs()] {
        let x = Tensor::vector(&[-1.0f64, 0.0, 2.0]);
        let outer = GradientTape::new();
        let inner = GradientTape::new();
        let g = outer
            .record(|| {
                outer.watch(&x);
                let y = inner.record(|| {
                    inner.watch(&x);
                    f(&x)?.sum_all()
                })?;
                Ok(inner.gradient(&y, &x)?.unwrap())
            })
            .unwrap();
        let h = outer.gradient(g.sum_all().unwrap(), &x).unwrap();
        assert!(h.is_none_or(|h| h.to_vec::<f64>().unwrap() == vec![0.0; 3]));
    }
}
