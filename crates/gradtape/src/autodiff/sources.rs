//! What `gradient` and `watch` accept: one tensor or variable, slices, arrays,
//! vectors and tuples of them, with the result shaped like the input.

use smallvec::SmallVec;

use crate::autodiff::backprop::SourceInfo;
use crate::autodiff::gradient::Gradient;
use crate::autodiff::variable::Variable;
use crate::tensor::Tensor;

/// A tensor or a variable, as a source of a gradient.
#[derive(Clone, Copy)]
pub enum SourceRef<'a> {
    /// A tensor.
    Tensor(&'a Tensor),
    /// A variable (its handle).
    Variable(&'a Variable),
}

impl<'a> From<&'a Tensor> for SourceRef<'a> {
    fn from(t: &'a Tensor) -> Self {
        SourceRef::Tensor(t)
    }
}

impl<'a> From<&'a Variable> for SourceRef<'a> {
    fn from(v: &'a Variable) -> Self {
        SourceRef::Variable(v)
    }
}

/// Things gradients can be taken with respect to (and that tapes can
/// watch), and the shape of the answer: one source gives one
/// `Option<Tensor>`, a slice or `Vec` gives a `Vec`, an array gives an array,
/// a tuple gives a tuple.
pub trait Sources {
    /// The result type of `gradient` for these sources.
    type Output;
    /// Appends the flat list of sources.
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>);
    /// Rebuilds the structure from the flat gradients.
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output;
    /// The result type of `sparse_gradient`: the same structure of
    /// `Option<Gradient>`.
    type SparseOutput;
    /// Rebuilds the structure from the flat, possibly sparse, gradients.
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput;
}

impl Sources for Tensor {
    type Output = Option<Tensor>;
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
        out.push(SourceRef::Tensor(self));
    }
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
        grads.next().flatten()
    }
    type SparseOutput = Option<Gradient>;
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
        grads.next().flatten()
    }
}

impl Sources for Variable {
    type Output = Option<Tensor>;
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
        out.push(SourceRef::Variable(self));
    }
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
        grads.next().flatten()
    }
    type SparseOutput = Option<Gradient>;
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
        grads.next().flatten()
    }
}

impl Sources for SourceRef<'_> {
    type Output = Option<Tensor>;
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
        out.push(*self);
    }
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
        grads.next().flatten()
    }
    type SparseOutput = Option<Gradient>;
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
        grads.next().flatten()
    }
}

impl<S: Sources + ?Sized> Sources for &S {
    type Output = S::Output;
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
        (**self).collect(out)
    }
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
        (**self).pack(grads)
    }
    type SparseOutput = S::SparseOutput;
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
        (**self).pack_sparse(grads)
    }
}

impl<S: Sources> Sources for [S] {
    type Output = Vec<S::Output>;
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
        for s in self {
            s.collect(out);
        }
    }
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
        self.iter().map(|s| s.pack(grads)).collect()
    }
    type SparseOutput = Vec<S::SparseOutput>;
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
        self.iter().map(|s| s.pack_sparse(grads)).collect()
    }
}

impl<S: Sources> Sources for Vec<S> {
    type Output = Vec<S::Output>;
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
        self.as_slice().collect(out)
    }
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
        self.as_slice().pack(grads)
    }
    type SparseOutput = Vec<S::SparseOutput>;
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
        self.as_slice().pack_sparse(grads)
    }
}

impl<S: Sources, const N: usize> Sources for [S; N] {
    type Output = [S::Output; N];
    fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
        self.as_slice().collect(out)
    }
    fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
        std::array::from_fn(|i| self[i].pack(grads))
    }
    type SparseOutput = [S::SparseOutput; N];
    fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
        std::array::from_fn(|i| self[i].pack_sparse(grads))
    }
}

macro_rules! tuple_sources {
    ($($name:ident),+) => {
        impl<$($name: Sources),+> Sources for ($($name,)+) {
            type Output = ($($name::Output,)+);
            #[allow(non_snake_case)]
            fn collect<'a>(&'a self, out: &mut SmallVec<[SourceRef<'a>; 4]>) {
                let ($($name,)+) = self;
                $($name.collect(out);)+
            }
            #[allow(non_snake_case)]
            fn pack(&self, grads: &mut dyn Iterator<Item = Option<Tensor>>) -> Self::Output {
                let ($($name,)+) = self;
                ($($name.pack(grads),)+)
            }
            type SparseOutput = ($($name::SparseOutput,)+);
            #[allow(non_snake_case)]
            fn pack_sparse(&self, grads: &mut dyn Iterator<Item = Option<Gradient>>) -> Self::SparseOutput {
                let ($($name,)+) = self;
                ($($name.pack_sparse(grads),)+)
            }
        }
    };
}
tuple_sources!(A, B);
tuple_sources!(A, B, C);
tuple_sources!(A, B, C, D);

/// What can be differentiated: one tensor or a collection of tensors
/// (several targets are summed).
pub trait Targets {
    /// Appends the flat list of targets.
    fn collect_targets(&self, out: &mut Vec<Tensor>);
}

impl Targets for Tensor {
    fn collect_targets(&self, out: &mut Vec<Tensor>) {
        out.push(self.clone());
    }
}

impl<T: Targets + ?Sized> Targets for &T {
    fn collect_targets(&self, out: &mut Vec<Tensor>) {
        (**self).collect_targets(out)
    }
}

impl<T: Targets> Targets for [T] {
    fn collect_targets(&self, out: &mut Vec<Tensor>) {
        for t in self {
            t.collect_targets(out);
        }
    }
}

impl<T: Targets> Targets for Vec<T> {
    fn collect_targets(&self, out: &mut Vec<Tensor>) {
        self.as_slice().collect_targets(out)
    }
}

impl<T: Targets, const N: usize> Targets for [T; N] {
    fn collect_targets(&self, out: &mut Vec<Tensor>) {
        self.as_slice().collect_targets(out)
    }
}

/// What the backward pass needs of each source (id, shape, dtype, device),
/// in the order `sources` lists them.
pub(crate) fn source_infos<S: Sources + ?Sized>(sources: &S) -> Vec<SourceInfo> {
    let mut refs: SmallVec<[SourceRef<'_>; 4]> = SmallVec::new();
    sources.collect(&mut refs);
    refs.iter()
        .map(|r| match r {
            SourceRef::Tensor(t) => SourceInfo {
                id: t.id(),
                shape: t.shape().into(),
                dtype: t.dtype(),
                device: t.device(),
            },
            SourceRef::Variable(v) => SourceInfo {
                id: v.handle(),
                shape: v.shape().into(),
                dtype: v.dtype(),
                device: v.device(),
            },
        })
        .collect()
}
