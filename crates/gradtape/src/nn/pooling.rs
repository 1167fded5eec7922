//! Keras's 1-D and 3-D pooling layers: `MaxPooling1D`,
//! `AveragePooling1D`, `MaxPooling3D`, `AveragePooling3D` ([`Pool1D`],
//! [`Pool3D`], with a [`PoolKind`] as [`Pool2D`](super::Pool2D) has). Both
//! take Keras's options: the window (`pool_size`), strides (by default the
//! window), `Valid` or `Same` padding (averages over the window's
//! non-padding elements, as TensorFlow) and the data format, channels last
//! (`[batch, steps, channels]`, `[batch, depth, height, width, channels]`)
//! or first. They run the ops [`Tensor::max_pool1d_with_format`] and its
//! siblings, so their gradients are those ops'.
//!
//! Sizes are checked when the layer is built (zero, or too large for the
//! ops' `i64`) and against the input when it is called (a window larger
//! than the input with `Valid` padding); the errors name the layer as
//! Keras does (`MaxPooling3D`, ...).

use super::{unique_name, Layer, Module, PoolKind};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::{DataFormat, Padding};
use crate::tensor::Tensor;

/// Options for a [`Pool1D`] (`N = 1`) or a [`Pool3D`] (`N = 3`); see
/// [`Pool1D::builder`] and [`Pool3D::builder`].
pub struct PoolBuilder<const N: usize> {
    kind: PoolKind,
    pool_size: [usize; N],
    strides: Option<[usize; N]>,
    padding: Padding,
    format: DataFormat,
    name: Option<String>,
}

impl<const N: usize> PoolBuilder<N> {
    fn new(kind: PoolKind, pool_size: [usize; N]) -> Self {
        PoolBuilder {
            kind,
            pool_size,
            strides: None,
            padding: Padding::Valid,
            format: DataFormat::ChannelsLast,
            name: None,
        }
    }
    /// The strides (default the pool size, as Keras).
    pub fn strides(mut self, s: [usize; N]) -> Self {
        self.strides = Some(s);
        self
    }
    /// Padding (default `Valid`, as Keras).
    pub fn padding(mut self, p: Padding) -> Self {
        self.padding = p;
        self
    }
    /// Where the channels are (default last, as Keras).
    pub fn data_format(mut self, f: DataFormat) -> Self {
        self.format = f;
        self
    }
    /// The layer's name (default `max_pooling3d`, `average_pooling1d`,
    /// ..., made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }

    /// The layer, named `op` in errors, after checking the sizes.
    fn core(self, op: &'static str, base: &str) -> Result<Core<N>> {
        let as_i64 = |what: &str, v: [usize; N]| -> Result<[i64; N]> {
            let mut out = [0i64; N];
            for (o, &s) in out.iter_mut().zip(&v) {
                *o = i64::try_from(s)
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| Error::invalid(op, format!("the {what} must be positive and fit i64, got {v:?}")))?;
            }
            Ok(out)
        };
        let size = as_i64("pool size", self.pool_size)?;
        let strides = as_i64("strides", self.strides.unwrap_or(self.pool_size))?;
        Ok(Core {
            name: self.name.unwrap_or_else(|| unique_name(base)),
            op,
            kind: self.kind,
            size,
            strides,
            padding: self.padding,
            format: self.format,
        })
    }
}

/// What the two layers share: the checked options.
struct Core<const N: usize> {
    name: String,
    op: &'static str,
    kind: PoolKind,
    size: [i64; N],
    strides: [i64; N],
    padding: Padding,
    format: DataFormat,
}

impl<const N: usize> Core<N> {
    /// Fails unless `x` has rank `N + 2` and, with `Valid` padding, each
    /// spatial size holds the window.
    fn check(&self, x: &Tensor) -> Result<()> {
        let (op, rank) = (self.op, N + 2);
        let layout = match (self.format, N) {
            (DataFormat::ChannelsLast, 1) => "[batch, steps, channels]",
            (DataFormat::ChannelsFirst, 1) => "[batch, channels, steps]",
            (DataFormat::ChannelsLast, _) => "[batch, depth, height, width, channels]",
            (DataFormat::ChannelsFirst, _) => "[batch, channels, depth, height, width]",
        };
        if x.rank() != rank {
            return Err(Error::invalid(
                op,
                format!("expected inputs {layout} of rank {rank}, got shape {:?}", x.shape()),
            ));
        }
        let spatial = match self.format {
            DataFormat::ChannelsLast => &x.shape()[1..=N],
            DataFormat::ChannelsFirst => &x.shape()[2..],
        };
        let too_big = spatial.iter().zip(&self.size).any(|(&s, &k)| (s as u64) < k as u64);
        if self.padding == Padding::Valid && too_big {
            return Err(Error::invalid(
                op,
                format!(
                    "the pool size {:?} is larger than the input's spatial size {spatial:?} (inputs {:?}) with valid padding",
                    self.size,
                    x.shape()
                ),
            ));
        }
        Ok(())
    }
}

