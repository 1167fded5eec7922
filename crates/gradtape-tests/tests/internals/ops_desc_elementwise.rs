//! The unit tests of `src/ops/desc/elementwise.rs`, moved out of the library.

use gradtape::__internals::ops::desc::elementwise::*;
use gradtape::__internals::ops::desc::F64;
use gradtape::DType;
use gradtape::Tensor;

const XS: [f64; 9] = [-7.5, -2.0, -0.5, -0.0, 0.0, 0.3, 0.9, 2.5, 6.0];

/// `apply_f64` against `eval` on an f64 tensor, bit for bit (NaN for NaN).
fn same(what: &str, got: f64, want: f64) {
    assert!(
        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
        "{what}: apply_f64 gives {got}, eval {want}"
    );
}

#[test]
fn unary_apply_f64_matches_eval() {
    use Unary::*;
    let x = Tensor::vector(&XS);
    let ops = [
        Neg,
        Abs,
        Sign,
        Square,
        Sqrt,
        Rsqrt,
        Reciprocal,
        Exp,
        Expm1,
        Log,
        Log1p,
        Sin,
        Cos,
        Tan,
        Asin,
        Acos,
        Atan,
        Sinh,
        Cosh,
        Tanh,
        Asinh,
        Acosh,
        Atanh,
        Erf,
        Erfc,
        Gelu,
        GeluGrad,
        GeluTanh,
        GeluTanhGrad,
        Silu,
        SiluGrad,
        Mish,
        MishGrad,
        TanhShrink,
        Floor,
        Ceil,
        Round,
        Sigmoid,
        Relu,
        Relu6,
        LeakyRelu(F64(0.2)),
        Elu,
        Selu,
        Softplus,
        Softsign,
        ClipByValue(F64(-1.0), F64(2.0)),
        PowScalar(F64(1.5)),
        MulScalar(F64(-3.0)),
        DivScalar(F64(4.0)),
        AddScalar(F64(0.25)),
        Real,
        Imag,
        Conj,
        Angle,
    ];
    for op in ops {
        let y = op.eval(&x).unwrap().cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
        for (&v, &w) in XS.iter().zip(&y) {
            same(&format!("{op:?}({v})"), op.apply_f64(v), w);
        }
    }
    let b = Tensor::vector(&[true, false]);
    let nb = Unary::LogicalNot.eval(&b).unwrap().to_vec::<bool>().unwrap();
    assert_eq!(
        [Unary::LogicalNot.apply_f64(1.0), Unary::LogicalNot.apply_f64(0.0)],
        [nb[0] as u8 as f64, nb[1] as u8 as f64]
    );
}

#[test]
fn binary_apply_f64_matches_eval() {
    use Binary::*;
    let ys: Vec<f64> = XS.iter().rev().map(|v| v * 0.7 + 0.1).collect();
    let (a, b) = (Tensor::vector(&XS), Tensor::vector(&ys));
    let ops = [
        Add,
        Sub,
        Mul,
        Div,
        Pow,
        Maximum,
        Minimum,
        SquaredDifference,
        Atan2,
        FloorDiv,
        FloorMod,
        Equal,
        NotEqual,
        Less,
        LessEqual,
        Greater,
        GreaterEqual,
        ReluGrad,
        TanhGrad,
    ];
    for op in ops {
        let out = op.eval(&a, &b).unwrap();
        let out = if out.dtype() == DType::Bool {
            out.cast(DType::F64).unwrap()
        } else {
            out
        };
        for ((&u, &v), &w) in XS.iter().zip(&ys).zip(&out.to_vec::<f64>().unwrap()) {
            same(&format!("{op:?}({u}, {v})"), op.apply_f64(u, v), w);
        }
    }
    let (p, q) = (
        Tensor::vector(&[true, true, false, false]),
        Tensor::vector(&[true, false, true, false]),
    );
    for op in [LogicalAnd, LogicalOr, LogicalXor] {
        let out = op.eval(&p, &q).unwrap().to_vec::<bool>().unwrap();
        let pv = [1.0, 1.0, 0.0, 0.0];
        let qv = [1.0, 0.0, 1.0, 0.0];
        for i in 0..4 {
            assert_eq!(op.apply_f64(pv[i], qv[i]), out[i] as u8 as f64, "{op:?}");
        }
    }
    assert!(Complex.apply_f64(1.0, 2.0).is_nan());
}
