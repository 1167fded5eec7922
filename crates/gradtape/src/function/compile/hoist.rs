//! Reductions of a gradient scheduled before the variable updates that
//! follow its product.
//!
//! A training step traced with a reduction of a weight's gradient after the
//! optimiser's updates (a gradient norm for logging, the bench's checksum)
//! reads that gradient last, after the updates of every weight have passed
//! through the caches: the `mlp_step` bench's `sum(|dW1|)` read its 1.6 MB
//! back from L3 after the updates of `W1` and `W2` (some 8 MB of traffic).
//! This pass moves such a fused reduction up, past the variable writes just
//! before it, to where its operands were made: it reads the gradient while
//! it is still in cache, and the update of `W1` after it finds it there too.
//!
//! Values are unchanged: the moved node is pure and reads values (a write
//! changes a variable, not a value a node holds), and it moves past
//! variable writes only, which make no values it reads.

use crate::function::graph::{Graph, Node};
use crate::function::variables::WriteVariable;
use crate::ops::desc::Op;

/// Outputs this many times smaller than the largest operand, or more, make
/// a node a reduction.
const SMALLER: usize = 16;

/// Whether `node` writes a variable (and makes no value).
fn writes_variable(node: &Node) -> bool {
    match &node.op {
        Op::Dyn(d) => {
            let any: &dyn std::any::Any = &**d;
            any.is::<WriteVariable>() && node.outputs.is_empty()
        }
        _ => false,
    }
}

/// Whether `node` is a fused reduction of a large operand.
fn reduction(g: &Graph, node: &Node) -> bool {
    let numel = |v: &u32| -> usize { g.values[*v as usize].shape.iter().product() };
    let largest = node.inputs.iter().map(numel).max().unwrap_or(0);
    node.op.name() == "Fused"
        && !node.op.is_stateful()
        && !node.outputs.is_empty()
        && node.outputs.iter().all(|v| numel(v).saturating_mul(SMALLER) <= largest)
}

/// Moves each fused reduction before the variable writes that directly
/// precede it; returns how many moved.
pub(crate) fn hoist_reductions(g: &mut Graph) -> usize {
    let mut moved = 0;
    for i in 1..g.nodes.len() {
        if !reduction(g, &g.nodes[i]) {
            continue;
        }
        let mut j = i;
        while j > 0 && writes_variable(&g.nodes[j - 1]) {
            j -= 1;
        }
        if j < i {
            let node = g.nodes.remove(i);
            g.nodes.insert(j, node);
            moved += 1;
        }
    }
    moved
}
