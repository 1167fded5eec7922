//! Op descriptors: what an op computes, as plain data.
//!
//! Every op hands [`bind`](super::bind) a descriptor ([`Op`]): its family,
//! its variant and its attributes (axes, scalars, flags, shapes). A tape
//! ignores it; a trace (see `crate::function`) stores it in a graph node,
//! where it serves three readers:
//!
//! - the **executor**, which re-runs the node with [`Op::eval`] (the public
//!   op again, so a re-run is recorded by whatever tapes are active);
//! - the **optimiser**, which matches on it: which ops are elementwise and
//!   what they compute ([`Unary`], [`Binary`]), which are reductions,
//!   products, shape ops; and compares descriptors for equality to find
//!   common subexpressions (hence `Eq` and `Hash`, with floats compared by
//!   their bits);
//! - people, through `Display` (a node prints as `Sum[axes=[0], keepdims]`).
//!
//! Descriptors are built only when a trace is active: `bind` takes them as a
//! [`Describe`] value whose name is read on every call and whose
//! [`Op`] is made only for a trace, so the untraced path pays nothing.
//!
//! Families live in their own files; an op with no descriptor yet binds with
//! its bare name, and tracing it is an error naming it (never a silent
//! constant).

mod create;
mod decomp;
pub(crate) mod elementwise;
mod fft;
mod image;
mod linalg;
mod nn;
mod sort;
mod special;
mod structural;

use std::fmt;
use std::sync::Arc;

pub use create::{CreateOp, Distribution};
pub use decomp::DecompOp;
pub use elementwise::{Binary, Unary};
pub use fft::FftOp;
pub use image::{ImageOp, ResizeAttrs};
pub use linalg::LinalgOp;
pub use nn::{Conv3Attrs, ConvAttrs, NnOp, Pool3Attrs, PoolAttrs};
pub use sort::{SegmentKind, SortOp};
pub use special::SpecialOp;
pub use structural::{Reduce, ReduceKind, Scan, ScanKind, ShapeOp};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A float attribute compared and hashed by its bits (so that descriptors
/// are `Eq` and `Hash`; `-0.0` and `0.0` differ, NaN equals itself).
#[derive(Clone, Copy, Debug)]
pub struct F64(pub f64);

impl PartialEq for F64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for F64 {}
impl std::hash::Hash for F64 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state)
    }
}
impl fmt::Display for F64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A value of a type this layer cannot name (a graph nested in an op).
pub type Erased = Arc<dyn std::any::Any + Send + Sync>;

/// Outputs of one op (most have one; up to two are held inline).
pub type Outputs = smallvec::SmallVec<[Tensor; 2]>;

