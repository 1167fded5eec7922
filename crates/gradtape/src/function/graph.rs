//! The graph: what a trace records, as a listing of nodes over values.
//!
//! A [`Graph`] is a list of [`Node`]s in program order (a topological
//! order), each applying an [`Op`] to input *values* and producing output
//! values. A value is a number (`%3` in a listing) with the dtype and shape
//! seen when it was traced. The graph's inputs are values that no node
//! produces (the function's arguments, then the values it captured from an
//! enclosing trace); its outputs are values (any: an input, a node's output).
//! Constants are nodes too ([`Op::Const`]), so that every value has one
//! producer or is an input.
//!
//! Printing a graph gives one line per node:
//!
//! ```text
//! graph(%0: f32[3], %1: f32[3]) {
//!   %2: f32[3] = Mul(%0, %1)
//!   %3: f32[] = Sum[axes=[0]](%2)
//!   return (%3)
//! }
//! ```

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

pub use crate::dispatch::site::Site;
use crate::error::{Error, Result};
use crate::ops::desc::Op;
use crate::tensor::{DType, Shape, Tensor};

/// A value of a graph: its index in [`Graph::values`].
pub type ValueId = u32;

/// What a graph knows of a value: dtype and shape as traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueInfo {
    /// The element type.
    pub dtype: DType,
    /// The shape seen when the value was traced.
    pub shape: Shape,
}

/// One op applied to values.
#[derive(Clone, Debug)]
pub struct Node {
    /// What it computes.
    pub op: Op,
    /// Its input values.
    pub inputs: SmallVec<[ValueId; 2]>,
    /// Its output values.
    pub outputs: SmallVec<[ValueId; 1]>,
    /// The public op the trace recorded it in, where that op names itself
    /// for errors of values (see [`Site`]); `None` for the others and for
    /// the compiler's own nodes (an error names the node's op instead).
    pub site: Option<Arc<Site>>,
}

impl Node {
    /// What an error of this node names: the public op of its [`Site`],
    /// or else its own op, with its operands' shapes and dtypes (as `g`,
    /// the graph it is in, has them). Built only when an error occurs.
    #[cold]
    pub(crate) fn describe(&self, g: &Graph) -> String {
        if let Some(site) = &self.site {
            return site.to_string();
        }
        let operands: Vec<String> = self
            .inputs
            .iter()
            .map(|&v| match g.values.get(v as usize) {
                Some(info) => format!("{:?} {}", &info.shape[..], info.dtype),
                None => format!("%{v}"),
            })
            .collect();
        format!("{} ({})", self.op.name(), operands.join(", "))
    }
}

/// A traced computation: nodes over values, with inputs and outputs.
#[derive(Clone, Default)]
pub struct Graph {
    /// Every value, indexed by [`ValueId`].
    pub values: Vec<ValueInfo>,
    /// The input values, in order.
    pub inputs: Vec<ValueId>,
    /// The nodes, in program order.
    pub nodes: Vec<Node>,
    /// The output values, in order.
    pub outputs: Vec<ValueId>,
}

