//! Shape ops. Reshape (where strides allow), permute, broadcast, expand
//! and squeeze are views: new tensors over the same storage, no copy.

use crate::ops::desc::{Lazy, Op, ShapeOp};
use smallvec::SmallVec;

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::cast;
use crate::ops::{bind_jvp, grads, only};
use crate::tensor::layout::{broadcast_shapes, broadcast_strides, checked_numel, norm_axis};
use crate::tensor::{with_dtype, DType, Element, Layout, Shape, Tensor};

impl Tensor {
    /// The same elements in another shape: a view where strides can
    /// describe it (always when contiguous), else a copy.
    ///
    /// ```
    /// let x = gradtape::Tensor::arange(0.0, 6.0, 1.0, gradtape::DType::F32)?;
    /// assert_eq!(x.reshape(&[2, 3])?.shape(), &[2, 3]);
    /// assert!(x.reshape(&[4]).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let numel = checked_numel("reshape", shape)?;
        if numel != self.numel() {
            return Err(Error::BadReshape {
                op: "reshape",
                numel: self.numel(),
                shape: shape.to_vec(),
            });
        }
        // (to its own shape: a view with the same strides, no copy; a
        // compiled graph drops such a reshape, so eager must not change the
        // layout either: a product's order of additions may depend on it)
        // (a strided view on the host that strides can describe in the new
        // shape stays a view, as PyTorch's `reshape`: a head split of a
        // slice of a fused QKV product copies nothing; GPU kernels read
        // contiguous buffers, so a GPU tensor is copied unless contiguous)
        let view = match self.device().is_cuda() {
            false => self.layout().reshaped(shape),
            true => self.is_contiguous().then(|| Layout {
                offset: self.layout().offset,
                ..Layout::contiguous(shape)
            }),
        };
        let y = if shape == self.shape() {
            self.view(self.layout().clone())
        } else if let Some(layout) = view {
            self.view(layout)
        } else {
            let src = self.contiguous_raw("reshape")?;
            src.view(Layout {
                offset: src.layout().offset,
                ..Layout::contiguous(shape)
            })
        };
        let old: Shape = self.shape().into();
        Ok(bind_jvp(
            Lazy("Reshape", || Op::Shape(ShapeOp::Reshape(shape.into()))),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].reshape(&old)?)])),
            |t, _| only(t)?.reshape(shape),
        ))
    }

    /// [`reshape`](Self::reshape) where one dimension may be `-1`, taking
    /// what the others leave (TensorFlow's `tf.reshape(x, [-1, 3])`,
    /// PyTorch's `x.reshape(-1, 3)`). An error for two `-1`s, another
    /// negative size, or sizes that do not divide the elements, as
    /// TensorFlow; an empty input reshaped with a `-1` beside a size 0
    /// follows TensorFlow too (`[0, 3]` to `[-1, 0]` is `[3, 0]`).
    ///
    /// ```
    /// let x = gradtape::Tensor::arange(0.0, 6.0, 1.0, gradtape::DType::F32)?;
    /// assert_eq!(x.reshape_inferred(&[-1, 3])?.shape(), &[2, 3]);
    /// assert_eq!(x.reshape_inferred(&[-1])?.shape(), &[6]);
    /// assert!(x.reshape_inferred(&[-1, 4]).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn reshape_inferred(&self, shape: &[isize]) -> Result<Tensor> {
        const OP: &str = "reshape";
        let bad = |msg: String| Error::invalid(OP, format!("{msg} (shape {shape:?} for {:?})", self.shape()));
        let mut unknown = None;
        let mut known = 1usize;
        for (i, &d) in shape.iter().enumerate() {
            match d {
                -1 if unknown.is_some() => return Err(bad("at most one size may be -1".into())),
                -1 => unknown = Some(i),
                d if d < 0 => return Err(bad(format!("a size must be -1 or at least 0, got {d}"))),
                d => {
                    known = known
                        .checked_mul(d as usize)
                        .ok_or_else(|| bad("the sizes overflow".into()))?
                }
            }
        }
        let mut dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        let wrong = |dims: Vec<usize>| Error::BadReshape {
            op: OP,
            numel: self.numel(),
            shape: dims,
        };
        if let Some(i) = unknown {
            dims[i] = if known != 0 {
                if !self.numel().is_multiple_of(known) {
                    return Err(wrong(dims));
                }
                self.numel() / known
            } else if self.numel() == 0 {
                // (TensorFlow's rule beside a size 0, for an empty input:
                // its sizes over the others', zeros counted as ones,
                // rounded down)
                let input: usize = self.shape().iter().map(|&d| d.max(1)).product();
                let others = dims
                    .iter()
                    .filter(|&&d| d != 0)
                    .try_fold(1usize, |a, &d| a.checked_mul(d));
                input / others.ok_or_else(|| bad("the sizes overflow".into()))?
            } else {
                return Err(wrong(dims));
            };
        }
        self.reshape(&dims)
    }

    /// A contiguous copy when the view is strided; `self` otherwise (not
    /// recorded). Allocation failures name `op`.
    fn contiguous_raw(&self, op: &'static str) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self.clone())
        } else if self.device().is_cuda() {
            crate::kernels::gpu::contiguous(op, self)
        } else {
            with_dtype!(self.dtype(), T => Tensor::from_vec(self.owned_values::<T>(op)?, self.shape()))
        }
    }

    /// A row-major copy of a strided view (identity for the gradient).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let y = self.contiguous_raw("contiguous")?;
        Ok(bind_jvp(
            Op::Shape(ShapeOp::Contiguous),
            &[self],
            y,
            |_| crate::dispatch::pass_through(),
            |t, _| Ok(only(t)?.clone()),
        ))
    }

    /// Reorders dimensions: output dim `i` is input dim `perm[i]`. A view.
    ///
    /// ```
    /// let x = gradtape::Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.permute(&[1, 0])?.to_vec::<i32>()?, vec![1, 4, 2, 5, 3, 6]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let r = self.rank();
        let mut seen: smallvec::SmallVec<[bool; 8]> = smallvec::smallvec![false; r];
        if perm.len() != r || perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
            return Err(Error::invalid(
                "permute",
                format!("{perm:?} is not a permutation of the dims of shape {:?}", self.shape()),
            ));
        }
        let l = self.layout();
        let y = self.view(Layout {
            shape: perm.iter().map(|&p| l.shape[p]).collect(),
            strides: perm.iter().map(|&p| l.strides[p]).collect(),
            offset: l.offset,
        });
        let mut inv: Shape = smallvec::smallvec![0; r];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        Ok(bind_jvp(
            Lazy("Transpose", || Op::Shape(ShapeOp::Transpose(perm.into()))),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].permute(&inv)?)])),
            |t, _| only(t)?.permute(perm),
        ))
    }

    /// Swaps the last two dimensions (rank >= 2). A view.
    pub fn transpose(&self) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::invalid(
                "transpose",
                format!("needs rank >= 2, got shape {:?}", self.shape()),
            ));
        }
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        self.permute(&perm)
    }

    /// Broadcasts to `shape` (NumPy rules) without copying: stride 0 on
    /// stretched dims. d/dx sums back over them.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let b = broadcast_shapes("broadcast_to", self.shape(), shape)?;
        if b.as_slice() != shape {
            return Err(Error::ShapeMismatch {
                op: "broadcast_to",
                lhs: self.shape().to_vec(),
                rhs: shape.to_vec(),
            });
        }
        let l = self.layout();
        let y = self.view(Layout {
            shape: shape.into(),
            strides: broadcast_strides(&l.shape, &l.strides, shape),
            offset: l.offset,
        });
        let old = self.shape().to_vec();
        Ok(bind_jvp(
            Lazy("BroadcastTo", || Op::Shape(ShapeOp::BroadcastTo(shape.into()))),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].sum_to_shape(&old)?)])),
            |t, _| only(t)?.broadcast_to(shape),
        ))
    }

    /// Inserts a dimension of size 1 at `axis` (in `-(rank+1)..=rank`).
    pub fn expand_dims(&self, axis: isize) -> Result<Tensor> {
        let mut shape: Vec<usize> = self.shape().to_vec();
        let ext: Vec<usize> = (0..=shape.len()).collect();
        let a = norm_axis("expand_dims", axis, &ext).map_err(|_| Error::BadAxis {
            op: "expand_dims",
            axis,
            shape: shape.clone(),
            repeated: false,
        })?;
        shape.insert(a, 1);
        self.reshape(&shape)
    }

    /// Removes the listed size-1 dimensions, or all of them if `axes` is empty.
    pub fn squeeze(&self, axes: &[isize]) -> Result<Tensor> {
        let s = self.shape();
        let drop: SmallVec<[usize; 4]> = if axes.is_empty() {
            (0..s.len()).filter(|&i| s[i] == 1).collect()
        } else {
            let mut d = SmallVec::new();
            for &a in axes {
                let n = norm_axis("squeeze", a, s)?;
                if s[n] != 1 {
                    return Err(Error::invalid(
                        "squeeze",
                        format!("dimension {a} of shape {s:?} has size {}, not 1", s[n]),
                    ));
                }
                d.push(n);
            }
            d
        };
        let shape: Vec<usize> = (0..s.len()).filter(|i| !drop.contains(i)).map(|i| s[i]).collect();
        self.reshape(&shape)
    }

    /// Converts to `dtype`. Differentiable between float types.
    ///
    /// A float converted to an integer type is truncated toward zero and
    /// saturated at the type's bounds, NaN giving 0 (Rust's `as`, and
    /// JAX's); TensorFlow's x86 kernels give the type's minimum for NaN
    /// and out-of-range values, which C++ leaves undefined.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let x = Tensor::vector(&[-2.7f32, 3e9, f32::NAN]);
    /// assert_eq!(x.cast(DType::I32)?.to_vec::<i32>()?, vec![-2, i32::MAX, 0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        if self.dtype().is_complex() || dtype.is_complex() {
            return crate::ops::complex::cast(self, dtype);
        }
        let y = match crate::dispatch::device::offload(
            "cast",
            &[self],
            |_| crate::kernels::cuda::cast("cast", self, dtype),
            |h| cast(&h[0], dtype),
        ) {
            Some(r) => r?,
            None => cast(self, dtype)?,
        };
        let from = self.dtype();
        Ok(bind_jvp(
            Op::Cast(dtype),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].cast(from)?)])),
            |t, _| only(t)?.cast(dtype),
        ))
    }

    /// The same value under a new id; recorded, so gradients pass through.
    pub fn identity(&self) -> Tensor {
        bind_jvp(
            Op::Shape(ShapeOp::Identity),
            &[self],
            self.alias(),
            |_| crate::dispatch::pass_through(),
            |t, _| Ok(only(t)?.clone()),
        )
    }

    /// The same value under a new id that no tape records: gradients stop here.
    ///
    /// ```
    /// use gradtape::{GradientTape, Tensor};
    /// let x = Tensor::scalar(2.0f64);
    /// let tape = GradientTape::new();
    /// let y = tape.record(|| { tape.watch(&x); x.mul(&x.stop_gradient()) })?;
    /// assert_eq!(tape.gradient(&y, &x)?.unwrap().to_scalar::<f64>()?, 2.0);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn stop_gradient(&self) -> Tensor {
        crate::ops::bind_nondiff(Op::Shape(ShapeOp::StopGradient), &[self], self.alias())
    }

    /// Every element converted to `T` (any dtype to any `T`); a helper for tests
    /// and display.
    ///
    /// # Panics
    /// As [`to_vec_f64`](Self::to_vec_f64): if the copy cannot be allocated,
    /// or for a value a traced function computes.
    pub fn to_vec_as<T: Element>(&self) -> Vec<T> {
        self.to_vec_f64().into_iter().map(T::from_f64).collect()
    }
}
