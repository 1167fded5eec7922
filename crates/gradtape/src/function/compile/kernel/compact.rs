//! Tidying a program after a pass edited it: one instruction per value
//! (value numbering), no instruction whose result nothing reads, and as
//! few registers as the values alive at once need.
//!
//! The registers matter for speed: a task's registers share
//! [`REG_BYTES`](super::REG_BYTES), so each register more makes every
//! register shorter and the per-instruction costs more frequent.

use rustc_hash::FxHashMap;

use super::sums::operands;
use super::{Instr, Program, Reg, Splat};

impl Program {
    /// Merges instructions that compute the same value from the same
    /// registers (loads of one input, one op of the same operands, equal
    /// splats), removes those whose results nothing reads, and allocates
    /// the registers again: a register is reused once its value is dead,
    /// an instruction never writes a register it reads, and splatted
    /// registers are never written. The program computes the same bits.
    pub(crate) fn compact(&mut self) {
        // (names are `u32`s kept in the instructions' `u16` fields until
        // step 4 maps them to registers: at most one per instruction and
        // splat, so a program that could overflow them is left as it is)
        if self.body.len() * 2 + self.splats.len() >= usize::from(Reg::MAX) {
            return;
        }
        // 1. every value its own name (splats first)
        let mut name: FxHashMap<Reg, u32> = FxHashMap::default();
        let mut splats: Vec<(u32, Splat)> = Vec::new();
        let mut next = 0u32;
        for (r, s) in &self.splats {
            let same = splats.iter().find(|(_, t)| t == s).map(|(v, _)| *v);
            let v = same.unwrap_or_else(|| {
                next += 1;
                splats.push((next - 1, s.clone()));
                next - 1
            });
            name.insert(*r, v);
        }
        // 2. value numbering: a pure instruction seen before names its
        // results after the earlier one's
        // (keyed by the listing of the instruction with its results
        // blanked: ops carry float attributes, which do not hash)
        let mut seen: FxHashMap<String, Vec<u32>> = FxHashMap::default();
        let mut body: Vec<Instr> = Vec::with_capacity(self.body.len());
        for ins in &self.body {
            let (_, writes) = operands(ins);
            let mut ins = ins.clone();
            map_reads(&mut ins, |r| name.get(&r).map_or(u32::from(r), |&v| v));
            let key = (!has_effect(&ins)).then(|| format!("{:?}", with_writes(&ins, &[0; 2])));
            if let Some(vs) = key.as_ref().and_then(|k| seen.get(k)) {
                for (w, &v) in writes.iter().zip(vs) {
                    name.insert(*w, v);
                }
                continue;
            }
            let vs: Vec<u32> = writes
                .iter()
                .map(|_| {
                    next += 1;
                    next - 1
                })
                .collect();
            if let Some(key) = key {
                seen.insert(key, vs.clone());
            }
            for (w, &v) in writes.iter().zip(&vs) {
                name.insert(*w, v);
            }
            body.push(with_writes(&ins, &vs));
        }
        // 3. last reads; results nothing reads go (backwards, so that a
        // chain of them goes)
        let n = next as usize;
        let mut last: Vec<Option<usize>> = vec![None; n];
        let mut keep = vec![true; body.len()];
        for (i, ins) in body.iter_mut().enumerate().rev() {
            let (reads, writes) = operands32(ins);
            if !has_effect(ins) && writes.iter().all(|&w| last[w as usize].is_none()) {
                keep[i] = false;
                continue;
            }
            if let Instr::UnarySum { dst, .. } | Instr::BinarySum { dst, .. } = ins
                && dst.is_some_and(|d| last[d as usize].is_none())
            {
                *dst = None;
            }
            for r in reads {
                last[r as usize].get_or_insert(i);
            }
        }
        let mut k = keep.iter();
        body.retain(|_| *k.next().unwrap_or(&true));
        let mut last: Vec<Option<usize>> = vec![None; n];
        for (i, ins) in body.iter().enumerate() {
            for r in operands32(ins).0 {
                last[r as usize] = Some(i);
            }
        }
        // 4. registers: splats pinned, the others reused once dead
        let mut reg: Vec<Option<Reg>> = vec![None; n];
        let mut new_splats = Vec::new();
        let mut n_regs: Reg = 0;
        for (v, s) in splats {
            if last[v as usize].is_some() {
                reg[v as usize] = Some(n_regs);
                new_splats.push((n_regs, s));
                n_regs += 1;
            }
        }
        let mut free: Vec<Reg> = Vec::new();
        for (i, ins) in body.iter_mut().enumerate() {
            let (reads, writes) = operands32(ins);
            let mut out = [0 as Reg; 2];
            for (k, &w) in writes.iter().enumerate() {
                let r = free.pop().unwrap_or_else(|| {
                    n_regs += 1;
                    n_regs - 1
                });
                reg[w as usize] = Some(r);
                out[k] = r;
            }
            map_reads(ins, |r| {
                u32::from(reg[r as usize].expect("a value read after it is made"))
            });
            *ins = with_writes(ins, &[u32::from(out[0]), u32::from(out[1])]);
            // registers whose values die here (not splats), and results
            // nothing reads
            for r in reads.iter().chain(&writes) {
                let (v, dead) = (*r as usize, last[*r as usize].is_none_or(|l| l <= i));
                if dead
                    && let Some(rr) = reg[v].take()
                    && !new_splats.iter().any(|(s, _)| *s == rr)
                {
                    free.push(rr);
                }
            }
        }
        self.splats = new_splats;
        self.body = body;
        self.n_regs = usize::from(n_regs).max(1);
    }
}

