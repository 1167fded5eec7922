//! The executor of compiled graphs: a run plan made once, and buffers
//! reused in place.
//!
//! [`Graph::run`](crate::function::Graph) (which runs traced graphs) looks
//! up each node's inputs in per-value slots, clones them, and checks each
//! value's last use as it goes. An [`Executable`](super::Executable) runs
//! the same graph many times, so this module works that out once, at
//! compile time, into a [`Plan`]: per node, which slots it reads and
//! whether it reads each for the last time (then the value is *moved* out
//! of its slot, not cloned), and which of its outputs are kept.
//!
//! **Memory plan.** A value moved out at its last reader is held by that
//! reader alone (unless the caller or a view still holds it: graph inputs,
//! constants, values of views are shared and never written). A fused kernel
//! whose input is held by it alone writes its elementwise output into that
//! input's buffer ([`Program::run_in_place`]), so that a chain of
//! elementwise groups runs in the buffers it was given rather than new ones.
//! Whether a buffer is held alone is decided when the node runs, from the
//! reference counts (`Arc::get_mut`): a tensor the caller still holds, or a
//! value another node reads later, is never written.
//!
//! **Inputs.** A run's inputs are borrowed ([`Args`]): never put in
//! slots, a node reading one clones it from the caller's list, so an input
//! no node reads costs nothing (a loop's condition takes all of the loop's
//! inputs and reads one). A caller may give the first inputs by value
//! instead (a loop its variables, see [`Repeat`]): they go into their
//! slots and move out at their last read like any value, so a buffer the
//! caller gave up can be written in place. The outputs are moved out of
//! their slots (cloned only where one value is returned twice).
//!
//! **Lent operands.** A node reading a value that is not its last read
//! (the value stays in its slot for a later node) or a borrowed input
//! gets a handle that does not count, not a clone (`Operands`): a
//! clone and its drop are two atomic operations, which for a small
//! loop's iterations (an RNN step reading its weights, a count) cost a
//! tenth of the time. The fused kernel, the one callee that writes into
//! operands held alone, is told which are lent and writes into none.
//!
//! **Repeated runs.** A loop's iterations run one compiled body many times
//! ([`Repeat`]): the plan's slots and bin are taken once for all of them,
//! and they run as the enclosing run runs (no sharing trial of their own;
//! a run nested in another's has none either).
//!
//! **Pairs.** Two adjacent independent products (a layer's input and
//! weight gradients) run at the same time, each on one thread
//! ([`pair_products`](super::pair_products)), with the bits of a run one after the
//! other, where their first runs found them balanced, or faster so than
//! one after the other ([`PairTrial`]).
//!
//! **Sharing.** Whether a run's jobs use the compute threads or run on
//! the calling thread alone is decided by timing runs both ways
//! ([`sharing`](super::sharing)): with another busy process beside the
//! step, one thread with a core to itself can beat two that take turns.
//!
//! Recording: compiled graphs run with no tape, accumulator or trace active
//! (a caller hides them, or none is active), so the nodes' ops record
//! nothing; a fused kernel and the compiler's own nodes call kernels
//! directly.

use std::cell::Cell;
use std::sync::Mutex;

use smallvec::SmallVec;

use super::fuse::Fused;
use super::kernel::{Outs, Program};
use super::pair_products::{one_thread, pairs, task_clock, PairRun, PairTrial, PAIRS};
use super::profile;
use super::sharing::SharingTrial;
use super::CompileStats;
use crate::error::{Error, Result};
use crate::function::graph::{Graph, Node};
use crate::ops::desc::Op;
use crate::tensor::recycle::{self, Bin};
use crate::tensor::{Shape, Tensor};

/// A graph ready to run: the optimised copy and its run plan.
pub struct Executable {
    /// The optimised graph.
    pub graph: Graph,
    pub plan: Plan,
    /// What the passes did.
    pub stats: CompileStats,
    /// the input shapes it was planned for
    pub(crate) shapes: Vec<Shape>,
    /// sums computed by fused kernels or joined products (in another
    /// order)
    pub(crate) fused_sums: usize,
}

