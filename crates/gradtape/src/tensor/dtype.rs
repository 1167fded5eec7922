//! Element types and the typed buffers that hold them.
//!
//! # Half precision
//!
//! `F16` and `BF16` are storage types, as in TensorFlow's CPU kernels: each
//! elementwise operation converts its operands to `f32`, computes, and
//! rounds the result back (round to nearest, ties to even), which is what
//! the `half` crate's arithmetic and `num_traits::Float` methods do, so the
//! generic kernels serve them unchanged. Reductions accumulate in `f32` and
//! round once at the end (as JAX's do; TensorFlow's `reduce_sum` and
//! `reduce_mean` of `float16` overflow as soon as a partial sum passes
//! 65504, so `sum([60000, 60000, -60000])` is 60000 here and inf there);
//! matrix products and convolutions convert their
//! operands to `f32`, run the `f32` kernel (an `f32` accumulator) and round
//! the result. Gradients of half tensors are half tensors. For training,
//! see [`LossScaleOptimizer`](crate::optim::LossScaleOptimizer) (dynamic
//! loss scaling) and the `f32` master-weights pattern documented there.

use std::fmt;

pub use half::{bf16, f16};
pub use num_complex::Complex;

/// The element type of a tensor.
///
/// `F32` and `F64` are differentiable, and so are the half-precision types
/// `F16` and `BF16` (TensorFlow's `float16`/`bfloat16`, held as the `half`
/// crate's [`f16`](struct@f16)/[`bf16`]; the [`dtype`](crate::tensor::dtype) module's
/// notes say how they are computed) and the complex types `C64` and `C128` (TensorFlow's
/// `complex64`/`complex128`, held as [`Complex<f32>`]/[`Complex<f64>`]); the
/// integer types and `Bool` carry indices and masks and never receive
/// gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float (differentiable).
    F32,
    /// 64-bit float (differentiable).
    F64,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Boolean (masks).
    Bool,
    /// Complex number of two `f32` (TensorFlow's `complex64`; differentiable).
    C64,
    /// Complex number of two `f64` (TensorFlow's `complex128`; differentiable).
    C128,
    /// IEEE 754 half precision (TensorFlow's `float16`; differentiable).
    F16,
    /// bfloat16: `f32`'s exponent with 8 bits of significand (TensorFlow's
    /// `bfloat16`; differentiable).
    BF16,
}

impl DType {
    /// Whether this is a real floating-point type (`F32`, `F64`, `F16`,
    /// `BF16`): gradients flow through them.
    #[inline]
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Whether this is a half-precision type (`F16` or `BF16`), computed by
    /// converting to `f32` and rounding back.
    #[inline]
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// Whether this is a complex type (`C64` or `C128`).
    #[inline]
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// Whether gradients flow through values of this type: the float and
    /// the complex types (as TensorFlow's tapes, which watch both).
    #[inline]
    pub fn is_differentiable(self) -> bool {
        matches!(
            self,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::C64 | DType::C128
        )
    }

    /// The real type of the parts of a complex type (`C64 -> F32`,
    /// `C128 -> F64`); any other type is its own real type.
    pub fn real_dtype(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// The complex type with parts of this float type (`F32 -> C64`,
    /// `F64 -> C128`, complex types unchanged); `None` for the others.
    pub fn complex_dtype(self) -> Option<DType> {
        match self {
            DType::F32 | DType::C64 => Some(DType::C64),
            DType::F64 | DType::C128 => Some(DType::C128),
            _ => None,
        }
    }

    /// Whether this is an integer type.
    #[inline]
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 | DType::C64 => 8,
            DType::Bool => 1,
            DType::C128 => 16,
        }
    }

    /// The lower-case name used in `Display` (`f32`, `i64`, ...; the complex
    /// types are `complex64` and `complex128`, as in TensorFlow).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The elements of a [`Storage`]: up to two live inline, so that scalars
/// (the common case in per-op-overhead-bound code) cost no allocation of
/// their own; larger buffers are on the heap, as a `Vec` would be.
#[doc(hidden)]
pub type Buf<T> = smallvec::SmallVec<[T; 2]>;

