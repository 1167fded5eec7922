//! Reverse-mode accumulation over a tape.
//!
//! Terms: a *target* is a tensor being differentiated; a *source* is a tensor
//! (or variable handle) the gradient is taken with respect to; a *cotangent*
//! of a tensor is the gradient of the (weighted) sum of targets w.r.t. it.
//!
//! The algorithm, after TensorFlow's eager tape:
//!
//! 1. **Prune.** Walk from the targets through the producer map to find the
//!    records that can reach a target; of those keep the ones that lead back
//!    to a source (scanned in execution order). Nothing else is visited, and
//!    an input that leads to no source is marked as not needing a gradient,
//!    so its rule may skip computing it.
//! 2. **Count.** `usage[t]` is how many kept records consume tensor `t`;
//!    `missing[op]` is how many of an op's outputs still have consumers
//!    whose cotangents have not arrived.
//! 3. **Seed** each target with ones (or its `output_gradients` entry).
//! 4. **Loop** over a ready stack of ops whose outputs' cotangents are
//!    complete: take the cotangents (an op none of whose outputs got one is
//!    skipped: symbolic zero), call the VJP rule, add each input cotangent to
//!    what that input already has, and decrement usage; a producer whose
//!    outputs are all complete becomes ready. Each record is dropped as soon
//!    as it has run, so on a one-shot tape what it saved is freed then.
//! 5. **Read off** each source's accumulated cotangent, `None` or zeros when
//!    nothing reached it.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use crate::autodiff::tape::{OpRecord, TapeState, WATCHED};
use crate::error::{Error, Result};
use crate::tensor::{DType, Shape, Tensor, TensorId};

