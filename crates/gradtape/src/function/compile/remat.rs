//! Rematerialisation (the `remat` pass): a fused kernel recomputes a cheap
//! elementwise value from tensors it reads anyway, rather than reading the
//! tensor another fused kernel wrote for it.
//!
//! A training graph meets one expression on both sides of a product: a
//! forward kernel computes `h = x·s + b` on the way to its output, and the
//! gradient kernel, after the next layer's products, needs `h` again.
//! Common-subexpression elimination made it one value, so the forward
//! kernel writes it as an extra tensor of the layer's size and the
//! gradient kernel reads it back. Here the gradient kernel computes `h`
//! from `x`, which it reads anyway (with `s` and `b` broadcast rows), and
//! the forward kernel writes one tensor fewer.
//!
//! **The rule.** Fused node `G` loads value `v` (an input of its own
//! shape) that fused node `A` made (an elementwise output of the same
//! shape and dtype). Walking `A`'s program back from the store of `v`,
//! each register is resolved to a value `G` loads too (an input of `A`,
//! or another output of `A`), a broadcast input (gathered), a splat, or an
//! instruction to copy; if that takes at most [`MAX_OPS`] operations, all
//! of them as cheap as an add (arithmetic, comparisons, `relu`; not `exp`,
//! `erf`, `tanh` and the like, which cost more than the read: measured on
//! the exact GELU, whose gradient recomputing `erf` made the step slower),
//! the copies replace `G`'s load of `v`. No full-size tensor is read that `G`
//! did not read already, so each rewrite takes one full-size read off the
//! kernel (the trade XLA's fusion makes when it duplicates cheap
//! producers into each consumer). Once nothing reads `v`, `A` stops
//! writing it, and the instructions that served only it go. Both programs
//! are then tidied (`Program::compact`: the copies' loads of one input
//! and repeated ops merged, registers allocated again). Kernels of fewer than [`MIN_LEN`] elements,
//! whose tensors stay in cache, are left alone.
//!
//! The values are the same bits: the same instructions run on the same
//! elements, only in another kernel.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::fuse::Fused;
use super::kernel::{sums_operands as operands, Instr, Output, Program, Reg, Splat};
use super::pipeline::PassCx;
use crate::function::graph::{Graph, Node, ValueId};
use crate::ops::desc::{Binary, Op, Unary};

/// The most operations (instructions; a pair of ops in one counts two)
/// copied in place of one load.
pub(crate) const MAX_OPS: usize = 6;

/// The fewest elements of a kernel whose loads are rematerialised (a
/// tensor of 256 KiB of `f32`: beyond a core's share of the second-level
/// cache, where a read costs more than a few operations).
pub(crate) const MIN_LEN: usize = 1 << 16;

/// The `remat` pass: returns how many loads were replaced by copies of
/// the instructions that made them.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    // where each value is made: node and output
    let mut made_by: Vec<Option<(usize, usize)>> = vec![None; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for (k, &o) in n.outputs.iter().enumerate() {
            made_by[o as usize] = Some((i, k));
        }
    }
    let mut count = 0;
    for gi in 0..g.nodes.len() {
        let Some(f) = g.nodes[gi].op.as_dyn::<Fused>() else {
            continue;
        };
        if f.program.len < MIN_LEN {
            continue;
        }
        let (mut prog, ops) = (f.program.clone(), f.ops);
        let mut inputs = g.nodes[gi].inputs.to_vec();
        let mut replaced = 0;
        for j in 0..inputs.len() {
            let Some((ai, k)) = made_by[inputs[j] as usize] else {
                continue;
            };
            if ai == gi {
                continue;
            }
            if let Some((new_prog, new_inputs)) = recompute(g, ai, k, &prog, &inputs, j) {
                (prog, inputs) = (new_prog, new_inputs);
                replaced += 1;
            }
        }
        if replaced > 0 {
            prog.compact();
            prune_inputs(&mut prog, &mut inputs);
            let outputs = g.nodes[gi].outputs.clone();
            g.nodes[gi] = Node {
                op: Op::Dyn(Arc::new(Fused::new(prog, ops))),
                inputs: inputs.into(),
                outputs,
                site: None,
            };
            count += replaced;
        }
    }
    if count > 0 {
        drop_unread_outputs(g);
    }
    count
}

