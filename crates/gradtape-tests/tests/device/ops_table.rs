//! The ops checked on a GPU against the CPU: each case's value and, where
//! it is differentiable, its tape gradient (the rules run on the GPU too),
//! in `f32` and `f64`. Shared by `tests/device` (an emulated GPU: every case
//! must find its way to a GPU kernel) and `tests/gpu` (a real one: every
//! kernel must give the CPU's numbers).

use gradtape::{DType, Device, GradientTape, Padding, Result, Slice, Tensor};

/// Where a case's inputs come from.
#[derive(Clone, Copy)]
pub enum Domain {
    /// (-3, 3)
    Any,
    /// (0.1, 3)
    Positive,
    /// (-0.9, 0.9)
    Unit,
    /// (1.1, 4)
    AboveOne,
}

/// One op to check.
pub struct Case {
    pub name: &'static str,
    pub f: fn(&[Tensor]) -> Result<Tensor>,
    /// Input shapes (broadcasting ones included).
    pub shapes: &'static [&'static [usize]],
    pub domain: Domain,
    /// Whether to compare tape gradients too.
    pub grad: bool,
}

fn case(
    name: &'static str,
    f: fn(&[Tensor]) -> Result<Tensor>,
    shapes: &'static [&'static [usize]],
    domain: Domain,
    grad: bool,
) -> Case {
    Case {
        name,
        f,
        shapes,
        domain,
        grad,
    }
}

const U: &[&[usize]] = &[&[3, 5]];
const B: &[&[usize]] = &[&[3, 5], &[5]];

#[path = "ops_table_more.rs"]
mod more;

#[path = "ops_table_hosted.rs"]
pub mod hosted;

/// The cases (and those of `ops_table_more.rs`).
pub fn cases() -> Vec<Case> {
    let mut v = first_cases();
    v.extend(more::cases());
    v
}