/// How a node's operand is fetched.
#[derive(Clone, Copy, Debug)]
pub struct Read {
    slot: u32,
    /// the node is the value's last reader (and reads it no later in its
    /// own operand list): the value is moved out of its slot
    pub last: bool,
    /// the node reads the value once (no other operand of it is the same
    /// value): where the value stays in its slot (or is a borrowed input),
    /// the node's operand is a lent handle (see `Operands`)
    pub lend: bool,
}

/// One node's run.
pub struct Step {
    pub reads: SmallVec<[Read; 3]>,
    /// per output: its slot, or `None` when nothing reads it
    pub writes: SmallVec<[Option<u32>; 1]>,
    /// the node may run at the same time as the next one (see `pairs`),
    /// as its trial decides
    pub paired: Option<Box<PairTrial>>,
}

/// What a compiled graph's runs share: per node, where its operands come
/// from and where its results go.
pub struct Plan {
    pub steps: Vec<Step>,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
    /// per output, whether no later output is the same value: its slot is
    /// then emptied into the result (not cloned)
    take_output: Vec<bool>,
    /// per slot, the graph input it holds (`u32::MAX`: none): a borrowed
    /// input is read from the caller's list, never put in its slot
    arg_of: Vec<u32>,
    n_slots: usize,
    /// what runs reuse (a run that finds it busy, on another thread, goes
    /// without)
    pub reuse: Mutex<Reuse>,
    /// whether runs share the compute threads or run alone (see
    /// `compile/sharing.rs`)
    pub sharing: SharingTrial,
    /// the CUDA graph of runs on a GPU (see `replay`)
    #[cfg(feature = "cuda")]
    gpu: super::replay::GpuGraph,
}

/// What one run leaves to the next: the value slots, and the tensors of
/// dead values (see `recycle`).
#[derive(Default)]
pub struct Reuse {
    slots: Vec<Option<Tensor>>,
    /// a node's operands (a join of many products has many)
    ins: Vec<Tensor>,
    /// the operands of the second node of a pair
    ins2: Vec<Tensor>,
    pub bin: Bin,
    /// per step, the bin of a paired node's task (see [`Bin::task_scope`])
    sides: Vec<Bin>,
}

impl Plan {
    /// The plan of `g`, whose values are numbered densely (one slot each),
    /// running adjacent independent products together where `pair`
    /// (the `pair_products` pass is on).
    pub fn new(g: &Graph, pair: bool) -> Plan {
        let n = g.values.len();
        let mut returned = vec![false; n];
        for &o in g.outputs.iter() {
            returned[o as usize] = true;
        }
        let mut read = vec![false; n];
        let mut steps: Vec<Step> = Vec::with_capacity(g.nodes.len());
        // backwards: the first read seen of a value is its last
        for node in g.nodes.iter().rev() {
            let mut reads: SmallVec<[Read; 3]> = SmallVec::with_capacity(node.inputs.len());
            for &v in node.inputs.iter().rev() {
                let last = !returned[v as usize] && !read[v as usize];
                read[v as usize] = true;
                let lend = node.inputs.iter().filter(|&&w| w == v).count() == 1;
                reads.push(Read { slot: v, last, lend });
            }
            reads.reverse();
            let writes = node
                .outputs
                .iter()
                .map(|&v| (read[v as usize] || returned[v as usize]).then_some(v))
                .collect();
            steps.push(Step {
                reads,
                writes,
                paired: None,
            });
        }
        steps.reverse();
        if pair && PAIRS.with(Cell::get) && crate::kernels::cpu::workers::threads() > 1 {
            for i in pairs(g) {
                steps[i].paired = Some(Box::default());
            }
        }
        let take_output = (0..g.outputs.len())
            .map(|i| !g.outputs[i + 1..].contains(&g.outputs[i]))
            .collect();
        let mut arg_of = vec![u32::MAX; n];
        for (k, &v) in g.inputs.iter().enumerate() {
            arg_of[v as usize] = k as u32;
        }
        Plan {
            steps,
            inputs: g.inputs.clone(),
            outputs: g.outputs.clone(),
            take_output,
            arg_of,
            n_slots: n,
            reuse: Mutex::new(Reuse::default()),
            sharing: SharingTrial::default(),
            #[cfg(feature = "cuda")]
            gpu: Default::default(),
        }
    }

