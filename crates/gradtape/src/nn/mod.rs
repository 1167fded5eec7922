//! Layers, initialisers, losses and metrics for training models, in the
//! style of Keras, built on the tape.
//!
//! A layer holds its weights as named [`Variable`]s and computes with the
//! ordinary differentiable ops, so a [`GradientTape`](crate::GradientTape)
//! that watches accessed variables (the default) records a forward pass and
//! gives the gradients of every weight: there is no second autodiff path.
//! [`Module::variables`] lists a layer's variables in a stable order (the
//! order they were created in, layer after layer in a [`Sequential`]);
//! [`Module::trainable_variables`] keeps those an optimizer updates and
//! [`Module::non_trainable_variables`] the others (batch-norm statistics).
//!
//! ```
//! use gradtape::nn::{Activation, Dense, Layer, Module, Sequential};
//! use gradtape::optim::{Adam, Optimizer};
//! use gradtape::{nn::losses, DType, GradientTape, Rng, Tensor};
//!
//! let mut rng = Rng::new(0);
//! let model = Sequential::new()
//!     .add(Dense::builder(2, 8).activation(Activation::Tanh).build(&mut rng)?)
//!     .add(Dense::new(8, 1, &mut rng)?);
//! let x = Tensor::from_vec(vec![0.0f32, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], &[4, 2])?;
//! let y = Tensor::from_vec(vec![0.0f32, 1.0, 1.0, 0.0], &[4, 1])?;
//! let mut opt = Adam::new(0.05);
//! let vars = model.trainable_variables();
//! let mut first = None;
//! for _ in 0..200 {
//!     let tape = GradientTape::new();
//!     let loss = tape.record(|| losses::mean_squared_error(&y, &model.forward(&x, true)?))?;
//!     first.get_or_insert(loss.item()?);
//!     opt.minimize(&tape, &loss, &vars)?;
//! }
//! let last = losses::mean_squared_error(&y, &model.call(&x)?)?.item()?;
//! assert!(last < 0.1 * first.unwrap());
//! # Ok::<(), gradtape::Error>(())
//! ```
//!
//! Names: each layer has a name, by default its kind made unique per
//! thread as Keras does (`dense`, `dense_1`, ...; [`reset_names`] starts
//! again), and its variables are called `"{layer}/{weight}"`
//! (`dense_1/kernel`). Checkpoints ([`crate::io`]) key variables by these
//! names, so a model rebuilt in the same order in a new process loads the
//! weights saved by the old one.

mod activation;
mod attention;
mod attention_args;
mod attention_projection;
mod conv;
mod conv3d;
mod conv_more;
mod dense;
mod dot_attention;
mod embedding;
mod group_norm;
pub mod init;
pub mod losses;
mod masking;
pub mod metrics;
mod norm;
mod pooling;
mod position;
mod recurrent;
mod rnn;
mod rotary;
pub mod sampling;
mod sequential;
mod simple;
mod transformer;

pub use activation::Activation;
pub use attention::{AttentionArgs, KvCache, MultiHeadAttention, MultiHeadAttentionBuilder};
pub use conv::{Conv2D, Conv2DBuilder, Conv2DTranspose};
pub use conv3d::{Conv3D, Conv3DBuilder};
pub use conv_more::{Conv1D, DepthwiseConv2D, GlobalPooling, SeparableConv2D};
pub use dense::{Dense, DenseBuilder};
pub use dot_attention::{AdditiveAttention, AdditiveBuilder, Attention, AttentionBuilder, ScoreMode};
pub use embedding::{Embedding, EmbeddingBuilder};
pub use group_norm::{GroupNorm, GroupNormBuilder};
pub use init::Initializer;
pub use masking::{Masking, SequenceLayer};
pub use norm::{BatchNorm, BatchNormBuilder, LayerNorm, LayerNormBuilder, RMSNorm, RMSNormBuilder};
pub use pooling::{Pool1D, Pool3D, PoolBuilder};
pub use position::{sine_position_encoding, PositionalEmbedding, PositionalEmbeddingBuilder};
pub use recurrent::{GRUCell, LSTMCell, LSTMState};
pub use rnn::{Bidirectional, Merge, RecurrentBuilder, GRU, LSTM};
pub use rotary::{RotaryEmbedding, RotaryEmbeddingBuilder};
pub use sequential::Sequential;
pub use simple::{Dropout, Flatten, Pool2D, PoolKind, UpSampling2D};
pub use transformer::{BlockArgs, TransformerBlock, TransformerBlockBuilder};

use std::cell::RefCell;
use std::collections::HashMap;

use crate::autodiff::variable::Variable;
use crate::error::Result;
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// Something that owns variables: a layer, a cell, a model.
pub trait Module {
    /// Every variable, trainable or not, in a stable order: creation order
    /// within a layer, layer order within a model.
    fn variables(&self) -> Vec<Variable>;

