//! Reductions of a gradient scheduled before the variable updates that
//! follow its product.
//!
//! A training step traced with a reduction of a weight's gradient after the
//! optimiser's updates (a gradient norm for logging, a checksum) reads that
//! gradient last, after the updates of every weight have passed through
//! the caches, and reads it back from a slower cache level. This pass moves
//! such a fused reduction (a [`Fused`] node whose outputs are at least
//! [`SMALLER`] times smaller than its largest operand) up, past the
//! variable writes just before it: it reads the gradient while it is still
//! in cache, and the update after it finds it there too. Any fused
//! reduction after variable writes moves, not only a gradient's:
//!
//! ```text
//! before:                                after:
//!   WriteVariable[var=w](%0)               %1: f32[32] = Fused[abs, sum over rows](%0)
//!   %1: f32[32] = Fused[abs, sum ...](%0)  WriteVariable[var=w](%0)
//! ```
//!
//! Values are unchanged: the moved node is pure and reads values (a write
//! changes a variable, not a value a node holds), and it moves past
//! variable writes only, which make no values it reads.

use super::fuse::Fused;
use super::pipeline::PassCx;
use crate::function::graph::{Graph, Node};
use crate::function::variables::WriteVariable;

/// Outputs this many times smaller than the largest operand, or more, make
/// a node a reduction.
const SMALLER: usize = 16;

/// Whether `node` writes a variable (and makes no value).
fn writes_variable(node: &Node) -> bool {
    node.op.as_dyn::<WriteVariable>().is_some() && node.outputs.is_empty()
}

/// Whether `node` is a fused reduction of a large operand.
fn reduction(g: &Graph, node: &Node) -> bool {
    let numel = |v: &u32| -> usize { g.values[*v as usize].shape.iter().product() };
    let largest = node.inputs.iter().map(numel).max().unwrap_or(0);
    node.op.as_dyn::<Fused>().is_some()
        && !node.op.is_stateful()
        && !node.outputs.is_empty()
        && node.outputs.iter().all(|v| numel(v).saturating_mul(SMALLER) <= largest)
}

/// Moves each fused reduction before the variable writes that directly
/// precede it; returns how many moved.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
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
