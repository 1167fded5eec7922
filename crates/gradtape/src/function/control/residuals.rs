//! A loop body's gradient split at its residuals, so that the backward
//! loop does not run the body again.
//!
//! The gradient of a `while_loop` runs the iterations backward, pulling the
//! cotangent through the body's VJP at each iteration's entry values. That
//! VJP needs values the body computed (the activations a `tanh` or a
//! product's gradient reads): recomputing them from the entry values runs
//! the whole body a second time in the backward loop, which an eager tape,
//! holding them from the forward pass, never does (a traced neural ODE's
//! step was 1.10× its eager step for that reason). As TensorFlow's
//! `while_loop` keeps its intermediates' accumulators, a loop whose history
//! a tape wants splits the body's traced VJP graph in two:
//!
//! - `fwd`: the body with the *residuals* as extra outputs: the values
//!   computed from the entry values alone (no cotangent) that the gradient
//!   reads; the forward loop stacks them per iteration beside the entry
//!   values;
//! - `bwd`: the rest, the gradient from the entry values, the captures, the
//!   cotangents and the residuals (read back by row), in which only the
//!   free nodes (constants, variable reads) and the values the same at
//!   every iteration (made from the captures alone: kept once per
//!   iteration they would multiply the history's size) are repeated.
//!
//! Both are graphs of ordinary ops, so the backward loop differentiates
//! again as before. A body with shapes decided at run time keeps the
//! recomputing gradient.
//!
//! What is kept is kept once, and only what the gradient cannot have
//! otherwise:
//!
//! - a residual the body returns as a loop variable's next value (an
//!   RNN's `h' = tanh(..)`, which `tanh`'s gradient reads) is that
//!   variable's entry value at the next iteration: the forward loop keeps
//!   no history of its own for it, but keeps the variable's final value as
//!   one more row of the variable's history, and the residual's history
//!   is a view of rows `1..=count` of it (`next_of`; in a traced RNN step
//!   the state was copied twice per iteration, once as the next entry
//!   value and once as the residual);
//! - a value that only moves elements of what the gradient half has at
//!   hand (the entry values, the captures: an RNN's input row
//!   `gather(xs, i)` of a captured sequence at the loop's counter, a
//!   slice, a reshape) is computed again there, which costs one copy of
//!   it, as keeping it did (the copy into the history), without the
//!   history's memory (its fresh pages at every call).
//!
//! A body with effects (a variable write, a fresh random draw) splits too,
//! and must: its effects belong to the forward loop alone, which runs them
//! once per iteration, and the values the gradient reads from them (a
//! dropout mask, a variable read after a write in the body) are residuals
//! like any other, kept per iteration. Running such a body again for its
//! gradient (the recomputing gradient) would write the variables a second
//! time and draw other numbers than the forward loop used: a traced loop
//! with a dropout in its body got the gradient of other masks than the
//! ones its value used, and one that counted its steps in a variable
//! counted each step twice. A gradient that must pull a cotangent back
//! through the residuals themselves (a second-order gradient, forward
//! mode's double VJP) does so through the body without its effects over
//! the values they made, kept too ([`Pure`]). Where the gradient would
//! have to run such a body again (a body with shape invariants, effects in
//! a loop or branch nested in it reached by a second-order gradient, a
//! loop no tape or accumulator watched when it ran), it is an error that
//! says so.

use super::{hoist, Sub};
use crate::autodiff::backprop::Unconnected;
use crate::autodiff::gradient_tape::{GradientOptions, GradientTape};
use crate::autodiff::sources::SourceRef;
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::function::compile;
use crate::function::graph::{Graph, Node, ValueId};
use crate::function::trace;
use crate::function::variables::ReadVariable;
use crate::ops::desc::Op;
use crate::ops::index::row_at;
use crate::tensor::{DType, Shape, Tensor};

