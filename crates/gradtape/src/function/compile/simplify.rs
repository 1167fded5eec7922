//! Algebraic simplification: nodes that give back their input unchanged
//! are removed, and chains of shape ops are shortened.
//!
//! Each rule is exact (the simplified graph gives the same bits):
//!
//! - `x * 1`, `1 * x`, `x / 1`, `x - 0` (the `1` or `0` a constant, or a
//!   broadcast of one, no larger than `x`), `mul_scalar(1)`,
//!   `div_scalar(1)`, `pow_scalar(1)` → `x`. (`x + 0` is not rewritten:
//!   it turns `-0` into `+0`.)
//! - identity, stop-gradient (a graph run computes no gradients), a cast
//!   to the same dtype, a reshape or broadcast to the same shape, a
//!   transpose by the identity permutation → its input;
//! - a reshape of a reshape → one reshape; a transpose of a transpose →
//!   one transpose (or none); a slice of a zero-padded value that lies
//!   inside the value → a slice of the value, or the value itself (the
//!   gradient of a slice is a pad: attention's packed output, sliced, gave
//!   a pad to the full width that its gradient op sliced back);
//! - a broadcast operand of a two-input elementwise op whose other operand
//!   has the op's shape → the broadcast's input (the op broadcasts it
//!   itself, and a fused kernel reads a row or column by index where it
//!   would have read a broadcast copy: the gradient of a max or a mean
//!   broadcasts its reduced values back);
//! - `relu_grad(dy, x)` where the graph also computes `relu(x)` reads
//!   `relu(x)` instead of `x` (`relu(x) > 0` exactly when `x > 0`, NaN and
//!   `-0` included), so the pre-activation need not be kept: a fused
//!   bias-add and relu then writes one tensor, not two.
//!
//! Rewritten values are renamed in every later node and in the outputs;
//! the nodes left unused are removed by dead-code elimination:
//!
//! ```text
//! before:                                after:
//!   %1: f32[3, 4] = MulScalar[1](%0)       %1: f32[3, 4] = MulScalar[1](%0)   (unread)
//!   %2: f32[2, 6] = Reshape(%1)            %2: f32[2, 6] = Reshape(%0)
//!   %3: f32[2, 6] = Exp(%2)                %3: f32[2, 6] = Exp(%2)
//! ```

use rustc_hash::FxHashMap;

use super::pipeline::PassCx;
use crate::function::graph::{Graph, ValueId};
use crate::ops::desc::{Binary, Op, ShapeOp, Unary};
use crate::tensor::Tensor;

/// The one value every element of a constant has, if it has one.
fn splat_of(t: &Tensor) -> Option<f64> {
    if t.dtype().is_complex() || t.numel() == 0 || t.numel() > 4096 {
        return None;
    }
    let v = t.f64_values("simplify").ok()?;
    let first = v[0];
    v.iter().all(|x| x.to_bits() == first.to_bits()).then_some(first)
}

