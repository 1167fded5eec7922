//! The unit tests of `src/function/compile/pads_to_concat.rs`, moved out of the library.

use gradtape::__internals::function::compile::pads_to_concat::*;
use gradtape::__internals::function::compile::pipeline::PassCx;
use gradtape::__internals::ops::desc::Binary;
use gradtape::__internals::ops::desc::Op;
use gradtape::__internals::ops::desc::ShapeOp;
use gradtape::__internals::GraphInternals;
use gradtape::function::Graph;
use gradtape::function::Node;
use gradtape::function::ValueId;
use gradtape::DType;
use gradtape::Tensor;
use smallvec::smallvec;

fn node(op: Op, inputs: &[ValueId], outputs: &[ValueId]) -> Node {
    Node {
        op,
        inputs: inputs.into(),
        outputs: outputs.into(),
        site: None,
    }
}

fn pad(before: usize, after: usize) -> Op {
    Op::Shape(ShapeOp::Pad(smallvec![(0, 0), (before, after)]))
}

/// `%0: [2, 1]`, `%1: [2, 2]` padded into `[2, 6]` at columns 0 and
/// `at1`, added.
fn graph(at1: usize) -> Graph {
    let mut g = Graph::default();
    g.add_value(DType::F32, &[2, 1]);
    g.add_value(DType::F32, &[2, 2]);
    for _ in 0..3 {
        g.add_value(DType::F32, &[2, 6]);
    }
    g.inputs = vec![0, 1];
    g.nodes.push(node(pad(0, 5), &[0], &[2]));
    g.nodes.push(node(pad(at1, 4 - at1), &[1], &[3]));
    g.nodes.push(node(Op::Binary(Binary::Add), &[3, 2], &[4]));
    g.outputs = vec![4];
    g
}

#[test]
fn disjoint_pads_become_a_concat_with_zeros_in_the_gaps() {
    let mut g = graph(3);
    assert_eq!(run(&mut g, &mut PassCx::default()), 1);
    gradtape::__internals::function::passes::dce(&mut g);
    assert_eq!((g.count("Pad"), g.count("Add"), g.count("ConcatV2")), (0, 0, 1));
    let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1]).unwrap();
    let b = Tensor::from_vec(vec![3.0f32, 4.0, 5.0, 6.0], &[2, 2]).unwrap();
    let got = g
        .run(&[a, b], &gradtape::__internals::function::graph::RunPlan::new(&g))
        .unwrap();
    let want = [1.0f32, 0.0, 0.0, 3.0, 4.0, 0.0, 2.0, 0.0, 0.0, 5.0, 6.0, 0.0];
    assert_eq!(got[0].to_vec::<f32>().unwrap(), want);
}

#[test]
fn overlapping_pads_stay_sums() {
    let mut g = graph(0);
    assert_eq!(run(&mut g, &mut PassCx::default()), 0);
    assert_eq!(g.count("Add"), 1);
}
