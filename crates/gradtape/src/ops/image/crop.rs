//! `tf.image.crop_and_resize`: boxes cut out of a batch of NHWC images and
//! resampled to one crop size, bilinear or nearest-neighbour, with
//! gradients with respect to the image and to the boxes.
//!
//! A box `[y1, x1, y2, x2]` is given in normalised coordinates (0 and 1
//! are the centres of the first and last pixel; boxes may reach outside
//! `[0, 1]` and may be flipped, `y1 > y2`). Crop row `i` of `ch` samples
//! image row `y1 (h - 1) + i (y2 - y1) (h - 1) / (ch - 1)`, or
//! `(y1 + y2) (h - 1) / 2` for `ch = 1`; columns alike. A sample outside
//! the image takes `extrapolation_value`.
//!
//! The op is a composition of public ops: the sample coordinates are
//! computed from the boxes with differentiable ops, split into an integer
//! pixel (`floor`, constant) and a fraction (differentiable), the four
//! neighbours are `gather`ed from the image flattened to `[b h w, c]`, and
//! interpolated. Differentiating the composition gives TensorFlow's two
//! gradient ops: `CropAndResizeGradImage` (the cotangent spread onto the
//! neighbours with the interpolation weights: the gather's transpose) and
//! `CropAndResizeGradBoxes` (the image's slope between the neighbours
//! times the coordinates' derivatives with respect to the box, with the
//! pixels held fixed); samples outside the image get no gradient. Second
//! derivatives follow (the interpolation is bilinear in the fractions, so
//! its mixed second derivative is the image's cross difference).
//!
//! The box indices are checked by an op of their own
//! ([`ImageOp::CropBoxOffsets`]), so that a traced graph checks them on
//! each run too; it gives the flat offset of each box's image.
//!
//! **As TensorFlow**: nearest-neighbour crops round coordinates half away
//! from zero and take their image gradient at that pixel, but their box
//! gradient is the *bilinear* one (TensorFlow's `CropAndResizeGradBoxes`
//! only knows bilinear sampling; the true derivative of a nearest crop
//! with respect to its box is zero almost everywhere). Here it is added as
//! a term that is exactly zero in value and carries the bilinear box
//! gradient, only when something records the op (a tape, a forward
//! accumulator, a trace).
//!
//! **Departures from TensorFlow**: TensorFlow takes `float32` boxes and
//! returns `float32`; here the boxes may be `f32` or `f64` and the result
//! (and the arithmetic) has the boxes' dtype, the image converted to it if
//! needed (integers and half types included), so an `f64` crop is exact to
//! `f64`. A sample coordinate that is NaN extrapolates rather than
//! reading an undefined pixel.

use crate::error::{Error, Result};
use crate::ops::desc::ImageOp;
use crate::ops::{bind_nondiff, unsupported, ResizeMethod};
use crate::tensor::layout::checked_numel;
use crate::tensor::{alloc, DType, Tensor};

/// `box_indices * pixels` as `i64` (the first flat pixel of each box's
/// image), after checking every index is in `0..batch`: the op behind
/// [`ImageOp::CropBoxOffsets`].
pub(crate) fn box_offsets(box_indices: &Tensor, batch: usize, pixels: usize) -> Result<Tensor> {
    const OP: &str = "crop_and_resize";
    if box_indices.rank() != 1 {
        return Err(Error::invalid(
            OP,
            format!("box_indices must have rank 1, got shape {:?}", box_indices.shape()),
        ));
    }
    let mut out = alloc::try_vec::<i64>(OP, box_indices.numel())?;
    let mut push = |k: usize, i: i64| {
        if i < 0 || i as u64 >= batch as u64 {
            return Err(Error::invalid(
                OP,
                format!("box_indices[{k}] = {i} is outside [0, {batch}) (the batch of the images)"),
            ));
        }
        out.push(i * pixels as i64);
        Ok(())
    };
    // (indices on a GPU are read on a host copy, as segment ids are, and
    // the offsets go back there)
    let host = crate::kernels::gpu::to_host(OP, box_indices)?;
    match host.dtype() {
        DType::I32 => {
            for (k, &i) in host.values::<i32>(OP)?.iter().enumerate() {
                push(k, i as i64)?;
            }
        }
        DType::I64 => {
            for (k, &i) in host.values::<i64>(OP)?.iter().enumerate() {
                push(k, i)?;
            }
        }
        d => return Err(unsupported(OP, d, "i32 or i64 box indices")),
    }
    let y = Tensor::from_vec(out, box_indices.shape())?;
    let y = crate::kernels::gpu::upload(OP, &y, box_indices.device())?;
    Ok(bind_nondiff(
        ImageOp::CropBoxOffsets { batch, pixels },
        &[box_indices],
        y,
    ))
}