/// `g_prog` (of node inputs `g_inputs`) with its load of input `j`
/// replaced by a copy of the instructions by which output `k` of node
/// `ai` is made, if that node is a fused kernel of the same shape and
/// dtype and the copy qualifies (see the module docs). Inputs the copy
/// gathers or splats are appended.
fn recompute(
    g: &Graph,
    ai: usize,
    k: usize,
    g_prog: &Program,
    g_inputs: &[ValueId],
    j: usize,
) -> Option<(Program, Vec<ValueId>)> {
    let a_node = &g.nodes[ai];
    let a = &a_node.op.as_dyn::<Fused>()?.program;
    if a.dtype != g_prog.dtype || a.shape != g_prog.shape || a.outputs.get(k) != Some(&Output::Elementwise) {
        return None;
    }
    // `G` loads input `j` at `at`
    let at = g_prog
        .body
        .iter()
        .position(|ins| matches!(*ins, Instr::Load { input, .. } if input as usize == j))?;
    let Instr::Load { dst: rg, .. } = g_prog.body[at] else {
        unreachable!("found as a load")
    };
    // the store of output `k` (the `e`-th elementwise one)
    let e = a.outputs[..k].iter().filter(|o| **o == Output::Elementwise).count();
    let s = a
        .body
        .iter()
        .position(|ins| matches!(*ins, Instr::Store { out, .. } if out as usize == e))?;
    let Instr::Store { src, .. } = a.body[s] else {
        unreachable!("found as a store")
    };
    // the full-size values `G` loads
    let loaded: FxHashSet<ValueId> = g_prog
        .body
        .iter()
        .filter_map(|ins| match *ins {
            Instr::Load { input, .. } => Some(g_inputs[input as usize]),
            _ => None,
        })
        .collect();
    let mut cut = Cut {
        a,
        a_inputs: &a_node.inputs,
        a_outputs: &a_node.outputs,
        skip: g_inputs[j],
        loaded,
        prog: g_prog.clone(),
        inputs: g_inputs.to_vec(),
        body: Vec::new(),
        memo: FxHashMap::default(),
        ops: 0,
    };
    let top = cut.value(src, s)?;
    // the copy's last instruction makes `top`: it makes `rg` instead
    let last = cut.body.last_mut()?;
    if !operands(last).1.contains(&top) {
        return None;
    }
    let to_rg = |r: Reg| if r == top { rg } else { r };
    for ins in &mut cut.body {
        ins.map_registers(to_rg, to_rg);
    }
    let Cut {
        mut prog, inputs, body, ..
    } = cut;
    prog.body.splice(at..at + 1, body);
    Some((prog, inputs))
}

/// The copy of a slice of `A`'s program into `G`'s under way.
struct Cut<'a> {
    a: &'a Program,
    a_inputs: &'a [ValueId],
    a_outputs: &'a [ValueId],
    /// the value being replaced (not loaded in its own stead)
    skip: ValueId,
    /// the full-size values `G` loads
    loaded: FxHashSet<ValueId>,
    /// `G`'s program and inputs, with the registers, splats and inputs the
    /// copy adds
    prog: Program,
    inputs: Vec<ValueId>,
    /// the copied instructions, in order
    body: Vec<Instr>,
    /// per instruction of `A` (position) and register it writes: the
    /// register of `G` holding its value
    memo: FxHashMap<(usize, Reg), Reg>,
    /// operations copied
    ops: usize,
}

