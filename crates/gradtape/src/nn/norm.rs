//! `LayerNorm`, `RMSNorm` and `BatchNorm` over the last axis (`BatchNorm`
//! over any axes too), as Keras's `LayerNormalization`, `RMSNormalization`
//! and `BatchNormalization`
//! (defaults included: `epsilon = 1e-3`, `1e-6`, `momentum = 0.99`).

use super::{expect_float_dtype, expect_input, new_weight, unique_name, Initializer, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// The optional affine parameters of a normalisation layer: `gamma`
/// (scale, ones) and `beta` (offset, zeros).
pub(super) struct Affine {
    pub(super) gamma: Option<Variable>,
    pub(super) beta: Option<Variable>,
}

impl Affine {
    /// `{name}/gamma` when `scale`, `{name}/beta` when `center`.
    pub(super) fn new(name: &str, features: usize, dtype: DType, scale: bool, center: bool) -> Result<Affine> {
        expect_float_dtype("normalization", dtype)?;
        // constant initialisers draw nothing
        let mut rng = Rng::new(0);
        let gamma = scale
            .then(|| new_weight(name, "gamma", &[features], dtype, &Initializer::Ones, &mut rng, true))
            .transpose()?;
        let beta = center
            .then(|| new_weight(name, "beta", &[features], dtype, &Initializer::Zeros, &mut rng, true))
            .transpose()?;
        Ok(Affine { gamma, beta })
    }

    /// `gamma`, then `beta` (those that exist).
    pub(super) fn variables(&self) -> Vec<Variable> {
        self.gamma.iter().chain(&self.beta).cloned().collect()
    }

    /// The weights' dtype, or `default` without weights.
    pub(super) fn dtype_or(&self, default: DType) -> DType {
        self.gamma
            .as_ref()
            .or(self.beta.as_ref())
            .map_or(default, Variable::dtype)
    }

    /// The values of `gamma` and `beta`.
    pub(super) fn read(&self) -> (Option<Tensor>, Option<Tensor>) {
        (
            self.gamma.as_ref().map(Variable::read),
            self.beta.as_ref().map(Variable::read),
        )
    }
}

pub(super) fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if eps >= 0.0 && eps.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("epsilon must be finite and >= 0, got {eps}"),
        ))
    }
}

/// Layer normalisation over the last axis: each example's features get
/// mean 0 and variance 1 (`epsilon` added to the variance), then `· gamma +
/// beta`.
///
/// ```
/// use gradtape::{nn::{Layer, LayerNorm}, DType, Tensor};
/// let ln = LayerNorm::new(2, DType::F64)?;
/// let y = ln.call(&Tensor::from_vec(vec![1.0f64, 3.0], &[1, 2])?)?;
/// let v = y.to_vec::<f64>()?;
/// assert!((v[0] + v[1]).abs() < 1e-12 && v[1] > 0.99);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct LayerNorm {
    name: String,
    features: usize,
    epsilon: f64,
    affine: Affine,
}

/// Options for a [`LayerNorm`]; see [`LayerNorm::builder`].
pub struct LayerNormBuilder {
    features: usize,
    epsilon: f64,
    center: bool,
    scale: bool,
    dtype: DType,
    name: Option<String>,
}

/// The options of a normalisation layer with `gamma` and `beta`
/// (`LayerNorm`'s, `GroupNorm`'s): epsilon, center, scale, dtype, name.
macro_rules! affine_norm_options {
    ($default_name:literal) => {
        /// The constant added to the variance (default `1e-3`, Keras's).
        pub fn epsilon(mut self, eps: f64) -> Self {
            self.epsilon = eps;
            self
        }
        /// Whether to add the offset `beta` (default true).
        pub fn center(mut self, center: bool) -> Self {
            self.center = center;
            self
        }
        /// Whether to multiply by the scale `gamma` (default true).
        pub fn scale(mut self, scale: bool) -> Self {
            self.scale = scale;
            self
        }
        /// The weights' dtype (default f32).
        pub fn dtype(mut self, d: $crate::DType) -> Self {
            self.dtype = d;
            self
        }
        #[doc = concat!("The layer's name (default `", $default_name, "`, made unique).")]
        pub fn name(mut self, n: impl Into<String>) -> Self {
            self.name = Some(n.into());
            self
        }
    };
}
pub(super) use affine_norm_options;

