//! The unit tests of `src/ops/math/table.rs`, moved out of the library.

use gradtape::__internals::ops::desc::F64;
use gradtape::__internals::ops::desc::{Binary, Unary};
use gradtape::__internals::ops::math::table::*;
use gradtape::tensor::Float;
use gradtape::DType;
use gradtape::Tensor;

/// Every one-input op of the table (all but the complex and logical
/// ones), with its attributes.
fn table_ops() -> Vec<Unary> {
    use Unary::*;
    vec![
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
        DivScalar(F64(7.0)),
        AddScalar(F64(0.25)),
    ]
}

/// Inputs across every branch of the functions: both signs, zeros,
/// halves (rounding), the domains' edges, large values, non-finite ones.
fn inputs() -> Vec<f64> {
    let mut xs: Vec<f64> = (0..300).map(|i| (i as f64 - 150.0) * 0.0731).collect();
    xs.extend([
        -0.0, 0.0, 0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 6.0, 1e-30, -1e-30, 300.0, -300.0, 1e5,
    ]);
    xs.extend([f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    xs
}

fn same_bits<T: Float>(a: T, b: T) -> bool {
    a.to_f64().to_bits() == b.to_f64().to_bits() || (a.is_nan() && b.is_nan())
}

/// The eager kernel of `op` on `xs` (as `T`) against the slice function
/// the fused kernels run, bit for bit; and for `f64`, the folded value.
fn check_unary<T: Lane>(op: &Unary, xs: &[f64]) {
    let xs: Vec<T> = xs.iter().map(|&x| T::from_f64(x)).collect();
    let t = Tensor::from_vec(xs.clone(), &[xs.len()]).unwrap();
    let eager = unary_map("test", op, &t).unwrap().unwrap().to_vec::<T>().unwrap();
    let mut slice = vec![T::zero(); xs.len()];
    T::unary(op, &xs, &mut slice);
    for (i, &x) in xs.iter().enumerate() {
        assert!(same_bits(eager[i], slice[i]), "{op:?}({x:?}) {}", T::DTYPE);
        // one element at a time (a block's tail: the scalar path)
        let mut one = [T::zero()];
        T::unary(op, &[x], &mut one);
        assert!(same_bits(one[0], slice[i]), "{op:?}({x:?}) alone {}", T::DTYPE);
        if T::DTYPE == DType::F64 {
            assert!(
                same_bits(T::from_f64(op.apply_f64(x.to_f64())), slice[i]),
                "{op:?}({x:?}) folded"
            );
        }
    }
}

/// Every op the table defines has its own function for both types (one
/// that fell back to `apply_f64` would come back here for ever), and the
/// eager kernel, the slice function (one block or one element) and the
/// folded `f64` value agree bit for bit.
#[test]
fn defined_ops_run_their_own_functions_everywhere() {
    let xs = inputs();
    for op in &table_ops() {
        assert!(defined(op), "{op:?}");
        check_unary::<f32>(op, &xs);
        check_unary::<f64>(op, &xs);
    }
    for op in [
        Unary::Real,
        Unary::Imag,
        Unary::Conj,
        Unary::Angle,
        Unary::ComplexAbs,
        Unary::LogicalNot,
    ] {
        assert!(!defined(&op), "{op:?}");
    }
    use Binary::*;
    for op in [
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
        ReluGrad,
        TanhGrad,
    ] {
        assert!(defined_binary(&op), "{op:?}");
        let (xa, xb) = (xs.clone(), xs.iter().rev().map(|v| v * 0.7 + 0.1).collect::<Vec<_>>());
        let (a, b) = (Tensor::vector(&xa), Tensor::vector(&xb));
        let z = binary_zip("test", &op, &a, &b)
            .unwrap()
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let mut slice = vec![0.0; xa.len()];
        binary(&op, &xa, &xb, &mut slice);
        for i in 0..xa.len() {
            assert!(same_bits(z[i], slice[i]), "{op:?}({}, {})", xa[i], xb[i]);
            assert!(same_bits(op.apply_f64(xa[i], xb[i]), slice[i]), "{op:?} folded");
        }
    }
    for op in [Equal, Less, LogicalAnd, Complex] {
        assert!(!defined_binary(&op), "{op:?}");
    }
}

/// Every op outside the table is a complex or logical one: `apply_f64`
/// covers the rest without reaching its `unreachable!`.
#[test]
fn apply_f64_covers_every_op() {
    for op in table_ops() {
        let _ = op.apply_f64(0.5);
    }
    assert_eq!(Unary::Angle.apply_f64(-1.0), std::f64::consts::PI);
    assert_eq!(Unary::LogicalNot.apply_f64(0.0), 1.0);
}
