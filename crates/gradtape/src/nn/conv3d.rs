//! `Conv3D`, Keras's 3-D convolution layer (volumes and videos, channels
//! last: `[batch, depth, height, width, channels]`, DHWIO kernels).

use super::{expect_float_dtype, expect_input, new_weight, unique_name, Activation, Initializer, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::Result;
use crate::ops::Padding;
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// A 3-D convolution layer: `activation(conv3d(x, kernel) + bias)`, `x`
/// `[n, d, h, w, in]`, kernel `[kd, kh, kw, in, filters]` (see
/// [`Tensor::conv3d`]).
///
/// ```
/// use gradtape::nn::{Conv3D, Layer, Module};
/// use gradtape::{DType, Padding, Rng, Tensor};
/// let conv = Conv3D::builder(2, 4, [3, 3, 3]).padding(Padding::Same).strides([1, 2, 2]).build(&mut Rng::new(0))?;
/// let y = conv.call(&Tensor::ones(&[1, 4, 6, 6, 2], DType::F32))?;
/// assert_eq!(y.shape(), &[1, 4, 3, 3, 4]);
/// assert_eq!(conv.variables()[0].shape(), vec![3, 3, 3, 2, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Conv3D {
    name: String,
    kernel: Variable,
    bias: Option<Variable>,
    strides: [i64; 3],
    padding: Padding,
    dilations: [i64; 3],
    activation: Activation,
    groups: usize,
}

/// Options for a [`Conv3D`]; see [`Conv3D::builder`].
pub struct Conv3DBuilder {
    in_channels: usize,
    filters: usize,
    kernel_size: [usize; 3],
    strides: [i64; 3],
    padding: Padding,
    dilations: [i64; 3],
    activation: Activation,
    use_bias: bool,
    kernel_init: Initializer,
    bias_init: Initializer,
    dtype: DType,
    name: Option<String>,
    groups: usize,
}

impl Conv3DBuilder {
    /// Strides `[depth, height, width]` (default `[1, 1, 1]`).
    pub fn strides(mut self, s: [i64; 3]) -> Self {
        self.strides = s;
        self
    }
    /// Padding (default `Valid`, as Keras).
    pub fn padding(mut self, p: Padding) -> Self {
        self.padding = p;
        self
    }
    /// Dilations `[depth, height, width]` (default `[1, 1, 1]`).
    pub fn dilations(mut self, d: [i64; 3]) -> Self {
        self.dilations = d;
        self
    }
    /// Keras's `groups` (default 1): a grouped convolution, as
    /// [`Conv2D`](super::Conv2D)'s; the kernel is `[kd, kh, kw, in /
    /// groups, filters]`.
    ///
    /// ```
    /// use gradtape::nn::{Conv3D, Layer, Module};
    /// use gradtape::{DType, Rng, Tensor};
    /// let conv = Conv3D::builder(4, 6, [2, 2, 2]).groups(2).build(&mut Rng::new(0))?;
    /// assert_eq!(conv.variables()[0].shape(), vec![2, 2, 2, 2, 6]);
    /// assert_eq!(conv.call(&Tensor::ones(&[1, 3, 3, 3, 4], DType::F32))?.shape(), &[1, 2, 2, 2, 6]);
    /// assert!(Conv3D::builder(3, 6, [2, 2, 2]).groups(2).build(&mut Rng::new(0)).is_err()); // 3 channels
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
    super::kernel_layer_options!("conv3d");

    /// Creates the layer's variables (Glorot-uniform kernel, zero bias
    /// unless set), drawing from `rng`. Zero filters, kernel sizes, strides
    /// or dilations are errors:
    ///
    /// ```
    /// use gradtape::{nn::Conv3D, Rng};
    /// assert!(Conv3D::builder(2, 4, [3, 0, 3]).build(&mut Rng::new(0)).is_err());
    /// assert!(Conv3D::builder(2, 4, [3, 3, 3]).strides([1, 0, 1]).build(&mut Rng::new(0)).is_err());
    /// ```
    pub fn build(self, rng: &mut Rng) -> Result<Conv3D> {
        const OP: &str = "conv3d";
        expect_float_dtype(OP, self.dtype)?;
        super::conv::check_sizes(OP, self.filters, &self.kernel_size, &self.strides, &self.dilations)?;
        super::conv::check_groups(OP, self.in_channels, self.filters, self.groups)?;
        let name = self.name.unwrap_or_else(|| unique_name(OP));
        let [kd, kh, kw] = self.kernel_size;
        let shape = [kd, kh, kw, self.in_channels / self.groups, self.filters];
        let kernel = new_weight(&name, "kernel", &shape, self.dtype, &self.kernel_init, rng, true)?;
        let bias = self
            .use_bias
            .then(|| new_weight(&name, "bias", &[self.filters], self.dtype, &self.bias_init, rng, true))
            .transpose()?;
        Ok(Conv3D {
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
}

impl Conv3D {
    /// Starts a layer from `in_channels` to `filters` channels with a
    /// `[kd, kh, kw]` kernel (stride 1, `Valid` padding, f32 unless set).
    pub fn builder(in_channels: usize, filters: usize, kernel_size: [usize; 3]) -> Conv3DBuilder {
        Conv3DBuilder {
            in_channels,
            filters,
            kernel_size,
            strides: [1; 3],
            padding: Padding::Valid,
            dilations: [1; 3],
            activation: Activation::Linear,
            use_bias: true,
            kernel_init: Initializer::GlorotUniform,
            bias_init: Initializer::Zeros,
            dtype: DType::F32,
            name: None,
            groups: 1,
        }
    }

    /// The kernel variable, `[kd, kh, kw, in / groups, filters]`.
    pub fn kernel(&self) -> &Variable {
        &self.kernel
    }
}

impl Module for Conv3D {
    fn variables(&self) -> Vec<Variable> {
        std::iter::once(self.kernel.clone()).chain(self.bias.clone()).collect()
    }
}

impl Layer for Conv3D {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let k = self.kernel.read();
        expect_input(
            "Conv3D",
            self.name(),
            x,
            Some(5),
            Some(k.shape()[3] * self.groups),
            k.dtype(),
        )?;
        let y = x.conv3d(&k, self.strides, self.padding, self.dilations)?;
        super::bias_and_activation(y, self.bias.as_ref(), &self.activation)
    }
}