/// A typed, contiguous buffer shared by tensor views (an implementation
/// detail, public only because [`Element`] names it).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Storage {
    F32(Buf<f32>),
    F64(Buf<f64>),
    I32(Buf<i32>),
    I64(Buf<i64>),
    Bool(Buf<bool>),
    C64(Buf<Complex<f32>>),
    C128(Buf<Complex<f64>>),
    F16(Buf<f16>),
    BF16(Buf<bf16>),
}

impl Storage {
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::I32(_) => DType::I32,
            Storage::I64(_) => DType::I64,
            Storage::Bool(_) => DType::Bool,
            Storage::C64(_) => DType::C64,
            Storage::C128(_) => DType::C128,
            Storage::F16(_) => DType::F16,
            Storage::BF16(_) => DType::BF16,
        }
    }

    /// The number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Storage::F32(v) => v.len(),
            Storage::F64(v) => v.len(),
            Storage::I32(v) => v.len(),
            Storage::I64(v) => v.len(),
            Storage::Bool(v) => v.len(),
            Storage::C64(v) => v.len(),
            Storage::C128(v) => v.len(),
            Storage::F16(v) => v.len(),
            Storage::BF16(v) => v.len(),
        }
    }

    /// Whether the elements sit inline (no heap buffer of their own).
    pub(crate) fn is_inline(&self) -> bool {
        match self {
            Storage::F32(v) => !v.spilled(),
            Storage::F64(v) => !v.spilled(),
            Storage::I32(v) => !v.spilled(),
            Storage::I64(v) => !v.spilled(),
            Storage::Bool(v) => !v.spilled(),
            Storage::C64(v) => !v.spilled(),
            Storage::C128(v) => !v.spilled(),
            Storage::F16(v) => !v.spilled(),
            Storage::BF16(v) => !v.spilled(),
        }
    }
}

/// A Rust type that can be the element of a tensor.
///
/// Implemented for `f32`, `f64`, [`f16`](struct@f16), [`bf16`], `i32`, `i64`, `bool`,
/// [`Complex<f32>`] and [`Complex<f64>`]. Elements need not be ordered (complex numbers are not):
/// [`Num`] and [`Float`] are.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// The dtype of tensors holding this type.
    const DTYPE: DType;
    #[doc(hidden)]
    fn into_storage(v: Vec<Self>) -> Storage;
    #[doc(hidden)]
    fn buf_into_storage(v: Buf<Self>) -> Storage;
    /// Moves the buffer out of a storage of this type (leaving it empty).
    #[doc(hidden)]
    fn take_buf(s: &mut Storage) -> Option<Buf<Self>>;
    #[doc(hidden)]
    fn slice(s: &Storage) -> Option<&[Self]>;
    #[doc(hidden)]
    fn slice_mut(s: &mut Storage) -> Option<&mut [Self]>;
    /// Converts from `f64` (rounding or truncating as `as` does; a complex
    /// element gets imaginary part 0).
    fn from_f64(x: f64) -> Self;
    /// Converts to `f64` (a complex element gives its real part).
    fn to_f64(self) -> f64;
    /// Converts to a complex number (imaginary part 0 unless complex).
    #[inline]
    fn to_c128(self) -> Complex<f64> {
        Complex::new(self.to_f64(), 0.0)
    }
    /// Converts from a complex number (the real part unless complex).
    #[inline]
    fn from_c128(c: Complex<f64>) -> Self {
        Self::from_f64(c.re)
    }
    /// Writes the element as `Display` shows it inside a tensor.
    #[doc(hidden)]
    fn fmt_elem(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// `Element` for one storage variant; `$extra` overrides provided methods.
macro_rules! element {
    ($t:ty, $variant:ident, |$x:ident| $from:expr, |$y:ident| $to:expr $(, { $($extra:item)* })?) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            #[inline]
            fn into_storage(v: Vec<Self>) -> Storage {
                Storage::$variant(Buf::from_vec(v))
            }
            #[inline]
            fn buf_into_storage(v: Buf<Self>) -> Storage {
                Storage::$variant(v)
            }
            fn take_buf(s: &mut Storage) -> Option<Buf<Self>> {
                match s {
                    Storage::$variant(v) => Some(std::mem::take(v)),
                    _ => None,
                }
            }
            #[inline]
            fn slice(s: &Storage) -> Option<&[Self]> {
                match s {
                    Storage::$variant(v) => Some(&**v), // (by `Deref`: `SmallVec`'s indexing is not inlined)
                    _ => None,
                }
            }
            #[inline]
            fn slice_mut(s: &mut Storage) -> Option<&mut [Self]> {
                match s {
                    Storage::$variant(v) => Some(&mut **v),
                    _ => None,
                }
            }
            #[inline]
            fn from_f64($x: f64) -> Self {
                $from
            }
            #[inline]
            fn to_f64(self) -> f64 {
                let $y = self;
                $to
            }
            $($($extra)*)?
        }
    };
}

