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
pub(super) fn merge_chains(body: &mut Vec<Instr>) -> usize {
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
    for ins in &body[at + 1..] {
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
                for (((o, &x), &y), &z) in d.iter_mut().zip(a).zip(b).zip(c) {
                    *o = g(f(x, y), z);
                }
            }
            ChainRegs::OverA(a, b, c) => {
                for ((o, &y), &z) in a.iter_mut().zip(b).zip(c) {
                    *o = g(f(*o, y), z);
                }
            }
            ChainRegs::OverB(a, b, c) => {
                for ((&x, o), &z) in a.iter().zip(b.iter_mut()).zip(c) {
                    *o = g(f(x, *o), z);
                }
            }
        }
    }))
}

/// `op2(op1(a, b), c)` (or `op2(c, op1(a, b))`) of one element.
pub(super) fn one<T: Float>(op1: &Binary, op2: &Binary, swap: bool, a: T, b: T, c: T) -> T {
    with_arith!(op1, false, T, |f| with_arith!(op2, swap, T, |g| g(f(a, b), c)))
}

#[cfg(test)]
mod tests {
    use super::super::{testing, Output, Program};
    use super::*;
    use crate::tensor::Tensor;
    use Binary::{Add, Mul, Sub};

    /// Three chains: `(x - y) * z` into a fresh register; `z - x * r5`
    /// over `r5` (its second input); `r3 * y + z` over `r3` (its first,
    /// a register of its own, not an input read in place); and pairs that
    /// stay apart because their first result is read again.
    fn program(len: usize) -> Program {
        use Instr::*;
        testing::program(
            len,
            3,
            vec![
                Load { dst: 0, input: 0 },
                Load { dst: 1, input: 1 },
                Load { dst: 2, input: 2 },
                Binary {
                    op: Sub,
                    dst: 3,
                    a: 0,
                    b: 1,
                },
                Binary {
                    op: Mul,
                    dst: 4,
                    a: 3,
                    b: 2,
                },
                Store { out: 0, src: 4 },
                Binary {
                    op: Add,
                    dst: 3,
                    a: 0,
                    b: 2,
                },
                Binary {
                    op: Mul,
                    dst: 5,
                    a: 3,
                    b: 1,
                },
                Store { out: 2, src: 3 },
                Binary {
                    op: Mul,
                    dst: 4,
                    a: 0,
                    b: 5,
                },
                Binary {
                    op: Sub,
                    dst: 5,
                    a: 2,
                    b: 4,
                },
                Store { out: 1, src: 5 },
                Binary {
                    op: Mul,
                    dst: 3,
                    a: 0,
                    b: 0,
                },
                Store { out: 3, src: 3 },
                Binary {
                    op: Mul,
                    dst: 4,
                    a: 3,
                    b: 1,
                },
                Binary {
                    op: Add,
                    dst: 3,
                    a: 4,
                    b: 2,
                },
                Store { out: 4, src: 3 },
            ],
            6,
            vec![Output::Elementwise; 5],
        )
    }

    #[test]
    fn arithmetic_pairs_merge_where_the_first_result_dies() {
        let mut p = program(8);
        assert_eq!(merge_chains(&mut p.body), 3);
        use Instr::*;
        assert_eq!(
            p.body[3..],
            [
                Chain {
                    op1: Sub,
                    op2: Mul,
                    swap: false,
                    dst: 4,
                    a: 0,
                    b: 1,
                    c: 2
                },
                Store { out: 0, src: 4 },
                Binary {
                    op: Add,
                    dst: 3,
                    a: 0,
                    b: 2
                },
                Binary {
                    op: Mul,
                    dst: 5,
                    a: 3,
                    b: 1
                },
                Store { out: 2, src: 3 },
                Chain {
                    op1: Mul,
                    op2: Sub,
                    swap: true,
                    dst: 5,
                    a: 0,
                    b: 5,
                    c: 2
                },
                Store { out: 1, src: 5 },
                Binary {
                    op: Mul,
                    dst: 3,
                    a: 0,
                    b: 0
                },
                Store { out: 3, src: 3 },
                Chain {
                    op1: Mul,
                    op2: Add,
                    swap: false,
                    dst: 3,
                    a: 3,
                    b: 1,
                    c: 2
                },
                Store { out: 4, src: 3 },
            ]
        );
        assert!(format!("{p}").contains("r5 = Sub(r2, Mul(r0, r5))\n"), "{p}");
    }

    #[test]
    fn a_chain_gives_the_bits_of_its_two_instructions() {
        for len in [1usize, 5, 256, 1000, 4099, 100_003] {
            let xs: Vec<Tensor> = (0..3)
                .map(|k| {
                    let v: Vec<f32> = (0..len)
                        .map(|i| ((i * (k + 2)) as f32 * 0.37).sin() * 1.7 + k as f32)
                        .collect();
                    Tensor::from_vec(v, &[len]).unwrap()
                })
                .collect();
            let plain = program(len);
            let mut merged = plain.clone();
            assert_eq!(merge_chains(&mut merged.body), 3);
            let out = testing::same_bits(&plain, &merged, &xs);
            assert_eq!(out.len(), 5);
            // and they are the values named
            let v: Vec<Vec<f32>> = xs.iter().map(|t| t.to_vec::<f32>().unwrap()).collect();
            for i in (0..len).step_by(97) {
                let (x, y, z) = (v[0][i], v[1][i], v[2][i]);
                assert_eq!(out[0][i], (x - y) * z, "{len} {i}");
                assert_eq!(out[1][i], z - x * ((x + z) * y), "{len} {i}");
                assert_eq!(out[4][i], x * x * y + z, "{len} {i}");
            }
        }
        // the scalar form
        assert_eq!(one(&Mul, &Sub, true, 2.0f64, 3.0, 10.0), 4.0);
        assert_eq!(one(&Sub, &Add, false, 2.0f64, 3.0, 10.0), 9.0);
    }
}
