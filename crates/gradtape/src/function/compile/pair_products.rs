//! Independent products run at the same time, one per thread (the
//! `pair_products` pass, which rewrites no node: it marks the pairs for
//! the run plan).
//!
//! ```text
//!   %3 = MatMul(%0, %1)    -- one job of two tasks: each product on a thread
//!   %4 = MatMul(%0, %2)    --
//! ```
//!
//! A backward pass computes, per layer, the gradient of the layer's input
//! (`dY·Wᵀ`) and of its weight (`Xᵀ·dY`): two products that read the same
//! operands and do not depend on each other. Run one after the other, each
//! is split over the compute threads, with a fork and a join per product
//! and the shared operand packed by every thread. The executor runs such a
//! pair as one parallel job of two tasks instead ([`pairs`] finds them,
//! adjacent in the plan): each product runs on one thread, whole.
//!
//! **Measured, not assumed.** Whether a pair gains depends on the machine
//! and the shapes: two products of equal arithmetic may run at unequal
//! speeds on one thread each (different kernels, a long shared dimension),
//! and one thread then waits for the other, where each product split over
//! all threads would have kept them all busy. So each pair is tried both
//! ways on its first runs ([`PairTrial`]: one untimed run each way, then
//! [`TRIALS`] timed runs each way, alternating) and runs the faster way
//! from then on. Either way gives the same bits (below), so the choice
//! changes only the time.
//!
//! **Values.** A product's kernels run inside the pair's job, so the
//! thread pool runs their own splits on the calling thread
//! ([`parallel_for`](crate::kernels::cpu::workers::parallel_for) within a
//! job runs alone): every split is the one the product would have used
//! alone (it follows the pool's size, not who runs it), done piece after
//! piece. Under [`one_thread`] the `f32` GEMM kernel computes an output
//! split by rows or columns in one piece instead, which gives each element
//! the same sums in the same order; a split of the shared dimension is kept.
//! So a pair's results are those of its products run one after the other,
//! bit for bit.
//!
//! **Memory.** Each product of a pair runs with a bin of recycled tensors
//! of its own, kept by the plan from run to run whichever thread runs it
//! (`Bin::task_scope`): its kernel's scratch buffers come back there.
//! Its output dies on the calling thread, in the run's bin, which lends
//! the task a tensor with a buffer of the output's size before the job
//! (`recycle::lend`): after the first runs, a pair allocates nothing.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::time::Duration;

use super::pipeline::PassCx;
use super::share_im2col::ConvBackpropFilterCols;
use crate::function::graph::{Graph, Node};
use crate::ops::desc::{NnOp, Op};

thread_local! {
    /// Whether plans made on this thread pair products (tests turn it off
    /// to compare with the sequential plan).
    pub static PAIRS: Cell<bool> = const { Cell::new(true) };
}

/// Whether `op` pairs: products and dense convolutions and their
/// gradients, whose kernels split themselves over the threads.
fn pairs_op(op: &Op) -> bool {
    match op {
        Op::MatMul { .. } => true,
        Op::Nn(NnOp::Conv(c) | NnOp::ConvBackpropInput(c, _) | NnOp::ConvBackpropFilter(c, _)) => !c.depthwise,
        _ => op.as_dyn::<ConvBackpropFilterCols>().is_some(),
    }
}

/// Operands and results smaller than this, in elements all together, are
/// not worth a job of their own.
const MIN_ELEMENTS: usize = 1 << 14;

/// Whether `node` of `g` is a product worth running on its own thread.
fn heavy(g: &Graph, node: &Node) -> bool {
    let numel = |v: &u32| -> usize { g.values[*v as usize].shape.iter().product() };
    pairs_op(&node.op) && node.inputs.iter().chain(&node.outputs).map(numel).sum::<usize>() >= MIN_ELEMENTS
}

/// The `pair_products` pass, which rewrites nothing: turns pairing on for
/// the plan, and counts the pairs it will run together (none with one
/// compute thread, or where a test turned [`PAIRS`] off).
pub(crate) fn run(g: &mut Graph, cx: &mut PassCx) -> usize {
    cx.pair_products = true;
    match PAIRS.with(Cell::get) && crate::kernels::cpu::workers::threads() > 1 {
        true => pairs(g).len(),
        false => 0,
    }
}

/// The indices `i` of `g`'s nodes that run together with node `i + 1`:
/// both heavy, the second reading nothing the first makes; pairs do not
/// overlap.
pub(crate) fn pairs(g: &Graph) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < g.nodes.len() {
        let (a, b) = (&g.nodes[i], &g.nodes[i + 1]);
        if heavy(g, a) && heavy(g, b) && !b.inputs.iter().any(|v| a.outputs.contains(v)) {
            out.push(i);
            i += 2;
        } else {
            i += 1;
        }
    }
    out
}

/// Runs `f` with products computed on the calling thread alone (see the
/// module's notes on values), and the GEMM kernel's bounds of a compiled
/// run (which the helper thread that runs `f` does not have set).
pub(crate) fn one_thread<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::cpu::sgemm::split_small(|| crate::kernels::cpu::sgemm::one_thread(f));
    #[cfg(not(target_arch = "x86_64"))]
    f()
}

/// Timed runs of a pair each way before it is decided.
pub const TRIALS: u32 = 3;

/// How one pair of products runs: both ways on its first runs, then the
/// way whose fastest timed run was the faster (see the module's notes).
#[derive(Default)]
pub struct PairTrial {
    /// runs started before the decision
    pub runs: AtomicU32,
    /// timed runs finished
    pub timed: AtomicU32,
    /// the fastest timed run, in nanoseconds, one after the other
    /// (`[0]`) and together (`[1]`); 0: none yet
    pub best: [AtomicU64; 2],
    /// 0: undecided; 1: one after the other; 2: together
    pub decided: AtomicU8,
}

impl PairTrial {
    /// How this run runs the pair: together or not, and whether it is
    /// timed (then [`record`](Self::record) gets its time).
    pub(crate) fn next(&self) -> (bool, bool) {
        match self.decided.load(Relaxed) {
            1 => return (false, false),
            2 => return (true, false),
            _ => {}
        }
        let n = self.runs.fetch_add(1, Relaxed);
        // runs 0 and 1 (together, then not) warm up; then timed runs
        // alternate; runs past the trials (concurrent calls before the
        // decision) go together, untimed
        match n {
            0 => (true, false),
            1 => (false, false),
            n if n < 2 + 2 * TRIALS => (n % 2 == 0, true),
            _ => (true, false),
        }
    }

    /// Records a timed run; the last of the trials decides.
    pub(crate) fn record(&self, together: bool, took: Duration) {
        let ns = (took.as_nanos() as u64).max(1);
        let best = &self.best[together as usize];
        let _ = best.fetch_update(Relaxed, Relaxed, |b| (b == 0 || ns < b).then_some(ns));
        if self.timed.fetch_add(1, Relaxed) + 1 == 2 * TRIALS {
            let (apart, joint) = (self.best[0].load(Relaxed), self.best[1].load(Relaxed));
            self.decided.store(if joint <= apart { 2 } else { 1 }, Relaxed);
        }
    }

    /// Whether the trials are over and the pair runs together (`Some`).
    pub fn decision(&self) -> Option<bool> {
        match self.decided.load(Relaxed) {
            1 => Some(false),
            2 => Some(true),
            _ => None,
        }
    }
}
