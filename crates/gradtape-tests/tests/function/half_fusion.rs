//! Fused f16 and bf16 chains (`function/compile/kernel/half.rs`): a traced
//! function's half elementwise ops become fused kernels that compute in
//! f32 and round after every op, and give the eager values bit for bit
//! (NaN for NaN: the eager kernels and the fused ones convert through the
//! same instructions). The reference is the same closure run eagerly, op
//! by op (whose half kernels are checked against TensorFlow elsewhere:
//! `nn/half.rs`); every op that joins half groups is run on every f16 and
//! bf16 value, then random chains of them with broadcast rows, columns,
//! scalars and empty tensors, and the fusion is checked to fire (node
//! counts of the optimised graphs) on two different graphs.

use crate::aliasing::Gen;
use gradtape::{function, DType, GradientTape, Result, Tensor};

/// `(shape, values)` of each tensor, NaN as one value.
fn same_values(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{what} out {k}");
        for (i, (a, b)) in g.to_vec_f64().iter().zip(&w.to_vec_f64()).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{what} out {k} [{i}]: traced {a} vs eager {b}"
            );
        }
    }
}

/// Every value of the half type `dt` (the 65,536 bit patterns), `[256, 256]`.
fn every_half(dt: DType) -> Tensor {
    let v: Vec<f64> = (0..=u16::MAX)
        .map(|b| match dt {
            DType::F16 => gradtape::f16::from_bits(b).to_f64(),
            _ => gradtape::bf16::from_bits(b).to_f64(),
        })
        .collect();
    Tensor::from_vec(v, &[256, 256]).unwrap().cast(dt).unwrap()
}

type UnaryFn = fn(&Tensor) -> Result<Tensor>;

/// The one-input ops that join half groups (`fuse/half.rs`), by name.
const UNARY: &[(&str, UnaryFn)] = &[
    ("Neg", |x| x.neg()),
    ("Abs", |x| x.abs()),
    ("Square", |x| x.square()),
    ("MulScalar", |x| x.mul_scalar(0.1)),
    ("DivScalar", |x| x.div_scalar(3.0)),
    ("AddScalar", |x| x.add_scalar(-0.3)),
    ("Relu", |x| x.relu()),
    ("Sign", |x| x.sign()),
    ("Sqrt", |x| x.sqrt()),
    ("Rsqrt", |x| x.rsqrt()),
    ("Reciprocal", |x| x.reciprocal()),
    ("Exp", |x| x.exp()),
    ("Expm1", |x| x.expm1()),
    ("Log", |x| x.log()),
    ("Log1p", |x| x.log1p()),
    ("Sin", |x| x.sin()),
    ("Cos", |x| x.cos()),
    ("Tan", |x| x.tan()),
    ("Asin", |x| x.asin()),
    ("Acos", |x| x.acos()),
    ("Atan", |x| x.atan()),
    ("Sinh", |x| x.sinh()),
    ("Cosh", |x| x.cosh()),
    ("Tanh", |x| x.tanh()),
    ("Asinh", |x| x.asinh()),
    ("Acosh", |x| x.acosh()),
    ("Atanh", |x| x.atanh()),
    ("Erf", |x| x.erf()),
    ("Erfc", |x| x.erfc()),
    ("Gelu", |x| x.gelu(false)),
    ("GeluGrad", |x| x.gelu_grad()),
    ("GeluTanh", |x| x.gelu(true)),
    ("GeluTanhGrad", |x| x.gelu_tanh_grad()),
    ("Silu", |x| x.silu()),
    ("SiluGrad", |x| x.silu_grad()),
    ("Mish", |x| x.mish()),
    ("MishGrad", |x| x.mish_grad()),
    ("TanhShrink", |x| x.tanh_shrink()),
    ("Floor", |x| x.floor()),
    ("Ceil", |x| x.ceil()),
    ("Round", |x| x.round()),
    ("Sigmoid", |x| x.sigmoid()),
    ("Relu6", |x| x.relu6()),
    ("Elu", |x| x.elu()),
    ("Selu", |x| x.selu()),
    ("Softplus", |x| x.softplus()),
    ("Softsign", |x| x.softsign()),
];

type BinaryFn = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// The two-input ops that join half groups.
const BINARY: &[(&str, BinaryFn)] = &[
    ("Add", |a, b| a.add(b)),
    ("Sub", |a, b| a.sub(b)),
    ("Mul", |a, b| a.mul(b)),
    ("Div", |a, b| a.div(b)),
    ("Maximum", |a, b| a.maximum(b)),
    ("Minimum", |a, b| a.minimum(b)),
];