/// The two halves of a loop body's gradient.
pub(crate) struct Residuals {
    /// the body, its outputs then the residuals
    pub fwd: Sub,
    /// the gradient: inputs the entry values, the captures, the
    /// cotangents of the differentiable outputs, the residuals; outputs as
    /// `graph_vjp`'s
    pub bwd: Sub,
    /// each residual's dtype and shape
    pub specs: Vec<(DType, Shape)>,
    /// per residual, the loop variable whose next value it is (the body
    /// returns it as that variable), if any: the forward loop keeps no
    /// history of its own for it, but reads it from that variable's
    /// history, one row on (see the module docs)
    pub next_of: Vec<Option<usize>>,
    /// where the body has effects, the body without them, over the values
    /// they made (see [`Pure`])
    pub pure: Option<Pure>,
}

/// A body with effects (a fresh random draw, a variable read after a
/// write) as a function of its inputs and of the values its effects made,
/// which the forward run keeps among the residuals: the effects then do
/// not run again where a gradient must pull a cotangent back through the
/// body's residuals (a gradient of the gradient, and forward mode, which
/// gets a loop's tangents from its VJP rule by the double-VJP
/// construction); the draws are the forward run's. A body whose effects
/// are in nested control flow or calls has none (the gradient is then an
/// error saying the body would run again).
pub(crate) struct Pure {
    /// the body, its inputs then the effects' values; outputs as `fwd`'s
    graph: Sub,
    /// where each effect's value is among the residuals
    eff_at: Vec<usize>,
}

impl Pure {
    /// The VJP of the body's outputs and residuals (`cts`: the cotangents
    /// of the differentiable ones) at the inputs `ins` and one iteration's
    /// residuals `res`: the gradients of the differentiable inputs, then of
    /// the variables `vars`.
    pub(super) fn vjp(&self, ins: &[Tensor], res: &[Tensor], cts: &[Tensor], vars: &[Variable]) -> Result<Vec<Tensor>> {
        let mut xs = ins.to_vec();
        xs.extend(self.eff_at.iter().map(|&i| res[i].clone()));
        let mut g = graph_vjp(&self.graph, &xs, cts, vars)?;
        let diff = |t: &&Tensor| t.dtype().is_differentiable();
        let n_ins = ins.iter().filter(diff).count();
        let n_eff = xs[ins.len()..].iter().filter(diff).count();
        g.drain(n_ins..n_ins + n_eff);
        Ok(g)
    }
}

/// Whether a node costs nothing to repeat: a constant, or a variable
/// read where the body writes nothing (a body that writes reads what its
/// writes made, which differs from one iteration to the next).
fn free(n: &Node, writes: bool) -> bool {
    match &n.op {
        Op::Const(_) => true,
        op => !writes && op.as_dyn::<ReadVariable>().is_some(),
    }
}

/// Whether a node only moves elements of its inputs (a row picked, a
/// slice, a reshape, a transpose, a broadcast): computing it again costs
/// one copy of its output at most, which keeping it per iteration costs
/// too (the copy into the history), with a history's memory besides.
fn moves(n: &Node) -> bool {
    use crate::ops::desc::ShapeOp as S;
    matches!(
        &n.op,
        Op::Shape(
            S::Gather(_)
                | S::GatherNd
                | S::Slice(..)
                | S::StridedSlice(_)
                | S::DynamicSlice(_)
                | S::RowAt
                | S::Reshape(_)
                | S::Transpose(_)
                | S::BroadcastTo(_)
                | S::Contiguous
                | S::Identity
                | S::StopGradient
                | S::Reverse(_)
        )
    )
}

/// Whether `g`'s shapes follow from its inputs' shapes, but for the
/// lengths of the histories its loops keep (a loop in the body of a
/// differentiated loop keeps one, as long as its iteration count): those
/// become the enclosing loop's residuals, one per iteration, and a count
/// that changes between iterations is an error naming the loop when the
/// residuals are stacked.
fn static_but_histories(g: &Graph) -> bool {
    g.nodes.iter().all(|n| match n.op.as_dyn::<super::WhileOp>() {
        Some(w) => crate::ops::desc::DynOp::static_shapes(&w.with_history(false)),
        None => compile::node_is_static(n),
    })
}

