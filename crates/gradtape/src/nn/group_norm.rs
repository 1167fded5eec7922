//! `GroupNorm`, Keras's `GroupNormalization` (Wu and He 2018): the
//! channels (the last axis) split into groups, each example's group
//! normalised over its channels and every spatial position, then a
//! per-channel scale and offset. One group is layer normalisation over
//! all but the batch axis; as many groups as channels is instance
//! normalisation.

use super::norm::{affine_norm_options, check_eps, Affine};
use super::{expect_input, unique_name, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

const OP: &str = "GroupNorm";

/// Group normalisation on channels-last inputs `[batch, ..., channels]`:
/// `(x − mean) / sqrt(var + epsilon) · gamma + beta`, the mean and the
/// (biased) variance over each example's group of `channels / groups`
/// channels at every position. f16/bf16 inputs are computed in f32.
///
/// ```
/// use gradtape::nn::{GroupNorm, Layer, Module};
/// use gradtape::{DType, Rng};
/// let gn = GroupNorm::builder(8, 2).dtype(DType::F64).build()?;
/// let x = Rng::new(0).normal(&[2, 4, 4, 8], 3.0, 2.0, DType::F64)?;
/// let y = gn.call(&x)?;
/// // each example's first group (channels 0..4) has mean 0
/// let g = y.narrow(0, 0, 1)?.narrow(3, 0, 4)?;
/// assert!(g.mean_all()?.to_scalar::<f64>()?.abs() < 1e-12);
/// assert_eq!(gn.variables().len(), 2); // gamma, beta
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct GroupNorm {
    name: String,
    channels: usize,
    groups: usize,
    epsilon: f64,
    affine: Affine,
}

/// Options for a [`GroupNorm`]; see [`GroupNorm::builder`].
pub struct GroupNormBuilder {
    channels: usize,
    groups: usize,
    epsilon: f64,
    center: bool,
    scale: bool,
    dtype: DType,
    name: Option<String>,
}

impl GroupNormBuilder {
    affine_norm_options!("group_normalization");
    /// Creates the layer (`gamma` ones, `beta` zeros). Groups that do not
    /// divide the channels are an error, as Keras's:
    ///
    /// ```
    /// use gradtape::nn::GroupNorm;
    /// assert!(GroupNorm::builder(6, 4).build().is_err());
    /// assert!(GroupNorm::builder(6, 0).build().is_err());
    /// ```
    pub fn build(self) -> Result<GroupNorm> {
        check_eps(OP, self.epsilon)?;
        let (c, g) = (self.channels, self.groups);
        if g == 0 || c == 0 || !c.is_multiple_of(g) {
            return Err(Error::invalid(
                OP,
                format!("the number of groups ({g}) must be positive and divide the channels ({c})"),
            ));
        }
        let name = self.name.unwrap_or_else(|| unique_name("group_normalization"));
        let affine = Affine::new(&name, c, self.dtype, self.scale, self.center)?;
        Ok(GroupNorm {
            name,
            channels: c,
            groups: g,
            epsilon: self.epsilon,
            affine,
        })
    }
}

impl GroupNorm {
    /// Starts a layer on `channels` channels in `groups` groups (Keras's
    /// default is 32 groups).
    pub fn builder(channels: usize, groups: usize) -> GroupNormBuilder {
        GroupNormBuilder {
            channels,
            groups,
            epsilon: 1e-3,
            center: true,
            scale: true,
            dtype: DType::F32,
            name: None,
        }
    }
}

impl Module for GroupNorm {
    fn variables(&self) -> Vec<Variable> {
        self.affine.variables()
    }
}

impl Layer for GroupNorm {
    fn name(&self) -> &str {
        &self.name
    }

    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        let dtype = self.affine.dtype_or(x.dtype());
        expect_input(OP, self.name(), x, None, Some(self.channels), dtype)?;
        if x.rank() < 2 {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected an input [batch, ..., {}], got shape {:?}",
                    self.channels,
                    x.shape()
                ),
            ));
        }
        let half = matches!(dtype, DType::F16 | DType::BF16);
        let xc = if half { x.cast(DType::F32)? } else { x.clone() };
        // [batch, ..., groups, channels / groups]
        let (g, per) = (self.groups, self.channels / self.groups);
        let mut grouped = x.shape()[..x.rank() - 1].to_vec();
        grouped.extend([g, per]);
        let xg = xc.reshape(&grouped)?;
        let r = xg.rank() as isize;
        let axes: Vec<isize> = (1..r).filter(|&a| a != r - 2).collect();
        let (mean, var) = xg.moments(&axes, true)?;
        let param = |v: &Variable| v.read().cast(xc.dtype())?.reshape(&[g, per]);
        // x · inv + (beta − mean · inv), inv = gamma / sqrt(var + epsilon)
        let mut inv = var.add_scalar(self.epsilon)?.rsqrt()?;
        if let Some(gamma) = &self.affine.gamma {
            inv = inv.mul(&param(gamma)?)?;
        }
        let mut shift = mean.mul(&inv)?.neg()?;
        if let Some(beta) = &self.affine.beta {
            shift = shift.add(&param(beta)?)?;
        }
        let y = xg.mul(&inv)?.add(&shift)?.reshape(x.shape())?;
        if half {
            y.cast(dtype)
        } else {
            Ok(y)
        }
    }
}
