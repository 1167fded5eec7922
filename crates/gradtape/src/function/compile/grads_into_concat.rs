//! Gradients written where their concatenation puts them (the
//! `grads_into_concat` pass).
//!
//! ```text
//! before:                                          after:
//!   %5 = AttentionGrad[..](%0, %1, %2, %3, %4)       %12 = AttentionGradInto[..](%0, %1, %2, %3, %4)
//!   %6 = Slice[begin=[0, 0, 0], ..](%5)              %13 = Reshape[[1024, 768]](%12)
//!   %7 = Reshape[[8, 4, 128, 64]](%6)
//!   %8 = Transpose[perm=[0, 2, 1, 3]](%7)
//!   ... (dk, dv alike)
//!   %12 = ConcatV2[axis=2](%8, %10, %11)
//!   %13 = Reshape[[1024, 768]](%12)
//! ```
//!
//! An op whose output packs several parts (attention's backward pass:
//! each batch element's `dq`, `dk` and `dv`) is taken apart by slices,
//! each part reshaped to its own shape and maybe transposed; when those
//! views are then joined by one concatenation (the gradient of a split:
//! a fused QKV projection's, whose heads `concat_of_reshapes` has already
//! reduced to transposes), every element is written twice: by the op, then
//! by the concatenation's copy. Where the op can write its parts at any
//! strides, it writes them straight into the concatenation's slices, and
//! the concatenation and the views go.
//!
//! The rule: a concatenation whose inputs are each `[Transpose](Reshape(
//! Slice(x)))`, read by it alone, where `x` is the whole output of one
//! such op, read by those slices alone, each slice cutting exactly one
//! part along the last axis (whole along the others) and the reshape
//! giving the part its own shape; every part taken once. Each part's
//! elements then lie in the concatenation at strides that follow from the
//! transpose and the concatenation's contiguous strides, its last dim
//! adjacent (the rows of a part are what the op writes). The layout is
//! checked to be a partition of the concatenation (every element in
//! exactly one part) before the rewrite. The op computes the same numbers
//! either way, so the values are the same bit for bit.
//!
//! The ops that write parts this way: attention's backward pass
//! (`AttentionGrad` becomes `AttentionGradInto`, run by
//! `kernels::cpu::attention::backward_into`, whose kernels on matrix
//! products write each gradient's rows where they belong; the online
//! kernel writes packed rows, copied there). It fires wherever the three
//! gradients of one attention are concatenated in any order along any axis
//! that keeps each part's rows whole: self-attention with a fused
//! projection at any sizes, heads or batch layout, causal or masked.

use std::sync::Arc;

use smallvec::{smallvec, SmallVec};

use super::pipeline::PassCx;
use crate::error::{Error, Result};
use crate::function::graph::{Graph, ValueId};
use crate::kernels::cpu::attention_gemm::{Batch, GradDest};
use crate::ops::desc::{DynOp, NnOp, Op, Outputs, ShapeOp, F64};
use crate::tensor::{DType, Tensor};

/// Attention's backward pass writing `dq`, `dk` and `dv` into one tensor
/// of `shape`, where `dest` says (a partition of it, checked when made).
pub struct AttentionGradInto {
    causal: bool,
    scale: F64,
    dropout: F64,
    hidden: crate::ops::HiddenRows,
    shape: SmallVec<[usize; 4]>,
    dest: GradDest,
}

impl AttentionGradInto {
    /// The node's op, if `dest`'s parts (of the sizes `sizes`: rows and
    /// width of `dq`, `dk`, `dv`) cover each element of `shape` exactly
    /// once.
    fn new(
        (causal, scale, dropout, hidden): (bool, F64, F64, crate::ops::HiddenRows),
        shape: &[usize],
        dest: GradDest,
        sizes: [(usize, usize); 3],
    ) -> Option<AttentionGradInto> {
        partition(&dest, sizes).then(|| AttentionGradInto {
            causal,
            scale,
            dropout,
            hidden,
            shape: shape.into(),
            dest,
        })
    }
}

