//! The captures of a control op's sub-graphs: one list for all of them,
//! and each graph's inputs put in its order.

use crate::function::graph::Graph;
use crate::tensor::{Tensor, TensorId};

/// A graph whose inputs are `n_args` arguments then `own` captures, given
/// inputs `n_args` arguments then `all` captures (a superset, in another
/// order): unused ones become inputs nothing reads.
pub(super) fn with_captures(mut g: Graph, n_args: usize, own: &[Tensor], all: &[Tensor]) -> Graph {
    let own_ids: Vec<TensorId> = own.iter().map(Tensor::id).collect();
    let mut inputs = g.inputs[..n_args].to_vec();
    for t in all {
        match own_ids.iter().position(|&i| i == t.id()) {
            Some(k) => inputs.push(g.inputs[n_args + k]),
            None => inputs.push(g.add_value(t.dtype(), t.shape())),
        }
    }
    g.inputs = inputs;
    g
}

/// The captures of several traces, each once, in order of appearance.
pub(super) fn union(lists: &[&[Tensor]]) -> Vec<Tensor> {
    let mut out: Vec<Tensor> = Vec::new();
    for l in lists {
        for t in *l {
            if !out.iter().any(|o| o.id() == t.id()) {
                out.push(t.clone());
            }
        }
    }
    out
}
