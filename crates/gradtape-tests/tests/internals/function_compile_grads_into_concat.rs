//! The `grads_into_concat` pass on graphs built by hand: attention's
//! gradients (`AttentionGrad`, its packed `dq | dk | dv`) sliced, reshaped
//! to their shapes, transposed or not, and concatenated along other axes
//! than a fused projection's heads (the keys' time axis, the head width,
//! the batch), in other orders; the values of the graph before the
//! rewrite, bit for bit; and the graphs it must leave alone (a part read
//! elsewhere too, two parts, the packed gradients read whole).

use gradtape::__internals::function::compile::grads_into_concat::*;
use gradtape::__internals::function::compile::pipeline::PassCx;
use gradtape::__internals::function::graph::RunPlan;
use gradtape::__internals::ops::desc::{NnOp, Op, ShapeOp, F64};
use gradtape::__internals::GraphInternals;
use gradtape::function::{Graph, Node, ValueId};
use gradtape::{DType, HiddenRows, Tensor};

fn node(op: Op, inputs: &[ValueId], outputs: &[ValueId]) -> Node {
    Node {
        op,
        inputs: inputs.into(),
        outputs: outputs.into(),
        site: None,
    }
}

/// The sizes: batch, heads, time, head width.
const B: usize = 2;
const H: usize = 3;
const T: usize = 16;
const D: usize = 8;

/// Inputs `q, k, v, dout` (`[B, H, T, D]` each), their attention's packed
/// rows and gradient, and for each part in `order` its slice, reshape and
/// (with `perm`) transpose; the part views, the graph and the gradient's
/// value id.
fn graph(dtype: DType, order: [usize; 3], perm: Option<&[usize]>) -> (Graph, Vec<ValueId>, ValueId) {
    let mut g = Graph::default();
    let s = [B, H, T, D];
    for _ in 0..4 {
        g.add_value(dtype, &s);
    }
    g.inputs = vec![0, 1, 2, 3];
    let packed = g.add_value(dtype, &[B, H, T, D + 1]);
    let (causal, scale, dropout) = (true, F64(0.3), F64(0.0));
    g.nodes.push(node(
        Op::Nn(NnOp::Attention {
            causal,
            scale,
            dropout,
            hidden: HiddenRows::Zeros,
        }),
        &[0, 1, 2],
        &[packed],
    ));
    let n = T * D;
    let grad = g.add_value(dtype, &[B, H, 3 * n]);
    g.nodes.push(node(
        Op::Nn(NnOp::AttentionGrad {
            causal,
            scale,
            dropout,
            hidden: HiddenRows::Zeros,
        }),
        &[0, 1, 2, packed, 3],
        &[grad],
    ));
    let mut parts = vec![];
    for p in order {
        let sl = g.add_value(dtype, &[B, H, n]);
        g.nodes.push(node(
            Op::Shape(ShapeOp::Slice([0, 0, p * n][..].into(), [B, H, n][..].into())),
            &[grad],
            &[sl],
        ));
        let r = g.add_value(dtype, &s);
        g.nodes
            .push(node(Op::Shape(ShapeOp::Reshape(s[..].into())), &[sl], &[r]));
        let v = match perm {
            Some(perm) => {
                let t: Vec<usize> = perm.iter().map(|&a| s[a]).collect();
                let tv = g.add_value(dtype, &t);
                g.nodes
                    .push(node(Op::Shape(ShapeOp::Transpose(perm.into())), &[r], &[tv]));
                tv
            }
            None => r,
        };
        parts.push(v);
    }
    (g, parts, grad)
}

/// `parts` concatenated along `axis` as the graph's output.
fn concat(g: &mut Graph, parts: &[ValueId], axis: usize) {
    let mut shape = g.values[parts[0] as usize].shape.to_vec();
    shape[axis] = parts.iter().map(|&p| g.values[p as usize].shape[axis]).sum();
    let dtype = g.values[parts[0] as usize].dtype;
    let o = g.add_value(dtype, &shape);
    g.nodes
        .push(node(Op::Shape(ShapeOp::Concat(axis as isize)), parts, &[o]));
    g.outputs.push(o);
}

