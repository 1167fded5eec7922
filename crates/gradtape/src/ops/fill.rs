//! Constructors that are not recorded (they have no differentiable input):
//! eye, linspace, range, one_hot.

use super::unsupported;
use crate::error::{Error, Result};
use crate::tensor::{with_dtype, DType, Element, Tensor};

impl Tensor {
    /// The `n x n` identity matrix.
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// assert_eq!(Tensor::eye(2, DType::I32).to_vec::<i32>()?, vec![1, 0, 0, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
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
    pub fn eye_rect(rows: usize, cols: usize, dtype: DType) -> Tensor {
        with_dtype!(dtype, T => {
            let (one, zero) = (T::from_f64(1.0), T::from_f64(0.0));
            let v: Vec<T> = (0..rows * cols).map(|k| if k / cols.max(1) == k % cols.max(1) { one } else { zero }).collect();
            Tensor::from_vec(v, &[rows, cols]).expect("numel matches")
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
        let v: Vec<f64> = (0..num)
            .map(|i| {
                if i + 1 == num && num > 1 {
                    stop
                } else {
                    start + step * i as f64
                }
            })
            .collect();
        super::decomp::from_f64s(v, &[num], dtype)
    }

    /// TensorFlow's `range(start, limit, delta)`: the same as
    /// [`arange`](Self::arange).
    ///
    /// ```
    /// use gradtape::{DType, Tensor};
    /// assert_eq!(Tensor::range(5.0, 0.0, -2.0, DType::I32)?.to_vec::<i32>()?, vec![5, 3, 1]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn range(start: f64, limit: f64, delta: f64, dtype: DType) -> Result<Tensor> {
        Tensor::arange(start, limit, delta, dtype).map_err(|e| match e {
            Error::InvalidArgument { msg, .. } => Error::invalid("range", msg),
            other => other,
        })
    }

    /// One-hot encoding of integer indices (`self`): a new dimension of size
    /// `depth` is inserted at `axis` (in `-1..=rank`; -1 means last), holding
    /// `on` at the index and `off` elsewhere. An index outside `0..depth`
    /// gives a row of `off` (as TensorFlow). Not differentiable.
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
        super::check_scalar_for(OP, dtype, self.shape(), on)?;
        super::check_scalar_for(OP, dtype, self.shape(), off)?;
        let ax = if axis == -1 { r } else { axis as usize };
        // any index is allowed (out-of-range ones give a row of `off`)
        let idx: Vec<i64> = match self.dtype() {
            DType::I32 => self.values::<i32>().iter().map(|&v| v as i64).collect(),
            _ => self.values::<i64>().into_owned(),
        };
        let outer: usize = self.shape()[..ax].iter().product();
        let inner: usize = self.shape()[ax..].iter().product();
        let mut shape = self.shape().to_vec();
        shape.insert(ax, depth);
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let Some(numel) = numel.filter(|&n| super::strided::fits(n, dtype)) else {
            return Err(Error::invalid(
                OP,
                format!(
                    "depth {depth} for indices of shape {:?} overflows the element count",
                    self.shape()
                ),
            ));
        };
        Ok(with_dtype!(dtype, T => {
            let (on, off) = (T::from_f64(on), T::from_f64(off));
            let mut v = vec![off; numel];
            for o in 0..outer {
                for i in 0..inner {
                    let k = idx[o * inner + i];
                    if k >= 0 && (k as u64) < depth as u64 {
                        v[(o * depth + k as usize) * inner + i] = on;
                    }
                }
            }
            Tensor::from_vec(v, &shape)?
        }))
    }
}
