//! The `concat_of_reshapes` pass: a concatenation of reshapes that copy
//! concatenates their sources and reshapes the result, on graphs of other
//! shapes than the transformer's QKV gradient (an image's channels split
//! into groups, merged back and concatenated along rows), with the values
//! of the graph before the rewrite.

use gradtape::__internals::function::compile::concat_of_reshapes::*;
use gradtape::__internals::function::compile::pipeline::PassCx;
use gradtape::__internals::function::graph::RunPlan;
use gradtape::__internals::function::passes::dce;
use gradtape::__internals::ops::desc::{Op, ShapeOp};
use gradtape::__internals::GraphInternals;
use gradtape::function::{Graph, Node, ValueId};
use gradtape::{DType, Tensor};

fn node(op: Op, inputs: &[ValueId], outputs: &[ValueId]) -> Node {
    Node {
        op,
        inputs: inputs.into(),
        outputs: outputs.into(),
        site: None,
    }
}

/// Inputs of `shapes`, each transposed by `perm`, reshaped to `merged[i]`,
/// and the results concatenated along `axis`.
fn graph(shapes: &[&[usize]], perm: &[usize], merged: &[&[usize]], axis: isize, out: &[usize]) -> Graph {
    let mut g = Graph::default();
    let n = shapes.len();
    for s in shapes {
        g.add_value(DType::F32, s);
    }
    g.inputs = (0..n as ValueId).collect();
    let mut parts = vec![];
    for (i, s) in shapes.iter().enumerate() {
        let t: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
        let tv = g.add_value(DType::F32, &t);
        g.nodes
            .push(node(Op::Shape(ShapeOp::Transpose(perm.into())), &[i as ValueId], &[tv]));
        let r = g.add_value(DType::F32, merged[i]);
        g.nodes
            .push(node(Op::Shape(ShapeOp::Reshape(merged[i].into())), &[tv], &[r]));
        parts.push(r);
    }
    let o = g.add_value(DType::F32, out);
    g.nodes.push(node(Op::Shape(ShapeOp::Concat(axis)), &parts, &[o]));
    g.outputs = vec![o];
    g
}

fn inputs(shapes: &[&[usize]]) -> Vec<Tensor> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let n: usize = s.iter().product();
            Tensor::from_vec((0..n).map(|i| (i * 7 + k * 1000) as f32).collect(), s).unwrap()
        })
        .collect()
}

fn values(g: &Graph, xs: &[Tensor]) -> Vec<f32> {
    g.run(xs, &RunPlan::new(g)).unwrap()[0].to_vec::<f32>().unwrap()
}

#[test]
fn concatenated_merges_concatenate_their_sources() {
    // [n, c, h, w] with channel groups of different sizes, as [n, h, w, c]
    // then [n·h·w, c]: concatenated along the channels (axis 1)
    let shapes: &[&[usize]] = &[&[2, 3, 4, 5], &[2, 6, 4, 5], &[2, 1, 4, 5]];
    let merged: &[&[usize]] = &[&[40, 3], &[40, 6], &[40, 1]];
    let mut g = graph(shapes, &[0, 2, 3, 1], merged, -1, &[40, 10]);
    let xs = inputs(shapes);
    let want = values(&g, &xs);
    assert_eq!(run(&mut g, &mut PassCx::default()), 1);
    dce(&mut g);
    g.verify().unwrap();
    // one concatenation (of the transposed sources, along their last dim)
    // and one reshape, which is a view
    assert_eq!(
        (g.count("Reshape"), g.count("ConcatV2"), g.count("Transpose")),
        (1, 1, 3)
    );
    assert_eq!(values(&g, &xs), want);
}

#[test]
fn heads_merged_and_concatenated_along_a_middle_axis() {
    // [b, h, t, d] heads, transposed to [b, t, h, d], merged to [b, t, h·d]
    // and concatenated along axis 2 (the transformer's case at rank 3)
    let shapes: &[&[usize]] = &[&[2, 3, 5, 4], &[2, 3, 5, 4]];
    let merged: &[&[usize]] = &[&[2, 5, 12], &[2, 5, 12]];
    let mut g = graph(shapes, &[0, 2, 1, 3], merged, 2, &[2, 5, 24]);
    let xs = inputs(shapes);
    let want = values(&g, &xs);
    assert_eq!(run(&mut g, &mut PassCx::default()), 1);
    dce(&mut g);
    g.verify().unwrap();
    assert_eq!(values(&g, &xs), want);
}

#[test]
fn merges_that_do_not_line_up_are_left_alone() {
    // the concatenated axis is the inner dim of a merged group (w·c, with
    // c differing): concatenating along c would interleave differently
    let shapes: &[&[usize]] = &[&[2, 4, 3], &[2, 4, 5]];
    let merged: &[&[usize]] = &[&[2, 12], &[2, 20]];
    let mut g = graph(shapes, &[0, 1, 2], merged, 1, &[2, 32]);
    assert_eq!(run(&mut g, &mut PassCx::default()), 0);
    // sources of different ranks
    let shapes: &[&[usize]] = &[&[2, 4, 3], &[2, 12]];
    let mut g = Graph::default();
    for s in shapes {
        g.add_value(DType::F32, s);
    }
    g.inputs = vec![0, 1];
    let r0 = g.add_value(DType::F32, &[2, 12]);
    g.nodes
        .push(node(Op::Shape(ShapeOp::Reshape([2, 12][..].into())), &[0], &[r0]));
    let r1 = g.add_value(DType::F32, &[2, 12]);
    g.nodes
        .push(node(Op::Shape(ShapeOp::Reshape([2, 12][..].into())), &[1], &[r1]));
    let o = g.add_value(DType::F32, &[2, 24]);
    g.nodes.push(node(Op::Shape(ShapeOp::Concat(1)), &[r0, r1], &[o]));
    g.outputs = vec![o];
    assert_eq!(run(&mut g, &mut PassCx::default()), 0);
}
