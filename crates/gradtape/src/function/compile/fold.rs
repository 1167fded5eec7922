//! Constant folding (the `fold` pass): a node whose inputs are all
//! constants is run once, when the graph is compiled, and becomes a
//! constant.
//!
//! ```text
//! before:                                after:
//!   %1: f64[3] = Const[1, 2, 3]            %1: f64[3] = Const[1, 2, 3]
//!   %2: f64[3] = Sqrt(%1)                  %2: f64[3] = Const[1, 1.414.., 1.732..]
//!   %3: f64[4, 3] = Mul(%0, %2)            %3: f64[4, 3] = Mul(%0, %2)
//! ```
//!
//! (the constant `%1`, now unread, goes at the next dead-code elimination.)
//!
//! A `FullLike` node (a value everywhere, in the shape and dtype of its
//! input) folds whatever its input is: the shape is fixed by the plan.
//! Results larger than [`FOLD_MAX`] elements are not folded when they are
//! larger than the node's inputs (a broadcast of a scalar to a large shape
//! stays a broadcast, which fusion turns into a register). Ops with effects,
//! calls and control flow, and random draws are never folded; an op that
//! fails on its constants is left in place, to fail at run time as it would
//! have. A folded result that is a broadcast view (within the bound) is
//! stored row-major; other views keep the layout eager gives them.

use rustc_hash::FxHashMap;

use super::pipeline::PassCx;
use crate::autodiff::tape;
use crate::function::graph::{Graph, Node, ValueId};
use crate::function::trace;
use crate::ops::desc::{Op, ShapeOp};
use crate::tensor::Tensor;

/// Folded results above this many elements are kept only when no larger
/// than an input.
pub(crate) const FOLD_MAX: usize = 1 << 12;

/// Whether the optimiser may run this op ahead of time.
fn foldable(op: &Op) -> bool {
    !matches!(op, Op::Dyn(_) | Op::Opaque(_) | Op::Const(_) | Op::Create(_)) && !op.is_stateful()
}

/// Folds constant nodes in place; returns how many were folded.
pub fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let mut consts: FxHashMap<ValueId, Tensor> = FxHashMap::default();
    let mut folded = 0;
    let old = std::mem::take(&mut g.nodes);
    let mut nodes = Vec::with_capacity(old.len());
    for n in old {
        if let Op::Const(t) = &n.op {
            consts.insert(n.outputs[0], t.clone());
            nodes.push(n);
            continue;
        }
        match fold_node(g, &n, &consts) {
            Some(outs) => {
                folded += 1;
                for (&v, t) in n.outputs.iter().zip(outs) {
                    consts.insert(v, t.clone());
                    nodes.push(Node {
                        op: Op::Const(t),
                        inputs: Default::default(),
                        outputs: smallvec::smallvec![v],
                        site: None,
                    });
                }
            }
            None => nodes.push(n),
        }
    }
    g.nodes = nodes;
    folded
}

/// The node's outputs computed now, if it folds.
fn fold_node(g: &Graph, n: &Node, consts: &FxHashMap<ValueId, Tensor>) -> Option<Vec<Tensor>> {
    if !foldable(&n.op) || n.outputs.is_empty() {
        return None;
    }
    let outs: Vec<Tensor> = if let Op::Shape(ShapeOp::FullLike(v)) = &n.op {
        let info = &g.values[*n.outputs.first()? as usize];
        if info.shape.iter().product::<usize>() > FOLD_MAX {
            return None;
        }
        vec![Tensor::try_full(&info.shape, v.0, info.dtype).ok()?]
    } else {
        let ins: Vec<Tensor> = n.inputs.iter().map(|v| consts.get(v).cloned()).collect::<Option<_>>()?;
        let outs = trace::paused(|| tape::without_tapes(|| n.op.eval(&ins))).ok()?;
        let biggest_in = ins.iter().map(Tensor::numel).max().unwrap_or(0);
        if outs.iter().any(|t| t.numel() > FOLD_MAX.max(biggest_in)) {
            return None;
        }
        // a broadcast result is kept row-major: a fused kernel reading it
        // would copy it at every run. Any other view (a transpose, a slice)
        // keeps its strides: the ops after it (folded or run) then see the
        // layout eager sees, and a product's order of additions may depend
        // on it (the `gemm` crate's does), so that a row-major copy could
        // change the bits (the traced fuzz found a transposed constant's
        // folded product 6 away from eager's, by cancellation)
        let row_major = |t: Tensor| match t.is_contiguous() || !t.layout().is_broadcast() {
            true => Some(t),
            false => trace::paused(|| tape::without_tapes(|| t.contiguous())).ok(),
        };
        outs.into_iter().map(row_major).collect::<Option<Vec<Tensor>>>()?
    };
    // the plan's dtypes and shapes must hold
    let fits = outs.len() == n.outputs.len()
        && outs.iter().zip(&n.outputs).all(|(t, &v)| {
            let info = &g.values[v as usize];
            t.dtype() == info.dtype && t.shape() == &info.shape[..]
        });
    fits.then_some(outs)
}