    /// Runs `g` (the graph this plan was made for) on `args`, in the
    /// memory of the last run where it can.
    /// Its outputs are appended to `out`.
    pub(crate) fn run_into(&self, g: &Graph, args: &[Tensor], out: &mut Vec<Tensor>) -> Result<()> {
        #[cfg(feature = "cuda")]
        if let Some(done) = self.gpu.run(self, g, args, out) {
            return done;
        }
        let Ok(mut reuse) = self.reuse.try_lock() else {
            return self.run_fresh(g, args, out);
        };
        // (a run inside another's, as a loop's body at each iteration,
        // uses the enclosing run's bin, see `run_reusing`, and runs as the
        // enclosing run was decided to, alone or shared: no trial of its own)
        let nested = recycle::active();
        let workers = crate::kernels::cpu::workers::threads() > 1 && !crate::kernels::cpu::workers::is_alone();
        let how = (workers && !nested).then(|| self.sharing.next()).flatten();
        let t0 = how.filter(|h| h.timed).map(|_| std::time::Instant::now());
        let args = Args {
            moved: &mut Vec::new(),
            borrowed: [args, &[]],
        };
        let done = self.run_reusing(g, args, &mut reuse, how.is_some_and(|h| h.alone), out);
        if let (Ok(()), Some(h)) = (&done, how) {
            let ns = t0.map_or(0, |t| t.elapsed().as_nanos() as u64);
            self.sharing.record(h, ns);
        }
        done
    }

    /// A run in the slots, operand lists and bin of `reuse`, its jobs on
    /// this thread where `alone`.
    fn run_reusing(
        &self,
        g: &Graph,
        args: Args<'_>,
        reuse: &mut Reuse,
        alone: bool,
        out: &mut Vec<Tensor>,
    ) -> Result<()> {
        let Reuse {
            slots,
            ins,
            ins2,
            bin,
            sides,
        } = reuse;
        let start = out.len();
        // (a run inside another's, as a loop's body at each iteration,
        // uses the enclosing run's bin: its results die there, and this
        // bin keeps no handle on them, which made every iteration clone
        // its results and kept the last ones from being written in place)
        let nested = recycle::active();
        let done = bin.scope(|| {
            let run = || self.run_with(g, args, slots, [&mut *ins, &mut *ins2], sides, out);
            let done = match alone {
                true => crate::kernels::cpu::workers::alone(run),
                false => run(),
            };
            // (the returned values' handles in the slots go, so that the
            // caller's handles are the only ones but the bin's)
            slots.iter_mut().for_each(|s| *s = None);
            ins.clear();
            ins2.clear();
            done
        });
        if done.is_ok() && !nested {
            bin.returned(&out[start..]);
        }
        done
    }

    /// Whether runs replay a CUDA graph (see `replay`): `None` where the
    /// build has no CUDA.
    pub(crate) fn cuda_graph_status(&self) -> Option<String> {
        #[cfg(feature = "cuda")]
        return Some(self.gpu.status());
        #[cfg(not(feature = "cuda"))]
        None
    }

    /// A run in slots of its own (none of the last run's memory).
    pub(crate) fn run_fresh(&self, g: &Graph, args: &[Tensor], out: &mut Vec<Tensor>) -> Result<()> {
        let fresh = [&mut Vec::new(), &mut Vec::new()];
        let args = Args {
            moved: &mut Vec::new(),
            borrowed: [args, &[]],
        };
        self.run_with(g, args, &mut Vec::new(), fresh, &mut Vec::new(), out)
    }

