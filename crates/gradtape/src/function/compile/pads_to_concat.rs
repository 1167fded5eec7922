//! Sums of zero-padded pieces that do not overlap, as one concatenation
//! (the `pads_to_concat` pass).
//!
//! ```text
//! before:                                     after:
//!   %4 = Pad[[(0,0), (0,256)]](%1)              %7 = ConcatV2[axis=1](%1, %2, %3)
//!   %5 = Pad[[(0,0), (128,128)]](%2)
//!   %6 = Add(%4, %5)
//!   %8 = Pad[[(0,0), (256,0)]](%3)
//!   %7 = Add(%6, %8)
//! ```
//!
//! The gradient of a `split` (or of `narrow`s, or of slices of one axis)
//! pads each part's cotangent with zeros back to the full width (the
//! adjoint of a slice), and the tape adds the padded parts: for a QKV
//! projection split in three, three tensors of the full width written
//! (two thirds zeros) and read again by two adds. The sum is the parts
//! side by side, so this pass writes them side by side: a tree of `Add`s
//! (each inner sum read by the tree alone) whose leaves are `Pad`s of the
//! sum's shape, each padding one and the same axis, their unpadded
//! regions disjoint, becomes one `ConcatV2` of the parts along that axis,
//! with constant zeros in the gaps the parts leave (a split whose parts
//! are not all used). Any other leaf, or pads on two axes, leaves the tree
//! as it is.
//!
//! Values: each element of the sum is its one part's element plus zeros,
//! so the concatenation gives the same numbers; only a `-0` of a part
//! (which the sum made `+0`) keeps its sign.

use smallvec::{smallvec, SmallVec};

use super::pipeline::PassCx;
use crate::function::graph::{Graph, Node, ValueId};
use crate::ops::desc::{Binary, Op, ShapeOp};
use crate::tensor::Tensor;

/// One leaf of a sum: its unpadded part and where along the axis it goes.
struct Piece {
    part: ValueId,
    begin: usize,
    len: usize,
}

/// Rewrites every sum of disjoint pads along one axis into a concatenation;
/// returns how many sums it rewrote.
pub fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let (made_by, reads) = super::makers_and_reads(g);
    let mut absorbed = vec![false; g.nodes.len()];
    let mut zeros: Vec<(usize, Node)> = Vec::new();
    let mut rewrites = 0;
    // the last add of a tree first, so that its inner adds are absorbed
    for i in (0..g.nodes.len()).rev() {
        if absorbed[i] || !matches!(g.nodes[i].op, Op::Binary(Binary::Add)) {
            continue;
        }
        let mut inner = Vec::new();
        let Some((axis, mut pieces)) = collect(g, i, &made_by, &reads, &mut inner) else {
            continue;
        };
        pieces.sort_by_key(|p| p.begin);
        let out = g.nodes[i].outputs[0];
        let info = g.values[out as usize].clone();
        let width = info.shape[axis];
        if pieces.windows(2).any(|w| w[0].begin + w[0].len > w[1].begin)
            || pieces.last().is_some_and(|p| p.begin + p.len > width)
        {
            continue;
        }
        // the parts in order, constant zeros in the gaps
        let mut parts: SmallVec<[ValueId; 2]> = SmallVec::new();
        let mut at = 0;
        let mut gap = |from: usize, to: usize, parts: &mut SmallVec<[ValueId; 2]>| {
            if to > from {
                let mut shape = info.shape.clone();
                shape[axis] = to - from;
                let z = g.add_value(info.dtype, &shape);
                zeros.push((
                    i,
                    Node {
                        op: Op::Const(Tensor::zeros(&shape, info.dtype)),
                        inputs: smallvec![],
                        outputs: smallvec![z],
                        site: None,
                    },
                ));
                parts.push(z);
            }
        };
        for p in &pieces {
            gap(at, p.begin, &mut parts);
            parts.push(p.part);
            at = p.begin + p.len;
        }
        gap(at, width, &mut parts);
        let n = &mut g.nodes[i];
        n.op = Op::Shape(ShapeOp::Concat(axis as isize));
        n.inputs = parts;
        for j in inner {
            absorbed[j] = true;
        }
        rewrites += 1;
    }
    // (the pads and inner adds, now unread, go with dead-code elimination)
    super::insert_before(g, zeros);
    rewrites
}

/// The pieces of the add tree rooted at node `root` and the one axis they
/// are padded along, if every leaf is such a pad of the root's shape;
/// `inner` gets the tree's inner add nodes.
fn collect(
    g: &Graph,
    root: usize,
    made_by: &[usize],
    reads: &[usize],
    inner: &mut Vec<usize>,
) -> Option<(usize, Vec<Piece>)> {
    let out = g.nodes[root].outputs[0];
    let info = &g.values[out as usize];
    let mut axis = None;
    let mut pieces = Vec::new();
    let mut stack: Vec<ValueId> = g.nodes[root].inputs.to_vec();
    while let Some(v) = stack.pop() {
        let at = made_by[v as usize];
        // each leaf and inner sum is the tree's alone, and of the root's type
        if at == usize::MAX || reads[v as usize] != 1 || g.values[v as usize] != *info {
            return None;
        }
        let n = &g.nodes[at];
        match &n.op {
            Op::Binary(Binary::Add) => {
                inner.push(at);
                stack.extend(n.inputs.iter().copied());
            }
            Op::Shape(ShapeOp::Pad(pads)) => {
                let mut padded = pads.iter().enumerate().filter(|(_, p)| **p != (0, 0));
                let (ax, &(before, after)) = padded.next()?;
                if padded.next().is_some() || *axis.get_or_insert(ax) != ax {
                    return None;
                }
                pieces.push(Piece {
                    part: n.inputs[0],
                    begin: before,
                    len: info.shape[ax].checked_sub(before + after)?,
                });
            }
            _ => return None,
        }
        if pieces.len() + inner.len() > 4096 {
            return None;
        }
    }
    Some((axis?, pieces))
}
