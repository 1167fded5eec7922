//! Sums a loop carries taken out of it: a loop variable `acc` that only
//! accumulates, `acc ← acc + f(a_t, b_t)` with `f` a product over the
//! rows of per-iteration operands, is summed after the loop in one
//! product over the stacked rows (the `sums_after_loops` compiler pass,
//! `compile/sums_after_loops.rs`, makes such loops).
//!
//! A loop's gradient sums the gradients of the weights its body reads:
//! the backward loop of an RNN carries `dW`, `dU` and `db` and adds one
//! small product per iteration to each, `dW ← dW + x_tᵀ dz_t` (a
//! `[in, batch] x [batch, units]` product, its shared dimension the
//! batch), `dU ← dU + h_{t-1}ᵀ dz_t`, `db ← db + colsum(dz_t)`: per
//! iteration three products too short to run at the GEMM kernel's rate,
//! and three additions that read and write the whole accumulators. As
//! TensorFlow's and XLA's while-loop optimisations move such sums out,
//! the same sums are
//!
//! ```text
//! Σ_t a_tᵀ b_t         = [a_1; …; a_n]ᵀ [b_1; …; b_n]      (a_t [K, M], b_t [K, N])
//! Σ_t Σ_{lead} b_t     = Σ_{n, lead} [b_1; …; b_n]           (a sum over leading axes)
//! ```
//!
//! so the loop keeps the operands instead, each iteration's copied at the
//! end of one buffer as it is made ([`History`], as the forward loop keeps
//! its histories: `dz_t` once, however many sums read it), and after the
//! loop one product over the `n·K` stacked rows (a long shared dimension,
//! the kernel's best case, split over the threads) gives each sum, which
//! is added to the variable's initial value. The variable itself goes
//! through the iterations unchanged.
//!
//! What is taken out, per loop variable `k` ([`rewrite`]):
//!
//! - the body's output `k` is a tree of `Add`s of equal shapes and dtypes
//!   (no broadcast; each inner sum read by the tree alone) with the
//!   variable's entry value as one leaf, which nothing else in the body
//!   reads and the condition does not read: the loop never looks at the
//!   running sum, so when it is formed does not matter;
//! - each other leaf that is a product `aᵀ b` of 2-D operands
//!   (`MatMul[transpose_a]`) or a sum over the leading axes of one
//!   (`Sum`), optionally reshaped, is summed after the loop; the others
//!   (any other function of the iteration) stay in the loop, added to
//!   the variable as before.
//!
//! The stacked operands hold exactly the iterations that ran (a loop that
//! `max_iterations` stops, or whose condition ends it early, keeps as many
//! rows as it ran; a loop that does not run keeps none, and its sums are
//! zeros: the variable keeps its initial value). The sums are added in
//! another order than one iteration after the other (equal to rounding),
//! which the compiled graph reports (`Executable::reassociates`).
//!
//! Only the compiled copy of a graph gets such loops: it runs with tapes
//! hidden and is never differentiated (a gradient differentiates the
//! traced graph, whose loop carries its sums as written), so a gradient
//! of any order is that of the loop as written.
//!
//! (So a loop keeps its sums where the graph it is a node of is not
//! compiled: a step that differentiates a loop twice keeps the first
//! gradient's history, whose shape varies, outside loops, and runs its
//! top-level graph as traced; loops nested in a compiled body are
//! rewritten when that body compiles.)

use std::sync::Arc;

use super::history::History;
use super::{Loop, Sub, WhileOp};
use crate::error::{Error, Result};
use crate::function::graph::{Graph, Node, ValueId};
use crate::ops::desc::{Binary, Op, ReduceKind, ShapeOp};
use crate::tensor::{DType, Shape, Tensor};

/// The sums a loop computes after its iterations from the operands its
/// body stacks (its outputs past the loop variables).
pub(crate) struct SumsAfter {
    /// per loop variable summed after the loop: its index and the terms
    sums: Vec<(usize, Vec<Term>)>,
    /// per stacked operand (body output `n_vars + i`): a row's dtype and
    /// shape
    rows: Vec<(DType, Shape)>,
}

