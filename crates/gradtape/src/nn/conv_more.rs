//! More of Keras's convolution and pooling layers: `Conv1D` (with causal
//! padding), `DepthwiseConv2D`, `SeparableConv2D`, and global average and
//! max pooling over the spatial axes. They share [`Conv2DBuilder`]'s options (a 1-D
//! layer's stride and dilation are the first of each pair).

use super::conv::Conv;
use super::{expect_input, new_weight, unique_name, Conv2DBuilder, Layer, Module, PoolKind};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::Padding;
use crate::random::Rng;
use crate::tensor::Tensor;

/// A 1-D convolution layer, Keras's `Conv1D`: `activation(conv1d(x,
/// kernel) + bias)` on `x` `[batch, steps, in]`, kernel `[k, in,
/// filters]` (`[k, in / groups, filters]` with
/// [`groups`](Conv2DBuilder::groups)). With [`causal`](Conv2DBuilder::causal) padding the input is
/// padded on the left by `(k − 1) · dilation` zeros, so output `t`
/// depends on inputs `<= t` only (WaveNet's, a TCN's).
///
/// ```
/// use gradtape::nn::{Conv1D, Layer};
/// use gradtape::{DType, Rng, Tensor};
/// let conv = Conv1D::builder(2, 4, 3).dilation_rate(2).causal(true).build(&mut Rng::new(0))?;
/// let x = Tensor::ones(&[1, 10, 2], DType::F32);
/// assert_eq!(conv.call(&x)?.shape(), &[1, 10, 4]);      // as many steps as in
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Conv1D {
    conv: Conv,
    causal: bool,
}

impl Conv2DBuilder<Conv1D> {
    /// The stride (default 1).
    pub fn stride(mut self, s: i64) -> Self {
        self.strides = [s, 1];
        self
    }
    /// The dilation (default 1).
    pub fn dilation_rate(mut self, d: i64) -> Self {
        self.dilations = [d, 1];
        self
    }
    /// Keras's `padding="causal"`: left padding of `(k − 1) · dilation`
    /// (default false; it replaces the `padding` option).
    pub fn causal(mut self, on: bool) -> Self {
        self.causal = on;
        self
    }
    /// Keras's `groups` (default 1): a grouped convolution, as
    /// [`Conv2D`](super::Conv2D)'s ([`Conv2DBuilder::groups`]); the kernel
    /// is `[k, in / groups, filters]`.
    ///
    /// ```
    /// use gradtape::nn::{Conv1D, Layer, Module};
    /// use gradtape::{DType, Rng, Tensor};
    /// let conv = Conv1D::builder(6, 9, 3).groups(3).build(&mut Rng::new(0))?;
    /// assert_eq!(conv.variables()[0].shape(), vec![3, 2, 9]);
    /// assert_eq!(conv.call(&Tensor::ones(&[2, 10, 6], DType::F32))?.shape(), &[2, 8, 9]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    /// Creates the layer's variables, drawing from `rng`.
    pub fn build(self, rng: &mut Rng) -> Result<Conv1D> {
        const OP: &str = "conv1d";
        if self.strides[1] != 1 || self.dilations[1] != 1 || self.kernel_size[1] != 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "a 1-D layer has one stride and one dilation: use stride() and dilation_rate(), got strides {:?}, dilations {:?}",
                    self.strides, self.dilations
                ),
            ));
        }
        let causal = self.causal;
        let shape = [self.kernel_size[0], self.in_channels / self.groups.max(1), self.filters];
        let filters = self.filters;
        let conv = self.make_named(OP, "kernel", &shape, filters, rng)?;
        Ok(Conv1D { conv, causal })
    }
}

impl Conv1D {
    /// Starts a layer from `in_channels` to `filters` channels with a
    /// kernel of `kernel_size` steps (stride 1, `Valid` padding,
    /// Glorot-uniform kernel, zero bias, f32 unless set).
    pub fn builder(in_channels: usize, filters: usize, kernel_size: usize) -> Conv2DBuilder<Conv1D> {
        Conv2DBuilder::new(in_channels, filters, [kernel_size, 1])
    }