    /// [`run_into`](Self::run_into) with these slots (any length: they are
    /// resized), operand lists (the second for a pair's second node) and
    /// bins of paired nodes' tasks (per step; resized).
    fn run_with(
        &self,
        g: &Graph,
        args: Args<'_>,
        slots: &mut Vec<Option<Tensor>>,
        [ins, ins2]: [&mut Vec<Tensor>; 2],
        sides: &mut Vec<Bin>,
        out: &mut Vec<Tensor>,
    ) -> Result<()> {
        let [a, b] = args.borrowed;
        let n_args = args.moved.len() + a.len() + b.len();
        if n_args != self.inputs.len() {
            return Err(Error::invalid(
                "function",
                format!("the graph takes {} inputs, got {n_args}", self.inputs.len()),
            ));
        }
        // (the slots of a reused run were emptied at its end: only a
        // list of another length is made again)
        if slots.len() != self.n_slots || slots.iter().any(Option::is_some) {
            slots.clear();
            slots.resize(self.n_slots, None);
        }
        let first = args.moved.len() as u32;
        for (&v, a) in self.inputs.iter().zip(args.moved.drain(..)) {
            slots[v as usize] = Some(a);
        }
        let args = Borrowed {
            arg_of: &self.arg_of,
            first,
            args: [a, b],
        };
        let args = &args;
        let mut i = 0;
        while i < self.steps.len() {
            let (node, step) = (&g.nodes[i], &self.steps[i]);
            // (a CUDA graph records this thread's kernels alone: no pairs)
            let trial = step
                .paired
                .as_deref()
                .filter(|_| i + 1 < self.steps.len() && !capturing());
            // a run alone (see `sharing`) runs a pair as decided, or
            // together while undecided, untimed: its two tasks one after
            // the other on this thread, in the buffers of the pair's
            // shared runs (run apart, its outputs would need others)
            let PairRun { together, timed, tasks } = match trial {
                None => PairRun::default(),
                Some(t) if crate::kernels::cpu::workers::is_alone() => PairRun {
                    together: t.decision() != Some(false),
                    ..PairRun::default()
                },
                Some(t) => t.next(),
            };
            let t0 = timed.then(std::time::Instant::now);
            if trial.is_some() && !together {
                // the pair one node after the other (timed on a trial run)
                for (node, step) in g.nodes[i..i + 2].iter().zip(&self.steps[i..i + 2]) {
                    let p0 = profile::start();
                    run_one(g, node, step, slots, args, ins)?;
                    profile::record(p0, || profile::label(&node.op), first_shape(g, node));
                }
                if let (Some(t), Some(t0)) = (trial, t0) {
                    t.record(false, t0.elapsed());
                }
                i += 2;
                continue;
            }
            if together {
                let p0 = profile::start();
                // (cloned, not lent: a pair's products are large)
                let mut ins = fetch(step, slots, args, ins, false)?;
                let (next, step2) = (&g.nodes[i + 1], &self.steps[i + 1]);
                let mut ins2 = fetch(step2, slots, args, ins2, false)?;
                let (a, b) = (&node.op, &next.op);
                let (x, y): (&[Tensor], &[Tensor]) = (&ins.ins[..], &ins2.ins[..]);
                // each task makes its outputs in the buffers of the last
                // run's, lent by the run's bin, whichever thread runs it
                if sides.len() < self.steps.len() {
                    sides.resize_with(self.steps.len(), Bin::default);
                }
                let (sa, sb) = sides[i..].split_at_mut(1);
                let (sa, sb) = (&mut sa[0], &mut sb[0]);
                recycle::lend(sa, output_bytes(g, node));
                recycle::lend(sb, output_bytes(g, next));
                let bins = [Mutex::new(std::mem::take(sa)), Mutex::new(std::mem::take(sb))];
                let mut done = crate::kernels::cpu::workers::map_small(2, |t| {
                    let (op, ins) = if t == 0 { (a, x) } else { (b, y) };
                    let run = || one_thread(|| op.eval(ins).map(|o| o.into_iter().collect::<Outs>()));
                    let c0 = tasks.then(task_clock);
                    let out = match bins[t].lock() {
                        Ok(mut bin) => bin.task_scope(run),
                        Err(_) => run(),
                    };
                    Some((out, c0.map(|c0| task_clock().saturating_sub(c0))))
                });
                let [ba, bb] = bins;
                *sa = ba.into_inner().unwrap_or_default();
                *sb = bb.into_inner().unwrap_or_default();
                let unran = || Error::invalid("function", "a node of a pair did not run");
                let (second, tb) = done[1].take().ok_or_else(unran)?;
                let (first, ta) = done[0].take().ok_or_else(unran)?;
                if let (Some(t), Some(ta), Some(tb)) = (trial, ta, tb) {
                    t.record_tasks(ta, tb);
                }
                let first = first.map_err(|e| e.at_node(|| node.describe(g)))?;
                store(node, step, first, &mut ins, slots)?;
                let second = second.map_err(|e| e.at_node(|| next.describe(g)))?;
                store(next, step2, second, &mut ins2, slots)?;
                let both = || format!("{} || {}", profile::label(a), profile::label(b));
                profile::record(p0, both, first_shape(g, node));
                if let (Some(t), Some(t0)) = (trial, t0) {
                    t.record(true, t0.elapsed());
                }
                i += 2;
                continue;
            }
            let t0 = profile::start();
            run_one(g, node, step, slots, args, ins)?;
            profile::record(t0, || profile::label(&node.op), first_shape(g, node));
            i += 1;
        }
        for (&o, &take) in self.outputs.iter().zip(&self.take_output) {
            let s = &mut slots[o as usize];
            let t = if take { s.take() } else { s.clone() };
            let t = t.or_else(|| args.get(o));
            out.push(t.ok_or_else(|| Error::invalid("function", format!("output %{o} is never made")))?);
        }
        Ok(())
    }
}

