//! Operands read transposed by many small products, transposed once (the
//! `transpose_once` pass).
//!
//! ```text
//! before:                                after:
//!   %2 = MatMul[transpose_b](%0, %u)       %4 = Contiguous(Transpose(%u))
//!   %3 = MatMul[transpose_b](%1, %u)       %2 = MatMul(%0, %4)
//!                                          %3 = MatMul(%1, %4)
//! ```
//!
//! The backward pass of a loop multiplies by a weight transposed at every
//! step (an RNN's `dh = g Uᵀ`, `MatMul[transpose_b=true](g, U)`). The `f32`
//! GEMM kernel reads a row-major right operand of a product with few rows
//! in place, but a transposed one it must pack (a transposition) at every
//! call. This pass gives such a weight one row-major transposed copy
//! (`Contiguous(Transpose(U))`), made before its first reader, and the
//! products read that copy untransposed: one transposition per run instead
//! of one per step.
//!
//! Values: the product of the same numbers in the same order, bit for bit:
//! only products that the `f32` kernel runs (`on_sgemm`: AVX-512, and
//! shapes it takes) are rewritten, since the `gemm` crate, which runs the
//! others, may add in another order for another layout.

use smallvec::smallvec;

use super::pipeline::PassCx;
use crate::function::graph::{Graph, Node};
use crate::kernels::cpu::matmul::on_sgemm;
use crate::ops::desc::{Op, ShapeOp};
use crate::tensor::DType;

/// Fewest products reading one operand transposed that make it worth a copy.
const MIN_READERS: usize = 2;
/// Products with more rows than this pack their right operand anyway
/// (the kernel's `MC`).
const MAX_ROWS: usize = 96;

/// Gives the right operands of `f32` products with few rows (run by the
/// `f32` kernel), read transposed by several of them, a transposed copy;
/// returns how many operands got one.
pub(crate) fn run(g: &mut Graph, _: &mut PassCx) -> usize {
    // per right operand: the products that read it transposed
    let mut readers: rustc_hash::FxHashMap<u32, Vec<usize>> = Default::default();
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::MatMul {
            transpose_a,
            transpose_b: true,
        } = n.op
        else {
            continue;
        };
        let [a, b] = n.inputs[..] else { continue };
        let (va, vb) = (&g.values[a as usize], &g.values[b as usize]);
        if va.dtype != DType::F32 || vb.dtype != DType::F32 || va.shape.len() != 2 || vb.shape.len() != 2 || a == b {
            continue;
        }
        let (m, k) = match transpose_a {
            true => (va.shape[1], va.shape[0]),
            false => (va.shape[0], va.shape[1]),
        };
        // (a row-major `a` is one not used transposed, or a single column)
        if m > MAX_ROWS || !on_sgemm(m, vb.shape[0], k, !transpose_a || m == 1) {
            continue;
        }
        readers.entry(b).or_default().push(i);
    }
    let mut copies: Vec<(usize, Node)> = Vec::new();
    for (b, nodes) in readers {
        if nodes.len() < MIN_READERS {
            continue;
        }
        let shape = &g.values[b as usize].shape;
        let t_shape = [shape[1], shape[0]];
        let view = g.add_value(DType::F32, &t_shape);
        let copy = g.add_value(DType::F32, &t_shape);
        for &i in &nodes {
            let n = &mut g.nodes[i];
            let Op::MatMul { transpose_a, .. } = n.op else { continue };
            n.op = Op::MatMul {
                transpose_a,
                transpose_b: false,
            };
            n.inputs[1] = copy;
        }
        let first = nodes[0];
        copies.push((
            first,
            Node {
                op: Op::Shape(ShapeOp::Transpose(smallvec![1, 0])),
                inputs: smallvec![b],
                outputs: smallvec![view],
                site: None,
            },
        ));
        copies.push((
            first,
            Node {
                op: Op::Shape(ShapeOp::Contiguous),
                inputs: smallvec![view],
                outputs: smallvec![copy],
                site: None,
            },
        ));
    }
    let n = copies.len() / 2;
    // each pair goes before its first reader, in that order
    super::insert_before(g, copies);
    n
}
