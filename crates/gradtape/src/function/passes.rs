//! Graph passes: dead-code elimination, common-subexpression elimination,
//! and the renumbering helper both use.
//!
//! - **DCE** keeps a node when it makes a value the graph returns or another
//!   kept node reads, or when its op is stateful (a variable write, a call
//!   that writes): an unused branch of the traced code costs nothing.
//! - **CSE** merges a node into an earlier one with an equal descriptor
//!   ([`Op`]'s `Eq`: same op, same attributes) and the same inputs (for
//!   `Add` and `Mul`, the same two inputs in either order: IEEE sums and
//!   products do not depend on it); stateful ops are never merged. Small
//!   constants (up to 16 elements) are merged by value.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::graph::{Graph, Node, ValueId};
use crate::ops::desc::{Binary, Op};
use crate::tensor::{with_dtype, DType, Element, Tensor};

/// The passes every traced graph goes through, in order.
pub(crate) fn optimize(g: &mut Graph) {
    cse(g);
    dce(g);
}

/// Removes nodes whose outputs nothing uses (and that have no effects), then
/// renumbers the values.
pub fn dce(g: &mut Graph) {
    let mut live = vec![false; g.values.len()];
    for &o in &g.outputs {
        live[o as usize] = true;
    }
    let mut keep = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().rev() {
        if n.op.is_stateful() || n.outputs.iter().any(|&o| live[o as usize]) {
            keep[i] = true;
            for &v in &n.inputs {
                live[v as usize] = true;
            }
        }
    }
    let kept: Vec<usize> = (0..g.nodes.len()).filter(|&i| keep[i]).collect();
    *g = extract(g, &kept, &g.inputs.clone(), &g.outputs.clone());
}

/// The bits of a small constant, to merge equal ones.
fn const_key(t: &Tensor) -> Option<(DType, Vec<usize>, Vec<u64>)> {
    if t.numel() > 16 || t.dtype().is_complex() {
        return None;
    }
    let bits = with_dtype!(t.dtype(), T => t.values::<T>("cse").ok()?.iter().map(|v| v.to_f64().to_bits()).collect());
    Some((t.dtype(), t.shape().to_vec(), bits))
}

/// A node's identity for CSE: its descriptor and its inputs.
type NodeKey = (Op, SmallVec<[ValueId; 2]>);

/// Whether `op`'s two inputs may be swapped without changing a bit of its
/// result (the sign of a zero and infinities included).
fn commutes(op: &Op) -> bool {
    matches!(op, Op::Binary(Binary::Add | Binary::Mul))
}

/// Merges nodes that compute the same thing from the same values.
pub fn cse(g: &mut Graph) {
    let mut replace: Vec<ValueId> = (0..g.values.len() as ValueId).collect();
    let mut seen: FxHashMap<NodeKey, SmallVec<[ValueId; 1]>> = FxHashMap::default();
    let mut consts: FxHashMap<(DType, Vec<usize>, Vec<u64>), ValueId> = FxHashMap::default();
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for mut n in std::mem::take(&mut g.nodes) {
        for v in n.inputs.iter_mut() {
            *v = replace[*v as usize];
        }
        if let Op::Const(t) = &n.op
            && let Some(k) = const_key(t)
        {
            if let Some(&prev) = consts.get(&k) {
                replace[n.outputs[0] as usize] = prev;
                continue;
            }
            consts.insert(k, n.outputs[0]);
        }
        if !n.op.is_stateful() {
            let mut inputs = n.inputs.clone();
            if commutes(&n.op) && inputs.len() == 2 && inputs[0] > inputs[1] {
                inputs.swap(0, 1);
            }
            let key = (n.op.clone(), inputs);
            if let Some(prev) = seen.get(&key)
                && prev.len() == n.outputs.len()
            {
                for (&o, &p) in n.outputs.iter().zip(prev) {
                    replace[o as usize] = p;
                }
                continue;
            }
            seen.insert(key, n.outputs.clone());
        }
        nodes.push(n);
    }
    g.nodes = nodes;
    for o in g.outputs.iter_mut() {
        *o = replace[*o as usize];
    }
}

/// A new graph made of the nodes `nodes` of `g` (in that order), with the
/// given inputs and outputs, its values renumbered in order of appearance.
/// Every value a kept node reads must be an input or a kept node's output.
pub(crate) fn extract(g: &Graph, nodes: &[usize], inputs: &[ValueId], outputs: &[ValueId]) -> Graph {
    let mut map: FxHashMap<ValueId, ValueId> = FxHashMap::default();
    let mut out = Graph::default();
    let add = |out: &mut Graph, map: &mut FxHashMap<ValueId, ValueId>, v: ValueId| -> ValueId {
        *map.entry(v).or_insert_with(|| {
            let info = &g.values[v as usize];
            out.add_value(info.dtype, &info.shape)
        })
    };
    for &v in inputs {
        let nv = add(&mut out, &mut map, v);
        out.inputs.push(nv);
    }
    for &i in nodes {
        let n = &g.nodes[i];
        let ins = n.inputs.iter().map(|&v| add(&mut out, &mut map, v)).collect();
        let outs = n.outputs.iter().map(|&v| add(&mut out, &mut map, v)).collect();
        out.nodes.push(Node {
            op: n.op.clone(),
            inputs: ins,
            outputs: outs,
        });
    }
    out.outputs = outputs.iter().map(|&v| add(&mut out, &mut map, v)).collect();
    out
}
