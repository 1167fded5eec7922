//! Programs of one element (a scalar graph: a recurrence on a scalar, a
//! learning-rate schedule, a physics step on a few numbers), run as a
//! loop over decoded instructions.
//!
//! A vectorised program spends its time in the loops over a register's
//! elements, and dispatching each instruction costs nothing beside them.
//! On one element the dispatch is all there is: matching the instruction,
//! then the op inside it (two indirect jumps), for a multiply. So the
//! common instructions of scalar code (an op with a constant operand:
//! `x * c`, `x + c`, `x / c`, and the four arithmetic ops of two
//! registers) are decoded once, at the program's first run, into [`Op`]s
//! that carry what they need (the constant already in the element type),
//! and the rest run as before, out of line.
//!
//! The loop also keeps the value the last instruction wrote in a local:
//! in a chain of ops, each reading the one before, every op would
//! otherwise wait on its operand's store to the register file and the
//! reload, about as long as the op. For that local to stay in a machine
//! register the loop must be small, hence the out-of-line arm for the
//! other instructions (inlined, their code crowded the loop's registers
//! and the local went through the stack).
//!
//! Each decoded op computes what its instruction computes, in the same
//! type (`v * c` with `c` rounded to the type once, as the eager kernel's
//! scalar operand), so the bits are the same.

use std::any::Any;
use std::sync::OnceLock;

use super::{binary, chain, unary_one, Instr, Lane, Program, Reg, Splat};
use crate::kernels::cpu::math::with_simd;
use crate::ops::desc::{Binary, Unary};

/// A program's decoded instructions for its element type, made at its
/// first run on one element, and its call plan (see `prepared`), made at
/// its first run. Not part of the program's identity: equal to every
/// other, and a clone starts empty (a clone may be changed, and would keep
/// what was made from the instructions it had).
#[derive(Default)]
pub struct Decoded {
    code: OnceLock<Box<dyn Any + Send + Sync>>,
    pub(super) prepared: OnceLock<super::Prepared>,
}

impl Clone for Decoded {
    fn clone(&self) -> Self {
        Decoded::default()
    }
}

impl PartialEq for Decoded {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decoded")
    }
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op<T> {
    /// `dst = a * c`
    Scale { dst: Reg, a: Reg, c: T },
    /// `dst = a + c`
    Shift { dst: Reg, a: Reg, c: T },
    /// `dst = a / c`
    DivBy { dst: Reg, a: Reg, c: T },
    /// `dst = a ∘ b` for `Add`, `Sub`, `Mul`, `Div` (`Arith`)
    Arith { op: Arith, dst: Reg, a: Reg, b: Reg },
    /// instruction `k` of the body, as it is
    Other(u32),
}

/// The arithmetic of [`Op::Arith`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

/// `body` decoded for `T`.
pub(crate) fn decode<T: Lane>(body: &[Instr]) -> Vec<Op<T>> {
    body.iter()
        .enumerate()
        .map(|(k, ins)| match *ins {
            Instr::Unary {
                op: Unary::MulScalar(c),
                dst,
                a,
            } => Op::Scale {
                dst,
                a,
                c: T::from_f64(c.0),
            },
            Instr::Unary {
                op: Unary::AddScalar(c),
                dst,
                a,
            } => Op::Shift {
                dst,
                a,
                c: T::from_f64(c.0),
            },
            Instr::Unary {
                op: Unary::DivScalar(c),
                dst,
                a,
            } => Op::DivBy {
                dst,
                a,
                c: T::from_f64(c.0),
            },
            Instr::Binary { ref op, dst, a, b } => {
                let op = match op {
                    Binary::Add => Arith::Add,
                    Binary::Sub => Arith::Sub,
                    Binary::Mul => Arith::Mul,
                    Binary::Div => Arith::Div,
                    _ => return Op::Other(k as u32),
                };
                Op::Arith { op, dst, a, b }
            }
            _ => Op::Other(k as u32),
        })
        .collect()
}

impl Program {
    /// The body decoded for `T` (made at the first call).
    fn decoded<T: Lane>(&self) -> &[Op<T>] {
        let any = self
            .scalar
            .code
            .get_or_init(|| Box::new(decode::<T>(&self.body).into_boxed_slice()));
        match any.downcast_ref::<Box<[Op<T>]>>() {
            Some(code) => code,
            // (a program runs in its one dtype: never decoded for another)
            None => &[],
        }
    }

