//! Constructors that are not recorded on tapes (they have no differentiable
//! input): eye, linspace, range, one_hot. A trace takes the first three for
//! constants; `one_hot` reads its indices, so it is a graph node. Like `zeros`, `eye` and `eye_rect` are
//! sugar that panics where their `try_` forms return an error.

use crate::error::{Error, Result};
use crate::kernels::cpu::{filled_vec, index::int_values};
use crate::ops::desc::{CreateOp, Lazy, Op, F64};
use crate::ops::unsupported;
use crate::tensor::layout::checked_numel;
use crate::tensor::{with_dtype, with_float_dtype, DType, Element, Tensor};

impl Tensor {
    /// The `n x n` identity matrix.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// assert_eq!(Tensor::eye(2, DType::I32).to_vec::<i32>()?, vec![1, 0, 0, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    ///
    /// # Panics
    /// Where [`try_eye`](Self::try_eye) returns an error.
    #[track_caller]
    pub fn eye(n: usize, dtype: DType) -> Tensor {
        Tensor::eye_rect(n, n, dtype)
    }

    /// A `rows x cols` matrix with ones on the main diagonal, zeros elsewhere.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let e = Tensor::eye_rect(2, 3, DType::F32);
    /// assert_eq!(e.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    ///
    /// # Panics
    /// Where [`try_eye_rect`](Self::try_eye_rect) returns an error.
    #[track_caller]
    pub fn eye_rect(rows: usize, cols: usize, dtype: DType) -> Tensor {
        match Tensor::try_eye_rect(rows, cols, dtype) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// The `n x n` identity matrix, or an error: [`Error::ShapeOverflow`]
    /// when `n * n` overflows, [`Error::OutOfMemory`] when the matrix cannot
    /// be allocated (TensorFlow's `ResourceExhaustedError`).
    ///
    /// ```
    /// use gradtape::{DType, Error, Tensor};
    /// assert_eq!(Tensor::try_eye(2, DType::F64)?.to_vec::<f64>()?, vec![1.0, 0.0, 0.0, 1.0]);
    /// assert!(matches!(Tensor::try_eye(1 << 31, DType::F32), Err(Error::OutOfMemory { op: "eye", .. })));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn try_eye(n: usize, dtype: DType) -> Result<Tensor> {
        Tensor::try_eye_rect(n, n, dtype)
    }

    /// A `rows x cols` matrix with ones on the main diagonal, zeros
    /// elsewhere, or an error (see [`try_eye`](Self::try_eye)).
    pub fn try_eye_rect(rows: usize, cols: usize, dtype: DType) -> Result<Tensor> {
        const OP: &str = "eye";
        let n = checked_numel(OP, &[rows, cols])?;
        with_dtype!(dtype, T => {
            let mut v = filled_vec(OP, n, T::from_f64(0.0))?;
            for i in 0..rows.min(cols) {
                v[i * cols + i] = T::from_f64(1.0);
            }
            Tensor::from_vec(v, &[rows, cols])
        })
    }

