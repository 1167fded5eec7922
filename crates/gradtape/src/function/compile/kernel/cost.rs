//! How much work a fused kernel does per element, for the decision to
//! split it over the compute threads.
//!
//! A kernel of a few cheap passes (loads, an addition, stores) is worth
//! splitting only from `PAR_MIN` elements: below that, handing half of it
//! to a helper costs about what the half saves. A kernel of costly
//! functions does many times the work per element (an LSTM step's gates:
//! three sigmoids, two tanh and their derivatives per element), and is
//! worth splitting from far fewer elements. So the elements a task takes
//! at least shrink as the program's cost per element grows.
//!
//! Only programs without sums are split earlier: a fused sum adds its
//! tasks' partial sums in task order, so where it splits changes the last
//! bits of the sum, and those bits stay what they were for every size.
//! An elementwise output gets the same bits however it is split.

use super::{Instr, Program};
use crate::ops::desc::{Binary, Unary};

/// The cost of one pass over a chunk: a load, a store, a cheap op.
const PASS: usize = 1;
/// The cost of a transcendental function's pass (an `exp`, a `tanh`, an
/// `erf`: a polynomial and a range reduction, ~10 cheap ops).
const COSTLY: usize = 10;
/// The cost per element of the kernels `PAR_MIN` was measured with (two
/// loads, an op, a store).
const BASELINE: usize = 4;
/// The fewest elements a task takes, whatever the cost: eight chunks (at
/// four, an LSTM's gates over `[32, 128]`, four tasks, ran slower on two
/// threads than on one).
const FLOOR: usize = 8 * super::CHUNK;

/// Whether a one-input op costs a function evaluation rather than an
/// arithmetic instruction or two.
fn costly_unary(op: &Unary) -> bool {
    matches!(
        op,
        Unary::Exp
            | Unary::Expm1
            | Unary::Log
            | Unary::Log1p
            | Unary::Sin
            | Unary::Cos
            | Unary::Tan
            | Unary::Asin
            | Unary::Acos
            | Unary::Atan
            | Unary::Sinh
            | Unary::Cosh
            | Unary::Tanh
            | Unary::Asinh
            | Unary::Acosh
            | Unary::Atanh
            | Unary::Erf
            | Unary::Erfc
            | Unary::Gelu
            | Unary::GeluGrad
            | Unary::GeluTanh
            | Unary::GeluTanhGrad
            | Unary::Silu
            | Unary::SiluGrad
            | Unary::Mish
            | Unary::MishGrad
            | Unary::TanhShrink
            | Unary::Sigmoid
            | Unary::Elu
            | Unary::Selu
            | Unary::Softplus
            | Unary::PowScalar(_)
    )
}

/// Whether a two-input op costs a function evaluation.
fn costly_binary(op: &Binary) -> bool {
    matches!(op, Binary::Pow | Binary::Atan2)
}

impl Program {
    /// The program's cost per element, in cheap passes.
    pub fn cost(&self) -> usize {
        let op = |costly: bool| if costly { COSTLY } else { PASS };
        self.body
            .iter()
            .map(|ins| match ins {
                Instr::Unary { op: u, .. } | Instr::UnarySum { op: u, .. } => op(costly_unary(u)),
                Instr::Binary { op: b, .. } | Instr::BinarySum { op: b, .. } => op(costly_binary(b)),
                Instr::Chain { op1, op2, .. } => op(costly_binary(op1)) + op(costly_binary(op2)),
                Instr::Pair { .. } => COSTLY + PASS,
                _ => PASS,
            })
            .sum()
    }

    /// Whether the program adds anything up (a sum or a partial
    /// reduction), whose bits depend on how it is split.
    fn sums(&self) -> bool {
        self.body.iter().any(|ins| {
            matches!(
                ins,
                Instr::Accumulate { .. } | Instr::UnarySum { .. } | Instr::BinarySum { .. } | Instr::Reduce { .. }
            )
        })
    }

    /// The fewest elements a task of this program takes: `base` (half of
    /// `PAR_MIN`) for a program of cheap passes or with sums, fewer in
    /// proportion to a higher cost per element, never fewer than
    /// [`FLOOR`].
    pub fn min_task(&self, base: usize) -> usize {
        if self.sums() {
            return base;
        }
        (base * BASELINE / self.cost().max(BASELINE)).max(FLOOR)
    }
}
