//! `Dense`: `activation(x · kernel + bias)`, Keras's `Dense` (PyTorch's
//! `Linear` with the kernel stored `[in, out]`).

use super::{
    expect_float_dtype, expect_input, new_weight, unique_name, weight_from, Activation, Initializer, Layer, Module,
};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// A fully connected layer: `activation(x · kernel + bias)` over the last
/// axis of `x` (`[..., in]` gives `[..., units]`).
///
/// ```
/// use gradtape::{nn::{Dense, Layer, Module}, DType, Rng, Tensor};
/// let layer = Dense::new(3, 2, &mut Rng::new(0))?;
/// let y = layer.forward(&Tensor::ones(&[4, 3], DType::F32), false)?;
/// assert_eq!(y.shape(), &[4, 2]);
/// let names: Vec<String> = layer.variables().iter().map(|v| v.name().to_string()).collect();
/// assert_eq!(names, vec![format!("{}/kernel", layer.name()), format!("{}/bias", layer.name())]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Dense {
    name: String,
    kernel: Variable,
    bias: Option<Variable>,
    activation: Activation,
}

/// Options for a [`Dense`] layer; see [`Dense::builder`].
pub struct DenseBuilder {
    in_features: usize,
    units: usize,
    activation: Activation,
    use_bias: bool,
    kernel_init: Initializer,
    bias_init: Initializer,
    dtype: DType,
    name: Option<String>,
}

impl DenseBuilder {
    super::kernel_layer_options!("dense");
    /// Creates the layer's variables, drawing from `rng`.
    ///
    /// Zero `units` is an error (as in Keras), as are sizes whose kernel
    /// cannot be shaped or allocated:
    ///
    /// ```
    /// use gradtape::{nn::Dense, Rng};
    /// assert!(Dense::new(3, 0, &mut Rng::new(0)).is_err());
    /// assert!(Dense::builder(1 << 40, 1 << 40).build(&mut Rng::new(0)).is_err());
    /// ```
    pub fn build(self, rng: &mut Rng) -> Result<Dense> {
        expect_float_dtype("Dense", self.dtype)?;
        if self.units == 0 {
            return Err(Error::invalid("Dense", "units must be a positive integer, got 0"));
        }
        let name = self.name.unwrap_or_else(|| unique_name("dense"));
        let kernel = new_weight(
            &name,
            "kernel",
            &[self.in_features, self.units],
            self.dtype,
            &self.kernel_init,
            rng,
            true,
        )?;
        let bias = self
            .use_bias
            .then(|| new_weight(&name, "bias", &[self.units], self.dtype, &self.bias_init, rng, true))
            .transpose()?;
        Ok(Dense {
            name,
            kernel,
            bias,
            activation: self.activation,
        })
    }
}

impl Dense {
    /// A layer from `in_features` to `units` with the defaults: f32, a
    /// Glorot-uniform kernel, a zero bias, no activation.
    pub fn new(in_features: usize, units: usize, rng: &mut Rng) -> Result<Dense> {
        Dense::builder(in_features, units).build(rng)
    }

    /// Starts a layer with options of its own.
    ///
    /// ```
    /// use gradtape::{nn::{Activation, Dense, Initializer}, DType, Rng};
    /// let d = Dense::builder(4, 3)
    ///     .activation(Activation::Relu)
    ///     .kernel_initializer(Initializer::HeNormal)
    ///     .dtype(DType::F64)
    ///     .name("hidden")
    ///     .build(&mut Rng::new(1))?;
    /// assert_eq!(d.kernel().name(), "hidden/kernel");
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn builder(in_features: usize, units: usize) -> DenseBuilder {
        DenseBuilder {
            in_features,
            units,
            activation: Activation::Linear,
            use_bias: true,
            kernel_init: Initializer::GlorotUniform,
            bias_init: Initializer::Zeros,
            dtype: DType::F32,
            name: None,
        }
    }

    /// A layer holding given weights: `kernel` `[in, units]`, `bias`
    /// `[units]` (same dtype), named `name`.
    ///
    /// ```
    /// use gradtape::{nn::{Activation, Dense, Layer}, Tensor};
    /// let d = Dense::from_weights("fc", Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1])?, Some(Tensor::vector(&[0.5f32])), Activation::Linear)?;
    /// let y = d.forward(&Tensor::from_vec(vec![1.0f32, 1.0], &[1, 2])?, false)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![3.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn from_weights(name: &str, kernel: Tensor, bias: Option<Tensor>, activation: Activation) -> Result<Dense> {
        const OP: &str = "Dense::from_weights";
        expect_float_dtype(OP, kernel.dtype())?;
        if kernel.rank() != 2 {
            return Err(Error::invalid(
                OP,
                format!("the kernel must be [in, units], got shape {:?}", kernel.shape()),
            ));
        }
        if let Some(b) = &bias
            && (b.shape() != [kernel.shape()[1]] || b.dtype() != kernel.dtype())
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "the bias must have shape [{}] and dtype {}, got {:?} and {}",
                    kernel.shape()[1],
                    kernel.dtype(),
                    b.shape(),
                    b.dtype()
                ),
            ));
        }
        Ok(Dense {
            name: name.to_string(),
            kernel: weight_from(name, "kernel", kernel),
            bias: bias.map(|b| weight_from(name, "bias", b)),
            activation,
        })
    }

    /// The kernel variable, `[in, units]`.
    pub fn kernel(&self) -> &Variable {
        &self.kernel
    }

    /// The bias variable, `[units]`, if any.
    pub fn bias(&self) -> Option<&Variable> {
        self.bias.as_ref()
    }
}

impl Module for Dense {
    fn variables(&self) -> Vec<Variable> {
        std::iter::once(self.kernel.clone()).chain(self.bias.clone()).collect()
    }
}

impl Layer for Dense {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let k = self.kernel.read();
        expect_input("Dense", self.name(), x, None, Some(k.shape()[0]), k.dtype())?;
        let y = if x.rank() == 2 {
            x.matmul(&k)?
        } else {
            // [..., in] -> [prod(...), in] · kernel -> [..., units]
            let mut shape = x.shape().to_vec();
            let rows: usize = shape[..shape.len() - 1].iter().product();
            let flat = x.reshape(&[rows, k.shape()[0]])?.matmul(&k)?;
            *shape.last_mut().expect("rank >= 1") = k.shape()[1];
            flat.reshape(&shape)?
        };
        super::bias_and_activation(y, self.bias.as_ref(), &self.activation)
    }
}
