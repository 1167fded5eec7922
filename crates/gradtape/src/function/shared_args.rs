//! One tensor passed as two arguments of a traced function.
//!
//! Eagerly, a closure called with `(x, x)` sees one tensor twice: a tape
//! or a forward accumulator inside it that watches either argument
//! watches both (they have one id), so the gradient of `Σ a·b` with
//! respect to `a` is the total derivative `2x`, as in TensorFlow's eager
//! mode. A trace that gave each argument a placeholder of its own would
//! make them independent and answer `x` (what TensorFlow 2.21's
//! `tf.function` answers: its two modes disagree here). So would anything
//! else that tells tensors apart by id inside the closure (a key/value
//! cache checking whose encoder output it holds).
//!
//! A traced [`Function`](super::Function) gives eager's answers: the
//! arguments that repeat an earlier one ([`repeats`]) are part of the cache
//! key (a call with `(x, x)` and one with `(x, y)` never share a graph),
//! and the trace hands the closure the earlier argument's placeholder
//! wherever the tensor comes again ([`share`]); the later placeholders stay
//! inputs of the graph, unread. The symbolic gradient's trace of the same
//! closure shares them the same way, so the call's gradient gives the
//! first of the repeated arguments the whole derivative and the later ones
//! none; a tape outside the call adds them up, as for any op that reads
//! one tensor twice.

use super::structure::Leaf;
use crate::tensor::Tensor;

/// Above this many tensor arguments the repeats are found by sorting the
/// ids rather than by comparing every pair.
const PAIRWISE: usize = 32;

/// The tensor arguments (numbered among the tensor leaves) that are the
/// same tensor as an earlier one: `(later, first)` pairs in order of
/// `later`. Empty (and unallocated) when no tensor comes twice.
pub(crate) fn repeats(leaves: &[Leaf<'_>]) -> Vec<(u32, u32)> {
    let tensors = || {
        leaves.iter().filter_map(|l| match l {
            Leaf::Tensor(t) => Some(*t),
            Leaf::Variable(_) | Leaf::Tag(_) => None,
        })
    };
    let n = tensors().count();
    let mut out = Vec::new();
    if n <= PAIRWISE {
        let mut ids = [crate::tensor::TensorId(0); PAIRWISE];
        for (j, t) in tensors().enumerate() {
            ids[j] = t.id();
            if let Some(i) = ids[..j].iter().position(|&id| id == ids[j]) {
                out.push((j as u32, i as u32));
            }
        }
        return out;
    }
    let mut ids: Vec<(crate::tensor::TensorId, u32)> = tensors().enumerate().map(|(j, t)| (t.id(), j as u32)).collect();
    ids.sort_unstable();
    // sorted by id, then index: each group's first entry is its first argument
    let mut first = 0;
    for w in 1..ids.len() {
        if ids[w].0 == ids[first].0 {
            out.push((ids[w].1, ids[first].1));
        } else {
            first = w;
        }
    }
    out.sort_unstable();
    out
}

/// `xs` (one per tensor argument) with each repeated argument replaced by
/// the first one's tensor.
pub(crate) fn share(xs: &[Tensor], repeats: &[(u32, u32)]) -> Vec<Tensor> {
    let mut out = xs.to_vec();
    for &(j, i) in repeats {
        out[j as usize] = xs[i as usize].clone();
    }
    out
}