fn inputs(dtype: DType) -> Vec<Tensor> {
    (0..4)
        .map(|k| {
            let n = B * H * T * D;
            let v: Vec<f64> = (0..n).map(|i| ((i * 37 + k * 11) % 101) as f64 / 50.0 - 1.0).collect();
            Tensor::from_vec(v, &[B, H, T, D]).unwrap().cast(dtype).unwrap()
        })
        .collect()
}

fn values(g: &Graph, xs: &[Tensor]) -> Vec<Vec<f64>> {
    g.run(xs, &RunPlan::new(g))
        .unwrap()
        .iter()
        .map(|t| t.to_vec_f64())
        .collect()
}

fn count(g: &Graph, name: &str) -> usize {
    g.nodes.iter().filter(|n| n.op.name() == name).count()
}

#[test]
fn parts_concatenated_along_any_axis_that_keeps_rows_whole_are_written_in_place() {
    // (perm, axis): the heads' axis after a transpose to [B, T, H, D] (a
    // fused projection), the time axis of [B, T, H, D], the head width of
    // [B, H, T, D] (untransposed), the batch
    let cases: [(Option<&[usize]>, usize); 4] =
        [(Some(&[0, 2, 1, 3]), 2), (Some(&[0, 2, 1, 3]), 1), (None, 3), (None, 0)];
    for dtype in [DType::F32, DType::F64] {
        for (perm, axis) in cases {
            for order in [[0, 1, 2], [2, 0, 1]] {
                let (mut g, parts, _) = graph(dtype, order, perm);
                concat(&mut g, &parts, axis);
                let xs = inputs(dtype);
                let want = values(&g, &xs);
                assert_eq!(run(&mut g, &mut PassCx::default()), 1, "{perm:?} {axis} {order:?}");
                g.verify().unwrap();
                // the gradient node writes the concatenation; no view or copy is left
                assert_eq!(count(&g, "AttentionGradInto"), 1);
                for op in ["ConcatV2", "Slice", "Reshape", "Transpose", "AttentionGrad"] {
                    assert_eq!(count(&g, op), 0, "{op} left: {perm:?} {axis} {order:?}");
                }
                assert_eq!(values(&g, &xs), want, "{dtype} {perm:?} {axis} {order:?}");
            }
        }
    }
}

#[test]
fn graphs_that_read_the_gradients_elsewhere_are_left_alone() {
    let perm: Option<&[usize]> = Some(&[0, 2, 1, 3]);
    // a part read by another node too
    let (mut g, parts, _) = graph(DType::F32, [0, 1, 2], perm);
    concat(&mut g, &parts, 2);
    g.outputs.push(parts[1]);
    assert_eq!(run(&mut g, &mut PassCx::default()), 0);
    // the packed gradients read whole too
    let (mut g, parts, grad) = graph(DType::F32, [0, 1, 2], perm);
    concat(&mut g, &parts, 2);
    g.outputs.push(grad);
    assert_eq!(run(&mut g, &mut PassCx::default()), 0);
    // two of the three parts
    let (mut g, parts, _) = graph(DType::F32, [0, 1, 2], perm);
    concat(&mut g, &parts[1..], 2);
    g.outputs.push(parts[0]);
    assert_eq!(run(&mut g, &mut PassCx::default()), 0);
    // one part twice (the same slice concatenated with itself: no
    // partition)
    let (mut g, parts, _) = graph(DType::F32, [0, 1, 2], perm);
    concat(&mut g, &[parts[0], parts[1], parts[1]], 2);
    g.outputs.push(parts[2]);
    assert_eq!(run(&mut g, &mut PassCx::default()), 0);
    g.verify().unwrap();
}