/// An op defined above the op layer (function calls, control flow, variable
/// reads and writes): it evaluates itself and says whether it has effects.
///
/// `Any` lets an executor recognise the ops it runs its own way (a fused
/// kernel it lets write into a dying input's buffer).
pub trait DynOp: Send + Sync + std::any::Any {
    /// The op's name (as in a listing).
    fn name(&self) -> &'static str;
    /// Runs the op on its inputs.
    fn eval(&self, inputs: &[Tensor]) -> Result<Outputs>;
    /// Whether the op reads or writes state (never merged, reordered or
    /// removed by an optimiser).
    fn stateful(&self) -> bool;
    /// Whether running it may write state that a later read sees (a
    /// variable): a stateful op unless it says otherwise (a variable read,
    /// a fresh random draw, control flow and calls whose graphs write
    /// nothing). Control flow whose sub-graphs write nothing reads its
    /// variables once, in front of it (`function::control::hoist`).
    fn writes(&self) -> bool {
        self.stateful()
    }
    /// Its attributes for a listing (after the name), e.g. `[var=w]`.
    fn fmt_attrs(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
    /// Graphs nested in the op (a branch, a loop body, a called function),
    /// with a label each, for listings. A graph is a type of the layer above
    /// (`function::Graph`), so it is handed over type-erased.
    fn subgraphs(&self) -> Vec<(String, Erased)> {
        Vec::new()
    }
    /// Whether its outputs' shapes follow from its inputs' shapes alone, so
    /// that a graph compiler may plan with the shapes seen when tracing. A
    /// loop whose variables change shape, or branches that return different
    /// shapes, do not.
    fn static_shapes(&self) -> bool {
        true
    }
    /// Where [`static_shapes`](Self::static_shapes) is false: which
    /// outputs may change shape from run to run (the others' shapes still
    /// follow from the inputs'), or `None` where any may. A compiler plans
    /// around such outputs where only nodes that ignore their shapes read
    /// them (see [`ignores_shape_of`](Self::ignores_shape_of)): a loop's
    /// history, whose length is the iteration count, read only by the
    /// loop's gradient.
    fn dynamic_outputs(&self) -> Option<Vec<bool>> {
        None
    }
    /// Whether input `i`'s shape never changes the shapes of its outputs
    /// (which the node checks when it runs), so that the input may be one
    /// of [`dynamic_outputs`](Self::dynamic_outputs).
    fn ignores_shape_of(&self, _i: usize) -> bool {
        false
    }
    /// Whether input `i` may be handed over unscaled with its scalar
    /// factor beside it (see [`with_input_scales`](Self::with_input_scales)):
    /// an optimizer step's dense `f32`/`f64` gradient, which its update
    /// loop multiplies as it reads it.
    fn scalable_input(&self, _i: usize) -> bool {
        false
    }
    /// The op reading each input `i` with `scaled[i]` as `x · s` instead,
    /// where `x` is what that input now receives and `s` a scalar of its
    /// dtype, one appended to the inputs per scaled input, in order; every
    /// result the same bits as the op applied to the products (each
    /// product rounded once, as a `Mul` node rounds it). `None`: the op
    /// cannot (the default; or an input not
    /// [`scalable_input`](Self::scalable_input) is marked).
    fn with_input_scales(&self, _scaled: &[bool]) -> Option<std::sync::Arc<dyn DynOp>> {
        None
    }
}

/// What an op computes: its family, variant and attributes.
#[derive(Clone)]
pub enum Op {
    /// One-input elementwise function (`neg`, `exp`, `mul_scalar(c)`, ...).
    Unary(Unary),
    /// Two-input elementwise function with broadcasting (`add`, `maximum`,
    /// comparisons, ...).
    Binary(Binary),
    /// `where_(cond, a, b)`, elementwise with broadcasting.
    Select,
    /// A conversion to another dtype.
    Cast(crate::tensor::DType),
    /// A reduction over axes.
    Reduce(Reduce),
    /// A cumulative sum or product along one axis.
    Scan(Scan),
    /// Matrix product (batched), with its transpose flags.
    MatMul {
        /// `a` is used transposed.
        transpose_a: bool,
        /// `b` is used transposed.
        transpose_b: bool,
    },
    /// An op that moves or views data without arithmetic.
    Shape(ShapeOp),
    /// A linear-algebra op (decompositions, solves, products).
    Linalg(LinalgOp),
    /// A neural-network op (softmax, cross-entropies, convolution, pooling).
    Nn(NnOp),
    /// An image op (resizing and its gradients).
    Image(ImageOp),
    /// A tensor made from attributes: random draws, one-hot encodings.
    Create(CreateOp),
    /// A sorting, searching or grouping op (argsort, unique, segments).
    Sort(SortOp),
    /// A complex Fourier transform.
    Fft(FftOp),
    /// An output of a decomposition (eigh, svd, qr, lu), or `matrix_exp`.
    Decomp(DecompOp),
    /// A special function (elementwise on broadcast operands).
    Special(SpecialOp),
    /// A constant: a tensor the graph holds.
    Const(Tensor),
    /// An op defined above the op layer.
    Dyn(Arc<dyn DynOp>),
    /// An op that has no descriptor yet: it cannot be traced.
    Opaque(&'static str),
}

impl Op {
    /// The descriptor of a dynamic op of type `T` (a graph compiler's own
    /// nodes, a variable write), if this is one: the typed way to recognise
    /// an op a layer above defines, instead of comparing names.
    pub(crate) fn as_dyn<T: DynOp>(&self) -> Option<&T> {
        match self {
            Op::Dyn(d) => {
                let any: &dyn std::any::Any = &**d;
                any.downcast_ref::<T>()
            }
            _ => None,
        }
    }

    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Select => "Select",
            Op::Cast(_) => "Cast",
            Op::Reduce(r) => r.name(),
            Op::Scan(s) => s.name(),
            Op::MatMul { .. } => "MatMul",
            Op::Shape(s) => s.name(),
            Op::Linalg(l) => l.name(),
            Op::Nn(n) => n.name(),
            Op::Image(o) => o.name(),
            Op::Create(c) => c.name(),
            Op::Sort(o) => o.name(),
            Op::Fft(o) => o.name(),
            Op::Decomp(o) => o.name(),
            Op::Special(o) => o.name(),
            Op::Const(_) => "Const",
            Op::Dyn(d) => d.name(),
            Op::Opaque(n) => n,
        }
    }