/// Splits `body` (over the loop variables `vars` then the captures `caps`,
/// example values; a branch of a `cond` has no loop variable) at its
/// residuals; `None` where the body keeps the recomputing gradient (see
/// the module docs). A value made from the captures alone is the same at
/// every iteration and computed again by the gradient: for a branch, run
/// once, `vars` is empty and every capture counts as varying.
pub(crate) fn split(body: &Sub, vars: &[Tensor], caps: &[Tensor], variables: &[Variable]) -> Result<Option<Residuals>> {
    // (a body with effects must split: it may not run again, and the
    // histories of loops in it, if their lengths do not change, stack)
    let static_enough = match hoist::has_effects(&body.graph) {
        true => static_but_histories(&body.graph),
        // (every node: `is_static` lets a loop keeping its history pass,
        // whose history would be a residual of changing length)
        false => body.graph.nodes.iter().all(compile::node_is_static),
    };
    if !static_enough {
        return Ok(None);
    }
    let writes = hoist::writes(&body.graph);
    let bg = &body.graph;
    // (the body's outputs, each with a cotangent where differentiable)
    let (n, n_in) = (bg.outputs.len(), vars.len() + caps.len());
    let n_varying = if vars.is_empty() { n_in } else { vars.len() };
    let mut args: Vec<Tensor> = vars.iter().chain(caps).cloned().collect();
    for &o in &bg.outputs {
        let info = &bg.values[o as usize];
        if info.dtype.is_differentiable() {
            args.push(Tensor::try_zeros(&info.shape, info.dtype)?);
        }
    }
    let traced = trace::trace(&args, &[], true, |xs| {
        let (ins, cts) = xs.split_at(n_in);
        let (mut outs, grads) = graph_vjp_outs(body, ins, cts, variables)?;
        outs.extend(grads);
        Ok(((), outs))
    })?;
    if !traced.captures.is_empty() {
        return Ok(None);
    }
    let g = traced.graph;
    // the adjoint: what depends on a cotangent
    let mut adjoint = vec![false; g.values.len()];
    for &v in &g.inputs[n_in..] {
        adjoint[v as usize] = true;
    }
    // what varies from one iteration to the next: what depends on a loop
    // variable (or draws at random)
    let mut varying = vec![false; g.values.len()];
    for &v in &g.inputs[..n_varying] {
        varying[v as usize] = true;
    }
    // what the gradient half has without a residual: the inputs (the
    // entry values, read back from the history, and the captures) and
    // what it computes again
    let mut at_hand = vec![false; g.values.len()];
    for &v in &g.inputs[..n_in] {
        at_hand[v as usize] = true;
    }
    let mut primal = vec![false; g.values.len()];
    let mut again = vec![false; g.nodes.len()];
    let node_adjoint: Vec<bool> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let a = node.inputs.iter().any(|&v| adjoint[v as usize]);
            let var = matches!(node.op, Op::Create(_) | Op::Dyn(_) | Op::Opaque(_))
                || node.inputs.iter().any(|&v| varying[v as usize]);
            // (a value the same at every iteration is computed again by
            // the gradient rather than kept once per iteration, and so is
            // one that moves elements of what the gradient has at hand:
            // an RNN's input row `gather(xs, i)` of a captured sequence
            // at the loop's counter)
            let moved = moves(node) && node.inputs.iter().all(|&v| at_hand[v as usize]);
            again[i] = !a && (free(node, writes) || !var || moved);
            for &o in &node.outputs {
                at_hand[o as usize] = again[i];
                adjoint[o as usize] = a;
                varying[o as usize] = var;
                primal[o as usize] = !a && !again[i];
            }
            a
        })
        .collect();
    // the residuals: primal values (not inputs, not free) that the
    // adjoint or the gradients read
    let mut res: Vec<ValueId> = Vec::new();
    let read = g
        .nodes
        .iter()
        .zip(&node_adjoint)
        .filter(|(_, a)| **a)
        .flat_map(|(node, _)| node.inputs.iter())
        .chain(&g.outputs[n..]);
    for &v in read {
        if primal[v as usize] && !res.contains(&v) {
            res.push(v);
        }
    }
    // where the body has effects, the values they made are kept too, and
    // `pure` is the body without its effects over them
    let effect = |i: usize, nd: &Node| !node_adjoint[i] && nd.op.is_stateful() && !free(nd, writes);
    let nested_effects = |nd: &Node| match &nd.op {
        Op::Dyn(d) => !crate::function::graph::nested(&**d).is_empty(),
        _ => false,
    };
    let pure_ok = hoist::has_effects(bg)
        && !g
            .nodes
            .iter()
            .enumerate()
            .any(|(i, nd)| effect(i, nd) && nested_effects(nd));
    let mut eff: Vec<ValueId> = Vec::new();
    let mut eff_at: Vec<usize> = Vec::new();
    if pure_ok {
        let effects = g.nodes.iter().enumerate().filter(|(i, nd)| effect(*i, nd));
        for (_, nd) in effects {
            for &o in &nd.outputs {
                let at = match res.iter().position(|&r| r == o) {
                    Some(at) => at,
                    None => {
                        res.push(o);
                        res.len() - 1
                    }
                };
                eff.push(o);
                eff_at.push(at);
            }
        }
    }
    // (a residual the body returns as loop variable `k`'s next value, as
    // an RNN's `tanh` output is its next state, is that variable's entry
    // value at the next iteration: the history keeps it once)
    let next_of = res
        .iter()
        .map(|&v| (0..vars.len()).find(|&k| g.outputs[k] == v))
        .collect();
    let specs = res
        .iter()
        .map(|&v| (g.values[v as usize].dtype, g.values[v as usize].shape.clone()))
        .collect();
    let part = |keep: &dyn Fn(usize, &Node) -> bool, inputs: Vec<ValueId>, outputs: Vec<ValueId>| {
        let nodes = g
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, nd)| keep(*i, nd))
            .map(|(_, nd)| nd.clone());
        Graph {
            values: g.values.clone(),
            inputs,
            nodes: nodes.collect(),
            outputs,
        }
    };
    let fwd = part(
        &|i, _| !node_adjoint[i],
        g.inputs[..n_in].to_vec(),
        g.outputs[..n].iter().chain(&res).copied().collect(),
    );
    let bwd = part(
        &|i, _| node_adjoint[i] || again[i],
        g.inputs.iter().chain(&res).copied().collect(),
        g.outputs[n..].to_vec(),
    );
    let pure = pure_ok.then(|| Pure {
        graph: Sub::new(part(
            &|i, nd| !node_adjoint[i] && !effect(i, nd),
            g.inputs[..n_in].iter().chain(&eff).copied().collect(),
            g.outputs[..n].iter().chain(&res).copied().collect(),
        )),
        eff_at,
    });
    Ok(Some(Residuals {
        fwd: Sub::new(fwd),
        bwd: Sub::new(bwd),
        specs,
        next_of,
        pure,
    }))
}

