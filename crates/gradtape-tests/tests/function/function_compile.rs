//! The graph compiler: constant folding, simplification and fusion of
//! traced graphs, checked against the graph as traced and against eager
//! runs (bit for bit except where a fused kernel sums in another order).

use gradtape::{function, DType, FunctionOptions, GradientTape, Result, Tensor, TensorSpec};

/// The bench's scalar chain: `y = y * 1.0001 + 0.001`, `n` times, and dy/dx.
fn chain(x: &Tensor, n: usize) -> Result<(Tensor, Tensor)> {
    let tape = GradientTape::new();
    let y = tape.record(|| {
        tape.watch(x);
        let mut y = x.clone();
        for _ in 0..n {
            y = y.mul_scalar(1.0001)?.add_scalar(0.001)?;
        }
        Ok(y)
    })?;
    let d = tape.gradient(&y, x)?.expect("connected");
    Ok((y, d))
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_scalar_chain_becomes_one_kernel_and_its_gradient_a_constant() -> Result<()> {
    let f = function(|x: &Tensor| {
        let (y, d) = chain(x, 100)?;
        Ok(vec![y, d])
    });
    let x = Tensor::scalar(0.5f32);
    let c = f.concrete(&x)?;
    let stats = c.compile_stats();
    // 200 forward ops fused; the gradient (a chain of constants) folded
    assert_eq!(c.optimized_graph().count("Fused"), 1, "{}", c.optimized_graph());
    assert_eq!(c.optimized_graph().len(), 2, "{}", c.optimized_graph());
    assert_eq!(stats.fused, 200);
    assert!(stats.folded >= 100, "{stats:?}");
    for v in [0.5f32, -3.25, 1e6] {
        let x = Tensor::scalar(v);
        let got = f.call(&x)?;
        let (y, d) = chain(&x, 100)?;
        assert_eq!(bits(&got[0]), bits(&y), "value at {v}");
        assert_eq!(bits(&got[1]), bits(&d), "gradient at {v}");
    }
    Ok(())
}

/// A one-element program runs decoded (`kernel::scalar`): ops with a
/// constant (`* c`, `+ c`, `/ c`) and the four arithmetic ops of two
/// values run from the decoded list, the rest (exp, a sine and cosine
/// pair, tanh, maximum, an accumulated sum) as they are, in one loop that
/// passes the last value along in a local. Reads of older values (`a`
/// after `b` is made), of one value twice (`b * b`), and values written
/// by the out-of-line instructions must all see the right numbers: the
/// same bits as eager, in f32 and f64, for finite and non-finite inputs.
#[test]
fn a_scalar_program_runs_decoded_with_the_eager_bits() -> Result<()> {
    let body = |x: &Tensor| -> Result<Vec<Tensor>> {
        let a = x.mul_scalar(1.5)?.add_scalar(-0.25)?;
        let b = a.div_scalar(3.0)?.mul(&a)?;
        let c = b.mul(&b)?.sub(&a)?.add(x)?;
        let d = c.exp()?.add(&c.sin()?)?.mul(&c.cos()?)?;
        let e = d.div(&a)?.tanh()?.maximum(&b)?.sub(&x.mul_scalar(0.5)?)?;
        let s = Tensor::stack(&[&e, &d, &a], 0)?.sum_all()?;
        Ok(vec![e, s, b])
    };
    for dt in [DType::F32, DType::F64] {
        let f = function(move |x: &Tensor| body(x));
        let x0 = Tensor::scalar(0.7f64).cast(dt)?;
        let c = f.concrete(&x0)?;
        assert_eq!(c.optimized_graph().count("Fused"), 1, "{}", c.optimized_graph());
        for v in [0.7, -2.5, 0.0, 1e3, f64::INFINITY, f64::NAN, -1e-30] {
            let x = Tensor::scalar(v).cast(dt)?;
            let (got, want) = (f.call(&x)?, body(&x)?);
            for k in [0, 2] {
                assert_eq!(bits(&got[k]), bits(&want[k]), "{dt:?} output {k} at {v}");
            }
            // (the sum: stacked and summed eagerly, accumulated in f64 fused)
            let (g, w) = (got[1].to_vec_f64()[0], want[1].to_vec_f64()[0]);
            assert!(
                g == w || (g - w).abs() <= 1e-6 * w.abs() || g.is_nan() && w.is_nan(),
                "{dt:?} sum at {v}: {g} vs {w}"
            );
        }
    }
    Ok(())
}

/// The bench's elementwise workload on a small tensor: forward sum,
/// gradient, and the sum of its absolute values.
fn elementwise(x0: &Tensor) -> Result<Vec<Tensor>> {
    let x = x0.stop_gradient();
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(&x);
        x.sin()?.exp()?.mul(&x)?.sum_all()
    })?;
    let g = tape.gradient(&loss, &x)?.expect("connected");
    Ok(vec![loss, g.abs()?.sum_all()?, g])
}

