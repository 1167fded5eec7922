//! The math ops that the gradient tables do not cover (comparisons, logical
//! ops, `sign`, casts, `argmax`/`argmin`, `all`/`any`, integer arithmetic,
//! rounding, the complex parts, the scalar ops) traced into a graph: each is
//! traced on one set of inputs, then called on another, and must give what
//! it gives eagerly there, bit for bit. An op without a descriptor fails the
//! trace ("cannot be traced into a graph yet"); one that bypasses tracing
//! fails it too (its value would be frozen); an op whose descriptor loses an
//! attribute gives another value. Each case also checks that the graph has
//! a node of the op's name. The expected values are the eager op's own (the
//! eager ops are checked against TensorFlow in `math_values.rs` and
//! `differential.rs`).

use gradtape::{function, Complex, DType, GradientTape, Result, Tensor};

type F = fn(&[Tensor]) -> Result<Tensor>;

/// A value as comparable bits: dtype, shape and each element's bits
/// (real and imaginary parts for complex dtypes).
fn bits(t: &Tensor) -> (DType, Vec<usize>, Vec<u64>) {
    let v: Vec<u64> = if t.dtype().is_complex() {
        t.cast(DType::C128)
            .unwrap()
            .to_vec::<Complex<f64>>()
            .unwrap()
            .iter()
            .flat_map(|c| [c.re.to_bits(), c.im.to_bits()])
            .collect()
    } else {
        t.to_vec_f64().iter().map(|x| x.to_bits()).collect()
    };
    (t.dtype(), t.shape().to_vec(), v)
}

/// Traces `f` on `a`, calls the traced function on `b`, and compares with
/// `f` run eagerly on `b`; the graph must hold a node named `op`.
fn traced_matches(name: &str, op: &str, f: F, a: Vec<Tensor>, b: Vec<Tensor>) {
    let func = function(move |xs: &Vec<Tensor>| f(xs));
    let graph = func.graph(&a).unwrap_or_else(|e| panic!("{name}: tracing failed: {e}"));
    assert!(graph.count(op) >= 1, "{name}: no {op} node in\n{graph}");
    let eager_a = f(&a).unwrap();
    let eager_b = f(&b).unwrap();
    assert_ne!(
        bits(&eager_a),
        bits(&eager_b),
        "{name}: the two input sets must give different values"
    );
    let traced_a = func.call(&a).unwrap_or_else(|e| panic!("{name}: call failed: {e}"));
    let traced_b = func.call(&b).unwrap_or_else(|e| panic!("{name}: call failed: {e}"));
    assert_eq!(func.trace_count(), 1, "{name}: retraced");
    assert_eq!(
        bits(&traced_a),
        bits(&eager_a),
        "{name}: traced value differs on the trace inputs"
    );
    assert_eq!(
        bits(&traced_b),
        bits(&eager_b),
        "{name}: traced value differs on other inputs\n{graph}"
    );
}

fn f64s(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}
fn i32s(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}
fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}
fn bools(v: &[bool], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}
fn c128s(v: &[(f64, f64)]) -> Tensor {
    Tensor::vector(&v.iter().map(|&(r, i)| Complex::new(r, i)).collect::<Vec<_>>())
}