/// Whether this thread is recording a CUDA graph.
fn capturing() -> bool {
    #[cfg(feature = "cuda")]
    return crate::kernels::cuda::graph::capturing_any();
    #[cfg(not(feature = "cuda"))]
    false
}

/// The shape of `node`'s first output (empty when it has none).
fn first_shape<'a>(g: &'a Graph, node: &crate::function::graph::Node) -> &'a [usize] {
    node.outputs.first().map_or(&[], |&v| &g.values[v as usize].shape[..])
}

/// The dtype and bytes of each output of `node` (the buffers its kernel
/// asks for, see [`recycle::lend`]).
fn output_bytes<'a>(
    g: &'a Graph,
    node: &'a crate::function::graph::Node,
) -> impl Iterator<Item = (crate::DType, usize)> + 'a {
    node.outputs.iter().map(|&v| {
        let info = &g.values[v as usize];
        (
            info.dtype,
            info.shape.iter().product::<usize>() * info.dtype.size_in_bytes(),
        )
    })
}

/// Runs one node (not as part of a pair): its operands from their slots
/// (through `ins`), its results into them.
fn run_one(
    g: &Graph,
    node: &Node,
    step: &Step,
    slots: &mut [Option<Tensor>],
    args: &Borrowed<'_>,
    ins: &mut Vec<Tensor>,
) -> Result<()> {
    let mut ins = fetch(step, slots, args, ins, true)?;
    // (a fused node on a GPU runs its CUDA kernel, through its op)
    let outs: Outs = match fused_program(&node.op) {
        Some(p) if ins.ins.iter().all(|t| t.device_buffer().is_none()) => {
            p.run_in_place_lent(&mut ins.ins[..], ins.lent)
        }
        _ => node.op.eval(&ins.ins[..]).map(|o| o.into_iter().collect()),
    }
    // (the node described only when it failed)
    .map_err(|e| e.at_node(|| node.describe(g)))?;
    store(node, step, outs, &mut ins, slots)
}

