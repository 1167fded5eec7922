//! Control flow in compiled graphs: which control nodes keep a graph
//! static, and sub-graphs that run compiled exactly where the enclosing
//! graph runs compiled, with the traced graph's values.

use gradtape::__internals::function::control::*;
use gradtape::__internals::ops::desc::DynOp;
use gradtape::__internals::ops::desc::Op;
use gradtape::__internals::TensorInternals;
use gradtape::function::Graph;
use gradtape::Error;
use gradtape::GradientTape;
use gradtape::Result;
use gradtape::Tensor;
use gradtape::{function, FunctionOptions};
use std::sync::Arc;

/// The control nodes of a graph's top level, as their ops.
fn control_nodes(g: &Graph) -> Vec<Arc<dyn DynOp>> {
    g.nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Dyn(d) if matches!(d.name(), "Cond" | "While" | "WhileWithHistory") => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// The loop of a `While` op.
fn loop_of(d: &Arc<dyn DynOp>) -> &Loop {
    let any: &dyn std::any::Any = d.as_ref();
    &any.downcast_ref::<WhileOp>().expect("a while op").loop_
}

/// `v` stepped `n` times by an elementwise body (no sums: the compiled
/// body gives the traced body's bits).
fn stepped(v: &Tensor, n: &Tensor) -> Result<Tensor> {
    let out = while_loop(
        |s: &(Tensor, Tensor)| s.0.lt(n),
        |s: &(Tensor, Tensor)| {
            let next = s.1.sin()?.exp()?.mul_scalar(0.5)?.add(&s.1.mul_scalar(0.25)?)?;
            Ok((s.0.add(&Tensor::scalar(1i32))?, next))
        },
        (Tensor::scalar(0i32), v.clone()),
        WhileOptions::default(),
    )?;
    Ok(out.1)
}

fn unoptimized() -> FunctionOptions {
    FunctionOptions {
        optimize: false,
        ..FunctionOptions::default()
    }
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.values::<f32>("test")
        .expect("f32")
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn a_loop_that_keeps_its_shapes_is_compiled_with_its_body() -> Result<()> {
    let body = |(x, n): &(Tensor, Tensor)| stepped(x, n)?.mul(x);
    let fast = function(body);
    let slow = gradtape::Function::with_options(body, unoptimized());
    let x = Tensor::from_vec((0..300).map(|i| i as f32 * 0.37 - 50.0).collect(), &[300])?;
    for n in [0, 1, 4] {
        let args = (x.clone(), Tensor::scalar(n));
        assert_eq!(bits(&fast.call(&args)?), bits(&slow.call(&args)?), "n = {n}");
    }
    let args = (x.clone(), Tensor::scalar(2));
    let c = fast.concrete(&args)?;
    // the enclosing graph is compiled (the loop and the product by x) ...
    assert!(c.compile_stats().nodes_before > 0);
    let loops = control_nodes(c.optimized_graph());
    assert_eq!(loops.len(), 1, "{}", c.optimized_graph());
    assert!(loops[0].static_shapes());
    // ... and so is the loop body (with the condition fused in), on its
    // first compiled run
    let body_exec = loop_of(&loops[0]).compiled_body(false).expect("the body ran compiled");
    assert_eq!(body_exec.stats.kernels, 1, "one fused kernel");
    // unoptimised: neither
    let c = slow.concrete(&args)?;
    assert_eq!(c.compile_stats().nodes_before, 0);
    assert!(loop_of(&control_nodes(c.optimized_graph())[0])
        .compiled_body(false)
        .is_none());
    Ok(())
}

#[test]
fn a_loop_body_compiles_with_the_functions_options() -> Result<()> {
    // fusion off for the function: off in its loop body too (which
    // compiled with the default options, fusion on, before)
    let body = |(x, n): &(Tensor, Tensor)| stepped(x, n)?.mul(x);
    let opts = FunctionOptions::default().disable_pass("fuse")?;
    let unfused = gradtape::Function::with_options(body, opts);
    let slow = gradtape::Function::with_options(body, unoptimized());
    let x = Tensor::from_vec((0..300).map(|i| i as f32 * 0.37 - 50.0).collect(), &[300])?;
    let args = (x.clone(), Tensor::scalar(3));
    assert_eq!(bits(&unfused.call(&args)?), bits(&slow.call(&args)?));
    let c = unfused.concrete(&args)?;
    assert_eq!(c.compile_stats().count("fuse"), None, "fusion did not run");
    let loops = control_nodes(c.optimized_graph());
    let body_exec = loop_of(&loops[0]).compiled_body(false).expect("the body ran compiled");
    let stats = &body_exec.stats;
    assert_eq!((stats.kernels, stats.count("fuse")), (0, None), "no fusion in the body");
    assert!(stats.nodes_before > 0);
    Ok(())
}

#[test]
fn branches_of_other_shapes_keep_the_graph_traced_and_right() -> Result<()> {
    // the same shapes: static, compiled, the traced graph's bits
    let same = |x: &Tensor| cond(&x.sum(&[0], false)?.gt_scalar(0.0)?, || x.sin()?.exp(), || x.cos());
    let fast = function(same);
    let slow = gradtape::Function::with_options(same, unoptimized());
    for sign in [1.0f32, -1.0] {
        let x = Tensor::from_vec((0..64).map(|i| sign * (i as f32 * 0.1 + 0.05)).collect(), &[64])?;
        assert_eq!(bits(&fast.call(&x)?), bits(&slow.call(&x)?));
        let c = fast.concrete(&x)?;
        assert!(c.compile_stats().nodes_before > 0);
        assert!(control_nodes(c.optimized_graph())[0].static_shapes());
    }
    // a branch returning another shape: not static, so not compiled
    let other = function(|x: &Tensor| cond(&x.sum(&[0], false)?.gt_scalar(0.0)?, || x.slice(&[0], &[2]), || x.neg()));
    let x = Tensor::vector(&[1.0f32, 2.0, 3.0]);
    assert_eq!(other.call(&x)?.values::<f32>("test")?, vec![1.0, 2.0]);
    assert_eq!(other.call(&x.neg()?)?.values::<f32>("test")?, vec![1.0, 2.0, 3.0]);
    let c = other.concrete(&x)?;
    assert!(!control_nodes(c.graph())[0].static_shapes());
    assert_eq!(c.compile_stats().nodes_before, 0);
    Ok(())
}

#[test]
fn a_loop_under_a_tape_keeps_a_history_and_the_step_compiles_around_it() -> Result<()> {
    let grad = |(x, n): &(Tensor, Tensor)| {
        let tape = GradientTape::new();
        let y = tape.record(|| {
            tape.watch(x);
            stepped(x, n)?.sum(&[0], false)
        })?;
        tape.gradient(&y, x)?.ok_or_else(|| Error::InvalidArgument {
            op: "test",
            msg: "not connected".into(),
        })
    };
    let fast = function(grad);
    let slow = gradtape::Function::with_options(grad, unoptimized());
    let x = Tensor::from_vec((0..50).map(|i| i as f32 * 0.21 - 5.0).collect(), &[50])?;
    let args = (x.clone(), Tensor::scalar(3));
    let (a, b) = (fast.call(&args)?, slow.call(&args)?);
    for (p, q) in a.values::<f32>("test")?.iter().zip(b.values::<f32>("test")?.iter()) {
        assert!((p - q).abs() <= 1e-6 * (1.0 + q.abs()), "{p} vs {q}");
    }
    // the history's length is the iteration count: the loop's shapes are
    // not static, but only the loop's own gradient reads the history, so
    // the step compiles around it (`compile::is_static`)
    let c = fast.concrete(&args)?;
    let nodes = control_nodes(c.graph());
    let kept = nodes
        .iter()
        .find(|d| d.name() == "WhileWithHistory")
        .expect("a loop keeping its history");
    assert!(!kept.static_shapes());
    assert!(c.compile_stats().nodes_before > 0, "the step is compiled");
    // its body (with the residuals of its gradient) is static, and runs
    // compiled
    assert!(loop_of(kept).compiled_body(true).is_some());
    Ok(())
}

/// The gradient of `sum(h2_T)` for a loop carrying two states,
/// `h1' = tanh(xs[i] w1 + h1 u1)` and `h2' = tanh(h1' w2 + h2 u2)`,
/// with respect to `xs`.
fn two_states(xs: &Tensor, w: &[Tensor]) -> Result<Tensor> {
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        tape.watch(xs);
        let z = Tensor::zeros(&[xs.shape()[1], w[1].shape()[0]], gradtape::DType::F64);
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt_scalar(xs.shape()[0] as f64),
            |v: &Vec<Tensor>| {
                let h1 = xs.gather(&v[0], 0)?.matmul(&w[0])?.add(&v[1].matmul(&w[1])?)?.tanh()?;
                let h2 = h1.matmul(&w[2])?.add(&v[2].matmul(&w[3])?)?.tanh()?;
                Ok(vec![v[0].add_scalar(1.0)?, h1, h2])
            },
            vec![Tensor::scalar(0i64), z.clone(), z],
            WhileOptions::default(),
        )?;
        out[2].sum_all()
    })?;
    Ok(tape.gradient(&loss, xs)?.expect("a gradient"))
}

