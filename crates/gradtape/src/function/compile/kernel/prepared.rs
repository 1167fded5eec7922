//! What a fused kernel's runs work out from its program alone, worked out
//! once: its call plan.
//!
//! A run of a [`Program`] used to scan the body several times before its
//! first chunk: for its layout (which reductions it has), its sums, the
//! stores whose register may be written in the output (the direct
//! stores), the inputs that may give an output their
//! buffer and whether their registers may still read in place
//! ([`Program::load_dies_before_store`]), the gathers to repeat, the
//! reductions' folds, the elements a task takes. None of that depends on
//! the inputs, only on the program; on a small tensor (an RNN step's
//! `[2, 8]`, a loop's iteration) those scans were most of the kernel's
//! time. A [`Prepared`] holds their results, made at the program's first
//! run (kept in [`Decoded`](super::scalar::Decoded), which a clone leaves
//! empty); what does depend on the inputs (which input is held alone and
//! may give its buffer, which is a view, the shapes) is still decided at
//! each run, from these lists.
//!
//! A program changed after its first run (its passes run before, at
//! compile time) would keep a stale plan: the plan keeps the sizes of the
//! program it was made from, and a run of a program of other sizes makes
//! a plan of its own instead ([`Program::prepared`]).

use smallvec::SmallVec;

use super::epilogue::{Axis, Fold};
use super::{sums, Instr, Output, Program, Reg, Splat, CHUNK};
use crate::kernels::cpu::PAR_MIN;

/// The inputs that may give a store's output their buffer, in order, each
/// with whether its register may still read it in place.
pub(super) type Candidates = SmallVec<[(u16, bool); 4]>;

/// A fused program's call plan (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// the sizes of the program it was made from: instructions, inputs,
    /// outputs, registers, elements
    made_for: [usize; 5],
    /// how the elements are split into tasks (see `Program::scan_layout`)
    pub(super) layout: (usize, usize, usize),
    /// the sums of all elements
    pub(super) n_sums: usize,
    /// whether an output is a partial reduction
    pub(super) partial: bool,
    /// per partial reduction, in order: its fold and axis
    pub(super) reduces: SmallVec<[(Fold, Axis); 2]>,
    /// the fewest elements a task takes (see `cost`)
    pub(super) min_task: usize,
    /// per input: whether only loads read it (see [`Program::loads_only`])
    pub(super) loads_only: SmallVec<[bool; 8]>,
    /// per store of an elementwise output, in the body's order: the
    /// output, and the inputs that may give it their buffer (of the
    /// group's length, never splatted, loaded once before the store), in
    /// order, each with whether its register may still read it in place
    /// (see `Program::load_dies_before_store`)
    pub(super) donor_stores: SmallVec<[(u16, Candidates); 2]>,
    /// the first store of each register that an op of the body wrote
    /// last: (register, output); those whose output has a fresh buffer
    /// are written in place: the op writes the output's elements and the
    /// store copies nothing
    pub(super) direct: SmallVec<[(Reg, u16); 4]>,
    /// per gather: its index in the body, input, repeat and period
    pub(super) gathers: SmallVec<[(usize, u16, usize, usize); 2]>,
    /// whether the program is one pass (see [`Program::one_pass`])
    pub(super) one_pass: bool,
}

impl Prepared {
    /// The plan of `p`.
    pub(super) fn new(p: &Program) -> Prepared {
        let n_inputs = p.input_len.len();
        let loads_only = (0..n_inputs).map(|i| p.loads_only(i)).collect();
        let mut donor_stores = SmallVec::new();
        for (at, ins) in p.body.iter().enumerate() {
            let Instr::Store { out, .. } = *ins else { continue };
            let loaded_once_before = |i: usize| {
                let mut reads = p.body.iter().enumerate().filter(|(_, x)| {
                    matches!(x, Instr::Load { input, .. } | Instr::Gather { input, .. } if *input as usize == i)
                });
                matches!(
                    (reads.next(), reads.next()),
                    (Some((l, Instr::Load { .. })), None) if l < at
                )
            };
            let candidates = (0..n_inputs)
                .filter(|&i| {
                    p.input_len[i] == p.len
                        && !p.splats.iter().any(|(_, s)| *s == Splat::Input(i as u16))
                        && loaded_once_before(i)
                })
                .map(|i| (i as u16, p.load_dies_before_store(i, out as usize)))
                .collect();
            donor_stores.push((out, candidates));
        }
        let mut direct = SmallVec::new();
        let mut stored: SmallVec<[Reg; 8]> = SmallVec::new();
        for (k, ins) in p.body.iter().enumerate() {
            let Instr::Store { out, src } = *ins else { continue };
            if stored.contains(&src) {
                continue;
            }
            stored.push(src);
            let writer = p.body[..k].iter().rev().find(|i| sums::operands(i).1.contains(&src));
            if writer.is_some_and(|w| !matches!(w, Instr::Load { .. } | Instr::Gather { .. })) {
                direct.push((src, out));
            }
        }
        let gathers = (p.body.iter().enumerate())
            .filter_map(|(k, ins)| match *ins {
                Instr::Gather { input, q, p, .. } => Some((k, input, q, p)),
                _ => None,
            })
            .collect();
        let reduces = (p.body.iter())
            .filter_map(|ins| match *ins {
                Instr::Reduce { fold, axis, .. } => Some((fold, axis)),
                _ => None,
            })
            .collect();
        Prepared {
            made_for: p.sizes(),
            layout: p.scan_layout(),
            n_sums: p.outputs.iter().filter(|o| matches!(o, Output::Sum(_))).count(),
            partial: p.outputs.iter().any(|o| matches!(o, Output::Reduced(_))),
            reduces,
            // (half of `PAR_MIN` for cheap programs, fewer for costly ones: `cost`)
            min_task: p.min_task(PAR_MIN / 2),
            loads_only,
            one_pass: p.scan_one_pass(&direct),
            donor_stores,
            direct,
            gathers,
        }
    }

