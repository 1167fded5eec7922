//! Positions: a learned `PositionalEmbedding` (keras_hub's
//! `PositionEmbedding`) and the fixed sinusoidal encoding (keras_hub's
//! `SinePositionEncoding`, the original Transformer's).

use super::{expect_float_dtype, new_weight, unique_name, Initializer, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::alloc::try_vec;
use crate::tensor::layout::checked_numel;
use crate::tensor::{DType, Tensor};

const OP: &str = "PositionalEmbedding";

/// A trainable vector per position, keras_hub's
/// `PositionEmbedding(sequence_length)`: a table `embeddings
/// [sequence_length, features]`, whose rows `start..start + t` are the
/// positions of a sequence of `t` steps starting at `start` (`start > 0`
/// while decoding with a [`KvCache`](super::KvCache)).
///
/// As a [`Layer`], `forward(x)` with `x [..., t, features]` gives the
/// position vectors of positions `0..t` broadcast to `x`'s shape (as
/// keras_hub, which returns them rather than adding them);
/// [`add_to`](Self::add_to) adds them.
///
/// ```
/// use gradtape::nn::{Embedding, Layer, PositionalEmbedding};
/// use gradtape::{Rng, Tensor};
/// let mut rng = Rng::new(0);
/// let tokens = Embedding::new(50, 8, &mut rng)?;
/// let positions = PositionalEmbedding::builder(16, 8).build(&mut rng)?;
/// let ids = Tensor::from_vec(vec![1i64, 4, 2, 7, 7, 0], &[2, 3])?;
/// let h = positions.add_to(&tokens.call(&ids)?, 0)?;        // [2, 3, 8]
/// assert_eq!(h.shape(), &[2, 3, 8]);
/// assert_eq!(positions.call(&h)?.shape(), &[2, 3, 8]);
/// assert!(positions.positions(10, 7).is_err());             // past position 15
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct PositionalEmbedding {
    name: String,
    table: Variable,
}

/// Options for a [`PositionalEmbedding`]; see
/// [`PositionalEmbedding::builder`].
pub struct PositionalEmbeddingBuilder {
    sequence_length: usize,
    features: usize,
    init: Initializer,
    dtype: DType,
    name: Option<String>,
}

impl PositionalEmbeddingBuilder {
    /// The table's initialiser (default Glorot uniform, keras_hub's).
    pub fn initializer(mut self, i: Initializer) -> Self {
        self.init = i;
        self
    }
    /// The table's dtype (default f32).
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }
    /// The layer's name (default `position_embedding`, made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// Creates the table, drawing from `rng`; zero sizes are errors.
    pub fn build(self, rng: &mut Rng) -> Result<PositionalEmbedding> {
        expect_float_dtype(OP, self.dtype)?;
        if self.sequence_length == 0 || self.features == 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "the sequence length and the features must be positive, got {} and {}",
                    self.sequence_length, self.features
                ),
            ));
        }
        let name = self.name.unwrap_or_else(|| unique_name("position_embedding"));
        let table = new_weight(
            &name,
            "embeddings",
            &[self.sequence_length, self.features],
            self.dtype,
            &self.init,
            rng,
            true,
        )?;
        Ok(PositionalEmbedding { name, table })
    }
}

