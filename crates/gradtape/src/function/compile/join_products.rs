//! Sums of matrix products as one product over a joined shared dimension
//! (the `join_products` pass), and products by one right operand stacked
//! into one (`stack_products`).
//!
//! ```text
//! join_products, before:                 after:
//!   %6 = MatMul(%0, %1)                    %11 = Concat[axis=1](%0, %2, %4)
//!   %7 = MatMul(%2, %3)                    %12 = Concat[axis=0](%1, %3, %5)
//!   %8 = Add(%6, %7)                       %10 = MatMul(%11, %12)
//!   %9 = MatMul(%4, %5)
//!   %10 = Add(%8, %9)
//! stack_products, before:                after:
//!   %2 = MatMul(%0, %w)                    %4 = Concat[axis=0](%0, %1)
//!   %3 = MatMul(%1, %w)                    %5 = MatMul(%4, %w)
//!                                          %2 = Slice(%5), %3 = Slice(%5)
//! ```
//!
//! The gradient of a weight used at every step of a loop (an RNN's `W` and
//! `U`) is a sum of one small product per step, `Σ_t a_tᵀ b_t`, which a
//! traced graph computes as a chain of `MatMul` and `Add` nodes: per step a
//! product with a short shared dimension (the batch) on one thread, and an addition of the whole
//! accumulator. The same sum is one product of the operands joined along
//! the shared dimension,
//!
//! ```text
//! Σ_t a_tᵀ b_t = [a_1; a_2; …; a_n]ᵀ [b_1; b_2; …; b_n]
//! ```
//!
//! which the GEMM kernel runs with a long shared dimension (its best case)
//! and splits over the compute threads, with no accumulator written per
//! step. The price is one copy of the operands (`Concat`), and the operands
//! living until the sum, which is why a sum is joined only where the copies
//! move fewer elements than the additions they replace.
//!
//! This pass finds *sum trees*: `Add` nodes of equal shapes (no
//! broadcasting) whose intermediate results nothing else reads. Their
//! leaves that are 2-D products with the same transpose flags, read by the
//! sum alone, become one `MatMul` of two `Concat`s (along the shared
//! dimension: rows of an operand used transposed, columns of one used as
//! is), placed where the tree's root was; other leaves are added to it.
//! The products are taken in program order (time steps in order).
//!
//! Values: the sum is added in another order (the kernel's order along the
//! joined dimension instead of one product after the other), so a graph
//! with a joined sum [reassociates](super::Executable::reassociates): equal
//! to rounding, not bit for bit.

use rustc_hash::FxHashMap;
use smallvec::smallvec;

use super::pipeline::PassCx;
use crate::function::graph::{Graph, Node, ValueId};
use crate::kernels::cpu::matmul::on_sgemm;
use crate::ops::desc::{Binary, Op, ShapeOp};
use crate::tensor::DType;

/// Fewest products joined into one. (Two would also join an RNN step's
/// `x W + h U` into `[x, h] [W; U]`, copying both weights at every step.)
const MIN_TERMS: usize = 3;

/// A product leaf of a sum: its operands.
struct Term {
    a: ValueId,
    b: ValueId,
    /// its length of the shared dimension
    k: usize,
}

/// The `join_products` pass: [`join_products`], then dead-code elimination
/// where it joined a sum. A joined sum adds in another order
/// (`PassCx::reassociated`).
pub(crate) fn run_join(g: &mut Graph, cx: &mut PassCx) -> usize {
    let joined = join_products(g);
    if joined > 0 {
        crate::function::passes::dce(g);
    }
    cx.reassociated += joined;
    joined
}

/// The `stack_products` pass: [`stack_products`].
pub(crate) fn run_stack(g: &mut Graph, _: &mut PassCx) -> usize {
    stack_products(g)
}

