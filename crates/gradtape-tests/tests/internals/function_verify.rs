//! The unit tests of `src/function/verify.rs`, moved out of the library.

use gradtape::__internals::function::verify::*;
use gradtape::__internals::ops::desc::Op;
use gradtape::__internals::ops::desc::{Binary, Unary};
use gradtape::__internals::GraphInternals;
use gradtape::function::Graph;
use gradtape::function::Node;
use gradtape::function::ValueId;
use gradtape::{DType, Tensor};

fn node(op: Op, inputs: &[ValueId], outputs: &[ValueId]) -> Node {
    Node {
        op,
        inputs: inputs.into(),
        outputs: outputs.into(),
        site: None,
    }
}

/// x: f32[3] -> e = exp(x), s = e + c (c a constant [1]); returns s.
fn sound() -> Graph {
    let mut g = Graph::default();
    g.add_value(DType::F32, &[3]);
    g.add_value(DType::F32, &[3]);
    g.add_value(DType::F32, &[1]);
    g.add_value(DType::F32, &[3]);
    g.inputs = vec![0];
    g.nodes = vec![
        node(Op::Unary(Unary::Exp), &[0], &[1]),
        node(Op::Const(Tensor::vector(&[2.0f32])), &[], &[2]),
        node(Op::Binary(Binary::Add), &[1, 2], &[3]),
    ];
    g.outputs = vec![3];
    g
}

fn error(g: &Graph) -> String {
    g.verify().expect_err("a broken graph").to_string()
}

#[test]
fn a_sound_graph_passes() {
    sound().verify().unwrap();
}

#[test]
fn broken_graphs_fail_and_say_why() {
    let mut g = sound();
    g.nodes.swap(0, 2); // the sum before its operands
    assert!(error(&g).contains("reads %1 before it is made"), "{}", error(&g));

    let mut g = sound();
    g.nodes[1].outputs[0] = 1; // %1 made twice
    assert!(error(&g).contains("already made"), "{}", error(&g));

    let mut g = sound();
    g.nodes[0].inputs[0] = 9;
    assert!(error(&g).contains("out of range"), "{}", error(&g));

    let mut g = sound();
    g.outputs = vec![0, 7];
    assert!(error(&g).contains("out of range"), "{}", error(&g));

    let mut g = sound();
    g.nodes.pop(); // the output is never made
    assert!(error(&g).contains("never made"), "{}", error(&g));

    let mut g = sound();
    g.values[3].shape = gradtape::__internals::tensor::layout::small_copy(&[4]);
    assert!(error(&g).contains("its op makes [3]"), "{}", error(&g));

    let mut g = sound();
    g.values[2].dtype = DType::F64; // the constant is f32
    assert!(error(&g).contains("the constant"), "{}", error(&g));

    let mut g = sound();
    g.nodes[2].inputs.pop(); // an addition of one input
    assert!(error(&g).contains("takes 1 inputs"), "{}", error(&g));
}

#[test]
fn broadcasting_follows_numpy() {
    assert_eq!(broadcast(&[4, 1, 3], &[5, 1]), Some(vec![4, 5, 3]));
    assert_eq!(broadcast(&[], &[2]), Some(vec![2]));
    assert_eq!(broadcast(&[2], &[3]), None);
}