/// The sample coordinates of one axis, `[n, crop]` (`[n, 1]` for a crop of
/// one), in pixels of an axis of `size`, from the box edges `lo`, `hi`
/// (`[n, 1]`), in TensorFlow's order of operations.
fn coords(lo: &Tensor, hi: &Tensor, size: usize, crop: usize) -> Result<Tensor> {
    let m = (size - 1) as f64;
    if crop > 1 {
        let scale = hi.sub(lo)?.mul_scalar(m)?.div_scalar((crop - 1) as f64)?;
        let steps = Tensor::arange(0.0, crop as f64, 1.0, lo.dtype())?
            .reshape(&[1, crop])?
            .to(lo.device())?;
        lo.mul_scalar(m)?.add(&steps.mul(&scale)?)
    } else {
        lo.add(hi)?.mul_scalar(0.5)?.mul_scalar(m)
    }
}

/// One axis of the sampling: coordinates inside the image, and the pixels
/// and fractions read there.
struct Axis {
    /// `0 <= coordinate <= size - 1` (false for NaN)
    inside: Tensor,
    /// the pixel below (`floor`) and above (`ceil`), `i64`, 0 outside
    lo: Tensor,
    hi: Tensor,
    /// the coordinate's distance from `lo` (0 outside), differentiable
    frac: Tensor,
    /// the nearest pixel (halves away from zero, TensorFlow's `roundf`)
    near: Tensor,
}

fn axis(at: &Tensor, size: usize) -> Result<Axis> {
    let zero = at.scalar_like(0.0)?;
    let inside = at
        .ge(&zero)?
        .logical_and(&at.le(&at.scalar_like((size - 1) as f64)?)?)?;
    let fixed = at.stop_gradient();
    let floor = fixed.floor()?;
    let pixel = |t: &Tensor| Tensor::where_(&inside, t, &zero)?.cast(DType::I64);
    let up = fixed.sub(&floor)?.ge(&at.scalar_like(0.5)?)?.cast(at.dtype())?;
    Ok(Axis {
        lo: pixel(&floor)?,
        hi: pixel(&fixed.ceil()?)?,
        near: pixel(&floor.add(&up)?)?,
        frac: Tensor::where_(&inside, &at.sub(&floor)?, &zero)?,
        inside,
    })
}

/// Flat pixel indices `[n, ch, cw]` of rows `rows` (`[n, ch]`, already
/// offset to their image and scaled by the width) and columns `cols`
/// (`[n, cw]`).
fn flat(rows: &Tensor, cols: &Tensor) -> Result<Tensor> {
    let (n, ch, cw) = (rows.shape()[0], rows.shape()[1], cols.shape()[1]);
    rows.reshape(&[n, ch, 1])?.add(&cols.reshape(&[n, 1, cw])?)
}

/// Bilinear samples `[n, ch, cw, c]` of `img` (`[b h w, c]`) at the
/// sampling of `y` (rows already offset) and `x`, TensorFlow's order of
/// operations.
fn bilinear(img: &Tensor, top: &Tensor, bottom: &Tensor, y: &Axis, x: &Axis) -> Result<Tensor> {
    let at = |r: &Tensor, c: &Tensor| img.gather(&flat(r, c)?, 0);
    let (tl, tr) = (at(top, &x.lo)?, at(top, &x.hi)?);
    let (bl, br) = (at(bottom, &x.lo)?, at(bottom, &x.hi)?);
    let (n, ch, cw) = (tl.shape()[0], tl.shape()[1], tl.shape()[2]);
    let xf = x.frac.reshape(&[n, 1, cw, 1])?;
    let yf = y.frac.reshape(&[n, ch, 1, 1])?;
    let t = tl.add(&tr.sub(&tl)?.mul(&xf)?)?;
    let b = bl.add(&br.sub(&bl)?.mul(&xf)?)?;
    t.add(&b.sub(&t)?.mul(&yf)?)
}

