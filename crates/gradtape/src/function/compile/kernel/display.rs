//! A program's listing (`Display`): one line per splat and instruction,
//! registers `rN`, inputs `inN`, outputs `outN`, partial sums `sumN` and
//! partial reductions `partN`, as the compiler's tests and `profile` show
//! them.

use std::fmt;

use super::{Axis, Instr, Program, Splat};

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (r, s) in self.splats.iter() {
            match s {
                Splat::Input(i) => writeln!(f, "r{r} = splat in{i}")?,
                Splat::Value(v) => writeln!(f, "r{r} = splat {v}")?,
            }
        }
        for ins in self.body.iter() {
            match ins {
                Instr::Load { dst, input } => writeln!(f, "r{dst} = load in{input}")?,
                Instr::Unary { op, dst, a } => writeln!(f, "r{dst} = {}(r{a})", op.name())?,
                Instr::Pair { pair, x0, x1, a } => writeln!(f, "r{x0}, r{x1} = {}(r{a})", pair.name())?,
                Instr::Binary { op, dst, a, b } => writeln!(f, "r{dst} = {}(r{a}, r{b})", op.name())?,
                Instr::Store { out, src } => writeln!(f, "out{out} = r{src}")?,
                Instr::Accumulate { acc, src } => writeln!(f, "sum{acc} += r{src}")?,
                Instr::UnarySum { op, dst, a, acc } => {
                    if let Some(d) = dst {
                        write!(f, "r{d} = ")?;
                    }
                    writeln!(f, "sum{acc} += {}(r{a})", op.name())?
                }
                Instr::BinarySum { op, dst, a, b, acc } => {
                    if let Some(d) = dst {
                        write!(f, "r{d} = ")?;
                    }
                    writeln!(f, "sum{acc} += {}(r{a}, r{b})", op.name())?
                }
                Instr::Chain {
                    op1,
                    op2,
                    swap,
                    dst,
                    a,
                    b,
                    c,
                } => {
                    let t = format!("{}(r{a}, r{b})", op1.name());
                    let (x, y) = if *swap {
                        (format!("r{c}"), t)
                    } else {
                        (t, format!("r{c}"))
                    };
                    writeln!(f, "r{dst} = {}({x}, {y})", op2.name())?
                }
                Instr::Gather { dst, input, q, p } => writeln!(f, "r{dst} = gather in{input}[j / {q} % {p}]")?,
                Instr::Reduce { out, src, fold, axis } => match axis {
                    Axis::Leading(p) => writeln!(f, "part{out}[j % {p}] {}= r{src}", fold.name())?,
                    Axis::Trailing(q) => writeln!(f, "part{out}[j / {q}] {}= r{src}", fold.name())?,
                    Axis::Blocked(p) => writeln!(f, "part{out}[j % {p}] {}= r{src} (blocked)", fold.name())?,
                },
            }
        }
        Ok(())
    }
}
