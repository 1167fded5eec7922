//! Descriptors of reductions ([`Reduce`]), cumulative scans ([`Scan`]) and
//! of the ops that move or view data without arithmetic ([`ShapeOp`]).

use std::fmt;

use smallvec::SmallVec;

use super::{Outputs, F64};
use crate::error::Result;
use crate::tensor::Tensor;

/// Axes as given by the caller (negative allowed), inline up to four.
pub type Axes = SmallVec<[isize; 4]>;
/// Dimension sizes, inline up to four.
pub type Dims = SmallVec<[usize; 4]>;
/// A strided view's `(start, step, len)` per dim, inline up to four.
pub type Spec = SmallVec<[(usize, isize, usize); 4]>;

/// What a reduction combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// `Σ`
    Sum,
    /// maximum
    Max,
    /// minimum
    Min,
    /// `Π`
    Prod,
    /// Euclidean norm
    Norm,
    /// logical and (bool)
    All,
    /// logical or (bool)
    Any,
    /// index of the largest element along one axis (i64)
    ArgMax,
    /// index of the smallest element along one axis (i64)
    ArgMin,
}

/// A reduction over `axes` (as given: negative allowed, empty reduces
/// nothing), keeping reduced dims as 1 when `keepdims`. `ArgMax` and
/// `ArgMin` take exactly one axis and never keep it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reduce {
    /// What is combined.
    pub kind: ReduceKind,
    /// Over which axes.
    pub axes: Axes,
    /// Whether reduced dims stay, as 1.
    pub keepdims: bool,
}

impl Reduce {
    /// A reduction of `kind` over `axes`.
    pub fn new(kind: ReduceKind, axes: &[isize], keepdims: bool) -> Self {
        Reduce {
            kind,
            axes: axes.into(),
            keepdims,
        }
    }

    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self.kind {
            ReduceKind::Sum => "Sum",
            ReduceKind::Max => "Max",
            ReduceKind::Min => "Min",
            ReduceKind::Prod => "Prod",
            ReduceKind::Norm => "Norm",
            ReduceKind::All => "All",
            ReduceKind::Any => "Any",
            ReduceKind::ArgMax => "ArgMax",
            ReduceKind::ArgMin => "ArgMin",
        }
    }

    /// Runs the reduction again through its public method.
    pub fn eval(&self, x: &Tensor) -> Result<Tensor> {
        let (a, k) = (&self.axes[..], self.keepdims);
        match self.kind {
            ReduceKind::Sum => x.sum(a, k),
            ReduceKind::Max => x.max(a, k),
            ReduceKind::Min => x.min(a, k),
            ReduceKind::Prod => x.prod(a, k),
            ReduceKind::Norm => x.norm(a, k),
            ReduceKind::All => x.all(a, k),
            ReduceKind::Any => x.any(a, k),
            ReduceKind::ArgMax | ReduceKind::ArgMin => match a {
                [axis] if self.kind == ReduceKind::ArgMax => x.argmax(*axis),
                [axis] => x.argmin(*axis),
                _ => Err(crate::error::Error::invalid(
                    self.name(),
                    format!("takes one axis, got {:?}", &self.axes[..]),
                )),
            },
        }
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (ReduceKind::ArgMax | ReduceKind::ArgMin, [a]) = (self.kind, &self.axes[..]) {
            return write!(f, "[axis={a}]");
        }
        write!(
            f,
            "[axes={:?}{}]",
            &self.axes[..],
            if self.keepdims { ", keepdims" } else { "" }
        )
    }
}

/// What a cumulative scan combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanKind {
    /// running sum (`Cumsum`)
    Sum,
    /// running product (`Cumprod`)
    Prod,
}

/// A cumulative scan along `axis` (as given: negative allowed), with
/// TensorFlow's flags: `exclusive` leaves each element out of its own
/// output, `reverse` runs from the end.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scan {
    /// What is combined.
    pub kind: ScanKind,
    /// Along which axis.
    pub axis: isize,
    /// Each output omits its own element.
    pub exclusive: bool,
    /// The scan runs from the end.
    pub reverse: bool,
}

impl Scan {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self.kind {
            ScanKind::Sum => "Cumsum",
            ScanKind::Prod => "Cumprod",
        }
    }

    /// Runs the scan again through its public method.
    pub fn eval(&self, x: &Tensor) -> Result<Tensor> {
        match self.kind {
            ScanKind::Sum => x.cumsum(self.axis, self.exclusive, self.reverse),
            ScanKind::Prod => x.cumprod(self.axis, self.exclusive, self.reverse),
        }
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[axis={}", self.axis)?;
        if self.exclusive {
            write!(f, ", exclusive")?;
        }
        if self.reverse {
            write!(f, ", reverse")?;
        }
        write!(f, "]")
    }
}