#[test]
fn comparisons_and_logical_ops_trace() {
    let x1 = || {
        vec![
            f64s(&[1.0, -2.0, 3.0, 0.5, 0.0, 4.0], &[2, 3]),
            f64s(&[1.0, 0.0, 2.0], &[3]),
        ]
    };
    let x2 = || {
        vec![
            f64s(&[0.0, 5.0, 2.0, 2.0, -1.0, 4.0], &[2, 3]),
            f64s(&[0.0, 5.0, 7.0], &[3]),
        ]
    };
    let cases: &[(&str, &str, F)] = &[
        ("eq", "Equal", |x| x[0].eq(&x[1])),
        ("ne", "NotEqual", |x| x[0].ne(&x[1])),
        ("lt", "Less", |x| x[0].lt(&x[1])),
        ("le", "LessEqual", |x| x[0].le(&x[1])),
        ("gt", "Greater", |x| x[0].gt(&x[1])),
        ("ge", "GreaterEqual", |x| x[0].ge(&x[1])),
        ("gt_scalar", "Greater", |x| x[0].gt_scalar(1.5)),
        ("lt_scalar", "Less", |x| x[0].lt_scalar(1.5)),
        ("where of a comparison", "Select", |x| {
            Tensor::where_(&x[0].gt(&x[1])?, &x[0], &x[1].broadcast_to(&[2, 3])?)
        }),
    ];
    for &(name, op, f) in cases {
        traced_matches(name, op, f, x1(), x2());
    }
    let b1 = || vec![bools(&[true, false, true, false], &[2, 2]), bools(&[true, false], &[2])];
    let b2 = || vec![bools(&[false, true, true, true], &[2, 2]), bools(&[false, true], &[2])];
    let logical: &[(&str, &str, F)] = &[
        ("logical_and", "LogicalAnd", |x| x[0].logical_and(&x[1])),
        ("logical_or", "LogicalOr", |x| x[0].logical_or(&x[1])),
        ("logical_xor", "LogicalXor", |x| x[0].logical_xor(&x[1])),
        ("logical_not", "LogicalNot", |x| x[0].logical_not()),
        ("all", "All", |x| x[0].all(&[1], false)),
        ("any keepdims", "Any", |x| x[0].any(&[0], true)),
    ];
    for &(name, op, f) in logical {
        traced_matches(name, op, f, b1(), b2());
    }
}

#[test]
fn sign_casts_rounding_and_arg_extrema_trace() {
    let x1 = || vec![f64s(&[1.6, -2.5, 0.0, 0.5, -0.4, 4.5], &[2, 3])];
    let x2 = || vec![f64s(&[-1.5, 2.5, 3.2, -0.5, 7.0, 0.0], &[2, 3])];
    let cases: &[(&str, &str, F)] = &[
        ("sign", "Sign", |x| x[0].sign()),
        ("abs", "Abs", |x| x[0].abs()),
        ("floor", "Floor", |x| x[0].floor()),
        ("ceil", "Ceil", |x| x[0].ceil()),
        ("round", "Round", |x| x[0].round()),
        ("cast to i64", "Cast", |x| x[0].cast(DType::I64)),
        ("cast to f32", "Cast", |x| x[0].cast(DType::F32)),
        ("argmax", "ArgMax", |x| x[0].argmax(1)),
        ("argmin", "ArgMin", |x| x[0].argmin(-2)),
        ("angle of reals", "Angle", |x| x[0].angle()),
        ("max keepdims", "Max", |x| x[0].max(&[1], true)),
        ("min_all", "Min", |x| x[0].min_all()),
        ("mean keepdims", "Sum", |x| x[0].mean(&[0], true)),
        ("prod", "Prod", |x| x[0].prod(&[0], false)),
        ("norm keepdims", "Norm", |x| x[0].norm(&[1], true)),
        ("cumsum exclusive", "Cumsum", |x| x[0].cumsum(1, true, false)),
        ("cumprod reverse", "Cumprod", |x| x[0].cumprod(0, false, true)),
        ("clip_by_value", "ClipByValue", |x| x[0].clip_by_value(-1.0, 2.0)),
        ("leaky_relu", "LeakyRelu", |x| x[0].leaky_relu(0.25)),
    ];
    for &(name, op, f) in cases {
        traced_matches(name, op, f, x1(), x2());
    }
}