#[test]
fn forward_and_backward_of_an_elementwise_loss_fuse_into_one_pass() -> Result<()> {
    let f = function(|x: &Tensor| elementwise(x));
    // large enough to run on several threads
    let n = 100_003;
    let xs: Vec<f32> = (0..n).map(|i| (0.37 * i as f64).sin() as f32 * 3.0).collect();
    let x = Tensor::from_vec(xs, &[n])?;
    let c = f.concrete(&x)?;
    let g = c.optimized_graph();
    assert_eq!(g.count("Fused"), 1, "{g}");
    assert_eq!(
        g.count("Sin") + g.count("Exp") + g.count("Cos") + g.count("Mul"),
        0,
        "{g}"
    );
    let got = f.call(&x)?;
    let want = elementwise(&x)?;
    // the gradient, elementwise: the same bits as eager
    assert_eq!(bits(&got[2]), bits(&want[2]));
    // the sums: added in another order
    for k in 0..2 {
        let (a, b) = (got[k].to_scalar::<f32>()? as f64, want[k].to_scalar::<f32>()? as f64);
        assert!((a - b).abs() <= 1e-5 * b.abs(), "sum {k}: fused {a}, eager {b}");
    }
    // and exactly the f64 sum of the eager elements, rounded once
    let exact: f64 = want[2].to_vec_f64().iter().map(|v| v.abs()).sum();
    assert_eq!(got[1].to_scalar::<f32>()?, exact as f32);
    Ok(())
}

#[test]
fn non_finite_values_propagate_as_in_eager() -> Result<()> {
    let body = |x: &Tensor| x.log()?.mul(x)?.sqrt()?.maximum(&x.neg()?)?.div_scalar(0.5)?.relu();
    let f = function(move |x: &Tensor| body(x));
    let x = Tensor::vector(&[
        0.0f64,
        -0.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        2.5,
        1e-310,
    ]);
    assert_eq!(f.concrete(&x)?.optimized_graph().count("Fused"), 1);
    assert_eq!(bits(&f.call(&x)?), bits(&body(&x)?));
    Ok(())
}

#[test]
fn broadcast_operands_that_do_not_fit_stay_outside_a_kernel() -> Result<()> {
    // [2, 1, 2] added to [2, 3, 2]: not the kernel's shape, not one element,
    // not a row or column broadcast (those fuse: tests/function/function_fuse.rs)
    let body = |(a, b): &(Tensor, Tensor)| a.exp()?.add(b)?.mul_scalar(2.0)?.tanh()?.mul(&Tensor::scalar(3.0f32));
    let f = function(move |ab: &(Tensor, Tensor)| body(ab));
    let a = Tensor::from_vec((1..=12).map(|i| i as f32 * 0.1).collect(), &[2, 3, 2])?;
    let b = Tensor::from_vec(vec![1.0f32, -1.0, 0.5, 0.25], &[2, 1, 2])?;
    let args = (a, b);
    let g = f.concrete(&args)?.optimized_graph().clone();
    assert_eq!(g.count("Add"), 1, "{g}");
    assert_eq!(g.count("Fused"), 2, "{g}");
    assert_eq!(bits(&f.call(&args)?), bits(&body(&args)?));
    Ok(())
}

