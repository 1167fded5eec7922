//! Slicing (a view, no copy) and zero padding, each the other's adjoint.

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::filled_vec;
use crate::ops::desc::{Lazy, Op, ShapeOp};
use crate::ops::{bind_jvp, grads, only};
use crate::tensor::layout::{checked_numel, contiguous_strides, norm_axis};
use crate::tensor::{with_dtype, Element, Layout, Tensor};

impl Tensor {
    /// The block `begin[i] .. begin[i] + size[i]` of every dimension, as a
    /// view of the same storage. d/dx pads the cotangent back with zeros.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec((0..12).collect::<Vec<i32>>(), &[3, 4])?;
    /// let s = x.slice(&[1, 1], &[2, 2])?;
    /// assert_eq!(s.to_vec::<i32>()?, vec![5, 6, 9, 10]);
    /// assert!(x.slice(&[2, 0], &[2, 4]).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn slice(&self, begin: &[usize], size: &[usize]) -> Result<Tensor> {
        let shape = self.shape();
        if begin.len() != shape.len()
            || size.len() != shape.len()
            || (0..shape.len()).any(|i| begin[i].checked_add(size[i]).is_none_or(|end| end > shape[i]))
        {
            return Err(Error::invalid(
                "slice",
                format!("begin {begin:?} and size {size:?} do not fit in shape {shape:?}"),
            ));
        }
        let y = self.block_view(begin, size);
        let pads: smallvec::SmallVec<[(usize, usize); 4]> = (0..shape.len())
            .map(|i| (begin[i], shape[i] - begin[i] - size[i]))
            .collect();
        Ok(bind_jvp(
            Lazy("Slice", || Op::Shape(ShapeOp::Slice(begin.into(), size.into()))),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].pad(&pads)?)])),
            |t, _| only(t)?.slice(begin, size),
        ))
    }

    /// The block `begin .. begin + size` (checked by the caller to fit) as
    /// a view, unrecorded.
    pub(crate) fn block_view(&self, begin: &[usize], size: &[usize]) -> Tensor {
        let l = self.layout();
        let offset = l.offset as isize
            + (0..begin.len())
                .map(|i| begin[i] as isize * l.strides[i])
                .sum::<isize>();
        self.view(Layout {
            shape: size.into(),
            strides: l.strides.clone(),
            // an empty view may point past the end; it is never read
            offset: if size.contains(&0) { l.offset } else { offset as usize },
        })
    }

    /// `len` entries of dimension `axis` starting at `start` (a view).
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        let a = norm_axis("narrow", axis, self.shape())?;
        if start.checked_add(len).is_none_or(|end| end > self.shape()[a]) {
            return Err(Error::invalid(
                "narrow",
                format!(
                    "start {start} + len {len} exceeds axis {axis} of shape {:?}",
                    self.shape()
                ),
            ));
        }
        let mut begin = vec![0; self.rank()];
        let mut size = self.shape().to_vec();
        begin[a] = start;
        size[a] = len;
        self.slice(&begin, &size)
    }

    /// Pads each dimension `i` with `pads[i].0` zeros before and `pads[i].1`
    /// after. d/dx slices the cotangent back.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::vector(&[1.0f32, 2.0]);
    /// assert_eq!(x.pad(&[(1, 2)])?.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 0.0, 0.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn pad(&self, pads: &[(usize, usize)]) -> Result<Tensor> {
        if pads.len() != self.rank() {
            return Err(Error::invalid(
                "pad",
                format!("{} paddings given for shape {:?}", pads.len(), self.shape()),
            ));
        }
        let gpu = crate::dispatch::device::offload(
            "pad",
            &[self],
            |_| {
                let out_shape: Vec<usize> = self
                    .shape()
                    .iter()
                    .zip(pads)
                    .map(|(d, p)| d.saturating_add(p.0).saturating_add(p.1))
                    .collect();
                checked_numel("pad", &out_shape)?;
                crate::kernels::cuda::pad("pad", self, pads, &out_shape)
            },
            |h| with_dtype!(h[0].dtype(), T => pad_kernel::<T>(&h[0], pads)),
        );
        let y = match gpu {
            Some(r) => r?,
            None => with_dtype!(self.dtype(), T => pad_kernel::<T>(self, pads))?,
        };
        let (begin, size) = (pads.iter().map(|p| p.0).collect::<Vec<_>>(), self.shape().to_vec());
        Ok(bind_jvp(
            Lazy("Pad", || Op::Shape(ShapeOp::Pad(pads.into()))),
            &[self],
            y,
            move |_| vjp(move |g, _| Ok(grads![Some(g[0].slice(&begin, &size)?)])),
            |t, _| only(t)?.pad(pads),
        ))
    }
}

fn pad_kernel<T: Element>(x: &Tensor, pads: &[(usize, usize)]) -> Result<Tensor> {
    const OP: &str = "pad";
    let shape = x.shape();
    // (a saturated dim is refused just below)
    let out_shape: Vec<usize> = shape
        .iter()
        .zip(pads)
        .map(|(d, p)| d.saturating_add(p.0).saturating_add(p.1))
        .collect();
    let n = checked_numel(OP, &out_shape)?;
    let mut out = filled_vec(OP, n, T::from_f64(0.0))?;
    if x.numel() > 0 {
        let src = x.values::<T>(OP)?;
        let r = shape.len();
        let os = contiguous_strides(&out_shape);
        let inner = if r == 0 { 1 } else { shape[r - 1] };
        let rows = x.numel() / inner;
        let mut idx = vec![0usize; r.saturating_sub(1)];
        for row in 0..rows {
            let mut rem = row;
            for d in (0..idx.len()).rev() {
                idx[d] = rem % shape[d];
                rem /= shape[d];
            }
            let mut o: usize = idx
                .iter()
                .enumerate()
                .map(|(d, &i)| (i + pads[d].0) * os[d] as usize)
                .sum();
            if r > 0 {
                o += pads[r - 1].0;
            }
            out[o..o + inner].copy_from_slice(&src[row * inner..(row + 1) * inner]);
        }
    }
    Tensor::from_vec(out, &out_shape)
}
