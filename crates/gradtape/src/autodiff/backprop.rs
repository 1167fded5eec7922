//! Reverse-mode accumulation over a tape.
//!
//! Terms: a *target* is a tensor being differentiated; a *source* is a tensor
//! (or variable handle) the gradient is taken with respect to; a *cotangent*
//! of a tensor is the gradient of the (weighted) sum of targets w.r.t. it.
//!
//! The algorithm, after TensorFlow's eager tape:
//!
//! 1. **Prune.** Walk from the targets through the records' producer
//!    indices to find the records that can reach a target; of those keep the
//!    ones that lead back to a source (scanned in execution order). Nothing
//!    else is visited, and an input that leads to no source is marked as not
//!    needing a gradient, so its rule may skip computing it.
//! 2. **Count.** Each input of a kept record is an *edge* to the kept record
//!    that produced it, or to a source, or to nothing. `missing[op]` is how
//!    many edges into an op's outputs have not delivered their cotangent yet.
//! 3. **Seed** each target with ones (or its `output_gradients` entry).
//! 4. **Loop** over a ready stack of ops whose outputs' cotangents are
//!    complete: take the cotangents (an op none of whose outputs got one is
//!    skipped: symbolic zero), call the VJP rule, add each input cotangent to
//!    what its edge's end already has, and decrement `missing` there; a
//!    producer with nothing missing becomes ready. Each rule is dropped as
//!    soon as it has run, so on a one-shot tape what it saved is freed then.
//! 5. **Read off** each source's accumulated cotangent, `None` or zeros when
//!    nothing reached it.
//!
//! Everything after the lookup of the targets is indexed densely (record
//! position, output slot, source position): cotangents live in their
//! producer's slots, not in a map keyed by id, so the per-op cost is a few
//! vector accesses.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::autodiff::gradient::{call_rule, Gradient};
use crate::autodiff::tape::{OpList, TapeState, NO_OP};
use crate::error::{Error, Result};
use crate::kernels::cpu::lockstep::zip;
use crate::tensor::{DType, Shape, Tensor, TensorId};

/// What the caller knows about a source.
pub(crate) struct SourceInfo {
    pub id: TensorId,
    pub shape: Shape,
    pub dtype: DType,
    pub device: crate::tensor::Device,
}

/// What to return for a source no gradient reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unconnected {
    /// `None` (the default, as in TensorFlow).
    #[default]
    None,
    /// Zeros of the source's shape and dtype.
    Zero,
}

/// Where the cotangent of one input of a kept op goes.
#[derive(Clone, Copy)]
enum Edge {
    /// Output `slot` of kept op `op`.
    Op { op: u32, slot: u32 },
    /// The source at this position of the (deduplicated) source list.
    Source(u32),
    /// Nowhere: the input leads to no source.
    Nothing,
}

/// A kept record with its bookkeeping (kept small: a plan has one per op of
/// a long tape).
struct Step {
    /// position of the record in the plan's record list
    rec: u32,
    /// edges into this op's outputs that have not delivered yet
    missing: u32,
    /// whether one of the outputs is itself a source
    source_output: bool,
    /// per input: where its cotangent goes
    edges: SmallVec<[Edge; 2]>,
    /// cotangents accumulated for each output
    cots: SmallVec<[Option<Gradient>; 1]>,
}

/// The sources, deduplicated, with a fast membership test, and the
/// tensors gradients stop at.
struct SourceSet {
    ids: Vec<TensorId>,
    /// per source, its shape (what a gradient delivered to it must have)
    shapes: Vec<Shape>,
    /// id -> position, only built when there are many sources
    map: Option<FxHashMap<TensorId, u32>>,
    /// tensors treated as constants: no cotangent passes them
    stop: Vec<TensorId>,
    /// per source, whether it is on the tape (watched, or made by a
    /// recorded op): only those get cotangents from the ops that read them
    on_tape: Vec<bool>,
}

