//! Fusion (the `fuse` pass): groups of elementwise nodes become one
//! [`Fused`] node that reads each input once and writes each output once.
//!
//! ```text
//! before:                                after:
//!   %2: f64[6, 10] = Add(%0, %1)           %5: f64[6] = Fused[4 ops, f64 x [6, 10]] { .. }(%0, %1)
//!   %3: f64[6, 10] = Tanh(%2)
//!   %4: f64[6, 10] = Square(%3)
//!   %5: f64[6] = Sum[axes=[1]](%4)
//! ```
//!
//! **Members.** A node can join a group when it is a float (`f32`/`f64`)
//! elementwise op the kernel computes ([`kernel::fusible_unary`],
//! [`kernel::fusible_binary`], and `BiasAdd`, an add), a `FullLike` (a constant register) or a
//! `BroadcastTo` of one element, and its output has the group's shape.
//! In graphs for the host, `f16` and `bf16` ops join half groups too,
//! those whose eager half kernel rounds the op's `f32` function once
//! ([`half`]), without sums or reductions: their programs compute in
//! `f32` and round after every op, the eager bits (`kernel::half`).
//! Each input of a member is made inside the group or comes from outside
//! with the group's shape, one element (splatted: a scalar operand), or a
//! shape that broadcasts to the group's as `ones, equal dims, ones` (a
//! bias row `[k]` into `[n, k]`, a column `[n, 1]`: read by index, see
//! `kernel::epilogue`). Reductions of a group value join as epilogues (the
//! reduced tensor is never made): a sum of all elements (the kernel adds
//! it up chunk by chunk, in `f64`: a reassociation), and a sum, max or
//! min over the leading or the trailing axes (`[n, k] -> [k]` or `[n]`,
//! keepdims or not), in the eager kernels' order, bit for bit, except
//! for a sum over leading axes to at most `BLOCKED_MAX` outputs in a
//! group large enough for several threads (blocked, see
//! `kernel::epilogue`: a bias gradient's). A group large
//! enough for several threads has partial reductions of one kind of axes
//! and one size (they decide how its elements are split into tasks; see
//! `split_after`).
//!
//! A node joins a group that makes one of its inputs, or else one of the
//! latest groups of its shape (a sibling: `cos(x)` beside `sin(x)`).
//!
//! **Placement.** The fused node runs where the group's first member was.
//! So a node joins a group only if every input it takes from outside is
//! available before that point (made by an earlier node, or an input of
//! the graph): the fused node never waits for a value that depends on the
//! group itself, and the graph stays acyclic. Members are pure, so running
//! them earlier changes nothing else.
//!
//! **Outputs.** A group returns the member values that a node outside the
//! group reads or that the graph returns, and its sums; values used only
//! inside live in registers. Every group becomes a node, even of one op
//! (computing what the op's kernel computes): a group left as it was would
//! run later than the point its values were taken to be available.

mod half;
mod program;

use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::kernel::{self, Axis, Fold, Program};
use super::pipeline::PassCx;
use crate::error::Result;
use crate::function::graph::{Graph, Node, ValueId};
use crate::kernels::cuda::fused::FusedKernel;
use crate::ops::desc::{DynOp, NnOp, Op, Outputs, ReduceKind, ShapeOp};
use crate::tensor::{DType, Tensor};
use program::build;

/// A fused group as a graph node.
pub struct Fused {
    pub program: Program,
    /// how many ops it replaced (for listings)
    pub(crate) ops: usize,
    /// its CUDA kernel (made at its first GPU run, or when a graph is
    /// compiled for a GPU; `None`: the program has none)
    pub(crate) cuda: OnceLock<Option<Arc<FusedKernel>>>,
}

impl Fused {
    pub(crate) fn new(program: Program, ops: usize) -> Fused {
        Fused {
            program,
            ops,
            cuda: OnceLock::new(),
        }
    }

    /// The program's CUDA kernel, made once (`None`: it has none, see
    /// `Program::cuda_kernel`).
    pub fn cuda_kernel(&self) -> Option<&Arc<FusedKernel>> {
        self.cuda
            .get_or_init(|| self.program.cuda_kernel().map(Arc::new))
            .as_ref()
    }
}

