//! Gradients that are dense tensors or sparse row sets ([`IndexedSlices`]).
//!
//! The gradient of `gather(params, indices, 0)` with respect to `params`
//! touches only the gathered rows. Writing it as a dense tensor would cost a
//! tensor of the size of `params` (an embedding table) per lookup, mostly
//! zeros. Instead its rule returns an [`IndexedSlices`]: the rows' values,
//! their row indices and the dense shape. Backprop then aggregates as
//! TensorFlow does:
//!
//! - sparse + sparse concatenates values and indices (duplicate indices are
//!   kept, not merged: merging would cost a sort, and `to_dense` sums them);
//! - any dense term makes the sum dense (the rows added into the dense
//!   term's buffer where nothing records the sum and nothing else holds
//!   it: a tied embedding table's lookup rows and output projection);
//! - a rule that can take a sparse cotangent (gather again, a pass-through
//!   such as a variable read) keeps it sparse: a gather of a gather gives one
//!   `IndexedSlices` whose indices are composed;
//! - every other rule receives the dense form.
//!
//! [`GradientTape::gradient`](crate::GradientTape::gradient) densifies at the
//! very end; [`GradientTape::sparse_gradient`](crate::GradientTape::sparse_gradient)
//! returns the [`Gradient`] as it is, and
//! [`Variable::scatter_sub`](crate::Variable::scatter_sub) applies it without
//! a dense intermediate.

use smallvec::SmallVec;

use crate::autodiff::tape::OutMeta;
use crate::dispatch::VjpFn;
pub use crate::dispatch::{Gradient, IndexedSlices, SparseClosure, SparseGrads};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

impl IndexedSlices {
    /// Builds and checks one: `indices` is a 1-D integer tensor of length
    /// `n`, `values` has shape `[n] ++ dense_shape[1..]`, every index is in
    /// `0..dense_shape[0]`.
    pub fn new(values: Tensor, indices: Tensor, dense_shape: &[usize]) -> Result<Self> {
        const OP: &str = "IndexedSlices";
        if !matches!(indices.dtype(), DType::I32 | DType::I64) || indices.rank() != 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "indices must be a 1-D integer tensor, got {:?} of shape {:?}",
                    indices.dtype(),
                    indices.shape()
                ),
            ));
        }
        let Some((&rows, rest)) = dense_shape.split_first() else {
            return Err(Error::invalid(OP, "dense_shape must have rank >= 1, got []"));
        };
        crate::tensor::layout::checked_numel(OP, dense_shape)?;
        let mut want = vec![indices.numel()];
        want.extend_from_slice(rest);
        if values.shape() != want.as_slice() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: values.shape().to_vec(),
                rhs: want,
            });
        }
        for &i in crate::kernels::cpu::index::int_values(OP, &indices)?.iter() {
            if i < 0 || i as u64 >= rows as u64 {
                return Err(Error::IndexOutOfRange {
                    op: OP,
                    index: i,
                    dim: rows,
                    shape: dense_shape.into(),
                });
            }
        }
        Ok(IndexedSlices {
            values,
            indices,
            dense_shape: dense_shape.to_vec(),
        })
    }

    /// Builds one from parts already known to be consistent.
    pub(crate) fn from_parts(values: Tensor, indices: Tensor, dense_shape: Vec<usize>) -> Self {
        IndexedSlices {
            values,
            indices,
            dense_shape,
        }
    }

    /// The rows, shape `[n] ++ dense_shape[1..]`.
    pub fn values(&self) -> &Tensor {
        &self.values
    }

    /// The row indices, 1-D integer of length `n` (may repeat).
    pub fn indices(&self) -> &Tensor {
        &self.indices
    }

    /// The shape of the dense tensor this stands for.
    pub fn dense_shape(&self) -> &[usize] {
        &self.dense_shape
    }

    /// The dtype of the values.
    pub fn dtype(&self) -> DType {
        self.values.dtype()
    }

    /// The same rows times `c` (indices and dense shape shared): a
    /// learning-rate step is `table.scatter_sub(&grad.scale(lr)?)` (or, in
    /// one pass, [`Variable::apply_sparse_gradient_descent`](crate::Variable::apply_sparse_gradient_descent)).
    /// Differentiable in the values; for integer values `c` must be an exact
    /// integer, as for [`Tensor::mul_scalar`].
    ///
    /// ```
    /// use gradtape::{IndexedSlices, Tensor};
    /// let s = IndexedSlices::new(Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?, Tensor::vector(&[3i64]), &[5, 2])?;
    /// let h = s.scale(0.5)?;
    /// assert_eq!(h.values().to_vec::<f32>()?, vec![0.5, 1.0]);
    /// assert_eq!((h.indices().to_vec::<i64>()?, h.dense_shape()), (vec![3], &[5usize, 2][..]));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn scale(&self, c: f64) -> Result<IndexedSlices> {
        Ok(IndexedSlices {
            values: self.values.mul_scalar(c)?,
            indices: self.indices.clone(),
            dense_shape: self.dense_shape.clone(),
        })
    }

    /// The dense tensor (repeated indices add). Differentiable in `values`.
    pub fn to_dense(&self) -> Result<Tensor> {
        self.values.scatter_add(&self.indices, 0, self.dense_shape[0])
    }

    /// Concatenation of two row sets of the same dense shape (duplicates
    /// kept): their sum.
    pub fn concat(&self, other: &IndexedSlices) -> Result<IndexedSlices> {
        if self.dense_shape != other.dense_shape || self.dtype() != other.dtype() {
            return Err(Error::ShapeMismatch {
                op: "IndexedSlices::concat",
                lhs: self.dense_shape.clone(),
                rhs: other.dense_shape.clone(),
            });
        }
        let indices = if self.indices.dtype() == other.indices.dtype() {
            crate::ops::concat_rows(&self.indices, &other.indices)?
        } else {
            crate::ops::concat_rows(&self.indices.cast(DType::I64)?, &other.indices.cast(DType::I64)?)?
        };
        Ok(IndexedSlices {
            values: crate::ops::concat_rows(&self.values, &other.values)?,
            indices,
            dense_shape: self.dense_shape.clone(),
        })
    }
}