/// Whether the parts of `dest` (each batch element's `rows × width`
/// matrix) cover each of its `len` elements exactly once.
fn partition(dest: &GradDest, sizes: [(usize, usize); 3]) -> bool {
    let mut seen = vec![false; dest.len];
    let mut count = 0usize;
    for ((batch, rs), (rows, width)) in dest.parts.iter().zip(sizes) {
        for b in 0..batch.len() {
            let start = batch.offset(b);
            for i in 0..rows {
                let Some(row) = seen.get_mut(start + i * rs..start + i * rs + width) else {
                    return false;
                };
                if row.iter().any(|&s| s) {
                    return false;
                }
                row.fill(true);
                count += width;
            }
        }
    }
    count == dest.len
}

impl DynOp for AttentionGradInto {
    fn name(&self) -> &'static str {
        "AttentionGradInto"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let [q, k, v, p, g, rest @ ..] = inputs else {
            return Err(Error::invalid(
                "AttentionGradInto",
                format!(
                    "takes q, k, v, the packed rows and the cotangent (then the mask and seed), got {} inputs",
                    inputs.len()
                ),
            ));
        };
        let a = crate::ops::AttentionSpec::from_operands(
            "AttentionGradInto",
            rest,
            self.causal,
            self.scale.0,
            self.dropout.0,
            self.hidden,
        )?;
        // SAFETY: `dest` is a partition of the output (`new`): its parts
        // are disjoint.
        let out = unsafe { crate::ops::attention_grad_into(q, k, v, &a, p, g, &self.shape, &self.dest)? };
        Ok(smallvec![out])
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[causal={}, scale={}, dropout={}, shape={:?}]",
            self.causal,
            self.scale,
            self.dropout,
            &self.shape[..]
        )?;
        if self.hidden != crate::ops::HiddenRows::Zeros {
            write!(f, "[hidden={:?}]", self.hidden)?;
        }
        Ok(())
    }
}

/// Rewrites each such concatenation; returns how many.
pub fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    let (made_by, reads) = super::makers_and_reads(g);
    let mut removed = vec![false; g.nodes.len()];
    let mut count = 0;
    for c in 0..g.nodes.len() {
        let Op::Shape(ShapeOp::Concat(axis)) = g.nodes[c].op else {
            continue;
        };
        let Some((at, op, chain)) = rewrite(g, c, axis, &made_by, &reads) else {
            continue;
        };
        let out = g.nodes[c].outputs[0];
        let n = &mut g.nodes[at];
        n.op = Op::Dyn(Arc::new(op));
        n.outputs = smallvec![out];
        removed[c] = true;
        for i in chain {
            removed[i] = true;
        }
        count += 1;
    }
    if count > 0 {
        let old = std::mem::take(&mut g.nodes);
        g.nodes = old
            .into_iter()
            .zip(removed)
            .filter_map(|(n, r)| (!r).then_some(n))
            .collect();
    }
    count
}