/// 1-D pooling of sequences, Keras's `MaxPooling1D` / `AveragePooling1D`:
/// `[batch, steps, channels]` (or channels first) to `[batch, out,
/// channels]`.
///
/// ```
/// use gradtape::nn::{Layer, Pool1D, PoolKind};
/// use gradtape::{Padding, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 2.0, 4.0], &[1, 5, 1])?;
/// let max = Pool1D::builder(PoolKind::Max, 2).build()?;              // strides 2, valid
/// assert_eq!(max.call(&x)?.to_vec::<f32>()?, vec![5.0, 3.0]);
/// let avg = Pool1D::builder(PoolKind::Avg, 2).stride(1).padding(Padding::Same).build()?;
/// assert_eq!(avg.call(&x)?.to_vec::<f32>()?, vec![3.0, 4.0, 2.5, 3.0, 4.0]);
/// assert!(Pool1D::builder(PoolKind::Max, 0).build().is_err());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Pool1D(Core<1>);

impl Pool1D {
    /// Starts a layer pooling windows of `pool_size` steps.
    pub fn builder(kind: PoolKind, pool_size: usize) -> PoolBuilder<1> {
        PoolBuilder::new(kind, [pool_size])
    }
}

impl PoolBuilder<1> {
    /// The stride (default the pool size).
    pub fn stride(self, s: usize) -> Self {
        self.strides([s])
    }

    /// The layer; a zero pool size or stride is an error naming it.
    pub fn build(self) -> Result<Pool1D> {
        let (op, base) = match self.kind {
            PoolKind::Max => ("MaxPooling1D", "max_pooling1d"),
            PoolKind::Avg => ("AveragePooling1D", "average_pooling1d"),
        };
        Ok(Pool1D(self.core(op, base)?))
    }
}

impl Module for Pool1D {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for Pool1D {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let c = &self.0;
        c.check(x)?;
        let ([k], [s]) = (c.size, c.strides);
        match c.kind {
            PoolKind::Max => x.max_pool1d_with_format(k, s, c.padding, c.format),
            PoolKind::Avg => x.avg_pool1d_with_format(k, s, c.padding, c.format),
        }
        .map_err(|e| e.for_op(c.op))
    }
}

/// 3-D pooling of volumes, Keras's `MaxPooling3D` / `AveragePooling3D`:
/// `[batch, depth, height, width, channels]` (or channels first), windows
/// and strides `[depth, height, width]`.
///
/// ```
/// use gradtape::nn::{Layer, Pool3D, PoolKind};
/// use gradtape::{DataFormat, DType, Padding, Tensor};
/// let x = Tensor::ones(&[2, 4, 6, 5, 3], DType::F32);
/// let max = Pool3D::builder(PoolKind::Max, [2, 2, 2]).build()?;
/// assert_eq!(max.call(&x)?.shape(), &[2, 2, 3, 2, 3]);
/// let avg = Pool3D::builder(PoolKind::Avg, [2, 3, 1])
///     .strides([1, 1, 1])
///     .padding(Padding::Same)
///     .data_format(DataFormat::ChannelsFirst)
///     .build()?;
/// assert_eq!(avg.call(&x)?.shape(), &[2, 4, 6, 5, 3]);
/// // a window larger than the input needs `Same` padding
/// let big = Pool3D::builder(PoolKind::Max, [5, 1, 1]).build()?;
/// assert!(big.call(&x).unwrap_err().to_string().contains("MaxPooling3D"));
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Pool3D(Core<3>);

impl Pool3D {
    /// Starts a layer pooling windows of `pool_size` (`[depth, height,
    /// width]`).
    pub fn builder(kind: PoolKind, pool_size: [usize; 3]) -> PoolBuilder<3> {
        PoolBuilder::new(kind, pool_size)
    }
}

impl PoolBuilder<3> {
    /// The layer; a zero pool size or stride is an error naming it.
    pub fn build(self) -> Result<Pool3D> {
        let (op, base) = match self.kind {
            PoolKind::Max => ("MaxPooling3D", "max_pooling3d"),
            PoolKind::Avg => ("AveragePooling3D", "average_pooling3d"),
        };
        Ok(Pool3D(self.core(op, base)?))
    }
}

impl Module for Pool3D {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for Pool3D {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let c = &self.0;
        c.check(x)?;
        match c.kind {
            PoolKind::Max => x.max_pool3d_with_format(c.size, c.strides, c.padding, c.format),
            PoolKind::Avg => x.avg_pool3d_with_format(c.size, c.strides, c.padding, c.format),
        }
        .map_err(|e| e.for_op(c.op))
    }
}
