//! The unit tests of `src/function/passes.rs`, moved out of the library.

use gradtape::__internals::function::passes::*;
use gradtape::__internals::ops::desc::Op;
use gradtape::__internals::ops::desc::{Binary, Unary};
use gradtape::__internals::GraphInternals;
use gradtape::function::Graph;
use gradtape::function::Node;
use gradtape::function::ValueId;
use gradtape::DType;

fn node(op: Op, inputs: &[ValueId], outputs: &[ValueId]) -> Node {
    Node {
        op,
        inputs: inputs.into(),
        outputs: outputs.into(),
        site: None,
    }
}

/// x -> a = exp(x), b = exp(x), c = a + b, d = neg(x) (unused); returns c.
fn sample() -> Graph {
    let mut g = Graph::default();
    for _ in 0..5 {
        g.add_value(DType::F32, &[3]);
    }
    g.inputs = vec![0];
    g.nodes = vec![
        node(Op::Unary(Unary::Exp), &[0], &[1]),
        node(Op::Unary(Unary::Exp), &[0], &[2]),
        node(Op::Binary(Binary::Add), &[1, 2], &[3]),
        node(Op::Unary(Unary::Neg), &[0], &[4]),
    ];
    g.outputs = vec![3];
    g
}

#[test]
fn cse_merges_equal_nodes_and_dce_drops_unused_ones() {
    let mut g = sample();
    cse(&mut g);
    assert_eq!(g.count("Exp"), 1);
    assert_eq!(g.nodes[1].inputs.as_slice(), &[1, 1]);
    dce(&mut g);
    assert_eq!(g.count("Neg"), 0);
    assert_eq!(g.len(), 2);
    assert_eq!(g.values.len(), 3);
}

#[test]
fn sums_and_products_merge_in_either_order_differences_do_not() {
    // x, y -> x*y, y*x, x+y, y+x, x-y, y-x
    let mut g = Graph::default();
    for _ in 0..8 {
        g.add_value(DType::F32, &[3]);
    }
    g.inputs = vec![0, 1];
    g.nodes = vec![
        node(Op::Binary(Binary::Mul), &[0, 1], &[2]),
        node(Op::Binary(Binary::Mul), &[1, 0], &[3]),
        node(Op::Binary(Binary::Add), &[1, 0], &[4]),
        node(Op::Binary(Binary::Add), &[0, 1], &[5]),
        node(Op::Binary(Binary::Sub), &[0, 1], &[6]),
        node(Op::Binary(Binary::Sub), &[1, 0], &[7]),
    ];
    g.outputs = vec![2, 3, 4, 5, 6, 7];
    cse(&mut g);
    assert_eq!((g.count("Mul"), g.count("Add"), g.count("Sub")), (1, 1, 2));
    assert_eq!(g.outputs, vec![2, 2, 4, 4, 6, 7]);
    // the kept nodes read their inputs in their own order
    assert_eq!(g.nodes[1].inputs.as_slice(), &[1, 0]);
}

#[test]
fn different_attributes_are_not_merged() {
    let mut g = sample();
    g.nodes[0].op = Op::Unary(Unary::MulScalar(gradtape::__internals::ops::desc::F64(2.0)));
    g.nodes[1].op = Op::Unary(Unary::MulScalar(gradtape::__internals::ops::desc::F64(3.0)));
    cse(&mut g);
    assert_eq!(g.count("MulScalar"), 2);
}
