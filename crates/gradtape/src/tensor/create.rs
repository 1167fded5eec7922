//! Constructors: from data, scalars, filled tensors and ranges.
//!
//! Every shape given here is checked (`layout::checked_numel`): a shape
//! whose element count overflows is an [`Error::ShapeOverflow`], never a
//! wrapped count. Constructors that allocate from a shape come in two
//! forms: `try_zeros`, `try_ones`, `try_full`, `try_zeros_like`,
//! `try_ones_like` and `try_full_like` return [`Error::OutOfMemory`] when
//! the buffer cannot be allocated (and are what the library uses inside);
//! `zeros`, `ones`, `full` and their `_like` forms are sugar for them that
//! panics with that error's message instead (as `vec![0; n]` does). Every
//! other constructor returns a `Result`, or (`scalar`, `vector`) copies
//! data that already exists.

use super::layout::checked_numel;
use super::{with_dtype, DType, Element, Tensor};
use crate::error::{Error, Result};
use crate::kernels::cpu::build;

impl Tensor {
    /// Wraps a buffer made by a constructor: a trace takes the tensor for a
    /// constant of the graph.
    #[inline]
    pub(crate) fn constant(storage: super::Storage, shape: &[usize]) -> Tensor {
        let t = Tensor::from_storage(storage, shape);
        super::observe::constant(&t);
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
        let numel = checked_numel("from_vec", shape)?;
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

    /// A tensor of `shape` with every element `value` (converted to `dtype`),
    /// or an error: [`Error::ShapeOverflow`] for a shape whose element count
    /// overflows, [`Error::OutOfMemory`] when the buffer cannot be allocated.
    ///
    /// ```
    /// use gradtape::{DType, Error, Tensor};
    /// let t = Tensor::try_full(&[2, 3], 7.0, DType::I32)?;
    /// assert_eq!(t.to_vec::<i32>()?, vec![7; 6]);
    /// let too_big = Tensor::try_full(&[1 << 62], 0.0, DType::F32);
    /// assert!(matches!(too_big, Err(Error::OutOfMemory { op: "full", .. })));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn try_full(shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        Tensor::filled("full", shape, value, dtype)
    }

    /// Zeros of `shape` and `dtype`, or an error (see [`try_full`](Self::try_full)).
    ///
    /// ```
    /// use gradtape::{DType, Error, Tensor};
    /// assert_eq!(Tensor::try_zeros(&[2], DType::F64)?.to_vec::<f64>()?, vec![0.0; 2]);
    /// let e = Tensor::try_zeros(&[1 << 32, 1 << 32], DType::F32).unwrap_err();
    /// assert!(matches!(e, Error::ShapeOverflow { op: "zeros", .. }));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn try_zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::filled("zeros", shape, 0.0, dtype)
    }

    /// Ones of `shape` and `dtype`, or an error (see [`try_full`](Self::try_full)).
    pub fn try_ones(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::filled("ones", shape, 1.0, dtype)
    }

    /// Zeros with this tensor's shape and dtype, or [`Error::OutOfMemory`]
    /// (`self` may be a broadcast view of more elements than fit in memory).
    pub fn try_zeros_like(&self) -> Result<Tensor> {
        let t = crate::kernels::gpu::filled("zeros_like", self.shape(), 0.0, self.dtype(), self.device())?;
        super::observe::filled_like(self, 0.0, &t);
        Ok(t)
    }

    /// Ones with this tensor's shape and dtype, or [`Error::OutOfMemory`].
    pub fn try_ones_like(&self) -> Result<Tensor> {
        let t = crate::kernels::gpu::filled("ones_like", self.shape(), 1.0, self.dtype(), self.device())?;
        super::observe::filled_like(self, 1.0, &t);
        Ok(t)
    }

    /// `value` everywhere, with this tensor's shape and dtype, or
    /// [`Error::OutOfMemory`]. In a traced function the shape is taken from
    /// this tensor each time the graph runs (as for the other `_like` forms).
    pub fn try_full_like(&self, value: f64) -> Result<Tensor> {
        let t = crate::kernels::gpu::filled("full_like", self.shape(), value, self.dtype(), self.device())?;
        super::observe::filled_like(self, value, &t);
        Ok(t)
    }

    /// `value` everywhere, a new tensor of `shape` and `dtype` made on
    /// `device` (no copy from the host); an error where that device is
    /// not here.
    ///
    /// ```
    /// use gradtape::{DType, Device, Tensor};
    /// let t = Tensor::full_on(&[2], 3.0, DType::F32, Device::Cpu)?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![3.0, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn full_on(shape: &[usize], value: f64, dtype: DType, device: super::Device) -> Result<Tensor> {
        crate::kernels::gpu::filled("full_on", shape, value, dtype, device)
    }

    /// Zeros on `device` ([`full_on`](Self::full_on)).
    pub fn zeros_on(shape: &[usize], dtype: DType, device: super::Device) -> Result<Tensor> {
        crate::kernels::gpu::filled("zeros_on", shape, 0.0, dtype, device)
    }

    /// Ones on `device` ([`full_on`](Self::full_on)).
    pub fn ones_on(shape: &[usize], dtype: DType, device: super::Device) -> Result<Tensor> {
        crate::kernels::gpu::filled("ones_on", shape, 1.0, dtype, device)
    }

    /// `value` everywhere in a new tensor of `shape`; errors name `op`.
    pub(crate) fn filled(op: &'static str, shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        let n = checked_numel(op, shape)?;
        with_dtype!(dtype, T => {
            let data = crate::kernels::cpu::filled_buf(op, n, T::from_f64(value))?;
            Ok(Tensor::constant(T::buf_into_storage(data), shape))
        })
    }

    /// [`try_full`](Self::try_full) for shapes known to fit.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let t = Tensor::full(&[2, 3], 7.0, DType::I32);
    /// assert_eq!(t.to_vec::<i32>()?, vec![7; 6]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    ///
    /// # Panics
    /// With the error's message where `try_full` returns an error: a shape
    /// whose element count overflows, or a buffer that cannot be allocated.
    #[track_caller]
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        unwrap_or_panic(Tensor::try_full(shape, value, dtype))
    }

    /// Zeros of `shape` and `dtype`.
    ///
    /// # Panics
    /// Where [`try_zeros`](Self::try_zeros) returns an error.
    #[track_caller]
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        unwrap_or_panic(Tensor::try_zeros(shape, dtype))
    }

    /// Ones of `shape` and `dtype`.
    ///
    /// # Panics
    /// Where [`try_ones`](Self::try_ones) returns an error.
    #[track_caller]
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        unwrap_or_panic(Tensor::try_ones(shape, dtype))
    }

    /// Zeros with this tensor's shape and dtype.
    ///
    /// # Panics
    /// Where [`try_zeros_like`](Self::try_zeros_like) returns an error.
    #[track_caller]
    pub fn zeros_like(&self) -> Tensor {
        unwrap_or_panic(self.try_zeros_like())
    }

    /// Ones with this tensor's shape and dtype.
    ///
    /// # Panics
    /// Where [`try_ones_like`](Self::try_ones_like) returns an error.
    #[track_caller]
    pub fn ones_like(&self) -> Tensor {
        unwrap_or_panic(self.try_ones_like())
    }

    /// `value` everywhere, with this tensor's shape and dtype.
    ///
    /// # Panics
    /// Where [`try_full_like`](Self::try_full_like) returns an error.
    #[track_caller]
    pub fn full_like(&self, value: f64) -> Tensor {
        unwrap_or_panic(self.try_full_like(value))
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
        if dtype.is_int() {
            return arange_int(start, end, step, dtype);
        }
        // (saturating: a count past usize::MAX is refused just below)
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        checked_numel("arange", &[n])?;
        with_dtype!(dtype, T => {
            let data = build::<T>("arange", n, |first, out| {
                for (i, o) in out.iter_mut().enumerate() {
                    o.write(T::from_f64(start + step * (first + i) as f64));
                }
            })?;
            Ok(Tensor::constant(T::buf_into_storage(data), &[n]))
        })
    }
}

