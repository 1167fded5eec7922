//! Descriptors of the elementwise ops: one input ([`Unary`]) or two,
//! broadcasting ([`Binary`]). Each variant names what it computes, and its
//! attributes are the scalars it takes; `eval` re-runs the public op.

use std::fmt;

use super::F64;
use crate::error::Result;
use crate::tensor::Tensor;

/// Declares a descriptor enum, its names and its evaluation from one table:
/// `Variant(attr: Type) => "Name", call;` where `call` uses the family's
/// input names and the attribute names.
macro_rules! elementwise_family {
    (
        $(#[$meta:meta])* $enum:ident ($($x:ident),+) {
            $( $(#[$vmeta:meta])* $var:ident $(($($a:ident : $aty:ty),+))? => $name:literal, $eval:expr; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $enum {
            $( $(#[$vmeta])* $var $(($($aty),+))?, )*
        }

        impl $enum {
            /// The op's name, as recorded on tapes.
            pub fn name(&self) -> &'static str {
                match self {
                    $( $enum::$var { .. } => $name, )*
                }
            }

            /// Runs the op again through its public method.
            pub fn eval(&self, $($x: &Tensor),+) -> Result<Tensor> {
                match self {
                    $( $enum::$var $(($($a),+))? => { $($( let $a = *$a; )+)? $eval } )*
                }
            }

            /// Its attributes in a listing: `[c]` for one scalar.
            pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $( $enum::$var $(($($a),+))? => {
                        let _ = f;
                        $( let attrs: &[&dyn fmt::Display] = &[$($a),+];
                        write!(f, "[")?;
                        for (i, a) in attrs.iter().enumerate() {
                            if i > 0 { write!(f, ", ")?; }
                            write!(f, "{a}")?;
                        }
                        write!(f, "]")?; )?
                        Ok(())
                    } )*
                }
            }
        }
    };
}

elementwise_family! {
    /// A one-input elementwise op.
    Unary(x) {
        /// `-x`
        Neg => "Neg", x.neg();
        /// `|x|` (of a complex tensor: its modulus)
        Abs => "Abs", x.abs();
        /// modulus of a complex tensor
        ComplexAbs => "ComplexAbs", x.abs();
        /// `-1, 0, 1` by sign
        Sign => "Sign", x.sign();
        /// `x²`
        Square => "Square", x.square();
        /// `√x`
        Sqrt => "Sqrt", x.sqrt();
        /// `1/√x`
        Rsqrt => "Rsqrt", x.rsqrt();
        /// `1/x`
        Reciprocal => "Reciprocal", x.reciprocal();
        /// `eˣ`
        Exp => "Exp", x.exp();
        /// `eˣ - 1`
        Expm1 => "Expm1", x.expm1();
        /// `ln x`
        Log => "Log", x.log();
        /// `ln(1 + x)`
        Log1p => "Log1p", x.log1p();
        /// sine
        Sin => "Sin", x.sin();
        /// cosine
        Cos => "Cos", x.cos();
        /// tangent
        Tan => "Tan", x.tan();
        /// arcsine
        Asin => "Asin", x.asin();
        /// arccosine
        Acos => "Acos", x.acos();
        /// arctangent
        Atan => "Atan", x.atan();
        /// hyperbolic sine
        Sinh => "Sinh", x.sinh();
        /// hyperbolic cosine
        Cosh => "Cosh", x.cosh();
        /// hyperbolic tangent
        Tanh => "Tanh", x.tanh();
        /// inverse hyperbolic sine
        Asinh => "Asinh", x.asinh();
        /// inverse hyperbolic cosine
        Acosh => "Acosh", x.acosh();
        /// inverse hyperbolic tangent
        Atanh => "Atanh", x.atanh();
        /// error function
        Erf => "Erf", x.erf();
        /// complementary error function
        Erfc => "Erfc", x.erfc();
        /// the exact GELU, `x · Φ(x)`
        Gelu => "Gelu", x.gelu(false);
        /// the exact GELU's derivative, `Φ(x) + x · φ(x)`
        GeluGrad => "GeluGrad", x.gelu_grad();
        /// GELU's tanh form, `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`
        GeluTanh => "GeluTanh", x.gelu(true);
        /// the derivative of GELU's tanh form
        GeluTanhGrad => "GeluTanhGrad", x.gelu_tanh_grad();
        /// SiLU (swish), `x · σ(x)`
        Silu => "Silu", x.silu();
        /// SiLU's derivative, `σ(x) · (1 + x · σ(−x))`
        SiluGrad => "SiluGrad", x.silu_grad();
        /// Mish, `x · tanh(softplus(x))`
        Mish => "Mish", x.mish();
        /// Mish's derivative
        MishGrad => "MishGrad", x.mish_grad();
        /// `x − tanh(x)`
        TanhShrink => "TanhShrink", x.tanh_shrink();
        /// round down
        Floor => "Floor", x.floor();
        /// round up
        Ceil => "Ceil", x.ceil();
        /// round half to even
        Round => "Round", x.round();
        /// `1 / (1 + e⁻ˣ)`
        Sigmoid => "Sigmoid", x.sigmoid();
        /// `max(x, 0)`
        Relu => "Relu", x.relu();
        /// `min(max(x, 0), 6)`
        Relu6 => "Relu6", x.relu6();
        /// `x` if positive, else `alpha · x`
        LeakyRelu(alpha: F64) => "LeakyRelu", x.leaky_relu(alpha.0);
        /// exponential linear unit
        Elu => "Elu", x.elu();
        /// scaled exponential linear unit
        Selu => "Selu", x.selu();
        /// `ln(1 + eˣ)`
        Softplus => "Softplus", x.softplus();
        /// `x / (1 + |x|)`
        Softsign => "Softsign", x.softsign();
        /// `clip(x, lo, hi)`
        ClipByValue(lo: F64, hi: F64) => "ClipByValue", x.clip_by_value(lo.0, hi.0);
        /// `xᶜ`
        PowScalar(c: F64) => "PowScalar", x.pow_scalar(c.0);
        /// `x · c`
        MulScalar(c: F64) => "MulScalar", x.mul_scalar(c.0);
        /// `x / c`
        DivScalar(c: F64) => "DivScalar", x.div_scalar(c.0);
        /// `x + c`
        AddScalar(c: F64) => "AddScalar", x.add_scalar(c.0);
        /// `!x` on bool
        LogicalNot => "LogicalNot", x.logical_not();
        /// `!x` on integers (every bit flipped)
        Invert => "Invert", x.invert();
        /// real part of a complex tensor
        Real => "Real", x.real();
        /// imaginary part of a complex tensor
        Imag => "Imag", x.imag();
        /// complex conjugate
        Conj => "Conj", x.conj();
        /// argument of a complex tensor
        Angle => "Angle", x.angle();
    }
}

elementwise_family! {
    /// A two-input elementwise op, broadcasting.
    Binary(a, b) {
        /// `a + b`
        Add => "Add", a.add(b);
        /// `a - b`
        Sub => "Sub", a.sub(b);
        /// `a · b`
        Mul => "Mul", a.mul(b);
        /// `a / b`
        Div => "Div", a.div(b);
        /// `aᵇ`
        Pow => "Pow", a.pow(b);
        /// elementwise maximum
        Maximum => "Maximum", a.maximum(b);
        /// elementwise minimum
        Minimum => "Minimum", a.minimum(b);
        /// `(a - b)²`
        SquaredDifference => "SquaredDifference", a.squared_difference(b);
        /// `atan2(a, b)`
        Atan2 => "Atan2", a.atan2(b);
        /// `⌊a / b⌋`
        FloorDiv => "FloorDiv", a.floor_div(b);
        /// `a - b ⌊a / b⌋`
        FloorMod => "FloorMod", a.floor_mod(b);
        /// `a == b`
        Equal => "Equal", a.eq(b);
        /// `a != b`
        NotEqual => "NotEqual", a.ne(b);
        /// `a < b`
        Less => "Less", a.lt(b);
        /// `a <= b`
        LessEqual => "LessEqual", a.le(b);
        /// `a > b`
        Greater => "Greater", a.gt(b);
        /// `a >= b`
        GreaterEqual => "GreaterEqual", a.ge(b);
        /// `a && b`
        LogicalAnd => "LogicalAnd", a.logical_and(b);
        /// `a || b`
        LogicalOr => "LogicalOr", a.logical_or(b);
        /// `a xor b`
        LogicalXor => "LogicalXor", a.logical_xor(b);
        /// `a & b` on integers
        BitwiseAnd => "BitwiseAnd", a.bitwise_and(b);
        /// `a | b` on integers
        BitwiseOr => "BitwiseOr", a.bitwise_or(b);
        /// `a ^ b` on integers
        BitwiseXor => "BitwiseXor", a.bitwise_xor(b);
        /// `a << b` on integers (the shift clamped to the width)
        LeftShift => "LeftShift", a.left_shift(b);
        /// `a >> b` on integers, arithmetic (the shift clamped to the width)
        RightShift => "RightShift", a.right_shift(b);
        /// `a + i b` from two real tensors
        Complex => "Complex", Tensor::complex(a, b);
        /// relu's gradient: `g` where `x > 0` (`a = g`, `b = x`)
        ReluGrad => "ReluGrad", crate::ops::relu_grad(a, b);
        /// tanh's gradient: `g (1 - y²)` (`a = y`, `b = g`)
        TanhGrad => "TanhGrad", crate::ops::tanh_grad(a, b);
    }
}

impl Unary {
    /// The op on one real number, as the `f64` kernel computes it (for an
    /// interpreter of fused elementwise graphs). Booleans are `0.0` and
    /// `1.0`; the complex-only ops act on a real `x` as on `x + 0i`
    /// (`Real`, `Conj`: `x`; `Imag`: 0; `ComplexAbs`: `|x|`; `Angle`: π
    /// for negative `x`, else 0). E.g. `Square.apply_f64(3.0) == 9.0`.
    pub fn apply_f64(&self, x: f64) -> f64 {
        match self {
            // the functions of the elementwise table, as its `f64` kernel
            op if crate::ops::math::table::defined(op) => crate::ops::math::table::unary_f64(op, x),
            Unary::ComplexAbs => x.abs(),
            Unary::LogicalNot => f64::from(x == 0.0),
            Unary::Invert => !(x as i64) as f64,
            Unary::Real | Unary::Conj => x,
            Unary::Imag => 0.0,
            Unary::Angle => {
                if x < 0.0 {
                    std::f64::consts::PI
                } else {
                    0.0
                }
            }
            op => unreachable!("{op:?} is neither in the elementwise table nor a complex or logical op"),
        }
    }
}

impl Binary {
    /// The op on two real numbers, as the `f64` kernel computes it (for an
    /// interpreter of fused elementwise graphs). Comparisons and logical
    /// ops give `1.0` for true and `0.0` for false (any non-zero input is
    /// true); `Complex`, whose result is not real, gives NaN. E.g.
    /// `FloorMod.apply_f64(-7.0, 3.0) == 2.0`.
    pub fn apply_f64(&self, a: f64, b: f64) -> f64 {
        let truth = |c: bool| f64::from(c);
        match self {
            // the functions of the elementwise table, as its `f64` kernel
            op if crate::ops::math::table::defined_binary(op) => crate::ops::math::table::binary_f64(op, a, b),
            Binary::Equal => truth(a == b),
            Binary::NotEqual => truth(a != b),
            Binary::Less => truth(a < b),
            Binary::LessEqual => truth(a <= b),
            Binary::Greater => truth(a > b),
            Binary::GreaterEqual => truth(a >= b),
            Binary::LogicalAnd => truth(a != 0.0 && b != 0.0),
            Binary::LogicalOr => truth(a != 0.0 || b != 0.0),
            Binary::LogicalXor => truth((a != 0.0) != (b != 0.0)),
            Binary::BitwiseAnd => ((a as i64) & (b as i64)) as f64,
            Binary::BitwiseOr => ((a as i64) | (b as i64)) as f64,
            Binary::BitwiseXor => ((a as i64) ^ (b as i64)) as f64,
            Binary::LeftShift => (a as i64).wrapping_shl((b as i64).clamp(0, 63) as u32) as f64,
            Binary::RightShift => (a as i64).wrapping_shr((b as i64).clamp(0, 63) as u32) as f64,
            Binary::Complex => f64::NAN,
            op => unreachable!("{op:?} is in the elementwise table"),
        }
    }
}
