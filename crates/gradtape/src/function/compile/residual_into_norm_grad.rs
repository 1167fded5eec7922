//! A residual gradient added in the layer-norm gradient's own pass (the
//! `residual_into_norm_grad` pass).
//!
//! In a pre-LayerNorm residual block, `x + f(LN(x))`, the gradient of `x`
//! is the residual branch's gradient plus the normalisation's `dx`: an
//! `Add` of a tensor and the `dx` part of `LayerNormGrad`'s packed vector
//! (a slice of it, reshaped to `x`'s shape). That addition is one more
//! pass over the tensor (two reads, one write). Where `dx` is read by that
//! `Add` alone, and the other operand (same shape and dtype) is made
//! before the gradient node, the gradient node adds it to `dx` as it
//! writes each row ([`LayerNormGradAdd`]) and the `Add` goes: its readers
//! read the reshaped slice instead, which now holds the sum.
//!
//! ```text
//! before:                                      after:
//!   %7 = LayerNormGrad[..](%1, %2, %6)           %7 = LayerNormGradAdd[..](%1, %2, %6, %5)
//!   %8 = Slice[begin=[0], size=[m]](%7)          %8 = Slice[begin=[0], size=[m]](%7)
//!   %9 = Reshape[[r, n]](%8)                     %9 = Reshape[[r, n]](%8)
//!   %10 = Add(%5, %9)                            (readers of %10 read %9)
//! ```
//!
//! Bit for bit: each element of the sum is rounded once, as the `Add`
//! rounded it (addition commutes exactly).

use std::sync::Arc;

use super::pipeline::PassCx;
use crate::error::{Error, Result};
use crate::function::graph::{Graph, ValueId};
use crate::ops::desc::{Binary, DynOp, NnOp, Op, Outputs, ShapeOp};
use crate::tensor::Tensor;

/// `LayerNormGrad` with a tensor added to `dx`: inputs `(x[, gamma], dy,
/// add)`, output the packed `dx + add`, `dgamma`, `dbeta`.
pub(crate) struct LayerNormGradAdd {
    /// As `NnOp::LayerNormGrad`.
    pub(crate) axes: usize,
    /// As `NnOp::LayerNormGrad`.
    pub(crate) eps: f64,
    /// As `NnOp::LayerNormGrad`.
    pub(crate) gamma: bool,
}

impl DynOp for LayerNormGradAdd {
    fn name(&self) -> &'static str {
        "LayerNormGradAdd"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let (x, gamma, dy, add) = match (self.gamma, inputs) {
            (true, [x, g, dy, a]) => (x, Some(g), dy, a),
            (false, [x, dy, a]) => (x, None, dy, a),
            _ => {
                return Err(Error::invalid(
                    "LayerNormGradAdd",
                    format!("got {} inputs, which is not this op's arity", inputs.len()),
                ))
            }
        };
        let out = crate::ops::layer_norm_grad_kernel(x, gamma, dy, Some(add), self.axes, self.eps)?;
        Ok(smallvec::smallvec![out])
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[axes={}, eps={}, gamma={}]", self.axes, self.eps, self.gamma)
    }
}

/// Folds each such `Add` into its gradient node; returns how many were
/// folded.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let nv = g.values.len();
    // the node making each value, and how many times each value is read
    let (made_by, reads) = super::makers_and_all_reads(g);
    let maker = |v: ValueId| Some(made_by[v as usize]).filter(|&i| i != usize::MAX);
    let mut rename: Vec<ValueId> = (0..nv as ValueId).collect();
    let mut removed = vec![false; g.nodes.len()];
    let mut taken = vec![false; g.nodes.len()];
    let mut folded = 0;
    for (i, gone) in removed.iter_mut().enumerate() {
        let (Op::Binary(Binary::Add), &[a, b], &[y]) =
            (&g.nodes[i].op, &g.nodes[i].inputs[..], &g.nodes[i].outputs[..])
        else {
            continue;
        };
        let same = |v: ValueId| g.values[v as usize] == g.values[y as usize];
        if !same(a) || !same(b) {
            continue;
        }
        // (`view` the reshaped slice of the gradient node `grad`; `other`
        // made before `grad`)
        let found = [(b, a), (a, b)].into_iter().find_map(|(view, other)| {
            let grad = norm_grad_of(g, view, &maker, &reads)?;
            let before = maker(other).is_none_or(|o| o < grad);
            (before && !taken[grad]).then_some((view, other, grad))
        });
        let Some((view, other, grad)) = found else { continue };
        let Op::Nn(NnOp::LayerNormGrad { axes, eps, gamma }) = g.nodes[grad].op else {
            continue;
        };
        let node = &mut g.nodes[grad];
        node.op = Op::Dyn(Arc::new(LayerNormGradAdd {
            axes,
            eps: eps.0,
            gamma,
        }));
        node.inputs.push(other);
        taken[grad] = true;
        *gone = true;
        rename[y as usize] = view;
        folded += 1;
    }
    if folded == 0 {
        return 0;
    }
    // (a renamed value's new name is a view made before it: never renamed)
    let old = std::mem::take(&mut g.nodes);
    for (i, mut node) in old.into_iter().enumerate() {
        if removed[i] {
            continue;
        }
        for v in node.inputs.iter_mut() {
            *v = rename[*v as usize];
        }
        g.nodes.push(node);
    }
    for v in g.outputs.iter_mut() {
        *v = rename[*v as usize];
    }
    folded
}

/// The `LayerNormGrad` node whose `dx` `view` is (a `Reshape` to `x`'s
/// shape of the `Slice` of its first `x.numel()` values), where the slice
/// and the view are read once each (the view by the `Add`).
fn norm_grad_of(g: &Graph, view: ValueId, maker: &impl Fn(ValueId) -> Option<usize>, reads: &[usize]) -> Option<usize> {
    let r = maker(view)?;
    let (Op::Shape(ShapeOp::Reshape(_)), &[s]) = (&g.nodes[r].op, &g.nodes[r].inputs[..]) else {
        return None;
    };
    let k = maker(s)?;
    let (Op::Shape(ShapeOp::Slice(begin, size)), &[p]) = (&g.nodes[k].op, &g.nodes[k].inputs[..]) else {
        return None;
    };
    let l = maker(p)?;
    let (Op::Nn(NnOp::LayerNormGrad { .. }), Some(&x)) = (&g.nodes[l].op, g.nodes[l].inputs.first()) else {
        return None;
    };
    let xi = &g.values[x as usize];
    let m: usize = xi.shape.iter().product();
    let whole = begin[..] == [0] && size[..] == [m];
    let one_reader = reads[view as usize] == 1 && reads[s as usize] == 1;
    (whole && one_reader && g.values[view as usize] == *xi).then_some(l)
}