impl Gradient {
    /// Whether this is an [`IndexedSlices`].
    pub fn is_sparse(&self) -> bool {
        matches!(self, Gradient::Sparse(_))
    }

    /// The shape of the dense tensor.
    pub fn shape(&self) -> &[usize] {
        match self {
            Gradient::Dense(t) => t.shape(),
            Gradient::Sparse(s) => s.dense_shape(),
        }
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Gradient::Dense(t) => t.dtype(),
            Gradient::Sparse(s) => s.dtype(),
        }
    }

    /// The dense tensor (a clone of the handle when already dense).
    pub fn to_dense(&self) -> Result<Tensor> {
        match self {
            Gradient::Dense(t) => Ok(t.clone()),
            Gradient::Sparse(s) => s.to_dense(),
        }
    }

    /// The dense tensor, consuming `self`.
    pub fn into_dense(self) -> Result<Tensor> {
        match self {
            Gradient::Dense(t) => Ok(t),
            Gradient::Sparse(s) => s.to_dense(),
        }
    }

    /// The sparse form, if sparse.
    pub fn as_sparse(&self) -> Option<&IndexedSlices> {
        match self {
            Gradient::Sparse(s) => Some(s),
            Gradient::Dense(_) => None,
        }
    }

    /// The dense tensor, if dense.
    pub fn as_dense(&self) -> Option<&Tensor> {
        match self {
            Gradient::Dense(t) => Some(t),
            Gradient::Sparse(_) => None,
        }
    }

    /// The sum of two gradients of the same tensor: sparse + sparse
    /// concatenates, anything with a dense term is dense.
    pub fn accumulate(self, other: Gradient) -> Result<Gradient> {
        Ok(match (self, other) {
            (Gradient::Dense(a), Gradient::Dense(b)) => Gradient::Dense(add_dense(a, &b)?),
            (Gradient::Sparse(a), Gradient::Sparse(b)) => Gradient::Sparse(a.concat(&b)?),
            (Gradient::Dense(d), Gradient::Sparse(s)) | (Gradient::Sparse(s), Gradient::Dense(d)) => {
                Gradient::Dense(add_sparse(d, &s)?)
            }
        })
    }
}

/// `a + b` for two dense gradients: written over `a`'s buffer when
/// nothing records the addition (no tape, accumulator or trace listens:
/// else it must be an op they see), the two have one shape and float
/// dtype on the CPU, and nothing else holds `a` (a gradient a rule made
/// for this input alone, as a matrix product's); a new tensor otherwise.
/// The same bits either way: a weight read at every step of a loop
/// accumulates its gradients without a new buffer per step.
fn add_dense(mut a: Tensor, b: &Tensor) -> Result<Tensor> {
    use crate::kernels::cpu::elementwise::add_in_place;
    use crate::tensor::{DType, Device};
    if !crate::dispatch::listening()
        && a.shape() == b.shape()
        && a.dtype() == b.dtype()
        && a.device() == Device::Cpu
        && b.device() == Device::Cpu
    {
        let done = match a.dtype() {
            DType::F32 => add_in_place::<f32>("add", &mut a, b)?,
            DType::F64 => add_in_place::<f64>("add", &mut a, b)?,
            _ => false,
        };
        if done {
            return Ok(a);
        }
    }
    a.add(b)
}

