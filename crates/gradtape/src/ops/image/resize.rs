//! Image resizing: bilinear and nearest-neighbour, NHWC, TensorFlow's
//! sampling conventions, with gradients to any order (bicubic and area
//! resizing, reached through [`Tensor::resize_images`], are in
//! `resample.rs`).
//!
//! [`Tensor::resize_images`] is TensorFlow 2's `tf.image.resize` (half-pixel
//! centers, no antialiasing) for batches `[n, h, w, c]` and single images
//! `[h, w, c]`; [`Tensor::resize_bilinear`] and
//! [`Tensor::resize_nearest_neighbor`] are the raw ops with TensorFlow 1's
//! `align_corners` / `half_pixel_centers` flags.
//!
//! Both resizes are linear maps of the image. A gradient is the transpose of
//! that map ([`Tensor::resize_bilinear_grad`],
//! [`Tensor::resize_nearest_neighbor_grad`]: the cotangent spread back onto
//! the pixels it was read from, with the same weights), itself a linear op
//! whose gradient is the resize again, so second and higher derivatives
//! work. Forward mode applies the resize to the tangent.
//!
//! **Departure from TensorFlow**: `tf.image.resize` returns `float32` for
//! bilinear sampling whatever the input's dtype; here `f64` images stay
//! `f64` (as in JAX's `jax.image.resize`), and integer images give `f32` as
//! in TensorFlow. Likewise `f16`/`bf16` images stay in their dtype: they are
//! interpolated in `f32` and rounded once, so the result is TensorFlow's
//! `float32` result rounded to the half type. Nearest-neighbour keeps the
//! dtype (`f32`, `f64`, `f16`, `bf16`, `i32`, `i64`), as TensorFlow does.

use crate::dispatch::vjp;
use crate::error::{Error, Result};
use crate::kernels::cpu::resize::{self as k, Coords, Dims};
use crate::ops::desc::{ImageOp, ResizeAttrs};
use crate::ops::nn::via_f32;
use crate::ops::{bind_jvp, grads, only, unsupported};
use crate::tensor::dtype::with_types;
use crate::tensor::layout::checked_numel;
use crate::tensor::{with_num_dtype, DType, Element, Tensor};

/// How [`Tensor::resize_images`] samples the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeMethod {
    /// Linear interpolation between the four nearest pixels
    /// (`tf.image.ResizeMethod.BILINEAR`).
    Bilinear,
    /// The nearest pixel (`tf.image.ResizeMethod.NEAREST_NEIGHBOR`).
    Nearest,
    /// Keys' cubic convolution (`a = -0.5`) over the 4x4 nearest pixels,
    /// weights renormalised at the borders (`tf.image.ResizeMethod.BICUBIC`
    /// without antialiasing; see `resample.rs` for TensorFlow's details).
    Bicubic,
    /// The mean of the input pixels an output pixel covers, each weighed by
    /// the area it covers (`tf.image.ResizeMethod.AREA`).
    Area,
}

/// Checks an NHWC shape `x`, a target size and the flags of `op`, and gives
/// the resize's dimensions. `grad` means `x` is a resized image and `size`
/// the original one (a gradient op).
pub(super) fn dims(op: &'static str, x: &[usize], size: [usize; 2], a: &ResizeAttrs, grad: bool) -> Result<Dims> {
    let &[n, h, w, c] = x else {
        return Err(Error::invalid(
            op,
            format!("needs an NHWC tensor of rank 4, got shape {x:?}"),
        ));
    };
    if a.align_corners && a.half_pixel_centers {
        return Err(Error::invalid(
            op,
            "align_corners and half_pixel_centers cannot both be true",
        ));
    }
    let what = if grad { "original size" } else { "output size" };
    if size.contains(&0) {
        return Err(Error::invalid(
            op,
            format!("the {what} {size:?} must be positive (input of shape {x:?})"),
        ));
    }
    if h == 0 || w == 0 {
        return Err(Error::invalid(
            op,
            format!("the image of shape {x:?} must have a non-zero height and width"),
        ));
    }
    if c == 0 {
        return Err(Error::invalid(
            op,
            format!("the image of shape {x:?} must have at least one channel"),
        ));
    }
    let out = [n, size[0], size[1], c];
    checked_numel(op, &out)?;
    Ok(if grad {
        Dims {
            n,
            ih: size[0],
            iw: size[1],
            oh: h,
            ow: w,
            c,
        }
    } else {
        Dims {
            n,
            ih: h,
            iw: w,
            oh: size[0],
            ow: size[1],
            c,
        }
    })
}

