//! Whether one traced graph serves several sizes of a signature's `None`
//! dims.
//!
//! A trace runs the closure on the call's own tensors, so every number the
//! closure derives from a shape (a mean's count, a reshape's or a
//! broadcast's target, the shape of a constant it makes, a Rust branch on a
//! size) is fixed in the graph. A graph with no such number serves other
//! sizes of an [`input_signature`](super::FunctionOptions::input_signature)'s
//! `None` dims: its nodes re-derive their shapes from their inputs when it
//! runs, as eager ops do. A graph with one would give the traced number at
//! other sizes: a mean dividing by the traced count, a silently wrong
//! answer.
//!
//! **How it is decided.** A call at a size no graph of its signature has
//! served yet traces the closure at that size, as a check. If that trace
//! is the same graph as one already made, node for node (same ops, same
//! attributes, same constants, values connected the same way; shapes
//! aside), that graph serves the size from then on: no number in it
//! depends on the difference, whatever the closure does with sizes. If
//! not, the new trace becomes a graph of its own. So one graph serves every
//! size of a function whose graph does not depend on them (one trace
//! counted, one check per new size), each size of a mean gets its own
//! graph, and no call ever runs a graph traced for numbers of another size.

use super::graph::Graph;
use super::TensorSpec;
use crate::ops::desc::Op;
use crate::tensor::{Element, Tensor};

/// Whether a signature has a dim of any size.
pub(crate) fn has_unknown_dims(spec: &TensorSpec) -> bool {
    spec.shape.iter().any(Option::is_none)
}

/// Whether two traces of one closure are the same graph, shapes aside:
/// the same nodes in the same order over the same value numbers, ops equal
/// with their attributes, constants equal bit for bit, nested graphs the
/// same in turn.
pub(crate) fn same_graph(a: &Graph, b: &Graph) -> bool {
    a.inputs == b.inputs
        && a.outputs == b.outputs
        && a.values.len() == b.values.len()
        && a.values
            .iter()
            .zip(&b.values)
            .all(|(x, y)| x.dtype == y.dtype && x.shape.len() == y.shape.len())
        && a.nodes.len() == b.nodes.len()
        && a.nodes
            .iter()
            .zip(&b.nodes)
            .all(|(m, n)| m.inputs == n.inputs && m.outputs == n.outputs && same_op(&m.op, &n.op))
}

fn same_op(a: &Op, b: &Op) -> bool {
    match (a, b) {
        (Op::Const(x), Op::Const(y)) => same_const(x, y),
        (Op::Dyn(x), Op::Dyn(y)) => {
            let (sx, sy) = (super::graph::nested(&**x), super::graph::nested(&**y));
            x.name() == y.name()
                && a.to_string() == b.to_string()
                && sx.len() == sy.len()
                && sx
                    .iter()
                    .zip(&sy)
                    .all(|((lx, gx), (ly, gy))| lx == ly && same_graph(gx, gy))
        }
        _ => a == b,
    }
}

/// Whether two constants hold the same elements, bit for bit.
pub fn same_const(x: &Tensor, y: &Tensor) -> bool {
    fn bits<T: Element>(v: T) -> (u64, u64) {
        let c = v.to_c128();
        (c.re.to_bits(), c.im.to_bits())
    }
    if x.id() == y.id() {
        return true;
    }
    x.dtype() == y.dtype()
        && x.shape() == y.shape()
        && crate::tensor::dtype::with_dtype!(x.dtype(), T => {
            match (x.values::<T>("function"), y.values::<T>("function")) {
                (Ok(p), Ok(q)) => p.iter().zip(q.iter()).all(|(&u, &v)| bits(u) == bits(v)),
                _ => false,
            }
        })
}
