//! Repeated reads of one variable with no write between them, as one read
//! (the `merge_reads` pass).
//!
//! ```text
//! before:                                  after:
//!   %1 = ReadVariable['u']                   %1 = ReadVariable['u']
//!   %2 = MatMul(%0, %1)                      %2 = MatMul(%0, %1)
//!   %3 = ReadVariable['u']                   %4 = MatMul(%2, %1)
//!   %4 = MatMul(%2, %3)
//! ```
//!
//! A layer called in a loop reads its weights once per call: an RNN cell
//! unrolled over 50 steps reads its kernel, recurrent kernel and bias 50
//! times each. Each read is cheap, but the passes that share work between
//! the readers of one operand see 50 different operands: the recurrent
//! kernel's transposed copy for the backward steps' `dh = g Uᵀ`
//! (`transpose_once`), the input projections `x_t W` stacked into one
//! product (`stack_products`). Reading a variable twice with no write in
//! between gives the same value, so the later reads are dropped and their
//! readers read the first.
//!
//! A read is a stateful node that the generic common-subexpression pass
//! never merges; this pass merges reads only, and conservatively: any
//! other stateful node between two reads (a write, to any variable, or an
//! op with effects of its own, such as a loop whose body writes) ends the
//! run of reads that can merge.

use rustc_hash::FxHashMap;

use super::pipeline::PassCx;
use crate::function::graph::{Graph, ValueId};
use crate::function::variables::ReadVariable;
use crate::tensor::TensorId;

/// Merges each read into the latest earlier read of the same variable
/// when no other stateful node lies between them; returns how many reads
/// were dropped.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let mut replace: Vec<ValueId> = (0..g.values.len() as ValueId).collect();
    // per variable (its handle): the value of its latest read
    let mut reads: FxHashMap<TensorId, ValueId> = FxHashMap::default();
    let before = g.nodes.len();
    let nodes = std::mem::take(&mut g.nodes);
    for mut n in nodes {
        for v in n.inputs.iter_mut() {
            *v = replace[*v as usize];
        }
        if let Some(r) = n.op.as_dyn::<ReadVariable>()
            && let [out] = n.outputs[..]
        {
            let handle = r.0.handle();
            match reads.get(&handle) {
                Some(&first) if g.values[first as usize] == g.values[out as usize] => {
                    replace[out as usize] = first;
                    continue;
                }
                _ => {
                    reads.insert(handle, out);
                }
            }
        } else if n.op.is_stateful() {
            reads.clear();
        }
        g.nodes.push(n);
    }
    for o in g.outputs.iter_mut() {
        *o = replace[*o as usize];
    }
    before - g.nodes.len()
}