/// Takes a step's operands from their slots (a borrowed input from the
/// caller's list) into `ins`: moved out at their last read, else lent
/// where `lend` and the step reads the value once (see [`Operands`]),
/// else cloned.
fn fetch<'a>(
    step: &Step,
    slots: &mut [Option<Tensor>],
    args: &Borrowed<'_>,
    ins: &'a mut Vec<Tensor>,
    lend: bool,
) -> Result<Operands<'a>> {
    ins.clear();
    let mut ops = Operands { ins, lent: 0 };
    for (k, r) in step.reads.iter().enumerate() {
        let lend = lend && r.lend && k < 64;
        let s = &mut slots[r.slot as usize];
        let t = match (r.last, s) {
            (true, s) => s.take(),
            (false, Some(t)) if lend => {
                ops.lent |= 1 << k;
                Some(lent(t))
            }
            (false, s) => s.clone(),
        };
        let t = match t {
            Some(t) => t,
            None => match args.get_ref(r.slot) {
                Some(t) if lend => {
                    ops.lent |= 1 << k;
                    lent(t)
                }
                Some(t) => t.clone(),
                // (the operands fetched so far go back as the guard drops)
                None => {
                    return Err(Error::invalid(
                        "function",
                        format!("value %{} read before it is made", r.slot),
                    ))
                }
            },
        };
        ops.ins.push(t);
    }
    Ok(ops)
}

/// A handle on `t`'s tensor that does not count as one: the same
/// pointer, its reference count untouched. Only [`Operands`] holds such
/// handles, and forgets them (never drops them).
fn lent(t: &Tensor) -> Tensor {
    // SAFETY: a bitwise copy of the handle (an `Arc` in a `ManuallyDrop`);
    // `Operands` forgets it rather than dropping it, so the count stays
    // right, and the tensor it points to is held by a slot or the caller's
    // list until the node is done (see `Operands`).
    unsafe { std::ptr::read(t) }
}

/// A node's operands while it runs. Those marked in `lent` are handles
/// that do not count (see [`lent`]) on values that stay in their slots
/// (read again by a later node, or returned) or are the caller's inputs:
/// a clone and its drop had cost two atomic operations per such operand,
/// a tenth of a small loop's iteration (an RNN step's weights, a loop's
/// count). It is sound because:
///
/// - the value outlives the node: its slot is written once (by its
///   node) and emptied only by its last read, a later node's, or at the
///   end of the run; the caller's inputs live through the run;
/// - the step reads it once ([`Read::lend`]), so no other operand of the
///   node is the same handle moved out of its slot;
/// - nothing takes a lent handle's count as its own: ops get `&[Tensor]`
///   (a clone they make counts), and the fused kernel, which writes into
///   inputs held alone, is told which are lent and writes into none of
///   them ([`Program::run_in_place_lent`]);
/// - a lent handle is never dropped: [`release`](Self::release) forgets
///   it, and runs on every way out (the guard's drop: an error, a panic).
struct Operands<'a> {
    ins: &'a mut Vec<Tensor>,
    /// bit `k`: operand `k` is lent
    lent: u64,
}

impl Operands<'_> {
    /// Lets the operands go: the lent ones forgotten, the others given to
    /// the bin (a buffer no output took is free for the next node).
    fn release(&mut self) {
        let lent = std::mem::take(&mut self.lent);
        for (k, t) in self.ins.drain(..).enumerate() {
            if k < 64 && lent >> k & 1 == 1 {
                std::mem::forget(t);
            } else {
                recycle::give(t);
            }
        }
    }
}