/// A term of a sum taken out of the loop (indices into the stacked
/// operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Term {
    /// `Σ_t a_tᵀ b_t`, `a_t` of shape `[K, M]`, `b_t` `[K, N]`
    Product { a: usize, b: usize },
    /// `Σ_t` of `b_t` summed over its first `lead` axes
    Lead { b: usize, lead: usize },
}

impl SumsAfter {
    /// The number of loop variables summed after the loop.
    pub(super) fn n_sums(&self) -> usize {
        self.sums.len()
    }

    /// The number of operands the body stacks.
    pub(super) fn n_stacked(&self) -> usize {
        self.rows.len()
    }

    /// Empty buffers for the stacked operands, with room for `hint` rows.
    pub(super) fn stacks(&self, hint: usize) -> Vec<History> {
        self.rows.iter().map(|_| History::new(false, hint)).collect()
    }

    /// Adds the sums over the stacked rows `stacks` to the loop
    /// variables `vars` they belong to (which left the loop as they
    /// entered it).
    pub(super) fn finish(&self, stacks: Vec<History>, vars: &mut [Tensor]) -> Result<()> {
        let full: Vec<Tensor> = stacks
            .into_iter()
            .zip(&self.rows)
            .enumerate()
            .map(|(i, (h, (dtype, shape)))| h.finish(i, *dtype, shape))
            .collect::<Result<_>>()?;
        for (k, terms) in &self.sums {
            let mut total: Option<Tensor> = None;
            for t in terms {
                let s = match *t {
                    Term::Product { a, b } => {
                        let (a, b) = (&full[a], &full[b]);
                        let rows = a.shape()[0] * a.shape()[1];
                        let a = a.reshape(&[rows, a.shape()[2]])?;
                        let b = b.reshape(&[rows, b.shape()[2]])?;
                        a.matmul_with(&b, true, false)?
                    }
                    Term::Lead { b, lead } => {
                        let axes: Vec<isize> = (0..=lead as isize).collect();
                        full[b].sum(&axes, false)?
                    }
                };
                let s = s.reshape(vars[*k].shape())?;
                total = Some(match total {
                    Some(t) => t.add(&s)?,
                    None => s,
                });
            }
            if let Some(t) = total {
                vars[*k] = vars[*k].add(&t)?;
            }
        }
        Ok(())
    }
}

/// The number of times each value of `g` is read by its nodes and
/// outputs, and the node that makes it (`usize::MAX` for an input).
fn reads_and_makers(g: &Graph) -> (Vec<usize>, Vec<usize>) {
    let mut reads = vec![0usize; g.values.len()];
    let mut made_by = vec![usize::MAX; g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        n.inputs.iter().for_each(|&v| reads[v as usize] += 1);
        n.outputs.iter().for_each(|&v| made_by[v as usize] = i);
    }
    g.outputs.iter().for_each(|&v| reads[v as usize] += 1);
    (reads, made_by)
}

/// A term found in a body: its operands as values of the body.
#[derive(Clone, Copy)]
enum Found {
    Product(ValueId, ValueId),
    Lead(ValueId, usize),
}

/// The term `v` is, if it is one a loop sums after its iterations: a
/// product `aᵀ b` of 2-D operands or a sum of one operand over its
/// leading axes, reshaped or not.
fn term(g: &Graph, made_by: &[usize], mut v: ValueId) -> Option<Found> {
    let node = |v: ValueId| g.nodes.get(made_by[v as usize]);
    while let Some(n) = node(v).filter(|n| matches!(n.op, Op::Shape(ShapeOp::Reshape(_)))) {
        v = n.inputs[0];
    }
    let n = node(v)?;
    let rank = |v: ValueId| g.values[v as usize].shape.len();
    match &n.op {
        Op::MatMul {
            transpose_a: true,
            transpose_b: false,
        } if n.inputs.len() == 2 && rank(n.inputs[0]) == 2 && rank(n.inputs[1]) == 2 => {
            Some(Found::Product(n.inputs[0], n.inputs[1]))
        }
        Op::Reduce(r) if r.kind == ReduceKind::Sum && n.inputs.len() == 1 && !r.axes.is_empty() => {
            let rank = rank(n.inputs[0]) as isize;
            let mut axes: Vec<isize> = r.axes.iter().map(|&a| if a < 0 { a + rank } else { a }).collect();
            axes.sort_unstable();
            let lead = axes.len();
            (axes.iter().enumerate().all(|(i, &a)| a == i as isize)).then_some(Found::Lead(n.inputs[0], lead))
        }
        _ => None,
    }
}

