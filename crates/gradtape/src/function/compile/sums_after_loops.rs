//! Sums a loop carries computed after it (the `sums_after_loops` pass).
//!
//! ```text
//! before:                                  after:
//!   %9.. = While(%dW0, ...)                  %9.. = While(%dW0, ...)
//!     body: %p = MatMul[transpose_a](%x, %dz)   body: returns %dW (unchanged), %x, %dz
//!           %dW' = Add(%dW, %p)              (after its iterations, in the node:
//!                                             dW = dW0 + [x_1; …; x_n]ᵀ [dz_1; …; dz_n])
//! ```
//!
//! A `while_loop` node whose body carries a variable that only
//! accumulates products over rows (a loop gradient's weight gradients,
//! `dW ← dW + x_tᵀ dz_t`) or sums over leading axes (a bias gradient,
//! `db ← db + colsum(dz_t)`) becomes a loop that stacks the operands and
//! sums them after its iterations in one product over all their rows
//! (the mechanism, and what is and is not taken out, is
//! `function/control/sums_after.rs`). The node keeps its inputs and
//! outputs; the loop's body, compiled on its own, loses the products and
//! the additions. A loop in a loop's body is rewritten when that body is
//! compiled.
//!
//! Values: each sum is added in another order (the product kernel's over
//! the stacked rows, instead of one iteration after the other), so a
//! graph with a rewritten loop [reassociates](super::Executable::reassociates):
//! equal to rounding, not bit for bit.

use std::sync::Arc;

use super::pipeline::PassCx;
use crate::function::control::WhileOp;
use crate::function::graph::Graph;
use crate::ops::desc::Op;

/// Rewrites each loop of `g` that carries sums it can take out; returns
/// how many terms it took out of loops.
pub(crate) fn run(g: &mut Graph, cx: &mut PassCx) -> usize {
    let mut taken = 0;
    for node in &mut g.nodes {
        let Some((op, n)) = node.op.as_dyn::<WhileOp>().and_then(WhileOp::with_sums_after) else {
            continue;
        };
        node.op = Op::Dyn(Arc::new(op));
        taken += n;
    }
    cx.reassociated += taken;
    taken
}
