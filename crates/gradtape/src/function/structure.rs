//! What a traced function takes and returns: tensors and variables in a
//! fixed structure (TensorFlow's nests, JAX's pytrees).
//!
//! [`TensorStruct`] is implemented for [`Tensor`], [`Variable`], `Vec`,
//! arrays, `Option`, tuples up to twelve and `bool` (a static flag such as
//! `training`: a trace per value), so a function can take
//! `(Tensor, Vec<Tensor>)` and return `(Tensor, [Tensor; 2])`. A struct of
//! your own implements it by listing its fields in a fixed order:
//!
//! An enum of your own pushes a [`Leaf::Tag`] naming its variant before the
//! variant's fields, so that calls with different variants get their own
//! traces.
//!
//! ```
//! use gradtape::{Leaf, Result, Tensor, TensorStruct};
//! struct Batch { x: Tensor, y: Tensor }
//! impl TensorStruct for Batch {
//!     fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
//!         self.x.leaves(out);
//!         self.y.leaves(out);
//!     }
//!     fn rebuild(&self, t: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
//!         Ok(Batch { x: self.x.rebuild(t)?, y: self.y.rebuild(t)? })
//!     }
//! }
//! ```

use crate::autodiff::variable::Variable;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// One leaf of a [`TensorStruct`].
#[derive(Clone, Copy)]
pub enum Leaf<'a> {
    /// A tensor: an input of the graph (or an output).
    Tensor(&'a Tensor),
    /// A variable: captured by reference, read and written by the graph.
    Variable(&'a Variable),
    /// A mark of the structure's form that is no tensor: whether an
    /// `Option` is `Some` (1) or `None` (0), a `Vec`'s length, an enum's
    /// variant (an impl for an enum of your own pushes one). Part of a
    /// traced function's cache key, so calls whose structures differ never
    /// share a trace (`(Some(a), None)` and `(None, Some(b))` have the same
    /// tensors but not the same tags); not a graph input.
    Tag(u64),
}

/// A structure of tensors and variables, flattened in a fixed order.
pub trait TensorStruct {
    /// Appends the leaves, in order.
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>);

    /// The same structure with each tensor leaf replaced by the next tensor
    /// of `tensors` (variables are kept); an error if `tensors` runs out.
    fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self>
    where
        Self: Sized;
}

fn ran_out() -> Error {
    Error::invalid("function", "fewer tensors than the structure has leaves")
}

impl TensorStruct for Tensor {
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
        out.push(Leaf::Tensor(self));
    }
    fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        tensors.next().ok_or_else(ran_out)
    }
}

impl TensorStruct for Variable {
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
        out.push(Leaf::Variable(self));
    }
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        Ok(self.clone())
    }
}

/// A flag such as `training`: a static argument, as a Python `bool` given
/// to a `tf.function`. It is a [`Leaf::Tag`], part of the cache key, so
/// each value gets its own trace (and the closure reads the value while
/// tracing); returned by a traced function, it is the value the trace
/// gave.
///
/// ```
/// use gradtape::nn::{BatchNorm, Layer};
/// use gradtape::{function, DType, Tensor};
/// use std::sync::Arc;
/// let bn = Arc::new(BatchNorm::new(1, DType::F64)?);
/// let f = {
///     let bn = bn.clone();
///     function(move |(x, training): &(Tensor, bool)| bn.forward(x, *training))
/// };
/// let x = Tensor::from_vec(vec![1.0f64, 3.0], &[2, 1])?;
/// let train = f.call(&(x.clone(), true))?.to_vec::<f64>()?;   // the batch's statistics
/// let infer = f.call(&(x.clone(), false))?.to_vec::<f64>()?;  // the moving ones
/// assert!(train[1] > 0.99 && infer[1] > 2.9);
/// f.call(&(x.clone(), true))?;
/// assert_eq!(f.trace_count(), 2);
/// # Ok::<(), gradtape::Error>(())
/// ```
impl TensorStruct for bool {
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
        out.push(Leaf::Tag(u64::from(*self)));
    }
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        Ok(*self)
    }
}

