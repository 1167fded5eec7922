//! The `remat` pass: a gradient kernel recomputes a cheap value of the
//! forward kernel (LayerNorm's normalised `x̂`, an affine `x·s + b`) from
//! tensors it reads anyway, so the forward kernel writes fewer tensors.
//! Checked on shapes other than the bench's: the values are the bits of
//! the same function compiled without the pass (the same instructions,
//! run in another kernel), and the eager values to rounding; an expensive
//! value (`erf`, `exp`) and a kernel small enough to stay in cache are
//! left alone.

use gradtape::{function, CompileOptions, Function, FunctionOptions, GradientTape, Result, Tensor};

fn bits(ts: &[Tensor]) -> Vec<Vec<u64>> {
    ts.iter()
        .map(|t| t.to_vec_f64().iter().map(|v| v.to_bits()).collect())
        .collect()
}

fn data(shape: &[usize], seed: f64, dtype: gradtape::DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.618 + seed).sin() * 1.7).collect();
    Tensor::from_vec(v, shape).unwrap().cast(dtype).unwrap()
}

/// `(x, gain, bias, w)`: a LayerNorm over the last axis, a product and a
/// loss; returns the loss and the gradients of `x`, `gain`, `bias`, `w`.
type Args = (Tensor, Tensor, Tensor, Tensor);

fn layer_norm_step((x, gain, bias, w): &Args) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        for t in [x, gain, bias, w] {
            tape.watch(t);
        }
        let mean = x.mean(&[-1], true)?;
        let d = x.sub(&mean)?;
        let var = d.square()?.mean(&[-1], true)?;
        let h = d.mul(&var.add_scalar(1e-5)?.rsqrt()?)?.mul(gain)?.add(bias)?;
        h.matmul(w)?.tanh()?.square()?.mean_all()
    })?;
    let g = tape.gradient(&loss, &[x, gain, bias, w])?;
    let mut out = vec![loss];
    out.extend(g.into_iter().map(|t| t.expect("every input is used")));
    Ok(out)
}

/// The total number of tensors the fused kernels of an optimised graph
/// write (elementwise outputs and reductions).
fn fused_outputs(g: &gradtape::function::Graph) -> usize {
    g.nodes
        .iter()
        .filter(|n| n.op.name() == "Fused")
        .map(|n| n.outputs.len())
        .sum()
}

fn without_remat() -> FunctionOptions {
    FunctionOptions {
        compile: CompileOptions::default().disable_pass("remat").unwrap(),
        ..Default::default()
    }
}

#[test]
fn layer_norm_gradients_recompute_the_normalised_input() -> Result<()> {
    // a tall and a wide shape, f32 and f64 (both above the pass's size)
    for (shape, dtype) in [
        ([4096usize, 96usize], gradtape::DType::F64),
        ([160, 640], gradtape::DType::F32),
    ] {
        let [n, k] = shape;
        let args: Args = (
            data(&[n, k], 0.3, dtype),
            data(&[k], 1.1, dtype).add_scalar(1.0)?,
            data(&[k], 2.3, dtype),
            data(&[k, 8], 0.7, dtype).mul_scalar(0.2)?,
        );
        let on = function(layer_norm_step);
        let off = Function::with_options(layer_norm_step, without_remat());
        let c = on.concrete(&args)?;
        assert!(
            c.compile_stats().count("remat").is_some_and(|n| n >= 1),
            "{:?}",
            c.compile_stats()
        );
        assert_eq!(off.concrete(&args)?.compile_stats().count("remat"), None);
        // the forward kernel writes x̂ no more
        let plain_graph = off.concrete(&args)?.optimized_graph().clone();
        assert!(
            fused_outputs(c.optimized_graph()) < fused_outputs(&plain_graph),
            "{shape:?}: {}",
            c.optimized_graph()
        );
        let (got, plain) = (on.call(&args)?, off.call(&args)?);
        assert_eq!(bits(&got), bits(&plain), "{shape:?} {dtype}");
        let eager = layer_norm_step(&args)?;
        let tol = if dtype == gradtape::DType::F64 { 1e-12 } else { 2e-5 };
        for (a, b) in got.iter().zip(&eager) {
            let (a, b) = (a.to_vec_f64(), b.to_vec_f64());
            let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= tol * scale, "{shape:?}: traced {x} eager {y}");
            }
        }
    }
    Ok(())
}

/// An affine map of `x` feeds a product; its gradient needs the same
/// affine value: recomputed, not stored.
fn affine_step((x, s, b, w): &Args) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(w);
        let h = x.mul(s)?.add(b)?;
        let y = h.matmul(w)?;
        // the loss reads h again after the product, beside x (a residual)
        h.mul(&y.sum(&[-1], true)?)?.add(x)?.sum_all()
    })?;
    let g = tape.gradient(&loss, &[w])?;
    Ok(vec![loss, g[0].clone().expect("w is used")])
}

#[test]
fn cheap_values_are_recomputed_expensive_ones_are_not() -> Result<()> {
    let dtype = gradtape::DType::F32;
    let args: Args = (
        data(&[1024, 128], 0.1, dtype),
        data(&[128], 0.4, dtype),
        data(&[128], 0.9, dtype),
        data(&[128, 16], 0.2, dtype),
    );
    let on = function(affine_step);
    let off = Function::with_options(affine_step, without_remat());
    let stats = on.concrete(&args)?.compile_stats().clone();
    assert!(stats.count("remat").is_some_and(|n| n >= 1), "{stats:?}");
    assert_eq!(bits(&on.call(&args)?), bits(&off.call(&args)?));

    // the exact GELU: its gradient needs erf(x/√2) and exp(-x²/2) again,
    // which cost more to recompute than to read back
    let gelu_step = |(x, w): &(Tensor, Tensor)| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(w);
            x.matmul(w)?.gelu(false)?.matmul(w)?.square()?.sum_all()
        })?;
        let g = tape.gradient(&loss, &[w])?;
        Ok(vec![loss, g[0].clone().expect("w is used")])
    };
    let g = function(gelu_step);
    let args = (
        data(&[512, 256], 0.3, dtype),
        data(&[256, 256], 0.8, dtype).mul_scalar(0.05)?,
    );
    let c = g.concrete(&args)?;
    assert_eq!(c.compile_stats().count("remat"), Some(0), "{}", c.optimized_graph());

    // a kernel that stays in cache is left alone
    let small: Args = (
        data(&[64, 32], 0.1, dtype),
        data(&[32], 0.4, dtype),
        data(&[32], 0.9, dtype),
        data(&[32, 4], 0.2, dtype),
    );
    assert_eq!(on.concrete(&small)?.compile_stats().count("remat"), Some(0));
    assert_eq!(bits(&on.call(&small)?), bits(&off.call(&small)?));
    Ok(())
}