impl SourceSet {
    fn new(sources: &[SourceInfo], stop: &[TensorId]) -> Self {
        let mut ids: Vec<TensorId> = Vec::with_capacity(sources.len());
        let mut shapes = Vec::with_capacity(sources.len());
        for s in sources {
            if !ids.contains(&s.id) {
                ids.push(s.id);
                shapes.push(s.shape.clone());
            }
        }
        let map = (ids.len() > 8).then(|| ids.iter().enumerate().map(|(i, &id)| (id, i as u32)).collect());
        let on_tape = vec![true; ids.len()];
        SourceSet {
            ids,
            shapes,
            map,
            stop: stop.to_vec(),
            on_tape,
        }
    }

    /// Marks the sources that are not on the tape (`on_tape(id)` false).
    fn mark_on_tape(&mut self, on_tape: impl Fn(TensorId) -> bool) {
        for (flag, &id) in self.on_tape.iter_mut().zip(&self.ids) {
            *flag = on_tape(id);
        }
    }

    #[inline]
    fn position(&self, id: TensorId) -> Option<u32> {
        match &self.map {
            Some(m) => m.get(&id).copied(),
            None => self.ids.iter().position(|&s| s == id).map(|p| p as u32),
        }
    }
}

/// The edge to output `id` of the record at tape position `idx`, if that
/// record is kept (`kept` maps tape positions to steps); else to the source
/// `id` is, if any: for an op's input (`input`), only a source on the tape.
/// (As TensorFlow's tape: a tensor neither watched nor made by a recorded
/// op gets no gradient from the ops that read it, `None` for
/// `tape.watch(a); y = a * b; tape.gradient(y, b)`; a target that is a
/// source still gets its seed.)
fn edge_to(id: TensorId, idx: u32, plan: &Plan, sources: &SourceSet, input: bool) -> Edge {
    let source = |id| sources.position(id).filter(|&s| !input || sources.on_tape[s as usize]);
    if !sources.stop.is_empty() && sources.stop.contains(&id) {
        // a stopped tensor is a constant, unless it is itself a source
        return source(id).map_or(Edge::Nothing, Edge::Source);
    }
    let k = if idx == NO_OP { NO_OP } else { plan.kept[idx as usize] };
    if k != NO_OP {
        let rec = &plan.recs[plan.steps[k as usize].rec as usize];
        let slot = rec
            .outputs
            .iter()
            .position(|o| o.id == id)
            .expect("producer has the output");
        Edge::Op {
            op: k,
            slot: slot as u32,
        }
    } else if let Some(s) = source(id) {
        Edge::Source(s)
    } else {
        Edge::Nothing
    }
}

/// The kept records and their bookkeeping.
struct Plan {
    /// the records the steps refer to: on a one-shot tape, the tape's own
    /// (those not kept already stripped of their rules); else clones of the
    /// kept ones (cheap: ids, shapes and a shared rule)
    recs: OpList,
    /// kept records in execution order
    steps: Vec<Step>,
    /// tape position -> step, or `NO_OP`
    kept: Vec<u32>,
}