#[test]
fn a_signature_with_unknown_dims_runs_the_traced_graph_for_other_shapes() -> Result<()> {
    let opts = FunctionOptions {
        input_signature: Some(vec![TensorSpec::new(DType::F64, &[None])]),
        ..FunctionOptions::default()
    };
    let f = gradtape::Function::with_options(|x: &Tensor| x.sin()?.mul(x)?.sum_all(), opts);
    for n in [3usize, 5, 1] {
        let x = Tensor::from_vec((0..n).map(|i| i as f64 * 0.7 - 1.0).collect(), &[n])?;
        let want: f64 = x.to_vec_f64().iter().map(|v| v.sin() * v).sum();
        let got = f.call(&x)?.to_scalar::<f64>()?;
        assert!((got - want).abs() <= 1e-14, "n = {n}: {got} vs {want}");
    }
    assert_eq!(f.trace_count(), 1);
    Ok(())
}

#[test]
fn the_compiler_can_be_turned_off() -> Result<()> {
    let opts = FunctionOptions {
        optimize: false,
        ..FunctionOptions::default()
    };
    let f = gradtape::Function::with_options(|x: &Tensor| x.sin()?.exp(), opts);
    let c = f.concrete(&Tensor::vector(&[1.0f32]))?;
    assert_eq!(c.optimized_graph().count("Fused"), 0);
    assert_eq!(c.compile_stats(), gradtape::CompileStats::default());
    Ok(())
}

#[test]
fn simplification_removes_multiplications_by_one_and_identities() -> Result<()> {
    let f = function(|x: &Tensor| {
        let ones = Tensor::ones(&[2, 2], DType::F64);
        x.mul(&ones)?
            .permute(&[1, 0])?
            .permute(&[1, 0])?
            .reshape(&[4])?
            .reshape(&[2, 2])?
            .div_scalar(1.0)
    });
    let x = Tensor::from_vec(vec![1.0f64, -2.0, 3.0, -4.0], &[2, 2])?;
    let c = f.concrete(&x)?;
    assert!(c.compile_stats().simplified >= 4, "{:?}", c.compile_stats());
    assert_eq!(c.optimized_graph().len(), 0, "{}", c.optimized_graph());
    assert_eq!(f.call(&x)?.to_vec::<f64>()?, vec![1.0, -2.0, 3.0, -4.0]);
    Ok(())
}

#[test]
fn a_training_step_gives_the_same_losses_optimised_or_not() -> Result<()> {
    use gradtape::Variable;
    let run = |optimize: bool| -> Result<Vec<f32>> {
        let w = Variable::new(Tensor::from_vec(vec![0.5f32, -0.25, 0.125, 1.0], &[2, 2])?);
        let w2 = w.clone();
        let opts = FunctionOptions {
            optimize,
            ..FunctionOptions::default()
        };
        let step = gradtape::Function::with_options(
            move |x: &Tensor| {
                let tape = GradientTape::new();
                let loss = tape.record(|| x.matmul(&w2.read())?.tanh()?.square()?.mean_all())?;
                let g = tape.gradient(&loss, &w2)?.expect("connected");
                w2.apply_gradient_descent(0.5, &g)?;
                Ok(loss)
            },
            opts,
        );
        let x = Tensor::from_vec(vec![1.0f32, 2.0, -1.0, 0.5], &[2, 2])?;
        (0..4).map(|_| step.call(&x)?.to_scalar::<f32>()).collect()
    };
    let (on, off) = (run(true)?, run(false)?);
    for (a, b) in on.iter().zip(&off) {
        assert!((a - b).abs() <= 1e-6 * b.abs(), "{on:?} vs {off:?}");
    }
    assert!(on[3] < on[0]);
    Ok(())
}

