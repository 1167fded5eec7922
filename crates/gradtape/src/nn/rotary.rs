//! Rotary position embedding (RoPE, Su et al. 2021), keras_hub's
//! `RotaryEmbedding`: the positions enter the queries and keys of
//! attention as rotations, so that `q·k` depends on their distance.
//!
//! The angles are computed in `f64` and the tables cast to the input's
//! dtype once (keras_hub computes them in `f32`, whose angles at position
//! `p` are off by up to `p · 2⁻²⁴` radians); the rotation itself is one
//! op, `Rotary` (`ops::nn::rotary`), with the tables as constants: the
//! values of the composite `x · cos θ + concat(−x₂, x₁) · sin θ`, bit for
//! bit, and its derivatives of any order (the rotation's transpose).

use super::{expect_float_dtype, unique_name, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::ops::rotary;
use crate::tensor::alloc::try_vec;
use crate::tensor::layout::{checked_numel, norm_axis};
use crate::tensor::Tensor;

const OP: &str = "RotaryEmbedding";

/// Rotary position embedding, keras_hub's `RotaryEmbedding` (the
/// half-split form of Llama, GPT-NeoX and Hugging Face's models): the
/// features of position `p` (along `sequence_axis`, from a start index)
/// are split into halves `x₁`, `x₂` of `d / 2` along `feature_axis`, and
/// `x · cos θ + concat(−x₂, x₁) · sin θ` is returned, with `θ_j = p / s ·
/// w^(−2j/d)` for feature `j` and `j + d/2` (`w` the max wavelength, `s`
/// the scaling factor). No weights; no training behaviour (use
/// [`Layer::call`], or [`call_at`](Self::call_at) to start at a later
/// position, as when decoding with a [`KvCache`](super::KvCache)).
///
/// ```
/// use gradtape::nn::{Layer, RotaryEmbedding};
/// use gradtape::{DType, Tensor};
/// // [batch, time, heads, head_dim], keras_hub's layout
/// let rope = RotaryEmbedding::builder().build()?;
/// let x = Tensor::ones(&[1, 3, 2, 4], DType::F64);
/// let y = rope.call(&x)?;
/// // position 0 is not rotated; every position keeps each pair's length
/// assert_eq!(y.narrow(1, 0, 1)?.to_vec::<f64>()?, vec![1.0; 8]);
/// let norms = y.square()?.sum(&[-1], false)?.to_vec::<f64>()?;
/// assert!(norms.iter().all(|n| (n - 4.0).abs() < 1e-12));
/// // positions 2.. of a sequence are its rotation started at 2
/// let tail = rope.call_at(&x.narrow(1, 2, 1)?, 2)?;
/// assert_eq!(tail.to_vec::<f64>()?, y.narrow(1, 2, 1)?.to_vec::<f64>()?);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    name: String,
    max_wavelength: f64,
    scaling_factor: f64,
    sequence_axis: isize,
    feature_axis: isize,
}

/// Options for a [`RotaryEmbedding`]; see [`RotaryEmbedding::builder`].
pub struct RotaryEmbeddingBuilder {
    max_wavelength: f64,
    scaling_factor: f64,
    sequence_axis: isize,
    feature_axis: isize,
    name: Option<String>,
}

impl RotaryEmbeddingBuilder {
    /// The longest wavelength `w` (default 10000).
    pub fn max_wavelength(mut self, w: f64) -> Self {
        self.max_wavelength = w;
        self
    }
    /// The factor `s` that positions are divided by (default 1; above 1
    /// stretches the positions, for contexts longer than trained on).
    pub fn scaling_factor(mut self, s: f64) -> Self {
        self.scaling_factor = s;
        self
    }
    /// The axis of the positions (default 1, for `[batch, time, ...]`;
    /// 2 for attention's `[batch, heads, time, dim]`; negative counts
    /// from the end).
    pub fn sequence_axis(mut self, a: isize) -> Self {
        self.sequence_axis = a;
        self
    }
    /// The axis of the rotated features (default −1, the last).
    pub fn feature_axis(mut self, a: isize) -> Self {
        self.feature_axis = a;
        self
    }
    /// The layer's name (default `rotary_embedding`, made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// Creates the layer. A max wavelength or scaling factor that is not
    /// finite and positive is an error:
    ///
    /// ```
    /// use gradtape::nn::RotaryEmbedding;
    /// assert!(RotaryEmbedding::builder().max_wavelength(0.0).build().is_err());
    /// assert!(RotaryEmbedding::builder().scaling_factor(f64::INFINITY).build().is_err());
    /// ```
    pub fn build(self) -> Result<RotaryEmbedding> {
        for (what, v) in [
            ("max_wavelength", self.max_wavelength),
            ("scaling_factor", self.scaling_factor),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid(
                    OP,
                    format!("{what} must be finite and positive, got {v}"),
                ));
            }
        }
        Ok(RotaryEmbedding {
            name: self.name.unwrap_or_else(|| unique_name("rotary_embedding")),
            max_wavelength: self.max_wavelength,
            scaling_factor: self.scaling_factor,
            sequence_axis: self.sequence_axis,
            feature_axis: self.feature_axis,
        })
    }
}