    /// The variables an optimizer updates (those created trainable), in the
    /// order of [`variables`](Self::variables).
    fn trainable_variables(&self) -> Vec<Variable> {
        self.variables().into_iter().filter(Variable::trainable).collect()
    }

    /// The other variables (moving statistics), in the same order.
    fn non_trainable_variables(&self) -> Vec<Variable> {
        self.variables().into_iter().filter(|v| !v.trainable()).collect()
    }

    /// Moves every variable to `device` (PyTorch's `module.to(device)`);
    /// see [`Variable::move_to`].
    fn move_to(&self, device: crate::tensor::Device) -> crate::error::Result<()> {
        self.variables().iter().try_for_each(|v| v.move_to(device))
    }

    /// The values of [`variables`](Self::variables), in their order
    /// (Keras's `get_weights()`; the tensors are the values now, later
    /// assignments do not change them).
    fn get_weights(&self) -> Vec<Tensor> {
        self.variables().iter().map(Variable::read).collect()
    }

    /// Assigns `weights` to [`variables`](Self::variables) in their order
    /// (Keras's `set_weights`): copies one model into another of the same
    /// architecture, as a DQN's target network from the online one
    /// (`target.set_weights(&online.get_weights())`). In a traced function
    /// the assignments happen at each call. An error naming the first
    /// mismatch when the count differs or a weight's shape or dtype is not
    /// its variable's; then nothing is assigned.
    ///
    /// ```
    /// use gradtape::nn::{Dense, Module};
    /// use gradtape::Rng;
    /// let mut rng = Rng::new(0);
    /// let (online, target) = (Dense::new(4, 3, &mut rng)?, Dense::new(4, 3, &mut rng)?);
    /// target.set_weights(&online.get_weights())?;
    /// assert_eq!(target.variables()[0].read().to_vec::<f32>()?, online.variables()[0].read().to_vec::<f32>()?);
    /// let other = Dense::new(3, 4, &mut rng)?;
    /// let e = target.set_weights(&other.get_weights()).unwrap_err();
    /// assert!(e.to_string().contains("shape [3, 4]"), "{e}");
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    fn set_weights(&self, weights: &[Tensor]) -> Result<()> {
        let vars = self.variables();
        if vars.len() != weights.len() {
            return Err(crate::error::Error::InvalidArgument {
                op: "set_weights",
                msg: format!(
                    "{} weights given for a module of {} variables ({})",
                    weights.len(),
                    vars.len(),
                    vars.iter().map(|v| v.name().to_string()).collect::<Vec<_>>().join(", ")
                ),
            });
        }
        for (j, (v, w)) in vars.iter().zip(weights).enumerate() {
            if v.shape() != w.shape() || v.dtype() != w.dtype() {
                return Err(crate::error::Error::InvalidArgument {
                    op: "set_weights",
                    msg: format!(
                        "weight {j} is {:?} of shape {:?}, variable {} is {:?} of shape {:?}",
                        w.dtype(),
                        w.shape(),
                        v.name(),
                        v.dtype(),
                        v.shape()
                    ),
                });
            }
        }
        vars.iter().zip(weights).try_for_each(|(v, w)| v.assign(w))
    }

    /// The number of scalar weights in [`variables`](Self::variables).
    fn count_params(&self) -> usize {
        self.variables()
            .iter()
            .map(|v| v.shape().iter().product::<usize>())
            .sum()
    }
}

/// A layer with one input and one output, Keras's `Layer.call`.
///
/// `training` selects the behaviour of layers that differ between training
/// and inference (dropout drops only while training; batch normalisation
/// uses and updates batch statistics while training, its moving averages
/// otherwise); the others ignore it.
pub trait Layer: Module + Send + Sync {
    /// The layer's name (unique per thread unless chosen by the caller).
    fn name(&self) -> &str;

    /// Applies the layer.
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor>;

    /// Applies the layer at inference, `forward(x, false)`: Keras's
    /// `layer(x)`, for layers without training behaviour (or to run a model
    /// for prediction).
    ///
    /// ```
    /// use gradtape::{nn::{Dense, Dropout, Layer}, DType, Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let x = Tensor::ones(&[2, 3], DType::F32);
    /// let d = Dense::new(3, 4, &mut rng)?;
    /// assert_eq!(d.call(&x)?.shape(), &[2, 4]);
    /// // dropout is the identity at inference
    /// assert_eq!(Dropout::new(0.5, &mut rng)?.call(&x)?.to_vec::<f32>()?, vec![1.0; 6]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    fn call(&self, x: &Tensor) -> Result<Tensor> {
        self.forward(x, false)
    }
}

impl<L: Module + ?Sized> Module for Box<L> {
    fn variables(&self) -> Vec<Variable> {
        (**self).variables()
    }
}

impl<L: Layer + ?Sized> Layer for Box<L> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn forward(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        (**self).forward(x, training)
    }
}