/// Simplifies `g` in place; returns how many nodes were rewritten.
pub fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let mut rename: Vec<ValueId> = (0..g.values.len() as ValueId).collect();
    // values known to hold one number everywhere
    let mut splat: FxHashMap<ValueId, f64> = FxHashMap::default();
    // the node making each value (index into g.nodes)
    let mut made_by: FxHashMap<ValueId, usize> = FxHashMap::default();
    // the output of `relu(x)`, by `x`
    let mut relu_of: FxHashMap<ValueId, ValueId> = FxHashMap::default();
    let mut rewrites = 0;
    for i in 0..g.nodes.len() {
        for v in g.nodes[i].inputs.iter_mut() {
            *v = rename[*v as usize];
        }
        let node = &mut g.nodes[i];
        match (&node.op, &node.inputs[..], &node.outputs[..]) {
            (Op::Unary(Unary::Relu), &[x], &[y]) => {
                relu_of.insert(x, y);
            }
            (Op::Binary(Binary::ReluGrad), &[_, x], _) => {
                if let Some(&y) = relu_of.get(&x) {
                    node.inputs[1] = y;
                    rewrites += 1;
                }
            }
            _ => {}
        }
        let n = &g.nodes[i];
        let Some(&out) = n.outputs.first() else { continue };
        if n.outputs.len() == 1 {
            made_by.insert(out, i);
        }
        let info = |v: ValueId| &g.values[v as usize];
        let same = |v: ValueId| info(v).dtype == info(out).dtype && info(v).shape == info(out).shape;
        let is = |v: ValueId, c: f64| splat.get(&v).is_some_and(|s| s.to_bits() == c.to_bits());
        let real = !info(out).dtype.is_complex();
        // the input this node gives back unchanged, if any
        let passes: Option<ValueId> = match &n.op {
            Op::Const(t) => {
                if let Some(s) = splat_of(t) {
                    splat.insert(out, s);
                }
                None
            }
            Op::Shape(ShapeOp::FullLike(c)) => {
                splat.insert(out, c.0);
                None
            }
            Op::Shape(ShapeOp::Identity | ShapeOp::StopGradient) => Some(n.inputs[0]),
            Op::Cast(_) | Op::Shape(ShapeOp::Reshape(_) | ShapeOp::BroadcastTo(_)) if same(n.inputs[0]) => {
                Some(n.inputs[0])
            }
            Op::Shape(ShapeOp::Transpose(p)) if p.iter().enumerate().all(|(k, &d)| k == d) => Some(n.inputs[0]),
            // (not for complex numbers: a complex product by `1 + 0i` makes
            // `inf + i` into `inf + NaN i`, and a complex power is
            // `exp(c log z)`: `(4 + i)^1` is `3.9999998 + i` in f32, as in
            // TensorFlow)
            Op::Unary(Unary::MulScalar(c) | Unary::DivScalar(c) | Unary::PowScalar(c)) if c.0 == 1.0 && real => {
                Some(n.inputs[0])
            }
            Op::Binary(Binary::Mul) if real && is(n.inputs[1], 1.0) && same(n.inputs[0]) => Some(n.inputs[0]),
            Op::Binary(Binary::Mul) if real && is(n.inputs[0], 1.0) && same(n.inputs[1]) => Some(n.inputs[1]),
            Op::Binary(Binary::Div) if real && is(n.inputs[1], 1.0) && same(n.inputs[0]) => Some(n.inputs[0]),
            Op::Binary(Binary::Sub) if is(n.inputs[1], 0.0) && same(n.inputs[0]) => Some(n.inputs[0]),
            _ => None,
        };
        if let Some(x) = passes {
            rename[out as usize] = x;
            if let Some(&s) = splat.get(&x) {
                splat.insert(out, s);
            }
            rewrites += 1;
            continue;
        }
        // an elementwise op broadcasts its operands itself: a broadcast
        // operand beside one of the full shape is read as it was before
        // the broadcast (which is then unread, unless used elsewhere)
        if let Op::Binary(b) = &n.op
            && !matches!(b, Binary::ReluGrad | Binary::TanhGrad | Binary::Complex)
            && n.inputs.len() == 2
        {
            for k in 0..2 {
                let (this, other) = (g.nodes[i].inputs[k], g.nodes[i].inputs[1 - k]);
                let Some(&j) = made_by.get(&this) else { continue };
                if let (Op::Shape(ShapeOp::BroadcastTo(_)), &[x]) = (&g.nodes[j].op, &g.nodes[j].inputs[..])
                    && g.values[other as usize].shape == g.values[out as usize].shape
                {
                    g.nodes[i].inputs[k] = x;
                    rewrites += 1;
                }
            }
        }
        let n = &g.nodes[i];
        // broadcasts and reshapes of a splat are splats
        if let Op::Shape(ShapeOp::Reshape(_) | ShapeOp::BroadcastTo(_)) = &n.op
            && let Some(&s) = splat.get(&n.inputs[0])
        {
            splat.insert(out, s);
        }
        // chains of shape ops
        let inner = made_by.get(&n.inputs.first().copied().unwrap_or(ValueId::MAX)).copied();
        let Some(j) = inner else { continue };
        let (inner_op, inner_in) = (g.nodes[j].op.clone(), g.nodes[j].inputs.first().copied());
        let Some(x) = inner_in else { continue };
        match (&g.nodes[i].op, &inner_op) {
            (Op::Shape(ShapeOp::Reshape(_)), Op::Shape(ShapeOp::Reshape(_))) => {
                if same(x) {
                    rename[out as usize] = x;
                } else {
                    g.nodes[i].inputs[0] = x;
                }
                rewrites += 1;
            }
            // a box of a zero-padded value inside the value: a box of the
            // value (the value itself when it is the whole of it)
            (Op::Shape(ShapeOp::Slice(begin, size)), Op::Shape(ShapeOp::Pad(pads))) => {
                let xs = &g.values[x as usize].shape;
                let rank = xs.len();
                let inside = begin.len() == rank
                    && size.len() == rank
                    && pads.len() == rank
                    && (0..rank).all(|d| begin[d] >= pads[d].0 && begin[d] + size[d] <= pads[d].0 + xs[d]);
                if inside {
                    let b: smallvec::SmallVec<[usize; 4]> = (0..rank).map(|d| begin[d] - pads[d].0).collect();
                    if b.iter().all(|&v| v == 0) && size[..] == xs[..] {
                        rename[out as usize] = x;
                    } else {
                        g.nodes[i].op = Op::Shape(ShapeOp::Slice(b, size.clone()));
                        g.nodes[i].inputs[0] = x;
                    }
                    rewrites += 1;
                }
            }
            (Op::Shape(ShapeOp::Transpose(outer)), Op::Shape(ShapeOp::Transpose(inner))) => {
                let perm: smallvec::SmallVec<[usize; 4]> = outer.iter().map(|&k| inner[k]).collect();
                if perm.iter().enumerate().all(|(k, &d)| k == d) {
                    rename[out as usize] = x;
                } else {
                    g.nodes[i].op = Op::Shape(ShapeOp::Transpose(perm));
                    g.nodes[i].inputs[0] = x;
                }
                rewrites += 1;
            }
            _ => {}
        }
    }
    for o in g.outputs.iter_mut() {
        *o = rename[*o as usize];
    }
    rewrites
}
