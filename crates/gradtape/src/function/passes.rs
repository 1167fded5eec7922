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

use std::hash::BuildHasher;

use rustc_hash::{FxBuildHasher, FxHashMap};
use smallvec::SmallVec;

use super::graph::{Graph, Node, ValueId, ValueInfo};
use crate::ops::desc::{Binary, Op};
use crate::tensor::{with_dtype, DType, Element, Tensor};

/// The passes every traced graph goes through, in order. (vmap's graph
/// cache, `vmap/cache.rs`, keeps their result for graphs of one structure:
/// it relies on them deciding from the structure and from which small
/// constants are equal, never from other values of constants. A pass that
/// reads constants' values must add what it reads to that cache's key.)
pub(crate) fn optimize(g: &mut Graph) {
    cse(g);
    dce(g);
}

/// Removes nodes whose outputs nothing uses (and that have no effects), then
/// renumbers the values. A node whose output shapes the values decide
/// (`unique`, `argwhere`, `bincount`, the sorted segment ops) stays: the
/// traced code may have read its shape alone (a step taken or not by
/// it), and the graph run checks that shape against the trace's (see
/// `Graph::run`), so that a call where it changes is traced again.
pub fn dce(g: &mut Graph) {
    let mut live = vec![false; g.values.len()];
    for &o in &g.outputs {
        live[o as usize] = true;
    }
    let mut keep = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate().rev() {
        let shapes_from_values = matches!(&n.op, Op::Sort(s) if !s.static_shape());
        if n.op.is_stateful() || shapes_from_values || n.outputs.iter().any(|&o| live[o as usize]) {
            keep[i] = true;
            for &v in &n.inputs {
                live[v as usize] = true;
            }
        }
    }
    // the kept nodes move to the new graph (no descriptor is cloned)
    let nodes: Vec<Node> = std::mem::take(&mut g.nodes)
        .into_iter()
        .zip(keep)
        .filter_map(|(n, k)| k.then_some(n))
        .collect();
    let (inputs, outputs) = (std::mem::take(&mut g.inputs), std::mem::take(&mut g.outputs));
    *g = renumbered(&g.values, nodes, &inputs, &outputs);
}

/// A small constant's identity for CSE: dtype, shape and the bits of its
/// elements.
pub(crate) type ConstKey = (DType, Vec<usize>, Vec<u64>);

/// The bits of a small constant, to merge equal ones (`None`: too large,
/// or complex, to merge by value). Each element's own bits: an `i64` by
/// its 64 bits (through `f64`, values past 2^53 that differ in their low
/// bits shared a key, and the traced fuzz found a folded product merged
/// into its operand: `(2^63 - 6) · 3` came out `2^63 - 6`), the others
/// exactly through `f64`.
pub(crate) fn const_key(t: &Tensor) -> Option<ConstKey> {
    if t.numel() > 16 || t.dtype().is_complex() {
        return None;
    }
    if t.dtype() == DType::I64 {
        let bits = t.values::<i64>("cse").ok()?.iter().map(|&v| v as u64).collect();
        return Some((t.dtype(), t.shape().to_vec(), bits));
    }
    let bits = with_dtype!(t.dtype(), T => t.values::<T>("cse").ok()?.iter().map(|v| v.to_f64().to_bits()).collect());
    Some((t.dtype(), t.shape().to_vec(), bits))
}

/// Whether `op`'s two inputs may be swapped without changing a bit of its
/// result (the sign of a zero and infinities included).
fn commutes(op: &Op) -> bool {
    matches!(op, Op::Binary(Binary::Add | Binary::Mul))
}

/// A node's inputs as CSE compares them: for an op whose two inputs
/// commute, in increasing order.
fn cse_inputs(n: &Node) -> SmallVec<[ValueId; 2]> {
    let mut inputs = n.inputs.clone();
    if commutes(&n.op) && inputs.len() == 2 && inputs[0] > inputs[1] {
        inputs.swap(0, 1);
    }
    inputs
}

/// Merges nodes that compute the same thing from the same values.
pub fn cse(g: &mut Graph) {
    let mut replace: Vec<ValueId> = (0..g.values.len() as ValueId).collect();
    // a node's identity (its descriptor and its inputs) is
    // hashed, and the kept nodes with that hash are compared with it in
    // place: no descriptor is cloned. Of the kept nodes with one identity,
    // the latest stands for it.
    let mut seen: FxHashMap<u64, SmallVec<[u32; 1]>> = FxHashMap::default();
    let mut consts: FxHashMap<ConstKey, ValueId> = FxHashMap::default();
    let mut nodes: Vec<Node> = Vec::with_capacity(g.nodes.len());
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
            let inputs = cse_inputs(&n);
            let hash = FxBuildHasher.hash_one((&n.op, &inputs));
            let same = seen.entry(hash).or_default();
            let at = same.iter().position(|&p| {
                let m = &nodes[p as usize];
                m.op == n.op && cse_inputs(m) == inputs
            });
            match at {
                Some(i) if nodes[same[i] as usize].outputs.len() == n.outputs.len() => {
                    for (&o, &p) in n.outputs.iter().zip(&nodes[same[i] as usize].outputs) {
                        replace[o as usize] = p;
                    }
                    continue;
                }
                Some(i) => same[i] = nodes.len() as u32,
                None => same.push(nodes.len() as u32),
            }
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
    let nodes = nodes.iter().map(|&i| g.nodes[i].clone()).collect();
    renumbered(&g.values, nodes, inputs, outputs)
}

/// A graph of `nodes` (over values described by `values`), with the given
/// inputs and outputs, its values renumbered in order of appearance.
fn renumbered(values: &[ValueInfo], mut nodes: Vec<Node>, inputs: &[ValueId], outputs: &[ValueId]) -> Graph {
    const NEW: ValueId = ValueId::MAX;
    let mut map: Vec<ValueId> = vec![NEW; values.len()];
    let mut out = Graph::default();
    let mut add = |out: &mut Graph, v: ValueId| -> ValueId {
        let m = &mut map[v as usize];
        if *m == NEW {
            out.values.push(values[v as usize].clone());
            *m = (out.values.len() - 1) as ValueId;
        }
        *m
    };
    for &v in inputs {
        let nv = add(&mut out, v);
        out.inputs.push(nv);
    }
    for n in nodes.iter_mut() {
        for v in n.inputs.iter_mut().chain(n.outputs.iter_mut()) {
            *v = add(&mut out, *v);
        }
    }
    out.nodes = nodes;
    out.outputs = outputs.iter().map(|&v| add(&mut out, v)).collect();
    out
}
