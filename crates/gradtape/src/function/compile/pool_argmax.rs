//! Merging nodes that share their work (the `pool_argmax` pass): a
//! `MaxPool` and a `MaxPoolArgmax` of one input and attributes (the
//! output, and the positions its gradient reads) come from one pass of the
//! pooling kernel, so the pair becomes one node with both outputs, where
//! the first of the two was. Any such pair merges (any window, stride,
//! padding and dtype), wherever the traced gradient put its second node:
//!
//! ```text
//! before:                                after:
//!   %1 = MaxPool[ksize=[3, 3], ..](%0)     %1, %2 = MaxPoolWithArgmax[ksize=[3, 3], ..](%0)
//!   ...                                    ...
//!   %2 = MaxPoolArgmax[ksize=[3, 3], ..](%0)
//! ```

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::pipeline::PassCx;
use crate::error::Result;
use crate::function::graph::{Graph, Node, ValueId};
use crate::ops::desc::{DynOp, NnOp, Op, Outputs, PoolAttrs};
use crate::tensor::Tensor;

/// Max pooling's output and positions, as one node.
struct MaxPoolWithArgmax(PoolAttrs);

impl DynOp for MaxPoolWithArgmax {
    fn name(&self) -> &'static str {
        "MaxPoolWithArgmax"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let x = crate::ops::desc::one_input("MaxPoolWithArgmax", inputs)?;
        let (y, arg) = crate::ops::max_pool2d_with_argmax(x, self.0)?;
        Ok(smallvec::smallvec![y, arg])
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[ksize={:?}, strides={:?}, padding={:?}]",
            self.0.ksize, self.0.strides, self.0.padding
        )
    }
}

/// Merges pairs in place; returns how many pairs were merged.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    // (input, attributes) -> (node index of the pool, of the argmax)
    let mut pairs: FxHashMap<(ValueId, PoolAttrs), (Option<usize>, Option<usize>)> = FxHashMap::default();
    for (i, n) in g.nodes.iter().enumerate() {
        let (Op::Nn(NnOp::MaxPool(p) | NnOp::MaxPoolArgmax(p)), [x]) = (&n.op, &n.inputs[..]) else {
            continue;
        };
        let e = pairs.entry((*x, *p)).or_default();
        match &n.op {
            Op::Nn(NnOp::MaxPool(_)) if e.0.is_none() => e.0 = Some(i),
            Op::Nn(NnOp::MaxPoolArgmax(_)) if e.1.is_none() => e.1 = Some(i),
            _ => {}
        }
    }
    let mut merged_at: FxHashMap<usize, Node> = FxHashMap::default();
    let mut removed = vec![false; g.nodes.len()];
    for (_, pair) in pairs {
        let (Some(pool), Some(arg)) = pair else { continue };
        let Op::Nn(NnOp::MaxPool(p)) = &g.nodes[pool].op else {
            continue;
        };
        let node = Node {
            op: Op::Dyn(Arc::new(MaxPoolWithArgmax(*p))),
            inputs: g.nodes[pool].inputs.clone(),
            outputs: smallvec::smallvec![g.nodes[pool].outputs[0], g.nodes[arg].outputs[0]],
            site: None,
        };
        removed[pool] = true;
        removed[arg] = true;
        merged_at.insert(pool.min(arg), node);
    }
    let n = merged_at.len();
    if n == 0 {
        return 0;
    }
    let old = std::mem::take(&mut g.nodes);
    for (i, node) in old.into_iter().enumerate() {
        if let Some(m) = merged_at.remove(&i) {
            g.nodes.push(m);
        }
        if !removed[i] {
            g.nodes.push(node);
        }
    }
    n
}