impl Graph {
    /// A new value of this dtype and shape.
    pub(crate) fn add_value(&mut self, dtype: DType, shape: &[usize]) -> ValueId {
        self.values.push(ValueInfo {
            dtype,
            shape: crate::tensor::layout::small_copy(shape),
        });
        (self.values.len() - 1) as ValueId
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many nodes run an op of this name.
    ///
    /// ```
    /// use gradtape::{function, Tensor};
    /// let f = function(|x: &Tensor| x.mul(x)?.add(&x.mul(x)?));
    /// let g = f.graph(&Tensor::vector(&[1.0f32, 2.0]))?;
    /// assert_eq!(g.count("Mul"), 1); // the second x * x is the first one
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn count(&self, name: &str) -> usize {
        self.nodes.iter().filter(|n| n.op.name() == name).count()
    }

    /// For each value, the index of the last node that reads it
    /// (`usize::MAX` for values the graph returns, or never reads).
    pub(crate) fn last_uses(&self) -> Vec<usize> {
        let mut last = vec![usize::MAX; self.values.len()];
        let mut read = vec![false; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &v in &n.inputs {
                last[v as usize] = i;
                read[v as usize] = true;
            }
        }
        for &o in &self.outputs {
            last[o as usize] = usize::MAX;
        }
        for (l, r) in last.iter_mut().zip(read) {
            if !r {
                *l = usize::MAX;
            }
        }
        last
    }

    /// Runs the graph on `args` (one tensor per input): each node's op in
    /// order, each value dropped after its last reader. Ops run through the
    /// public ops, so whatever tapes, accumulators and traces are active see
    /// them; callers hide those they must not.
    ///
    /// Compiled graphs run on their own executor instead
    /// (`compile::exec`: a plan made once, buffers reused in place).
    pub(crate) fn run(&self, args: &[Tensor], plan: &RunPlan) -> Result<Vec<Tensor>> {
        if args.len() != self.inputs.len() {
            return Err(Error::invalid(
                "function",
                format!("the graph takes {} inputs, got {}", self.inputs.len(), args.len()),
            ));
        }
        let mut slots: Vec<Option<Tensor>> = vec![None; self.values.len()];
        for (&v, a) in self.inputs.iter().zip(args) {
            slots[v as usize] = Some(a.clone());
        }
        let mut ins: SmallVec<[Tensor; 4]> = SmallVec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            ins.clear();
            for &v in &node.inputs {
                let t = slots[v as usize].clone();
                ins.push(t.ok_or_else(|| Error::invalid("function", format!("value %{v} read before it is made")))?);
            }
            // values read for the last time are released before the op runs,
            // so that an op may reuse a buffer nothing else holds
            for &v in &node.inputs {
                if plan.last_use[v as usize] == i {
                    slots[v as usize] = None;
                }
            }
            let outs = node.op.eval(&ins).map_err(|e| {
                // a shape changed inside a node's own graph (a branch, a
                // body) after this graph's writes: not to be run again
                if SHAPES_CHANGED.get() == Changed::BeforeWrites && self.nodes[..i].iter().any(node_writes) {
                    SHAPES_CHANGED.set(Changed::AfterWrites);
                }
                e.at_node(|| node.describe(self))
            })?;
            if outs.len() != node.outputs.len() {
                return Err(Error::invalid(
                    node.op.name(),
                    format!("gave {} outputs, the graph expects {}", outs.len(), node.outputs.len()),
                ));
            }
            if let Op::Sort(op) = &node.op
                && !op.static_shape()
            {
                self.check_value_shapes(node, &outs, &self.nodes[..i])?;
            }
            for (&v, t) in node.outputs.iter().zip(outs) {
                if plan.last_use[v as usize] != usize::MAX || plan.returned[v as usize] {
                    slots[v as usize] = Some(t);
                }
            }
        }
        returned_values(&self.outputs, &slots)
    }

