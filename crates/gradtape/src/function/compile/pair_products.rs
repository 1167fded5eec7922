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
//! all threads would have kept them all busy. So each pair's first runs
//! decide ([`PairTrial`]), and it runs the chosen way from then on. Either
//! way gives the same bits (below), so the choice changes only the time.
//!
//! - **Balanced pairs run together.** After an untimed first run, the
//!   next [`BALANCE_RUNS`] runs go together with each task's time taken
//!   on its own thread (CPU time where the system has a per-thread clock,
//!   so that another process taking the core does not count). A pair
//!   whose slower task took at most [`BALANCED`] times the faster one's
//!   leaves a thread idle for under a tenth of the pair, where splitting
//!   each product over the threads costs more: each thread packs the
//!   shared operand, and the split products of `transformer_step` ran
//!   10-25 % slower than a pair (two threads: 5.9 against 5.5 ms for the
//!   `[1024, 1024]`-by-`[1024, 256]` input and weight gradients, 1.8
//!   against 1.46 ms for the `[1024, 256]`-by-`[256, 256]` ones, while
//!   their tasks' times differ by 1-10 %).
//! - **Unbalanced pairs are timed both ways**: one untimed run apart, then
//!   [`TRIALS`] timed runs each way, alternating; the faster way's
//!   fastest run decides.
//!
//! - **Large products are not paired** ([`MAX_PAIRED_MACS`]): split, a
//!   product's fixed costs are a small part of its time, and a pair's
//!   imbalance (within [`BALANCED`]) cost more.
//!
//! Timing every pair both ways used to decide balanced pairs too, from the
//! wall time of single runs: on a shared machine whose speed changes by
//! 10-30 % from one moment to the next, some of `transformer_step`'s nine
//! pairs (a different few from one process to the next) ran apart, up to
//! 0.4 ms a step each; the balance of two tasks timed in the same run does
//! not move with the machine's speed.
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

/// Matrix products of more multiply-adds than this are not paired: each
/// runs split over the threads, as it would alone.
///
/// A pair together takes as long as its slower task, and two products of
/// equal arithmetic take unequal times on one thread each (another
/// kernel, a long shared dimension); split, a product pays a fork, a join
/// and the threads' waits on each other's packing, a cost that does not
/// grow with the product. So the larger the products, the less a pair
/// saves and the more its imbalance costs. The `gpt` example's backward
/// products at width 512 (1024 rows; `[1024,2048]·[512,2048]ᵀ` with
/// `[512,1024]ᵀ·[1024,2048]`, `[1024,512]·[2048,512]ᵀ` with
/// `[2048,1024]ᵀ·[1024,512]`, `[1024,1536]·[512,1536]ᵀ` with
/// `[512,1024]ᵀ·[1024,1536]`: 2^29.6-2^30 each), 2-core Xeon, scratch
/// probe alternating both ways, GFLOP/s together against one after the
/// other split, operands warm: 188-232 against 216-244, 222-236 against
/// 229-249, 223-251 against 246-261 (operands evicted: 190-223 against
/// 230-240, 208-227 against 234-248, 201-223 against 239-247); each
/// task's time together 9-17 % apart, within [`BALANCED`], so these
/// pairs ran together. At 2^28 each (the attention output's gradients at
/// width 512, `[1024,512]·[512,512]ᵀ` with `[512,1024]ᵀ·[1024,512]`, and
/// the `transformer_step` bench's feed-forward ones) the pair was the
/// faster (257-274 against 241-259 warm), hence the bound.
pub const MAX_PAIRED_MACS: u64 = 1 << 28;

/// The multiply-adds of a matrix product node (batch included), if `node`
/// is one whose shapes are known.
fn product_macs(g: &Graph, node: &Node) -> Option<u64> {
    let Op::MatMul { transpose_a, .. } = node.op else {
        return None;
    };
    let a = &g.values[*node.inputs.first()? as usize].shape;
    let out = &g.values[*node.outputs.first()? as usize].shape;
    let k = match transpose_a {
        true => a.len().checked_sub(2).map(|i| a[i])?,
        false => *a.last()?,
    };
    let outs = out.iter().try_fold(1u64, |p, &d| p.checked_mul(d as u64))?;
    outs.checked_mul(k as u64)
}

