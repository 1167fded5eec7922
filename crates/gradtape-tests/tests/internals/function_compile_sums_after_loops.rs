//! The `sums_after_loops` pass (`function/control/sums_after.rs`): the
//! backward loop of a traced RNN step stops carrying its weight
//! gradients' sums. Its compiled body keeps one product per iteration
//! (the state's cotangent `dz_t Uᵀ`) instead of three (`x_tᵀ dz_t` and
//! `h_{t-1}ᵀ dz_t` go, summed after the loop over the stacked rows) and no
//! addition of a sum; with the pass off it keeps all three products. The
//! values against eager (f64, and TensorFlow 2.21) are checked in the
//! `function` binary (`loop_sums_after`); here the traced step's values
//! equal the eager step's to 1e-12 too.

use gradtape::__internals::function::control::*;
use gradtape::__internals::ops::desc::Op;
use gradtape::function::Graph;
use gradtape::{DType, Function, FunctionOptions, GradientTape, Result, Tensor, Variable};

fn filled(shape: &[usize], seed: f64, scale: f64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (i as f64 * 0.7 + seed).sin() * scale).collect(), shape)
}

/// `sum(h_T^2)` of `h' = tanh(xs[i] w + h u + b)` and its gradients with
/// respect to the three weights.
fn rnn(xs: &Tensor, ws: &[Variable]) -> Result<Vec<Tensor>> {
    let (t, batch, units) = (xs.shape()[0], xs.shape()[1], ws[1].shape()[0]);
    let tape = GradientTape::new();
    let loss = tape.record(|| {
        let out = while_loop(
            |v: &Vec<Tensor>| v[0].lt_scalar(t as f64),
            |v: &Vec<Tensor>| {
                let x = xs.gather(&v[0], 0)?;
                let z = x.matmul(&ws[0].read())?.add(&v[1].matmul(&ws[1].read())?)?;
                Ok(vec![v[0].add_scalar(1.0)?, z.add(&ws[2].read())?.tanh()?])
            },
            vec![Tensor::scalar(0i64), Tensor::zeros(&[batch, units], DType::F64)],
            WhileOptions::default(),
        )?;
        out[1].square()?.sum_all()
    })?;
    let g = tape.gradient(&loss, ws)?;
    Ok(std::iter::once(loss)
        .chain(g.into_iter().map(|g| g.expect("a gradient")))
        .collect())
}

/// The nodes of `g` by name: (products, additions, sums).
fn products_adds_sums(g: &Graph) -> (usize, usize, usize) {
    let named = |n: &str| g.nodes.iter().filter(|x| x.op.name() == n).count();
    (named("MatMul"), named("Add"), named("Sum"))
}

/// The compiled body of the plain `While` (the backward loop) in the
/// optimised graph of `f` at `xs`, after a call.
fn backward_body<F>(f: &Function<Tensor, Vec<Tensor>, F>, xs: &Tensor) -> Result<(usize, usize, usize)>
where
    F: Fn(&Tensor) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    f.call(xs)?;
    let c = f.concrete(xs)?;
    let g = c.optimized_graph();
    let node = g
        .nodes
        .iter()
        .find(|n| n.op.name() == "While")
        .unwrap_or_else(|| panic!("no backward loop:\n{g}"));
    let Op::Dyn(d) = &node.op else { unreachable!() };
    let any: &dyn std::any::Any = d.as_ref();
    let lp = &any.downcast_ref::<WhileOp>().expect("a while op").loop_;
    let exec = lp.compiled_body(false).expect("the body ran compiled");
    Ok(products_adds_sums(&exec.graph))
}

#[test]
fn an_rnns_backward_loop_keeps_one_product_per_iteration() -> Result<()> {
    let xs = filled(&[6, 2, 4], 0.5, 1.0)?;
    let ws: Vec<Variable> = [(&[4, 6][..], 0.1), (&[6, 6], 0.2), (&[6], 0.3)]
        .iter()
        .map(|(s, k)| filled(s, *k, 0.4).map(Variable::new))
        .collect::<Result<_>>()?;
    let step = {
        let ws = ws.clone();
        move |xs: &Tensor| rnn(xs, &ws)
    };
    // (fusion off: the additions stay nodes to count)
    let unfused = FunctionOptions::default().disable_pass("fuse")?;
    let on = Function::with_options(step.clone(), unfused.clone());
    let off = Function::with_options(step, unfused.disable_pass("sums_after_loops")?);
    let want = rnn(&xs, &ws)?;
    for (k, (a, b)) in on.call(&xs)?.iter().zip(&want).enumerate() {
        for (x, y) in a.to_vec_f64().iter().zip(b.to_vec_f64()) {
            assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "output {k}: {x} vs {y}");
        }
    }
    // with the pass: `dz_t Uᵀ` alone, no sum added to, no column sum
    assert_eq!(backward_body(&on, &xs)?, (1, 0, 0), "products, additions, sums");
    // without: the two weight gradients' products too, the bias
    // gradient's column sum, and the three sums added to
    assert_eq!(
        backward_body(&off, &xs)?,
        (3, 3, 1),
        "products, additions, sums; pass off"
    );
    Ok(())
}
