//! The register program of a fused group (a part of the `fuse` pass,
//! whose groups it reads): registers allocated and freed as values die,
//! the pairs of ops on one value computed together, and the group's node.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::super::kernel::{Axis, Instr, Output, Pair, Program, Reg, Splat};
use super::{broadcast_index, numel, operands, Fused, Group, Member, Split};
use crate::function::graph::{Graph, Node, ValueId};
use crate::ops::desc::Op;
use crate::tensor::DType;

/// Registers: which are free, how many values each holds.
#[derive(Default)]
struct Alloc {
    free: Vec<Reg>,
    users: Vec<u32>,
    pinned: Vec<bool>,
}

impl Alloc {
    fn take(&mut self, pinned: bool) -> Reg {
        let r = match (pinned, self.free.pop()) {
            (false, Some(r)) => r,
            (true, Some(r)) => {
                self.free.push(r);
                self.fresh()
            }
            (_, None) => self.fresh(),
        };
        self.pinned[r as usize] = pinned;
        r
    }
    fn fresh(&mut self) -> Reg {
        self.users.push(0);
        self.pinned.push(false);
        (self.users.len() - 1) as Reg
    }
    fn hold(&mut self, r: Reg) {
        self.users[r as usize] += 1;
    }
    fn release(&mut self, r: Reg) {
        let u = &mut self.users[r as usize];
        *u -= 1;
        if *u == 0 && !self.pinned[r as usize] {
            self.free.push(r);
        }
    }
}

/// Pairs of members `(k, k2)`, `k < k2` (indices into the group's
/// members), that take the two ops of a [`Pair`] of the same value (a sine
/// and a cosine, a GELU and its derivative): the program computes both at
/// `k` ([`Instr::Pair`], the shared work once, the same bits), and member
/// `k2` then only names the second register. Maps `k` to `k2` and the pair.
fn op_pairs(g: &Graph, grp: &Group, kinds: &[Option<Member>]) -> FxHashMap<usize, (usize, Pair)> {
    // (the pair, the op's place in it, the value it reads)
    let member = |k: usize| match &kinds[grp.nodes[k]] {
        Some(Member::Unary(op)) => Pair::ALL.iter().find_map(|&p| {
            let at = p.ops().iter().position(|o| o == op)?;
            Some((p, at, g.nodes[grp.nodes[k]].inputs[0]))
        }),
        _ => None,
    };
    let mut pairs = FxHashMap::default();
    let mut paired = vec![false; grp.nodes.len()];
    for k in 0..grp.nodes.len() {
        let Some((p, at, v)) = member(k).filter(|_| !paired[k]) else {
            continue;
        };
        let partner = (k + 1..grp.nodes.len()).find(|&k2| !paired[k2] && member(k2) == Some((p, 1 - at, v)));
        if let Some(k2) = partner {
            paired[k] = true;
            paired[k2] = true;
            pairs.insert(k, (k2, p));
        }
    }
    pairs
}