    /// The kernel variable, `[k, in, filters]`.
    pub fn kernel(&self) -> &Variable {
        &self.conv.kernel
    }
}

impl Module for Conv1D {
    fn variables(&self) -> Vec<Variable> {
        self.conv.variables()
    }
}

impl Layer for Conv1D {
    fn name(&self) -> &str {
        &self.conv.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let c = &self.conv;
        let k = c.kernel.read();
        expect_input(
            "Conv1D",
            self.name(),
            x,
            Some(3),
            Some(k.shape()[1] * c.groups),
            k.dtype(),
        )?;
        let (stride, dilation) = (c.strides[0], c.dilations[0]);
        let y = if self.causal {
            let left = (k.shape()[0] - 1) * dilation as usize;
            x.pad(&[(0, 0), (left, 0), (0, 0)])?
                .conv1d(&k, stride, Padding::Valid, dilation)?
        } else {
            x.conv1d(&k, stride, c.padding, dilation)?
        };
        c.finish(y)
    }
}

/// A depthwise 2-D convolution layer, Keras's `DepthwiseConv2D`: each of
/// the `in` channels convolved with its own `depth_multiplier` filters,
/// kernel `[kh, kw, in, multiplier]`, output `[n, oh, ow, in ·
/// multiplier]` (see [`Tensor::depthwise_conv2d`]).
///
/// ```
/// use gradtape::nn::{DepthwiseConv2D, Layer, Module};
/// use gradtape::{DType, Padding, Rng, Tensor};
/// let dw = DepthwiseConv2D::builder(3, 2, [3, 3]).padding(Padding::Same).build(&mut Rng::new(0))?;
/// assert_eq!(dw.call(&Tensor::ones(&[1, 5, 5, 3], DType::F32))?.shape(), &[1, 5, 5, 6]);
/// assert_eq!(dw.variables()[1].shape(), vec![6]); // the bias
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct DepthwiseConv2D(Conv);

impl Conv2DBuilder<DepthwiseConv2D> {
    /// Creates the layer's variables, drawing from `rng`.
    pub fn build(self, rng: &mut Rng) -> Result<DepthwiseConv2D> {
        let [kh, kw] = self.kernel_size;
        let (i, m) = (self.in_channels, self.filters);
        let bias = i.checked_mul(m).ok_or_else(|| Error::ShapeOverflow {
            op: "depthwise_conv2d",
            shape: vec![i, m],
        })?;
        Ok(DepthwiseConv2D(self.make_named(
            "depthwise_conv2d",
            "kernel",
            &[kh, kw, i, m],
            bias,
            rng,
        )?))
    }
}

impl DepthwiseConv2D {
    /// Starts a layer on `in_channels` channels with `depth_multiplier`
    /// filters each and a `[kh, kw]` kernel (the defaults of
    /// [`Conv2D::builder`](super::Conv2D::builder)).
    pub fn builder(
        in_channels: usize,
        depth_multiplier: usize,
        kernel_size: [usize; 2],
    ) -> Conv2DBuilder<DepthwiseConv2D> {
        Conv2DBuilder::new(in_channels, depth_multiplier, kernel_size)
    }

    /// The kernel variable, `[kh, kw, in, multiplier]`.
    pub fn kernel(&self) -> &Variable {
        &self.0.kernel
    }
}

impl Module for DepthwiseConv2D {
    fn variables(&self) -> Vec<Variable> {
        self.0.variables()
    }
}

impl Layer for DepthwiseConv2D {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let c = &self.0;
        let k = c.kernel.read();
        expect_input(
            "DepthwiseConv2D",
            self.name(),
            x,
            Some(4),
            Some(k.shape()[2]),
            k.dtype(),
        )?;
        c.finish(x.depthwise_conv2d(&k, c.strides, c.padding, c.dilations)?)
    }
}

