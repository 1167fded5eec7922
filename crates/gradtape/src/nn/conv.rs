//! `Conv2D` and `Conv2DTranspose` on NHWC inputs, Keras's layers of the
//! same names (channels last, HWIO kernels).

use std::marker::PhantomData;

use super::{expect_float_dtype, expect_input, new_weight, unique_name, Activation, Initializer, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::Padding;
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// The settings shared by the convolution layers (a 1-D layer's stride
/// and dilation are the first of each pair, the second 1).
#[derive(Clone)]
pub(super) struct Conv {
    pub(super) name: String,
    pub(super) kernel: Variable,
    pub(super) bias: Option<Variable>,
    pub(super) strides: [i64; 2],
    pub(super) padding: Padding,
    pub(super) dilations: [i64; 2],
    activation: Activation,
    /// Groups of a grouped convolution (1 otherwise): the kernel has `in /
    /// groups` input channels.
    pub(super) groups: usize,
}

impl Conv {
    pub(super) fn variables(&self) -> Vec<Variable> {
        std::iter::once(self.kernel.clone()).chain(self.bias.clone()).collect()
    }

    pub(super) fn finish(&self, y: Tensor) -> Result<Tensor> {
        super::bias_and_activation(y, self.bias.as_ref(), &self.activation)
    }
}

/// A grouped convolution layer's channels: `groups >= 1` dividing both
/// the input channels and the filters (Keras's checks).
pub(super) fn check_groups(op: &'static str, in_channels: usize, filters: usize, groups: usize) -> Result<()> {
    if groups == 0 || !in_channels.is_multiple_of(groups) || !filters.is_multiple_of(groups) {
        return Err(Error::invalid(
            op,
            format!(
                "groups must be a positive integer dividing both the input channels and the filters, \
                 got groups={groups} for {in_channels} input channels and {filters} filters"
            ),
        ));
    }
    Ok(())
}

/// A convolution layer's sizes: some filters, kernel sizes, strides and
/// dilations of at least 1.
pub(super) fn check_sizes(
    op: &'static str,
    filters: usize,
    kernel_size: &[usize],
    strides: &[i64],
    dilations: &[i64],
) -> Result<()> {
    if filters == 0 {
        return Err(Error::invalid(op, "filters must be a positive integer, got 0"));
    }
    if kernel_size.contains(&0) || strides.iter().chain(dilations).any(|&s| s < 1) {
        return Err(Error::invalid(
            op,
            format!(
                "kernel sizes, strides and dilations must be >= 1, got {kernel_size:?}, {strides:?}, {dilations:?}"
            ),
        ));
    }
    Ok(())
}

/// A 2-D convolution layer: `activation(conv2d(x, kernel) + bias)`, `x`
/// NHWC `[n, h, w, in]`, kernel `[kh, kw, in, filters]` (`[kh, kw, in /
/// groups, filters]` with [`groups`](Conv2DBuilder::groups), as Keras's).
///
/// ```
/// use gradtape::{nn::{Conv2D, Layer}, DType, Padding, Rng, Tensor};
/// let conv = Conv2D::builder(1, 8, [3, 3]).padding(Padding::Same).build(&mut Rng::new(0))?;
/// let y = conv.forward(&Tensor::ones(&[2, 8, 8, 1], DType::F32), false)?;
/// assert_eq!(y.shape(), &[2, 8, 8, 8]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Conv2D(Conv);

/// A transposed 2-D convolution layer (Keras's `Conv2DTranspose`): the
/// gradient of a convolution with respect to its input, so it upsamples
/// with a stride. Kernel `[kh, kw, filters, in]`; the output size is
/// `in · stride` (`Same`) or `in · stride + max(k − stride, 0)` (`Valid`,
/// `k` the dilated kernel size), as Keras computes it.
///
/// ```
/// use gradtape::{nn::{Conv2DTranspose, Layer}, DType, Padding, Rng, Tensor};
/// let up = Conv2DTranspose::builder(4, 2, [3, 3]).strides([2, 2]).padding(Padding::Same).build(&mut Rng::new(0))?;
/// let y = up.forward(&Tensor::ones(&[1, 5, 5, 4], DType::F32), false)?;
/// assert_eq!(y.shape(), &[1, 10, 10, 2]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Conv2DTranspose(Conv);

/// Options for [`Conv2D`] and [`Conv2DTranspose`]; see their `builder`.
pub struct Conv2DBuilder<L> {
    pub(super) in_channels: usize,
    pub(super) filters: usize,
    pub(super) kernel_size: [usize; 2],
    pub(super) strides: [i64; 2],
    pub(super) padding: Padding,
    pub(super) dilations: [i64; 2],
    pub(super) activation: Activation,
    pub(super) use_bias: bool,
    pub(super) kernel_init: Initializer,
    pub(super) bias_init: Initializer,
    pub(super) dtype: DType,
    pub(super) name: Option<String>,
    /// Conv1D's causal padding
    pub(super) causal: bool,
    /// SeparableConv2D's depthwise filters per input channel
    pub(super) depth_multiplier: usize,
    /// Conv2D's and Conv1D's groups
    pub(super) groups: usize,
    _layer: PhantomData<L>,
}

impl<L> Conv2DBuilder<L> {
    pub(super) fn new(in_channels: usize, filters: usize, kernel_size: [usize; 2]) -> Self {
        Conv2DBuilder {
            in_channels,
            filters,
            kernel_size,
            strides: [1, 1],
            padding: Padding::Valid,
            dilations: [1, 1],
            activation: Activation::Linear,
            use_bias: true,
            kernel_init: Initializer::GlorotUniform,
            bias_init: Initializer::Zeros,
            dtype: DType::F32,
            name: None,
            causal: false,
            depth_multiplier: 1,
            groups: 1,
            _layer: PhantomData,
        }
    }
    /// Strides `[height, width]` (default `[1, 1]`).
    pub fn strides(mut self, s: [i64; 2]) -> Self {
        self.strides = s;
        self
    }
    /// Padding (default `Valid`, as Keras).
    pub fn padding(mut self, p: Padding) -> Self {
        self.padding = p;
        self
    }
    /// Dilations `[height, width]` (default `[1, 1]`).
    pub fn dilations(mut self, d: [i64; 2]) -> Self {
        self.dilations = d;
        self
    }
    super::kernel_layer_options!("conv2d` / `conv2d_transpose");

    /// The layer's weights (`kernel` named `kernel_name`, a bias of
    /// `bias_len`) and settings.
    pub(super) fn make_named(
        self,
        base: &'static str,
        kernel_name: &str,
        kernel_shape: &[usize],
        bias_len: usize,
        rng: &mut Rng,
    ) -> Result<Conv> {
        expect_float_dtype(base, self.dtype)?;
        check_sizes(base, self.filters, &self.kernel_size, &self.strides, &self.dilations)?;
        check_groups(base, self.in_channels, self.filters, self.groups)?;
        let name = self.name.unwrap_or_else(|| unique_name(base));
        let kernel = new_weight(
            &name,
            kernel_name,
            kernel_shape,
            self.dtype,
            &self.kernel_init,
            rng,
            true,
        )?;
        let bias = self
            .use_bias
            .then(|| new_weight(&name, "bias", &[bias_len], self.dtype, &self.bias_init, rng, true))
            .transpose()?;
        Ok(Conv {
            name,
            kernel,
            bias,
            strides: self.strides,
            padding: self.padding,
            dilations: self.dilations,
            activation: self.activation,
            groups: self.groups,
        })
    }

    fn make(self, base: &'static str, kernel_shape: [usize; 4], rng: &mut Rng) -> Result<Conv> {
        let filters = self.filters;
        self.make_named(base, "kernel", &kernel_shape, filters, rng)
    }
}

impl Conv2DBuilder<Conv2D> {
    /// Keras's `groups` (default 1): a grouped convolution, the input's
    /// channels and the filters split into `groups` groups, group `i`'s
    /// filters reading group `i`'s channels only; the kernel is `[kh, kw,
    /// in / groups, filters]`. Both `in` and `filters` must be multiples
    /// of it (checked by `build`).
    ///
    /// ```
    /// use gradtape::nn::{Conv2D, Layer, Module};
    /// use gradtape::{DType, Padding, Rng, Tensor};
    /// let conv = Conv2D::builder(8, 4, [3, 3]).groups(2).padding(Padding::Same).build(&mut Rng::new(0))?;
    /// assert_eq!(conv.variables()[0].shape(), vec![3, 3, 4, 4]);
    /// assert_eq!(conv.call(&Tensor::ones(&[1, 5, 5, 8], DType::F32))?.shape(), &[1, 5, 5, 4]);
    /// assert!(Conv2D::builder(8, 3, [3, 3]).groups(2).build(&mut Rng::new(0)).is_err()); // 3 filters
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    /// Creates the layer's variables, drawing from `rng`.
    pub fn build(self, rng: &mut Rng) -> Result<Conv2D> {
        let [kh, kw] = self.kernel_size;
        let shape = [kh, kw, self.in_channels / self.groups.max(1), self.filters];
        Ok(Conv2D(self.make("conv2d", shape, rng)?))
    }
}

impl Conv2DBuilder<Conv2DTranspose> {
    /// Creates the layer's variables, drawing from `rng`.
    pub fn build(self, rng: &mut Rng) -> Result<Conv2DTranspose> {
        let [kh, kw] = self.kernel_size;
        let shape = [kh, kw, self.filters, self.in_channels];
        Ok(Conv2DTranspose(self.make("conv2d_transpose", shape, rng)?))
    }
}

impl Conv2D {
    /// Starts a layer from `in_channels` to `filters` channels with a
    /// `[kh, kw]` kernel (stride 1, `Valid` padding, Glorot-uniform kernel,
    /// zero bias, f32 unless set).
    pub fn builder(in_channels: usize, filters: usize, kernel_size: [usize; 2]) -> Conv2DBuilder<Conv2D> {
        Conv2DBuilder::new(in_channels, filters, kernel_size)
    }

    /// The kernel variable, `[kh, kw, in / groups, filters]`.
    pub fn kernel(&self) -> &Variable {
        &self.0.kernel
    }

    /// The bias variable, `[filters]`, if any.
    pub fn bias(&self) -> Option<&Variable> {
        self.0.bias.as_ref()
    }
}

impl Conv2DTranspose {
    /// Starts a layer from `in_channels` to `filters` channels with a
    /// `[kh, kw]` kernel (same defaults as [`Conv2D::builder`]).
    pub fn builder(in_channels: usize, filters: usize, kernel_size: [usize; 2]) -> Conv2DBuilder<Conv2DTranspose> {
        Conv2DBuilder::new(in_channels, filters, kernel_size)
    }

    /// The kernel variable, `[kh, kw, filters, in]`.
    pub fn kernel(&self) -> &Variable {
        &self.0.kernel
    }

    /// The bias variable, `[filters]`, if any.
    pub fn bias(&self) -> Option<&Variable> {
        self.0.bias.as_ref()
    }
}

impl Module for Conv2D {
    fn variables(&self) -> Vec<Variable> {
        self.0.variables()
    }
}

impl Module for Conv2DTranspose {
    fn variables(&self) -> Vec<Variable> {
        self.0.variables()
    }
}

impl Layer for Conv2D {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let c = &self.0;
        let k = c.kernel.read();
        expect_input(
            "Conv2D",
            self.name(),
            x,
            Some(4),
            Some(k.shape()[2] * c.groups),
            k.dtype(),
        )?;
        c.finish(x.conv2d(&k, c.strides, c.padding, c.dilations)?)
    }
}

impl Layer for Conv2DTranspose {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let c = &self.0;
        let k = c.kernel.read();
        expect_input(
            "Conv2DTranspose",
            self.name(),
            x,
            Some(4),
            Some(k.shape()[3]),
            k.dtype(),
        )?;
        let len = |i: usize, axis: usize| {
            let stride = c.strides[axis] as usize;
            let kd = (k.shape()[axis] - 1) * c.dilations[axis] as usize + 1;
            match c.padding {
                Padding::Same => i * stride,
                Padding::Valid => i * stride + kd.saturating_sub(stride),
            }
        };
        let s = x.shape();
        let out = [s[0], len(s[1], 0), len(s[2], 1), k.shape()[2]];
        c.finish(x.conv2d_transpose(&k, &out, c.strides, c.padding, c.dilations)?)
    }
}