/// What the caller knows about a source.
pub(crate) struct SourceInfo {
    pub id: TensorId,
    pub shape: Shape,
    pub dtype: DType,
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

/// The records between targets and sources, with their bookkeeping. Built
/// while the tape is borrowed; holds its own `Arc`s so that the tape can be
/// released (and even record the backward pass) while it runs.
struct Plan {
    /// kept records, indexed by position in this vector
    ops: Vec<Option<Arc<OpRecord>>>,
    /// per kept op: which inputs need a cotangent
    needs: Vec<SmallVec<[bool; 2]>>,
    /// tensor id -> kept op producing it
    producer: FxHashMap<TensorId, usize>,
    usage: FxHashMap<TensorId, usize>,
    missing: Vec<usize>,
}

fn prune(state: &TapeState, targets: &[Tensor], sources: &FxHashSet<TensorId>) -> Plan {
    // 1a. records reachable backwards from the targets
    let mut reach: Vec<u32> = Vec::new();
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut stack: Vec<TensorId> = targets.iter().map(|t| t.id()).collect();
    while let Some(id) = stack.pop() {
        if let Some(&idx) = state.tensors.get(&id) {
            if idx != WATCHED && seen.insert(idx) {
                reach.push(idx);
                stack.extend(state.ops[idx as usize].inputs.iter().copied());
            }
        }
    }
    // 1b. of those, the ones that lead to a source, in execution order
    reach.sort_unstable();
    let mut leads: FxHashSet<TensorId> = sources.clone();
    let mut plan = Plan {
        ops: Vec::new(),
        needs: Vec::new(),
        producer: FxHashMap::default(),
        usage: FxHashMap::default(),
        missing: Vec::new(),
    };
    for idx in reach {
        let rec = &state.ops[idx as usize];
        let needs: SmallVec<[bool; 2]> = rec.inputs.iter().map(|i| leads.contains(i)).collect();
        if !needs.iter().any(|&n| n) {
            continue;
        }
        let k = plan.ops.len();
        for o in &rec.outputs {
            leads.insert(o.id);
            plan.producer.insert(o.id, k);
        }
        plan.ops.push(Some(rec.clone()));
        plan.needs.push(needs);
    }
    // 2. usage counts and missing-output counts
    for rec in plan.ops.iter().flatten() {
        for i in &rec.inputs {
            *plan.usage.entry(*i).or_insert(0) += 1;
        }
    }
    plan.missing = vec![0; plan.ops.len()];
    for (id, _) in plan.usage.iter() {
        if let Some(&k) = plan.producer.get(id) {
            plan.missing[k] += 1;
        }
    }
    plan
}

/// Adds `g` to the cotangent accumulated for `id`.
fn accumulate(grads: &mut FxHashMap<TensorId, Tensor>, id: TensorId, g: Tensor) -> Result<()> {
    match grads.remove(&id) {
        Some(prev) => {
            let sum = prev.add(&g)?;
            grads.insert(id, sum);
        }
        None => {
            grads.insert(id, g);
        }
    }
    Ok(())
}

/// Runs reverse accumulation. `seeds[i]` is the cotangent of `targets[i]`.
pub(crate) fn backprop(
    state: &std::cell::RefCell<TapeState>,
    take_state: bool,
    targets: &[Tensor],
    seeds: Vec<Tensor>,
    sources: &[SourceInfo],
    unconnected: Unconnected,
) -> Result<Vec<Option<Tensor>>> {
    let source_ids: FxHashSet<TensorId> = sources.iter().map(|s| s.id).collect();
    let mut plan = if take_state {
        // one-shot: the tape gives everything up; records not in the plan
        // are freed when `owned` drops at the end of this block
        let mut owned = std::mem::take(&mut *state.borrow_mut());
        // watched variables stay listed (watched_variables after gradient)
        state.borrow_mut().variables = std::mem::take(&mut owned.variables);
        prune(&owned, targets, &source_ids)
    } else {
        prune(&state.borrow(), targets, &source_ids)
    };

    // 3. seed
    let mut grads: FxHashMap<TensorId, Tensor> = FxHashMap::default();
    for (t, s) in targets.iter().zip(seeds) {
        accumulate(&mut grads, t.id(), s)?;
    }

    // 4. loop
    let mut ready: Vec<usize> = (0..plan.ops.len()).filter(|&k| plan.missing[k] == 0).collect();
    while let Some(k) = ready.pop() {
        let rec = plan.ops[k].take().expect("each op runs once");
        let mut cots: SmallVec<[Option<Tensor>; 1]> = SmallVec::new();
        for o in &rec.outputs {
            let g = if source_ids.contains(&o.id) {
                grads.get(&o.id).cloned()
            } else {
                grads.remove(&o.id)
            };
            cots.push(g);
        }
        if cots.iter().any(|c| c.is_some()) {
            let cots: SmallVec<[Tensor; 1]> = cots
                .into_iter()
                .zip(&rec.outputs)
                .map(|(c, o)| c.unwrap_or_else(|| Tensor::zeros(&o.shape, o.dtype)))
                .collect();
            let in_grads = (rec.vjp)(&cots, &plan.needs[k])?;
            if in_grads.len() != rec.inputs.len() {
                return Err(Error::invalid(
                    rec.name,
                    format!(
                        "gradient rule returned {} gradients for {} inputs",
                        in_grads.len(),
                        rec.inputs.len()
                    ),
                ));
            }
            for ((id, g), &need) in rec.inputs.iter().zip(in_grads).zip(&plan.needs[k]) {
                if let (Some(g), true) = (g, need) {
                    accumulate(&mut grads, *id, g)?;
                }
            }
        }
        for id in &rec.inputs {
            let Some(u) = plan.usage.get_mut(id) else { continue };
            *u -= 1;
            if *u == 0 {
                if let Some(&p) = plan.producer.get(id) {
                    plan.missing[p] -= 1;
                    if plan.missing[p] == 0 {
                        ready.push(p);
                    }
                }
            }
        }
        // `rec` drops here: on a one-shot tape this frees what the rule saved
    }

    // 5. read off
    Ok(sources
        .iter()
        .map(|s| match grads.get(&s.id) {
            Some(g) if s.dtype.is_float() => Some(g.clone()),
            _ => match unconnected {
                Unconnected::None => None,
                Unconnected::Zero => Some(Tensor::zeros(&s.shape, s.dtype)),
            },
        })
        .collect())
}