/// Joins the products of every sum tree that has enough of them; returns
/// how many sums were joined. Leaves dead nodes behind (the caller runs
/// dead-code elimination).
fn join_products(g: &mut Graph) -> usize {
    let n_vals = g.values.len();
    let mut uses = vec![0u32; n_vals];
    for node in &g.nodes {
        for &v in &node.inputs {
            uses[v as usize] += 1;
        }
    }
    // a returned value is read by the caller too: never absorbed
    for &o in &g.outputs {
        uses[o as usize] += 1;
    }
    let mut producer = vec![usize::MAX; n_vals];
    for (i, node) in g.nodes.iter().enumerate() {
        for &v in &node.outputs {
            producer[v as usize] = i;
        }
    }
    let is_sum = |i: usize| -> bool {
        let n = &g.nodes[i];
        if !matches!(n.op, Op::Binary(Binary::Add)) || n.inputs.len() != 2 || n.outputs.len() != 1 {
            return false;
        }
        let out = &g.values[n.outputs[0] as usize];
        matches!(out.dtype, DType::F32 | DType::F64) && n.inputs.iter().all(|&v| g.values[v as usize] == *out)
    };
    // a value that is the partial sum of the one sum node reading it
    let inner = |v: ValueId| -> bool {
        let p = producer[v as usize];
        uses[v as usize] == 1 && p != usize::MAX && is_sum(p)
    };
    let sums: Vec<usize> = (0..g.nodes.len()).filter(|&i| is_sum(i)).collect();
    let mut absorbed = vec![false; g.nodes.len()];
    for &i in &sums {
        for &v in &g.nodes[i].inputs {
            if inner(v) {
                absorbed[producer[v as usize]] = true;
            }
        }
    }
    // each root's leaves, in program order (inputs first, for a
    // deterministic join)
    let trees: Vec<(usize, Vec<ValueId>)> = sums
        .iter()
        .filter(|&&i| !absorbed[i])
        .map(|&root| {
            let mut leaves: Vec<ValueId> = Vec::new();
            let mut stack: Vec<ValueId> = g.nodes[root].inputs.to_vec();
            while let Some(v) = stack.pop() {
                if inner(v) {
                    stack.extend_from_slice(&g.nodes[producer[v as usize]].inputs);
                } else {
                    leaves.push(v);
                }
            }
            leaves.sort_by_key(|&v| producer[v as usize].wrapping_add(1));
            (root, leaves)
        })
        .collect();
    let mut replace: FxHashMap<usize, Vec<Node>> = FxHashMap::default();
    for (root, leaves) in trees {
        let out = g.nodes[root].outputs[0];
        if let Some(nodes) = joined(g, &uses, &producer, &leaves, out) {
            replace.insert(root, nodes);
        }
    }
    let n = replace.len();
    if n > 0 {
        let old = std::mem::take(&mut g.nodes);
        for (i, node) in old.into_iter().enumerate() {
            match replace.remove(&i) {
                Some(nodes) => g.nodes.extend(nodes),
                None => g.nodes.push(node),
            }
        }
    }
    n
}

/// The nodes computing the sum of `leaves` into `out` with its products
/// joined, or `None` when too few products share their flags or joining
/// would copy more than the additions move.
fn joined(g: &mut Graph, uses: &[u32], producer: &[usize], leaves: &[ValueId], out: ValueId) -> Option<Vec<Node>> {
    let (m, n) = match &g.values[out as usize].shape[..] {
        [m, n] => (*m, *n),
        _ => return None,
    };
    let dtype = g.values[out as usize].dtype;
    // products by transpose flags
    let mut groups: FxHashMap<(bool, bool), Vec<(usize, Term)>> = FxHashMap::default();
    for (pos, &v) in leaves.iter().enumerate() {
        let p = producer[v as usize];
        if uses[v as usize] != 1 || p == usize::MAX {
            continue;
        }
        let node = &g.nodes[p];
        let Op::MatMul {
            transpose_a,
            transpose_b,
        } = node.op
        else {
            continue;
        };
        let [a, b] = node.inputs[..] else { continue };
        let (sa, sb) = (&g.values[a as usize], &g.values[b as usize]);
        if sa.dtype != dtype || sb.dtype != dtype || sa.shape.len() != 2 || sb.shape.len() != 2 {
            continue;
        }
        let k = if transpose_a { sa.shape[0] } else { sa.shape[1] };
        groups
            .entry((transpose_a, transpose_b))
            .or_default()
            .push((pos, Term { a, b, k }));
    }
    // the largest group (the first flags in a tie, for determinism)
    let ((ta, tb), terms) = groups.into_iter().max_by_key(|((ta, tb), t)| (t.len(), !*ta, !*tb))?;
    let k_total: usize = terms.iter().map(|(_, t)| t.k).sum();
    // copies of the operands against one read and write of the sum per term
    if terms.len() < MIN_TERMS || k_total * (m + n) > 3 * terms.len() * m * n {
        return None;
    }
    let cat = |g: &mut Graph, vals: Vec<ValueId>, axis: usize, shape: [usize; 2]| -> (ValueId, Node) {
        let v = g.add_value(dtype, &shape);
        let node = Node {
            op: Op::Shape(ShapeOp::Concat(axis as isize)),
            inputs: vals.into_iter().collect(),
            outputs: smallvec![v],
            site: None,
        };
        (v, node)
    };
    let a_vals = terms.iter().map(|(_, t)| t.a).collect();
    let b_vals = terms.iter().map(|(_, t)| t.b).collect();
    let (ca, na) = match ta {
        true => cat(g, a_vals, 0, [k_total, m]),
        false => cat(g, a_vals, 1, [m, k_total]),
    };
    let (cb, nb) = match tb {
        true => cat(g, b_vals, 1, [n, k_total]),
        false => cat(g, b_vals, 0, [k_total, n]),
    };
    let rest: Vec<ValueId> = leaves
        .iter()
        .enumerate()
        .filter(|(pos, _)| !terms.iter().any(|(p, _)| p == pos))
        .map(|(_, &v)| v)
        .collect();
    let mut acc = match rest.is_empty() {
        true => out,
        false => g.add_value(dtype, &[m, n]),
    };
    let mut nodes = vec![
        na,
        nb,
        Node {
            op: Op::MatMul {
                transpose_a: ta,
                transpose_b: tb,
            },
            inputs: smallvec![ca, cb],
            outputs: smallvec![acc],
            site: None,
        },
    ];
    for (i, &v) in rest.iter().enumerate() {
        let to = match i + 1 == rest.len() {
            true => out,
            false => g.add_value(dtype, &[m, n]),
        };
        nodes.push(Node {
            op: Op::Binary(Binary::Add),
            inputs: smallvec![acc, v],
            outputs: smallvec![to],
            site: None,
        });
        acc = to;
    }
    Some(nodes)
}

