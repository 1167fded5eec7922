//! Descriptors of the ops that make a tensor from attributes (and, for
//! `one_hot`, from integer indices): random draws and one-hot encodings.
//!
//! Tensors made from attributes alone by the plain constructors (`zeros`,
//! `eye`, `arange`, `from_vec`, ...) need no descriptor: a trace takes them
//! for constants. A random draw is different: its descriptor carries its
//! seed, so the graph holds a small node rather than the drawn values, and a
//! draw from an advancing generator ([`Rng`](crate::Rng)) can be made fresh
//! at each run of the graph (see `ops/random.rs`).

use std::fmt;

use super::{Outputs, F64};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

use super::structural::Dims;

/// What a random draw samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Uniform in `[a, b)`.
    Uniform,
    /// Normal with mean `a` and standard deviation `b`.
    Normal,
    /// Normal with mean `a` and standard deviation `b`, redrawn beyond two
    /// standard deviations.
    TruncatedNormal,
    /// Dropout's scaled keep-mask: `1 / (1 - a)` with probability `1 - a`,
    /// else 0.
    DropoutMask,
}

/// A tensor made from attributes (no inputs), or from indices (`one_hot`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CreateOp {
    /// A seeded draw of `shape` and `dtype` (parameters `a`, `b` as the
    /// [`Distribution`] says).
    Random {
        /// What is sampled.
        dist: Distribution,
        /// The result's shape.
        shape: Dims,
        /// First parameter (low bound, mean, or dropout rate).
        a: F64,
        /// Second parameter (high bound or standard deviation).
        b: F64,
        /// The result's dtype.
        dtype: DType,
        /// The seed: the same seed gives the same values.
        seed: u64,
    },
    /// `indices.one_hot(depth, on, off, axis, dtype)` (one input).
    OneHot {
        /// Size of the new axis.
        depth: usize,
        /// Value at the index.
        on: F64,
        /// Value elsewhere.
        off: F64,
        /// Where the new axis goes (-1: last).
        axis: isize,
        /// The result's dtype.
        dtype: DType,
    },
}

impl CreateOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            CreateOp::Random { dist, .. } => match dist {
                Distribution::Uniform => "RandomUniform",
                Distribution::Normal => "RandomStandardNormal",
                Distribution::TruncatedNormal => "TruncatedNormal",
                Distribution::DropoutMask => "DropoutMask",
            },
            CreateOp::OneHot { .. } => "OneHot",
        }
    }

    /// The same draw with another seed (for draws made fresh at each run).
    pub(crate) fn reseeded(&self, new_seed: u64) -> CreateOp {
        let mut op = self.clone();
        if let CreateOp::Random { seed, .. } = &mut op {
            *seed = new_seed;
        }
        op
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let y = match self {
            CreateOp::Random {
                dist,
                shape,
                a,
                b,
                dtype,
                seed,
            } => {
                if !inputs.is_empty() {
                    return Err(Error::invalid(
                        self.name(),
                        format!("expects no inputs, got {}", inputs.len()),
                    ));
                }
                let (a, b, dtype, seed) = (a.0, b.0, *dtype, *seed);
                match dist {
                    Distribution::Uniform => Tensor::random_uniform(shape, a, b, dtype, seed)?,
                    Distribution::Normal => Tensor::random_normal(shape, a, b, dtype, seed)?,
                    Distribution::TruncatedNormal => Tensor::truncated_normal(shape, a, b, dtype, seed)?,
                    Distribution::DropoutMask => crate::ops::random::dropout_mask(shape, a, dtype, seed)?,
                }
            }
            CreateOp::OneHot {
                depth,
                on,
                off,
                axis,
                dtype,
            } => super::one_input(self.name(), inputs)?.one_hot(*depth, on.0, off.0, *axis, *dtype)?,
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreateOp::Random {
                shape,
                a,
                b,
                dtype,
                seed,
                dist,
            } => match dist {
                Distribution::DropoutMask => write!(f, "[{dtype}{:?}, rate={a}, seed={seed}]", &shape[..]),
                _ => write!(f, "[{dtype}{:?}, {a}, {b}, seed={seed}]", &shape[..]),
            },
            CreateOp::OneHot {
                depth,
                on,
                off,
                axis,
                dtype,
            } => write!(f, "[depth={depth}, on={on}, off={off}, axis={axis}, {dtype}]"),
        }
    }
}
