//! Masks over the time steps of sequences, Keras's masking convention: a
//! bool `[batch, time]` tensor, `true` where a step holds data and `false`
//! where it is padding. [`Embedding::compute_mask`](super::Embedding::compute_mask)
//! (with `mask_zero`) and [`Masking`] make one; the recurrent layers
//! ([`SequenceLayer::forward_masked`]) skip the steps it hides.
//!
//! Keras attaches the mask to the tensor and passes it along implicitly;
//! here it is an ordinary value the caller hands from the layer that makes
//! it to the one that uses it, as the transformer layers take theirs
//! ([`TransformerBlock::forward_with_padding`](super::TransformerBlock::forward_with_padding)).

use super::{unique_name, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// A layer over sequences `[batch, time, features]` that can skip padded
/// steps: Keras's `layer(x, mask=mask)` for the layers that support
/// masking. [`LSTM`](super::LSTM), [`GRU`](super::GRU) and
/// [`Bidirectional`](super::Bidirectional) implement it, and
/// [`Bidirectional`](super::Bidirectional) wraps any two of them.
///
/// A layer of your own that takes no mask needs no method: the default
/// runs [`Layer::forward`] when the mask is `None` and refuses a mask.
///
/// ```
/// use gradtape::nn::{SequenceLayer, LSTM};
/// use gradtape::{DType, Rng, Tensor};
/// let mut rng = Rng::new(0);
/// let lstm = LSTM::builder(3, 4).return_sequences(true).build(&mut rng)?;
/// let x = rng.normal(&[2, 5, 3], 0.0, 1.0, DType::F32)?;
/// // the second sequence is two steps long
/// let mask = Tensor::from_vec(vec![true, true, true, true, true, true, true, false, false, false], &[2, 5])?;
/// let y = lstm.forward_masked(&x, Some(&mask), false)?;
/// // a padded step repeats the last real step's output
/// let y1 = y.narrow(0, 1, 1)?;
/// assert_eq!(y1.narrow(1, 4, 1)?.to_vec::<f32>()?, y1.narrow(1, 1, 1)?.to_vec::<f32>()?);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub trait SequenceLayer: Layer {
    /// The layer over `x` `[batch, time, features]`, skipping the steps
    /// where `mask` (bool `[batch, time]`) is false; `None` is
    /// [`Layer::forward`].
    fn forward_masked(&self, x: &Tensor, mask: Option<&Tensor>, training: bool) -> Result<Tensor> {
        match mask {
            None => self.forward(x, training),
            Some(_) => Err(Error::invalid(
                "forward_masked",
                format!("layer {} does not support masks", self.name()),
            )),
        }
    }
}

impl<L: SequenceLayer + ?Sized> SequenceLayer for Box<L> {
    fn forward_masked(&self, x: &Tensor, mask: Option<&Tensor>, training: bool) -> Result<Tensor> {
        (**self).forward_masked(x, mask, training)
    }
}

/// Fails unless `mask` is bool `[batch, time]` for `x` `[batch, time,
/// ...]`, naming the layer `op`.
pub(crate) fn check_mask(op: &'static str, x: &Tensor, mask: &Tensor) -> Result<()> {
    let want = &x.shape()[..2.min(x.rank())];
    if mask.dtype() != DType::Bool || mask.shape() != want {
        return Err(Error::invalid(
            op,
            format!(
                "the mask must be bool [batch, time] = {want:?} for inputs {:?}, got {} {:?}",
                x.shape(),
                mask.dtype(),
                mask.shape()
            ),
        ));
    }
    Ok(())
}

/// Keras's `Masking`: a step of `[batch, time, features]` whose features
/// all equal `mask_value` is padding. [`compute_mask`](Self::compute_mask)
/// gives the mask (bool `[batch, time]`, false at such steps) for the
/// layers after it, and the layer's output is its input with those steps
/// set to zero (so their gradient is zero).
///
/// ```
/// use gradtape::nn::{Layer, Masking, SequenceLayer, GRU};
/// use gradtape::{Rng, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 0.0, 0.0, 3.0, 0.0], &[1, 3, 2])?;
/// let masking = Masking::new(0.0);
/// let mask = masking.compute_mask(&x)?;
/// assert_eq!(mask.to_vec::<bool>()?, vec![true, false, true]);
/// let gru = GRU::builder(2, 4).build(&mut Rng::new(0))?;
/// let y = gru.forward_masked(&masking.call(&x)?, Some(&mask), false)?;
/// assert_eq!(y.shape(), &[1, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Masking {
    name: String,
    mask_value: f64,
}

impl Masking {
    /// Masks the steps whose features all equal `mask_value` (Keras's
    /// default is 0).
    pub fn new(mask_value: f64) -> Masking {
        Masking {
            name: unique_name("masking"),
            mask_value,
        }
    }

    /// The value that marks padding.
    pub fn mask_value(&self) -> f64 {
        self.mask_value
    }

    /// `x` of rank >= 2 checked: its dtype must hold `mask_value`.
    fn value_for(&self, x: &Tensor) -> Result<Tensor> {
        const OP: &str = "Masking";
        if x.rank() < 2 {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected inputs [batch, time, ...] of rank >= 2, got shape {:?}",
                    x.shape()
                ),
            ));
        }
        x.scalar_like(self.mask_value).map_err(|e| e.for_op(OP))
    }

    /// The mask of `x` `[batch, time, features]`: false at the steps whose
    /// features all equal the mask value, `[batch, time]`. (For inputs of
    /// another rank, the last axis is the features'.)
    pub fn compute_mask(&self, x: &Tensor) -> Result<Tensor> {
        let v = self.value_for(x)?;
        x.ne(&v)?.any(&[-1], false)
    }
}

impl Module for Masking {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for Masking {
    fn name(&self) -> &str {
        &self.name
    }

    /// `x` with its masked steps set to zero.
    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let keep = self.compute_mask(x)?.expand_dims(-1)?;
        Tensor::where_(&keep, x, &x.scalar_like(0.0)?)
    }
}