impl LayerNormBuilder {
    affine_norm_options!("layer_normalization");
    /// Creates the layer (`gamma` ones, `beta` zeros). A negative or
    /// non-finite epsilon is an error:
    ///
    /// ```
    /// use gradtape::nn::LayerNorm;
    /// assert!(LayerNorm::builder(4).epsilon(-1.0).build().is_err());
    /// ```
    pub fn build(self) -> Result<LayerNorm> {
        check_eps("LayerNorm", self.epsilon)?;
        let name = self.name.unwrap_or_else(|| unique_name("layer_normalization"));
        let affine = Affine::new(&name, self.features, self.dtype, self.scale, self.center)?;
        Ok(LayerNorm {
            name,
            features: self.features,
            epsilon: self.epsilon,
            affine,
        })
    }
}

impl LayerNorm {
    /// Normalises `features` values, with `gamma` and `beta`, `epsilon =
    /// 1e-3`.
    pub fn new(features: usize, dtype: DType) -> Result<LayerNorm> {
        LayerNorm::builder(features).dtype(dtype).build()
    }

    /// With a chosen `epsilon`, and `center` / `scale` switching `beta` /
    /// `gamma` on or off (the builder's options, positionally).
    pub fn with_options(features: usize, epsilon: f64, center: bool, scale: bool, dtype: DType) -> Result<LayerNorm> {
        LayerNorm::builder(features)
            .epsilon(epsilon)
            .center(center)
            .scale(scale)
            .dtype(dtype)
            .build()
    }

    /// Starts a layer normalising `features` values, with options of its
    /// own.
    ///
    /// ```
    /// use gradtape::{nn::{Layer, LayerNorm, Module}, DType, Tensor};
    /// let ln = LayerNorm::builder(2).epsilon(1e-5).center(false).dtype(DType::F64).name("ln_f").build()?;
    /// assert_eq!(ln.variables().len(), 1); // gamma only
    /// assert_eq!(ln.variables()[0].name(), "ln_f/gamma");
    /// let y = ln.call(&Tensor::from_vec(vec![1.0f64, 3.0], &[1, 2])?)?;
    /// assert!((y.to_vec::<f64>()?[1] - 1.0).abs() < 1e-5);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn builder(features: usize) -> LayerNormBuilder {
        LayerNormBuilder {
            features,
            epsilon: 1e-3,
            center: true,
            scale: true,
            dtype: DType::F32,
            name: None,
        }
    }
}

impl Module for LayerNorm {
    fn variables(&self) -> Vec<Variable> {
        self.affine.variables()
    }
}

impl Layer for LayerNorm {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        expect_input(
            "LayerNorm",
            self.name(),
            x,
            None,
            Some(self.features),
            self.affine.dtype_or(x.dtype()),
        )?;
        let (g, b) = self.affine.read();
        x.layer_normalization(&[-1], g.as_ref(), b.as_ref(), self.epsilon)
    }
}

/// RMS normalisation over the last axis, Keras's `RMSNormalization` (and
/// PyTorch's `nn.RMSNorm`): `x / sqrt(mean(x²) + epsilon) · scale`, with
/// one learned `scale` per feature (ones at first) and no offset; see
/// [`Tensor::rms_normalization`]. It has no training behaviour: call it
/// with [`Layer::call`].
///
/// ```
/// use gradtape::{nn::{Layer, Module, RMSNorm}, DType, Tensor};
/// let norm = RMSNorm::builder(2).epsilon(0.0).dtype(DType::F64).name("rms").build()?;
/// assert_eq!(norm.variables()[0].name(), "rms/scale");
/// let y = norm.call(&Tensor::from_vec(vec![3.0f64, 4.0], &[1, 2])?)?.to_vec::<f64>()?;
/// let r = 2f64.sqrt() / 5.0; // 1 / rms([3, 4])
/// assert!((y[0] - 3.0 * r).abs() < 1e-15 && (y[1] - 4.0 * r).abs() < 1e-15);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct RMSNorm {
    name: String,
    features: usize,
    epsilon: f64,
    scale: Variable,
}

/// Options for an [`RMSNorm`]; see [`RMSNorm::builder`].
pub struct RMSNormBuilder {
    features: usize,
    epsilon: f64,
    dtype: DType,
    name: Option<String>,
}