/// The leaves of the tree of `Add`s of `root`'s dtype and shape whose
/// inner sums nothing else reads.
fn leaves(g: &Graph, reads: &[usize], made_by: &[usize], root: ValueId) -> Vec<ValueId> {
    let info = &g.values[root as usize];
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(v) = todo.pop() {
        let add = g.nodes.get(made_by[v as usize]).filter(|n| {
            matches!(n.op, Op::Binary(Binary::Add))
                && n.inputs.len() == 2
                && n.inputs.iter().all(|&x| {
                    let i = &g.values[x as usize];
                    i.dtype == info.dtype && i.shape == info.shape
                })
        });
        match add {
            Some(n) if v == root || reads[v as usize] == 1 => todo.extend(n.inputs.iter().rev()),
            _ => out.push(v),
        }
    }
    out
}

/// A loop variable that only accumulates: its index, its entry value,
/// and the other leaves of its tree of sums, each with the term it is
/// where it is one.
struct Carried {
    k: usize,
    acc: ValueId,
    leaves: Vec<(ValueId, Option<Found>)>,
}

/// The loop variables of `lp` that only accumulate, with at least one
/// term (see the module docs).
fn carried(lp: &Loop) -> Vec<Carried> {
    let (body, cond, n) = (&*lp.body.graph, &*lp.cond.graph, lp.n_vars);
    if body.outputs.len() != n || body.inputs.len() < n || cond.inputs.len() < n {
        return Vec::new();
    }
    let (reads, made_by) = reads_and_makers(body);
    let (cond_reads, _) = reads_and_makers(cond);
    let mut out = Vec::new();
    for k in 0..n {
        let (acc, root) = (body.inputs[k], body.outputs[k]);
        let info = &body.values[acc as usize];
        // (read once, by its sum; not by the condition)
        if !info.dtype.is_float() || reads[acc as usize] != 1 || cond_reads[cond.inputs[k] as usize] != 0 {
            continue;
        }
        if root == acc || reads[root as usize] != 1 || body.values[root as usize].shape != info.shape {
            continue;
        }
        let ls = leaves(body, &reads, &made_by, root);
        if ls.len() < 2 || ls.iter().filter(|&&l| l == acc).count() != 1 {
            continue;
        }
        let leaves: Vec<(ValueId, Option<Found>)> = ls
            .into_iter()
            .filter(|&l| l != acc)
            .map(|l| (l, term(body, &made_by, l)))
            .collect();
        if leaves.iter().any(|(_, t)| t.is_some()) {
            out.push(Carried { k, acc, leaves });
        }
    }
    out
}