/// The functions the elementwise table defines all fuse, not only the
/// bench's: an exact GELU (erf), softplus, ELU, a rounding, `floor_mod`
/// and `atan2` with their gradients become fused kernels with no
/// elementwise node left beside them, and give eager's bits (f32 and f64)
/// by construction: the fused lanes are the eager kernels' functions.
#[test]
fn every_tabled_function_fuses_with_eagers_bits() -> Result<()> {
    fn body(x: &Tensor) -> Result<Vec<Tensor>> {
        let x = x.stop_gradient();
        let tape = GradientTape::new();
        let loss = tape.record(|| {
            tape.watch(&x);
            let a = x.gelu(false)?.add(&x.softplus()?)?.mul(&x.elu()?)?;
            let b = x
                .atan2(&x.square()?.add_scalar(1.0)?)?
                .add(&x.floor_mod(&x.scalar_like(0.75)?)?)?;
            a.add(&b)?.add(&x.mul_scalar(3.0)?.round()?)?.sum_all()
        })?;
        let g = tape.gradient(&loss, &x)?.expect("connected");
        Ok(vec![loss, g])
    }
    let f = function(|x: &Tensor| body(x));
    for dt in [DType::F32, DType::F64] {
        let x = Tensor::from_vec(
            (0..999).map(|i| (0.37 * i as f64).sin() * 3.0).collect::<Vec<f64>>(),
            &[999],
        )?
        .cast(dt)?;
        let c = f.concrete(&x)?;
        let g = c.optimized_graph();
        assert!(g.count("Fused") >= 1, "{g}");
        for op in ["Erf", "Softplus", "Elu", "Atan2", "FloorMod", "Round", "Mul", "Add"] {
            assert_eq!(g.count(op), 0, "{op} left unfused:\n{g}");
        }
        let (got, want) = (f.call(&x)?, body(&x)?);
        assert_eq!(bits(&got[1]), bits(&want[1]), "gradient, {dt}");
        // (the loss is a sum, which the fused kernel may add in another order)
        let (l, w) = (got[0].cast(DType::F64)?.item()?, want[0].cast(DType::F64)?.item()?);
        assert!((l - w).abs() <= 1e-5 * w.abs().max(1.0), "loss {l} vs {w}, {dt}");
    }
    Ok(())
}

/// A graph with `top_k`, `unsorted_segment_sum`, `searchsorted` and a
/// scatter update (shapes fixed by the inputs') is compiled (it ran as
/// traced, unfused: a mixture-of-experts step with its top-k routing, a
/// GNN's message passing); one with `unique` or the sorted `segment_sum`
/// (sizes read from the values) is not. Both give eager's numbers.
#[test]
fn graphs_of_static_sorts_and_segments_are_compiled_data_dependent_ones_not() -> Result<()> {
    fn ids() -> Tensor {
        Tensor::vector(&[2i64, 0, 2, 1])
    }
    let x = Tensor::from_vec((0..12).map(|i| (i as f64 * 0.7).sin()).collect(), &[4, 3])?;
    fn static_ops(x: &Tensor) -> Result<Tensor> {
        let (vals, idx) = x.exp()?.mul_scalar(2.0)?.top_k(2)?;
        let seg = vals.tanh()?.unsorted_segment_sum(&ids(), 3)?;
        let pos = Tensor::vector(&[0.0f64, 0.5, 1.0]).searchsorted(&x.sigmoid()?.reshape(&[12])?, false)?;
        let upd = seg.tensor_scatter_nd_update(
            &Tensor::from_vec(vec![1i64], &[1, 1])?,
            &Tensor::ones(&[1, 2], DType::F64),
        )?;
        upd.sum_all()?
            .add(&idx.cast(DType::F64)?.sum_all()?)?
            .add(&pos.cast(DType::F64)?.sum_all()?)
    }
    let f = function(static_ops);
    let c = f.concrete(&x)?;
    assert!(
        c.compile_stats().fused > 0,
        "{:?}\n{}",
        c.compile_stats(),
        c.optimized_graph()
    );
    let (got, want) = (f.call(&x)?.item()?, static_ops(&x)?.item()?);
    assert!((got - want).abs() <= 1e-12 * want.abs(), "{got} vs {want}");
    fn dynamic(x: &Tensor) -> Result<Tensor> {
        let seg = x
            .exp()?
            .mul_scalar(2.0)?
            .segment_sum(&Tensor::vector(&[0i64, 0, 1, 1]))?;
        seg.sum_all()?.add(&ids().unique()?.0.cast(DType::F64)?.sum_all()?)
    }
    let g = function(dynamic);
    let c = g.concrete(&x)?;
    assert_eq!(c.compile_stats(), gradtape::CompileStats::default());
    let (got, want) = (g.call(&x)?.item()?, dynamic(&x)?.item()?);
    assert!((got - want).abs() <= 1e-12 * want.abs(), "{got} vs {want}");
    Ok(())
}
