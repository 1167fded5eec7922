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
                reads.push(Read { slot: v, last });
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
        Plan {
            steps,
            inputs: g.inputs.clone(),
            outputs: g.outputs.clone(),
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
        let Reuse {
            slots,
            ins,
            ins2,
            bin,
            sides,
        } = &mut *reuse;
        let start = out.len();
        let workers = crate::kernels::cpu::workers::threads() > 1 && !crate::kernels::cpu::workers::is_alone();
        let how = workers.then(|| self.sharing.next()).flatten();
        let t0 = how.filter(|h| h.timed).map(|_| std::time::Instant::now());
        // (a run inside another's, as a loop's body at each iteration,
        // uses the enclosing run's bin: its results die there, and this
        // bin keeps no handle on them, which made every iteration clone
        // its results and kept the last ones from being written in place)
        let nested = recycle::active();
        let done = bin.scope(|| {
            let mut run = || self.run_with(g, args, slots, [&mut *ins, &mut *ins2], sides, out);
            let done = match how {
                Some(h) if h.alone => crate::kernels::cpu::workers::alone(run),
                _ => run(),
            };
            // (the returned values' handles in the slots go, so that the
            // caller's handles are the only ones but the bin's)
            slots.iter_mut().for_each(|s| *s = None);
            ins.clear();
            ins2.clear();
            done
        });
        if done.is_ok() {
            if !nested {
                bin.returned(&out[start..]);
            }
            if let Some(h) = how {
                let ns = t0.map_or(0, |t| t.elapsed().as_nanos() as u64);
                self.sharing.record(h, ns);
            }
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
        self.run_with(g, args, &mut Vec::new(), fresh, &mut Vec::new(), out)
    }

    /// [`run_into`](Self::run_into) with these slots (any length: they are
    /// resized), operand lists (the second for a pair's second node) and
    /// bins of paired nodes' tasks (per step; resized).
    fn run_with(
        &self,
        g: &Graph,
        args: &[Tensor],
        slots: &mut Vec<Option<Tensor>>,
        [ins, ins2]: [&mut Vec<Tensor>; 2],
        sides: &mut Vec<Bin>,
        out: &mut Vec<Tensor>,
    ) -> Result<()> {
        if args.len() != self.inputs.len() {
            return Err(Error::invalid(
                "function",
                format!("the graph takes {} inputs, got {}", self.inputs.len(), args.len()),
            ));
        }
        slots.clear();
        slots.resize(self.n_slots, None);
        for (&v, a) in self.inputs.iter().zip(args) {
            slots[v as usize] = Some(a.clone());
        }
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
                    run_one(g, node, step, slots, ins)?;
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
                fetch(step, slots, ins)?;
                let (next, step2) = (&g.nodes[i + 1], &self.steps[i + 1]);
                fetch(step2, slots, ins2)?;
                let (a, b) = (&node.op, &next.op);
                let (x, y): (&[Tensor], &[Tensor]) = (ins, ins2);
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
                store(node, step, first, ins, slots)?;
                let second = second.map_err(|e| e.at_node(|| next.describe(g)))?;
                store(next, step2, second, ins2, slots)?;
                let both = || format!("{} || {}", profile::label(a), profile::label(b));
                profile::record(p0, both, first_shape(g, node));
                if let (Some(t), Some(t0)) = (trial, t0) {
                    t.record(true, t0.elapsed());
                }
                i += 2;
                continue;
            }
            let t0 = profile::start();
            run_one(g, node, step, slots, ins)?;
            profile::record(t0, || profile::label(&node.op), first_shape(g, node));
            i += 1;
        }
        for &o in self.outputs.iter() {
            let t = slots[o as usize].clone();
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
fn run_one(g: &Graph, node: &Node, step: &Step, slots: &mut [Option<Tensor>], ins: &mut Vec<Tensor>) -> Result<()> {
    fetch(step, slots, ins)?;
    // (a fused node on a GPU runs its CUDA kernel, through its op)
    let outs: Outs = match fused_program(&node.op) {
        Some(p) if ins.iter().all(|t| t.device_buffer().is_none()) => p.run_in_place(ins),
        _ => node.op.eval(ins).map(|o| o.into_iter().collect()),
    }
    // (the node described only when it failed)
    .map_err(|e| e.at_node(|| node.describe(g)))?;
    store(node, step, outs, ins, slots)
}

/// Takes a step's operands from their slots into `ins`.
fn fetch(step: &Step, slots: &mut [Option<Tensor>], ins: &mut Vec<Tensor>) -> Result<()> {
    ins.clear();
    for r in step.reads.iter() {
        let s = &mut slots[r.slot as usize];
        let t = if r.last { s.take() } else { s.clone() };
        ins.push(t.ok_or_else(|| Error::invalid("function", format!("value %{} read before it is made", r.slot)))?);
    }
    Ok(())
}

/// Puts a node's results in their slots, and lets its operands go.
fn store(
    node: &crate::function::graph::Node,
    step: &Step,
    outs: Outs,
    ins: &mut Vec<Tensor>,
    slots: &mut [Option<Tensor>],
) -> Result<()> {
    // the operands go now: a buffer no output took is free for the
    // next node
    for t in ins.drain(..) {
        recycle::give(t);
    }
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