impl PositionalEmbedding {
    /// Starts a table for sequences of up to `sequence_length` positions of
    /// `features` values.
    ///
    /// ```
    /// use gradtape::{nn::{Initializer, PositionalEmbedding}, DType, Rng};
    /// let pe = PositionalEmbedding::builder(128, 16)
    ///     .initializer(Initializer::RandomNormal { mean: 0.0, std: 0.02 })
    ///     .dtype(DType::F64)
    ///     .name("wpe")
    ///     .build(&mut Rng::new(0))?;
    /// assert_eq!(pe.table().name(), "wpe/embeddings");
    /// assert_eq!(pe.sequence_length(), 128);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn builder(sequence_length: usize, features: usize) -> PositionalEmbeddingBuilder {
        PositionalEmbeddingBuilder {
            sequence_length,
            features,
            init: Initializer::GlorotUniform,
            dtype: DType::F32,
            name: None,
        }
    }

    /// The table variable, `[sequence_length, features]`.
    pub fn table(&self) -> &Variable {
        &self.table
    }

    /// The longest sequence the table covers.
    pub fn sequence_length(&self) -> usize {
        self.table.shape()[0]
    }

    /// The vectors of positions `start..start + len`, `[len, features]`.
    pub fn positions(&self, start: usize, len: usize) -> Result<Tensor> {
        let n = self.sequence_length();
        if start.checked_add(len).is_none_or(|end| end > n) {
            return Err(Error::invalid(
                OP,
                format!("positions {start}..{start}+{len} lie past the table's {n} positions"),
            ));
        }
        self.table.read().narrow(0, start, len)
    }

    /// The vectors of positions `start..start + t` broadcast to the shape
    /// of `x` `[..., t, features]` (keras_hub's `start_index`).
    ///
    /// ```
    /// use gradtape::{nn::{Initializer, PositionalEmbedding}, DType, Rng, Tensor};
    /// let pe = PositionalEmbedding::builder(4, 2).initializer(Initializer::Zeros).build(&mut Rng::new(0))?;
    /// pe.table().assign(&Tensor::from_vec((0..8).map(|i| i as f32).collect::<Vec<_>>(), &[4, 2])?)?;
    /// // one new position (decoding), at position 2
    /// let y = pe.forward_from(&Tensor::zeros(&[3, 1, 2], DType::F32), 2)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![4.0, 5.0, 4.0, 5.0, 4.0, 5.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn forward_from(&self, x: &Tensor, start: usize) -> Result<Tensor> {
        let f = self.table.shape()[1];
        let r = x.rank();
        if r < 2 || x.shape()[r - 1] != f || x.dtype() != self.table.dtype() {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected an input [..., time, {f}] of dtype {}, got {} {:?}",
                    self.table.dtype(),
                    x.dtype(),
                    x.shape()
                ),
            ));
        }
        self.positions(start, x.shape()[r - 2])?.broadcast_to(x.shape())
    }

    /// `x + positions` for `x` `[..., t, features]` starting at position
    /// `start`.
    pub fn add_to(&self, x: &Tensor, start: usize) -> Result<Tensor> {
        x.add(&self.forward_from(x, start)?)
    }
}

impl Module for PositionalEmbedding {
    fn variables(&self) -> Vec<Variable> {
        vec![self.table.clone()]
    }
}

impl Layer for PositionalEmbedding {
    fn name(&self) -> &str {
        &self.name
    }

    /// The vectors of positions `0..t`, broadcast to `x`'s shape.
    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        self.forward_from(x, 0)
    }
}

/// The sinusoidal encoding of positions `start..start + length`, `[length,
/// features]`, keras_hub's `SinePositionEncoding` (the original
/// Transformer's): feature `2i` is `sin(p / w^(2i / features))` and `2i +
/// 1` is `cos(p / w^(2i / features))`, `w` the `max_wavelength` (10000 in
/// both). A constant: add it to the token embeddings.
///
/// ```
/// use gradtape::{nn::sine_position_encoding, DType};
/// let pe = sine_position_encoding(3, 4, 0, 10000.0, DType::F64)?.to_vec::<f64>()?;
/// assert_eq!(&pe[..4], &[0.0, 1.0, 0.0, 1.0]);            // position 0
/// assert!((pe[4] - 1f64.sin()).abs() < 1e-15 && (pe[6] - 0.01f64.sin()).abs() < 1e-15);
/// assert!(sine_position_encoding(3, 4, 0, 0.0, DType::F64).is_err());
/// // sizes beyond memory, and positions past usize::MAX, are errors
/// assert!(sine_position_encoding(1 << 40, 1 << 40, 0, 10000.0, DType::F64).is_err());
/// assert!(sine_position_encoding(4, 4, usize::MAX - 1, 10000.0, DType::F64).is_err());
/// # Ok::<(), gradtape::Error>(())
/// ```
pub fn sine_position_encoding(
    length: usize,
    features: usize,
    start: usize,
    max_wavelength: f64,
    dtype: DType,
) -> Result<Tensor> {
    const OP: &str = "sine_position_encoding";
    expect_float_dtype(OP, dtype)?;
    if !(max_wavelength.is_finite() && max_wavelength > 0.0) {
        return Err(Error::invalid(
            OP,
            format!("max_wavelength must be finite and positive, got {max_wavelength}"),
        ));
    }
    let Some(end) = start.checked_add(length) else {
        return Err(Error::invalid(
            OP,
            format!("positions {start}..{start}+{length} overflow usize"),
        ));
    };
    let mut v = try_vec(OP, checked_numel(OP, &[length, features])?)?;
    for p in start..end {
        for j in 0..features {
            let timescale = (1.0 / max_wavelength).powf((2 * (j / 2)) as f64 / features as f64);
            let angle = p as f64 * timescale;
            v.push(if j % 2 == 0 { angle.sin() } else { angle.cos() });
        }
    }
    Tensor::from_vec(v, &[length, features])?.cast(dtype)
}
