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

/// A typed, contiguous buffer shared by tensor views (an implementation
/// detail, public only because [`Element`] names it).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Storage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
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
                Storage::$variant(v)
            }
            #[inline]
            fn slice(s: &Storage) -> Option<&[Self]> {
                match s {
                    Storage::$variant(v) => Some(v),
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
pub trait Num: Element + num_traits::Num + num_traits::NumCast + Default {}
impl Num for f32 {}
impl Num for f64 {}
impl Num for i32 {}
impl Num for i64 {}

/// Runs `$body` with `$T` bound to the Rust type of a dtype, for every dtype.
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::tensor::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::tensor::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::tensor::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}

/// Like [`with_dtype!`] for the numeric dtypes; `$other` handles `Bool`.
macro_rules! with_num_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::tensor::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::tensor::DType::I64 => {
                type $T = i64;
                $body
            }
            _ => $other,
        }
    };
}

/// Like [`with_dtype!`] for the float dtypes; `$other` handles the rest.
macro_rules! with_float_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            $crate::tensor::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::tensor::DType::F64 => {
                type $T = f64;
                $body
            }
            _ => $other,
        }
    };
}

pub(crate) use {with_dtype, with_float_dtype, with_num_dtype};