fn first_cases() -> Vec<Case> {
    use Domain::*;
    vec![
        case("neg", |x| x[0].neg(), U, Any, true),
        case("abs", |x| x[0].abs(), U, Any, true),
        case("sign", |x| x[0].sign(), U, Any, false),
        case("square", |x| x[0].square(), U, Any, true),
        case("sqrt", |x| x[0].sqrt(), U, Positive, true),
        case("rsqrt", |x| x[0].rsqrt(), U, Positive, true),
        case("reciprocal", |x| x[0].reciprocal(), U, Positive, true),
        case("exp", |x| x[0].exp(), U, Any, true),
        case("expm1", |x| x[0].expm1(), U, Any, true),
        case("log", |x| x[0].log(), U, Positive, true),
        case("log1p", |x| x[0].log1p(), U, Positive, true),
        case("sin", |x| x[0].sin(), U, Any, true),
        case("cos", |x| x[0].cos(), U, Any, true),
        case("tan", |x| x[0].tan(), U, Unit, true),
        case("asin", |x| x[0].asin(), U, Unit, true),
        case("acos", |x| x[0].acos(), U, Unit, true),
        case("atan", |x| x[0].atan(), U, Any, true),
        case("sinh", |x| x[0].sinh(), U, Any, true),
        case("cosh", |x| x[0].cosh(), U, Any, true),
        case("tanh", |x| x[0].tanh(), U, Any, true),
        case("asinh", |x| x[0].asinh(), U, Any, true),
        case("acosh", |x| x[0].acosh(), U, AboveOne, true),
        case("atanh", |x| x[0].atanh(), U, Unit, true),
        case("erf", |x| x[0].erf(), U, Any, true),
        case("erfc", |x| x[0].erfc(), U, Any, true),
        case("floor", |x| x[0].floor(), U, Any, false),
        case("ceil", |x| x[0].ceil(), U, Any, false),
        case("round", |x| x[0].round(), U, Any, false),
        case("sigmoid", |x| x[0].sigmoid(), U, Any, true),
        case("relu", |x| x[0].relu(), U, Any, true),
        case("relu6", |x| x[0].mul_scalar(3.0)?.relu6(), U, Any, true),
        case("leaky_relu", |x| x[0].leaky_relu(0.2), U, Any, true),
        case("elu", |x| x[0].elu(), U, Any, true),
        case("selu", |x| x[0].selu(), U, Any, true),
        case("softplus", |x| x[0].softplus(), U, Any, true),
        case("softsign", |x| x[0].softsign(), U, Any, true),
        case("clip_by_value", |x| x[0].clip_by_value(-1.0, 0.5), U, Any, true),
        case("pow_scalar", |x| x[0].pow_scalar(2.5), U, Positive, true),
        case("mul_scalar", |x| x[0].mul_scalar(-1.75), U, Any, true),
        case("div_scalar", |x| x[0].div_scalar(3.0), U, Any, true),
        case("add_scalar", |x| x[0].add_scalar(0.5), U, Any, true),
        case("add", |x| x[0].add(&x[1]), B, Any, true),
        case("sub", |x| x[0].sub(&x[1]), B, Any, true),
        case("mul", |x| x[0].mul(&x[1]), B, Any, true),
        case("div", |x| x[0].div(&x[1]), B, Positive, true),
        case("pow", |x| x[0].pow(&x[1]), B, Positive, true),
        case("maximum", |x| x[0].maximum(&x[1]), B, Any, true),
        case("minimum", |x| x[0].minimum(&x[1]), B, Any, true),
        case("squared_difference", |x| x[0].squared_difference(&x[1]), B, Any, true),
        case("atan2", |x| x[0].atan2(&x[1]), B, Any, true),
        case("floor_div", |x| x[0].floor_div(&x[1]), B, Positive, false),
        case("floor_mod", |x| x[0].floor_mod(&x[1]), B, Positive, false),
        case("lt", |x| x[0].lt(&x[1])?.cast(x[0].dtype()), B, Any, false),
        case("ge", |x| x[0].ge(&x[1])?.cast(x[0].dtype()), B, Any, false),
        case("eq", |x| x[0].eq(&x[0])?.cast(x[0].dtype()), U, Any, false),
        case(
            "where",
            |x| Tensor::where_(&x[0].gt(&x[1])?, &x[0], &x[1].broadcast_to(&[3, 5])?),
            B,
            Any,
            true,
        ),
        case("sum_rows", |x| x[0].sum(&[1], false), U, Any, true),
        case("sum_cols_keep", |x| x[0].sum(&[0], true), U, Any, true),
        case("sum_all", |x| x[0].sum_all(), U, Any, true),
        case("mean", |x| x[0].mean(&[0], false), U, Any, true),
        // few long rows: the reduction's two-pass path on a GPU
        case("sum_long_rows", |x| x[0].sum(&[1], false), &[&[2, 8192]], Any, true),
        case("max_long_rows", |x| x[0].max(&[1], true), &[&[2, 8192]], Any, true),
        case("max", |x| x[0].max(&[1], false), U, Any, true),
        case("min", |x| x[0].min(&[0], true), U, Any, true),
        case("matmul", |x| x[0].matmul(&x[1]), &[&[3, 5], &[5, 4]], Any, true),
        case(
            "matmul_ta",
            |x| x[0].matmul_with(&x[1], true, false),
            &[&[5, 3], &[5, 4]],
            Any,
            true,
        ),
        case(
            "matmul_tb",
            |x| x[0].matmul_with(&x[1], false, true),
            &[&[3, 5], &[4, 5]],
            Any,
            true,
        ),
        case(
            "matmul_batch",
            |x| x[0].matmul(&x[1]),
            &[&[2, 3, 5], &[5, 4]],
            Any,
            true,
        ),
        case(
            "matmul_view",
            |x| x[0].transpose()?.matmul(&x[1]),
            &[&[5, 3], &[5, 4]],
            Any,
            true,
        ),
        case("softmax", |x| x[0].softmax(-1), U, Any, true),
        case("softmax_axis0", |x| x[0].softmax(0), U, Any, true),
        case("log_softmax", |x| x[0].log_softmax(-1), U, Any, true),
        case(
            "transpose_reshape",
            |x| x[0].transpose()?.reshape(&[15])?.mul(&x[0].reshape(&[15])?),
            U,
            Any,
            true,
        ),
        case("bias_add", |x| x[0].bias_add(&x[1]), B, Any, true),
        case(
            "cast",
            |x| {
                x[0].cast(if x[0].dtype() == DType::F32 {
                    DType::F64
                } else {
                    DType::F32
                })
            },
            U,
            Any,
            true,
        ),
        case(
            "sparse_xent",
            |x| {
                let labels = Tensor::vector(&[0i64, 4, 2]).to(x[0].device())?;
                Tensor::sparse_softmax_cross_entropy_with_logits(&labels, &x[0])
            },
            U,
            Any,
            true,
        ),
        case(
            "softmax_xent_dense",
            |x| Tensor::softmax_cross_entropy_with_logits(&x[1].softmax(-1)?, &x[0]),
            &[&[3, 5], &[3, 5]],
            Any,
            true,
        ),
        case(
            "conv2d_same",
            |x| x[0].conv2d(&x[1], [1, 1], Padding::Same, [1, 1]),
            &[&[2, 5, 5, 3], &[3, 3, 3, 4]],
            Unit,
            true,
        ),
        case(
            "conv2d_valid_s2",
            |x| x[0].conv2d(&x[1], [2, 2], Padding::Valid, [1, 1]),
            &[&[2, 7, 6, 2], &[3, 2, 2, 3]],
            Unit,
            true,
        ),
        case(
            "conv2d_same_s2",
            |x| x[0].conv2d(&x[1], [2, 2], Padding::Same, [1, 1]),
            &[&[1, 6, 7, 2], &[3, 3, 2, 3]],
            Unit,
            true,
        ),
        case(
            "conv2d_dilated",
            |x| x[0].conv2d(&x[1], [1, 2], Padding::Same, [2, 1]),
            &[&[1, 7, 6, 2], &[2, 3, 2, 2]],
            Unit,
            true,
        ),
        case(
            "conv2d_1x1",
            |x| x[0].conv2d(&x[1], [1, 1], Padding::Valid, [1, 1]),
            &[&[2, 3, 3, 4], &[1, 1, 4, 2]],
            Unit,
            true,
        ),
        case(
            "conv2d_view",
            |x| {
                x[0].transpose()?
                    .reshape(&[1, 4, 5, 3])?
                    .conv2d(&x[1], [1, 1], Padding::Same, [1, 1])
            },
            &[&[20, 3], &[3, 3, 3, 2]],
            Unit,
            true,
        ),
        case(
            "conv1d",
            |x| x[0].conv1d(&x[1], 2, Padding::Same, 1),
            &[&[2, 9, 3], &[3, 3, 2]],
            Unit,
            true,
        ),
        case(
            "conv2d_backprop_input",
            |x| Tensor::conv2d_backprop_input(&[2, 5, 5, 3], &x[1], &x[0], [2, 2], Padding::Same, [1, 1]),
            &[&[2, 3, 3, 4], &[3, 3, 3, 4]],
            Unit,
            true,
        ),
        case(
            "conv2d_backprop_filter",
            |x| Tensor::conv2d_backprop_filter(&x[0], &[3, 3, 3, 4], &x[1], [2, 2], Padding::Same, [1, 1]),
            &[&[2, 5, 5, 3], &[2, 3, 3, 4]],
            Unit,
            true,
        ),
        case(
            "max_pool2d",
            |x| x[0].max_pool2d([2, 2], [2, 2], Padding::Same),
            &[&[2, 5, 5, 3]],
            Any,
            true,
        ),
        case(
            "max_pool2d_overlap",
            |x| x[0].max_pool2d([3, 3], [2, 1], Padding::Valid),
            &[&[2, 6, 5, 2]],
            Any,
            true,
        ),
        case(
            "avg_pool2d_same",
            |x| x[0].avg_pool2d([3, 3], [2, 2], Padding::Same),
            &[&[2, 5, 6, 3]],
            Any,
            true,
        ),
        case(
            "avg_pool2d_valid",
            |x| x[0].avg_pool2d([2, 3], [1, 2], Padding::Valid),
            &[&[1, 5, 7, 2]],
            Any,
            true,
        ),
        case(
            "gather_rows",
            |x| x[0].gather(&Tensor::vector(&[4i64, 0, 2, 2]).to(x[0].device())?, 0),
            &[&[5, 3]],
            Any,
            true,
        ),
        case(
            "gather_axis1",
            |x| {
                let i = Tensor::from_vec(vec![1i32, 0, 4, 4, 2, 3], &[2, 3])?.to(x[0].device())?;
                x[0].gather(&i, 1)
            },
            &[&[2, 5, 3]],
            Any,
            true,
        ),
        case(
            "embedding_lookup",
            |x| {
                let ids = Tensor::from_vec(vec![3i64, 1, 3, 0, 6, 2], &[2, 3])?.to(x[0].device())?;
                x[0].embedding_lookup(&ids)
            },
            &[&[7, 4]],
            Any,
            true,
        ),
        case(
            "scatter_add",
            |x| x[0].scatter_add(&Tensor::vector(&[2i64, 0, 2, 5]).to(x[0].device())?, 1, 6),
            &[&[3, 4, 2]],
            Any,
            true,
        ),
        case(
            "unsorted_segment_sum",
            |x| {
                let ids = Tensor::vector(&[1i64, 0, -1, 1, 3]).to(x[0].device())?;
                x[0].unsorted_segment_sum(&ids, 4)
            },
            &[&[5, 3]],
            Any,
            true,
        ),
        case(
            "segment_sum",
            |x| x[0].segment_sum(&Tensor::vector(&[0i32, 0, 2, 2, 3]).to(x[0].device())?),
            &[&[5, 3]],
            Any,
            true,
        ),
        case(
            "concat_axis0",
            |x| Tensor::concat(&[&x[0], &x[1]], 0),
            &[&[3, 5], &[2, 5]],
            Any,
            true,
        ),
        case(
            "concat_axis1_views",
            |x| {
                Tensor::concat(
                    &[&x[0].transpose()?, &x[1], &x[0].transpose()?.slice(&[0, 1], &[5, 2])?],
                    1,
                )
            },
            &[&[3, 5], &[5, 2]],
            Any,
            true,
        ),
        case(
            "stack",
            |x| Tensor::stack(&[&x[0], &x[1]], 1),
            &[&[3, 5], &[3, 5]],
            Any,
            true,
        ),
        case(
            "slice_then_square",
            |x| x[0].slice(&[1, 1], &[2, 3])?.square(),
            U,
            Any,
            true,
        ),
        case("pad", |x| x[0].pad(&[(1, 0), (2, 3)]), U, Any, true),
        case(
            "strided_slice",
            |x| {
                x[0].strided_slice(&[Slice::new(None, None, 2), Slice::new(Some(4), Some(0), -2)])?
                    .square()
            },
            U,
            Any,
            true,
        ),
        case(
            "one_hot",
            |x| {
                let i = Tensor::from_vec(vec![0i64, 3, 7, -1, 2, 2], &[2, 3])?.to(x[0].device())?;
                i.one_hot(5, 1.0, -0.5, 1, x[0].dtype())?.mul(&x[0])
            },
            &[&[2, 5, 3]],
            Any,
            true,
        ),
        case(
            "layer_normalization",
            |x| x[0].layer_normalization(&[-1], Some(&x[1]), Some(&x[2]), 1e-5),
            &[&[3, 5], &[5], &[5]],
            Any,
            true,
        ),
        case(
            "attention",
            |x| x[0].scaled_dot_product_attention(&x[1], &x[2], None, false, None),
            &[&[2, 3, 4], &[2, 5, 4], &[2, 5, 3]],
            Any,
            true,
        ),
        case(
            // row 0 sees key 0 only (causal), which the mask hides: zeros
            "attention_causal_bool_mask",
            |x| {
                let m: Vec<bool> = (0..16).map(|i| (i / 4 + 2 * (i % 4)) % 3 != 0).collect();
                let m = Tensor::from_vec(m, &[4, 4])?.to(x[0].device())?;
                x[0].scaled_dot_product_attention(&x[1], &x[2], Some(&m), true, Some(0.3))
            },
            &[&[1, 2, 4, 3], &[1, 2, 4, 3], &[1, 2, 4, 2]],
            Any,
            true,
        ),
        case(
            "attention_additive_mask",
            |x| {
                let m: Vec<f64> = (0..15).map(|i| -0.5 * (i % 4) as f64).collect();
                let m = Tensor::from_vec(m, &[3, 5])?.cast(x[0].dtype())?.to(x[0].device())?;
                x[0].scaled_dot_product_attention(&x[1], &x[2], Some(&m), false, None)
            },
            &[&[2, 3, 4], &[2, 5, 4], &[2, 5, 3]],
            Any,
            true,
        ),
        case(
            // an additive mask over the heads ([batch, 1, tq, tk]) with -inf
            // entries; batch 0's query row 2 sees no key: zeros
            "attention_mask_over_heads",
            |x| {
                let m: Vec<f64> = (0..48)
                    .map(|i| {
                        if i % 7 == 3 || (12..18).contains(&i) {
                            f64::NEG_INFINITY
                        } else {
                            0.25 * (i % 5) as f64 - 0.5
                        }
                    })
                    .collect();
                let m = Tensor::from_vec(m, &[2, 1, 4, 6])?
                    .cast(x[0].dtype())?
                    .to(x[0].device())?;
                x[0].scaled_dot_product_attention(&x[1], &x[2], Some(&m), false, None)
            },
            &[&[2, 3, 4, 5], &[2, 3, 6, 5], &[2, 3, 6, 4]],
            Any,
            true,
        ),
        case(
            // more queries than keys: rows from tk on see every key
            "attention_causal_tq_gt_tk",
            |x| x[0].scaled_dot_product_attention(&x[1], &x[2], None, true, Some(0.4)),
            &[&[2, 7, 3], &[2, 4, 3], &[2, 4, 2]],
            Any,
            true,
        ),
        case(
            // dropout: the device's decisions are the CPU's (one seed)
            "attention_dropout_causal",
            |x| {
                let drop = gradtape::AttentionDropout { rate: 0.3, seed: 5 };
                x[0].scaled_dot_product_attention_dropout(&x[1], &x[2], None, true, Some(0.35), drop)
            },
            &[&[2, 2, 5, 4], &[2, 2, 7, 4], &[2, 2, 7, 3]],
            Any,
            true,
        ),
        case(
            // dropout with a bool key-padding mask and more keys than a warp
            "attention_dropout_bool_mask",
            |x| {
                let m: Vec<bool> = (0..2 * 40).map(|i| i % 40 < 40 - 5 * (i / 40 + 1)).collect();
                let m = Tensor::from_vec(m, &[2, 1, 1, 40])?.to(x[0].device())?;
                let drop = gradtape::AttentionDropout { rate: 0.2, seed: 17 };
                x[0].scaled_dot_product_attention_dropout(&x[1], &x[2], Some(&m), false, Some(0.05), drop)
            },
            &[&[2, 2, 3, 33], &[2, 2, 40, 33], &[2, 2, 40, 35]],
            Any,
            true,
        ),
    ]
}

