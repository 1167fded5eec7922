//! The unit tests of `src/function/compile/fold.rs`, moved out of the library.

use gradtape::__internals::function::compile::fold::*;
use gradtape::__internals::function::compile::pipeline::PassCx;
use gradtape::__internals::ops::desc::Op;
use gradtape::__internals::ops::desc::ShapeOp;
use gradtape::__internals::ops::desc::{Unary, F64};
use gradtape::__internals::GraphInternals;
use gradtape::function::Graph;
use gradtape::function::Node;
use gradtape::function::ValueId;
use gradtape::DType;
use gradtape::Tensor;

#[test]
fn a_chain_on_constants_folds_and_an_input_stops_it() {
    let mut g = Graph::default();
    for _ in 0..5 {
        g.add_value(DType::F64, &[2]);
    }
    g.inputs = vec![0];
    let node = |op, i: &[ValueId], o: &[ValueId]| Node {
        op,
        inputs: i.into(),
        outputs: o.into(),
        site: None,
    };
    g.nodes = vec![
        node(Op::Const(Tensor::vector(&[1.0f64, 2.0])), &[], &[1]),
        node(Op::Unary(Unary::MulScalar(F64(3.0))), &[1], &[2]),
        node(Op::Shape(ShapeOp::FullLike(F64(7.0))), &[0], &[3]),
        node(Op::Unary(Unary::Exp), &[0], &[4]),
    ];
    g.outputs = vec![2, 3, 4];
    assert_eq!(run(&mut g, &mut PassCx::default()), 2);
    assert_eq!(g.count("Const"), 3);
    assert_eq!(g.count("Exp"), 1);
    let Op::Const(t) = &g.nodes[1].op else {
        panic!("folded to a constant")
    };
    assert_eq!(t.to_vec::<f64>().unwrap(), vec![3.0, 6.0]);
    let Op::Const(t) = &g.nodes[2].op else {
        panic!("folded to a constant")
    };
    assert_eq!(t.to_vec::<f64>().unwrap(), vec![7.0, 7.0]);
}