/// The register program of one group, as a node.
pub(super) fn build(
    g: &Graph,
    grp: &Group,
    kinds: &[Option<Member>],
    producer: &[Option<usize>],
    needed_outside: &[bool],
) -> Node {
    // the two ops of a pair on one value, computed together at the first
    let pairs = op_pairs(g, grp, kinds);
    let second: FxHashMap<usize, usize> = pairs.iter().map(|(&k, &(k2, _))| (k2, k)).collect();
    // (the register of the second of a pair, from its first until then)
    let mut pending: FxHashMap<usize, Reg> = FxHashMap::default();
    // last use of each value inside the program (member index; the second
    // of a pair reads nothing)
    let mut last_use: FxHashMap<ValueId, usize> = FxHashMap::default();
    for (k, &i) in grp.nodes.iter().enumerate() {
        let kind = kinds[i].as_ref().expect("a member has a kind");
        if second.contains_key(&k) {
            continue;
        }
        for &v in operands(kind, &g.nodes[i]) {
            last_use.insert(v, k);
        }
    }
    let len = numel(&grp.shape);
    let mut inputs: Vec<ValueId> = Vec::new();
    let mut input_len: Vec<usize> = Vec::new();
    let mut splats: Vec<(Reg, Splat)> = Vec::new();
    let mut body: Vec<Instr> = Vec::new();
    let mut outputs_spec: Vec<Output> = Vec::new();
    let mut out_values: Vec<ValueId> = Vec::new();
    let (mut n_stores, mut n_sums, mut n_parts) = (0u16, 0u16, 0u16);
    let mut regs = Alloc::default();
    let mut reg_of: FxHashMap<ValueId, Reg> = FxHashMap::default();
    let mut input_index = |v: ValueId| -> u16 {
        if let Some(k) = inputs.iter().position(|&x| x == v) {
            return k as u16;
        }
        inputs.push(v);
        input_len.push(numel(&g.values[v as usize].shape));
        (inputs.len() - 1) as u16
    };
    for (k, &i) in grp.nodes.iter().enumerate() {
        let n = &g.nodes[i];
        let kind = kinds[i].as_ref().expect("a member has a kind");
        // the operands, in registers (none for the second of a pair)
        let mut ops: SmallVec<[Reg; 2]> = SmallVec::new();
        let reads = if second.contains_key(&k) {
            &[][..]
        } else {
            operands(kind, n)
        };
        for &v in reads {
            if let Some(&r) = reg_of.get(&v) {
                ops.push(r);
                continue;
            }
            let shape = &g.values[v as usize].shape;
            let one = numel(shape) == 1;
            let r = match (const_scalar(g, producer, v), one && len != 1) {
                (Some(c), _) => {
                    let r = regs.take(true);
                    splats.push((r, Splat::Value(c)));
                    r
                }
                (None, true) => {
                    let r = regs.take(true);
                    splats.push((r, Splat::Input(input_index(v))));
                    r
                }
                (None, false) => {
                    let r = regs.take(false);
                    let input = input_index(v);
                    body.push(match broadcast_index(shape, &grp.shape) {
                        Some((q, p)) if shape[..] != grp.shape[..] => Instr::Gather { dst: r, input, q, p },
                        _ => Instr::Load { dst: r, input },
                    });
                    r
                }
            };
            regs.hold(r);
            reg_of.insert(v, r);
            ops.push(r);
        }
        let out = n.outputs[0];
        let dst = match kind {
            // computed with its partner
            Member::Unary(_) if second.contains_key(&k) => Some(pending.remove(&k).expect("the first of a pair ran")),
            Member::Unary(op) if pairs.contains_key(&k) => {
                // both registers taken now; the partner's holds no value
                // (no users) until its member takes it
                let (d, d2) = (regs.take(false), regs.take(false));
                let (k2, pair) = pairs[&k];
                let (x0, x1) = if pair.ops()[0] == *op { (d, d2) } else { (d2, d) };
                body.push(Instr::Pair {
                    pair,
                    x0,
                    x1,
                    a: ops[0],
                });
                pending.insert(k2, d2);
                Some(d)
            }
            Member::Unary(op) => {
                let d = regs.take(false);
                body.push(Instr::Unary {
                    op: op.clone(),
                    dst: d,
                    a: ops[0],
                });
                Some(d)
            }
            Member::Binary(op) => {
                let d = regs.take(false);
                body.push(Instr::Binary {
                    op: op.clone(),
                    dst: d,
                    a: ops[0],
                    b: ops[1],
                });
                Some(d)
            }
            Member::Fill(c) => {
                let d = regs.take(true);
                splats.push((d, Splat::Value(*c)));
                Some(d)
            }
            // the one element, splatted, is already the whole register
            Member::Broadcast => Some(ops[0]),
            Member::Sum => {
                body.push(Instr::Accumulate {
                    acc: n_sums,
                    src: ops[0],
                });
                n_sums += 1;
                outputs_spec.push(Output::Sum(g.values[out as usize].shape.to_vec()));
                out_values.push(out);
                None
            }
            Member::Reduce(fold, axis) => {
                let axis = match (axis, grp.split) {
                    (Axis::Leading(p), Split::Blocked(_)) => Axis::Blocked(*p),
                    (a, _) => *a,
                };
                body.push(Instr::Reduce {
                    out: n_parts,
                    src: ops[0],
                    fold: *fold,
                    axis,
                });
                n_parts += 1;
                outputs_spec.push(Output::Reduced(g.values[out as usize].shape.to_vec()));
                out_values.push(out);
                None
            }
        };
        if let Some(d) = dst {
            regs.hold(d);
            reg_of.insert(out, d);
            if needed_outside[out as usize] {
                body.push(Instr::Store { out: n_stores, src: d });
                n_stores += 1;
                outputs_spec.push(Output::Elementwise);
                out_values.push(out);
            }
        }
        // release the values not read again
        let mut seen: SmallVec<[ValueId; 3]> = SmallVec::new();
        for &v in reads.iter().chain(dst.map(|_| out).as_slice()) {
            if seen.contains(&v) || last_use.get(&v).is_some_and(|&l| l > k) {
                continue;
            }
            seen.push(v);
            if let Some(r) = reg_of.remove(&v) {
                regs.release(r);
            }
        }
    }
    let mut program = Program {
        dtype: grp.dtype,
        len,
        shape: grp.shape.clone(),
        input_len,
        splats,
        body,
        n_regs: regs.users.len(),
        outputs: outputs_spec,
        scalar: Default::default(),
    };
    // (a merged pass would skip a half program's rounding between its ops)
    if !grp.dtype.is_half() {
        program.merge_passes();
    }
    Node {
        op: Op::Dyn(Arc::new(Fused::new(program, grp.ops))),
        inputs: inputs.into(),
        outputs: out_values.into(),
        site: None,
    }
}

/// The value of a one-element constant (an immediate operand).
fn const_scalar(g: &Graph, producer: &[Option<usize>], v: ValueId) -> Option<f64> {
    let p = producer[v as usize]?;
    match &g.nodes[p].op {
        Op::Const(t) if t.numel() == 1 => t.cast(DType::F64).ok()?.to_scalar::<f64>().ok(),
        _ => None,
    }
}
