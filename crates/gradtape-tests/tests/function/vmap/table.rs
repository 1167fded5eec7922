//! The table of `vmap`'s cases: the inputs (shapes and kinds of values),
//! a deterministic maker of their values, and one closure per op or
//! composition, each compared with the loop over its examples by
//! `vmap_matches_the_loop_over_a_table_of_ops`.

use gradtape::{DType, Error, GradientTape, Padding, Result, Slice, Tensor};

/// What an input holds.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// any value in [-2, 2)
    Any,
    /// in [0.1, 2.1)
    Pos,
    /// in (-0.9, 0.9)
    Unit,
    /// in [1.1, 3.1)
    Gt1,
    /// booleans
    Bool,
    /// i64 indices in [0, n)
    Idx(u64),
    /// a symmetric positive definite matrix (shape [n, n])
    Spd,
}

#[derive(Clone)]
pub(super) struct Input {
    pub(super) shape: Vec<usize>,
    pub(super) kind: Kind,
}

pub(super) fn inp(shape: &[usize], kind: Kind) -> Input {
    Input {
        shape: shape.to_vec(),
        kind,
    }
}

/// A deterministic stream of numbers in [0, 1).
pub(super) struct Lcg(u64);

impl Lcg {
    pub(super) fn new(seed: u64) -> Self {
        Lcg(seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1)
    }
    pub(super) fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One example's value of an input.
pub(super) fn make(input: &Input, seed: u64) -> Tensor {
    let mut r = Lcg::new(seed);
    let n: usize = input.shape.iter().product();
    let s = &input.shape[..];
    let floats = |f: &mut dyn FnMut(f64) -> f64, r: &mut Lcg| -> Tensor {
        Tensor::from_vec((0..n).map(|_| f(r.next())).collect::<Vec<f64>>(), s).unwrap()
    };
    match input.kind {
        Kind::Any => floats(&mut |u| 4.0 * u - 2.0, &mut r),
        Kind::Pos => floats(&mut |u| u * 2.0 + 0.1, &mut r),
        Kind::Unit => floats(&mut |u| 1.8 * u - 0.9, &mut r),
        Kind::Gt1 => floats(&mut |u| u * 2.0 + 1.1, &mut r),
        Kind::Bool => Tensor::from_vec((0..n).map(|_| r.next() < 0.5).collect::<Vec<bool>>(), s).unwrap(),
        Kind::Idx(m) => {
            Tensor::from_vec((0..n).map(|_| (r.next() * m as f64) as i64).collect::<Vec<i64>>(), s).unwrap()
        }
        Kind::Spd => {
            let k = s[0];
            let a = floats(&mut |u| 2.0 * u - 1.0, &mut r);
            let eye = Tensor::eye(k, DType::F64).mul_scalar(k as f64).unwrap();
            a.matmul_with(&a, false, true).unwrap().add(&eye).unwrap()
        }
    }
}

pub(super) type F = fn(&[Tensor]) -> Result<Vec<Tensor>>;

pub(super) struct Case {
    pub(super) name: &'static str,
    pub(super) inputs: Vec<Input>,
    pub(super) f: F,
    /// bit-equal to the loop (else within 1e-12, relative)
    pub(super) exact: bool,
}

macro_rules! case {
    ($name:literal, [$($i:expr),+], $exact:expr, |$a:ident| $body:expr) => {
        Case {
            name: $name,
            inputs: vec![$($i),+],
            f: {
                fn f($a: &[Tensor]) -> Result<Vec<Tensor>> {
                    Ok(vec![$body?])
                }
                f
            },
            exact: $exact,
        }
    };
}

use Kind::*;

pub(super) fn cases() -> Vec<Case> {
    let m = || inp(&[3, 4], Any);
    vec![
        // unary elementwise, every float variant
        case!("neg", [m()], true, |a| a[0].neg()),
        case!("abs", [m()], true, |a| a[0].abs()),
        case!("sign", [m()], true, |a| a[0].sign()),
        case!("square", [m()], true, |a| a[0].square()),
        case!("sqrt", [inp(&[3, 4], Pos)], true, |a| a[0].sqrt()),
        case!("rsqrt", [inp(&[5], Pos)], true, |a| a[0].rsqrt()),
        case!("reciprocal", [m()], true, |a| a[0].reciprocal()),
        case!("exp", [m()], true, |a| a[0].exp()),
        case!("expm1", [m()], true, |a| a[0].expm1()),
        case!("log", [inp(&[2, 3, 2], Pos)], true, |a| a[0].log()),
        case!("log1p", [inp(&[4], Pos)], true, |a| a[0].log1p()),
        case!("sin", [m()], true, |a| a[0].sin()),
        case!("cos", [m()], true, |a| a[0].cos()),
        case!("tan", [inp(&[3, 4], Unit)], true, |a| a[0].tan()),
        case!("asin", [inp(&[3, 4], Unit)], true, |a| a[0].asin()),
        case!("acos", [inp(&[3, 4], Unit)], true, |a| a[0].acos()),
        case!("atan", [m()], true, |a| a[0].atan()),
        case!("sinh", [m()], true, |a| a[0].sinh()),
        case!("cosh", [m()], true, |a| a[0].cosh()),
        case!("tanh", [m()], true, |a| a[0].tanh()),
        case!("asinh", [m()], true, |a| a[0].asinh()),
        case!("acosh", [inp(&[3, 4], Gt1)], true, |a| a[0].acosh()),
        case!("atanh", [inp(&[3, 4], Unit)], true, |a| a[0].atanh()),
        case!("erf", [m()], true, |a| a[0].erf()),
        case!("erfc", [m()], true, |a| a[0].erfc()),
        case!("floor", [m()], true, |a| a[0].floor()),
        case!("ceil", [m()], true, |a| a[0].ceil()),
        case!("round", [m()], true, |a| a[0].round()),
        case!("sigmoid", [m()], true, |a| a[0].sigmoid()),
        case!("relu", [m()], true, |a| a[0].relu()),
        case!("relu6", [inp(&[3, 4], Any)], true, |a| a[0].mul_scalar(4.0)?.relu6()),
        case!("leaky_relu", [m()], true, |a| a[0].leaky_relu(0.2)),
        case!("elu", [m()], true, |a| a[0].elu()),
        case!("selu", [m()], true, |a| a[0].selu()),
        case!("softplus", [m()], true, |a| a[0].softplus()),
        case!("softsign", [m()], true, |a| a[0].softsign()),
        case!("clip_by_value", [m()], true, |a| a[0].clip_by_value(-0.5, 1.0)),
        case!("pow_scalar", [inp(&[3, 4], Pos)], true, |a| a[0].pow_scalar(1.7)),
        case!("scalar arithmetic", [m()], true, |a| a[0]
            .mul_scalar(3.0)?
            .div_scalar(7.0)?
            .add_scalar(0.25)),
        case!("logical_not", [inp(&[3, 4], Bool)], true, |a| a[0].logical_not()),
        case!("scalar example", [inp(&[], Any)], true, |a| a[0].exp()?.mul(&a[0])),
        // binary elementwise, same shapes and broadcasting either way
        case!("add", [m(), m()], true, |a| a[0].add(&a[1])),
        case!("sub broadcast", [m(), inp(&[4], Any)], true, |a| a[0].sub(&a[1])),
        case!("mul broadcast", [inp(&[4], Any), m()], true, |a| a[0].mul(&a[1])),
        case!("div", [m(), inp(&[3, 1], Pos)], true, |a| a[0].div(&a[1])),
        case!("pow", [inp(&[3, 4], Pos), inp(&[4], Any)], true, |a| a[0].pow(&a[1])),
        case!("maximum", [m(), m()], true, |a| a[0].maximum(&a[1])),
        case!("minimum", [inp(&[2, 1, 3], Any), inp(&[4, 3], Any)], true, |a| a[0]
            .minimum(&a[1])),
        case!("squared_difference", [m(), m()], true, |a| a[0]
            .squared_difference(&a[1])),
        case!("atan2", [m(), m()], true, |a| a[0].atan2(&a[1])),
        case!("floor_div", [m(), inp(&[3, 4], Pos)], true, |a| a[0].floor_div(&a[1])),
        case!("floor_mod", [m(), inp(&[4], Pos)], true, |a| a[0].floor_mod(&a[1])),
        case!("scalar and matrix", [inp(&[], Any), m()], true, |a| a[0]
            .mul(&a[1])?
            .add(&a[0])),
        // comparisons, logic, select, cast
        case!("eq", [inp(&[3, 4], Idx(3)), inp(&[4], Idx(3))], true, |a| a[0]
            .eq(&a[1])),
        case!("ne", [inp(&[3, 4], Idx(3)), inp(&[3, 4], Idx(3))], true, |a| a[0]
            .ne(&a[1])),
        case!("lt", [m(), m()], true, |a| a[0].lt(&a[1])),
        case!("le", [m(), inp(&[4], Any)], true, |a| a[0].le(&a[1])),
        case!("gt", [m(), m()], true, |a| a[0].gt(&a[1])),
        case!("ge", [inp(&[4], Any), m()], true, |a| a[0].ge(&a[1])),
        case!("logical ops", [inp(&[3, 4], Bool), inp(&[4], Bool)], true, |a| a[0]
            .logical_and(&a[1])?
            .logical_or(&a[0].logical_xor(&a[1])?)),
        case!("where", [m(), m(), inp(&[4], Any)], true, |a| Tensor::where_(
            &a[0].gt(&a[1])?,
            &a[2],
            &a[1]
        )),
        case!("cast", [m()], true, |a| a[0].cast(DType::F32)?.cast(DType::F64)),
        case!("cast to int", [inp(&[3, 4], Idx(9))], true, |a| a[0].cast(DType::F64)),
        // reductions and scans
        case!("sum axis", [m()], false, |a| a[0].sum(&[1], false)),
        case!("sum negative axis keepdims", [inp(&[2, 3, 4], Any)], false, |a| a[0]
            .sum(&[-1, 0], true)),
        case!("sum all", [m()], false, |a| a[0].sum(&[0, 1], false)),
        case!("mean", [inp(&[2, 3, 4], Any)], false, |a| a[0].mean(&[1], false)),
        case!("max", [m()], true, |a| a[0].max(&[0], false)),
        case!("min keepdims", [m()], true, |a| a[0].min(&[-1], true)),
        case!("prod", [m()], false, |a| a[0].prod(&[1], false)),
        case!("norm", [m()], false, |a| a[0].norm(&[0, 1], false)),
        case!("all any", [inp(&[3, 4], Bool)], true, |a| a[0]
            .all(&[1], false)?
            .logical_xor(&a[0].any(&[0], true)?.reshape(&[4])?.narrow(0, 0, 3)?)),
        case!("argmax", [m()], true, |a| a[0].argmax(1)),
        case!("argmin", [m()], true, |a| a[0].argmin(-2)),
        case!("cumsum", [m()], false, |a| a[0].cumsum(1, false, false)),
        case!("cumprod exclusive reverse", [m()], false, |a| a[0]
            .cumprod(-2, true, true)),
        // shape ops
        case!("reshape", [inp(&[2, 3, 2], Any)], true, |a| a[0].reshape(&[3, 4])),
        case!("permute", [inp(&[2, 3, 4], Any)], true, |a| a[0]
            .permute(&[2, 0, 1])?
            .contiguous()),
        case!("transpose", [m()], true, |a| a[0].transpose()),
        case!("expand and squeeze", [m()], true, |a| a[0]
            .expand_dims(1)?
            .expand_dims(-1)?
            .squeeze(&[1])),
        case!("slice", [inp(&[4, 5], Any)], true, |a| a[0].slice(&[1, 2], &[2, 3])),
        case!("narrow", [inp(&[4, 5], Any)], true, |a| a[0].narrow(1, 1, 3)),
        case!("strided slice", [inp(&[5, 6], Any)], true, |a| a[0].strided_slice(&[
            Slice::new(Some(1), None, 2),
            Slice::new(None, None, -2)
        ])),
        case!("pad", [m()], true, |a| a[0].pad(&[(1, 0), (2, 1)])),
        case!("reverse", [m()], true, |a| a[0].reverse(&[-1])),
        case!("concat", [m(), inp(&[3, 2], Any)], true, |a| Tensor::concat(
            &[&a[0], &a[1]],
            -1
        )),
        case!("stack", [m(), m()], true, |a| Tensor::stack(&[&a[0], &a[1]], 1)),
        case!("split", [inp(&[4, 3], Any)], true, |a| a[0].split(2, 0)?[1]
            .mul_scalar(2.0)),
        case!("broadcast_to", [inp(&[3, 1], Any)], true, |a| a[0]
            .broadcast_to(&[2, 3, 4])),
        case!("gather", [inp(&[5, 3], Any), inp(&[4], Idx(5))], true, |a| a[0]
            .gather(&a[1], 0)),
        case!("gather axis 1", [inp(&[2, 5], Any), inp(&[2, 2], Idx(5))], true, |a| a
            [0]
        .gather(&a[1], 1)),
        case!("dynamic_slice", [inp(&[5, 4], Any), inp(&[2], Idx(2))], true, |a| a[0]
            .dynamic_slice(&a[1], &[3, 2])),
        case!(
            "dynamic_update_slice",
            [inp(&[5, 4], Any), inp(&[3, 2], Any), inp(&[2], Idx(3))],
            true,
            |a| a[0].dynamic_update_slice(&a[1], &a[2])
        ),
        case!(
            "take_along_axis",
            [inp(&[3, 5], Any), inp(&[3, 2], Idx(5))],
            true,
            |a| a[0].take_along_axis(&a[1], 1)
        ),
        case!("one_hot", [inp(&[3], Idx(4))], true, |a| a[0].one_hot(
            4,
            1.0,
            0.0,
            -1,
            DType::F64
        )),
        case!("one_hot axis 0", [inp(&[3], Idx(4))], true, |a| a[0].one_hot(
            4,
            2.0,
            -1.0,
            0,
            DType::F64
        )),
        // products
        case!("matmul", [inp(&[3, 4], Any), inp(&[4, 2], Any)], false, |a| a[0]
            .matmul(&a[1])),
        case!(
            "matmul transposed",
            [inp(&[4, 3], Any), inp(&[2, 4], Any)],
            false,
            |a| a[0].matmul_with(&a[1], true, true)
        ),
        case!(
            "batched matmul",
            [inp(&[2, 3, 4], Any), inp(&[4, 2], Any)],
            false,
            |a| a[0].matmul(&a[1])
        ),
        case!(
            "matmul by batched",
            [inp(&[3, 4], Any), inp(&[2, 4, 2], Any)],
            false,
            |a| a[0].matmul(&a[1])
        ),
        case!(
            "matmul transposed, batch dims either side",
            [inp(&[2, 4, 3], Any), inp(&[2, 4], Any), inp(&[2, 5, 4], Any)],
            false,
            |a| a[0]
                .matmul_with(&a[1], true, true)?
                .add(&a[1].matmul_with(&a[2], false, true)?.sum(&[0], false)?.sum_all()?)
        ),
        case!(
            "einsum",
            [inp(&[3, 4], Any), inp(&[4], Any)],
            false,
            |a| Tensor::einsum("ij,j->i", &[&a[0], &a[1]])
        ),
        // neural-network ops
        case!("softmax", [m()], false, |a| a[0].softmax(-1)),
        case!("log_softmax", [m()], false, |a| a[0].log_softmax(0)),
        case!("layer_normalization", [m(), inp(&[4], Any)], false, |a| a[0]
            .layer_normalization(&[-1], Some(&a[1]), None, 1e-5)),
        // the fused LSTM step (its halves packed along axis 0) and its
        // backward op, through a tape in the closure
        case!("lstm_cell", [inp(&[2, 8], Any), inp(&[2, 2], Any)], true, |a| {
            let (h, c1) = Tensor::lstm_cell(&a[0], &a[1])?;
            Tensor::concat(&[&h, &c1], -1)
        }),
        case!(
            "lstm_cell gradient",
            [inp(&[3, 4], Any), inp(&[3, 1], Any)],
            true,
            |a| {
                let tape = GradientTape::new();
                let y = tape.record(|| {
                    tape.watch(&a[0]);
                    tape.watch(&a[1]);
                    let (h, c1) = Tensor::lstm_cell(&a[0], &a[1])?;
                    h.mul(&c1)?.sum_all()
                })?;
                let [gz, gc] = tape.gradient(&y, &[&a[0], &a[1]])?;
                Tensor::concat(&[&gz.unwrap(), &gc.unwrap()], -1)
            }
        ),
        case!("bias_add", [m(), inp(&[4], Any)], true, |a| a[0].bias_add(&a[1])),
        case!("sparse cross-entropy", [inp(&[3], Idx(4)), m()], false, |a| {
            Tensor::sparse_softmax_cross_entropy_with_logits(&a[0], &a[1])
        }),
        case!("sigmoid cross-entropy", [inp(&[3, 4], Unit), m()], false, |a| {
            Tensor::sigmoid_cross_entropy_with_logits(&a[0].abs()?, &a[1])
        }),
        case!(
            "conv2d",
            [inp(&[2, 5, 5, 2], Any), inp(&[3, 3, 2, 3], Any)],
            false,
            |a| a[0].conv2d(&a[1], [1, 1], Padding::Same, [1, 1])
        ),
        case!("max_pool2d", [inp(&[1, 4, 4, 2], Any)], true, |a| a[0].max_pool2d(
            [2, 2],
            [2, 2],
            Padding::Valid
        )),
        case!("avg_pool2d", [inp(&[2, 4, 4, 1], Any)], false, |a| a[0].avg_pool2d(
            [2, 2],
            [1, 1],
            Padding::Same
        )),
        // linear algebra
        case!("det", [inp(&[3, 3], Any)], false, |a| a[0].det()),
        case!("inverse", [inp(&[3, 3], Spd)], false, |a| a[0].inverse()),
        case!("cholesky", [inp(&[3, 3], Spd)], false, |a| a[0].cholesky()),
        case!("solve", [inp(&[3, 3], Spd), inp(&[3, 2], Any)], false, |a| a[0]
            .solve_with(&a[1], false)),
        case!("eigh values", [inp(&[3, 3], Spd)], false, |a| Ok::<_, Error>(
            a[0].eigh()?.0
        )),
        case!("qr", [inp(&[4, 3], Any)], false, |a| {
            let (q, r) = a[0].qr()?;
            q.abs()?.add(&r.abs()?.sum(&[0], false)?)
        }),
        case!("matrix_exp", [inp(&[3, 3], Unit)], false, |a| a[0].matrix_exp()),
        case!("complex fft", [m(), m()], false, |a| Tensor::complex(&a[0], &a[1])?
            .fft()?
            .abs()),
        case!("argsort", [m()], true, |a| a[0].argsort(-1, true)),
        case!("resize_bilinear", [inp(&[1, 3, 3, 2], Any)], false, |a| a[0]
            .resize_bilinear([5, 4], false, true)),
        case!("resize_nearest", [inp(&[2, 2, 3, 1], Any)], true, |a| a[0]
            .resize_nearest_neighbor([4, 5], false, false)),
        // compositions
        case!(
            "mlp layer",
            [inp(&[2, 4], Any), inp(&[4, 3], Any), inp(&[3], Any)],
            false,
            |a| a[0].matmul(&a[1])?.add(&a[2])?.tanh()?.sum(&[-1], false)
        ),
        case!("constants inside", [m()], true, |a| a[0]
            .mul(&Tensor::vector(&[1.0f64, 2.0, 3.0, 4.0]))?
            .add(&Tensor::ones(&[3, 4], DType::F64))),
    ]
}
