//! What the random programs reach: the compiler's passes, every op of the
//! vocabulary, and every traceable op descriptor of the library (by the
//! names the traced graphs hold).

use gradtape::{function, DType, Graph, Result};

use super::{apply, check_program, draw_program, inputs, report_passes, run_with_gradients, Gen, OPS};

/// The programs reach the compiler's passes: over these 150 programs,
/// half of whose steps are motifs of models (their forward graphs and
/// traced training steps), folding,
/// simplification, pads summed into a concatenation, concatenations of
/// reshapes, common subexpressions, dead code, joined products, diagonal
/// products and fusion each rewrite something; on a CPU whose `f32`
/// products run on the AVX-512 kernel, products are stacked and a weight
/// transposed once for many; with two threads or more, products are
/// paired. So each pass is checked against eager on graphs other than the
/// ones it was written for, and so are max pooling merged with its
/// positions and a convolution's matrix shared with its filter gradient
/// (the second half of the vocabulary). Not reached: the reductions
/// hoisted above optimizer updates (no optimizer); rematerialisation (its
/// kernels start at 2^16 elements) is reached by a few, too few to count
/// on.
#[test]
fn random_programs_reach_the_passes() {
    // (a seed whose 150 programs reach every pass: the rare ones fire in
    // a few programs of a seed, so a change of the vocabulary may need
    // another seed, never fewer passes: with the fourth part, seed 3's
    // programs no longer made pads_to_concat fire, 4, 5 and 7's not
    // diag_matmul, 8's not stack_products; 6's reach every one)
    for k in 0..150 {
        check_program(6, k, k % 3 == 0, true, None);
    }
    let all = report_passes();
    let count = |name: &str| all.iter().find(|(k, _)| *k == name).map_or(0, |&(_, c)| c);
    let mut wanted = vec![
        "fold",
        "simplify",
        "pads_to_concat",
        "concat_of_reshapes",
        "cse",
        "dce",
        "join_products",
        "diag_matmul",
        "fuse",
        "pool_argmax",
        "share_im2col",
    ];
    // (the passes that need the AVX-512 f32 kernel, or two threads, as
    // the library decides them; `transpose_once` wants two products that
    // share a transposed f32 operand at least 33 wide, which these
    // programs seldom make: `function_passes.rs` shows it firing on two
    // graphs of its own)
    use gradtape::__internals::kernels::cpu::{sgemm, workers};
    if sgemm::available() {
        wanted.push("stack_products");
    }
    if workers::threads() > 1 {
        wanted.push("pair_products");
    }
    for name in wanted {
        assert!(count(name) > 0, "pass {name} never fired: {all:?}");
    }
}

/// The generator reaches every op, and most steps of a program apply (a
/// generator whose steps were all refused would test nothing).
#[test]
fn the_generator_reaches_every_op() -> Result<()> {
    let mut seen = [0usize; OPS];
    let (mut applied, mut total) = (0, 0);
    for k in 0..200 {
        let mut g = Gen(0x5eed ^ k);
        let steps = draw_program(&mut g, false);
        let mut v = inputs(&mut g, DType::F64, 3, 4, 5)?;
        for s in &steps {
            total += 1;
            if let Ok(t) = apply(s, &v) {
                seen[s.op] += 1;
                applied += 1;
                v.push(t);
            }
        }
    }
    assert!(seen.iter().all(|&c| c > 0), "ops never applied: {seen:?}");
    assert!(applied * 10 >= total * 6, "{applied} of {total} steps applied");
    Ok(())
}

/// The op names of `g` and of the graphs nested in it, added to `names`.
fn op_names(g: &Graph, names: &mut std::collections::BTreeSet<String>) {
    for n in &g.nodes {
        names.insert(n.op.name().to_string());
    }
    for (_, sub) in g.subgraphs() {
        op_names(&sub, names);
    }
}

/// The op names the traced training steps of `programs` programs of
/// `seed` hold (forward and gradient ops, before the compiler's passes).
fn traced_op_names(seed: u64, programs: u64) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for k in 0..programs {
        let mut g = Gen(seed ^ k.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let steps = draw_program(&mut g, false);
        let Ok(x) = inputs(&mut g, DType::F64, 3, 4, 5) else {
            continue;
        };
        let f = function(move |x: &Vec<gradtape::Tensor>| run_with_gradients(&steps, x));
        match f.concrete(&x) {
            Ok(cf) => op_names(cf.graph(), &mut names),
            Err(e) if std::env::var_os("GRADTAPE_PROGRAMS_NAMES").is_some() => eprintln!("program {k}: {e}"),
            Err(_) => {}
        }
    }
    names
}