impl DynOp for Fused {
    fn name(&self) -> &'static str {
        "Fused"
    }
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        // on a GPU: its CUDA kernel, or the program on host copies where
        // the GPU is emulated
        let refs: SmallVec<[&Tensor; 8]> = inputs.iter().collect();
        let gpu = crate::dispatch::device::offload_n(
            "Fused",
            &refs,
            |_| match self.cuda_kernel() {
                Some(k) => crate::kernels::cuda::run_fused("Fused", k, inputs),
                None => Err(crate::error::Error::invalid(
                    "Fused",
                    "this fused program has no GPU kernel (a partial reduction)",
                )),
            },
            |host| Ok(self.program.run(host)?.into_vec()),
        );
        if let Some(outs) = gpu {
            return Ok(outs?.into_iter().collect());
        }
        Ok(self.program.run(inputs)?.into_iter().collect())
    }
    fn stateful(&self) -> bool {
        false
    }
    fn fmt_attrs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.program;
        write!(f, "[{} ops, {} x {:?}] {{ ", self.ops, p.dtype, p.shape)?;
        let listing = p.to_string();
        let lines: Vec<&str> = listing.lines().collect();
        write!(f, "{} }}", lines.join("; "))
    }
}

impl Fused {
    /// Whether `node` (this op's node in `g`) takes inputs of the sizes and
    /// makes outputs of the dtype and shapes its program does.
    pub(crate) fn check(&self, g: &Graph, node: &Node) -> std::result::Result<(), String> {
        let p = &self.program;
        if node.inputs.len() != p.input_len.len() || node.outputs.len() != p.outputs.len() {
            return Err(format!(
                "takes {} inputs and makes {} outputs, its program {} and {}",
                node.inputs.len(),
                node.outputs.len(),
                p.input_len.len(),
                p.outputs.len()
            ));
        }
        for (&v, &len) in node.inputs.iter().zip(&p.input_len) {
            if numel(&g.values[v as usize].shape) != len {
                return Err(format!("input %{v} is not of the {len} elements its program reads"));
            }
        }
        for (&v, out) in node.outputs.iter().zip(&p.outputs) {
            let info = &g.values[v as usize];
            if info.dtype != p.dtype || info.shape[..] != *out.shape(&p.shape) {
                return Err(format!(
                    "output %{v} is {}{:?}, its program makes {}{:?}",
                    info.dtype,
                    &info.shape[..],
                    p.dtype,
                    out.shape(&p.shape)
                ));
            }
        }
        Ok(())
    }
}

/// What a member computes.
enum Member {
    Unary(crate::ops::desc::Unary),
    Binary(crate::ops::desc::Binary),
    /// a constant everywhere
    Fill(f64),
    /// its one-element input everywhere (or itself, in a group of one element)
    Broadcast,
    /// the sum of all elements of its input (an epilogue)
    Sum,
    /// a reduction over leading or trailing axes (an epilogue)
    Reduce(Fold, Axis),
}

/// How a group's partial reductions split its elements.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Split {
    /// none yet
    Free,
    /// over leading axes, to this many outputs
    Leading(usize),
    /// over trailing axes, of rows of this many elements
    Trailing(usize),
    /// over leading axes, to this many outputs, tasks owning rows
    /// (`Axis::Blocked`)
    Blocked(usize),
}

/// A group under construction.
struct Group {
    /// node index of the first member (where the fused node runs)
    first: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// member node indices, in program order
    nodes: Vec<usize>,
    /// number of members that are ops (not epilogues, fills, broadcasts)
    ops: usize,
    /// what its partial reductions fix
    split: Split,
}