/// Checks the operands' shapes and dtypes: `(b, h, w, c, n)`.
fn check(image: &Tensor, boxes: &Tensor, box_indices: &Tensor, method: ResizeMethod) -> Result<[usize; 5]> {
    const OP: &str = "crop_and_resize";
    let shapes = || {
        format!(
            "(image {:?}, boxes {:?}, box_indices {:?})",
            image.shape(),
            boxes.shape(),
            box_indices.shape()
        )
    };
    if !matches!(method, ResizeMethod::Bilinear | ResizeMethod::Nearest) {
        return Err(Error::invalid(
            OP,
            format!("the method must be Bilinear or Nearest, got {method:?}"),
        ));
    }
    let &[b, h, w, c] = image.shape() else {
        return Err(Error::invalid(
            OP,
            format!("the image must be NHWC of rank 4 {}", shapes()),
        ));
    };
    let &[n, 4] = boxes.shape() else {
        return Err(Error::invalid(OP, format!("boxes must have shape [n, 4] {}", shapes())));
    };
    if box_indices.shape() != [n] {
        return Err(Error::invalid(
            OP,
            format!("box_indices must have shape [{n}], one per box {}", shapes()),
        ));
    }
    if h == 0 || w == 0 {
        return Err(Error::invalid(
            OP,
            format!("the image height and width must be positive {}", shapes()),
        ));
    }
    if !matches!(boxes.dtype(), DType::F32 | DType::F64) {
        return Err(unsupported(OP, boxes.dtype(), "f32 or f64 boxes"));
    }
    if !(image.dtype().is_float() || image.dtype().is_int()) || image.dtype().is_complex() {
        return Err(unsupported(OP, image.dtype(), "a real image (float or integer)"));
    }
    if !box_indices.dtype().is_int() {
        return Err(unsupported(OP, box_indices.dtype(), "i32 or i64 box indices"));
    }
    Ok([b, h, w, c, n])
}