impl Cut<'_> {
    /// A fresh register of `G`.
    fn fresh(&mut self) -> Reg {
        self.prog.n_regs += 1;
        (self.prog.n_regs - 1) as Reg
    }

    /// `G`'s input index of `v` (appended if it is not one, of `len`
    /// elements).
    fn input(&mut self, v: ValueId, len: usize) -> u16 {
        if let Some(i) = self.inputs.iter().position(|&x| x == v) {
            return i as u16;
        }
        self.inputs.push(v);
        self.prog.input_len.push(len);
        (self.inputs.len() - 1) as u16
    }

    /// The register of `G` holding what `A`'s register `r` holds just
    /// before `A`'s instruction `pos`, copying the instructions that make
    /// it; `None` where it cannot be made within the rules.
    fn value(&mut self, r: Reg, pos: usize) -> Option<Reg> {
        let def = self.a.body[..pos].iter().rposition(|ins| operands(ins).1.contains(&r));
        let Some(di) = def else {
            // a splat of `A`
            let splat = self.a.splats.iter().find(|(sr, _)| *sr == r)?.1.clone();
            let splat = match splat {
                Splat::Value(c) => Splat::Value(c),
                Splat::Input(i) => Splat::Input(self.input(self.a_inputs[i as usize], 1)),
            };
            let d = self.fresh();
            self.prog.splats.push((d, splat));
            return Some(d);
        };
        if let Some(&d) = self.memo.get(&(di, r)) {
            return Some(d);
        }
        // an output of `A` that `G` loads anyway: loaded again (from the
        // cache: `G` reads the same elements)
        let next_def = self.a.body[di + 1..]
            .iter()
            .position(|ins| operands(ins).1.contains(&r))
            .map_or(self.a.body.len(), |p| di + 1 + p);
        let stored = self.a.body[di + 1..next_def].iter().find_map(|ins| match *ins {
            Instr::Store { out, src } if src == r => Some(out as usize),
            _ => None,
        });
        if let Some(e) = stored
            && let Some(v) = self.elementwise_output(e)
            && v != self.skip
            && self.loaded.contains(&v)
        {
            return Some(self.load(v, di, r));
        }
        let d = match self.a.body[di].clone() {
            Instr::Load { input, .. } => {
                let v = self.a_inputs[input as usize];
                if v == self.skip || !self.loaded.contains(&v) {
                    return None;
                }
                return Some(self.load(v, di, r));
            }
            Instr::Gather { input, q, p, .. } => {
                let v = self.a_inputs[input as usize];
                let len = self.a.input_len[input as usize];
                let input = self.input(v, len);
                let d = self.fresh();
                self.body.push(Instr::Gather { dst: d, input, q, p });
                d
            }
            Instr::Unary { op, a, .. }
            | Instr::UnarySum {
                op, dst: Some(_), a, ..
            } => {
                if !cheap_unary(&op) {
                    return None;
                }
                let a = self.operand(a, di, 1)?;
                let d = self.fresh();
                self.body.push(Instr::Unary { op, dst: d, a });
                d
            }
            Instr::Binary { op, a, b, .. }
            | Instr::BinarySum {
                op, dst: Some(_), a, b, ..
            } => {
                if !cheap_binary(&op) {
                    return None;
                }
                let (a, b) = (self.operand(a, di, 1)?, self.value(b, di)?);
                let d = self.fresh();
                self.body.push(Instr::Binary { op, dst: d, a, b });
                d
            }
            Instr::Chain {
                op1,
                op2,
                swap,
                a,
                b,
                c,
                ..
            } => {
                if !cheap_binary(&op1) || !cheap_binary(&op2) {
                    return None;
                }
                let a = self.operand(a, di, 2)?;
                let (b, c) = (self.value(b, di)?, self.value(c, di)?);
                let d = self.fresh();
                self.body.push(Instr::Chain {
                    op1,
                    op2,
                    swap,
                    dst: d,
                    a,
                    b,
                    c,
                });
                d
            }
            _ => return None,
        };
        self.memo.insert((di, r), d);
        Some(d)
    }

    /// [`value`](Self::value) of an instruction's first operand, counting
    /// the instruction's `ops` operations against [`MAX_OPS`].
    fn operand(&mut self, a: Reg, di: usize, ops: usize) -> Option<Reg> {
        self.ops += ops;
        if self.ops > MAX_OPS {
            return None;
        }
        self.value(a, di)
    }

    /// A load of `G`'s input `v` into a fresh register, standing for `A`'s
    /// register `r` as instruction `di` made it.
    fn load(&mut self, v: ValueId, di: usize, r: Reg) -> Reg {
        let input = self.input(v, self.a.len);
        let d = self.fresh();
        self.body.push(Instr::Load { dst: d, input });
        self.memo.insert((di, r), d);
        d
    }

    /// The value of `A`'s `e`-th elementwise output.
    fn elementwise_output(&self, e: usize) -> Option<ValueId> {
        let k = self
            .a
            .outputs
            .iter()
            .enumerate()
            .filter(|(_, o)| **o == Output::Elementwise)
            .nth(e)?
            .0;
        self.a_outputs.get(k).copied()
    }
}

