//! The sparse softmax cross-entropy keeps its softmax for its gradient
//! (the `xent_keeps_softmax` pass), as the eager op does under a tape.
//!
//! Eagerly, the op's kernel writes the softmax beside the losses while a
//! tape records it, and the rule multiplies that softmax by the upstream
//! gradient: one pass over the logits' shape each way. A traced step
//! records the gradient as an op of the logits
//! (`SparseSoftmaxCrossEntropyWithLogitsGrad`, differentiable again), so
//! its compiled graph made every row's maximum, exponentials and sum twice,
//! once in each direction: the traced step was slower than the eager one
//! (`[256, 8192]` `f32` logits, forward and backward, 2 threads: 1.38
//! against 1.11 ms; `[1024, 65]`: 0.100 against 0.068 ms).
//!
//! Here a cross-entropy node and a gradient node of the same labels and
//! logits become the eager pair: the forward node also outputs the softmax
//! (`SparseSoftmaxCrossEntropyWithSoftmax`, the kernel's `keep` path) and
//! the gradient node reads it in place of the logits
//! (`SparseSoftmaxCrossEntropyGradFromSoftmax`):
//!
//! ```text
//! before:                                          after:
//!   %2 = SparseSoftmaxCrossEntropyWithLogits(%0, %1)   %2, %9 = SparseSoftmaxCrossEntropyWithSoftmax(%0, %1)
//!   ...                                              ...
//!   %5 = SparseSoftmaxCrossEntropyWithLogitsGrad(%0, %1, %4)
//!                                                    %5 = SparseSoftmaxCrossEntropyGradFromSoftmax(%0, %9, %4)
//! ```
//!
//! Bit for bit: the kept softmax is the rows `e^(x − m) · (1 / s)` that
//! the gradient kernel computes from the logits, and the gradient is
//! `p · g` with `(p − 1) · g` at the label either way. Only `f32` and
//! `f64` logits pair (a half tensor's kept softmax would be rounded to its
//! dtype before the product, where the gradient from the logits rounds
//! once); graphs compiled for a GPU do not run this pass.

use std::sync::Arc;

use super::pipeline::PassCx;
use crate::error::{Error, Result};
use crate::function::graph::{Graph, ValueId};
use crate::ops::desc::{DynOp, NnOp, Op, Outputs};
use crate::tensor::{DType, Tensor};

/// The cross-entropy's losses and its softmax: inputs `(labels, logits)`.
struct WithSoftmax;

impl DynOp for WithSoftmax {
    fn name(&self) -> &'static str {
        "SparseSoftmaxCrossEntropyWithSoftmax"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let [labels, logits] = inputs else {
            return Err(arity(self.name(), 2, inputs.len()));
        };
        let (loss, p) = crate::ops::sparse_xent_and_softmax(labels, logits)?;
        Ok(smallvec::smallvec![loss, p])
    }
    fn stateful(&self) -> bool {
        false
    }
}

/// The gradient with respect to the logits from the kept softmax: inputs
/// `(labels, softmax, upstream gradient)`.
struct GradFromSoftmax;

impl DynOp for GradFromSoftmax {
    fn name(&self) -> &'static str {
        "SparseSoftmaxCrossEntropyGradFromSoftmax"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let [labels, p, g] = inputs else {
            return Err(arity(self.name(), 3, inputs.len()));
        };
        Ok(smallvec::smallvec![crate::ops::sparse_xent_grad_from_softmax(
            labels, p, g
        )?])
    }
    fn stateful(&self) -> bool {
        false
    }
}

fn arity(op: &'static str, want: usize, got: usize) -> Error {
    Error::invalid(op, format!("expects {want} inputs, got {got}"))
}

/// Pairs each cross-entropy node with the first gradient node of its
/// labels and logits; returns how many pairs were made.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    // (labels, logits) -> the forward node, and whether it is paired
    let mut forward: rustc_hash::FxHashMap<(ValueId, ValueId), (usize, bool)> = Default::default();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        match (&n.op, &n.inputs[..]) {
            (Op::Nn(NnOp::SparseSoftmaxCrossEntropy), &[labels, logits])
                if matches!(g.values[logits as usize].dtype, DType::F32 | DType::F64)
                    && matches!(g.values[labels as usize].dtype, DType::I32 | DType::I64) =>
            {
                forward.entry((labels, logits)).or_insert((i, false));
            }
            (Op::Nn(NnOp::SparseSoftmaxCrossEntropyGrad), &[labels, logits, _]) => {
                if let Some((f, paired)) = forward.get_mut(&(labels, logits))
                    && !*paired
                {
                    *paired = true;
                    pairs.push((*f, i));
                }
            }
            _ => {}
        }
    }
    for &(f, b) in &pairs {
        let logits = g.nodes[f].inputs[1];
        let info = g.values[logits as usize].clone();
        let p = g.add_value(info.dtype, &info.shape);
        let fw = &mut g.nodes[f];
        fw.op = Op::Dyn(Arc::new(WithSoftmax));
        fw.outputs.push(p);
        let bw = &mut g.nodes[b];
        bw.op = Op::Dyn(Arc::new(GradFromSoftmax));
        bw.inputs[1] = p;
    }
    pairs.len()
}