#[test]
fn integer_ops_trace() {
    let i1 = || vec![i64s(&[7, -7, 9, 4, -1, 0], &[2, 3]), i64s(&[2, 3, -4], &[3])];
    let i2 = || vec![i64s(&[-8, 5, 3, 12, 6, -2], &[2, 3]), i64s(&[-3, 2, 5], &[3])];
    let cases: &[(&str, &str, F)] = &[
        ("floor_div", "FloorDiv", |x| x[0].floor_div(&x[1])),
        ("floor_mod", "FloorMod", |x| x[0].floor_mod(&x[1])),
        ("div truncating", "Div", |x| x[0].div(&x[1])),
        ("mul", "Mul", |x| x[0].mul(&x[1])),
        ("maximum", "Maximum", |x| x[0].maximum(&x[1])),
        ("sign", "Sign", |x| x[0].sign()),
        ("abs", "Abs", |x| x[0].abs()),
        ("neg", "Neg", |x| x[0].neg()),
        ("add_scalar", "AddScalar", |x| x[0].add_scalar(3.0)),
        ("sub_scalar", "AddScalar", |x| x[0].sub_scalar(3.0)),
        ("mul_scalar", "MulScalar", |x| x[0].mul_scalar(-2.0)),
        ("div_scalar", "DivScalar", |x| x[0].div_scalar(2.0)),
        ("clip_by_value", "ClipByValue", |x| x[0].clip_by_value(-2.0, 5.0)),
        ("sum", "Sum", |x| x[0].sum(&[1], true)),
        ("prod", "Prod", |x| x[0].prod(&[0], false)),
        ("cumsum", "Cumsum", |x| x[0].cumsum(-1, false, true)),
        ("argmax", "ArgMax", |x| x[0].argmax(0)),
        ("cast to f64", "Cast", |x| x[0].cast(DType::F64)),
    ];
    for &(name, op, f) in cases {
        traced_matches(name, op, f, i1(), i2());
    }
    let j1 = || vec![i32s(&[7, -7, 9, 4], &[4]), i32s(&[2, 3, -4, 4], &[4])];
    let j2 = || vec![i32s(&[-8, 5, 3, 12], &[4]), i32s(&[-3, 2, 5, 7], &[4])];
    let i32_cases: &[(&str, &str, F)] = &[
        ("i32 floor_mod", "FloorMod", |x| x[0].floor_mod(&x[1])),
        ("i32 floor_div", "FloorDiv", |x| x[0].floor_div(&x[1])),
        ("i32 rounding is the identity", "Sign", |x| x[0].floor()?.sign()),
    ];
    for &(name, op, f) in i32_cases {
        traced_matches(name, op, f, j1(), j2());
    }
}

#[test]
fn float_scalar_and_binary_ops_trace() {
    let x1 = || vec![f64s(&[1.5, 2.0, 0.5], &[3]), f64s(&[0.5, -1.0, 2.0], &[3])];
    let x2 = || vec![f64s(&[0.25, 3.0, 1.25], &[3]), f64s(&[1.5, 2.0, -0.5], &[3])];
    let cases: &[(&str, &str, F)] = &[
        ("pow_scalar", "PowScalar", |x| x[0].pow_scalar(1.5)),
        ("add_scalar", "AddScalar", |x| x[0].add_scalar(0.25)),
        ("mul_scalar", "MulScalar", |x| x[0].mul_scalar(3.0)),
        ("div_scalar", "DivScalar", |x| x[0].div_scalar(4.0)),
        ("pow", "Pow", |x| x[0].pow(&x[1])),
        ("floor_div", "FloorDiv", |x| x[0].floor_div(&x[1])),
        ("floor_mod", "FloorMod", |x| x[0].floor_mod(&x[1])),
        ("atan2", "Atan2", |x| x[0].atan2(&x[1])),
        ("squared_difference", "SquaredDifference", |x| {
            x[0].squared_difference(&x[1])
        }),
        ("logsumexp", "Exp", |x| x[0].logsumexp(&[0], false)),
        ("softsign", "Softsign", |x| x[0].softsign()),
        ("gelu", "Gelu", |x| x[0].gelu(false)),
        ("gelu_grad", "GeluGrad", |x| x[0].gelu_grad()),
        ("gelu tanh", "GeluTanh", |x| x[0].gelu(true)),
        ("gelu_tanh_grad", "GeluTanhGrad", |x| x[0].gelu_tanh_grad()),
        ("silu", "Silu", |x| x[0].silu()),
        ("silu_grad", "SiluGrad", |x| x[0].silu_grad()),
        ("mish", "Mish", |x| x[0].mish()),
        ("mish_grad", "MishGrad", |x| x[0].mish_grad()),
        ("tanh_shrink", "TanhShrink", |x| x[0].tanh_shrink()),
    ];
    for &(name, op, f) in cases {
        traced_matches(name, op, f, x1(), x2());
    }
}

