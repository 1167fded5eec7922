//! Variable reads of a control op's sub-graphs moved out in front of it,
//! as captures, where none of its sub-graphs writes state.
//!
//! A read inside a branch or a loop body is a node that reads the variable
//! when the sub-graph runs. The op's gradient runs its sub-graphs again (a
//! branch under a tape; the loop body's gradient, or the values the
//! residuals' backward half repeats): a read there sees the variable as it
//! is when the gradient runs, not as the forward run saw it. A traced step
//! that assigns a variable between the forward pass and a gradient (a
//! persistent tape asked again after an update, a GAN's two updates on one
//! tape) got gradients at the new value, where the eager tape, which keeps
//! the values read, gives them at the old one.
//!
//! Where nothing in the op's sub-graphs writes (no variable write, no
//! optimizer update, nothing unknown; nested control flow and calls
//! looked into), every read gives the value the variable had when the op
//! started: the read is made once, in the enclosing trace, just before the
//! op, and the sub-graphs take it as a capture. The gradient then flows to
//! the variable through that outer read as through any other, the
//! sub-graphs' gradients see the forward run's value, and a loop reads
//! the variable once instead of at every iteration. A sub-graph that
//! writes keeps its reads (they must see the writes).

use rustc_hash::FxHashMap;

use crate::autodiff::variable::Variable;
use crate::function::graph::{Graph, ValueId};
use crate::function::trace::Traced;
use crate::function::variables::ReadVariable;
use crate::ops::desc::Op;
use crate::tensor::{Tensor, TensorId};

/// Whether a node of `g` (or of a graph nested in one) may write state a
/// later read sees.
pub(crate) fn writes(g: &Graph) -> bool {
    g.nodes.iter().any(|n| match &n.op {
        Op::Dyn(d) => d.writes(),
        Op::Opaque(_) => true,
        _ => false,
    })
}

/// Whether running `g` has an effect a second run would repeat or change:
/// a write, a fresh random draw, anything unknown (a read of a variable
/// is none; nested control flow and calls are looked into).
pub(crate) fn has_effects(g: &Graph) -> bool {
    g.nodes.iter().any(|n| match &n.op {
        Op::Dyn(d) if n.op.as_dyn::<ReadVariable>().is_some() || !d.stateful() => false,
        Op::Dyn(d) => {
            let nested = crate::function::graph::nested(&**d);
            nested.is_empty() || nested.iter().any(|(_, g)| has_effects(g))
        }
        op => op.is_stateful(),
    })
}

/// Moves the variable reads of the traced sub-graphs `subs` of one op out
/// in front of it (see the module docs), unless one of them writes: each
/// read node becomes an input of its graph, captured from a read of the
/// variable made now (in the enclosing trace, once per variable for all of
/// `subs`), and the variables leave the traces' lists of variables read.
pub(super) fn hoist_reads<T>(subs: &mut [&mut Traced<T>]) {
    if subs.iter().any(|s| writes(&s.graph)) {
        return;
    }
    let mut outer: FxHashMap<TensorId, Tensor> = FxHashMap::default();
    for s in subs.iter_mut() {
        let g = &mut s.graph;
        // per variable read in this graph: the input that now stands for it
        let mut mine: FxHashMap<TensorId, ValueId> = FxHashMap::default();
        let mut rename: FxHashMap<ValueId, ValueId> = FxHashMap::default();
        let mut kept = Vec::with_capacity(g.nodes.len());
        for node in std::mem::take(&mut g.nodes) {
            let Some(ReadVariable(v)) = node.op.as_dyn::<ReadVariable>() else {
                kept.push(node);
                continue;
            };
            let out = node.outputs[0];
            match mine.get(&v.handle()) {
                Some(&first) => {
                    rename.insert(out, first);
                }
                None => {
                    mine.insert(v.handle(), out);
                    g.inputs.push(out);
                    let t = outer.entry(v.handle()).or_insert_with(|| read_outside(v));
                    s.captures.push(t.clone());
                }
            }
        }
        if !rename.is_empty() {
            let at = |v: &mut ValueId| {
                if let Some(&r) = rename.get(v) {
                    *v = r;
                }
            };
            for node in &mut kept {
                node.inputs.iter_mut().for_each(at);
            }
            g.outputs.iter_mut().for_each(at);
        }
        g.nodes = kept;
        s.variables.clear();
    }
}

/// The variable's value read in the enclosing trace (a read node there,
/// seen by the active tapes as any read).
fn read_outside(v: &Variable) -> Tensor {
    v.read()
}
