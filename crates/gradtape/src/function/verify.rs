//! The invariants of a [`Graph`], checked: what every compiler pass must
//! keep (see `compile::pipeline`, which checks after each pass).
//!
//! - every value a node or the graph names is in range of
//!   [`Graph::values`];
//! - every value is made once: an input of the graph, or an output of one
//!   node (never both, never two);
//! - every value is made before it is read (the nodes are in a
//!   topological order), and every output of the graph is made;
//! - nodes whose shapes follow cheaply from their op agree with their
//!   values' dtypes and shapes: a constant's tensor, elementwise ops (one
//!   output, of the broadcast shape of the inputs), casts, 2-D products,
//!   and fused kernels (the inputs and outputs their program expects).
//!
//! Values nothing makes and nothing reads are allowed (a pass that drops
//! a node leaves its values behind, until the graph is renumbered).

use super::compile;
use super::graph::{Graph, Node, ValueId};
use crate::error::{Error, Result};
use crate::ops::desc::Op;

impl Graph {
    /// Checks the graph's invariants (see the module docs); the error says
    /// which node or value breaks one.
    pub(crate) fn verify(&self) -> Result<()> {
        self.verify_structure().map_err(|why| Error::invalid("verify", why))
    }

    fn verify_structure(&self) -> std::result::Result<(), String> {
        let n = self.values.len();
        let in_range = |v: ValueId, what: &dyn Fn() -> String| -> std::result::Result<(), String> {
            match (v as usize) < n {
                true => Ok(()),
                false => Err(format!("{} names %{v}, out of range ({n} values)", what())),
            }
        };
        let mut made = vec![false; n];
        for &v in &self.inputs {
            in_range(v, &|| "an input of the graph".into())?;
            if std::mem::replace(&mut made[v as usize], true) {
                return Err(format!("input %{v} is an input twice"));
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let what = || format!("node {i} ({})", node.op.name());
            for &v in &node.inputs {
                in_range(v, &what)?;
                if !made[v as usize] {
                    return Err(format!("{} reads %{v} before it is made", what()));
                }
            }
            for &v in &node.outputs {
                in_range(v, &what)?;
                if std::mem::replace(&mut made[v as usize], true) {
                    return Err(format!("{} makes %{v}, which is already made", what()));
                }
            }
            self.check_node(node).map_err(|why| format!("{}: {why}", what()))?;
        }
        for &v in &self.outputs {
            in_range(v, &|| "an output of the graph".into())?;
            if !made[v as usize] {
                return Err(format!("output %{v} is never made"));
            }
        }
        Ok(())
    }

    /// The checks of one node's counts, dtypes and shapes that its op makes
    /// cheap.
    fn check_node(&self, node: &Node) -> std::result::Result<(), String> {
        let info = |v: ValueId| &self.values[v as usize];
        let arity = |ins: usize, outs: usize| -> std::result::Result<(), String> {
            match node.inputs.len() == ins && node.outputs.len() == outs {
                true => Ok(()),
                false => Err(format!(
                    "takes {} inputs and makes {} outputs, its op {ins} and {outs}",
                    node.inputs.len(),
                    node.outputs.len()
                )),
            }
        };
        let shape_is = |v: ValueId, want: &[usize]| -> std::result::Result<(), String> {
            match info(v).shape[..] == *want {
                true => Ok(()),
                false => Err(format!(
                    "%{v} has shape {:?}, its op makes {want:?}",
                    &info(v).shape[..]
                )),
            }
        };
        match &node.op {
            Op::Const(t) => {
                arity(0, 1)?;
                let o = node.outputs[0];
                if info(o).dtype != t.dtype() {
                    return Err(format!("%{o} is {}, the constant {}", info(o).dtype, t.dtype()));
                }
                shape_is(o, t.shape())
            }
            Op::Unary(_) => {
                arity(1, 1)?;
                shape_is(node.outputs[0], &info(node.inputs[0]).shape)
            }
            Op::Cast(d) => {
                arity(1, 1)?;
                let o = node.outputs[0];
                if info(o).dtype != *d {
                    return Err(format!("%{o} is {}, the cast makes {d}", info(o).dtype));
                }
                shape_is(o, &info(node.inputs[0]).shape)
            }
            Op::Binary(_) => {
                arity(2, 1)?;
                let (a, b) = (&info(node.inputs[0]).shape, &info(node.inputs[1]).shape);
                let s = broadcast(a, b).ok_or_else(|| format!("inputs of shapes {a:?} and {b:?} do not broadcast"))?;
                shape_is(node.outputs[0], &s)
            }
            Op::MatMul {
                transpose_a,
                transpose_b,
            } => {
                arity(2, 1)?;
                let (a, b) = (&info(node.inputs[0]).shape, &info(node.inputs[1]).shape);
                if a.len() != 2 || b.len() != 2 {
                    return Ok(());
                }
                let (m, ka) = if *transpose_a { (a[1], a[0]) } else { (a[0], a[1]) };
                let (kb, nn) = if *transpose_b { (b[1], b[0]) } else { (b[0], b[1]) };
                if ka != kb {
                    return Err(format!("a product of {a:?} and {b:?} (shared dims {ka} and {kb})"));
                }
                shape_is(node.outputs[0], &[m, nn])
            }
            _ => compile::check_node(self, node),
        }
    }
}

/// The broadcast shape of `a` and `b` (numpy's rule), if they broadcast.
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
    (0..r)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}