/// Deterministic inputs of `shape` in `domain`, of `dtype`, on `device`.
pub fn input(shape: &[usize], domain: Domain, seed: usize, dtype: DType, device: Device) -> Tensor {
    let n: usize = shape.iter().product();
    let (lo, hi) = match domain {
        Domain::Any => (-3.0, 3.0),
        Domain::Positive => (0.1, 3.0),
        Domain::Unit => (-0.9, 0.9),
        Domain::AboveOne => (1.1, 4.0),
    };
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let u = (((i + 1) * 7919 + seed * 104_729) % 1009) as f64 / 1009.0;
            lo + (hi - lo) * u
        })
        .collect();
    Tensor::from_vec(v, shape)
        .unwrap()
        .cast(dtype)
        .unwrap()
        .to(device)
        .unwrap()
}

/// What one case gave on the device.
pub enum Outcome {
    /// Value and gradient agree with the CPU within the tolerance.
    Agrees,
    /// The device's numbers differ: the worst relative difference.
    Differs(String),
    /// The op failed on the device (no kernel, say).
    Failed(String),
}

fn worst(a: &Tensor, b: &Tensor) -> Result<f64> {
    if a.shape() != b.shape() {
        return Ok(f64::INFINITY);
    }
    let (x, y) = (a.try_to_vec_f64()?, b.try_to_vec_f64()?);
    Ok(x.iter()
        .zip(&y)
        .map(|(p, q)| {
            if p.is_nan() && q.is_nan() {
                0.0
            } else {
                (p - q).abs() / (1.0 + q.abs())
            }
        })
        .fold(0.0, f64::max))
}