/// [`Tensor::arange`] of an integer dtype, counted in integers (in `f64`,
/// `2^53 + 1` is not there to count: `arange(2^53, 2^53 + 4, 1)` repeated
/// `2^53`). Its start and step must be integers that the dtype holds, as
/// TensorFlow converts them to the dtype first; an `end` between two
/// integers excludes the values past it (`arange(0, 2.5, 1)` is `[0, 1, 2]`).
fn arange_int(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
    let end = if step > 0.0 { end.ceil() } else { end.floor() };
    let (lo, hi) = match dtype {
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        _ => (i64::MIN as f64, i64::MAX as f64),
    };
    for (name, v) in [("start", start), ("end", end), ("step", step)] {
        // (`hi` is 2^31 - 1 exactly, or 2^63, i64::MAX rounded up)
        let fits = v >= lo && if dtype == DType::I32 { v <= hi } else { v < hi };
        if v.fract() != 0.0 || !fits {
            return Err(Error::invalid(
                "arange",
                format!("{name}={v} is not an integer that {dtype} holds (the range is of dtype {dtype})"),
            ));
        }
    }
    let (start, end, step) = (start as i64, end as i64, step as i64);
    // the count, in i128 (no bound and step of i64 overflow it)
    let span = end as i128 - start as i128;
    let n = if (span > 0) == (step > 0) && span != 0 {
        let (span, step) = (span.abs(), (step as i128).abs());
        ((span + step - 1) / step) as u128
    } else {
        0
    };
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    checked_numel("arange", &[n])?;
    // every value lies between `start` and `end`, so `start + i * step`
    // fits, and wrapping arithmetic gives it exactly even where `i * step`
    // alone does not fit
    let at = move |i: usize| start.wrapping_add((i as i64).wrapping_mul(step));
    Ok(match dtype {
        DType::I32 => {
            let data = build::<i32>("arange", n, |first, out| {
                for (i, o) in out.iter_mut().enumerate() {
                    o.write(at(first + i) as i32);
                }
            })?;
            Tensor::constant(i32::buf_into_storage(data), &[n])
        }
        _ => {
            let data = build::<i64>("arange", n, |first, out| {
                for (i, o) in out.iter_mut().enumerate() {
                    o.write(at(first + i));
                }
            })?;
            Tensor::constant(i64::buf_into_storage(data), &[n])
        }
    })
}

/// The value, or a panic with the error's message at the caller's line.
#[track_caller]
fn unwrap_or_panic(t: Result<Tensor>) -> Tensor {
    match t {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}