/// The shared dimension from which the `f32` kernel may split a product
/// over it (its `2 * KC`): stacked products stay below it.
const SPLIT_K: usize = 512;

/// Products of many left operands by one right operand (an RNN's `x_t W`
/// at every step, whose `x_t` are all known before the loop) become one
/// product of the stacked left operands, made where the first of them was,
/// and each product a row slice of it (a view): one product split over
/// the threads instead of one small one per step. Only products that the
/// `f32` kernel runs, small and stacked (`on_sgemm`), with a shared
/// dimension it never splits: it computes each element in the same order
/// for any number of rows, so the values are the same, bit for bit.
/// Returns how many groups were stacked.
fn stack_products(g: &mut Graph) -> usize {
    let mut producer = vec![usize::MAX; g.values.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        for &v in &node.outputs {
            producer[v as usize] = i;
        }
    }
    // (right operand, its flag, left shape) -> the products, in order
    type Key = (ValueId, bool, [usize; 2]);
    let mut groups: FxHashMap<Key, Vec<usize>> = FxHashMap::default();
    let mut order: Vec<Key> = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let Op::MatMul {
            transpose_a: false,
            transpose_b,
        } = node.op
        else {
            continue;
        };
        let [a, b] = node.inputs[..] else { continue };
        let (va, vb) = (&g.values[a as usize], &g.values[b as usize]);
        if va.dtype != DType::F32 || vb.dtype != DType::F32 || va.shape.len() != 2 || vb.shape.len() != 2 || a == b {
            continue;
        }
        let key = (b, transpose_b, [va.shape[0], va.shape[1]]);
        let e = groups.entry(key).or_default();
        if e.is_empty() {
            order.push(key);
        }
        e.push(i);
    }
    let mut insert: Vec<(usize, [Node; 2])> = Vec::new();
    for key in order {
        let (b, tb, [r, k]) = key;
        let nodes = &groups[&key];
        let first = nodes[0];
        // left operands known before the first product
        let members: Vec<usize> = nodes
            .iter()
            .copied()
            .filter(|&i| {
                let p = producer[g.nodes[i].inputs[0] as usize];
                p == usize::MAX || p < first
            })
            .collect();
        let vb = &g.values[b as usize];
        let n = if tb { vb.shape[0] } else { vb.shape[1] };
        let total = r * members.len();
        if members.len() < MIN_TERMS || k >= SPLIT_K || !on_sgemm(r, n, k, true) || !on_sgemm(total, n, k, true) {
            continue;
        }
        let stacked = g.add_value(DType::F32, &[total, k]);
        let product = g.add_value(DType::F32, &[total, n]);
        let lefts = members.iter().map(|&i| g.nodes[i].inputs[0]).collect();
        for (j, &i) in members.iter().enumerate() {
            let node = &mut g.nodes[i];
            node.op = Op::Shape(ShapeOp::Slice(smallvec![j * r, 0], smallvec![r, n]));
            node.inputs = smallvec![product];
        }
        insert.push((
            first,
            [
                Node {
                    op: Op::Shape(ShapeOp::Concat(0)),
                    inputs: lefts,
                    outputs: smallvec![stacked],
                    site: None,
                },
                Node {
                    op: Op::MatMul {
                        transpose_a: false,
                        transpose_b: tb,
                    },
                    inputs: smallvec![stacked, b],
                    outputs: smallvec![product],
                    site: None,
                },
            ],
        ));
    }
    let count = insert.len();
    super::insert_before(
        g,
        insert.into_iter().flat_map(|(i, pair)| pair.map(|n| (i, n))).collect(),
    );
    count
}