/// A depthwise separable 2-D convolution layer, Keras's
/// `SeparableConv2D` (Xception's, MobileNet's): a depthwise convolution
/// (`depth_multiplier` filters per input channel, kernel `[kh, kw, in,
/// multiplier]`) then a pointwise one (`[1, 1, in · multiplier, filters]`),
/// plus a bias and the activation (see [`Tensor::separable_conv2d`]).
/// Weights in Keras's order: `depthwise_kernel`, `pointwise_kernel`,
/// `bias`.
///
/// ```
/// use gradtape::nn::{Layer, Module, SeparableConv2D};
/// use gradtape::{DType, Padding, Rng, Tensor};
/// let sep = SeparableConv2D::builder(3, 8, [3, 3])
///     .depth_multiplier(2)
///     .padding(Padding::Same)
///     .build(&mut Rng::new(0))?;
/// assert_eq!(sep.call(&Tensor::ones(&[1, 5, 5, 3], DType::F32))?.shape(), &[1, 5, 5, 8]);
/// let shapes: Vec<Vec<usize>> = sep.variables().iter().map(|v| v.shape()).collect();
/// assert_eq!(shapes, vec![vec![3, 3, 3, 2], vec![1, 1, 6, 8], vec![8]]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct SeparableConv2D {
    conv: Conv,
    pointwise: Variable,
}

impl Conv2DBuilder<SeparableConv2D> {
    /// The depthwise filters per input channel (default 1).
    pub fn depth_multiplier(mut self, m: usize) -> Self {
        self.depth_multiplier = m;
        self
    }

    /// Creates the layer's variables, drawing from `rng`.
    pub fn build(self, rng: &mut Rng) -> Result<SeparableConv2D> {
        const OP: &str = "separable_conv2d";
        let [kh, kw] = self.kernel_size;
        let (i, m, f) = (self.in_channels, self.depth_multiplier, self.filters);
        if m == 0 {
            return Err(Error::invalid(OP, "depth_multiplier must be a positive integer, got 0"));
        }
        let mid = i.checked_mul(m).ok_or_else(|| Error::ShapeOverflow {
            op: OP,
            shape: vec![i, m],
        })?;
        let (init, dtype) = (self.kernel_init.clone(), self.dtype);
        let conv = self.make_named(OP, "depthwise_kernel", &[kh, kw, i, m], f, rng)?;
        let pointwise = new_weight(&conv.name, "pointwise_kernel", &[1, 1, mid, f], dtype, &init, rng, true)?;
        Ok(SeparableConv2D { conv, pointwise })
    }
}

impl SeparableConv2D {
    /// Starts a layer from `in_channels` to `filters` channels with a
    /// `[kh, kw]` depthwise kernel (the defaults of
    /// [`Conv2D::builder`](super::Conv2D::builder), a depth multiplier of 1).
    pub fn builder(in_channels: usize, filters: usize, kernel_size: [usize; 2]) -> Conv2DBuilder<SeparableConv2D> {
        Conv2DBuilder::new(in_channels, filters, kernel_size)
    }
}

impl Module for SeparableConv2D {
    /// `depthwise_kernel`, `pointwise_kernel`, then `bias` (Keras's order).
    fn variables(&self) -> Vec<Variable> {
        let mut v = vec![self.conv.kernel.clone(), self.pointwise.clone()];
        v.extend(self.conv.bias.clone());
        v
    }
}

impl Layer for SeparableConv2D {
    fn name(&self) -> &str {
        &self.conv.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let c = &self.conv;
        let k = c.kernel.read();
        expect_input(
            "SeparableConv2D",
            self.name(),
            x,
            Some(4),
            Some(k.shape()[2]),
            k.dtype(),
        )?;
        let y = x.separable_conv2d(&k, &self.pointwise.read(), c.strides, c.padding, c.dilations)?;
        c.finish(y)
    }
}

