//! A concatenation of reshaped parts as a reshape of the parts'
//! concatenation (the `concat_of_reshapes` pass).
//!
//! ```text
//! before:                                     after:
//!   %4 = Reshape[[1024, 256]](%1)               %7 = ConcatV2[axis=2](%1, %2, %3)
//!   %5 = Reshape[[1024, 256]](%2)               %6 = Reshape[[1024, 768]](%7)
//!   %6 = ConcatV2[axis=1](%4, %5, ...)
//!   (%1, %2, %3: f32[8, 128, 4, 64])
//! ```
//!
//! Merging heads back (`[b, t, h, d]` → `[b·t, h·d]`) after attention, or
//! any reshape of a transposed value, must copy: the merged dims do not
//! step evenly through memory. When the merged values are then
//! concatenated (the gradient of a fused QKV projection's split is the
//! concatenation of the three heads' gradients), every element was copied
//! twice: into the reshaped value, then into the concatenation. The
//! concatenation can read the unmerged values instead, where they lie, and
//! its result merges without a copy (it is contiguous).
//!
//! The rule: each part is a reshape read by the concatenation alone, of a
//! value of one rank `r`; the concatenated axis of the parts is made of
//! the parts' source dims `j..k` (the dims before `j` make the axes before
//! it), the sources agree on every dim but `j`, and dim `j` is the
//! outermost of the group (concatenating along it puts each part's rows
//! of the group side by side, as the concatenation along the merged axis
//! does). Then the parts are concatenated along `j`, and the result
//! reshaped to the concatenation's shape. A copy gives the same numbers
//! either way.

use smallvec::smallvec;

use super::pipeline::PassCx;
use crate::function::graph::{Graph, Node, ValueId};
use crate::ops::desc::{Op, ShapeOp};

/// Rewrites each concatenation of such reshapes; returns how many.
pub fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    // (the pads `pads_to_concat` left unused still read the parts: only
    // live reads count)
    let (made_by, reads) = super::makers_and_reads(g);
    let mut new = Vec::new();
    for i in 0..g.nodes.len() {
        let Op::Shape(ShapeOp::Concat(axis)) = g.nodes[i].op else {
            continue;
        };
        let Some((sources, j)) = sources(g, i, axis, &made_by, &reads) else {
            continue;
        };
        let out = g.nodes[i].outputs[0];
        let info = g.values[out as usize].clone();
        let mut shape = g.values[sources[0] as usize].shape.clone();
        shape[j] = sources.iter().map(|&s| g.values[s as usize].shape[j]).sum();
        let joined = g.add_value(info.dtype, &shape);
        new.push((
            i,
            Node {
                op: Op::Shape(ShapeOp::Concat(j as isize)),
                inputs: sources.into(),
                outputs: smallvec![joined],
                site: None,
            },
        ));
        let n = &mut g.nodes[i];
        n.op = Op::Shape(ShapeOp::Reshape(info.shape[..].into()));
        n.inputs = smallvec![joined];
    }
    let rewrites = new.len();
    // (the reshapes, now unread, go with dead-code elimination)
    super::insert_before(g, new);
    rewrites
}

/// The reshapes' sources of concatenation node `i` and the source dim to
/// concatenate them along, if the rule applies.
fn sources(g: &Graph, i: usize, axis: isize, made_by: &[usize], reads: &[usize]) -> Option<(Vec<ValueId>, usize)> {
    let node = &g.nodes[i];
    let rank = g.values[node.outputs[0] as usize].shape.len();
    let a = if axis < 0 { axis + rank as isize } else { axis };
    let a = usize::try_from(a).ok().filter(|&a| a < rank)?;
    if node.inputs.len() < 2 {
        return None;
    }
    // each part's source and its shape
    let mut parts = Vec::with_capacity(node.inputs.len());
    for &p in &node.inputs {
        let at = made_by[p as usize];
        if at == usize::MAX || reads[p as usize] != 1 {
            return None;
        }
        let n = &g.nodes[at];
        let Op::Shape(ShapeOp::Reshape(_)) = n.op else {
            return None;
        };
        let (s, t) = (&g.values[n.inputs[0] as usize].shape, &g.values[p as usize].shape);
        if s.contains(&0) || t.contains(&0) {
            return None;
        }
        parts.push((n.inputs[0], s, t[a]));
    }
    // the source dims j..k that make axis `a`, from a part more than one
    // wide there: j the first dim of more than one element after the dims
    // that make the axes before `a`
    let before: usize = g.values[node.outputs[0] as usize].shape[..a].iter().product();
    let &(_, s, width) = parts.iter().find(|p| p.2 > 1)?;
    let mut prefix = 1usize;
    let mut j = 0;
    while j < s.len() && (prefix != before || s[j] == 1) {
        if prefix > before {
            return None;
        }
        prefix *= s[j];
        j += 1;
    }
    let mut k = j;
    let mut inner = prefix;
    while k < s.len() && inner < before * width {
        inner *= s[k];
        k += 1;
    }
    if j == s.len() || prefix != before || inner != before * width {
        return None;
    }
    // every part's source: dims before j make the axes before `a`, dims
    // j..k make axis `a`
    let fits = parts.iter().all(|&(_, s, w)| {
        s.len() >= k && s[..j].iter().product::<usize>() == before && s[j..k].iter().product::<usize>() == w
    });
    if !fits {
        return None;
    }
    let sources: Vec<ValueId> = parts.iter().map(|p| p.0).collect();
    // the sources agree on every dim but j, in rank and type
    let first = &g.values[sources[0] as usize];
    let agree = sources.iter().all(|&s| {
        let v = &g.values[s as usize];
        v.dtype == first.dtype
            && v.shape.len() == first.shape.len()
            && v.shape
                .iter()
                .zip(&first.shape)
                .enumerate()
                .all(|(d, (x, y))| d == j || x == y)
    });
    agree.then_some((sources, j))
}
