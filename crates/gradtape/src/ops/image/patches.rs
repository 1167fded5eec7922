//! `tf.image.extract_patches`: every (strided, dilated) window of NHWC
//! images laid out along the channel axis.
//!
//! The op moves data without arithmetic: the image is zero-padded
//! (`Padding::Same`) and flattened to `[n, h * w, c]`, and one `gather`
//! along the pixel axis, with a table of pixel indices that depends on the
//! shapes alone, picks every window's pixels. The gradient is that
//! gather's transpose (each cotangent added back onto the pixel it was
//! read from, overlapping windows summing), which is what TensorFlow's
//! `ExtractImagePatches` gradient computes; being linear it has gradients
//! of every order, and in a trace the table is a constant.

use crate::error::{Error, Result};
use crate::kernels::cpu::conv::{out_dim, positive};
use crate::ops::nn::Padding;
use crate::tensor::layout::checked_numel;
use crate::tensor::{alloc, Tensor};

impl Tensor {
    /// The patches of NHWC images `[n, h, w, c]`: TensorFlow's
    /// `tf.image.extract_patches(images, sizes=[1, kh, kw, 1],
    /// strides=[1, sh, sw, 1], rates=[1, rh, rw, 1], padding)`, here
    /// `sizes = [kh, kw]`, `strides = [sh, sw]`, `rates = [rh, rw]` (each
    /// `>= 1`). The result is `[n, oh, ow, kh * kw * c]`: output pixel
    /// `(i, j)` holds the window whose top-left input pixel is
    /// `(i sh - top, j sw - left)`, its pixels `rates` apart, in row-major
    /// order `(row, column, channel)`. The output size and the padding are
    /// those of a convolution with the dilated window `e = (k - 1) r + 1`:
    /// `Padding::Valid` gives `(h - e) / sh + 1` rows (none when the window
    /// overhangs the image by less than a stride, as TensorFlow; an error
    /// when by more), `Padding::Same` gives `ceil(h / sh)` rows and reads
    /// zeros outside the image (the smaller half of the padding before).
    ///
    /// Any dtype; differentiable (float dtypes) to any order: the gradient
    /// adds each cotangent back onto the pixel it was read from.
    ///
    /// ```
    /// use gradtape::{Padding, Tensor};
    /// // one 3x3 image 0..9, 2x2 windows with stride 1
    /// let x = Tensor::from_vec((0..9).map(|v| v as f64).collect(), &[1, 3, 3, 1])?;
    /// let p = x.extract_patches([2, 2], [1, 1], [1, 1], Padding::Valid)?;
    /// assert_eq!(p.shape(), &[1, 2, 2, 4]);
    /// assert_eq!(p.to_vec::<f64>()?[..8], [0.0, 1.0, 3.0, 4.0, 1.0, 2.0, 4.0, 5.0]);
    /// // dilated by 2, strided by 2, padded by one pixel before: the first
    /// // window reads pixels (-1, -1), (-1, 1), (1, -1) and (1, 1)
    /// let q = x.extract_patches([2, 2], [2, 2], [2, 2], Padding::Same)?;
    /// assert_eq!(q.shape(), &[1, 2, 2, 4]);
    /// assert_eq!(q.to_vec::<f64>()?[..8], [0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 4.0, 0.0]);
    /// assert!(x.extract_patches([0, 2], [1, 1], [1, 1], Padding::Valid).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn extract_patches(
        &self,
        sizes: [i64; 2],
        strides: [i64; 2],
        rates: [i64; 2],
        padding: Padding,
    ) -> Result<Tensor> {
        const OP: &str = "extract_patches";
        let &[n, h, w, c] = self.shape() else {
            return Err(Error::invalid(
                OP,
                format!("needs NHWC images of rank 4, got shape {:?}", self.shape()),
            ));
        };
        let k = positive(OP, "sizes", sizes)?;
        let s = positive(OP, "strides", strides)?;
        let r = positive(OP, "rates", rates)?;
        let with_shape = |e: Error| match e {
            Error::InvalidArgument { msg, .. } => Error::invalid(
                OP,
                format!("{msg} (images of shape {:?}, sizes {sizes:?})", self.shape()),
            ),
            e => e,
        };
        // VALID as TensorFlow's `ExtractImagePatches`: `(in - window) / s + 1`
        // rows, none when the window overhangs by less than a stride, an
        // error when by more
        let valid = |what: &str, input: usize, k: usize, s: usize, r: usize| {
            let eff = (k - 1).saturating_mul(r).saturating_add(1);
            match input.checked_sub(eff) {
                Some(v) => Ok((v / s + 1, 0)),
                None if eff - input <= s => Ok((0, 0)),
                None => Err(Error::invalid(
                    OP,
                    format!(
                        "VALID padding: the {what} {input} is smaller than the dilated window {eff} by more \
                         than the stride {s} (images of shape {:?}, sizes {sizes:?}, rates {rates:?})",
                        self.shape()
                    ),
                )),
            }
        };
        let ((oh, top), (ow, left)) = match padding {
            Padding::Valid => (
                valid("height", h, k[0], s[0], r[0])?,
                valid("width", w, k[1], s[1], r[1])?,
            ),
            Padding::Same => (
                out_dim(OP, "height", h, k[0], s[0], r[0], padding).map_err(with_shape)?,
                out_dim(OP, "width", w, k[1], s[1], r[1], padding).map_err(with_shape)?,
            ),
        };
        let window = checked_numel(OP, &[k[0], k[1]])?;
        let depth = window
            .checked_mul(c)
            .ok_or_else(|| Error::invalid(OP, format!("the patch depth {k:?} x {c} overflows")))?;
        let out = [n, oh, ow, depth];
        if checked_numel(OP, &out)? == 0 {
            // (no tables for an empty result, however large its other dims)
            let none = Tensor::from_vec(Vec::<i64>::new(), &[0])?.to(self.device())?;
            return self.reshape(&[n, h * w, c])?.gather(&none, 1)?.reshape(&out);
        }
        // the padded extent: what the last window reaches, at least the image
        let reach = |o: usize, s: usize, k: usize, r: usize| {
            ((o - 1).saturating_mul(s))
                .saturating_add((k - 1).saturating_mul(r))
                .saturating_add(1)
        };
        let hp = reach(oh, s[0], k[0], r[0]).max(h + top);
        let wp = reach(ow, s[1], k[1], r[1]).max(w + left);
        let x = if hp > h || wp > w {
            self.pad(&[(0, 0), (top, hp - h - top), (left, wp - w - left), (0, 0)])?
        } else {
            self.clone()
        };
        let mut idx = alloc::try_vec::<i64>(OP, oh * ow * window)?;
        for i in 0..oh {
            for j in 0..ow {
                for a in 0..k[0] {
                    for b in 0..k[1] {
                        idx.push(((i * s[0] + a * r[0]) * wp + j * s[1] + b * r[1]) as i64);
                    }
                }
            }
        }
        // (a constant of the shapes, made where the image is)
        let idx = Tensor::from_vec(idx, &[oh, ow, window])?.to(self.device())?;
        x.reshape(&[n, hp * wp, c])?.gather(&idx, 1)?.reshape(&out)
    }
}
