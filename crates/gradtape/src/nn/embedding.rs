//! `Embedding`: rows of a trainable table picked by integer ids.

use super::{expect_float_dtype, new_weight, unique_name, Initializer, Layer, Module};
use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::random::Rng;
use crate::tensor::{DType, Tensor};

/// A lookup table `[vocab, dim]`, Keras's `Embedding`: integer ids of any
/// shape give `[..ids.shape, dim]`. The table's gradient is sparse (an
/// [`IndexedSlices`](crate::IndexedSlices) with the looked-up rows, from
/// [`GradientTape::sparse_gradient`](crate::GradientTape::sparse_gradient)),
/// and the optimizers apply it without a dense intermediate.
///
/// With [`mask_zero`](EmbeddingBuilder::mask_zero), id 0 is padding:
/// [`compute_mask`](Embedding::compute_mask) gives the mask `ids != 0`
/// for the recurrent layers after it (Keras's `mask_zero=True`).
///
/// ```
/// use gradtape::{nn::{Embedding, Layer}, GradientTape, Rng, Tensor};
/// let emb = Embedding::new(100, 4, &mut Rng::new(0))?;
/// let ids = Tensor::from_vec(vec![3i64, 7, 3], &[3])?;
/// let tape = GradientTape::new();
/// let y = tape.record(|| emb.call(&ids)?.sum_all())?;
/// let g = tape.sparse_gradient(&y, emb.table())?.unwrap();
/// assert!(g.is_sparse());
/// assert_eq!(g.as_sparse().unwrap().values().shape(), &[3, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Embedding {
    name: String,
    table: Variable,
    mask_zero: bool,
}

/// Options for an [`Embedding`]; see [`Embedding::builder`].
pub struct EmbeddingBuilder {
    vocab: usize,
    dim: usize,
    init: Initializer,
    dtype: DType,
    name: Option<String>,
    mask_zero: bool,
}

impl EmbeddingBuilder {
    /// The table's initialiser (default uniform in `[-0.05, 0.05)`, as
    /// Keras).
    pub fn initializer(mut self, i: Initializer) -> Self {
        self.init = i;
        self
    }
    /// The table's dtype (default f32).
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = d;
        self
    }
    /// The layer's name (default `embedding`, made unique).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// Whether id 0 is padding, masked by
    /// [`compute_mask`](Embedding::compute_mask) (default false, Keras's
    /// `mask_zero`). Row 0 of the table stays an ordinary row.
    pub fn mask_zero(mut self, on: bool) -> Self {
        self.mask_zero = on;
        self
    }
    /// Creates the table, drawing from `rng`. Zero sizes are errors:
    ///
    /// ```
    /// use gradtape::{nn::Embedding, Rng};
    /// assert!(Embedding::builder(0, 4).build(&mut Rng::new(0)).is_err());
    /// ```
    pub fn build(self, rng: &mut Rng) -> Result<Embedding> {
        let (vocab, dim) = (self.vocab, self.dim);
        expect_float_dtype("Embedding", self.dtype)?;
        if vocab == 0 || dim == 0 {
            return Err(Error::invalid(
                "Embedding",
                format!("the vocabulary size and the dimension must be positive, got {vocab} and {dim}"),
            ));
        }
        let name = self.name.unwrap_or_else(|| unique_name("embedding"));
        let table = new_weight(&name, "embeddings", &[vocab, dim], self.dtype, &self.init, rng, true)?;
        Ok(Embedding {
            name,
            table,
            mask_zero: self.mask_zero,
        })
    }
}

impl Embedding {
    /// A `[vocab, dim]` f32 table, uniform in `[-0.05, 0.05)` as Keras.
    pub fn new(vocab: usize, dim: usize, rng: &mut Rng) -> Result<Embedding> {
        Embedding::builder(vocab, dim).build(rng)
    }

    /// A table with a chosen initialiser and dtype (the builder's
    /// [`initializer`](EmbeddingBuilder::initializer) and
    /// [`dtype`](EmbeddingBuilder::dtype)).
    pub fn with_init(vocab: usize, dim: usize, init: Initializer, dtype: DType, rng: &mut Rng) -> Result<Embedding> {
        Embedding::builder(vocab, dim).initializer(init).dtype(dtype).build(rng)
    }

