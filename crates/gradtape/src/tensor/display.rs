//! `Display` in TensorFlow's style: `Tensor(6.0, shape=[], dtype=f32)`.
//!
//! Large tensors are summarised like NumPy: past 1000 elements each
//! dimension shows its first and last three entries around `...`.

use std::fmt;

use super::{with_dtype, Element, Tensor};

const SUMMARISE_ABOVE: usize = 1000;
const EDGE: usize = 3;

fn write_elem<T: Element>(f: &mut fmt::Formatter<'_>, x: T) -> fmt::Result {
    x.fmt_elem(f)
}

fn write_nested<T: Element>(f: &mut fmt::Formatter<'_>, vals: &[T], shape: &[usize], summarise: bool) -> fmt::Result {
    if shape.is_empty() {
        return write_elem(f, vals[0]);
    }
    let n = shape[0];
    let inner: usize = shape[1..].iter().product();
    f.write_str("[")?;
    let mut first = true;
    let mut i = 0;
    while i < n {
        if summarise && n > 2 * EDGE && i == EDGE {
            f.write_str(", ...")?;
            i = n - EDGE;
            continue;
        }
        if !first {
            f.write_str(", ")?;
        }
        first = false;
        write_nested(f, &vals[i * inner..(i + 1) * inner], &shape[1..], summarise)?;
        i += 1;
    }
    f.write_str("]")
}

/// The elements of a small tensor, nested as in `Display`, without the
/// `Tensor(...)` wrapper.
pub(crate) fn values_only(t: &Tensor) -> String {
    struct Vals<'a>(&'a Tensor);
    impl fmt::Display for Vals<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            with_dtype!(self.0.dtype(), T => {
                let vals = self.0.values::<T>();
                write_nested::<T>(f, &vals, self.0.shape(), false)
            })
        }
    }
    Vals(t).to_string()
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tensor(")?;
        let summarise = self.numel() > SUMMARISE_ABOVE;
        with_dtype!(self.dtype(), T => {
            let vals = self.values::<T>();
            write_nested::<T>(f, &vals, self.shape(), summarise)?;
        });
        write!(f, ", shape={:?}, dtype={})", self.shape(), self.dtype())
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    #[test]
    fn display_matches_tensorflow_style() {
        assert_eq!(Tensor::scalar(6.0f32).to_string(), "Tensor(6.0, shape=[], dtype=f32)");
        let t = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2]).unwrap();
        assert_eq!(t.to_string(), "Tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=i32)");
        let e = Tensor::from_vec(Vec::<f64>::new(), &[0, 3]).unwrap();
        assert_eq!(e.to_string(), "Tensor([], shape=[0, 3], dtype=f64)");
        let big = Tensor::zeros(&[2000], crate::DType::Bool);
        assert_eq!(
            big.to_string(),
            "Tensor([false, false, false, ..., false, false, false], shape=[2000], dtype=bool)"
        );
    }
}