    /// Fails where a node whose output shapes its values decide (`unique`,
    /// `bincount`, `argwhere`, the sorted segment ops) gave other shapes
    /// than the trace saw: the nodes after it were traced for those
    /// shapes (a mean's count, a gradient's broadcast, a reshape), so
    /// they would give wrong numbers or fail. The error is marked (see
    /// [`take_shapes_changed`]) for the function to trace again, if none of
    /// the nodes that ran `before` it wrote state.
    #[cold]
    fn check_value_shapes(&self, node: &Node, outs: &[Tensor], before: &[Node]) -> Result<()> {
        for (&v, t) in node.outputs.iter().zip(outs) {
            let traced = &self.values[v as usize].shape;
            if t.shape() != &traced[..] {
                SHAPES_CHANGED.set(if before.iter().any(node_writes) {
                    Changed::AfterWrites
                } else {
                    Changed::BeforeWrites
                });
                return Err(Error::invalid(
                    node.op.name(),
                    format!(
                        "gave shape {:?} where the trace saw {:?}: a shape the values decide changed \
                         since the trace, after the call had written state (a function is traced \
                         again for such a shape only where it changes before any write)",
                        t.shape(),
                        &traced[..]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether the graph (or a graph nested in it) writes state (a
    /// variable): running it again would repeat the writes.
    pub(crate) fn writes_state(&self) -> bool {
        self.nodes.iter().any(node_writes)
    }

    /// The graphs nested in this one's nodes (branches, bodies, calls).
    pub fn subgraphs(&self) -> Vec<(String, Arc<Graph>)> {
        self.nodes
            .iter()
            .flat_map(|n| match &n.op {
                Op::Dyn(d) => nested(&**d),
                _ => Vec::new(),
            })
            .collect()
    }
}

/// Whether a node writes state (a variable), itself or in a graph nested
/// in it: running it again would repeat the writes.
fn node_writes(n: &Node) -> bool {
    match &n.op {
        Op::Dyn(d) => d.writes() || nested(&**d).iter().any(|(_, g)| g.writes_state()),
        Op::Opaque(_) => true,
        _ => false,
    }
}

/// Whether, and where, a graph run failed because a shape the values
/// decide changed since its trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Changed {
    No,
    /// before any node that writes state ran: the call may be traced and
    /// run again
    BeforeWrites,
    /// after a write: running again would repeat it
    AfterWrites,
}

thread_local! {
    /// Set when a graph run on this thread failed because a shape the
    /// values decide changed since its trace (see
    /// [`Graph::check_value_shapes`]).
    static SHAPES_CHANGED: std::cell::Cell<Changed> = const { std::cell::Cell::new(Changed::No) };
}

/// Whether a graph run on this thread failed because a shape the values
/// decide changed since its trace, since the last time this was asked.
pub(crate) fn take_shapes_changed() -> Changed {
    SHAPES_CHANGED.replace(Changed::No)
}

/// The values `outputs` names, from an executor's `slots` (shared by the
/// traced graph's executor and the compiled one's).
pub(crate) fn returned_values(outputs: &[ValueId], slots: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    outputs
        .iter()
        .map(|&o| {
            slots[o as usize]
                .clone()
                .ok_or_else(|| Error::invalid("function", format!("output %{o} is never made")))
        })
        .collect()
}

/// What the executor precomputes once per graph.
pub struct RunPlan {
    /// per value, the last node that reads it (`usize::MAX`: kept)
    last_use: Vec<usize>,
    /// per value, whether the graph returns it
    returned: Vec<bool>,
}

impl RunPlan {
    /// The plan of running `g`.
    pub fn new(g: &Graph) -> Self {
        let mut returned = vec![false; g.values.len()];
        for &o in &g.outputs {
            returned[o as usize] = true;
        }
        RunPlan {
            last_use: g.last_uses(),
            returned,
        }
    }
}

fn write_value(f: &mut fmt::Formatter<'_>, g: &Graph, v: ValueId) -> fmt::Result {
    let info = &g.values[v as usize];
    write!(f, "%{v}: {}{:?}", info.dtype, &info.shape[..])
}

fn write_list(f: &mut fmt::Formatter<'_>, vs: &[ValueId]) -> fmt::Result {
    for (i, v) in vs.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "%{v}")?;
    }
    Ok(())
}

impl Graph {
    fn fmt_indented(&self, f: &mut fmt::Formatter<'_>, indent: usize) -> fmt::Result {
        let pad = "  ".repeat(indent);
        f.write_str("graph(")?;
        for (i, &v) in self.inputs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write_value(f, self, v)?;
        }
        f.write_str(") {\n")?;
        for n in &self.nodes {
            write!(f, "{pad}  ")?;
            for (i, &v) in n.outputs.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write_value(f, self, v)?;
            }
            if !n.outputs.is_empty() {
                f.write_str(" = ")?;
            }
            write!(f, "{}(", n.op)?;
            write_list(f, &n.inputs)?;
            f.write_str(")\n")?;
            if let Op::Dyn(d) = &n.op {
                for (label, sub) in nested(&**d) {
                    write!(f, "{pad}    {label}: ")?;
                    sub.fmt_indented(f, indent + 2)?;
                    f.write_str("\n")?;
                }
            }
        }
        write!(f, "{pad}  return (")?;
        write_list(f, &self.outputs)?;
        write!(f, ")\n{pad}}}")
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_indented(f, 0)
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The graphs nested in a dynamic op (its branches, body or callee), which
/// it hands over type-erased.
pub(crate) fn nested(d: &dyn crate::ops::desc::DynOp) -> Vec<(String, Arc<Graph>)> {
    d.subgraphs()
        .into_iter()
        .filter_map(|(label, g)| g.downcast::<Graph>().ok().map(|g| (label, g)))
        .collect()
}