    /// Starts a `[vocab, dim]` table with options of its own.
    ///
    /// ```
    /// use gradtape::{nn::{Embedding, Initializer}, DType, Rng};
    /// let emb = Embedding::builder(10, 4)
    ///     .initializer(Initializer::RandomNormal { mean: 0.0, std: 0.02 })
    ///     .dtype(DType::F64)
    ///     .name("tokens")
    ///     .build(&mut Rng::new(0))?;
    /// assert_eq!(emb.table().name(), "tokens/embeddings");
    /// assert_eq!(emb.table().shape(), vec![10, 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn builder(vocab: usize, dim: usize) -> EmbeddingBuilder {
        EmbeddingBuilder {
            vocab,
            dim,
            init: Initializer::RandomUniform { lo: -0.05, hi: 0.05 },
            dtype: DType::F32,
            name: None,
            mask_zero: false,
        }
    }

    /// The table variable.
    pub fn table(&self) -> &Variable {
        &self.table
    }

    /// The mask of `ids` for the layers after this one, Keras's
    /// `compute_mask`: with [`mask_zero`](EmbeddingBuilder::mask_zero),
    /// `ids != 0` (bool, the shape of `ids`: `[batch, time]` for
    /// sequences), else `None`.
    ///
    /// ```
    /// use gradtape::nn::{Embedding, Layer, SequenceLayer, LSTM};
    /// use gradtape::{Rng, Tensor};
    /// let mut rng = Rng::new(0);
    /// let emb = Embedding::builder(10, 3).mask_zero(true).build(&mut rng)?;
    /// let lstm = LSTM::builder(3, 4).build(&mut rng)?;
    /// let ids = Tensor::from_vec(vec![4i64, 2, 0, 0, 7, 1, 3, 0], &[2, 4])?;
    /// let mask = emb.compute_mask(&ids)?;
    /// assert_eq!(mask.as_ref().unwrap().to_vec::<bool>()?, vec![true, true, false, false, true, true, true, false]);
    /// let y = lstm.forward_masked(&emb.call(&ids)?, mask.as_ref(), false)?;
    /// assert_eq!(y.shape(), &[2, 4]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn compute_mask(&self, ids: &Tensor) -> Result<Option<Tensor>> {
        check_ids(ids)?;
        if !self.mask_zero {
            return Ok(None);
        }
        Ok(Some(ids.ne(&ids.scalar_like(0.0)?)?))
    }

    /// Whether id 0 is padding ([`mask_zero`](EmbeddingBuilder::mask_zero)).
    pub fn mask_zero(&self) -> bool {
        self.mask_zero
    }

    /// The reverse of the lookup: `x [..., dim]` times the table's
    /// transpose, `[..., vocab]` (keras_hub's `ReversibleEmbedding` with
    /// `reverse=True`, Flax's `Embed.attend`). Used as a language model's
    /// output projection it ties the two: the table's gradient collects the
    /// lookup's rows and this product's.
    ///
    /// ```
    /// use gradtape::{nn::{Embedding, Initializer}, Rng, Tensor};
    /// let emb = Embedding::builder(3, 2).initializer(Initializer::Ones).build(&mut Rng::new(0))?;
    /// let h = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 1, 2])?;
    /// let logits = emb.attend(&h)?;
    /// assert_eq!(logits.shape(), &[1, 1, 3]);
    /// assert_eq!(logits.to_vec::<f32>()?, vec![3.0, 3.0, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn attend(&self, x: &Tensor) -> Result<Tensor> {
        let table = self.table.read();
        let (vocab, dim) = (table.shape()[0], table.shape()[1]);
        super::expect_input("Embedding::attend", &self.name, x, None, Some(dim), table.dtype())?;
        if x.rank() == 2 {
            return x.matmul_with(&table, false, true);
        }
        let mut shape = x.shape().to_vec();
        let rows: usize = shape[..shape.len() - 1].iter().product();
        let y = x.reshape(&[rows, dim])?.matmul_with(&table, false, true)?;
        *shape.last_mut().expect("rank >= 1") = vocab;
        y.reshape(&shape)
    }
}

impl Module for Embedding {
    fn variables(&self) -> Vec<Variable> {
        vec![self.table.clone()]
    }
}

impl Layer for Embedding {
    fn name(&self) -> &str {
        &self.name
    }

    /// `x` holds integer ids (i32 or i64), each in `0..vocab`.
    fn forward(&self, x: &Tensor, _training: bool) -> Result<Tensor> {
        check_ids(x)?;
        self.table.read().embedding_lookup(x)
    }
}

/// Fails unless `ids` are integers (i32 or i64).
fn check_ids(ids: &Tensor) -> Result<()> {
    if !matches!(ids.dtype(), DType::I32 | DType::I64) {
        return Err(Error::UnsupportedDType {
            op: "Embedding",
            dtype: ids.dtype(),
            expected: "i32 or i64 ids",
        });
    }
    Ok(())
}
