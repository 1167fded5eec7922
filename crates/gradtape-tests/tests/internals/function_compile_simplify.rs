//! The unit tests of `src/function/compile/simplify.rs`, moved out of the library.

use gradtape::__internals::function::compile::pipeline::PassCx;
use gradtape::__internals::function::compile::simplify::*;
use gradtape::__internals::ops::desc::Binary;
use gradtape::__internals::ops::desc::Op;
use gradtape::__internals::ops::desc::ShapeOp;
use gradtape::__internals::ops::desc::Unary;
use gradtape::__internals::ops::desc::F64;
use gradtape::__internals::GraphInternals;
use gradtape::function::Graph;
use gradtape::function::Node;
use gradtape::function::ValueId;
use gradtape::DType;
use gradtape::Tensor;

fn node(op: Op, i: &[ValueId], o: &[ValueId]) -> Node {
    Node {
        op,
        inputs: i.into(),
        outputs: o.into(),
        site: None,
    }
}

#[test]
fn multiplying_by_a_broadcast_one_and_double_transposes_go() {
    let mut g = Graph::default();
    g.add_value(DType::F32, &[2, 3]); // 0: x
    g.add_value(DType::F32, &[]); // 1: 1.0
    g.add_value(DType::F32, &[2, 3]); // 2: broadcast 1
    g.add_value(DType::F32, &[2, 3]); // 3: x * 1
    g.add_value(DType::F32, &[3, 2]); // 4: transpose
    g.add_value(DType::F32, &[2, 3]); // 5: transpose back
    g.add_value(DType::F32, &[2, 3]); // 6: + 0 (kept)
    g.inputs = vec![0];
    g.nodes = vec![
        node(Op::Const(Tensor::scalar(1.0f32)), &[], &[1]),
        node(Op::Shape(ShapeOp::BroadcastTo((&[2usize, 3][..]).into())), &[1], &[2]),
        node(Op::Binary(Binary::Mul), &[2, 0], &[3]),
        node(Op::Shape(ShapeOp::Transpose((&[1usize, 0][..]).into())), &[3], &[4]),
        node(Op::Shape(ShapeOp::Transpose((&[1usize, 0][..]).into())), &[4], &[5]),
        node(Op::Unary(Unary::AddScalar(F64(0.0))), &[5], &[6]),
    ];
    g.outputs = vec![5, 6];
    assert_eq!(run(&mut g, &mut PassCx::default()), 2);
    assert_eq!(g.outputs[0], 0, "x * 1, transposed twice, is x");
    assert_eq!(g.nodes[5].inputs[0], 0, "x + 0 reads x and stays");
}

#[test]
fn relu_grad_reads_the_rectified_value() {
    let mut g = Graph::default();
    g.add_value(DType::F32, &[4]); // 0: x
    g.add_value(DType::F32, &[4]); // 1: dy
    g.add_value(DType::F32, &[4]); // 2: relu(x)
    g.add_value(DType::F32, &[4]); // 3: relu_grad(dy, x)
    g.add_value(DType::F32, &[4]); // 4: relu_grad(dy, dy): no relu of dy
    g.inputs = vec![0, 1];
    g.nodes = vec![
        node(Op::Unary(Unary::Relu), &[0], &[2]),
        node(Op::Binary(Binary::ReluGrad), &[1, 0], &[3]),
        node(Op::Binary(Binary::ReluGrad), &[1, 1], &[4]),
    ];
    g.outputs = vec![2, 3, 4];
    assert_eq!(run(&mut g, &mut PassCx::default()), 1);
    assert_eq!(&g.nodes[1].inputs[..], &[1, 2]);
    assert_eq!(&g.nodes[2].inputs[..], &[1, 1]);
    // and the values agree, at the edge cases included
    let x = Tensor::from_vec(
        vec![-1.0f32, -0.0, 0.0, f32::NAN, 2.0, 1e-45, -1e-45, f32::INFINITY],
        &[8],
    )
    .unwrap();
    let dy = Tensor::from_vec(vec![3.0f32; 8], &[8]).unwrap();
    let via_x = gradtape::__internals::ops::math::binary::relu_grad(&dy, &x)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let via_y = gradtape::__internals::ops::math::binary::relu_grad(&dy, &x.relu().unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(via_x, via_y);
    assert_eq!(via_x, vec![0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 0.0, 3.0]);
}

#[test]
fn a_slice_inside_a_padded_value_reads_the_value() {
    let mut g = Graph::default();
    g.add_value(DType::F32, &[4, 6]); // 0: x
    g.add_value(DType::F32, &[5, 9]); // 1: pad (0, 1), (2, 1)
    g.add_value(DType::F32, &[4, 6]); // 2: the slice that undoes it
    g.add_value(DType::F32, &[2, 3]); // 3: a box inside x
    g.add_value(DType::F32, &[3, 3]); // 4: a box reaching into the zeros (kept)
    g.inputs = vec![0];
    let dims = |v: &[usize]| -> smallvec::SmallVec<[usize; 4]> { v.into() };
    g.nodes = vec![
        node(
            Op::Shape(ShapeOp::Pad([(0, 1), (2, 1)].into_iter().collect())),
            &[0],
            &[1],
        ),
        node(Op::Shape(ShapeOp::Slice(dims(&[0, 2]), dims(&[4, 6]))), &[1], &[2]),
        node(Op::Shape(ShapeOp::Slice(dims(&[1, 4]), dims(&[2, 3]))), &[1], &[3]),
        node(Op::Shape(ShapeOp::Slice(dims(&[2, 1]), dims(&[3, 3]))), &[1], &[4]),
    ];
    g.outputs = vec![2, 3, 4];
    assert_eq!(run(&mut g, &mut PassCx::default()), 2);
    assert_eq!(g.outputs[0], 0, "the slice that undoes the pad is x");
    assert_eq!(g.nodes[2].inputs[0], 0, "a box inside x is sliced from x");
    assert_eq!(g.nodes[2].op, Op::Shape(ShapeOp::Slice(dims(&[1, 2]), dims(&[2, 3]))));
    assert_eq!(
        g.nodes[3].inputs[0], 1,
        "a box reaching into the zeros stays on the pad"
    );
}