/// Global pooling, Keras's `GlobalAveragePooling1D`/`2D`/`3D` and
/// `GlobalMaxPooling1D`/`2D`/`3D`: the mean or maximum over the spatial
/// axes of a channels-last input (`[batch, steps, c]` for 1-D, `[batch,
/// h, w, c]` for 2-D, ...), to `[batch, c]`, or with
/// [`keepdims`](Self::keepdims) to `[batch, 1, ..., c]`.
///
/// Over sequences (1-D) it takes Keras's masks through
/// [`SequenceLayer::forward_masked`](super::SequenceLayer::forward_masked):
/// the average is over the steps the mask keeps (`NaN` for a row it
/// hides entirely, as Keras's `0 / 0`); the maximum ignores the mask, as
/// Keras's `GlobalMaxPooling1D` does.
///
/// ```
/// use gradtape::nn::{GlobalPooling, Layer, PoolKind};
/// use gradtape::Tensor;
/// let x = Tensor::from_vec(vec![1.0f32, 10.0, 3.0, 30.0], &[1, 2, 2])?; // 2 steps, 2 channels
/// let avg = GlobalPooling::new(PoolKind::Avg, 1)?;
/// assert_eq!(avg.call(&x)?.to_vec::<f32>()?, vec![2.0, 20.0]);
/// let max = GlobalPooling::new(PoolKind::Max, 1)?.keepdims(true);
/// assert_eq!(max.call(&x)?.shape(), &[1, 1, 2]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct GlobalPooling {
    name: String,
    kind: PoolKind,
    spatial: usize,
    keepdims: bool,
}

impl GlobalPooling {
    /// Pooling of `kind` over `spatial_dims` (1, 2 or 3) axes.
    pub fn new(kind: PoolKind, spatial_dims: usize) -> Result<GlobalPooling> {
        if !(1..=3).contains(&spatial_dims) {
            return Err(Error::invalid(
                "GlobalPooling",
                format!("spatial_dims must be 1, 2 or 3, got {spatial_dims}"),
            ));
        }
        let base = match kind {
            PoolKind::Avg => "global_average_pooling",
            PoolKind::Max => "global_max_pooling",
        };
        Ok(GlobalPooling {
            name: unique_name(base),
            kind,
            spatial: spatial_dims,
            keepdims: false,
        })
    }

    /// Whether the pooled axes stay, of length 1 (default false).
    pub fn keepdims(mut self, on: bool) -> Self {
        self.keepdims = on;
        self
    }
}

impl Module for GlobalPooling {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for GlobalPooling {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        expect_input("GlobalPooling", self.name(), x, Some(self.spatial + 2), None, x.dtype())?;
        let axes: Vec<isize> = (1..=self.spatial as isize).collect();
        match self.kind {
            PoolKind::Avg => x.mean(&axes, self.keepdims),
            PoolKind::Max => x.max(&axes, self.keepdims),
        }
    }
}

impl super::SequenceLayer for GlobalPooling {
    /// ```
    /// use gradtape::nn::{GlobalPooling, PoolKind, SequenceLayer};
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 10.0, 3.0, 30.0, 5.0, 50.0], &[1, 3, 2])?;
    /// let keep = Tensor::from_vec(vec![true, true, false], &[1, 3])?;
    /// let avg = GlobalPooling::new(PoolKind::Avg, 1)?;
    /// assert_eq!(avg.forward_masked(&x, Some(&keep), false)?.to_vec::<f32>()?, vec![2.0, 20.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    fn forward_masked(&self, x: &Tensor, mask: Option<&Tensor>, training: bool) -> Result<Tensor> {
        let Some(mask) = mask else {
            return self.forward(x, training);
        };
        expect_input("GlobalPooling", self.name(), x, Some(self.spatial + 2), None, x.dtype())?;
        if self.spatial != 1 {
            return Err(Error::invalid(
                "GlobalPooling",
                format!(
                    "masks are over the steps of sequences (1-D pooling), not {}-D",
                    self.spatial
                ),
            ));
        }
        super::masking::check_mask("GlobalPooling", x, mask)?;
        match self.kind {
            PoolKind::Max => self.forward(x, training),
            PoolKind::Avg => {
                let keep = mask.expand_dims(2)?;
                let zero = x.scalar_like(0.0)?;
                let sum = Tensor::where_(&keep, x, &zero)?.sum(&[1], self.keepdims)?;
                sum.div(&keep.cast(x.dtype())?.sum(&[1], self.keepdims)?)
            }
        }
    }
}