/// Whether `op` costs about as little as an add: a few vector
/// instructions, where a transcendental function (`exp`, `erf`, `tanh`,
/// ...) costs more than the read it would save (measured: an `f32` `exp`
/// over a tensor takes longer than writing and reading it back once).
fn cheap_unary(op: &Unary) -> bool {
    matches!(
        op,
        Unary::Neg
            | Unary::Abs
            | Unary::Sign
            | Unary::Square
            | Unary::Floor
            | Unary::Ceil
            | Unary::Round
            | Unary::Relu
            | Unary::Relu6
            | Unary::LeakyRelu(_)
            | Unary::ClipByValue(..)
            | Unary::MulScalar(_)
            | Unary::DivScalar(_)
            | Unary::AddScalar(_)
    )
}

/// [`cheap_unary`] of a two-input op.
fn cheap_binary(op: &Binary) -> bool {
    matches!(
        op,
        Binary::Add
            | Binary::Sub
            | Binary::Mul
            | Binary::Div
            | Binary::Maximum
            | Binary::Minimum
            | Binary::SquaredDifference
            | Binary::ReluGrad
            | Binary::TanhGrad
    )
}

/// Every fused node stops writing the elementwise outputs that no node
/// reads and the graph does not return, and drops the instructions and
/// inputs that served only them.
fn drop_unread_outputs(g: &mut Graph) {
    let mut read = vec![false; g.values.len()];
    for n in &g.nodes {
        for &v in &n.inputs {
            read[v as usize] = true;
        }
    }
    for &o in &g.outputs {
        read[o as usize] = true;
    }
    for node in &mut g.nodes {
        let Some(f) = node.op.as_dyn::<Fused>() else {
            continue;
        };
        let unread: Vec<usize> = (0..node.outputs.len())
            .filter(|&k| f.program.outputs[k] == Output::Elementwise && !read[node.outputs[k] as usize])
            .collect();
        // (a kernel keeps at least one output)
        if unread.is_empty() || unread.len() == node.outputs.len() {
            continue;
        }
        let (mut prog, ops) = (f.program.clone(), f.ops);
        let mut outputs = node.outputs.to_vec();
        for &k in unread.iter().rev() {
            let e = prog.outputs[..k].iter().filter(|o| **o == Output::Elementwise).count() as u16;
            prog.outputs.remove(k);
            outputs.remove(k);
            prog.body
                .retain(|ins| !matches!(*ins, Instr::Store { out, .. } if out == e));
            for ins in &mut prog.body {
                if let Instr::Store { out, .. } = ins
                    && *out > e
                {
                    *out -= 1;
                }
            }
        }
        prog.compact();
        let mut inputs = node.inputs.to_vec();
        prune_inputs(&mut prog, &mut inputs);
        *node = Node {
            op: Op::Dyn(Arc::new(Fused::new(prog, ops))),
            inputs: inputs.into(),
            outputs: outputs.into(),
            site: None,
        };
    }
}

/// Removes the inputs of `p` (node inputs `inputs`) that no load, gather
/// or splat reads, renumbering the others.
fn prune_inputs(p: &mut Program, inputs: &mut Vec<ValueId>) {
    let mut used = vec![false; inputs.len()];
    for ins in &p.body {
        if let Instr::Load { input, .. } | Instr::Gather { input, .. } = *ins {
            used[input as usize] = true;
        }
    }
    for (_, s) in &p.splats {
        if let Splat::Input(i) = *s {
            used[i as usize] = true;
        }
    }
    if used.iter().all(|&u| u) {
        return;
    }
    let mut new_index = vec![0u16; inputs.len()];
    let mut n = 0u16;
    for (i, &u) in used.iter().enumerate() {
        new_index[i] = n;
        n += u16::from(u);
    }
    for ins in &mut p.body {
        if let Instr::Load { input, .. } | Instr::Gather { input, .. } = ins {
            *input = new_index[*input as usize];
        }
    }
    for (_, s) in &mut p.splats {
        if let Splat::Input(i) = s {
            *i = new_index[*i as usize];
        }
    }
    let mut u = used.iter();
    inputs.retain(|_| *u.next().unwrap_or(&true));
    let mut u = used.iter();
    p.input_len.retain(|_| *u.next().unwrap_or(&true));
}