/// The value and (where asked) the gradient of `c` on `inputs`.
fn eval(c: &Case, inputs: &[Tensor]) -> Result<(Tensor, Vec<Tensor>)> {
    if !c.grad {
        return Ok(((c.f)(inputs)?, vec![]));
    }
    let tape = GradientTape::new();
    let y = tape.record(|| {
        for x in inputs {
            tape.watch(x);
        }
        (c.f)(inputs)
    })?;
    // a non-trivial cotangent: sum(y * w)
    let w = input(y.shape(), Domain::Any, 99, y.dtype(), y.device());
    let target = tape.record(|| y.mul(&w)?.sum_all())?;
    let g = tape.gradient(&target, inputs)?;
    Ok((y, g.into_iter().map(|g| g.expect("connected")).collect()))
}

/// Runs `c` on the CPU and on `device` in `dtype`.
pub fn check(c: &Case, dtype: DType, device: Device) -> Outcome {
    // (the half types: the host rounds each step of a function to the
    // type, a GPU computes it in f32 and rounds once; a few ulps apart)
    let tol = match dtype {
        DType::F32 => 2e-5,
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        _ => 1e-12,
    };
    let cpu: Vec<Tensor> = c
        .shapes
        .iter()
        .enumerate()
        .map(|(i, s)| input(s, c.domain, i, dtype, Device::Cpu))
        .collect();
    let dev: Vec<Tensor> = c
        .shapes
        .iter()
        .enumerate()
        .map(|(i, s)| input(s, c.domain, i, dtype, device))
        .collect();
    let (want_y, want_g) = match eval(c, &cpu) {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(format!("on the CPU: {e}")),
    };
    let (y, g) = match eval(c, &dev) {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    if y.device() != device || g.iter().any(|g| g.device() != device) {
        return Outcome::Differs(format!(
            "a result left the device ({} / {:?})",
            y.device(),
            g.iter().map(|g| g.device()).collect::<Vec<_>>()
        ));
    }
    let mut bad = vec![];
    match worst(&y, &want_y) {
        Ok(w) if w <= tol => {}
        Ok(w) => bad.push(format!("value off by {w:.2e}")),
        Err(e) => return Outcome::Failed(e.to_string()),
    }
    for (i, (a, b)) in g.iter().zip(&want_g).enumerate() {
        match worst(a, b) {
            Ok(w) if w <= tol * 10.0 => {}
            Ok(w) => bad.push(format!("gradient {i} off by {w:.2e}")),
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    }
    if bad.is_empty() {
        Outcome::Agrees
    } else {
        Outcome::Differs(bad.join(", "))
    }
}

/// Runs every case in `f32` and `f64` on `device`; prints one line per
/// case and returns the lines of those that did not agree.
pub fn run_all(device: Device) -> Vec<String> {
    run_cases(device, &[DType::F32, DType::F64], |_| true)
}

/// Runs the cases of ops with no GPU kernel (`ops_table_hosted.rs`) in
/// `f32` and `f64` on `device`, under soft device placement (the default);
/// the lines of those that did not agree.
pub fn run_hosted(device: Device) -> Vec<String> {
    run_list(hosted::cases(), device, &[DType::F32, DType::F64], |_| true)
}

/// Runs every case in each of `dtypes` on `device`, printing a line per
/// case; the lines of the cases that `must` agree and did not.
fn run_cases(device: Device, dtypes: &[DType], must: impl Fn(&str) -> bool) -> Vec<String> {
    run_list(cases(), device, dtypes, must)
}

/// [`run_cases`] over `list`.
fn run_list(list: Vec<Case>, device: Device, dtypes: &[DType], must: impl Fn(&str) -> bool) -> Vec<String> {
    let mut failures = vec![];
    for c in list {
        for &dtype in dtypes {
            let line = match check(&c, dtype, device) {
                Outcome::Agrees => {
                    println!("ok      {:<20} {dtype}", c.name);
                    continue;
                }
                Outcome::Differs(m) => format!("DIFFERS {:<20} {dtype}: {m}", c.name),
                Outcome::Failed(m) => format!("FAILED  {:<20} {dtype}: {m}", c.name),
            };
            if must(c.name) {
                println!("{line}");
                failures.push(line);
            } else {
                println!("(no half kernel) {line}");
            }
        }
    }
    failures
}

/// The cases a GPU does not run in `f16` and `bf16` yet (an error naming
/// the op): none now. Every case runs there in halves: elementwise
/// functions, softmax and cross-entropy computed in f32 and rounded once,
/// reductions accumulating in f32, products on the tensor cores, index
/// ops, casts, and the convolutions and pools (f32 sums rounded once, as
/// the CPU's).
pub const NO_HALF_KERNEL: &[&str] = &[];

/// Runs every case but [`NO_HALF_KERNEL`]'s in `f16` and `bf16` on
/// `device` (the lines of those that did not agree), and prints what those
/// give in halves.
pub fn run_halves(device: Device) -> Vec<String> {
    run_cases(device, &[DType::F16, DType::BF16], |name| {
        !NO_HALF_KERNEL.contains(&name)
    })
}

/// Mixed precision on `device`: a two-layer network with `f32` weights
/// computed in `f16` (casts, half products, ReLU, bias), its loss times
/// `1e-6` (small enough that unscaled `f16` gradients would underflow),
/// trained by a [`LossScaleOptimizer`](gradtape::optim::LossScaleOptimizer)
/// over SGD; the losses (divided by `1e-6`).
pub fn mixed_precision_losses(device: Device, steps: usize) -> Result<Vec<f64>> {
    use gradtape::optim::{LossScaleOptimizer, Optimizer, Sgd};
    use gradtape::Variable;
    const TINY: f64 = 1e-6;
    let x = input(&[16, 8], Domain::Unit, 1, DType::F16, device);
    let y = input(&[16, 2], Domain::Unit, 2, DType::F32, device);
    let w1 = Variable::new(input(&[8, 16], Domain::Unit, 3, DType::F32, device).mul_scalar(0.5)?);
    let b1 = Variable::new(Tensor::zeros(&[16], DType::F32).to(device)?);
    let w2 = Variable::new(input(&[16, 2], Domain::Unit, 4, DType::F32, device).mul_scalar(0.5)?);
    let vars = [w1.clone(), b1.clone(), w2.clone()];
    let mut opt = LossScaleOptimizer::new(Sgd::new(0.5 / TINY));
    let mut losses = vec![];
    for _ in 0..steps {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            let h = x
                .matmul(&w1.read().cast(DType::F16)?)?
                .add(&b1.read().cast(DType::F16)?)?
                .relu()?;
            let pred = h.matmul(&w2.read().cast(DType::F16)?)?.cast(DType::F32)?;
            pred.sub(&y)?.square()?.mean_all()?.mul_scalar(TINY)
        })?;
        losses.push(loss.to_scalar::<f32>()? as f64 / TINY);
        opt.minimize(&tape, &loss, &vars)?;
    }
    Ok(losses)
}