/// An op that moves or views data without arithmetic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ShapeOp {
    /// Joined along an axis (any number of inputs).
    Concat(isize),
    /// A box: `begin` and `size` per dim.
    Slice(Dims, Dims),
    /// Zeros around: `(before, after)` per dim.
    Pad(SmallVec<[(usize, usize); 4]>),
    /// Entries along an axis picked by an index tensor (`x`, `indices`).
    Gather(isize),
    /// `gather`'s adjoint: entries added into a new axis of size `dim`
    /// (`x`, `indices`).
    ScatterAdd(isize, usize),
    /// The same elements in another shape.
    Reshape(Dims),
    /// Dims reordered: output dim `i` is input dim `perm[i]`.
    Transpose(Dims),
    /// Broadcast to a shape.
    BroadcastTo(Dims),
    /// A row-major copy.
    Contiguous,
    /// The same value under a new id (gradients pass).
    Identity,
    /// The same value, cut off from gradients.
    StopGradient,
    /// A value everywhere, in the input's shape and dtype.
    FullLike(F64),
    /// Row `j` along axis 0 (`x`, `j`).
    RowAt,
    /// Zeros like the third input with row `j` set to the first (`g`, `j`,
    /// `like`).
    RowInto,
    /// A strided view, `(start, step, len)` per dim (NumPy's basic slicing,
    /// resolved against the input's shape).
    StridedSlice(Spec),
    /// A strided slice's adjoint: zeros of a shape with the input written
    /// where the view with that spec reads.
    StridedSliceGrad(Dims, Spec),
    /// These axes reversed.
    Reverse(Dims),
    /// Slices picked by index tuples (`x`, `indices`).
    GatherNd,
    /// Slices added at index tuples into zeros of a shape (`updates`,
    /// `indices`).
    ScatterNd(Dims),
    /// Two tensors joined along axis 0 (rows of sparse gradients).
    ConcatRows,
    /// Tensors of one shape stacked along a new axis 0 (any number).
    Stack,
    /// A block of these sizes at a start read from a tensor (`x`,
    /// `start`).
    DynamicSlice(Dims),
    /// A block written at a start read from a tensor (`x`, `update`,
    /// `start`).
    DynamicUpdateSlice,
}