impl super::WhileOp {
    /// The body's VJP at one iteration: its entry values then the captures
    /// `ins`, the cotangents `cts` of its differentiable outputs; where the
    /// history keeps the residuals (their rows `res` at iteration `j`),
    /// the gradient half reads them instead of running the body again,
    /// unless a residual's history has a cotangent `ct_res` (a gradient of
    /// the gradient), pulled back through the body with its residuals.
    pub(super) fn body_vjp(
        &self,
        ins: &[Tensor],
        cts: &[Tensor],
        res: &[Tensor],
        ct_res: &[Option<Tensor>],
        j: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let Some(r) = self.kept_res() else {
            self.body_runs_again("the body has shape invariants or shapes decided when it runs")?;
            return graph_vjp(&self.body, ins, cts, &self.vars);
        };
        if ct_res.iter().all(Option::is_none) {
            let all: Vec<Tensor> = ins.iter().chain(cts).chain(res).cloned().collect();
            return r.bwd.run(&all);
        }
        let mut all_cts = cts.to_vec();
        for (row, ct) in res.iter().zip(ct_res) {
            if row.dtype().is_differentiable() {
                all_cts.push(ct.as_ref().map_or_else(|| row.try_zeros_like(), |h| row_at(h, j))?);
            }
        }
        if let Some(p) = &r.pure {
            return p.vjp(ins, res, &all_cts, &self.vars);
        }
        self.body_runs_again("a gradient of its gradient reaches the values the forward loop kept")?;
        graph_vjp(&r.fwd, ins, &all_cts, &self.vars)
    }
}

impl super::Loop {
    /// The graph a loop that keeps its history runs at each iteration: the
    /// body with its gradient's residuals as extra outputs where it splits,
    /// else the body.
    pub fn kept_body(&self) -> &Sub {
        self.res.get().and_then(Option::as_ref).map_or(&self.body, |r| &r.fwd)
    }