impl RMSNormBuilder {
    /// The constant added to the mean square (default `1e-6`, Keras's;
    /// PyTorch's default is the dtype's machine epsilon).
    pub fn epsilon(mut self, eps: f64) -> Self {
        self.epsilon = eps;
        self
    }
    /// The weight's dtype (default f32).
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }
    /// The layer's name (default `rms_normalization`, made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// Creates the layer (`scale` ones). A negative or non-finite epsilon,
    /// or no features, is an error:
    ///
    /// ```
    /// use gradtape::nn::RMSNorm;
    /// assert!(RMSNorm::builder(4).epsilon(f64::NAN).build().is_err());
    /// assert!(RMSNorm::builder(0).build().is_err());
    /// ```
    pub fn build(self) -> Result<RMSNorm> {
        const OP: &str = "RMSNorm";
        check_eps(OP, self.epsilon)?;
        expect_float_dtype(OP, self.dtype)?;
        if self.features == 0 {
            return Err(Error::invalid(OP, "features must be positive, got 0"));
        }
        let name = self.name.unwrap_or_else(|| unique_name("rms_normalization"));
        // a constant initialiser draws nothing
        let mut rng = Rng::new(0);
        let scale = new_weight(
            &name,
            "scale",
            &[self.features],
            self.dtype,
            &Initializer::Ones,
            &mut rng,
            true,
        )?;
        Ok(RMSNorm {
            name,
            features: self.features,
            epsilon: self.epsilon,
            scale,
        })
    }
}

impl RMSNorm {
    /// Normalises `features` values, `epsilon = 1e-6`.
    pub fn new(features: usize, dtype: DType) -> Result<RMSNorm> {
        RMSNorm::builder(features).dtype(dtype).build()
    }

    /// Starts a layer normalising `features` values, with options of its
    /// own.
    pub fn builder(features: usize) -> RMSNormBuilder {
        RMSNormBuilder {
            features,
            epsilon: 1e-6,
            dtype: DType::F32,
            name: None,
        }
    }

    /// The learned per-feature scale.
    pub fn scale(&self) -> &Variable {
        &self.scale
    }
}

impl Module for RMSNorm {
    fn variables(&self) -> Vec<Variable> {
        vec![self.scale.clone()]
    }
}

impl Layer for RMSNorm {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        expect_input("RMSNorm", self.name(), x, None, Some(self.features), self.scale.dtype())?;
        x.rms_normalization(&[-1], Some(&self.scale.read()), self.epsilon)
    }
}

/// Batch normalisation over the last axis (channels last), or the axis
/// (or axes) of [`BatchNormBuilder::axis`] (channels first: `axis(1)`).
/// While training it normalises with the batch's mean and (biased)
/// variance over every other axis and moves the non-trainable
/// `moving_mean` and `moving_variance` towards them (`moving = moving ·
/// momentum + batch · (1 − momentum)`); at inference it uses the moving
/// statistics.
///
/// ```
/// use gradtape::{nn::{BatchNorm, Layer, Module}, DType, Tensor};
/// let bn = BatchNorm::new(1, DType::F64)?;
/// let x = Tensor::from_vec(vec![1.0f64, 3.0], &[2, 1])?;
/// let y = bn.forward(&x, true)?.to_vec::<f64>()?;          // batch statistics
/// assert!((y[0] + y[1]).abs() < 1e-12 && y[1] > 0.99);
/// let mean = bn.non_trainable_variables()[0].read().to_vec::<f64>()?;
/// assert!((mean[0] - 0.02).abs() < 1e-12);                 // 0.99 · 0 + 0.01 · 2
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct BatchNorm {
    name: String,
    features: usize,
    /// the normalised axes (`[-1]` by default)
    axes: Vec<isize>,
    momentum: f64,
    epsilon: f64,
    affine: Affine,
    moving_mean: Variable,
    moving_variance: Variable,
}

/// Options for a [`BatchNorm`]; see [`BatchNorm::builder`].
pub struct BatchNormBuilder {
    features: usize,
    axes: Vec<isize>,
    momentum: f64,
    epsilon: f64,
    center: bool,
    scale: bool,
    dtype: DType,
    name: Option<String>,
}

impl BatchNormBuilder {
    affine_norm_options!("batch_normalization");

