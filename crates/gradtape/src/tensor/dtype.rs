//! Element types and the typed buffers that hold them.

use std::fmt;

/// The element type of a tensor.
///
/// `F32` and `F64` are differentiable; the integer types and `Bool` carry
/// indices and masks and never receive gradients.
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
}

impl DType {
    /// Whether gradients can flow through values of this type.
    #[inline]
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// Whether this is an integer type.
    #[inline]
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// The lower-case name used in `Display` (`f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
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
}

impl Storage {
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::I32(_) => DType::I32,
            Storage::I64(_) => DType::I64,
            Storage::Bool(_) => DType::Bool,
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
        }
    }
}

/// A Rust type that can be the element of a tensor.
///
/// Implemented for `f32`, `f64`, `i32`, `i64` and `bool`.
pub trait Element: Copy + Send + Sync + PartialEq + PartialOrd + fmt::Debug + 'static {
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
    /// Converts from `f64` (rounding or truncating as `as` does).
    fn from_f64(x: f64) -> Self;
    /// Converts to `f64`.
    fn to_f64(self) -> f64;
}

macro_rules! element {
    ($t:ty, $variant:ident, |$x:ident| $from:expr, |$y:ident| $to:expr) => {
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
                    Storage::$variant(v) => Some(&v[..]),
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
        }
    };
}

element!(f32, F32, |x| x as f32, |y| y as f64);
element!(f64, F64, |x| x, |y| y);
element!(i32, I32, |x| x as i32, |y| y as f64);
element!(i64, I64, |x| x as i64, |y| y as f64);
element!(bool, Bool, |x| x != 0.0, |y| if y { 1.0 } else { 0.0 });

/// A floating-point element: the types gradients flow through.
pub trait Float: Element + num_traits::Float + std::iter::Sum + Default {}
impl Float for f32 {}
impl Float for f64 {}

/// A numeric (non-bool) element.
///
/// Integer arithmetic wraps on overflow (as TensorFlow's kernels do) rather
/// than panicking in debug builds.
pub trait Num: Element + num_traits::Num + num_traits::NumCast + Default {
    /// `self + o`, wrapping for integers.
    fn add_wrap(self, o: Self) -> Self;
    /// `self - o`, wrapping for integers.
    fn sub_wrap(self, o: Self) -> Self;
    /// `self * o`, wrapping for integers.
    fn mul_wrap(self, o: Self) -> Self;
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
        }
    )*};
}
num_float!(f32, f64);
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

/// [`with_types!`] over every dtype.
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body,
            [F32: f32, F64: f64, I32: i32, I64: i64, Bool: bool], _ => unreachable!())
    };
}

/// [`with_types!`] over the numeric dtypes; `$other` handles `Bool`.
macro_rules! with_num_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body,
            [F32: f32, F64: f64, I32: i32, I64: i64], _ => $other)
    };
}

/// [`with_types!`] over the float dtypes; `$other` handles the rest.
macro_rules! with_float_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::tensor::dtype::with_types!($dtype, $T => $body, [F32: f32, F64: f64], _ => $other)
    };
}

pub(crate) use {with_dtype, with_float_dtype, with_num_dtype, with_types};