element!(f32, F32, |x| x as f32, |y| y as f64);
element!(f64, F64, |x| x, |y| y);
element!(i32, I32, |x| x as i32, |y| y as f64);
element!(i64, I64, |x| x as i64, |y| y as f64);
element!(bool, Bool, |x| x != 0.0, |y| if y { 1.0 } else { 0.0 });

/// The complex elements, `Complex<f32>` and `Complex<f64>`, written like
/// Python's complex numbers in `Display`: `(1.0+2.0j)`.
macro_rules! element_complex {
    ($t:ty, $variant:ident) => {
        element!(
            Complex<$t>,
            $variant,
            |x| Complex::new(x as $t, 0.0),
            |y| y.re as f64,
            {
                #[inline]
                fn to_c128(self) -> Complex<f64> {
                    Complex::new(self.re as f64, self.im as f64)
                }
                #[inline]
                fn from_c128(c: Complex<f64>) -> Self {
                    Complex::new(c.re as $t, c.im as $t)
                }
                fn fmt_elem(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    let sign = if self.im.is_sign_negative() && !self.im.is_nan() {
                        '-'
                    } else {
                        '+'
                    };
                    write!(f, "({:?}{sign}{:?}j)", self.re, self.im.abs())
                }
            }
        );
    };
}
element_complex!(f32, C64);
element_complex!(f64, C128);

/// The half-precision elements. Conversions from `f64` go through `f32`, as
/// TensorFlow's (Eigen's) do: `1 + 2^-11 + 2^-40` becomes `1.0` in `f16`
/// (through `f32`'s tie, to even), not `1.0009765625` as a direct rounding
/// gives. `Display` writes the shortest decimal that reads back as the same
/// half value, as NumPy's `repr` of `float16` does (`0.1`, not
/// `0.099975586`).
macro_rules! element_half {
    ($t:ty, $variant:ident) => {
        element!($t, $variant, |x| <$t>::from_f32(x as f32), |y| y.to_f64(), {
            fn fmt_elem(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "{:?}",
                    shortest_f32(self.to_f32(), |v| <$t>::from_f32(v) == *self)
                )
            }
        });
    };
}
element_half!(f16, F16);
element_half!(bf16, BF16);

/// The `f32` with the fewest significant decimal digits for which `same`
/// holds (`x` itself when none shorter does, and for NaN and infinities).
fn shortest_f32(x: f32, same: impl Fn(f32) -> bool) -> f32 {
    if !x.is_finite() {
        return x;
    }
    for digits in 0..9 {
        if let Ok(v) = format!("{x:.digits$e}").parse::<f32>()
            && same(v)
        {
            return v;
        }
    }
    x
}

/// A floating-point element: the types gradients flow through.
pub trait Float:
    Element
    + num_traits::Float
    + std::iter::Sum
    + Default
    + crate::kernels::cpu::gemm_crates::Gemm
    + crate::kernels::cpu::scratch::Local
{
}
impl Float for f32 {}
impl Float for f64 {}
impl Float for f16 {}
impl Float for bf16 {}

