//! Two arithmetic ops in one pass: `t = op1(a, b)` and then
//! `dst = op2(t, c)` (or `op2(c, t)`), where nothing else reads `t`, run
//! as one [`Instr::Chain`] — the `a * b + c` of product rules, the
//! `x * y - z` of residuals. Each element is computed as the two
//! instructions compute it (two roundings, never a fused multiply-add), so
//! the bits are theirs; the pass saves writing `t` and reading it back.
//!
//! The ops are `Add`, `Sub` and `Mul`, both ways round for the second
//! (`c - t` as well as `t - c`): twelve loops, times where the result goes
//! (a fresh register, or over `a` or `b` where the allocator gave the
//! result the register of an operand that dies at the first op).

use super::regs::{ChainRegs, Regs};
use super::sums::operands;
use super::{Instr, Reg};
use crate::kernels::cpu::lockstep::{zip3, zip4};
use crate::ops::desc::Binary;
use crate::tensor::Float;

/// Whether `op` can be one of a chain's two ops.
fn arith(op: &Binary) -> bool {
    matches!(op, Binary::Add | Binary::Sub | Binary::Mul)
}

/// Merges each `Binary` of `Add`, `Sub` or `Mul` whose result is read only
/// by the next instruction, another such `Binary`, into that one; returns
/// how many it merged. The merged instruction reads `a`, `b` and `c` and
/// writes the second op's register, which may be `a` or `b` (each element
/// is read before it is written) but not `c`.
pub fn merge_chains(body: &mut Vec<Instr>) -> usize {
    let mut merged = 0;
    let mut i = 0;
    while i + 1 < body.len() {
        let (
            Instr::Binary { op: op1, dst: t, a, b },
            Instr::Binary {
                op: op2,
                dst,
                a: x,
                b: y,
            },
        ) = (&body[i], &body[i + 1])
        else {
            i += 1;
            continue;
        };
        let (t, a, b, dst, x, y) = (*t, *a, *b, *dst, *x, *y);
        let fits = arith(op1) && arith(op2) && (x == t) != (y == t) && dst != t;
        let c = if x == t { y } else { x };
        // (`dst` over both operands of the first op, `t = a * a` written
        // over `a`, is no case of `ChainRegs`: left as two instructions)
        if !fits || dst == c || (dst == a && dst == b) || !dead_after(body, i + 1, t) {
            i += 1;
            continue;
        }
        // `op2(c, t)`: commutative ops put `t` first
        let swap = y == t && *op2 == Binary::Sub;
        body[i] = Instr::Chain {
            op1: op1.clone(),
            op2: op2.clone(),
            swap,
            dst,
            a,
            b,
            c,
        };
        body.remove(i + 1);
        merged += 1;
        i += 1;
    }
    merged
}

/// Whether no instruction after `at` reads `r` before one writes it.
fn dead_after(body: &[Instr], at: usize, r: Reg) -> bool {
    for ins in body[at + 1..].iter() {
        let (reads, writes) = operands(ins);
        if reads.contains(&r) {
            return false;
        }
        if writes.contains(&r) {
            return true;
        }
    }
    true
}

/// Runs `$body` with `$f` bound to the element function of a chain's op
/// (`$swap`: the operands the other way round).
macro_rules! with_arith {
    ($op:expr, $swap:expr, $T:ty, |$f:ident| $body:expr) => {
        match ($op, $swap) {
            (Binary::Add, _) => {
                let $f = |x: $T, y: $T| x + y;
                $body
            }
            (Binary::Sub, false) => {
                let $f = |x: $T, y: $T| x - y;
                $body
            }
            (Binary::Sub, true) => {
                let $f = |x: $T, y: $T| y - x;
                $body
            }
            _ => {
                let $f = |x: $T, y: $T| x * y;
                $body
            }
        }
    };
}

/// Runs a [`Instr::Chain`] over `n` elements of the registers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn run<T: Float>(
    op1: &Binary,
    op2: &Binary,
    swap: bool,
    regs: &mut Regs<'_, T>,
    dst: Reg,
    a: Reg,
    b: Reg,
    c: Reg,
    n: usize,
) {
    with_arith!(op1, false, T, |f| with_arith!(op2, swap, T, |g| {
        match regs.chain(dst, a, b, c, n) {
            ChainRegs::Fresh(d, a, b, c) => {
                for (o, &x, &y, &z) in zip4(d, a, b, c) {
                    *o = g(f(x, y), z);
                }
            }
            ChainRegs::OverA(a, b, c) => {
                for (o, &y, &z) in zip3(a, b, c) {
                    *o = g(f(*o, y), z);
                }
            }
            ChainRegs::OverB(a, b, c) => {
                for (&x, o, &z) in zip3(a, b, c) {
                    *o = g(f(x, *o), z);
                }
            }
        }
    }))
}

/// `op2(op1(a, b), c)` (or `op2(c, op1(a, b))`) of one element.
pub fn one<T: Float>(op1: &Binary, op2: &Binary, swap: bool, a: T, b: T, c: T) -> T {
    with_arith!(op1, false, T, |f| with_arith!(op2, swap, T, |g| g(f(a, b), c)))
}