/// Whether `ins` does more than write its registers (an output, a sum or
/// a reduction): never merged or removed.
fn has_effect(ins: &Instr) -> bool {
    matches!(
        ins,
        Instr::Store { .. }
            | Instr::Accumulate { .. }
            | Instr::Reduce { .. }
            | Instr::UnarySum { .. }
            | Instr::BinarySum { .. }
    )
}

/// The registers `ins` reads and writes, as names (see `compact`).
fn operands32(ins: &Instr) -> (smallvec::SmallVec<[u32; 3]>, smallvec::SmallVec<[u32; 2]>) {
    let (r, w) = operands(ins);
    (
        r.iter().map(|&x| u32::from(x)).collect(),
        w.iter().map(|&x| u32::from(x)).collect(),
    )
}

impl Instr {
    /// Maps each register the instruction reads through `read` and each it
    /// writes through `write` (results in the order `operands` lists them).
    pub(crate) fn map_registers(&mut self, mut read: impl FnMut(Reg) -> Reg, mut write: impl FnMut(Reg) -> Reg) {
        let mut r = |x: &mut Reg| *x = read(*x);
        match self {
            Instr::Load { dst, .. } | Instr::Gather { dst, .. } => *dst = write(*dst),
            Instr::Unary { dst, a, .. } => {
                r(a);
                *dst = write(*dst)
            }
            Instr::Pair { x0, x1, a, .. } => {
                r(a);
                *x0 = write(*x0);
                *x1 = write(*x1)
            }
            Instr::Binary { dst, a, b, .. } => {
                r(a);
                r(b);
                *dst = write(*dst)
            }
            Instr::Chain { dst, a, b, c, .. } => {
                r(a);
                r(b);
                r(c);
                *dst = write(*dst)
            }
            Instr::UnarySum { dst, a, .. } => {
                r(a);
                if let Some(d) = dst {
                    *d = write(*d)
                }
            }
            Instr::BinarySum { dst, a, b, .. } => {
                r(a);
                r(b);
                if let Some(d) = dst {
                    *d = write(*d)
                }
            }
            Instr::Store { src, .. } | Instr::Accumulate { src, .. } | Instr::Reduce { src, .. } => r(src),
        }
    }
}

/// Maps the registers `ins` reads through `f`.
fn map_reads(ins: &mut Instr, f: impl Fn(Reg) -> u32) {
    ins.map_registers(|r| f(r) as Reg, |w| w);
}

/// `ins` writing `vs` (its first one or two results, in the order
/// `operands` lists them).
fn with_writes(ins: &Instr, vs: &[u32]) -> Instr {
    let mut ins = ins.clone();
    let mut k = 0;
    ins.map_registers(
        |r| r,
        |_| {
            k += 1;
            vs.get(k - 1).copied().unwrap_or(0) as Reg
        },
    );
    ins
}