impl RotaryEmbedding {
    /// Starts a layer with keras_hub's defaults.
    pub fn builder() -> RotaryEmbeddingBuilder {
        RotaryEmbeddingBuilder {
            max_wavelength: 10000.0,
            scaling_factor: 1.0,
            sequence_axis: 1,
            feature_axis: -1,
            name: None,
        }
    }

    /// The rotation of `x` whose first position (along the sequence
    /// axis) is `start`. The features must be of even size, and the two
    /// axes distinct:
    ///
    /// ```
    /// use gradtape::{nn::RotaryEmbedding, DType, Tensor};
    /// let rope = RotaryEmbedding::builder().sequence_axis(-2).build()?;
    /// assert!(rope.call_at(&Tensor::ones(&[2, 3], DType::F32), 0).is_err()); // 3 features
    /// assert!(rope.call_at(&Tensor::ones(&[2], DType::F32), 0).is_err());    // one axis
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn call_at(&self, x: &Tensor, start: usize) -> Result<Tensor> {
        self.rotate(x, self.sequence_axis, self.feature_axis, start)
    }

    /// [`call_at`](Self::call_at) along the given axes (the attention
    /// layer's heads, `[batch, heads, time, dim]`, whatever the layer's
    /// own axes say).
    pub(crate) fn rotate(&self, x: &Tensor, seq_axis: isize, feat_axis: isize, start: usize) -> Result<Tensor> {
        self.rotate_with(x, seq_axis, feat_axis, start, None)
    }

    /// [`rotate`](Self::rotate) at the positions `index..` where `index`
    /// is an integer scalar tensor (a fixed-capacity cache's, an input of
    /// a traced decoding step): the tables of the positions `0..capacity`
    /// (the same angles as `rotate`'s) sliced at `index` by
    /// [`Tensor::dynamic_slice`], so that one trace serves every index.
    pub(crate) fn rotate_from(
        &self,
        x: &Tensor,
        seq_axis: isize,
        feat_axis: isize,
        index: &Tensor,
        capacity: usize,
    ) -> Result<Tensor> {
        self.rotate_with(x, seq_axis, feat_axis, 0, Some((index, capacity)))
    }

    fn rotate_with(
        &self,
        x: &Tensor,
        seq_axis: isize,
        feat_axis: isize,
        start: usize,
        at: Option<(&Tensor, usize)>,
    ) -> Result<Tensor> {
        let shape = x.shape();
        expect_float_dtype(OP, x.dtype())?;
        let seq = norm_axis(OP, seq_axis, shape)?;
        let feat = norm_axis(OP, feat_axis, shape)?;
        let (t, d) = (shape[seq], shape[feat]);
        if seq == feat || !d.is_multiple_of(2) {
            return Err(Error::invalid(
                OP,
                format!(
                    "needs distinct sequence and feature axes and an even number of features, got axes {seq_axis} and {feat_axis} of {shape:?}"
                ),
            ));
        }
        if start.checked_add(t).is_none() {
            return Err(Error::invalid(
                OP,
                format!("positions {start}..{start}+{t} overflow usize"),
            ));
        }
        if x.numel() == 0 {
            return Ok(x.clone());
        }
        // the tables [t, d / 2] of cos θ and sin θ (one angle for feature
        // j and j + d/2)
        let h = d / 2;
        let rows = at.map_or(t, |(_, capacity)| capacity);
        let n = checked_numel(OP, &[rows, h])?;
        let (mut cos, mut sin) = (try_vec(OP, n)?, try_vec(OP, n)?);
        for p in 0..rows {
            let pos = (start + p) as f64 / self.scaling_factor;
            for i in 0..h {
                let angle = pos * self.max_wavelength.powf(-2.0 * i as f64 / d as f64);
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        // (made where x is)
        let table = |v: Vec<f64>| -> Result<Tensor> {
            let all = Tensor::from_vec(v, &[rows, h])?.cast(x.dtype())?.to(x.device())?;
            match at {
                // (the rows at the index, read when the step runs)
                Some((index, _)) => {
                    let zero = index.try_zeros_like()?;
                    all.dynamic_slice(&Tensor::stack(&[index, &zero], 0)?, &[t, h])
                }
                None => Ok(all),
            }
        };
        let (cos, sin) = (table(cos)?, table(sin)?);
        // the op rotates the last axis: the features moved there (a view)
        // and back where they are elsewhere
        let r = shape.len();
        if feat == r - 1 {
            return rotary(x, &cos, &sin, r - 2 - seq, false);
        }
        let mut perm: Vec<usize> = (0..r).filter(|&a| a != feat).collect();
        perm.push(feat);
        let seq_moved = if seq < feat { seq } else { seq - 1 };
        let y = rotary(&x.permute(&perm)?, &cos, &sin, r - 2 - seq_moved, false)?;
        let mut back = vec![0; r];
        for (i, &a) in perm.iter().enumerate() {
            back[a] = i;
        }
        y.permute(&back)
    }
}

impl Module for RotaryEmbedding {
    fn variables(&self) -> Vec<Variable> {
        Vec::new()
    }
}

impl Layer for RotaryEmbedding {
    fn name(&self) -> &str {
        &self.name
    }

    /// The rotation of positions `0..t`.
    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        self.call_at(x, 0)
    }
}