    /// Runs the program on one element (a scalar graph): registers of one
    /// number, no chunk loops.
    pub(super) fn run_scalar<T: Lane>(&self, srcs: &[&[T]], outs: &mut [T], sums: &mut [f64]) {
        let mut regs: smallvec::SmallVec<[T; 32]> = smallvec::smallvec![T::zero(); self.n_regs.max(1)];
        let r = &mut regs[..];
        for (reg, s) in self.splats.iter() {
            r[*reg as usize] = match s {
                Splat::Input(i) => srcs[*i as usize][0],
                Splat::Value(v) => T::from_f64(*v),
            };
        }
        let code = self.decoded::<T>();
        if code.len() != self.body.len() {
            // (decoded for another type: see `decoded`)
            for ins in self.body.iter() {
                other(ins, r, srcs, outs, sums);
            }
            return;
        }
        run(code, &self.body, r, srcs, outs, sums);
    }
}

/// The loop over the decoded ops (its own function, not inlined into its
/// caller's: there the last value's local went through the stack too).
#[inline(never)]
fn run<T: Lane>(code: &[Op<T>], body: &[Instr], r: &mut [T], srcs: &[&[T]], outs: &mut [T], sums: &mut [f64]) {
    // the last value written, and its register
    let (mut last_reg, mut last) = (Reg::MAX, T::zero());
    macro_rules! get {
        ($x:expr) => {
            if $x == last_reg {
                last
            } else {
                r[$x as usize]
            }
        };
    }
    for op in code {
        let (d, y) = match *op {
            Op::Scale { dst, a, c } => (dst, get!(a) * c),
            Op::Shift { dst, a, c } => (dst, get!(a) + c),
            Op::DivBy { dst, a, c } => (dst, get!(a) / c),
            Op::Arith { op, dst, a, b } => {
                let (x, y) = (get!(a), get!(b));
                let v = match op {
                    Arith::Add => x + y,
                    Arith::Sub => x - y,
                    Arith::Mul => x * y,
                    Arith::Div => x / y,
                };
                (dst, v)
            }
            // (every value is in `r` as well: the instruction reads its
            // operands there)
            Op::Other(k) => match other(&body[k as usize], r, srcs, outs, sums) {
                Some(w) => w,
                None => continue,
            },
        };
        r[d as usize] = y;
        (last_reg, last) = (d, y);
    }
}

/// One instruction of a scalar program, as the vectorised kernel computes
/// it, out of line and compiled for the CPU's vector extensions (the
/// `f32` exp, sin and cos use fused multiply-adds, which are library calls
/// without them); returns the register it wrote last and the value, if it
/// wrote one (already in `r`).
#[inline(never)]
fn other<T: Lane>(ins: &Instr, r: &mut [T], srcs: &[&[T]], outs: &mut [T], sums: &mut [f64]) -> Option<(Reg, T)> {
    with_simd(
        #[inline(always)]
        || {
            let put = |r: &mut [T], d: Reg, y: T| {
                r[d as usize] = y;
                Some((d, y))
            };
            match *ins {
                Instr::Load { dst, input } | Instr::Gather { dst, input, .. } => put(r, dst, srcs[input as usize][0]),
                Instr::Unary { ref op, dst, a } => {
                    let y = unary_one(op, r[a as usize]);
                    put(r, dst, y)
                }
                Instr::Pair { pair, x0, x1, a } => {
                    let (mut y0, mut y1) = ([T::zero()], [T::zero()]);
                    pair.run(&[r[a as usize]], &mut y0, &mut y1);
                    r[x0 as usize] = y0[0];
                    put(r, x1, y1[0])
                }
                Instr::Binary { ref op, dst, a, b } => {
                    let mut y = [T::zero()];
                    binary(op, &[r[a as usize]], &[r[b as usize]], &mut y);
                    put(r, dst, y[0])
                }
                Instr::Store { out, src } => {
                    outs[out as usize] = r[src as usize];
                    None
                }
                Instr::Accumulate { acc, src } => {
                    sums[acc as usize] += r[src as usize].to_f64();
                    None
                }
                Instr::UnarySum { ref op, dst, a, acc } => {
                    let y = unary_one(op, r[a as usize]);
                    sums[acc as usize] += y.to_f64();
                    dst.and_then(|d| put(r, d, y))
                }
                Instr::BinarySum { ref op, dst, a, b, acc } => {
                    let mut y = [T::zero()];
                    binary(op, &[r[a as usize]], &[r[b as usize]], &mut y);
                    sums[acc as usize] += y[0].to_f64();
                    dst.and_then(|d| put(r, d, y[0]))
                }
                Instr::Chain {
                    ref op1,
                    ref op2,
                    swap,
                    dst,
                    a,
                    b,
                    c,
                } => {
                    let y = chain::one(op1, op2, swap, r[a as usize], r[b as usize], r[c as usize]);
                    put(r, dst, y)
                }
                // (`run_typed` runs programs with partial reductions)
                Instr::Reduce { .. } => None,
            }
        },
    )
}