/// For concatenation node `c`: the node to rewrite, its new op, and the
/// nodes of the views that go, if the rule applies.
fn rewrite(
    g: &Graph,
    c: usize,
    axis: isize,
    made_by: &[usize],
    reads: &[usize],
) -> Option<(usize, AttentionGradInto, Vec<usize>)> {
    let node = &g.nodes[c];
    let out = &g.values[node.outputs[0] as usize];
    if node.inputs.len() != 3 || !matches!(out.dtype, DType::F32 | DType::F64) {
        return None;
    }
    let rank = out.shape.len();
    let a = if axis < 0 { axis + rank as isize } else { axis };
    let a = usize::try_from(a).ok().filter(|&a| a < rank)?;
    // the concatenation's contiguous strides
    let mut cs = vec![0usize; rank];
    let mut acc = 1;
    for d in (0..rank).rev() {
        cs[d] = acc;
        acc *= out.shape[d];
    }
    let maker = |v: ValueId| {
        let at = made_by[v as usize];
        (at != usize::MAX && reads[v as usize] == 1).then_some(at)
    };
    let mut source: Option<(usize, ValueId)> = None;
    let mut chain = Vec::new();
    let mut parts: [Option<(Batch, usize)>; 3] = [None, None, None];
    let mut along = 0usize;
    for &p in &node.inputs {
        let pshape = &g.values[p as usize].shape;
        if pshape.len() != rank {
            return None;
        }
        // [Transpose] ∘ Reshape ∘ Slice of the op's output
        let mut at = maker(p)?;
        let mut perm: SmallVec<[usize; 6]> = (0..rank).collect();
        if let Op::Shape(ShapeOp::Transpose(t)) = &g.nodes[at].op {
            perm = t.iter().copied().collect();
            chain.push(at);
            at = maker(g.nodes[at].inputs[0])?;
        }
        let Op::Shape(ShapeOp::Reshape(_)) = &g.nodes[at].op else {
            return None;
        };
        chain.push(at);
        let reshaped = g.nodes[at].outputs[0];
        at = maker(g.nodes[at].inputs[0])?;
        let Op::Shape(ShapeOp::Slice(begin, size)) = &g.nodes[at].op else {
            return None;
        };
        chain.push(at);
        let x = g.nodes[at].inputs[0];
        let op_at = made_by[x as usize];
        if op_at == usize::MAX {
            return None;
        }
        match source {
            None => source = Some((op_at, x)),
            Some((o, xv)) if o == op_at && xv == x => {}
            Some(_) => return None,
        }
        let producer = &g.nodes[op_at];
        let Op::Nn(NnOp::AttentionGrad { .. }) = producer.op else {
            return None;
        };
        // which part: the slice cuts it whole along the last axis
        let xs = &g.values[x as usize].shape;
        let r = xs.len();
        let shape = |i: usize| &g.values[producer.inputs[i] as usize].shape;
        let size2 = |i: usize| {
            let s = shape(i);
            s[s.len() - 2] * s[s.len() - 1]
        };
        let (nq, nk, nv) = (size2(0), size2(1), size2(2));
        if r == 0 || begin.len() != r || size.len() != r {
            return None;
        }
        let whole = (0..r - 1).all(|d| begin[d] == 0 && size[d] == xs[d]);
        let part = match (begin[r - 1], size[r - 1]) {
            (0, n) if n == nq => 0,
            (o, n) if o == nq && n == nk => 1,
            (o, n) if o == nq + nk && n == nv => 2,
            _ => return None,
        };
        let ps = shape(part);
        if !whole || g.values[reshaped as usize].shape != *ps || ps.len() != rank || parts[part].is_some() {
            return None;
        }
        // the part's strides in the concatenation: its dim perm[j] is the
        // concatenation's dim j
        let mut st = vec![0usize; rank];
        for (j, &pj) in perm.iter().enumerate() {
            *st.get_mut(pj)? = cs[j];
        }
        if st[rank - 1] != 1 && ps[rank - 1] > 1 {
            return None;
        }
        let batch = Batch {
            dims: (0..rank - 2).map(|d| (ps[d], st[d])).collect(),
            base: along * cs[a],
        };
        parts[part] = Some((batch, st[rank - 2]));
        along += pshape[a];
    }
    let (op_at, x) = source?;
    // the op's output is read by the three slices alone
    if reads[x as usize] != 3 || g.nodes[op_at].outputs.len() != 1 {
        return None;
    }
    let producer = &g.nodes[op_at];
    let Op::Nn(NnOp::AttentionGrad {
        causal,
        scale,
        dropout,
        hidden,
    }) = producer.op
    else {
        return None;
    };
    let [Some(pq), Some(pk), Some(pv)] = parts else {
        return None;
    };
    let rw = |i: usize| {
        let s = &g.values[producer.inputs[i] as usize].shape;
        (s[s.len() - 2], s[s.len() - 1])
    };
    let dest = GradDest {
        len: out.shape.iter().product(),
        parts: [pq, pk, pv],
    };
    let op = AttentionGradInto::new(
        (causal, scale, dropout, hidden),
        &out.shape,
        dest,
        [rw(0), rw(1), rw(2)],
    )?;
    Some((op_at, op, chain))
}
