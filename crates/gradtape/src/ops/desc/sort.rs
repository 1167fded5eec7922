//! Descriptors of the sorting, searching and segment ops whose results
//! depend on the order or the grouping of values (`argsort`, `unique`,
//! `searchsorted`, `bincount`, `argwhere`, the segment reductions,
//! `tensor_scatter_nd_update`). The differentiable ones built on them
//! (`sort`, `top_k`, `boolean_mask`, `segment_mean`, ...) are compositions
//! and need no descriptor of their own.

use std::fmt;

use super::Outputs;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// What a segment reduction combines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// `Σ` (empty segments give 0)
    Sum,
    /// `Π` (empty segments give 1)
    Prod,
    /// maximum (empty segments: the dtype's lowest value unsorted, 0 sorted)
    Max,
    /// minimum (empty segments: the dtype's highest value unsorted, 0 sorted)
    Min,
}

/// A sorting, searching or grouping op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SortOp {
    /// Indices that sort along an axis (stable).
    ArgSort {
        /// The axis (as given).
        axis: isize,
        /// Largest first.
        descending: bool,
    },
    /// Output `0` (the unique values) or `1` (each element's index into
    /// them) of `unique`.
    Unique(u8),
    /// Insertion points of the values (second input) in sorted rows (first).
    SearchSorted {
        /// After equal entries rather than before.
        right: bool,
    },
    /// Occurrence counts (or summed weights, a second input) of each value.
    Bincount {
        /// The least output length.
        minlength: usize,
    },
    /// Coordinates of the non-zero (true) elements.
    ArgWhere,
    /// A segment reduction (`data`, `segment_ids`): over `num_segments`
    /// segments (unsorted ids, negatives dropped), or over `max id + 1`
    /// segments of sorted ids when `None`.
    Segment {
        /// What is combined.
        kind: SegmentKind,
        /// The output's first dim, or `None` for the sorted form.
        num_segments: Option<usize>,
    },
    /// `tensor` with slices replaced at index tuples (`tensor`, `indices`,
    /// `updates`).
    TensorScatterUpdate,
}

impl SortOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            SortOp::ArgSort { .. } => "ArgSort",
            SortOp::Unique(_) => "Unique",
            SortOp::SearchSorted { .. } => "SearchSorted",
            SortOp::Bincount { .. } => "Bincount",
            SortOp::ArgWhere => "Where",
            SortOp::Segment { kind, num_segments } => match (kind, num_segments.is_some()) {
                (SegmentKind::Sum, true) => "UnsortedSegmentSum",
                (SegmentKind::Prod, true) => "UnsortedSegmentProd",
                (SegmentKind::Max, true) => "UnsortedSegmentMax",
                (SegmentKind::Min, true) => "UnsortedSegmentMin",
                (SegmentKind::Sum, false) => "SegmentSum",
                (SegmentKind::Prod, false) => "SegmentProd",
                (SegmentKind::Max, false) => "SegmentMax",
                (SegmentKind::Min, false) => "SegmentMin",
            },
            SortOp::TensorScatterUpdate => "TensorScatterUpdate",
        }
    }

    /// Whether the output's shape follows from the inputs' shapes alone:
    /// sorts (and so `top_k`), searches, segment ops given their
    /// `num_segments` and scatter updates; not `unique`, `bincount`,
    /// `argwhere` (so `boolean_mask`) or the sorted segment ops, whose
    /// sizes are read from the values.
    pub fn static_shape(&self) -> bool {
        match self {
            SortOp::ArgSort { .. } | SortOp::SearchSorted { .. } | SortOp::TensorScatterUpdate => true,
            SortOp::Segment { num_segments, .. } => num_segments.is_some(),
            SortOp::Unique(_) | SortOp::Bincount { .. } | SortOp::ArgWhere => false,
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
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
        let y = match self {
            SortOp::ArgSort { axis, descending } => {
                arity(1)?;
                inputs[0].argsort(*axis, *descending)?
            }
            SortOp::Unique(k) => {
                arity(1)?;
                let (values, idx) = inputs[0].unique()?;
                if *k == 0 {
                    values
                } else {
                    idx
                }
            }
            SortOp::SearchSorted { right } => {
                arity(2)?;
                inputs[0].searchsorted(&inputs[1], *right)?
            }
            SortOp::Bincount { minlength } => match inputs {
                [arr] => arr.bincount(None, *minlength)?,
                [arr, w] => arr.bincount(Some(w), *minlength)?,
                _ => return Err(Error::invalid(self.name(), "expects 1 or 2 inputs")),
            },
            SortOp::ArgWhere => {
                arity(1)?;
                inputs[0].argwhere()?
            }
            SortOp::Segment { kind, num_segments } => {
                arity(2)?;
                crate::ops::segment::segment_reduce(*kind, &inputs[0], &inputs[1], *num_segments)?
            }
            SortOp::TensorScatterUpdate => {
                arity(3)?;
                inputs[0].tensor_scatter_nd_update(&inputs[1], &inputs[2])?
            }
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SortOp::ArgSort { axis, descending } => {
                write!(f, "[axis={axis}{}]", if *descending { ", descending" } else { "" })
            }
            SortOp::Unique(k) => write!(f, "[output={k}]"),
            SortOp::SearchSorted { right } => write!(f, "[side={}]", if *right { "right" } else { "left" }),
            SortOp::Bincount { minlength } => write!(f, "[minlength={minlength}]"),
            SortOp::Segment {
                num_segments: Some(n), ..
            } => write!(f, "[num_segments={n}]"),
            SortOp::ArgWhere | SortOp::Segment { .. } | SortOp::TensorScatterUpdate => Ok(()),
        }
    }
}