fn attrs(size: [usize; 2], align_corners: bool, half_pixel_centers: bool) -> ResizeAttrs {
    ResizeAttrs {
        size,
        align_corners,
        half_pixel_centers,
    }
}

fn coords(a: &ResizeAttrs) -> Coords {
    Coords {
        align_corners: a.align_corners,
        half_pixel_centers: a.half_pixel_centers,
    }
}

/// The kernels that weigh and sum pixels (nearest-neighbour copying needs
/// no `f32` pass: it is exact in every dtype).
#[derive(Clone, Copy)]
enum Kernel {
    Bilinear,
    BilinearGrad,
    NearestGrad,
}

/// `kernel` on `x`'s values (`f32`/`f64`; half types weighed and summed in
/// `f32` and rounded once), shaped for `d`.
fn linear_value(op: &'static str, x: &Tensor, kernel: Kernel, d: Dims, c: Coords) -> Result<Tensor> {
    // on a GPU: the same arithmetic, the transposes gathering in the CPU's
    // order (`kernels::cuda::resize`)
    if x.dtype().is_float()
        && let Some(r) = crate::dispatch::device::offload(
            op,
            &[x],
            |_| {
                use crate::kernels::cuda::ResizeWhich as W;
                let which = match kernel {
                    Kernel::Bilinear => W::Bilinear,
                    Kernel::BilinearGrad => W::BilinearGrad,
                    Kernel::NearestGrad => W::NearestGrad,
                };
                crate::kernels::cuda::resize(op, x, which, d, c)
            },
            |h| linear_value(op, &h[0], kernel, d, c),
        )
    {
        return r;
    }
    if x.dtype().is_half() {
        return via_f32(&[x], |w| linear_value(op, &w[0], kernel, d, c));
    }
    with_types!(x.dtype(), T => {
        let v = x.values::<T>(op)?;
        let (y, shape) = match kernel {
            Kernel::Bilinear => (k::bilinear::<T>(op, &v, d, c)?, [d.n, d.oh, d.ow, d.c]),
            Kernel::BilinearGrad => (k::bilinear_grad::<T>(op, &v, d, c)?, [d.n, d.ih, d.iw, d.c]),
            Kernel::NearestGrad => (k::nearest_grad::<T>(op, &v, d, c)?, [d.n, d.ih, d.iw, d.c]),
        };
        Ok(Tensor::from_storage(T::into_storage(y), &shape))
    }, [F32: f32, F64: f64], _ => Err(unsupported(op, x.dtype(), "f32, f64, f16 or bf16")))
}