/// The member kind of node `n`, if it can be one in a group of `dtype`
/// and `shape` (or in a new group: any float dtype and its own shape);
/// partial reductions only where `partial` (not in graphs for a GPU,
/// whose fused kernels have none).
fn member_kind(g: &Graph, n: &Node, partial: bool) -> Option<Member> {
    let out = *n.outputs.first()?;
    if n.outputs.len() != 1 {
        return None;
    }
    let info = &g.values[out as usize];
    // (half groups on the host only: the GPU's fused kernels are f32 and f64 ones)
    let half = info.dtype.is_half();
    if !(matches!(info.dtype, DType::F32 | DType::F64) || half && partial) {
        return None;
    }
    let same_dtype = n.inputs.iter().all(|&v| g.values[v as usize].dtype == info.dtype);
    match &n.op {
        Op::Unary(u) if kernel::fusible_unary(u) && same_dtype && n.inputs.len() == 1 => match half {
            true => half::unary(u, info.dtype).map(Member::Unary),
            false => Some(Member::Unary(u.clone())),
        },
        Op::Binary(b)
            if kernel::fusible_binary(b) && same_dtype && n.inputs.len() == 2 && (!half || half::binary(b)) =>
        {
            Some(Member::Binary(b.clone()))
        }
        // `x + bias` along the last axis: an add of a row, as eager adds it
        Op::Nn(NnOp::BiasAdd) if same_dtype && n.inputs.len() == 2 => {
            Some(Member::Binary(crate::ops::desc::Binary::Add))
        }
        Op::Shape(ShapeOp::FullLike(v)) => Some(Member::Fill(v.0)),
        Op::Shape(ShapeOp::BroadcastTo(_))
            if same_dtype && n.inputs.len() == 1 && numel(&g.values[n.inputs[0] as usize].shape) == 1 =>
        {
            Some(Member::Broadcast)
        }
        // (half groups have no sums or partial reductions: see `kernel::half`)
        Op::Reduce(r)
            if r.kind == ReduceKind::Sum && !half && same_dtype && n.inputs.len() == 1 && numel(&info.shape) == 1 =>
        {
            Some(Member::Sum)
        }
        Op::Reduce(r) if partial && !half && same_dtype && n.inputs.len() == 1 => {
            let fold = match r.kind {
                ReduceKind::Sum => Fold::Sum,
                ReduceKind::Max => Fold::Max,
                ReduceKind::Min => Fold::Min,
                _ => return None,
            };
            partial_axis(&g.values[n.inputs[0] as usize].shape, &r.axes).map(|a| Member::Reduce(fold, a))
        }
        _ => None,
    }
}

/// The axes of a reduction of `shape` over `axes`, if it is a partial
/// one the kernel makes: over the leading or the trailing axes (at least
/// one), to more than one output, of a non-empty tensor.
fn partial_axis(shape: &[usize], axes: &[isize]) -> Option<Axis> {
    let rank = shape.len() as isize;
    let mut ax: SmallVec<[usize; 4]> = SmallVec::new();
    for &a in axes {
        let a = if a < 0 { a + rank } else { a };
        if !(0..rank).contains(&a) || ax.contains(&(a as usize)) {
            return None;
        }
        ax.push(a as usize);
    }
    ax.sort_unstable();
    let (len, r) = (numel(shape), shape.len());
    let reduced: usize = ax.iter().map(|&a| shape[a]).product();
    if ax.is_empty() || len == 0 || len / reduced <= 1 {
        return None;
    }
    if ax.iter().enumerate().all(|(i, &a)| a == i) {
        Some(Axis::Leading(len / reduced))
    } else if ax.iter().enumerate().all(|(i, &a)| a == r - ax.len() + i) {
        Some(Axis::Trailing(reduced))
    } else {
        None
    }
}