    /// `num` evenly spaced values from `start` to `stop`, both included
    /// (`[start]` for `num = 1`, empty for 0). Float dtypes.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let l = Tensor::linspace(0.0, 1.0, 5, DType::F64)?;
    /// assert_eq!(l.to_vec::<f64>()?, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn linspace(start: f64, stop: f64, num: usize, dtype: DType) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(unsupported("linspace", dtype, "f32 or f64"));
        }
        let step = if num > 1 {
            (stop - start) / (num - 1) as f64
        } else {
            0.0
        };
        checked_numel("linspace", &[num])?;
        with_float_dtype!(dtype, T => {
            let v = crate::kernels::cpu::build::<T>("linspace", num, |first, out| {
                for (j, o) in out.iter_mut().enumerate() {
                    let i = first + j;
                    o.write(T::from_f64(if i + 1 == num && num > 1 { stop } else { start + step * i as f64 }));
                }
            })?;
            // (a constant: inside a traced function, frozen into the graph
            // like `arange`'s, not refused as an op that bypasses tracing)
            Ok(Tensor::constant(T::buf_into_storage(v), &[num]))
        }, _ => unreachable!("checked above"))
    }

    /// TensorFlow's `range(start, limit, delta)`: [`arange`](Self::arange),
    /// except that, as TensorFlow, a `delta` pointing away from `limit` is
    /// an error (`arange`, as NumPy's, gives an empty tensor). For an
    /// integer dtype the three must be integers of that dtype; the values
    /// are counted in integers.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// assert_eq!(Tensor::range(5.0, 0.0, -2.0, DType::I32)?.to_vec::<i32>()?, vec![5, 3, 1]);
    /// assert!(Tensor::range(5.0, 0.0, 1.0, DType::F32).is_err());
    /// assert!(Tensor::range(0.5, 3.0, 1.0, DType::I32).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn range(start: f64, limit: f64, delta: f64, dtype: DType) -> Result<Tensor> {
        if (delta > 0.0 && start > limit) || (delta < 0.0 && start < limit) {
            let (want, d) = if delta > 0.0 { ("<=", "> 0") } else { (">=", "< 0") };
            return Err(Error::invalid(
                "range",
                format!("needs start {want} limit when delta {d}, got start={start}, limit={limit}, delta={delta}"),
            ));
        }
        Tensor::arange(start, limit, delta, dtype).map_err(|e| match e {
            Error::InvalidArgument { msg, .. } => Error::invalid("range", msg),
            other => other,
        })
    }

    /// One-hot encoding of integer indices (`self`): a new dimension of size
    /// `depth` is inserted at `axis` (in `-1..=rank`; -1 means last), holding
    /// `on` at the index and `off` elsewhere. An index outside `0..depth`
    /// gives a row of `off` (as TensorFlow). Not differentiable. A depth
    /// whose result cannot be allocated is [`Error::OutOfMemory`]
    /// (TensorFlow takes `depth` as an `int32`, so that a depth of 2^40
    /// silently becomes 0 there and gives an empty result).
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// let i = Tensor::vector(&[0i64, 2, 5]);
    /// let h = i.one_hot(3, 1.0, 0.0, -1, DType::F32)?;
    /// assert_eq!(h.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn one_hot(&self, depth: usize, on: f64, off: f64, axis: isize, dtype: DType) -> Result<Tensor> {
        const OP: &str = "one_hot";
        if !self.dtype().is_int() {
            return Err(unsupported(OP, self.dtype(), "i32 or i64 indices"));
        }
        let r = self.rank();
        if axis < -1 || axis > r as isize {
            return Err(Error::BadAxis {
                op: OP,
                axis,
                shape: self.shape().to_vec(),
                repeated: false,
            });
        }
        crate::ops::check_scalar_for(OP, dtype, self.shape(), on)?;
        crate::ops::check_scalar_for(OP, dtype, self.shape(), off)?;
        let ax = if axis == -1 { r } else { axis as usize };
        let outer: usize = self.shape()[..ax].iter().product();
        let inner: usize = self.shape()[ax..].iter().product();
        let mut shape = self.shape().to_vec();
        shape.insert(ax, depth);
        let numel = checked_numel(OP, &shape)?;
        // any index is allowed (out-of-range ones give a row of `off`)
        let cpu = |x: &Tensor| -> Result<Tensor> {
            let idx = int_values(OP, x)?;
            Ok(with_dtype!(dtype, T => {
                let (on, off) = (T::from_f64(on), T::from_f64(off));
                let mut v = filled_vec(OP, numel, off)?;
                // (an empty input is not walked, however many empty rows it has)
                let outer = if idx.is_empty() { 0 } else { outer };
                for o in 0..outer {
                    for i in 0..inner {
                        let k = idx[o * inner + i];
                        if k >= 0 && (k as u64) < depth as u64 {
                            v[(o * depth + k as usize) * inner + i] = on;
                        }
                    }
                }
                Tensor::from_storage(T::into_storage(v), &shape)
            }))
        };
        let y = match crate::dispatch::device::offload(
            OP,
            &[self],
            |_| crate::kernels::cuda::one_hot(OP, self, depth, ax, on, off, &shape, dtype),
            |h| cpu(&h[0]),
        ) {
            Some(r) => r?,
            None => cpu(self)?,
        };
        let desc = || {
            Op::Create(CreateOp::OneHot {
                depth,
                on: F64(on),
                off: F64(off),
                axis,
                dtype,
            })
        };
        Ok(crate::ops::bind_nondiff(Lazy("OneHot", desc), &[self], y))
    }
}