/// Steps 1 and 2: the kept records, in execution order, with their edges.
/// `take` takes the records out of `ops` (one-shot tape).
fn plan(ops: &mut OpList, take: bool, target_ops: &[u32], sources: &SourceSet) -> Plan {
    let n = ops.len();
    // 1a. records reachable backwards from the targets
    let mut reach = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    for &t in target_ops {
        if t != NO_OP && !reach[t as usize] {
            reach[t as usize] = true;
            stack.push(t);
        }
    }
    let mut n_reach = stack.len();
    while let Some(idx) = stack.pop() {
        for &p in &ops[idx as usize].producers {
            if p != NO_OP && !reach[p as usize] {
                reach[p as usize] = true;
                n_reach += 1;
                stack.push(p);
            }
        }
    }
    // 1b. of those, the ones that lead to a source, in execution order
    let mut plan = Plan {
        recs: if take { std::mem::take(ops) } else { OpList::default() },
        steps: Vec::with_capacity(n_reach),
        kept: vec![NO_OP; n],
    };
    for idx in 0..n {
        if !reach[idx] {
            if take {
                // free what an unreached rule saved now
                plan.recs[idx].vjp = None;
            }
            continue;
        }
        let rec = if take { &plan.recs[idx] } else { &ops[idx] };
        let mut edges: SmallVec<[Edge; 2]> = SmallVec::new();
        let mut any = false;
        for (&id, &p) in zip(&*rec.inputs, &rec.producers) {
            let edge = edge_to(id, p, &plan, sources, true);
            any |= !matches!(edge, Edge::Nothing);
            edges.push(edge);
        }
        if !any {
            if take {
                plan.recs[idx].vjp = None;
            }
            continue;
        }
        // 2. count the edges into each kept producer
        for e in edges.iter() {
            if let Edge::Op { op, .. } = *e {
                plan.steps[op as usize].missing += 1;
            }
        }
        let source_output = rec.outputs.iter().any(|o| sources.position(o.id).is_some());
        let mut cots = SmallVec::new();
        cots.resize(rec.outputs.len(), None);
        let at = if take {
            idx as u32
        } else {
            plan.recs.push(ops[idx].clone());
            plan.recs.len() as u32 - 1
        };
        plan.kept[idx] = plan.steps.len() as u32;
        plan.steps.push(Step {
            rec: at,
            missing: 0,
            source_output,
            edges,
            cots,
        });
    }
    plan
}

/// Adds `g` to the cotangent accumulated in `slot` (sparse + sparse stays
/// sparse, see [`Gradient::accumulate`]).
fn accumulate(slot: &mut Option<Gradient>, g: Gradient) -> Result<()> {
    *slot = Some(match slot.take() {
        Some(prev) => prev.accumulate(g)?,
        None => g,
    });
    Ok(())
}

/// Fails unless gradient `g` (for input `i` of op `op`) has the shape of
/// the value it is the gradient of.
fn check_shape(op: &'static str, i: usize, g: &Gradient, expected: &[usize]) -> Result<()> {
    let got = g.shape();
    if got == expected {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!("the gradient computed for input {i} has shape {got:?}, but that input has shape {expected:?}"),
    ))
}

/// How a backward pass treats its sources and cotangents.
#[derive(Clone, Copy)]
pub(crate) struct Pass<'a> {
    /// What sources no gradient reaches get.
    pub unconnected: Unconnected,
    /// Tensors treated as constants.
    pub stop: &'a [TensorId],
}

impl Pass<'_> {
    /// A plain pass: `None` for unconnected sources.
    pub(crate) fn plain() -> Self {
        Pass {
            unconnected: Unconnected::None,
            stop: &[],
        }
    }
}