thread_local! {
    static NAME_UIDS: RefCell<HashMap<String, usize>> = RefCell::new(HashMap::new());
}

/// `base` the first time on this thread, then `base_1`, `base_2`, ... as
/// Keras names layers.
pub(crate) fn unique_name(base: &str) -> String {
    NAME_UIDS.with(|m| {
        let mut m = m.borrow_mut();
        let n = m.entry(base.to_string()).or_insert(0);
        let name = if *n == 0 {
            base.to_string()
        } else {
            format!("{base}_{n}")
        };
        *n += 1;
        name
    })
}

/// Forgets the default layer names handed out on this thread, so the next
/// `Dense` is `dense` again (Keras's `clear_session`). Use it to rebuild a
/// model with the same variable names, e.g. before loading a checkpoint in
/// a process that built other layers first.
///
/// ```
/// use gradtape::{nn, Rng};
/// nn::reset_names();
/// let a = nn::Dense::new(2, 2, &mut Rng::new(0))?;
/// nn::reset_names();
/// let b = nn::Dense::new(2, 2, &mut Rng::new(0))?;
/// assert_eq!(gradtape::nn::Layer::name(&a), gradtape::nn::Layer::name(&b));
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn reset_names() {
    NAME_UIDS.with(|m| m.borrow_mut().clear());
}

/// The builder options shared by layers with a kernel and a bias
/// (`activation`, `use_bias`, initialisers, `dtype`, `name`).
macro_rules! kernel_layer_options {
    ($default_name:literal) => {
        /// The activation (default linear).
        pub fn activation(mut self, a: $crate::nn::Activation) -> Self {
            self.activation = a;
            self
        }
        /// Whether to add a bias (default true).
        pub fn use_bias(mut self, b: bool) -> Self {
            self.use_bias = b;
            self
        }
        /// The kernel's initialiser (default Glorot uniform).
        pub fn kernel_initializer(mut self, i: $crate::nn::Initializer) -> Self {
            self.kernel_init = i;
            self
        }
        /// The bias's initialiser (default zeros).
        pub fn bias_initializer(mut self, i: $crate::nn::Initializer) -> Self {
            self.bias_init = i;
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
pub(crate) use kernel_layer_options;

/// `activation(y + bias)`, the bias (when there is one) added along the
/// last axis: the end of every kernel layer's forward pass.
pub(crate) fn bias_and_activation(y: Tensor, bias: Option<&Variable>, activation: &Activation) -> Result<Tensor> {
    let y = match bias {
        Some(b) => y.bias_add(&b.read())?,
        None => y,
    };
    activation.apply(&y)
}

/// A variable `"{layer}/{weight}"` initialised by `init`.
pub(crate) fn new_weight(
    layer: &str,
    weight: &str,
    shape: &[usize],
    dtype: DType,
    init: &Initializer,
    rng: &mut Rng,
    trainable: bool,
) -> Result<Variable> {
    let value = init.init(shape, dtype, rng)?;
    Ok(Variable::builder(value)
        .name(format!("{layer}/{weight}"))
        .trainable(trainable)
        .build())
}

/// A variable `"{layer}/{weight}"` holding `value`.
pub(crate) fn weight_from(layer: &str, weight: &str, value: Tensor) -> Variable {
    Variable::builder(value).name(format!("{layer}/{weight}")).build()
}

/// Fails unless `t` is f32 or f64 (layers compute in floating point).
pub(crate) fn expect_float_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(crate::Error::UnsupportedDType {
            op,
            dtype,
            expected: "f32 or f64",
        })
    }
}

/// Fails unless `x` has the dtype `dtype` of layer `layer`'s weights, rank
/// `rank` and last dimension `last` (`None`: any); the error names the
/// layer, as Keras's does.
pub(crate) fn expect_input(
    op: &'static str,
    layer: &str,
    x: &Tensor,
    rank: Option<usize>,
    last: Option<usize>,
    dtype: DType,
) -> Result<()> {
    if x.dtype() != dtype {
        return Err(crate::Error::invalid(
            op,
            format!(
                "layer '{layer}' has {dtype} weights but got a {} input of shape {:?} \
                 (cast the input, or build the layer with that dtype)",
                x.dtype(),
                x.shape()
            ),
        ));
    }
    let bad_rank = rank.is_some_and(|r| x.rank() != r) || x.rank() == 0;
    let bad_last = last.is_some_and(|l| x.shape().last() != Some(&l));
    if bad_rank || bad_last {
        let want = match (rank, last) {
            (Some(r), Some(l)) => format!("an input of rank {r} whose last dimension is {l}"),
            (Some(r), None) => format!("an input of rank {r}"),
            (None, Some(l)) => format!("an input whose last dimension is {l}"),
            (None, None) => "an input of rank at least 1".to_string(),
        };
        return Err(crate::Error::invalid(
            op,
            format!("layer '{layer}' expected {want}, got shape {:?}", x.shape()),
        ));
    }
    Ok(())
}