impl Drop for Operands<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// A run's inputs: the first ones given by value (moved into their slots,
/// and out of them at their last read: a buffer the caller gave up may be
/// written in place), then the others, borrowed (from two lists, one after
/// the other).
pub struct Args<'a> {
    /// the first inputs (the vector is left empty)
    pub moved: &'a mut Vec<Tensor>,
    /// the other inputs
    pub borrowed: [&'a [Tensor]; 2],
}

/// A run's borrowed inputs, read where they are: never put in a slot, so
/// that an input no node reads costs nothing (a loop's condition reads one
/// of the loop's many inputs), and one read once is cloned once.
struct Borrowed<'a> {
    /// per slot, the graph input it is (`u32::MAX`: none)
    arg_of: &'a [u32],
    /// the first borrowed input's number
    first: u32,
    args: [&'a [Tensor]; 2],
}

impl Borrowed<'_> {
    /// The borrowed input in `slot`, if it is one.
    #[inline]
    fn get(&self, slot: u32) -> Option<Tensor> {
        self.get_ref(slot).cloned()
    }

    /// The borrowed input in `slot`, where it is.
    #[inline]
    fn get_ref(&self, slot: u32) -> Option<&Tensor> {
        let k = self.arg_of[slot as usize].checked_sub(self.first)? as usize;
        let [a, b] = self.args;
        match k.checked_sub(a.len()) {
            None => a.get(k),
            Some(k) => b.get(k),
        }
    }
}

/// One caller's runs of a compiled graph one after another (a loop's
/// iterations): the plan's slots, operand lists and bin taken once for all
/// of them (a run of the plan elsewhere meanwhile, on another thread, runs
/// in slots of its own), no trial of sharing (the runs go as the caller
/// goes), and the inputs given as [`Args`]: the loop variables by value,
/// the captures borrowed.
pub struct Repeat<'a> {
    exec: &'a Executable,
    reuse: std::result::Result<std::sync::MutexGuard<'a, Reuse>, Box<Reuse>>,
}

impl<'a> Repeat<'a> {
    /// Runs of `exec` (planned for the host: the caller runs a graph whose
    /// inputs are on a device through [`Executable::run`]).
    pub fn new(exec: &'a Executable) -> Repeat<'a> {
        Repeat {
            exec,
            reuse: exec.plan.reuse.try_lock().map_err(|_| Box::default()),
        }
    }

    /// One run on `args`; its outputs appended to `out`.
    pub fn run(&mut self, args: Args<'_>, out: &mut Vec<Tensor>) -> Result<()> {
        let reuse: &mut Reuse = match &mut self.reuse {
            Ok(guard) => guard,
            Err(own) => own,
        };
        let (plan, g) = (&self.exec.plan, &self.exec.graph);
        #[cfg(target_arch = "x86_64")]
        return crate::kernels::cpu::sgemm::split_small(|| plan.run_reusing(g, args, reuse, false, out));
        #[cfg(not(target_arch = "x86_64"))]
        plan.run_reusing(g, args, reuse, false, out)
    }
}

/// Puts a node's results in their slots, and lets its operands go.
fn store(
    node: &crate::function::graph::Node,
    step: &Step,
    outs: Outs,
    ins: &mut Operands<'_>,
    slots: &mut [Option<Tensor>],
) -> Result<()> {
    // the operands go now: a buffer no output took is free for the
    // next node
    ins.release();
    if outs.len() != step.writes.len() {
        return Err(Error::invalid(
            node.op.name(),
            format!("gave {} outputs, the graph expects {}", outs.len(), step.writes.len()),
        ));
    }
    for (w, t) in step.writes.iter().zip(outs) {
        match w {
            Some(v) => slots[*v as usize] = Some(t),
            None => recycle::give(t),
        }
    }
    Ok(())
}

/// The program of a fused node.
pub fn fused_program(op: &Op) -> Option<&Program> {
    op.as_dyn::<Fused>().map(|f| &f.program)
}