    /// The moving statistics' momentum, in `[0, 1]` (default `0.99`,
    /// Keras's): `moving = moving · momentum + batch · (1 − momentum)`.
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    /// The axis of the features, each normalised on its own (default
    /// `-1`, channels last; `1` for channels first, `[N, C, H, W]`), as
    /// Keras's `BatchNormalization(axis=...)`; negative counts from the
    /// end. The statistics are taken over every other axis. The builder's
    /// `features` is that axis's size.
    ///
    /// ```
    /// use gradtape::{nn::{BatchNorm, Layer}, DType, Tensor};
    /// // [batch 2, channels 2, width 2]: each channel normalised over batch and width
    /// let bn = BatchNorm::builder(2).axis(1).dtype(DType::F64).build()?;
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 10.0, 1.0, 3.0, 20.0, 20.0], &[2, 2, 2])?;
    /// let y = bn.forward(&x, true)?.to_vec::<f64>()?;
    /// assert!((y[0] + 1.0).abs() < 1e-3 && (y[2] + 1.0).abs() < 1e-3); // channel 0: ±1, channel 1: 10 or 20
    /// let mean = bn.moving_mean().read().to_vec::<f64>()?; // 0.01 of the batch's [2, 15]
    /// assert!((mean[0] - 0.02).abs() < 1e-12 && (mean[1] - 0.15).abs() < 1e-12);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn axis(self, axis: isize) -> Self {
        self.axes(&[axis])
    }

    /// Several feature axes (as Keras 2's `axis=[...]`): each position of
    /// them is a feature of its own, with its own statistics over the
    /// other axes; `features` is the product of their sizes, and the
    /// weights and moving statistics hold them flattened in increasing
    /// axis order. An empty list is an error at build; an axis out of
    /// range or repeated, an error of the call.
    pub fn axes(mut self, axes: &[isize]) -> Self {
        self.axes = axes.to_vec();
        self
    }

    /// Creates the layer (`gamma` ones, `beta` zeros, the moving mean
    /// zeros and the moving variance ones). A momentum outside `[0, 1]`
    /// and a negative or non-finite epsilon are errors:
    ///
    /// ```
    /// use gradtape::nn::BatchNorm;
    /// assert!(BatchNorm::builder(4).momentum(1.5).build().is_err());
    /// assert!(BatchNorm::builder(4).epsilon(f64::NAN).build().is_err());
    /// ```
    pub fn build(self) -> Result<BatchNorm> {
        check_eps("BatchNorm", self.epsilon)?;
        if self.axes.is_empty() {
            return Err(Error::invalid("BatchNorm", "axis: at least one axis is needed"));
        }
        if !(0.0..=1.0).contains(&self.momentum) {
            return Err(Error::invalid(
                "BatchNorm",
                format!("momentum must lie in [0, 1], got {}", self.momentum),
            ));
        }
        let name = self.name.unwrap_or_else(|| unique_name("batch_normalization"));
        let affine = Affine::new(&name, self.features, self.dtype, self.scale, self.center)?;
        let mut rng = Rng::new(0);
        let stat = |part: &str, init: &Initializer, rng: &mut Rng| {
            new_weight(&name, part, &[self.features], self.dtype, init, rng, false)
        };
        let moving_mean = stat("moving_mean", &Initializer::Zeros, &mut rng)?;
        let moving_variance = stat("moving_variance", &Initializer::Ones, &mut rng)?;
        Ok(BatchNorm {
            name,
            features: self.features,
            axes: self.axes,
            momentum: self.momentum,
            epsilon: self.epsilon,
            affine,
            moving_mean,
            moving_variance,
        })
    }
}

impl BatchNorm {
    /// Normalises `features` channels, with `gamma` and `beta`, `momentum =
    /// 0.99`, `epsilon = 1e-3`.
    pub fn new(features: usize, dtype: DType) -> Result<BatchNorm> {
        BatchNorm::builder(features).dtype(dtype).build()
    }

    /// With chosen `momentum` (in `[0, 1]`) and `epsilon`, and `center` /
    /// `scale` switching `beta` / `gamma` on or off (the builder's options,
    /// positionally).
    pub fn with_options(
        features: usize,
        momentum: f64,
        epsilon: f64,
        center: bool,
        scale: bool,
        dtype: DType,
    ) -> Result<BatchNorm> {
        BatchNorm::builder(features)
            .momentum(momentum)
            .epsilon(epsilon)
            .center(center)
            .scale(scale)
            .dtype(dtype)
            .build()
    }

