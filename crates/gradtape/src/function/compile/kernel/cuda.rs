//! A fused [`Program`] as CUDA C: the statements of its kernel on a GPU
//! (`kernels::cuda::fused` wraps them in the kernel's skeleton and runs
//! it).
//!
//! One thread computes one element `i` of the group (grid-stride): every
//! register is a local of the element type `T`, each instruction one
//! statement from the elementwise table's CUDA expressions
//! (`ops::math::cuda_expr`, which follow the table's code: the same
//! branches and order of operations), so that an element is computed as
//! the CPU program computes it, op by op in `T`. Inputs are read as the
//! CPU program reads them: `Load` as `inK[i]`, `Gather` as
//! `inK[(i / q) % p]`, a splatted input as `inK[0]` and a splatted
//! constant as a literal, once per thread before the loop. An op's
//! attributes are literals too (the source is made once per compiled
//! graph). Elementwise outputs are stored as `outK[i]`; a sum of all
//! elements adds each thread's values in `double` (`sK`; see the skeleton
//! for the rest), where the CPU adds per chunk in `T` columns and then in
//! `f64`: the one reassociation, as between the CPU's fused and eager
//! sums.
//!
//! Partial reductions (`Instr::Reduce`) have no CUDA form here: a program
//! with one has no kernel ([`Program::cuda_kernel`] is `None`); the GPU's
//! compiled graphs are made without them (the reduction stays a node, on
//! its GPU kernel).

use std::fmt::Write as _;

use super::{Instr, Output, Program, Splat};
use crate::kernels::cuda::fused::{self, FusedKernel, FusedOut};
use crate::ops::desc::{Binary, Unary};
use crate::ops::math::cuda_expr::{self, CType};
use crate::tensor::DType;

/// A `double` as a C expression of exactly that value.
fn double(v: f64) -> String {
    if v.is_finite() {
        // (the shortest decimal that reads back as `v`; C reads it the same)
        format!("({v:?})")
    } else {
        format!("gt_from_bits({}LL)", v.to_bits() as i64)
    }
}

/// `op(x)` in C, its attributes as literals.
fn unary(op: &Unary, ty: CType, x: &str) -> Option<String> {
    let attrs: Vec<String> = cuda_expr::unary_attrs(op).into_iter().map(double).collect();
    let names: Vec<&str> = attrs.iter().map(String::as_str).chain(["0.0", "0.0"]).collect();
    cuda_expr::unary_expr_with(op, ty, x, &names)
}

/// `op(a, b)` in C, of the value type (never a comparison).
fn binary(op: &Binary, ty: CType, a: &str, b: &str) -> Option<String> {
    if cuda_expr::is_comparison(op) {
        return None;
    }
    cuda_expr::binary_expr(op, ty, a, b)
}

impl Program {
    /// The CUDA kernel of this program (`None` for a program with a
    /// partial reduction, or an op with no CUDA expression).
    pub fn cuda_kernel(&self) -> Option<FusedKernel> {
        let (ty, t) = match self.dtype {
            DType::F32 => (CType::F32, "float"),
            DType::F64 => (CType::F64, "double"),
            _ => return None,
        };
        let (setup, body) = self.cuda_statements(ty)?;
        let n_outs = self.outputs.iter().filter(|o| matches!(o, Output::Elementwise)).count();
        let outputs = self
            .outputs
            .iter()
            .map(|o| match o {
                Output::Elementwise => Some(FusedOut::Elementwise),
                Output::Sum(s) => Some(FusedOut::Sum(s.clone())),
                Output::Reduced(_) => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let n_sums = outputs.iter().filter(|o| matches!(o, FusedOut::Sum(_))).count();
        let source = fused::source(
            cuda_expr::PRELUDE,
            t,
            self.input_len.len(),
            n_outs,
            n_sums,
            &setup,
            &body,
        );
        Some(FusedKernel::new(
            source,
            self.dtype,
            self.shape.clone(),
            self.input_len.clone(),
            outputs,
        ))
    }

    /// The statements before the loop (registers, splats) and of one
    /// element `i`.
    fn cuda_statements(&self, ty: CType) -> Option<(String, String)> {
        let mut setup = String::new();
        if self.n_regs > 0 {
            let regs: Vec<String> = (0..self.n_regs).map(|r| format!("r{r} = 0")).collect();
            let _ = writeln!(setup, "  T {};", regs.join(", "));
        }
        for (r, s) in &self.splats {
            let _ = match s {
                Splat::Input(k) => writeln!(setup, "  r{r} = in{k}[0];"),
                Splat::Value(v) => writeln!(setup, "  r{r} = (T){};", double(*v)),
            };
        }
        let mut body = String::new();
        let b = &mut body;
        for ins in &self.body {
            let _ = match ins {
                Instr::Load { dst, input } => writeln!(b, "    r{dst} = in{input}[i];"),
                Instr::Gather { dst, input, q, p } => writeln!(b, "    r{dst} = in{input}[(i / {q}LL) % {p}LL];"),
                Instr::Unary { op, dst, a } => writeln!(b, "    r{dst} = {};", unary(op, ty, &format!("r{a}"))?),
                Instr::Pair { pair, x0, x1, a } => {
                    let [op0, op1] = pair.ops();
                    writeln!(
                        b,
                        "    {{ const T x = r{a}; r{x0} = {}; r{x1} = {}; }}",
                        unary(&op0, ty, "x")?,
                        unary(&op1, ty, "x")?
                    )
                }
                Instr::Binary { op, dst, a, b: rb } => {
                    writeln!(
                        b,
                        "    r{dst} = {};",
                        binary(op, ty, &format!("r{a}"), &format!("r{rb}"))?
                    )
                }
                Instr::Store { out, src } => writeln!(b, "    out{out}[i] = r{src};"),
                Instr::Accumulate { acc, src } => writeln!(b, "    s{acc} += (double)r{src};"),
                Instr::UnarySum { op, dst, a, acc } => {
                    let keep = dst.map(|d| format!(" r{d} = y;")).unwrap_or_default();
                    writeln!(
                        b,
                        "    {{ const T y = {};{keep} s{acc} += (double)y; }}",
                        unary(op, ty, &format!("r{a}"))?
                    )
                }
                Instr::BinarySum { op, dst, a, b: rb, acc } => {
                    let keep = dst.map(|d| format!(" r{d} = y;")).unwrap_or_default();
                    writeln!(
                        b,
                        "    {{ const T y = {};{keep} s{acc} += (double)y; }}",
                        binary(op, ty, &format!("r{a}"), &format!("r{rb}"))?
                    )
                }
                Instr::Chain {
                    op1,
                    op2,
                    swap,
                    dst,
                    a,
                    b: rb,
                    c,
                } => {
                    let first = binary(op1, ty, &format!("r{a}"), &format!("r{rb}"))?;
                    let second = if *swap {
                        binary(op2, ty, &format!("r{c}"), "t")?
                    } else {
                        binary(op2, ty, "t", &format!("r{c}"))?
                    };
                    writeln!(b, "    {{ const T t = {first}; r{dst} = {second}; }}")
                }
                Instr::Reduce { .. } => return None,
            };
        }
        Some((setup, body))
    }
}