/// A residual of a loop's gradient that the body returns as a loop
/// variable (here two `tanh` cells' outputs, the next states, which
/// their gradients read) is read from that variable's history one row on
/// (`function/control/residuals.rs`): the loop keeps no history of its own
/// for it. (Before, each state was copied twice per iteration.) The
/// values are checked against eager in the `function` binary
/// (`loop_kept_once`); here the gradient is checked against eager to
/// 1e-12 in f64 too, at two iteration counts through one trace.
#[test]
fn residuals_that_are_next_states_are_kept_once() -> Result<()> {
    let fill = |shape: &[usize], k: f64| {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|i| 0.5 * (0.7 * i as f64 + k).sin()).collect(), shape)
    };
    let w: Vec<Tensor> = (0..4).map(|k| fill(&[3, 3], k as f64)).collect::<Result<_>>()?;
    let f = {
        let w = w.clone();
        function(move |xs: &Tensor| two_states(xs, &w))
    };
    for t in [5, 2] {
        let xs = fill(&[t, 2, 3], 0.3)?;
        let (got, want) = (f.call(&xs)?.to_vec_f64(), two_states(&xs, &w)?.to_vec_f64());
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-12, "{a} vs {b}");
        }
    }
    let xs = fill(&[5, 2, 3], 0.3)?;
    let c = f.concrete(&xs)?;
    let nodes = control_nodes(c.graph());
    let kept = nodes
        .iter()
        .find(|d| d.name() == "WhileWithHistory")
        .expect("a loop keeping its history");
    let mut sources = loop_of(kept).residual_sources().expect("the body splits").to_vec();
    sources.sort();
    // the two next states, from the states' histories (variables 1 and 2),
    // and nothing else (the gathered row is gathered again)
    assert_eq!(sources, vec![Some(1), Some(2)]);
    Ok(())
}