    /// Starts a layer normalising `features` channels (the last axis, or
    /// those of [`axis`](BatchNormBuilder::axis)), with options of its
    /// own, by name as Keras's `BatchNormalization(axis=..., momentum=...,
    /// epsilon=..., center=..., scale=..., name=...)`.
    ///
    /// ```
    /// use gradtape::{nn::{BatchNorm, Layer, Module}, DType, Tensor};
    /// let bn = BatchNorm::builder(1).momentum(0.9).epsilon(1e-5).center(false).dtype(DType::F64).name("bn1").build()?;
    /// let names: Vec<String> = bn.variables().iter().map(|v| v.name().to_string()).collect();
    /// assert_eq!(names, ["bn1/gamma", "bn1/moving_mean", "bn1/moving_variance"]);
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0], &[2, 1])?;
    /// bn.forward(&x, true)?;
    /// let mean = bn.moving_mean().read().to_vec::<f64>()?;
    /// assert!((mean[0] - 0.2).abs() < 1e-12); // 0.9 · 0 + 0.1 · 2
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn builder(features: usize) -> BatchNormBuilder {
        BatchNormBuilder {
            features,
            axes: vec![-1],
            momentum: 0.99,
            epsilon: 1e-3,
            center: true,
            scale: true,
            dtype: DType::F32,
            name: None,
        }
    }

    /// The moving mean (non-trainable).
    pub fn moving_mean(&self) -> &Variable {
        &self.moving_mean
    }

    /// The moving variance (non-trainable).
    pub fn moving_variance(&self) -> &Variable {
        &self.moving_variance
    }
}

impl Module for BatchNorm {
    fn variables(&self) -> Vec<Variable> {
        let stats = [self.moving_mean.clone(), self.moving_variance.clone()];
        self.affine.variables().into_iter().chain(stats).collect()
    }
}

impl Layer for BatchNorm {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let last = self.axes == [-1];
        expect_input(
            "BatchNorm",
            self.name(),
            x,
            None,
            last.then_some(self.features),
            self.moving_mean.dtype(),
        )?;
        // the parameters' shape against `x`: `[features]` on the last
        // axis, else `x`'s sizes on the feature axes and 1 elsewhere
        let (reduce, shape) = self.layout(x)?;
        let to_x = |t: Tensor| if last { Ok(t) } else { t.reshape(&shape) };
        let (mean, var) = if training {
            let (mean, var) = x.moments(&reduce, false)?;
            // the statistics' update is not part of the gradient
            let m = self.momentum;
            let update = |v: &Variable, batch: &Tensor| -> Result<()> {
                let batch = match last {
                    true => batch.stop_gradient(),
                    false => batch.stop_gradient().reshape(&[self.features])?,
                };
                let new = v
                    .read()
                    .stop_gradient()
                    .mul_scalar(m)?
                    .add(&batch.mul_scalar(1.0 - m)?)?;
                v.assign(&new)
            };
            update(&self.moving_mean, &mean)?;
            update(&self.moving_variance, &var)?;
            (to_x(mean)?, to_x(var)?)
        } else {
            (to_x(self.moving_mean.read())?, to_x(self.moving_variance.read())?)
        };
        let (g, b) = self.affine.read();
        let (g, b) = (g.map(to_x).transpose()?, b.map(to_x).transpose()?);
        Tensor::batch_normalization(x, &mean, &var, b.as_ref(), g.as_ref(), self.epsilon)
    }
}

impl BatchNorm {
    /// The axes `x`'s statistics are taken over, and the shape that the
    /// parameters take against `x` (see [`BatchNormBuilder::axes`]);
    /// errors for an axis out of range or repeated, or feature axes whose
    /// sizes are not `features`.
    fn layout(&self, x: &Tensor) -> Result<(Vec<isize>, Vec<usize>)> {
        let (rank, xs) = (x.rank(), x.shape());
        let mut feature = vec![false; rank];
        for &a in &self.axes {
            let at = if a < 0 { a + rank as isize } else { a };
            if !(0..rank as isize).contains(&at) || feature[at as usize] {
                return Err(Error::invalid(
                    "BatchNorm",
                    format!(
                        "layer '{}': axis {a} of axes {:?} is {} for an input of shape {xs:?}",
                        self.name,
                        self.axes,
                        if (0..rank as isize).contains(&at) {
                            "repeated"
                        } else {
                            "out of range"
                        }
                    ),
                ));
            }
            feature[at as usize] = true;
        }
        let shape: Vec<usize> = (0..rank).map(|d| if feature[d] { xs[d] } else { 1 }).collect();
        if shape.iter().product::<usize>() != self.features {
            return Err(Error::invalid(
                "BatchNorm",
                format!(
                    "layer '{}' normalises {} features on axes {:?}, got an input of shape {xs:?}",
                    self.name, self.features, self.axes
                ),
            ));
        }
        let reduce = (0..rank).filter(|&d| !feature[d]).map(|d| d as isize).collect();
        Ok((reduce, shape))
    }
}