#[test]
fn every_half_op_fused_gives_the_eager_bits_on_every_value() -> Result<()> {
    for dt in [DType::F16, DType::BF16] {
        let x = every_half(dt);
        for &(name, op) in UNARY {
            // the op, and a second op reading its rounded result
            let body = move |x: &Tensor| -> Result<Vec<Tensor>> {
                let y = op(x)?;
                Ok(vec![y.clone(), y.mul(x)?])
            };
            let f = function(body);
            let g = f.concrete(&x)?.optimized_graph().clone();
            assert_eq!(
                (g.count("Fused"), g.count(name), g.count("Mul")),
                (1, 0, 0),
                "{dt:?} {name}: {g}"
            );
            same_values(&f.call(&x)?, &body(&x)?, &format!("{dt:?} {name}"));
        }
        // every value against every value (reversed, and shifted by 257)
        let n = 1 << 16;
        let idx: Vec<i64> = (0..n as i64)
            .map(|i| (n as i64 - 1 - i + 257 * (i % 3)) % n as i64)
            .collect();
        let y = x
            .reshape(&[n])?
            .gather(&Tensor::from_vec(idx, &[n])?, 0)?
            .reshape(&[256, 256])?;
        for &(name, op) in BINARY {
            let body = move |(x, y): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
                let z = op(x, y)?;
                Ok(vec![z.clone(), op(&z, x)?.neg()?])
            };
            let f = function(body);
            let args = (x.clone(), y.clone());
            let g = f.concrete(&args)?.optimized_graph().clone();
            assert_eq!((g.count("Fused"), g.count(name)), (1, 0), "{dt:?} {name}: {g}");
            same_values(&f.call(&args)?, &body(&args)?, &format!("{dt:?} {name}"));
        }
    }
    Ok(())
}

/// Values with special ones among them: signed zeros, the largest finite
/// f16, subnormals, infinities, NaN, and ordinary values of both signs.
fn special(n: usize, seed: u64) -> Vec<f64> {
    let mut g = Gen(seed);
    let pick = [
        0.0,
        -0.0,
        65504.0,
        -65504.0,
        6e-8,
        -1e-5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.0,
        -1.0,
        0.5,
    ];
    (0..n)
        .map(|_| match g.below(4) {
            0 => pick[g.below(pick.len())],
            _ => (g.below(20_001) as f64 - 10_000.0) / 1000.0,
        })
        .collect()
}

/// A random chain of `steps` ops over the inputs `xs` (of the group's
/// shape, a row, a column and a scalar): each step an op of the tables on
/// earlier values; returns a few of the values.
fn chain(xs: &[Tensor], seed: u64, steps: usize) -> Result<Vec<Tensor>> {
    let mut g = Gen(seed);
    let mut vals: Vec<Tensor> = xs.to_vec();
    let full = |g: &mut Gen, vals: &[Tensor]| -> usize {
        // a value of the group's shape: the first input, or a computed one
        let k = g.below(vals.len() - xs.len() + 1);
        if k == 0 {
            0
        } else {
            xs.len() + k - 1
        }
    };
    for _ in 0..steps {
        let a = full(&mut g, &vals);
        let v = if g.below(2) == 0 {
            UNARY[g.below(UNARY.len())].1(&vals[a])?
        } else {
            // the other operand: any value (a broadcast one included)
            let b = g.below(vals.len());
            let op = BINARY[g.below(BINARY.len())].1;
            if g.below(2) == 0 {
                op(&vals[a], &vals[b])?
            } else {
                op(&vals[b], &vals[a])?
            }
        };
        vals.push(v);
    }
    let n = vals.len();
    Ok(vec![
        vals[n - 1].clone(),
        vals[n - 2].clone(),
        vals[xs.len() + steps / 2].clone(),
    ])
}

#[test]
fn random_half_chains_with_broadcasts_fuse_to_the_eager_bits() -> Result<()> {
    let mut fused = 0;
    for dt in [DType::F16, DType::BF16] {
        for (case, &(r, c)) in [(3usize, 5usize), (64, 257), (0, 5), (1, 1), (300, 40)]
            .iter()
            .enumerate()
        {
            let t = |shape: &[usize], seed: u64| {
                let n = shape.iter().product();
                Tensor::from_vec(special(n, seed), shape).unwrap().cast(dt).unwrap()
            };
            let xs = vec![
                t(&[r, c], 1 + case as u64),
                t(&[r, c], 2 + case as u64),
                t(&[c], 3),
                t(&[r, 1], 4),
                t(&[], 5),
            ];
            for seed in 0..12u64 {
                let f = function(move |xs: &Vec<Tensor>| chain(xs, seed, 10));
                fused += f.concrete(&xs)?.optimized_graph().count("Fused");
                same_values(
                    &f.call(&xs)?,
                    &chain(&xs, seed, 10)?,
                    &format!("{dt:?} [{r}, {c}] seed {seed}"),
                );
            }
        }
    }
    // (some chains have their ops in several groups; none run unfused)
    assert!(fused >= 2 * 5 * 12, "{fused} fused kernels");
    Ok(())
}

