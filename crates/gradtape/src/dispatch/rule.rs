//! The currency of the dispatch layer: gradient rules and what they pass.
//!
//! A rule ([`VjpFn`]) maps output cotangents to input cotangents, one per
//! input ([`Grads`], `None` a symbolic zero). Rules are made by the ops (they
//! are written with the ops themselves) and kept by the interpreters that
//! differentiate: the tape and forward mode. A rule may have a sparse-aware
//! form, taking and giving [`Gradient`]s that are rows of a tensor
//! ([`IndexedSlices`]); the types are defined here, their arithmetic (which
//! needs ops) in `autodiff::gradient`.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::error::Result;
use crate::tensor::Tensor;

/// Input cotangents returned by a VJP rule, one per op input; `None` is a
/// symbolic zero ("no gradient"), which costs nothing.
pub type Grads = SmallVec<[Option<Tensor>; 2]>;

/// The closure inside a [`VjpFn`].
pub type VjpClosure = dyn Fn(&[Tensor], &[bool]) -> Result<Grads> + Send + Sync;

/// The form of a rule that is told which outputs got no cotangent (`None`)
/// instead of receiving zeros for them.
pub(crate) type OptionalClosure = dyn Fn(&[Option<Tensor>], &[bool]) -> Result<Grads> + Send + Sync;

/// A VJP rule: `(output cotangents, which inputs need a gradient) -> input
/// cotangents`. It is written with ordinary differentiable ops, so running it
/// under another tape records it there (which is how higher orders work),
/// and running it under a trace makes it a graph (which is how a vectorized
/// Jacobian batches it, see [`GradientTape::jacobian`](crate::GradientTape::jacobian)).
#[derive(Clone)]
pub struct VjpFn {
    f: Arc<VjpClosure>,
    /// the sparse-aware form, for rules that take or give `IndexedSlices`
    sparse: Option<Arc<SparseClosure>>,
    /// the form told which cotangents are zero
    optional: Option<Arc<OptionalClosure>>,
}

impl VjpFn {
    /// Calls the rule.
    #[inline]
    pub fn call(&self, cotangents: &[Tensor], needs: &[bool]) -> Result<Grads> {
        (self.f)(cotangents, needs)
    }

    /// Adds a sparse-aware form: backprop calls it instead of the dense
    /// form, with cotangents that may be
    /// [`IndexedSlices`](crate::IndexedSlices), and it may return sparse
    /// input gradients. It must agree with the dense form.
    pub fn with_sparse(
        mut self,
        f: impl Fn(&[Gradient], &[bool]) -> Result<SparseGrads> + Send + Sync + 'static,
    ) -> Self {
        self.sparse = Some(Arc::new(f));
        self
    }

    /// The sparse-aware form, if any.
    #[inline]
    pub(crate) fn sparse_form(&self) -> Option<&SparseClosure> {
        self.sparse.as_deref()
    }

    /// Adds a form that backprop calls with `None`
    /// for the outputs that got no cotangent, so a rule can skip work that
    /// only those would need. It must agree with the dense form.
    pub(crate) fn with_optional(
        mut self,
        f: impl Fn(&[Option<Tensor>], &[bool]) -> Result<Grads> + Send + Sync + 'static,
    ) -> Self {
        self.optional = Some(Arc::new(f));
        self
    }

    /// The form told which cotangents are zero, if any.
    #[inline]
    pub(crate) fn optional_form(&self) -> Option<&OptionalClosure> {
        self.optional.as_deref()
    }
}

impl std::fmt::Debug for VjpFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VjpFn").finish_non_exhaustive()
    }
}

/// Wraps a closure as a [`VjpFn`]: it gets one cotangent per output, each
/// of its output's shape, and returns one per input.
#[inline]
pub fn vjp(f: impl Fn(&[Tensor], &[bool]) -> Result<Grads> + Send + Sync + 'static) -> VjpFn {
    VjpFn {
        f: Arc::new(f),
        sparse: None,
        optional: None,
    }
}

/// The rule of a one-input op whose derivative is the identity (identity,
/// `x + c`, a variable read): the cotangent passes through unchanged. One
/// shared closure, so recording such an op allocates no rule.
pub(crate) fn pass_through() -> VjpFn {
    // sparse cotangents pass through too (a gather of a variable read stays sparse)
    static PASS: std::sync::LazyLock<VjpFn> = std::sync::LazyLock::new(|| {
        vjp(|g, _| Ok(smallvec::smallvec![Some(g[0].clone())]))
            .with_sparse(|g, _| Ok(smallvec::smallvec![Some(g[0].clone())]))
    });
    PASS.clone()
}

/// A sparse gradient: rows `values[i]` of a tensor of shape `dense_shape`
/// at row `indices[i]`; rows not listed are zero and a repeated index adds.
///
/// ```
/// use gradtape::{IndexedSlices, Tensor};
/// let s = IndexedSlices::new(
///     Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?,
///     Tensor::vector(&[2i64, 2]),
///     &[3, 2],
/// )?;
/// assert_eq!(s.to_dense()?.to_vec::<f32>()?, vec![0.0, 0.0, 0.0, 0.0, 4.0, 6.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct IndexedSlices {
    pub(crate) values: Tensor,
    pub(crate) indices: Tensor,
    pub(crate) dense_shape: Vec<usize>,
}

/// A gradient: a dense tensor, or a sparse set of rows.
///
/// ```
/// use gradtape::{Gradient, GradientTape, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let tape = GradientTape::new();
/// let y = tape.record(|| { tape.watch(&x); x.gather(&Tensor::vector(&[1i64]), 0)?.sum_all() })?;
/// let g: Gradient = tape.sparse_gradient(&y, &x)?.unwrap();
/// assert!(g.is_sparse());
/// assert_eq!(g.to_dense()?.to_vec::<f32>()?, vec![0.0, 0.0, 1.0, 1.0]);
/// # Ok::<(), gradtape::Error>(())
/// ```
#[derive(Clone, Debug)]
pub enum Gradient {
    /// A dense tensor.
    Dense(Tensor),
    /// Rows of a tensor, the rest zero.
    Sparse(IndexedSlices),
}

/// Input gradients of a sparse-aware rule, one per input.
pub type SparseGrads = SmallVec<[Option<Gradient>; 2]>;

/// The sparse-aware form of a rule: takes cotangents that may be sparse and
/// may return sparse input gradients. Used by backprop when no batch dims
/// are active; the dense form is used otherwise.
pub type SparseClosure = dyn Fn(&[Gradient], &[bool]) -> Result<SparseGrads> + Send + Sync;