impl Tensor {
    /// Crops boxes out of NHWC images and resizes each to `crop_size`:
    /// TensorFlow's `tf.image.crop_and_resize(image, boxes, box_indices,
    /// crop_size, method, extrapolation_value)`. `self` is `[b, h, w, c]`
    /// (`h`, `w` non-zero); `boxes` is `[n, 4]` (`f32` or `f64`), each row
    /// `[y1, x1, y2, x2]` in normalised coordinates (0 and 1 the centres of
    /// the first and last pixel; boxes may extend outside the image or be
    /// flipped); `box_indices` (`[n]`, `i32` or `i64`) picks each box's
    /// image, in `0..b`; `crop_size = [ch, cw]` is positive. The result is
    /// `[n, ch, cw, c]` in the boxes' dtype (the image converted to it).
    /// Crop row `i` samples image row `y1 (h - 1) + i (y2 - y1) (h - 1) /
    /// (ch - 1)` (the box's middle when `ch = 1`), columns alike; samples
    /// outside the image are `extrapolation_value`. `method` is
    /// [`ResizeMethod::Bilinear`] or [`ResizeMethod::Nearest`] (halves
    /// rounded away from zero).
    ///
    /// Differentiable with respect to the image and the boxes (not the
    /// indices), to any order, as TensorFlow's `CropAndResizeGradImage`
    /// and `CropAndResizeGradBoxes`; like TensorFlow, a nearest crop's box
    /// gradient is the bilinear one (see `ops/image/crop.rs`).
    ///
    /// ```
    /// use gradtape::{GradientTape, ResizeMethod, Tensor};
    /// // one 2x3 image, one channel
    /// let img = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 3.0, 4.0, 5.0], &[1, 2, 3, 1])?;
    /// // the whole image, sampled at 2x2: its four corners
    /// let boxes = Tensor::from_vec(vec![0.0f64, 0.0, 1.0, 1.0], &[1, 4])?;
    /// let idx = Tensor::vector(&[0i32]);
    /// let y = img.crop_and_resize(&boxes, &idx, [2, 2], ResizeMethod::Bilinear, 0.0)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![0.0, 2.0, 3.0, 5.0]);
    /// // an inner box: the image is 3 row + column, and so is the crop
    /// let inner = Tensor::from_vec(vec![0.25f64, 0.25, 0.75, 0.75], &[1, 4])?;
    /// let tape = GradientTape::new();
    /// let s = tape.record(|| {
    ///     tape.watch(&inner);
    ///     let y = img.crop_and_resize(&inner, &idx, [2, 2], ResizeMethod::Bilinear, 0.0)?;
    ///     assert_eq!(y.to_vec::<f64>()?, vec![1.25, 2.25, 2.75, 3.75]);
    ///     y.sum_all()
    /// })?;
    /// // the sum is 6 (y1 + y2) + 4 (x1 + x2)
    /// let db = tape.gradient(&s, &inner)?.unwrap();
    /// assert_eq!(db.to_vec::<f64>()?, vec![6.0, 4.0, 6.0, 4.0]);
    /// // a box index outside the batch is an error
    /// let bad = Tensor::vector(&[1i32]);
    /// assert!(img.crop_and_resize(&boxes, &bad, [2, 2], ResizeMethod::Bilinear, 0.0).is_err());
    /// # Ok::<(), gradtape::Error>(())
    /// ```
    pub fn crop_and_resize(
        &self,
        boxes: &Tensor,
        box_indices: &Tensor,
        crop_size: [i64; 2],
        method: ResizeMethod,
        extrapolation_value: f64,
    ) -> Result<Tensor> {
        const OP: &str = "crop_and_resize";
        let [b, h, w, c, n] = check(self, boxes, box_indices, method)?;
        if crop_size.iter().any(|&s| s < 1) {
            return Err(Error::invalid(
                OP,
                format!(
                    "crop_size must be positive, got {crop_size:?} (image {:?}, boxes {:?})",
                    self.shape(),
                    boxes.shape()
                ),
            ));
        }
        let [ch, cw] = crop_size.map(|s| usize::try_from(s).unwrap_or(usize::MAX));
        let out = [n, ch, cw, c];
        let numel = checked_numel(OP, &out)?;
        let pixels = h * w;
        let offsets = box_offsets(box_indices, b, pixels)?;
        let dt = boxes.dtype();
        let image = if self.dtype() == dt {
            self.clone()
        } else {
            self.cast(dt)?
        };
        if numel == 0 {
            // (no boxes or no channels: no sampling, however large the crop)
            return image.sum(&[0, 1, 2], true)?.broadcast_to(&out);
        }
        let edge = |k: usize| boxes.narrow(1, k, 1);
        let y = axis(&coords(&edge(0)?, &edge(2)?, h, ch)?, h)?;
        let x = axis(&coords(&edge(1)?, &edge(3)?, w, cw)?, w)?;
        // rows offset to their image: offset + row * w, [n, ch]
        let base = offsets.reshape(&[n, 1])?;
        let rows = |r: &Tensor| base.add(&r.mul_scalar(w as f64)?);
        let img = image.reshape(&[b * pixels, c])?;
        let sampled = match method {
            ResizeMethod::Bilinear => bilinear(&img, &rows(&y.lo)?, &rows(&y.hi)?, &y, &x)?,
            _ => {
                let v = img.gather(&flat(&rows(&y.near)?, &x.near)?, 0)?;
                if crate::dispatch::listening() {
                    // TensorFlow's box gradient (the bilinear one) on a
                    // term that is +0 in value (NaN-free; subtracted, so
                    // that a -0 pixel stays -0)
                    let fixed = img.stop_gradient();
                    let lin = bilinear(&fixed, &rows(&y.lo)?, &rows(&y.hi)?, &y, &x)?;
                    let held = lin.stop_gradient();
                    let zero = held.scalar_like(0.0)?;
                    v.sub(&Tensor::where_(&held.is_finite()?, &held.sub(&lin)?, &zero)?)?
                } else {
                    v
                }
            }
        };
        let inside = y
            .inside
            .reshape(&[n, ch, 1, 1])?
            .logical_and(&x.inside.reshape(&[n, 1, cw, 1])?)?;
        Tensor::where_(&inside, &sampled, &sampled.scalar_like(extrapolation_value)?)
    }
}
