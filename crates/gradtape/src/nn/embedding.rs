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
/// ```
/// use gradtape::{nn::{Embedding, Layer}, GradientTape, Rng, Tensor};
/// let emb = Embedding::new(100, 4, &mut Rng::new(0))?;
/// let ids = Tensor::from_vec(vec![3i64, 7, 3], &[3])?;
/// let tape = GradientTape::new();
/// let y = tape.record(|| emb.forward(&ids, true)?.sum_all())?;
/// let g = tape.sparse_gradient(&y, emb.table())?.unwrap();
/// assert!(g.is_sparse());
/// assert_eq!(g.as_sparse().unwrap().values().shape(), &[3, 4]);
/// # Ok::<(), gradtape::Error>(())
/// ```
pub struct Embedding {
    name: String,
    table: Variable,
}

impl Embedding {
    /// A `[vocab, dim]` f32 table, uniform in `[-0.05, 0.05)` as Keras.
    pub fn new(vocab: usize, dim: usize, rng: &mut Rng) -> Result<Embedding> {
        Embedding::with_init(
            vocab,
            dim,
            Initializer::RandomUniform { lo: -0.05, hi: 0.05 },
            DType::F32,
            rng,
        )
    }

    /// A table with a chosen initialiser and dtype.
    pub fn with_init(vocab: usize, dim: usize, init: Initializer, dtype: DType, rng: &mut Rng) -> Result<Embedding> {
        expect_float_dtype("Embedding", dtype)?;
        if vocab == 0 || dim == 0 {
            return Err(Error::invalid(
                "Embedding",
                format!("the vocabulary size and the dimension must be positive, got {vocab} and {dim}"),
            ));
        }
        let name = unique_name("embedding");
        let table = new_weight(&name, "embeddings", &[vocab, dim], dtype, &init, rng, true)?;
        Ok(Embedding { name, table })
    }

    /// The table variable.
    pub fn table(&self) -> &Variable {
        &self.table
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
        if !matches!(x.dtype(), DType::I32 | DType::I64) {
            return Err(Error::UnsupportedDType {
                op: "Embedding",
                dtype: x.dtype(),
                expected: "i32 or i64 ids",
            });
        }
        self.table.read().embedding_lookup(x)
    }
}
