//! Whether one traced graph serves every size of a signature's `None` dims.
//!
//! A trace runs the closure on the call's own tensors, so every number the
//! closure derives from a shape (a mean's count, a reshape's or a
//! broadcast's target, the shape of a constant it makes, a Rust branch on a
//! size) is fixed in the graph. A graph with no such number serves every
//! size of an [`input_signature`](super::FunctionOptions::input_signature)'s
//! `None` dims: its nodes re-derive their shapes from their inputs when it
//! runs, as eager ops do. A graph with one would give the traced number at
//! other sizes: a mean dividing by the traced count, a silently wrong
//! answer.
//!
//! **How it is decided.** After the first trace of a signature with `None`
//! dims, the closure is traced once more (the *probe*) on tensors whose
//! `None` dims are one larger (rows repeated from the call's own tensors, so
//! indices and labels stay valid). If the two graphs are the same node for
//! node (same ops, same attributes, same constants, values connected the
//! same way; shapes aside), no number in them depends on those dims, and
//! the graph serves every size. Otherwise (or if the probe fails) the
//! function is *specialised*: each size gets a trace of its own, as without
//! a signature, so the answer is always the eager one.
//!
//! A size can still hide from two probes (a Rust `if` comparing a size
//! with a threshold between them): the module docs of
//! [`function`](mod@crate::function) say that Rust code on shapes is fixed
//! at trace time.

use super::graph::Graph;
use super::structure::Leaf;
use super::TensorSpec;
use crate::error::Result;
use crate::ops::desc::Op;
use crate::tensor::{Element, Tensor};

/// Whether a signature has a dim of any size.
pub(crate) fn has_unknown_dims(spec: &TensorSpec) -> bool {
    spec.shape.iter().any(Option::is_none)
}

/// The probe's tensors: each tensor leaf grown by one along the dims its
/// spec leaves unknown (`specs` has one entry per tensor leaf, `None` for a
/// leaf kept as it is).
pub(crate) fn probe_tensors(leaves: &[Leaf<'_>], specs: &[Option<&TensorSpec>]) -> Result<Vec<Tensor>> {
    let tensors = leaves.iter().filter_map(|l| match l {
        Leaf::Tensor(t) => Some(*t),
        _ => None,
    });
    tensors
        .zip(specs)
        .map(|(t, spec)| {
            let mut t = t.clone();
            let Some(spec) = spec else { return Ok(t) };
            for (axis, d) in spec.shape.iter().enumerate() {
                if d.is_none() {
                    t = grow(&t, axis)?;
                }
            }
            Ok(t)
        })
        .collect()
}

/// `t` with one more row along `axis`: its first row again, or zeros when
/// it has none.
fn grow(t: &Tensor, axis: usize) -> Result<Tensor> {
    let ax = axis as isize;
    let row = if t.shape()[axis] == 0 {
        let mut shape = t.shape().to_vec();
        shape[axis] = 1;
        Tensor::try_zeros(&shape, t.dtype())?
    } else {
        t.narrow(ax, 0, 1)?
    };
    Tensor::concat(&[t, &row], ax)
}

/// Whether two traces of one closure are the same graph, shapes aside:
/// the same nodes in the same order over the same value numbers, ops equal
/// with their attributes, constants equal bit for bit, nested graphs the
/// same in turn.
pub(crate) fn same_graph(a: &Graph, b: &Graph) -> bool {
    a.inputs == b.inputs
        && a.outputs == b.outputs
        && a.values.len() == b.values.len()
        && a.values.iter().zip(&b.values).all(|(x, y)| x.dtype == y.dtype && x.shape.len() == y.shape.len())
        && a.nodes.len() == b.nodes.len()
        && a.nodes.iter().zip(&b.nodes).all(|(m, n)| {
            m.inputs == n.inputs && m.outputs == n.outputs && same_op(&m.op, &n.op)
        })
}

fn same_op(a: &Op, b: &Op) -> bool {
    match (a, b) {
        (Op::Const(x), Op::Const(y)) => same_const(x, y),
        (Op::Dyn(x), Op::Dyn(y)) => {
            let (sx, sy) = (x.subgraphs(), y.subgraphs());
            x.name() == y.name()
                && a.to_string() == b.to_string()
                && sx.len() == sy.len()
                && sx.iter().zip(&sy).all(|((lx, gx), (ly, gy))| lx == ly && same_graph(gx, gy))
        }
        _ => a == b,
    }
}

/// Whether two constants hold the same elements, bit for bit.
fn same_const(x: &Tensor, y: &Tensor) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn grow_repeats_the_first_row_or_adds_zeros() -> Result<()> {
        let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
        assert_eq!(grow(&t, 0)?.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0]);
        assert_eq!(grow(&t, 1)?.to_vec::<f32>()?, vec![1.0, 2.0, 1.0, 3.0, 4.0, 3.0]);
        let empty = Tensor::try_zeros(&[0, 3], DType::I64)?;
        assert_eq!(grow(&empty, 0)?.shape(), &[1, 3]);
        Ok(())
    }

    #[test]
    fn constants_compare_by_bits() {
        let a = Tensor::vector(&[0.0f64, 1.0]);
        assert!(same_const(&a, &Tensor::vector(&[0.0f64, 1.0])));
        assert!(!same_const(&a, &Tensor::vector(&[-0.0f64, 1.0])));
        assert!(!same_const(&a, &Tensor::vector(&[0.0f32, 1.0])));
        assert!(!same_const(&a, &Tensor::vector(&[0.0f64, 1.0, 2.0])));
    }
}