/// A real numeric (non-bool, non-complex) element.
///
/// Integer arithmetic wraps on overflow (as TensorFlow's kernels do) rather
/// than panicking in debug builds.
pub trait Num: Element + PartialOrd + num_traits::Num + num_traits::NumCast + Default {
    /// `self + o`, wrapping for integers.
    fn add_wrap(self, o: Self) -> Self;
    /// `self - o`, wrapping for integers.
    fn sub_wrap(self, o: Self) -> Self;
    /// `self * o`, wrapping for integers.
    fn mul_wrap(self, o: Self) -> Self;
    /// `-self`: the sign flipped for floats (`-0` of `0`, as IEEE and
    /// TensorFlow's `negative`), wrapping for integers.
    fn neg_wrap(self) -> Self;
    /// `|self|`: the sign cleared for floats (`|-0| = 0`, as TensorFlow's
    /// `abs`), wrapping for integers (`|i64::MIN|` is itself).
    fn abs_wrap(self) -> Self;
}

macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            #[inline(always)]
            fn add_wrap(self, o: Self) -> Self { self + o }
            #[inline(always)]
            fn sub_wrap(self, o: Self) -> Self { self - o }
            #[inline(always)]
            fn mul_wrap(self, o: Self) -> Self { self * o }
            #[inline(always)]
            fn neg_wrap(self) -> Self { -self }
            #[inline(always)]
            fn abs_wrap(self) -> Self { num_traits::Float::abs(self) }
        }
    )*};
}
macro_rules! num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            #[inline(always)]
            fn add_wrap(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn sub_wrap(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)]
            fn mul_wrap(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn neg_wrap(self) -> Self { self.wrapping_neg() }
            #[inline(always)]
            fn abs_wrap(self) -> Self { self.wrapping_abs() }
        }
    )*};
}
num_float!(f32, f64, f16, bf16);
num_int!(i32, i64);

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`, for the
/// listed dtypes; `$other` handles the rest.
macro_rules! with_types {
    ($dtype:expr, $T:ident => $body:expr, [$($v:ident: $t:ty),*], _ => $other:expr) => {
        match $dtype {
            $($crate::tensor::DType::$v => {
                type $T = $t;
                $body
            })*
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}

/// [`with_types!`] over every dtype, complex included (so `$body` may use
/// only what [`Element`] gives: no ordering).
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body,
            [F32: f32, F64: f64, I32: i32, I64: i64, Bool: bool,
             F16: $crate::tensor::dtype::f16, BF16: $crate::tensor::dtype::bf16,
             C64: $crate::tensor::dtype::Complex<f32>, C128: $crate::tensor::dtype::Complex<f64>],
            _ => unreachable!())
    };
}

/// [`with_types!`] over the real (ordered) dtypes; `$other` handles the
/// complex ones.
macro_rules! with_real_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body,
            [F32: f32, F64: f64, I32: i32, I64: i64, Bool: bool,
             F16: $crate::tensor::dtype::f16, BF16: $crate::tensor::dtype::bf16], _ => $other)
    };
}

/// [`with_types!`] over the complex dtypes; `$other` handles the rest.
macro_rules! with_complex_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body,
            [C64: $crate::tensor::dtype::Complex<f32>, C128: $crate::tensor::dtype::Complex<f64>], _ => $other)
    };
}

/// [`with_types!`] over the real numeric dtypes; `$other` handles `Bool`
/// and the complex dtypes.
macro_rules! with_num_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body,
            [F32: f32, F64: f64, I32: i32, I64: i64,
             F16: $crate::tensor::dtype::f16, BF16: $crate::tensor::dtype::bf16], _ => $other)
    };
}

/// [`with_types!`] over the float dtypes; `$other` handles the rest.
macro_rules! with_float_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body,
            [F32: f32, F64: f64, F16: $crate::tensor::dtype::f16, BF16: $crate::tensor::dtype::bf16], _ => $other)
    };
}

pub(crate) use {with_complex_dtype, with_dtype, with_float_dtype, with_num_dtype, with_real_dtype, with_types};