    /// Runs the op on `inputs` (through the public op, so active tapes and
    /// traces see the run).
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let one = |t: Result<Tensor>| t.map(|t| smallvec::smallvec![t]);
        let arity = |n: usize| -> Result<()> {
            if inputs.len() == n {
                Ok(())
            } else {
                Err(Error::invalid(
                    self.name(),
                    format!("expects {n} inputs, got {}", inputs.len()),
                ))
            }
        };
        match self {
            Op::Unary(u) => {
                arity(1)?;
                one(u.eval(&inputs[0]))
            }
            Op::Binary(b) => {
                arity(2)?;
                one(b.eval(&inputs[0], &inputs[1]))
            }
            Op::Select => {
                arity(3)?;
                one(Tensor::where_(&inputs[0], &inputs[1], &inputs[2]))
            }
            Op::Cast(d) => {
                arity(1)?;
                one(inputs[0].cast(*d))
            }
            Op::Reduce(r) => {
                arity(1)?;
                one(r.eval(&inputs[0]))
            }
            Op::Scan(s) => {
                arity(1)?;
                one(s.eval(&inputs[0]))
            }
            Op::MatMul {
                transpose_a,
                transpose_b,
            } => {
                arity(2)?;
                one(inputs[0].matmul_with(&inputs[1], *transpose_a, *transpose_b))
            }
            Op::Shape(s) => s.eval(inputs),
            Op::Linalg(l) => l.eval(inputs),
            Op::Nn(n) => n.eval(inputs),
            Op::Image(o) => o.eval(inputs),
            Op::Create(c) => c.eval(inputs),
            Op::Sort(o) => o.eval(inputs),
            Op::Fft(o) => o.eval(inputs),
            Op::Decomp(o) => o.eval(inputs),
            Op::Special(o) => o.eval(inputs),
            Op::Const(t) => {
                arity(0)?;
                Ok(smallvec::smallvec![t.clone()])
            }
            Op::Dyn(d) => d.eval(inputs),
            Op::Opaque(n) => Err(Error::invalid(n, "this op cannot be traced into a graph yet")),
        }
    }

    /// Whether the op has effects or reads state (see [`DynOp::stateful`]).
    pub fn is_stateful(&self) -> bool {
        match self {
            Op::Dyn(d) => d.stateful(),
            // an op without a descriptor is never merged or moved
            Op::Opaque(_) => true,
            _ => false,
        }
    }

    /// Whether the op is elementwise (the optimiser's fusion candidates).
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast(_) | Op::Special(_)
        )
    }

    /// The identity used for equality: descriptors are equal when the ops
    /// compute the same function of their inputs.
    fn key(&self) -> Key<'_> {
        match self {
            Op::Unary(u) => Key::Unary(u),
            Op::Binary(b) => Key::Binary(b),
            Op::Select => Key::Select,
            Op::Cast(d) => Key::Cast(*d),
            Op::Reduce(r) => Key::Reduce(r),
            Op::Scan(s) => Key::Scan(s),
            Op::MatMul {
                transpose_a,
                transpose_b,
            } => Key::MatMul(*transpose_a, *transpose_b),
            Op::Shape(s) => Key::Shape(s),
            Op::Linalg(l) => Key::Linalg(l),
            Op::Nn(n) => Key::Nn(n),
            Op::Image(o) => Key::Image(o),
            Op::Create(c) => Key::Create(c),
            Op::Sort(o) => Key::Sort(o),
            Op::Fft(o) => Key::Fft(*o),
            Op::Decomp(o) => Key::Decomp(*o),
            Op::Special(o) => Key::Special(*o),
            Op::Const(t) => Key::Const(t.id()),
            Op::Dyn(d) => Key::Dyn(Arc::as_ptr(d) as *const () as usize),
            Op::Opaque(n) => Key::Opaque(n),
        }
    }
}