/// Runs reverse accumulation. `seeds[i]` is the cotangent of `targets[i]`.
pub(crate) fn backprop(
    state: &std::cell::RefCell<TapeState>,
    take_state: bool,
    targets: &[Tensor],
    seeds: Vec<Tensor>,
    sources: &[SourceInfo],
    pass: Pass<'_>,
) -> Result<Vec<Option<Gradient>>> {
    let Pass { unconnected, stop } = pass;
    let mut source_set = SourceSet::new(sources, stop);
    let (plan, target_at) = {
        let mut owned;
        let mut borrowed;
        let st: &mut TapeState = if take_state {
            // one-shot: the tape gives everything up; records not kept are
            // freed as the plan is made, the rest as they run
            owned = std::mem::take(&mut *state.borrow_mut());
            // watched variables stay listed (watched_variables after gradient)
            state.borrow_mut().variables = std::mem::take(&mut owned.variables);
            &mut owned
        } else {
            borrowed = state.borrow_mut();
            &mut borrowed
        };
        source_set.mark_on_tape(|id| st.tensors.contains_key(&id));
        let target_ops: Vec<u32> = targets
            .iter()
            .map(|t| st.tensors.get(&t.id()).copied().unwrap_or(NO_OP))
            .collect();
        let plan = plan(&mut st.ops, take_state, &target_ops, &source_set);
        // where each target's seed goes: a kept op's output slot or a source
        let target_at: Vec<Edge> = targets
            .iter()
            .zip(&target_ops)
            .map(|(t, &idx)| edge_to(t.id(), idx, &plan, &source_set, false))
            .collect();
        (plan, target_at)
    };
    let Plan {
        mut recs, mut steps, ..
    } = plan;
    let mut source_grads: Vec<Option<Gradient>> = vec![None; source_set.ids.len()];

    // 3. seed
    for (edge, s) in target_at.iter().zip(seeds) {
        let s = Gradient::Dense(s);
        match *edge {
            Edge::Op { op, slot } => accumulate(&mut steps[op as usize].cots[slot as usize], s)?,
            Edge::Source(i) => accumulate(&mut source_grads[i as usize], s)?,
            Edge::Nothing => {}
        }
    }

    // 4. loop
    let mut ready: Vec<u32> = (0..steps.len() as u32)
        .filter(|&k| steps[k as usize].missing == 0)
        .collect();
    while let Some(k) = ready.pop() {
        let step = &mut steps[k as usize];
        let rec = &mut recs[step.rec as usize];
        let vjp = rec.vjp.take().expect("each op runs once");
        let rec_name = rec.name;
        let cots = std::mem::take(&mut step.cots);
        let edges = std::mem::take(&mut step.edges);
        if step.source_output {
            // an output that is itself a source keeps its (complete) cotangent
            for (c, o) in zip(&*cots, &rec.outputs) {
                if let (Some(c), Some(s)) = (c, source_set.position(o.id)) {
                    accumulate(&mut source_grads[s as usize], c.clone())?;
                }
            }
        }
        if cots.iter().any(|c| c.is_some()) {
            let mut needs: SmallVec<[bool; 4]> = SmallVec::new();
            for e in edges.iter() {
                needs.push(!matches!(e, Edge::Nothing));
            }
            let in_grads = call_rule(&vjp, cots, &rec.outputs, &needs)?;
            if in_grads.len() != edges.len() {
                return Err(Error::invalid(
                    rec.name,
                    format!(
                        "gradient rule returned {} gradients for {} inputs",
                        in_grads.len(),
                        edges.len()
                    ),
                ));
            }
            for (i, (g, edge)) in in_grads.into_iter().zip(&edges).enumerate() {
                let Some(g) = g else { continue };
                let expected: &[usize] = match *edge {
                    Edge::Op { op, slot } => &recs[steps[op as usize].rec as usize].outputs[slot as usize].shape,
                    Edge::Source(s) => &source_set.shapes[s as usize],
                    Edge::Nothing => continue,
                };
                check_shape(rec_name, i, &g, expected)?;
                match *edge {
                    Edge::Op { op, slot } => accumulate(&mut steps[op as usize].cots[slot as usize], g)?,
                    Edge::Source(i) => accumulate(&mut source_grads[i as usize], g)?,
                    Edge::Nothing => {}
                }
            }
        }
        for edge in edges.iter() {
            if let Edge::Op { op, .. } = *edge {
                let m = &mut steps[op as usize].missing;
                *m -= 1;
                if *m == 0 {
                    ready.push(op);
                }
            }
        }
        // `vjp` drops here: on a one-shot tape this frees what the rule saved
        drop(vjp);
    }

    // 5. read off
    sources
        .iter()
        .map(|s| {
            let pos = source_set.position(s.id).expect("listed") as usize;
            Ok(match &source_grads[pos] {
                Some(g) if s.dtype.is_differentiable() => Some(g.clone()),
                _ => match unconnected {
                    Unconnected::None => None,
                    Unconnected::Zero => Some(Gradient::Dense(crate::kernels::gpu::filled(
                        "zeros", &s.shape, 0.0, s.dtype, s.device,
                    )?)),
                },
            })
        })
        .collect()
}