/// How an operand of shape `s` is read in a group of shape `group` (not
/// empty) when it broadcasts as `ones, equal dims, ones`: element `j`
/// reads `(j / q) % p`; `None` for any other shape.
fn broadcast_index(s: &[usize], group: &[usize]) -> Option<(usize, usize)> {
    if s.len() > group.len() || numel(group) == 0 {
        return None;
    }
    let pad = group.len() - s.len();
    // 0: leading broadcast dims, 1: equal dims, 2: trailing broadcast dims
    let (mut phase, mut q, mut p) = (0, 1, 1);
    for (d, &gd) in group.iter().enumerate() {
        let sd = if d < pad { 1 } else { s[d - pad] };
        if gd == 1 {
            if sd != 1 {
                return None;
            }
        } else if sd == gd {
            if phase == 2 {
                return None;
            }
            phase = 1;
            p *= gd;
        } else if sd == 1 {
            if phase == 1 {
                phase = 2;
            }
            if phase == 2 {
                q *= gd;
            }
        } else {
            return None;
        }
    }
    Some((q, p))
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// The `fuse` pass: groups the graph's elementwise nodes and replaces each
/// group by a [`Fused`] node; returns how many nodes were fused. The sums
/// the kernels compute add in another order (`PassCx::reassociated`).
pub(crate) fn run(g: &mut Graph, cx: &mut PassCx) -> usize {
    let (fused, sums) = fuse(g, !cx.gpu);
    cx.reassociated += sums;
    fused
}

/// Groups the graph's elementwise nodes and replaces each group by a
/// [`Fused`] node. Returns how many nodes were fused, and how many sums the
/// kernels compute.
fn fuse(g: &mut Graph, partial: bool) -> (usize, usize) {
    // constants first (they read nothing), so that any group may use them
    let (consts, rest): (Vec<Node>, Vec<Node>) = std::mem::take(&mut g.nodes)
        .into_iter()
        .partition(|n| matches!(n.op, Op::Const(_)));
    g.nodes = consts;
    g.nodes.extend(rest);
    let n_nodes = g.nodes.len();
    // per value: the node that makes it, and where it is available
    let mut producer: Vec<Option<usize>> = vec![None; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for &o in &n.outputs {
            producer[o as usize] = Some(i);
        }
    }
    // available before node `avail[v]` runs: -1 for graph inputs
    let mut avail: Vec<i64> = vec![-1; g.values.len()];
    let mut group_of: Vec<Option<usize>> = vec![None; n_nodes];
    let mut groups: Vec<Group> = Vec::new();
    let mut kinds: Vec<Option<Member>> = Vec::with_capacity(n_nodes);
    for (i, n) in g.nodes.iter().enumerate() {
        let kind = member_kind(g, n, partial);
        let mut joined = None;
        if let Some(kind) = &kind {
            let out = n.outputs[0];
            let info = &g.values[out as usize];
            // an external operand: the group's dtype, and its shape or one element
            let external_ok = |grp: &Group, v: ValueId| {
                let vi = &g.values[v as usize];
                vi.dtype == grp.dtype
                    && (vi.shape[..] == grp.shape[..]
                        || numel(&vi.shape) == 1
                        || broadcast_index(&vi.shape, &grp.shape).is_some())
                    && avail[v as usize] < grp.first as i64
            };
            // (a reduction is complete only after the kernel: never an operand in it)
            let in_group = |grp: usize, v: ValueId| {
                producer[v as usize].is_some_and(|p| {
                    group_of[p] == Some(grp) && !matches!(kinds[p], Some(Member::Sum | Member::Reduce(..)))
                })
            };
            // (a partial reduction reads an op's output: a fresh,
            // contiguous tensor in eager runs, which fixes their order)
            let op_output = |v: ValueId| {
                producer[v as usize].is_some_and(|p| matches!(kinds[p], Some(Member::Unary(_) | Member::Binary(_))))
            };
            // candidate groups: those that make one of the inputs
            let mut candidates: SmallVec<[usize; 2]> = SmallVec::new();
            for &v in &n.inputs {
                if let Some(gi) = producer[v as usize].and_then(|p| group_of[p])
                    && !candidates.contains(&gi)
                {
                    candidates.push(gi);
                }
            }
            // then the latest groups of the same shape (siblings: a node that
            // reads only values made before one of them can run in it)
            if !matches!(kind, Member::Sum | Member::Reduce(..)) {
                for (gi, grp) in groups.iter().enumerate().rev().take(8) {
                    if grp.dtype == info.dtype && grp.shape[..] == info.shape[..] && !candidates.contains(&gi) {
                        candidates.push(gi);
                    }
                }
            }
            for gi in candidates {
                let grp = &groups[gi];
                let fits = match kind {
                    // a sum's input is the group's; its output is a scalar
                    Member::Sum => info.dtype == grp.dtype && in_group(gi, n.inputs[0]),
                    Member::Reduce(_, axis) => {
                        info.dtype == grp.dtype
                            && in_group(gi, n.inputs[0])
                            && op_output(n.inputs[0])
                            && split_after(grp, *axis).is_some()
                    }
                    _ => {
                        info.dtype == grp.dtype
                            && info.shape[..] == grp.shape[..]
                            && operands(kind, n)
                                .iter()
                                .all(|&v| in_group(gi, v) || external_ok(grp, v))
                    }
                };
                if fits {
                    joined = Some(gi);
                    break;
                }
            }
            if joined.is_none() && !matches!(kind, Member::Sum | Member::Reduce(..)) {
                let grp = Group {
                    first: i,
                    dtype: info.dtype,
                    shape: info.shape.to_vec(),
                    nodes: Vec::new(),
                    ops: 0,
                    split: Split::Free,
                };
                if operands(kind, n).iter().all(|&v| external_ok(&grp, v)) {
                    groups.push(grp);
                    joined = Some(groups.len() - 1);
                }
            }
            if let Some(gi) = joined {
                let grp = &mut groups[gi];
                grp.nodes.push(i);
                match kind {
                    Member::Unary(_) | Member::Binary(_) => grp.ops += 1,
                    Member::Reduce(_, axis) => grp.split = split_after(grp, *axis).expect("checked on joining"),
                    _ => {}
                }
                group_of[i] = Some(gi);
            }
        }
        let at = match joined {
            Some(gi) => groups[gi].first as i64,
            None => i as i64,
        };
        for &o in &n.outputs {
            avail[o as usize] = at;
        }
        kinds.push(kind);
    }
    // every group becomes a node (a group left as it was would run its
    // members where they were, later than the values it made available),
    // except a group of no arithmetic (fills and broadcasts of one value
    // only): its members run unfused, in order, where it would have, so
    // that a broadcast stays a view as in eager runs (a kernel would
    // materialise it: 8 GiB for a `[1, 2^31]` broadcast that a product
    // with an empty operand never reads; found by the traced fuzz)
    let mut fused_at: FxHashMap<usize, Vec<Node>> = FxHashMap::default();
    let mut removed = vec![false; n_nodes];
    let mut fused_away = 0;
    let mut sums = 0;
    let readers = readers_outside(g, &group_of);
    for grp in &groups {
        if grp.ops == 0 {
            let members = grp.nodes.iter().map(|&i| g.nodes[i].clone()).collect();
            for &i in &grp.nodes {
                removed[i] = true;
            }
            fused_at.insert(grp.first, members);
            continue;
        }
        let node = build(g, grp, &kinds, &producer, &readers);
        sums += grp
            .nodes
            .iter()
            .filter(|&&i| match kinds[i] {
                Some(Member::Sum) => true,
                Some(Member::Reduce(Fold::Sum, _)) => matches!(grp.split, Split::Blocked(_)),
                _ => false,
            })
            .count();
        for &i in &grp.nodes {
            removed[i] = true;
        }
        fused_away += grp.nodes.len();
        fused_at.insert(grp.first, vec![node]);
    }
    if fused_at.is_empty() {
        return (0, 0);
    }
    let old = std::mem::take(&mut g.nodes);
    for (i, n) in old.into_iter().enumerate() {
        if let Some(f) = fused_at.remove(&i) {
            g.nodes.extend(f);
        }
        if !removed[i] {
            g.nodes.push(n);
        }
    }
    (fused_away, sums)
}

/// The most outputs of a reduction over leading axes whose large group
/// splits by rows (blocked), each task folding into partial results of
/// its own (`f64`, a band of rows at a time in the element type). With
/// more, tasks own columns instead (each folds its columns of every row,
/// in order). Split by columns, a task reads a short piece of every row,
/// which is slower to stream than whole rows and had made such kernels
/// slower than the eager op and reduction they replace.
const BLOCKED_MAX: usize = 4096;

/// The split of `grp` once a partial reduction over `axis` joins it, if
/// it can. A group too small for several threads runs as one task in
/// element order, which suits every reduction; a larger one splits its
/// work by the reductions' outputs, so they share one kind of axes and
/// one size; over leading axes with too few outputs to split by columns,
/// it splits by rows (blocked: sums then add in another order).
fn split_after(grp: &Group, axis: Axis) -> Option<Split> {
    let new = match axis {
        Axis::Leading(p) | Axis::Blocked(p) => Split::Leading(p),
        Axis::Trailing(q) => Split::Trailing(q),
    };
    if numel(&grp.shape) < crate::kernels::cpu::PAR_MIN {
        return Some(if grp.split == Split::Free { new } else { grp.split });
    }
    let new = match new {
        Split::Leading(p) if p <= BLOCKED_MAX => Split::Blocked(p),
        other => other,
    };
    (grp.split == Split::Free || grp.split == new).then_some(new)
}

/// Per value: whether a node outside its producer's group reads it, or the
/// graph returns it.
fn readers_outside(g: &Graph, group_of: &[Option<usize>]) -> Vec<bool> {
    let mut producer_group: Vec<Option<usize>> = vec![None; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for &o in &n.outputs {
            producer_group[o as usize] = group_of[i];
        }
    }
    let mut out = vec![false; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for &v in &n.inputs {
            if producer_group[v as usize].is_some() && producer_group[v as usize] != group_of[i] {
                out[v as usize] = true;
            }
        }
    }
    for &o in &g.outputs {
        out[o as usize] = true;
    }
    out
}

/// The operands a member reads as data (a fill reads none: its input only
/// gives the shape, which the plan fixes).
fn operands<'a>(kind: &Member, n: &'a Node) -> &'a [ValueId] {
    match kind {
        Member::Fill(_) => &[],
        _ => &n.inputs,
    }
}