    /// Whether this plan was made for a program of `p`'s sizes.
    pub(super) fn fits(&self, p: &Program) -> bool {
        self.made_for == p.sizes()
    }
}

impl Program {
    /// The sizes a plan is checked against (see [`Prepared::fits`]).
    fn sizes(&self) -> [usize; 5] {
        [
            self.body.len(),
            self.input_len.len(),
            self.outputs.len(),
            self.n_regs,
            self.len,
        ]
    }

    /// Whether every op of the body reads loaded registers only and writes
    /// a register of its own that a store takes in place (one of
    /// `direct`), with no sums or partial reductions: each output is one
    /// op of the inputs, as an eager op is. A run whose stores all have
    /// fresh buffers and whose loads all read in place then keeps no
    /// element of the group in its registers (they stand for input and
    /// output elements), which need not fit in the L1 cache: it runs in
    /// wide pieces (see `kernel::one_pass_width`).
    ///
    /// Broadcast operands count as loaded: a splat (a scalar) fills its
    /// register once per task, and a gather (a bias row `[n]` into
    /// `[m, n]`, a column `[m, 1]`) reads the task's repeats of its period
    /// in place (`epilogue::periodic`), or a long row in place, so neither
    /// costs a pass per piece; only a long period that a piece crosses
    /// (a column of a large group) is gathered into its register, as it
    /// is at the narrow width.
    fn scan_one_pass(&self, direct: &[(Reg, u16)]) -> bool {
        let mut loaded: SmallVec<[bool; 8]> = SmallVec::from_elem(false, self.n_regs);
        for &(r, _) in self.splats.iter() {
            match loaded.get_mut(r as usize) {
                Some(l) => *l = true,
                None => return false,
            }
        }
        let mut written: SmallVec<[Reg; 4]> = SmallVec::new();
        let is_loaded = |l: &[bool], r: Reg| l.get(r as usize).copied().unwrap_or(false);
        let mut write = |loaded: &mut [bool], r: Reg| {
            let fresh = !written.contains(&r) && direct.iter().any(|&(d, _)| d == r);
            written.push(r);
            if let Some(l) = loaded.get_mut(r as usize) {
                *l = false;
            }
            fresh
        };
        self.body.iter().all(|ins| match *ins {
            Instr::Load { dst, .. } | Instr::Gather { dst, .. } => match loaded.get_mut(dst as usize) {
                Some(l) => {
                    *l = true;
                    true
                }
                None => false,
            },
            Instr::Store { .. } => true,
            Instr::Unary { dst, a, .. } => is_loaded(&loaded, a) && write(&mut loaded, dst),
            Instr::Binary { dst, a, b, .. } => {
                is_loaded(&loaded, a) && is_loaded(&loaded, b) && write(&mut loaded, dst)
            }
            Instr::Pair { x0, x1, a, .. } => is_loaded(&loaded, a) && write(&mut loaded, x0) && write(&mut loaded, x1),
            _ => false,
        })
    }

    /// Whether the program runs in one pass where its stores have fresh
    /// buffers and its loads read in place (see the plan's `one_pass`).
    pub fn one_pass(&self) -> bool {
        self.prepared(&mut None).one_pass
    }

    /// The call plan (made at the first run; see the module doc). A
    /// program of other sizes than the kept plan's gets a plan of its own,
    /// made now (borrowed from `fresh`).
    pub(super) fn prepared<'a>(&'a self, fresh: &'a mut Option<Prepared>) -> &'a Prepared {
        let kept = self.scalar.prepared.get_or_init(|| Prepared::new(self));
        if kept.fits(self) {
            return kept;
        }
        fresh.insert(Prepared::new(self))
    }

    /// How the elements are split into tasks: a `rows x cols` view of the
    /// group, tasks owning ranges of columns (all rows), in multiples of
    /// `unit` where there is one row. Without partial reductions, one row;
    /// with a reduction over leading axes, its outputs are the columns
    /// (each task folds its columns in row order; at least
    /// [`COLUMNS`](super::COLUMNS) each); over trailing axes, and blocked,
    /// tasks hold whole rows (of the reduction's, a band of them for
    /// blocked).
    fn scan_layout(&self) -> (usize, usize, usize) {
        let mut axes = self.body.iter().filter_map(|ins| match ins {
            Instr::Reduce { axis, .. } => Some(*axis),
            _ => None,
        });
        let Some(first) = axes.next() else {
            return (1, self.len, CHUNK);
        };
        if axes.any(|a| a != first) {
            // reductions of several kinds: one task, in element order
            return (1, self.len, self.len.max(1));
        }
        match first {
            Axis::Leading(p) => (self.len / p, p, 1),
            Axis::Trailing(q) => (1, self.len, q),
            // (tasks start on a band of rows: see `epilogue::BAND`)
            Axis::Blocked(p) => (1, self.len, p * super::epilogue::BAND),
        }
    }
}
