//! Constructors: from data, scalars, filled tensors and ranges.

use super::{with_dtype, DType, Element, Tensor};
use crate::error::{Error, Result};

impl Tensor {
    /// Wraps a buffer made by a constructor: a trace takes the tensor for a
    /// constant of the graph.
    #[inline]
    pub(crate) fn constant(storage: super::Storage, shape: &[usize]) -> Tensor {
        let t = Tensor::from_storage(storage, shape);
        crate::function::trace::constant_made(&t);
        t
    }

    /// A tensor of `shape` holding `data` in row-major order.
    ///
    /// ```
    /// let t = gradtape::Tensor::from_vec(vec![1i64, 2, 3], &[3])?;
    /// assert_eq!(t.dtype(), gradtape::DType::I64);
    /// assert!(gradtape::Tensor::from_vec(vec![1.0f32; 5], &[2, 2]).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        if numel != data.len() {
            return Err(Error::BadReshape {
                op: "from_vec",
                numel: data.len(),
                shape: shape.to_vec(),
            });
        }
        Ok(Tensor::constant(T::into_storage(data), shape))
    }

    /// Like [`Tensor::from_vec`], copying from a slice.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        Tensor::from_vec(data.to_vec(), shape)
    }

    /// A rank-1 tensor holding `data`.
    ///
    /// ```
    /// let t = gradtape::Tensor::vector(&[1.0f64, 2.0]);
    /// assert_eq!(t.shape(), &[2]);
    /// ```
    pub fn vector<T: Element>(data: &[T]) -> Tensor {
        Tensor::constant(T::into_storage(data.to_vec()), &[data.len()])
    }

    /// A rank-0 tensor.
    ///
    /// ```
    /// let x = gradtape::Tensor::scalar(3.0f32);
    /// assert_eq!(x.shape(), &[] as &[usize]);
    /// ```
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::constant(T::into_storage(vec![value]), &[])
    }

    /// A tensor of `shape` with every element `value` (converted to `dtype`).
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let t = Tensor::full(&[2, 3], 7.0, DType::I32);
    /// assert_eq!(t.to_vec::<i32>()?, vec![7; 6]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        with_dtype!(dtype, T => Tensor::constant(T::into_storage(vec![T::from_f64(value); n]), shape))
    }

    /// Zeros of `shape` and `dtype`.
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 0.0, dtype)
    }

    /// Ones of `shape` and `dtype`.
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 1.0, dtype)
    }

    /// Zeros with this tensor's shape and dtype.
    pub fn zeros_like(&self) -> Tensor {
        self.full_like(0.0)
    }

    /// Ones with this tensor's shape and dtype.
    pub fn ones_like(&self) -> Tensor {
        self.full_like(1.0)
    }

    /// `value` everywhere, with this tensor's shape and dtype. In a trace
    /// the shape is taken from this tensor each time the graph runs.
    pub fn full_like(&self, value: f64) -> Tensor {
        let t = Tensor::full(self.shape(), value, self.dtype());
        crate::function::trace::made_like(self, value, &t);
        t
    }

    /// `start, start + step, ...` up to but excluding `end`, as a rank-1 tensor.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let r = Tensor::arange(0.0, 5.0, 2.0, DType::I64)?;
    /// assert_eq!(r.to_vec::<i64>()?, vec![0, 2, 4]);
    /// assert!(Tensor::arange(0.0, 1.0, 0.0, DType::F32).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid(
                "arange",
                format!("needs finite bounds and a non-zero step, got start={start}, end={end}, step={step}"),
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        Ok(with_dtype!(dtype, T => {
            let v: Vec<T> = (0..n).map(|i| T::from_f64(start + step * i as f64)).collect();
            Tensor::constant(T::into_storage(v), &[n])
        }))
    }
}
