//! Scalar factors of an optimizer step's gradients multiplied by its update
//! loop (the `scale_into_update` pass).
//!
//! A training step that clips its gradients to a global norm
//! (`clip_gradients_by_global_norm`, Keras's `global_clipnorm`) multiplies
//! every gradient by one scalar factor and hands the products to the
//! optimizer's `ApplyUpdates` node: a `Mul` per gradient, which the
//! elementwise fusion turns into kernels that read each gradient and write
//! its product out, and the update then reads the products back. Here
//! each `Mul` of a tensor and a scalar (same dtype, `f32` or `f64`, the
//! tensor of the product's shape) that only the update reads, at an input
//! the node says it can scale ([`DynOp::scalable_input`]: a dense gradient),
//! goes: the node reads the tensor and, appended to its inputs, the scalar
//! ([`DynOp::with_input_scales`]), and its update loop multiplies each
//! element as it reads it. One write and one read of every gradient fewer;
//! the squared sums of the norm still read the gradients as they were.
//!
//! ```text
//! before:                                  after:
//!   %20 = Mul(%7, %19)                       (gone)
//!   %21 = Mul(%9, %19)                       (gone)
//!   ApplyUpdates['adamw', ..](%20, %21)      ApplyUpdates['adamw', .., scaled=2](%7, %9, %19, %19)
//! ```
//!
//! Bit for bit: the update loop rounds each product once, in the
//! gradient's type, as the `Mul` did.

use super::pipeline::PassCx;
use crate::function::graph::{Graph, ValueId};
use crate::ops::desc::{Binary, Op};
use crate::tensor::DType;

/// Folds the factors into the nodes that can take them; returns how many
/// `Mul` nodes went.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let (made_by, reads) = super::makers_and_all_reads(g);
    let mut removed = vec![false; g.nodes.len()];
    let mut folded = 0;
    for i in 0..g.nodes.len() {
        let Op::Dyn(d) = &g.nodes[i].op else { continue };
        let d = d.clone();
        let mut scaled = vec![false; g.nodes[i].inputs.len()];
        let mut inputs = g.nodes[i].inputs.clone();
        let mut factors: Vec<ValueId> = Vec::new();
        let mut muls = Vec::new();
        for (k, v) in g.nodes[i].inputs.iter().copied().enumerate() {
            let m = made_by[v as usize];
            if m == usize::MAX || reads[v as usize] != 1 || removed[m] || !d.scalable_input(k) {
                continue;
            }
            let Some((x, s)) = tensor_times_scalar(g, m, v) else {
                continue;
            };
            scaled[k] = true;
            inputs[k] = x;
            factors.push(s);
            muls.push(m);
        }
        if muls.is_empty() {
            continue;
        }
        let Some(op) = d.with_input_scales(&scaled) else {
            continue;
        };
        inputs.extend(factors);
        let node = &mut g.nodes[i];
        node.op = Op::Dyn(op);
        node.inputs = inputs;
        for m in muls {
            removed[m] = true;
            folded += 1;
        }
    }
    if folded > 0 {
        let old = std::mem::take(&mut g.nodes);
        g.nodes = old
            .into_iter()
            .zip(removed)
            .filter_map(|(n, gone)| (!gone).then_some(n))
            .collect();
    }
    folded
}

/// Node `m`, which makes `v`, as `x · s`: a `Mul` of a tensor `x` of `v`'s
/// dtype (`f32` or `f64`) and shape and a scalar `s` of that dtype, either
/// way round.
fn tensor_times_scalar(g: &Graph, m: usize, v: ValueId) -> Option<(ValueId, ValueId)> {
    let node = &g.nodes[m];
    let (Op::Binary(Binary::Mul), &[a, b], &[y]) = (&node.op, &node.inputs[..], &node.outputs[..]) else {
        return None;
    };
    debug_assert_eq!(y, v);
    let out = &g.values[v as usize];
    if !matches!(out.dtype, DType::F32 | DType::F64) {
        return None;
    }
    let info = |x: ValueId| &g.values[x as usize];
    let tensor = |x: ValueId| info(x).dtype == out.dtype && info(x).shape == out.shape;
    let scalar = |x: ValueId| info(x).dtype == out.dtype && info(x).shape.is_empty();
    // (a scalar product of scalars stays: nothing to save)
    if out.shape.is_empty() {
        return None;
    }
    match () {
        _ if tensor(a) && scalar(b) => Some((a, b)),
        _ if tensor(b) && scalar(a) => Some((b, a)),
        _ => None,
    }
}
