//! The graphs of [`batch_once`](super::batch_once), kept by structure.
//!
//! A vectorized Jacobian traces the backward pass for one cotangent anew
//! on every call: the rules that make it hold the forward tensors of *this*
//! tape, and only running them says which. What repeats from call to call,
//! for tapes of the same structure, is the traced graph up to those
//! tensors, and the work of optimizing it ([`optimize`](super::super::passes::optimize)).
//! So the optimized graphs are kept here, each under the **structure** of
//! the graph as traced, and a trace whose structure matches a kept one is
//! run as that graph, its constants fed in.
//!
//! - The structure of a traced graph is everything in it but the tensors
//!   its constants hold: its values (dtypes and shapes), inputs, outputs,
//!   and each node's descriptor, inputs and outputs (a constant's: that it
//!   is one), and which of its small constants are equal (CSE merges those,
//!   by value). Two traces with one structure optimize to the same graph
//!   but for the constants' tensors: the passes decide from nothing else.
//! - A kept graph has no constants: each constant that survived the passes
//!   is an extra input (after the traced arguments), noted with the
//!   position, among the traced graph's constants in node order, of the
//!   one it stands for. A trace that matches feeds its own constants there,
//!   so the interpreter reads this trace's tensors, as it would have
//!   through its own optimized graph (and a tape recording around the call
//!   sees the same ops on the same tensors).
//! - Not kept: graphs traced inside an enclosing trace (a Jacobian in a
//!   `function`: its graph may capture that trace's values, and runs once,
//!   recorded into it) and graphs with an op defined above the op layer
//!   (their descriptors compare by identity).
//!
//! The cache is per thread (traces are), holds a few graphs, least
//! recently used first out, and none of them holds a tensor.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::super::graph::{Graph, ValueId, ValueInfo};
use super::super::passes::{self, ConstKey};
use crate::ops::desc::Op;
use crate::tensor::{Tensor, TensorId};

/// How many graphs the cache keeps per thread.
const MAX_KEPT: usize = 8;

/// A node's descriptor in a structure: an op, or a constant (whose
/// value's dtype and shape are in the structure's values).
enum Desc {
    Op(Op),
    Const,
}

/// One node of a structure.
struct StructNode {
    op: Desc,
    inputs: SmallVec<[ValueId; 2]>,
    outputs: SmallVec<[ValueId; 1]>,
}

/// A traced graph without its constants' tensors.
struct Structure {
    values: Vec<ValueInfo>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    nodes: Vec<StructNode>,
    /// which small constants are equal (see [`equal_constants`])
    equal: Vec<Option<usize>>,
}

/// For each constant of `g` (in node order), if it is small enough for
/// CSE to merge by value, the position of the first constant equal to it
/// (itself, if none before): which constants CSE merges.
fn equal_constants(g: &Graph) -> Vec<Option<usize>> {
    let mut first: FxHashMap<ConstKey, usize> = FxHashMap::default();
    constants(g)
        .iter()
        .enumerate()
        .map(|(i, t)| passes::const_key(t).map(|k| *first.entry(k).or_insert(i)))
        .collect()
}

impl Structure {
    /// The structure of `g`, if graphs like it may be kept.
    fn of(g: &Graph) -> Option<Structure> {
        let mut nodes = Vec::with_capacity(g.nodes.len());
        for n in &g.nodes {
            let op = match &n.op {
                Op::Const(_) => Desc::Const,
                Op::Dyn(_) | Op::Opaque(_) => return None,
                op => Desc::Op(op.clone()),
            };
            nodes.push(StructNode {
                op,
                inputs: n.inputs.clone(),
                outputs: n.outputs.clone(),
            });
        }
        Some(Structure {
            values: g.values.clone(),
            inputs: g.inputs.clone(),
            outputs: g.outputs.clone(),
            nodes,
            equal: equal_constants(g),
        })
    }

    /// Whether `g` has this structure: the same values, inputs, outputs
    /// and nodes, constants aside, and the same small constants equal. (The
    /// constants' values are not compared: two traces of one structure may
    /// differ in any of them, only not in which ones CSE merges.)
    fn matches(&self, g: &Graph) -> bool {
        self.values == g.values
            && self.inputs == g.inputs
            && self.outputs == g.outputs
            && self.nodes.len() == g.nodes.len()
            && self.nodes.iter().zip(&g.nodes).all(|(s, n)| {
                s.inputs == n.inputs
                    && s.outputs == n.outputs
                    && match (&s.op, &n.op) {
                        (Desc::Const, Op::Const(_)) => true,
                        (Desc::Op(a), b) => !matches!(b, Op::Const(_)) && a == b,
                        _ => false,
                    }
            })
            && self.equal == equal_constants(g)
    }
}

/// A kept graph: the optimized graph with its constants as trailing
/// inputs, and for each of those the position of the traced constant it
/// stands for.
pub(super) struct Kept {
    pub graph: Graph,
    pub consts: Vec<usize>,
}

thread_local! {
    /// (structure, graph), most recently used last.
    static KEPT: RefCell<Vec<(Structure, Rc<Kept>)>> = const { RefCell::new(Vec::new()) };
    /// (hits, misses) on this thread.
    static COUNTS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The tensors of `g`'s constants, in node order.
pub(super) fn constants(g: &Graph) -> Vec<Tensor> {
    g.nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Const(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// The kept graph for a graph of `traced`'s structure, if there is one.
pub(super) fn find(traced: &Graph) -> Option<Rc<Kept>> {
    let found = KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let i = k.iter().rposition(|(s, _)| s.matches(traced))?;
        let e = k.remove(i);
        let kept = e.1.clone();
        k.push(e);
        Some(kept)
    });
    COUNTS.with(|c| {
        let (h, m) = c.get();
        c.set(if found.is_some() { (h + 1, m) } else { (h, m + 1) });
    });
    found
}

/// Optimizes `traced` and keeps the result under its structure (when
/// graphs like it may be kept); returns the graph to run, with its
/// constants as trailing inputs, and which of `traced`'s constants feed
/// them.
pub(super) fn optimize_and_keep(traced: Graph) -> Rc<Kept> {
    let mut structure = Structure::of(&traced);
    let at: FxHashMap<TensorId, usize> = constants(&traced)
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id(), i))
        .collect();
    let mut graph = traced;
    passes::optimize(&mut graph);
    // each surviving constant becomes an input
    let mut consts = Vec::new();
    for n in std::mem::take(&mut graph.nodes) {
        if let (Op::Const(t), [v]) = (&n.op, &n.outputs[..])
            && let Some(&i) = at.get(&t.id())
        {
            graph.inputs.push(*v);
            consts.push(i);
            continue;
        }
        if matches!(n.op, Op::Const(_)) {
            // (the passes make no constants; were one new, the graph
            // would hold its tensor: not kept)
            structure = None;
        }
        graph.nodes.push(n);
    }
    let kept = Rc::new(Kept { graph, consts });
    if let Some(s) = structure {
        KEPT.with(|k| {
            let mut k = k.borrow_mut();
            k.push((s, kept.clone()));
            if k.len() > MAX_KEPT {
                k.remove(0);
            }
        });
    }
    kept
}

/// How many traces on this thread found a kept graph, and how many did
/// not (for tests).
pub fn counts() -> (usize, usize) {
    COUNTS.with(Cell::get)
}