#[test]
fn complex_parts_trace() {
    let z1 = || vec![c128s(&[(1.0, 2.0), (-3.0, 0.5), (0.0, -1.0)])];
    let z2 = || vec![c128s(&[(2.0, -1.0), (0.5, 0.5), (-1.0, 0.0)])];
    let cases: &[(&str, &str, F)] = &[
        ("real", "Real", |x| x[0].real()),
        ("imag", "Imag", |x| x[0].imag()),
        ("conj", "Conj", |x| x[0].conj()),
        ("angle", "Angle", |x| x[0].angle()),
        ("abs", "ComplexAbs", |x| x[0].abs()),
        ("complex of parts", "Complex", |x| {
            Tensor::complex(&x[0].imag()?, &x[0].real()?)
        }),
        ("mul_scalar", "MulScalar", |x| x[0].mul_scalar(2.5)),
        ("add_scalar", "AddScalar", |x| x[0].add_scalar(-1.0)),
        ("div_scalar", "DivScalar", |x| x[0].div_scalar(4.0)),
        ("exp", "Exp", |x| x[0].exp()),
        ("log", "Log", |x| x[0].log()),
        ("square", "Square", |x| x[0].square()),
        ("sqrt", "Sqrt", |x| x[0].sqrt()),
        ("rsqrt", "Rsqrt", |x| x[0].add_scalar(0.5)?.rsqrt()),
        ("reciprocal", "Reciprocal", |x| x[0].add_scalar(0.5)?.reciprocal()),
        ("sin", "Sin", |x| x[0].sin()),
        ("cos", "Cos", |x| x[0].cos()),
        ("tan", "Tan", |x| x[0].tan()),
        ("sinh", "Sinh", |x| x[0].sinh()),
        ("cosh", "Cosh", |x| x[0].cosh()),
        ("tanh", "Tanh", |x| x[0].tanh()),
        ("sigmoid", "Sigmoid", |x| x[0].sigmoid()),
        ("pow_scalar", "PowScalar", |x| x[0].add_scalar(0.5)?.pow_scalar(1.5)),
        ("pow", "Pow", |x| x[0].add_scalar(0.5)?.pow(&x[0].conj()?)),
    ];
    for &(name, op, f) in cases {
        traced_matches(name, op, f, z1(), z2());
    }
}

#[test]
fn descriptors_print_their_attributes() -> Result<()> {
    let f = function(|x: &Tensor| {
        let a = x.cumprod(1, true, true)?.leaky_relu(0.25)?;
        let b = x.argmax(-1)?.cast(DType::F64)?;
        a.sum(&[1], false)?.add(&b)?.clip_by_value(-1.0, 2.0)
    });
    let g = f.graph(&f64s(&[1.0, 2.0, 3.0, 4.0], &[2, 2]))?;
    let listing = g.to_string();
    for want in [
        "Cumprod[axis=1, exclusive, reverse]",
        "LeakyRelu[0.25]",
        "ArgMax[axis=-1]",
        "ClipByValue[-1, 2]",
    ] {
        assert!(listing.contains(want), "{want} not in\n{listing}");
    }
    Ok(())
}

/// Cumprod's gradient depends on where the input has zeros: traced on an
/// input without zeros, the function must still give the eager gradient on
/// one with zeros (and the other way round).
#[test]
fn cumprod_gradient_decides_on_zeros_when_the_graph_runs() -> Result<()> {
    let grad = |x: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(x);
        let y = tape.record(|| x.cumprod(1, false, false)?.mul(x)?.sum_all())?;
        Ok(tape.gradient(&y, x)?.expect("connected"))
    };
    let no_zeros = f64s(&[1.5, 2.0, -0.5, 3.0, 0.5, 1.0, 2.0, -1.0], &[2, 4]);
    let zeros = f64s(&[1.5, 0.0, -0.5, 3.0, 0.0, 1.0, 0.0, -1.0], &[2, 4]);
    for (trace_on, run_on) in [(&no_zeros, &zeros), (&zeros, &no_zeros)] {
        let f = function(move |x: &Tensor| grad(x));
        f.call(trace_on)?;
        let got = f.call(run_on)?;
        assert_eq!(f.trace_count(), 1);
        assert_eq!(bits(&got), bits(&grad(run_on)?));
    }
    // the zero case's gradient, by hand: for the row x = [0, 1, 0, -1] of
    // f = Σ_k x_k Π_{i<=k} x_i = x0² + x0 x1² + x0 x1 x2² + x0 x1 x2 x3²,
    // df/dx0 = 2 x0 + x1² + x1 x2² + x1 x2 x3² = 1, and every other partial
    // has a factor x0 = 0
    let g = grad(&zeros)?.to_vec::<f64>()?;
    assert_eq!(&g[4..], &[1.0, 0.0, 0.0, 0.0]);
    Ok(())
}
