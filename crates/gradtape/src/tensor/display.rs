//! `Display` in TensorFlow's style: `Tensor(6.0, shape=[], dtype=f32)`.
//!
//! Large tensors are summarised like NumPy (and so TensorFlow): past 1000
//! elements each dimension longer than six shows its first and last three
//! entries around `...`. Elements are read in place through the view's
//! strides, and only those shown: printing a broadcast view of 2^40
//! elements reads a few hundred at most and allocates nothing.

use std::fmt;

use super::{with_dtype, Element, Tensor};

const SUMMARISE_ABOVE: usize = 1000;
const EDGE: usize = 3;

/// Writes the view of `buf` at `offset` with `shape` and `strides` as
/// nested lists, reading only the elements shown.
fn write_nested<T: Element>(
    f: &mut fmt::Formatter<'_>,
    buf: &[T],
    offset: isize,
    shape: &[usize],
    strides: &[isize],
    summarise: bool,
) -> fmt::Result {
    let Some((&n, inner)) = shape.split_first() else {
        return buf[offset as usize].fmt_elem(f);
    };
    // no elements: `[]` whatever the other dims (as NumPy and TensorFlow
    // print it), without walking a huge dim of empty rows
    if shape.contains(&0) {
        return f.write_str("[]");
    }
    f.write_str("[")?;
    let mut i = 0;
    while i < n {
        if summarise && n > 2 * EDGE && i == EDGE {
            f.write_str(", ...")?;
            i = n - EDGE;
            continue;
        }
        if i > 0 {
            f.write_str(", ")?;
        }
        // (in the buffer for every shown element: the layout lies inside it)
        write_nested(
            f,
            buf,
            offset + i as isize * strides[0],
            inner,
            &strides[1..],
            summarise,
        )?;
        i += 1;
    }
    f.write_str("]")
}

/// The elements of a small tensor, nested as in `Display`, without the
/// `Tensor(...)` wrapper.
pub(crate) fn values_only(t: &Tensor) -> String {
    if t.device().is_cuda() {
        return match crate::kernels::gpu::to_host("Display", t) {
            Ok(h) => values_only(&h),
            Err(e) => format!("<{e}>"),
        };
    }
    struct Vals<'a>(&'a Tensor);
    impl fmt::Display for Vals<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let l = self.0.layout();
            with_dtype!(self.0.dtype(), T => {
                write_nested::<T>(f, self.0.buffer::<T>(), l.offset as isize, &l.shape, &l.strides, false)
            })
        }
    }
    Vals(t).to_string()
}

/// A tensor on a GPU prints its values (copied to the host) and its device:
/// `Tensor([1.0, 2.0], shape=[2], dtype=f32, device=cuda:0)`.
///
/// A value a traced function computes prints as `Tensor(<traced>, shape=[2],
/// dtype=f32)` while it is traced: its elements are known only when the
/// graph runs (as TensorFlow prints a symbolic tensor).
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tensor(")?;
        if super::observe::unreadable(self) {
            return write!(f, "<traced>, shape={:?}, dtype={})", self.shape(), self.dtype());
        }
        if self.device().is_cuda() {
            return match crate::kernels::gpu::to_host("Display", self) {
                Ok(h) => {
                    let s = h.to_string();
                    write!(f, "{}, device={})", &s["Tensor(".len()..s.len() - 1], self.device())
                }
                Err(e) => write!(f, "<{e}>, shape={:?}, dtype={})", self.shape(), self.dtype()),
            };
        }
        let summarise = self.numel() > SUMMARISE_ABOVE;
        let l = self.layout();
        with_dtype!(self.dtype(), T => {
            write_nested::<T>(f, self.buffer::<T>(), l.offset as isize, &l.shape, &l.strides, summarise)?;
        });
        write!(f, ", shape={:?}, dtype={})", self.shape(), self.dtype())
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