    /// Per residual of the body's gradient that a run keeping its history
    /// keeps: `Some(k)` where it is loop variable `k`'s next value, read
    /// from that variable's history one row on (no history of its own),
    /// `None` where it has a history of its own. `None` where the body
    /// does not split, or has not been split yet.
    pub fn residual_sources(&self) -> Option<&[Option<usize>]> {
        self.res.get().and_then(Option::as_ref).map(|r| &r.next_of[..])
    }

    /// Fails where the loop's body has effects (see the module docs): its
    /// gradient would run it again, for the reason `why`.
    pub(super) fn body_runs_again(&self, why: &str) -> Result<()> {
        if !self.effects {
            return Ok(());
        }
        Err(Error::invalid(
            "while_loop",
            format!(
                "the gradient would run the loop's body again ({why}), and the body writes variables or \
                 draws fresh random numbers, which a second run would repeat or draw anew; move the effects \
                 out of the loop, or differentiate a loop without them"
            ),
        ))
    }
}

/// The gradients of `g`'s differentiable outputs (weighted by `cts`, one
/// per such output) with respect to its differentiable inputs, then to the
/// variables `vars` it reads, zeros where none flows: `g` run again under a
/// tape.
///
/// The zeros of an input no gradient reaches are made from that input
/// (`zeros_like`), not from its shape: inside a trace, zeros of a shape are
/// a constant of the shape seen when tracing, while an input's shape may
/// change from one run of the graph to the next (a loop's history, whose
/// length is the iteration count, is an input of the backward loop's body,
/// and of the body of its own gradient).
pub(super) fn graph_vjp(g: &Sub, inputs: &[Tensor], cts: &[Tensor], vars: &[Variable]) -> Result<Vec<Tensor>> {
    Ok(graph_vjp_outs(g, inputs, cts, vars)?.1)
}

/// [`graph_vjp`], also returning `g`'s outputs.
fn graph_vjp_outs(g: &Sub, inputs: &[Tensor], cts: &[Tensor], vars: &[Variable]) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    vjp_outs(&|xs: &[Tensor]| g.run(xs), inputs, cts, vars)
}

/// [`graph_vjp`] of a function `f` of the inputs (run under a tape).
pub(super) fn closure_vjp(
    f: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
    cts: &[Tensor],
    vars: &[Variable],
) -> Result<Vec<Tensor>> {
    Ok(vjp_outs(f, inputs, cts, vars)?.1)
}

/// [`closure_vjp`], also returning `f`'s outputs.
fn vjp_outs(
    f: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
    cts: &[Tensor],
    vars: &[Variable],
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let tape = GradientTape::new();
    let diff: Vec<Tensor> = inputs
        .iter()
        .filter(|t| t.dtype().is_differentiable())
        .cloned()
        .collect();
    let outs = tape.record(|| {
        for x in &diff {
            tape.watch(x);
        }
        // (a non-trainable variable is not watched when read)
        for v in vars {
            tape.watch(v);
        }
        f(inputs)
    })?;
    let targets: Vec<Tensor> = outs.iter().filter(|t| t.dtype().is_differentiable()).cloned().collect();
    let opts = GradientOptions::default()
        .output_gradients(cts.to_vec())
        .unconnected(Unconnected::None);
    let mut sources: Vec<SourceRef<'_>> = diff.iter().map(SourceRef::Tensor).collect();
    sources.extend(vars.iter().map(SourceRef::Variable));
    let grads = tape.gradient_with(&targets, &sources, opts)?;
    if grads.len() != diff.len() + vars.len() {
        return Err(Error::invalid("while_loop", "missing gradient"));
    }
    let grads = grads
        .into_iter()
        .enumerate()
        .map(|(i, g)| match (g, diff.get(i)) {
            (Some(g), _) => Ok(g),
            (None, Some(x)) => x.try_zeros_like(),
            // a variable's shape is fixed
            (None, None) => {
                let v = &vars[i - diff.len()];
                Tensor::try_zeros(&v.shape(), v.dtype())
            }
        })
        .collect::<Result<_>>()?;
    Ok((outs, grads))
}