/// A GELU MLP layer's step in the half type: forward, loss and gradients.
fn mlp_step((x, w, b): &(Tensor, Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(w);
        tape.watch(b);
        let h = x.matmul(w)?.bias_add(b)?.gelu(false)?;
        h.square()?.mul_scalar(0.5)?.cast(DType::F32)?.sum_all()
    })?;
    let g = tape.gradient(&loss, &[w.clone(), b.clone()])?;
    Ok(vec![loss, g[0].clone().unwrap(), g[1].clone().unwrap()])
}

/// A gated unit: `silu(a) · c + 1`, its square root, and `max(a, c) / 4`.
fn gate((a, c): &(Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let s = a.silu()?.mul(c)?.add_scalar(1.0)?;
    Ok(vec![s.abs()?.sqrt()?, a.maximum(c)?.div_scalar(4.0)?])
}

#[test]
fn half_graphs_fuse_their_elementwise_chains() -> Result<()> {
    let data = |shape: &[usize], k: f64, dt: DType| {
        let n = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|i| (0.37 * i as f64 + k).sin()).collect();
        Tensor::from_vec(v, shape).unwrap().cast(dt).unwrap()
    };
    for dt in [DType::F16, DType::BF16] {
        // the gate: one kernel, nothing else
        let f = function(gate);
        let args = (data(&[8, 33], 1.0, dt), data(&[8, 33], 2.0, dt));
        let g = f.concrete(&args)?.optimized_graph().clone();
        assert_eq!((g.count("Fused"), g.len()), (1, 1), "{dt:?}: {g}");
        same_values(&f.call(&args)?, &gate(&args)?, &format!("{dt:?} gate"));
        // the MLP step: the bias add, GELU, square and scale of the forward
        // and the chain of the backward (GELU's derivative, products) in
        // one kernel (GELU and its derivative from one erf); the sums stay
        // outside (half groups have none)
        let f = function(mlp_step);
        let args = (
            data(&[16, 8], 0.5, dt),
            data(&[8, 12], 1.5, dt).mul_scalar(0.25)?,
            data(&[12], 2.5, dt),
        );
        let g = f.concrete(&args)?.optimized_graph().clone();
        assert_eq!(g.count("Fused"), 1, "{dt:?}: {g}");
        assert!(g.to_string().contains("GeluAndGrad"), "{dt:?}: {g}");
        for op in ["BiasAdd", "Gelu", "GeluGrad", "Square", "MulScalar", "Mul"] {
            assert_eq!(g.count(op), 0, "{dt:?} {op}: {g}");
        }
        same_values(&f.call(&args)?, &mlp_step(&args)?, &format!("{dt:?} mlp"));
    }
    Ok(())
}

/// Two GELU layers' step: the backward kernel of the first layer needs
/// the forward's bias sum again, across the second layer's products (what
/// the `remat` pass recomputes in large kernels, from 2^16 elements).
fn two_layer_step((x, w1, b1, w2): &(Tensor, Tensor, Tensor, Tensor)) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(w1);
        tape.watch(b1);
        tape.watch(w2);
        let h = x.matmul(w1)?.bias_add(b1)?.relu()?.mul_scalar(0.5)?;
        let y = h.matmul(w2)?.gelu(false)?;
        y.square()?.cast(DType::F32)?.sum_all()
    })?;
    let g = tape.gradient(&loss, &[w1.clone(), b1.clone(), w2.clone()])?;
    Ok(std::iter::once(loss).chain(g.into_iter().map(Option::unwrap)).collect())
}

#[test]
fn large_half_kernels_across_products_give_the_eager_bits() -> Result<()> {
    let data = |shape: &[usize], k: f64, dt: DType| {
        let n = shape.iter().product();
        let v: Vec<f64> = (0..n).map(|i| (0.37 * i as f64 + k).sin() * 0.25).collect();
        Tensor::from_vec(v, shape).unwrap().cast(dt).unwrap()
    };
    for dt in [DType::F16, DType::BF16] {
        let args = (
            data(&[512, 64], 0.5, dt),
            data(&[64, 128], 1.5, dt),
            data(&[128], 2.5, dt),
            data(&[128, 128], 3.5, dt),
        );
        let f = function(two_layer_step);
        let g = f.concrete(&args)?.optimized_graph().clone();
        assert!(g.count("Fused") >= 2, "{dt:?}: {g}");
        for op in ["BiasAdd", "Relu", "ReluGrad", "Gelu", "GeluGrad", "MulScalar"] {
            assert_eq!(g.count(op), 0, "{dt:?} {op}: {g}");
        }
        same_values(&f.call(&args)?, &two_layer_step(&args)?, &format!("{dt:?} two layers"));
    }
    Ok(())
}