impl Tensor {
    /// Resizes images to `size = [height, width]`: TensorFlow 2's
    /// `tf.image.resize(images, size, method)` with its defaults
    /// (half-pixel centers, no antialiasing, aspect ratio not preserved).
    /// `self` is a batch `[n, h, w, c]` or one image `[h, w, c]`, with
    /// non-zero height, width and channels; `size` must be positive.
    ///
    /// Bilinear, bicubic and area sampling take `f32`, `f64`, `f16`, `bf16`
    /// (kept; half types interpolated in `f32`) or integers (giving `f32`,
    /// as TensorFlow); nearest-neighbour takes those floats, `i32` and `i64`
    /// and keeps the dtype. Differentiable (float dtypes) to any order.
    /// Bicubic is TensorFlow's `ResizeBicubic` with half-pixel centers
    /// (Keys' kernel, `a = -0.5`, its fractional offsets rounded to 1/1024
    /// as TensorFlow's table does); area is `ResizeArea` (each output pixel
    /// the mean of the input area it covers), which TensorFlow cannot
    /// differentiate and this crate can.
    ///
    /// ```
    /// use gradtape::{ResizeMethod, Tensor};
    /// let x = Tensor::from_vec(vec![0.0f32, 4.0], &[1, 2, 1])?; // one 1x2 image
    /// let y = x.resize_images([1, 4], ResizeMethod::Bilinear)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 1.0, 3.0, 4.0]);
    /// let z = x.resize_images([1, 3], ResizeMethod::Nearest)?;
    /// assert_eq!(z.to_vec::<f32>()?, vec![0.0, 4.0, 4.0]);
    /// // area: each output pixel the mean of the two input pixels it covers
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0, 5.0, 7.0], &[1, 4, 1])?;
    /// let a = x.resize_images([1, 2], ResizeMethod::Area)?;
    /// assert_eq!(a.to_vec::<f64>()?, vec![2.0, 6.0]);
    /// // bicubic reproduces a constant image
    /// let c = Tensor::full(&[2, 3, 1], 2.5, gradtape::DType::F64).resize_images([5, 4], ResizeMethod::Bicubic)?;
    /// assert!(c.to_vec::<f64>()?.iter().all(|v| (v - 2.5).abs() < 1e-12));
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn resize_images(&self, size: [usize; 2], method: ResizeMethod) -> Result<Tensor> {
        const OP: &str = "resize_images";
        let one = match self.rank() {
            3 => true,
            4 => false,
            _ => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "needs images [n, h, w, c] or one image [h, w, c], got shape {:?}",
                        self.shape()
                    ),
                ))
            }
        };
        let x = if one { self.expand_dims(0)? } else { self.clone() };
        let y = match method {
            ResizeMethod::Bilinear => {
                let x = match x.dtype() {
                    DType::I32 | DType::I64 => x.cast(DType::F32)?,
                    _ => x,
                };
                x.resize_bilinear(size, false, true)
            }
            ResizeMethod::Nearest => x.resize_nearest_neighbor(size, false, true),
            ResizeMethod::Bicubic | ResizeMethod::Area => super::resample::resize_cubic_or_area(&x, size, method),
        }
        .map_err(|e| e.for_op(OP))?;
        if one {
            y.squeeze(&[0])
        } else {
            Ok(y)
        }
    }

    /// Bilinear resize of NHWC images `[n, h, w, c]` (a float dtype) to
    /// `[n, size[0], size[1], c]`: TensorFlow's `ResizeBilinear` op. With
    /// `half_pixel_centers` (TensorFlow 2) output pixel `i` samples input
    /// coordinate `(i + 0.5) * in / out - 0.5`; with `align_corners` it
    /// samples `i * (in - 1) / (out - 1)`; with neither (TensorFlow 1's
    /// default) `i * in / out`. The two flags cannot both be set.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f64, 3.0], &[1, 1, 2, 1])?;
    /// let y = x.resize_bilinear([1, 3], true, false)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![0.0, 1.5, 3.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn resize_bilinear(&self, size: [usize; 2], align_corners: bool, half_pixel_centers: bool) -> Result<Tensor> {
        const OP: &str = "resize_bilinear";
        let a = attrs(size, align_corners, half_pixel_centers);
        let d = dims(OP, self.shape(), size, &a, false)?;
        let y = linear_value(OP, self, Kernel::Bilinear, d, coords(&a))?;
        let orig = [d.ih, d.iw];
        Ok(bind_jvp(
            ImageOp::ResizeBilinear(a),
            &[self],
            y,
            move |_| {
                vjp(move |g, _| {
                    Ok(grads![Some(g[0].resize_bilinear_grad(
                        orig,
                        align_corners,
                        half_pixel_centers
                    )?)])
                })
            },
            move |t, _| only(t)?.resize_bilinear(size, align_corners, half_pixel_centers),
        ))
    }

    /// The gradient of [`resize_bilinear`](Self::resize_bilinear): `self` is
    /// the cotangent of the resized images `[n, h', w', c]` and the result
    /// has the original size `[n, original_size[0], original_size[1], c]`,
    /// each element of `self` spread over the (up to four) pixels it was
    /// interpolated from, with the same weights (TensorFlow's
    /// `ResizeBilinearGrad`). Linear; its gradient is `resize_bilinear`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let g = Tensor::from_vec(vec![1.0f64, 1.0, 1.0], &[1, 1, 3, 1])?;
    /// let dx = g.resize_bilinear_grad([1, 2], true, false)?;
    /// assert_eq!(dx.to_vec::<f64>()?, vec![1.5, 1.5]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn resize_bilinear_grad(
        &self,
        original_size: [usize; 2],
        align_corners: bool,
        half_pixel_centers: bool,
    ) -> Result<Tensor> {
        const OP: &str = "resize_bilinear_grad";
        let a = attrs(original_size, align_corners, half_pixel_centers);
        let d = dims(OP, self.shape(), original_size, &a, true)?;
        let y = linear_value(OP, self, Kernel::BilinearGrad, d, coords(&a))?;
        let resized = [d.oh, d.ow];
        Ok(bind_jvp(
            ImageOp::ResizeBilinearGrad(a),
            &[self],
            y,
            move |_| {
                vjp(move |g, _| {
                    Ok(grads![Some(g[0].resize_bilinear(
                        resized,
                        align_corners,
                        half_pixel_centers
                    )?)])
                })
            },
            move |t, _| only(t)?.resize_bilinear_grad(original_size, align_corners, half_pixel_centers),
        ))
    }

    /// Nearest-neighbour resize of NHWC images `[n, h, w, c]` (a float
    /// dtype, `i32` or `i64`; the dtype is kept) to `[n, size[0], size[1], c]`:
    /// TensorFlow's `ResizeNearestNeighbor`. Output pixel `i` copies input
    /// pixel `floor((i + 0.5) * in / out)` with `half_pixel_centers`,
    /// `round(i * (in - 1) / (out - 1))` with `align_corners`,
    /// `floor(i * in / out)` with neither (coordinates in `f32`, as
    /// TensorFlow computes them). Float images are differentiable: the
    /// gradient adds each cotangent to the pixel it was copied from.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3], &[1, 1, 3, 1])?;
    /// let y = x.resize_nearest_neighbor([1, 2], false, true)?;
    /// assert_eq!(y.to_vec::<i32>()?, vec![1, 3]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn resize_nearest_neighbor(
        &self,
        size: [usize; 2],
        align_corners: bool,
        half_pixel_centers: bool,
    ) -> Result<Tensor> {
        const OP: &str = "resize_nearest_neighbor";
        let a = attrs(size, align_corners, half_pixel_centers);
        let d = dims(OP, self.shape(), size, &a, false)?;
        let host = |x: &Tensor| -> Result<Tensor> {
            with_num_dtype!(x.dtype(), T => Ok(Tensor::from_storage(
                T::into_storage(k::nearest::<T>(OP, &x.values::<T>(OP)?, d, coords(&a))?),
                &[d.n, d.oh, d.ow, d.c],
            )), _ => Err(unsupported(OP, x.dtype(), "f32, f64, f16, bf16, i32 or i64")))
        };
        let gpu = if self.dtype().is_float() || self.dtype().is_int() {
            crate::dispatch::device::offload(
                OP,
                &[self],
                |_| crate::kernels::cuda::resize(OP, self, crate::kernels::cuda::ResizeWhich::Nearest, d, coords(&a)),
                |h| host(&h[0]),
            )
        } else {
            None
        };
        let y = gpu.unwrap_or_else(|| host(self))?;
        if !self.dtype().is_float() {
            return Ok(crate::ops::bind_nondiff(ImageOp::ResizeNearestNeighbor(a), &[self], y));
        }
        let orig = [d.ih, d.iw];
        Ok(bind_jvp(
            ImageOp::ResizeNearestNeighbor(a),
            &[self],
            y,
            move |_| {
                vjp(move |g, _| {
                    Ok(grads![Some(g[0].resize_nearest_neighbor_grad(
                        orig,
                        align_corners,
                        half_pixel_centers
                    )?)])
                })
            },
            move |t, _| only(t)?.resize_nearest_neighbor(size, align_corners, half_pixel_centers),
        ))
    }

    /// The gradient of [`resize_nearest_neighbor`](Self::resize_nearest_neighbor):
    /// `self` is the cotangent of the resized images `[n, h', w', c]` (a
    /// float dtype), and each of its elements is added to the pixel of the
    /// original size `[n, original_size[0], original_size[1], c]` it was
    /// copied from (TensorFlow's `ResizeNearestNeighborGrad`). Linear; its
    /// gradient is `resize_nearest_neighbor`.
    ///
    /// ```
    /// use gradtape::Tensor;
    /// let g = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 1, 3, 1])?;
    /// let dx = g.resize_nearest_neighbor_grad([1, 2], false, true)?;
    /// assert_eq!(dx.to_vec::<f32>()?, vec![1.0, 5.0]);
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn resize_nearest_neighbor_grad(
        &self,
        original_size: [usize; 2],
        align_corners: bool,
        half_pixel_centers: bool,
    ) -> Result<Tensor> {
        const OP: &str = "resize_nearest_neighbor_grad";
        let a = attrs(original_size, align_corners, half_pixel_centers);
        let d = dims(OP, self.shape(), original_size, &a, true)?;
        let y = linear_value(OP, self, Kernel::NearestGrad, d, coords(&a))?;
        let resized = [d.oh, d.ow];
        Ok(bind_jvp(
            ImageOp::ResizeNearestNeighborGrad(a),
            &[self],
            y,
            move |_| {
                vjp(move |g, _| {
                    Ok(grads![Some(g[0].resize_nearest_neighbor(
                        resized,
                        align_corners,
                        half_pixel_centers
                    )?)])
                })
            },
            move |t, _| only(t)?.resize_nearest_neighbor_grad(original_size, align_corners, half_pixel_centers),
        ))
    }
}