impl TensorStruct for () {
    fn leaves<'a>(&'a self, _: &mut Vec<Leaf<'a>>) {}
    fn rebuild(&self, _: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        Ok(())
    }
}

impl<T: TensorStruct> TensorStruct for Vec<T> {
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
        out.push(Leaf::Tag(self.len() as u64));
        for x in self {
            x.leaves(out);
        }
    }
    fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        self.iter().map(|x| x.rebuild(tensors)).collect()
    }
}

impl<T: TensorStruct, const N: usize> TensorStruct for [T; N] {
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
        for x in self {
            x.leaves(out);
        }
    }
    /// (in place: no vector, so a function returning an array of tensors
    /// allocates nothing for its results)
    fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        let mut err = None;
        let parts: [Option<T>; N] = std::array::from_fn(|i| match err {
            Some(_) => None,
            None => self[i].rebuild(tensors).map_err(|e| err = Some(e)).ok(),
        });
        match err {
            Some(e) => Err(e),
            // (no error: every part was rebuilt)
            None => Ok(parts.map(|p| p.expect("every part is rebuilt when none failed"))),
        }
    }
}

impl<T: TensorStruct> TensorStruct for Option<T> {
    fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
        match self {
            Some(x) => {
                out.push(Leaf::Tag(1));
                x.leaves(out);
            }
            None => out.push(Leaf::Tag(0)),
        }
    }
    fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
        self.as_ref().map(|x| x.rebuild(tensors)).transpose()
    }
}

macro_rules! tuple_struct {
    ($($t:ident . $i:tt),+) => {
        impl<$($t: TensorStruct),+> TensorStruct for ($($t,)+) {
            fn leaves<'a>(&'a self, out: &mut Vec<Leaf<'a>>) {
                $( self.$i.leaves(out); )+
            }
            fn rebuild(&self, tensors: &mut dyn Iterator<Item = Tensor>) -> Result<Self> {
                Ok(($( self.$i.rebuild(tensors)?, )+))
            }
        }
    };
}
tuple_struct!(A.0);
tuple_struct!(A.0, B.1);
tuple_struct!(A.0, B.1, C.2);
tuple_struct!(A.0, B.1, C.2, D.3);
tuple_struct!(A.0, B.1, C.2, D.3, E.4);
tuple_struct!(A.0, B.1, C.2, D.3, E.4, F.5);
tuple_struct!(A.0, B.1, C.2, D.3, E.4, F.5, G.6);
tuple_struct!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7);
tuple_struct!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8);
tuple_struct!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8, J.9);
tuple_struct!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8, J.9, K.10);
tuple_struct!(A.0, B.1, C.2, D.3, E.4, F.5, G.6, H.7, I.8, J.9, K.10, L.11);

/// An empty vector of leaves, in the allocation of `v` (emptied), of
/// another lifetime: how a caller keeps one vector for the leaves of many
/// calls' arguments. (Collecting a vector's own iterator into a vector of
/// an element of the same size reuses its allocation.)
// (`filter_map` to `None`: the one way to an element type of another
// lifetime; the vector is empty)
#[allow(clippy::unnecessary_filter_map)]
pub(crate) fn reuse_leaves<'b>(mut v: Vec<Leaf<'_>>) -> Vec<Leaf<'b>> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// The tensor leaves of a structure, in order.
pub(crate) fn tensors_of<S: TensorStruct>(s: &S) -> Vec<Tensor> {
    let mut leaves = Vec::new();
    s.leaves(&mut leaves);
    leaves
        .into_iter()
        .filter_map(|l| match l {
            Leaf::Tensor(t) => Some(t.clone()),
            Leaf::Variable(_) | Leaf::Tag(_) => None,
        })
        .collect()
}