#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    Unary(&'a Unary),
    Binary(&'a Binary),
    Select,
    Cast(crate::tensor::DType),
    Reduce(&'a Reduce),
    Scan(&'a Scan),
    MatMul(bool, bool),
    Shape(&'a ShapeOp),
    Linalg(&'a LinalgOp),
    Nn(&'a NnOp),
    Image(&'a ImageOp),
    Create(&'a CreateOp),
    Sort(&'a SortOp),
    Fft(FftOp),
    Decomp(DecompOp),
    Special(SpecialOp),
    Const(crate::tensor::TensorId),
    Dyn(usize),
    Opaque(&'a str),
}

impl PartialEq for Op {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Op {}
impl std::hash::Hash for Op {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            Op::Unary(u) => u.fmt_attrs(f),
            Op::Binary(b) => b.fmt_attrs(f),
            Op::Select | Op::Opaque(_) => Ok(()),
            Op::Cast(d) => write!(f, "[{d}]"),
            Op::Reduce(r) => r.fmt_attrs(f),
            Op::Scan(s) => s.fmt_attrs(f),
            Op::MatMul {
                transpose_a,
                transpose_b,
            } => match (transpose_a, transpose_b) {
                (false, false) => Ok(()),
                (a, b) => write!(f, "[transpose_a={a}, transpose_b={b}]"),
            },
            Op::Shape(s) => s.fmt_attrs(f),
            Op::Linalg(l) => l.fmt_attrs(f),
            Op::Nn(n) => n.fmt_attrs(f),
            Op::Image(o) => o.fmt_attrs(f),
            Op::Create(c) => c.fmt_attrs(f),
            Op::Sort(o) => o.fmt_attrs(f),
            Op::Fft(o) => o.fmt_attrs(f),
            Op::Decomp(o) => o.fmt_attrs(f),
            Op::Special(o) => o.fmt_attrs(f),
            Op::Const(t) if t.numel() <= 4 => write!(f, "[{}]", crate::tensor::display::values_only(t)),
            Op::Const(t) => write!(f, "[{}{:?}]", t.dtype(), t.shape()),
            Op::Dyn(d) => d.fmt_attrs(f),
        }
    }
}

/// The one input of a one-input op, or an error naming it.
pub(crate) fn one_input<'a>(op: &'static str, inputs: &'a [Tensor]) -> Result<&'a Tensor> {
    match inputs {
        [x] => Ok(x),
        _ => Err(Error::invalid(op, format!("expects 1 input, got {}", inputs.len()))),
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

pub(crate) use crate::dispatch::Describe;
use crate::dispatch::Descriptor;

impl From<Op> for Descriptor {
    fn from(op: Op) -> Self {
        Descriptor(Box::new(op))
    }
}

impl Describe for Op {
    #[inline]
    fn name(&self) -> &'static str {
        Op::name(self)
    }
    fn descriptor(&self) -> Descriptor {
        self.clone().into()
    }
}

/// A bare name: an op without a descriptor yet (tracing it is an error).
impl Describe for &'static str {
    #[inline]
    fn name(&self) -> &'static str {
        self
    }
    fn descriptor(&self) -> Descriptor {
        Op::Opaque(self).into()
    }
}

/// A name and a closure that builds the descriptor (for descriptors that
/// copy attributes, built only when traced).
pub(crate) struct Lazy<F>(pub &'static str, pub F);

impl<F: Fn() -> Op> Describe for Lazy<F> {
    #[inline]
    fn name(&self) -> &'static str {
        self.0
    }
    fn descriptor(&self) -> Descriptor {
        (self.1)().into()
    }
}

macro_rules! describe_family {
    ($($t:ident => $v:ident),*) => {$(
        impl Describe for $t {
            #[inline]
            fn name(&self) -> &'static str {
                $t::name(self)
            }
            fn descriptor(&self) -> Descriptor {
                Op::$v(self.clone()).into()
            }
        }
    )*};
}
describe_family!(Unary => Unary, Binary => Binary, Scan => Scan, ShapeOp => Shape, LinalgOp => Linalg, NnOp => Nn, ImageOp => Image, CreateOp => Create, SortOp => Sort);