/// The library's traceable op descriptors (the names `Op::name` gives,
/// from `crates/gradtape/src/ops/desc`) that the traced programs hold:
/// every one but those listed in [`NOT_DRAWN`] with the reason. A change
/// of the vocabulary that loses one fails here.
const REACHED: &[&str] = &[
    // elementwise
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "AddScalar",
    "Angle",
    "Asin",
    "Asinh",
    "Atan",
    "Atan2",
    "Atanh",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "Cast",
    "Ceil",
    "Complex",
    "ComplexAbs",
    "Conj",
    "Cos",
    "Cosh",
    "Div",
    "DivScalar",
    "Elu",
    "Equal",
    "Erf",
    "Erfc",
    "Exp",
    "Expm1",
    "Floor",
    "FloorDiv",
    "FloorMod",
    "Gelu",
    "GeluTanh",
    "Greater",
    "GreaterEqual",
    "Imag",
    "Invert",
    "LeakyRelu",
    "LeftShift",
    "Less",
    "LessEqual",
    "Log",
    "Log1p",
    "LogicalAnd",
    "LogicalNot",
    "LogicalOr",
    "LogicalXor",
    "Maximum",
    "Minimum",
    "Mish",
    "Mul",
    "MulScalar",
    "Neg",
    "NotEqual",
    "Pow",
    "PowScalar",
    "Real",
    "Reciprocal",
    "Relu",
    "Relu6",
    "RightShift",
    "Round",
    "Rsqrt",
    "Select",
    "Selu",
    "Sigmoid",
    "Sign",
    "Silu",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Square",
    "SquaredDifference",
    "Sub",
    "Tan",
    "Tanh",
    "ClipByValue",
    // special functions
    "Lgamma",
    "Digamma",
    "Polygamma",
    "Igamma",
    "Igammac",
    "Betainc",
    "Erfinv",
    "Ndtri",
    "BesselI0e",
    "BesselI1e",
    // reductions and scans
    "Sum",
    "Max",
    "Min",
    "Prod",
    "All",
    "Any",
    "ArgMax",
    "ArgMin",
    "Cumsum",
    "Cumprod",
    // shapes and indices
    "ConcatV2",
    "Slice",
    "Pad",
    "Gather",
    "ScatterAdd",
    "Reshape",
    "Transpose",
    "BroadcastTo",
    "StridedSlice",
    "ReverseV2",
    "GatherNd",
    "ScatterNd",
    "DynamicSlice",
    "DynamicUpdateSlice",
    "TensorScatterUpdate",
    // sorting and segments
    "ArgSort",
    "Unique",
    "SearchSorted",
    "Bincount",
    "Where",
    "UnsortedSegmentSum",
    "UnsortedSegmentProd",
    "UnsortedSegmentMax",
    "UnsortedSegmentMin",
    "SegmentSum",
    "SegmentProd",
    "SegmentMax",
    "SegmentMin",
    // neural networks
    "Softmax",
    "LogSoftmax",
    "SparseSoftmaxCrossEntropyWithLogits",
    "SigmoidCrossEntropyWithLogits",
    "BiasAdd",
    "Conv2D",
    "DepthwiseConv2dNative",
    "Conv2DBackpropInput",
    "MaxPool",
    "AvgPool",
    "Conv3D",
    "MaxPool3D",
    "AvgPool3D",
    "Attention",
    "LstmCell",
    "LstmSequence",
    "GruSequence",
    "LayerNorm",
    "Rotary",
    // linear algebra, FFTs, images, constructors
    "MatMul",
    "Cholesky",
    "MatrixTriangularSolve",
    "MatrixSolve",
    "MatrixInverse",
    "MatrixDeterminant",
    "LogMatrixDeterminant",
    "MatrixDiagPart",
    "SelfAdjointEigV2",
    "Svd",
    "Qr",
    "MatrixExponential",
    "FFT",
    "IFFT2D",
    "FFT2D",
    "FFT3D",
    "IFFT3D",
    "Lu",
    "CTCLoss",
    "CTCLossGrad",
    "IFFT",
    "ResizeBilinear",
    "ResizeNearestNeighbor",
    "OneHot",
];

/// The traceable descriptors the programs' traced graphs do not hold,
/// and why: random draws (a traced call draws other numbers than eager:
/// no differential test of values), and the internal ops that only the
/// vectorized Jacobian (`Stack`) or the second derivative of a loop's
/// history (`RowInto`) records, which `transforms.rs` and the loop tests
/// reach.
#[allow(dead_code)]
const NOT_DRAWN: &[&str] = &[
    "RandomUniform",
    "RandomStandardNormal",
    "TruncatedNormal",
    "DropoutMask",
    "Stack",
    "RowInto",
];

/// The programs' traced graphs hold every op of [`REACHED`].
#[test]
fn random_programs_reach_every_traceable_op() {
    let names = traced_op_names(0x5eed, 3000);
    if std::env::var_os("GRADTAPE_PROGRAMS_NAMES").is_some() {
        eprintln!("traced op names: {names:?}");
    }
    let missing: Vec<&str> = REACHED.iter().copied().filter(|n| !names.contains(*n)).collect();
    assert!(missing.is_empty(), "never traced: {missing:?}\nseen: {names:?}");
}