/// `lp`'s body with the sums it carries taken out where it carries any
/// (see the module docs): the new body (its loop variables, then the
/// stacked operands), what to sum after the loop, and the number of
/// terms taken out.
///
/// A term is taken out where the rows it adds to the stacks (its
/// operands that no term taken out before stacks) have no more elements
/// than the variable whose addition it saves, as `join_products` joins a
/// sum: a neural ODE's `dW1 += yᵀ dz` (`y` `[64, 4]`, `dz` `[64, 64]`, `dW1`
/// `[4, 64]`) would copy 17 times the elements it saves adding. The
/// variables are taken largest first, so that the operand two terms share
/// (an RNN's `dz_t`, read by `dW`, `dU` and `db`) counts once.
fn rewrite(lp: &Loop) -> Option<(Graph, SumsAfter, usize)> {
    let mut cands = carried(lp);
    if cands.is_empty() {
        return None;
    }
    let body = &*lp.body.graph;
    let numel = |v: ValueId| -> usize { body.values[v as usize].shape.iter().product() };
    cands.sort_by_key(|c| std::cmp::Reverse(numel(c.acc)));
    let mut g = body.clone();
    let mut stacked: Vec<ValueId> = Vec::new();
    let mut sums = Vec::new();
    let mut taken = 0;
    for c in cands {
        let info = body.values[c.acc as usize].clone();
        let budget = numel(c.acc);
        let mut terms = Vec::new();
        let mut kept = Vec::new();
        for (l, found) in c.leaves {
            let operands = match found {
                Some(Found::Product(a, b)) => vec![a, b],
                Some(Found::Lead(b, _)) => vec![b],
                None => Vec::new(),
            };
            let mut new: Vec<ValueId> = operands.iter().copied().filter(|v| !stacked.contains(v)).collect();
            new.dedup();
            if operands.is_empty() || new.iter().map(|&v| numel(v)).sum::<usize>() > budget {
                kept.push(l);
                continue;
            }
            stacked.extend(new);
            let at = |v: ValueId| stacked.iter().position(|&s| s == v).unwrap_or(usize::MAX);
            terms.push(match found {
                Some(Found::Product(a, b)) => Term::Product { a: at(a), b: at(b) },
                Some(Found::Lead(b, lead)) => Term::Lead { b: at(b), lead },
                None => continue,
            });
        }
        if terms.is_empty() {
            continue;
        }
        taken += terms.len();
        sums.push((c.k, terms));
        // (the variable plus the terms that stay in the loop)
        let mut v = c.acc;
        for l in kept {
            let sum = g.add_value(info.dtype, &info.shape);
            g.nodes.push(Node {
                op: Op::Binary(Binary::Add),
                inputs: smallvec::smallvec![v, l],
                outputs: smallvec::smallvec![sum],
                site: None,
            });
            v = sum;
        }
        g.outputs[c.k] = v;
    }
    if sums.is_empty() {
        return None;
    }
    sums.sort_by_key(|(k, _)| *k);
    let rows = stacked
        .iter()
        .map(|&v| (g.values[v as usize].dtype, g.values[v as usize].shape.clone()))
        .collect();
    g.outputs.extend(&stacked);
    Some((g, SumsAfter { sums, rows }, taken))
}

impl WhileOp {
    /// This loop with the sums it carries taken out (see the module
    /// docs), and the number of terms taken out; `None` where it carries
    /// none, keeps its history (its body's gradient reads the body as
    /// written), lets its variables change shape, or has sums taken out
    /// already.
    pub(crate) fn with_sums_after(&self) -> Option<(WhileOp, usize)> {
        let lp = &self.loop_;
        if self.keep_history || lp.invariants.is_some() || lp.after.is_some() || !lp.shapes_kept() {
            return None;
        }
        let (body, after, taken) = rewrite(lp)?;
        let op = WhileOp {
            loop_: Arc::new(Loop {
                cond: Sub::new((*lp.cond.graph).clone()),
                body: Sub::new(body),
                res: std::sync::OnceLock::from(None),
                invariants: None,
                vars: lp.vars.clone(),
                n_vars: lp.n_vars,
                max_iterations: lp.max_iterations,
                effects: lp.effects,
                last_count: Default::default(),
                fused: Default::default(),
                after: Some(after),
            }),
            keep_history: false,
        };
        Some((op, taken))
    }

    /// Fails for a loop whose sums were taken out: it only runs (in a
    /// compiled graph, with tapes hidden), and is never differentiated.
    pub(super) fn not_rewritten(&self) -> Result<()> {
        match self.after {
            Some(_) => Err(Error::invalid(
                "while_loop",
                "a loop whose sums the compiler took out of it is not differentiated (its traced copy is)",
            )),
            None => Ok(()),
        }
    }
}