/// `d + s.to_dense()` for a dense and a sparse gradient of one tensor (a
/// tied embedding table: the output projection's dense gradient and the
/// lookup's rows). When nothing records the addition, both are `f32` or
/// `f64` host tensors of one shape and nothing else holds `d`, the rows
/// are added into `d`'s buffer: each index's rows summed in their order
/// from zero, as `to_dense` sums them, then added to `d`'s row, the bits of
/// `d + s.to_dense()` without the zero table of `d`'s size, the scatter into
/// it and the pass over both (a `[32768, 256]` `f32` table: three 32 MiB
/// buffers a step). A new tensor otherwise.
fn add_sparse(mut d: Tensor, s: &IndexedSlices) -> Result<Tensor> {
    use crate::tensor::Device;
    let on_host = [&d, s.values(), s.indices()].iter().all(|t| t.device() == Device::Cpu);
    if !crate::dispatch::listening() && on_host && d.shape() == s.dense_shape() && d.dtype() == s.dtype() {
        let done = match d.dtype() {
            DType::F32 => add_rows_in_place::<f32>(&mut d, s)?,
            DType::F64 => add_rows_in_place::<f64>(&mut d, s)?,
            _ => false,
        };
        if done {
            return Ok(d);
        }
    }
    d.add(&s.to_dense()?)
}

/// [`add_sparse`]'s in-place sum: `false` (nothing done) when `d` is
/// shared or not contiguous, or an index is out of range (the new-tensor
/// path then reports it).
fn add_rows_in_place<T: crate::tensor::Float>(d: &mut Tensor, s: &IndexedSlices) -> Result<bool> {
    const OP: &str = "add";
    let rows = s.dense_shape()[0];
    let width: usize = s.dense_shape()[1..].iter().product();
    let idx = s.indices().f64_values(OP)?;
    if idx.iter().any(|&i| i < 0.0 || i as usize >= rows) {
        return Ok(false);
    }
    let v = s.values().values::<T>(OP)?;
    if v.len() != idx.len() * width {
        return Ok(false);
    }
    let Some(out) = d.unique_values_mut::<T>() else {
        return Ok(false);
    };
    // stable: a repeated index's rows in their order
    let mut order: Vec<usize> = (0..idx.len()).collect();
    order.sort_by_key(|&k| idx[k] as usize);
    let mut acc = vec![T::zero(); width];
    let mut k = 0;
    while k < order.len() {
        let row = idx[order[k]] as usize;
        acc.iter_mut().for_each(|a| *a = T::zero());
        while k < order.len() && idx[order[k]] as usize == row {
            let src = &v[order[k] * width..(order[k] + 1) * width];
            acc.iter_mut().zip(src).for_each(|(a, &b)| *a = *a + b);
            k += 1;
        }
        let dst = &mut out[row * width..(row + 1) * width];
        dst.iter_mut().zip(&acc).for_each(|(o, &a)| *o = *o + a);
    }
    Ok(true)
}

impl From<Tensor> for Gradient {
    fn from(t: Tensor) -> Self {
        Gradient::Dense(t)
    }
}

impl From<IndexedSlices> for Gradient {
    fn from(s: IndexedSlices) -> Self {
        Gradient::Sparse(s)
    }
}

/// Runs `vjp` on accumulated cotangents: the form told which outputs got
/// none when the rule has one; else the sparse-aware form when it has one,
/// or the dense form, with missing cotangents as dense zeros of the
/// output's shape.
pub(crate) fn call_rule(
    vjp: &VjpFn,
    cots: SmallVec<[Option<Gradient>; 1]>,
    outputs: &[OutMeta],
    needs: &[bool],
) -> Result<SparseGrads> {
    if let Some(optional) = vjp.optional_form() {
        let dense: SmallVec<[Option<Tensor>; 1]> = cots
            .into_iter()
            .map(|c| c.map(Gradient::into_dense).transpose())
            .collect::<Result<_>>()?;
        return Ok(optional(&dense, needs)?
            .into_iter()
            .map(|g| g.map(Gradient::Dense))
            .collect());
    }
    let zeros = |o: &OutMeta| crate::kernels::gpu::filled("zeros", &o.shape, 0.0, o.dtype, o.device);
    if let Some(sparse) = vjp.sparse_form() {
        let full: SmallVec<[Gradient; 1]> = cots
            .into_iter()
            .zip(outputs)
            .map(|(c, o)| c.map_or_else(|| zeros(o).map(Gradient::Dense), Ok))
            .collect::<Result<_>>()?;
        return sparse(&full, needs);
    }
    let mut dense: SmallVec<[Tensor; 1]> = SmallVec::new();
    for (c, o) in cots.into_iter().zip(outputs) {
        dense.push(c.map_or_else(|| zeros(o), Gradient::into_dense)?);
    }
    Ok(vjp
        .call(&dense, needs)?
        .into_iter()
        .map(|g| g.map(Gradient::Dense))
        .collect())
}

/// Densifies a list of gradients (Jacobians and `gradient` are dense).
pub(crate) fn densify(grads: Vec<Option<Gradient>>) -> Result<Vec<Option<Tensor>>> {
    grads
        .into_iter()
        .map(|g| g.map(Gradient::into_dense).transpose())
        .collect()
}