/// A causal pre-LayerNorm transformer block (attention with dropout, GELU
/// MLP) on `device` beside the CPU: its output and its variables' tape
/// gradients, in `f32`; the worst relative difference.
pub fn transformer_block_difference(device: Device) -> Result<f64> {
    use gradtape::nn::{Layer, Module, TransformerBlock};
    use gradtape::Rng;
    let run = |dev: Device| -> Result<Vec<Tensor>> {
        let block = TransformerBlock::builder(16, 4, 32)
            .causal(true)
            .dropout(0.1)
            .build(&mut Rng::new(3))?;
        let vars = block.trainable_variables();
        for v in &vars {
            v.move_to(dev)?;
        }
        let x = input(&[2, 6, 16], Domain::Unit, 1, DType::F32, dev);
        let tape = GradientTape::new();
        let y = tape.record(|| block.forward(&x, true))?;
        let w = input(y.shape(), Domain::Any, 2, DType::F32, dev);
        let loss = tape.record(|| y.mul(&w)?.sum_all())?;
        let mut out = vec![y];
        for g in tape.gradient(&loss, &vars[..])? {
            out.push(g.ok_or_else(|| gradtape::Error::InvalidArgument {
                op: "transformer_block",
                msg: "a variable got no gradient".into(),
            })?);
        }
        Ok(out)
    };
    let (cpu, dev) = (run(Device::Cpu)?, run(device)?);
    let mut w = 0.0f64;
    for (a, b) in dev.iter().zip(&cpu) {
        if a.device() != device {
            return Ok(f64::INFINITY);
        }
        w = w.max(worst(a, b)?);
    }
    Ok(w)
}