impl ShapeOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            ShapeOp::Concat(_) => "ConcatV2",
            ShapeOp::Slice(..) => "Slice",
            ShapeOp::Pad(_) => "Pad",
            ShapeOp::Gather(_) => "Gather",
            ShapeOp::ScatterAdd(..) => "ScatterAdd",
            ShapeOp::Reshape(_) => "Reshape",
            ShapeOp::Transpose(_) => "Transpose",
            ShapeOp::BroadcastTo(_) => "BroadcastTo",
            ShapeOp::Contiguous => "Contiguous",
            ShapeOp::Identity => "Identity",
            ShapeOp::StopGradient => "StopGradient",
            ShapeOp::FullLike(_) => "FullLike",
            ShapeOp::RowAt => "RowAt",
            ShapeOp::RowInto => "RowInto",
            ShapeOp::StridedSlice(_) => "StridedSlice",
            ShapeOp::StridedSliceGrad(..) => "StridedSliceGrad",
            ShapeOp::Reverse(_) => "ReverseV2",
            ShapeOp::GatherNd => "GatherNd",
            ShapeOp::ScatterNd(_) => "ScatterNd",
            ShapeOp::ConcatRows => "ConcatRows",
            ShapeOp::Stack => "Stack",
            ShapeOp::DynamicSlice(_) => "DynamicSlice",
            ShapeOp::DynamicUpdateSlice => "DynamicUpdateSlice",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let two = || match inputs {
            [a, b] => Ok((a, b)),
            _ => Err(crate::error::Error::invalid(self.name(), "expects 2 inputs")),
        };
        let y = match self {
            ShapeOp::Concat(axis) => {
                if crate::dispatch::listening() {
                    let refs: SmallVec<[&Tensor; 16]> = inputs.iter().collect();
                    Tensor::concat(&refs, *axis)?
                } else {
                    crate::ops::array::join::concat_unrecorded(inputs, *axis)?
                }
            }
            ShapeOp::Gather(axis) => {
                let (x, i) = two()?;
                x.gather(i, *axis)?
            }
            ShapeOp::ScatterAdd(axis, dim) => {
                let (x, i) = two()?;
                x.scatter_add(i, *axis, *dim)?
            }
            ShapeOp::RowAt => {
                let (x, j) = two()?;
                crate::ops::index::row_at(x, j)?
            }
            ShapeOp::RowInto => match inputs {
                [g, j, like] => crate::ops::index::row_into(g, j, like)?,
                _ => return Err(crate::error::Error::invalid("RowInto", "expects 3 inputs")),
            },
            ShapeOp::GatherNd => {
                let (x, i) = two()?;
                x.gather_nd(i)?
            }
            ShapeOp::ScatterNd(shape) => {
                let (u, i) = two()?;
                Tensor::scatter_nd(i, u, shape)?
            }
            ShapeOp::ConcatRows => {
                let (a, b) = two()?;
                crate::ops::index::concat_rows(a, b)?
            }
            ShapeOp::Stack => crate::ops::array::join::stack(inputs)?,
            ShapeOp::DynamicSlice(sizes) => {
                let (x, start) = two()?;
                x.dynamic_slice(start, sizes)?
            }
            ShapeOp::DynamicUpdateSlice => match inputs {
                [x, u, start] => x.dynamic_update_slice(u, start)?,
                _ => return Err(crate::error::Error::invalid(self.name(), "expects 3 inputs")),
            },
            _ => return self.eval_one(super::one_input(self.name(), inputs)?),
        };
        Ok(smallvec::smallvec![y])
    }

    fn eval_one(&self, x: &Tensor) -> Result<Outputs> {
        let y = match self {
            ShapeOp::Slice(b, s) => x.slice(b, s)?,
            ShapeOp::Pad(p) => x.pad(p)?,
            ShapeOp::Concat(_)
            | ShapeOp::Gather(_)
            | ShapeOp::ScatterAdd(..)
            | ShapeOp::RowAt
            | ShapeOp::RowInto
            | ShapeOp::GatherNd
            | ShapeOp::ScatterNd(_)
            | ShapeOp::ConcatRows
            | ShapeOp::Stack
            | ShapeOp::DynamicSlice(_)
            | ShapeOp::DynamicUpdateSlice => {
                return Err(crate::error::Error::invalid(self.name(), "expects 2 or more inputs"))
            }
            ShapeOp::StridedSlice(spec) => crate::ops::strided::strided_replay(x, spec)?,
            ShapeOp::StridedSliceGrad(shape, spec) => crate::ops::strided::strided_embed(x, shape, spec.to_vec())?,
            ShapeOp::Reverse(axes) => {
                let axes: SmallVec<[isize; 4]> = axes.iter().map(|&a| a as isize).collect();
                x.reverse(&axes)?
            }
            ShapeOp::Reshape(s) => x.reshape(s)?,
            ShapeOp::Transpose(p) => x.permute(p)?,
            ShapeOp::BroadcastTo(s) => x.broadcast_to(s)?,
            ShapeOp::Contiguous => x.contiguous()?,
            ShapeOp::Identity => x.identity(),
            ShapeOp::StopGradient => x.stop_gradient(),
            ShapeOp::FullLike(v) => x.try_full_like(v.0)?,
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeOp::Concat(a) | ShapeOp::Gather(a) => write!(f, "[axis={a}]"),
            ShapeOp::ScatterAdd(a, d) => write!(f, "[axis={a}, dim={d}]"),
            ShapeOp::Slice(b, s) => write!(f, "[begin={:?}, size={:?}]", &b[..], &s[..]),
            ShapeOp::Pad(p) => write!(f, "[{:?}]", &p[..]),
            ShapeOp::Reshape(s) | ShapeOp::BroadcastTo(s) => write!(f, "[{:?}]", &s[..]),
            ShapeOp::Transpose(p) => write!(f, "[perm={:?}]", &p[..]),
            ShapeOp::FullLike(v) => write!(f, "[{v}]"),
            ShapeOp::StridedSlice(spec) => write!(f, "[spec={:?}]", &spec[..]),
            ShapeOp::StridedSliceGrad(shape, spec) => write!(f, "[shape={:?}, spec={:?}]", &shape[..], &spec[..]),
            ShapeOp::Reverse(axes) => write!(f, "[axes={:?}]", &axes[..]),
            ShapeOp::ScatterNd(shape) => write!(f, "[shape={:?}]", &shape[..]),
            ShapeOp::DynamicSlice(sizes) => write!(f, "[sizes={:?}]", &sizes[..]),
            ShapeOp::Contiguous
            | ShapeOp::Identity
            | ShapeOp::StopGradient
            | ShapeOp::RowAt
            | ShapeOp::RowInto
            | ShapeOp::GatherNd
            | ShapeOp::ConcatRows
            | ShapeOp::Stack
            | ShapeOp::DynamicUpdateSlice => Ok(()),
        }
    }
}