/// Whether `node` of `g` is a product worth running on its own thread:
/// not too small for a job of its own, not so large that it runs better
/// split ([`MAX_PAIRED_MACS`]).
fn heavy(g: &Graph, node: &Node) -> bool {
    let numel = |v: &u32| -> usize { g.values[*v as usize].shape.iter().product() };
    pairs_op(&node.op)
        && node.inputs.iter().chain(&node.outputs).map(numel).sum::<usize>() >= MIN_ELEMENTS
        && product_macs(g, node).is_none_or(|m| m <= MAX_PAIRED_MACS)
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

/// Timed runs of an unbalanced pair each way before it is decided.
pub const TRIALS: u32 = 3;

/// Runs together whose tasks' times are taken, after the untimed first
/// run, before a pair that never looked balanced goes to [`TRIALS`].
pub const BALANCE_RUNS: u32 = 2;

/// The most one task of a pair may take, relative to the other, for the
/// pair to count as balanced (and run together without trials).
pub const BALANCED: f64 = 1.15;

/// Runs of a pair before it is decided, at most (concurrent calls aside):
/// the untimed first run, [`BALANCE_RUNS`], one untimed run apart and the
/// timed [`TRIALS`] each way.
pub const RUNS_TO_DECIDE: u32 = 1 + BALANCE_RUNS + 1 + 2 * TRIALS;

/// How a run runs a pair ([`PairTrial::next`]); the default is one node
/// after the other, untimed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairRun {
    /// both nodes at the same time, one per thread (else one after the
    /// other)
    pub together: bool,
    /// the whole pair is timed ([`PairTrial::record`] gets its time)
    pub timed: bool,
    /// each task's time is taken ([`PairTrial::record_tasks`] gets them)
    pub tasks: bool,
}

/// How one pair of products runs: decided on its first runs, by the
/// balance of its tasks or by timing it both ways (see the module's
/// notes).
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
    /// the least imbalance seen (slower task's time over the faster's, in
    /// thousandths); 0: none yet
    pub imbalance: AtomicU32,
}

impl PairTrial {
    /// How this run runs the pair.
    pub fn next(&self) -> PairRun {
        let run = |together, timed, tasks| PairRun { together, timed, tasks };
        match self.decided.load(Relaxed) {
            1 => return run(false, false, false),
            2 => return run(true, false, false),
            _ => {}
        }
        let n = self.runs.fetch_add(1, Relaxed);
        // run 0 warms up together; the next go together with their tasks
        // timed; then one apart warms up and timed runs alternate; runs
        // past the trials (concurrent calls before the decision) go
        // together, untimed
        let trial = 2 + BALANCE_RUNS;
        match n {
            0 => run(true, false, false),
            n if n <= BALANCE_RUNS => run(true, false, true),
            n if n == 1 + BALANCE_RUNS => run(false, false, false),
            n if n < trial + 2 * TRIALS => run((n - trial) % 2 == 1, true, false),
            _ => run(true, false, false),
        }
    }

    /// Records the times of the two tasks of a run together (in any
    /// unit, both the same): a balanced pair is decided, together.
    pub fn record_tasks(&self, a: Duration, b: Duration) {
        let (lo, hi) = (a.min(b).as_nanos().max(1), a.max(b).as_nanos());
        let ratio = u32::try_from(hi.saturating_mul(1000) / lo)
            .unwrap_or(u32::MAX)
            .max(1000);
        let _ = self
            .imbalance
            .fetch_update(Relaxed, Relaxed, |r| (r == 0 || ratio < r).then_some(ratio));
        if f64::from(ratio) <= BALANCED * 1000.0 {
            let _ = self.decided.compare_exchange(0, 2, Relaxed, Relaxed);
        }
    }

    /// Records a timed run; the last of the trials decides.
    pub fn record(&self, together: bool, took: Duration) {
        let ns = (took.as_nanos() as u64).max(1);
        let best = &self.best[together as usize];
        let _ = best.fetch_update(Relaxed, Relaxed, |b| (b == 0 || ns < b).then_some(ns));
        if self.timed.fetch_add(1, Relaxed) + 1 == 2 * TRIALS {
            let (apart, joint) = (self.best[0].load(Relaxed), self.best[1].load(Relaxed));
            let _ = self
                .decided
                .compare_exchange(0, if joint <= apart { 2 } else { 1 }, Relaxed, Relaxed);
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

    /// The least imbalance of the pair's tasks seen in its timed runs
    /// together (the slower task's time over the faster's), if any.
    pub fn imbalance(&self) -> Option<f64> {
        match self.imbalance.load(Relaxed) {
            0 => None,
            r => Some(f64::from(r) / 1000.0),
        }
    }
}

/// A clock for one task's time on its thread: the thread's CPU time where
/// the system has one (Linux), so that time another process took the core
/// for does not count; else wall time.
pub(crate) fn task_clock() -> Duration {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        #[repr(C)]
        struct Timespec {
            sec: i64,
            nsec: i64,
        }
        unsafe extern "C" {
            fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut ts = Timespec { sec: 0, nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec (two 64-bit fields
        // on 64-bit Linux, the only target this is compiled for).
        if unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Duration::new(ts.sec as u64, ts.nsec as u32);
        }
    }
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}
