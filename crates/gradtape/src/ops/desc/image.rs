//! Descriptors of the image ops: bilinear and nearest-neighbour resizing
//! and their gradients (each gradient is itself a differentiable op, whose
//! gradient is the resize again), and the check of `crop_and_resize`'s box
//! indices.
//!
//! `resize_images` (TensorFlow 2's `tf.image.resize`, its bicubic and area
//! methods included), the rank-3 forms, `crop_and_resize` and
//! `extract_patches` are compositions of these, gathers and elementwise
//! ops and have no descriptor of their own.

use std::fmt;

use super::Outputs;
use crate::error::Result;
use crate::tensor::Tensor;

/// The attributes of a resize or of its gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResizeAttrs {
    /// `[height, width]`: the output size of a resize, the original input
    /// size of a resize's gradient.
    pub size: [usize; 2],
    /// Corner pixels of input and output aligned (TensorFlow 1's default
    /// sampling is neither this nor half-pixel centers).
    pub align_corners: bool,
    /// Pixels sampled at their centers (TensorFlow 2's sampling).
    pub half_pixel_centers: bool,
}

/// An image op. The variants are named after TensorFlow's ops (later image
/// ops, such as crops, will not share the prefix).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ImageOp {
    /// `resize_bilinear(images)`.
    ResizeBilinear(ResizeAttrs),
    /// `resize_bilinear_grad(grads)`, back to the original size.
    ResizeBilinearGrad(ResizeAttrs),
    /// `resize_nearest_neighbor(images)`.
    ResizeNearestNeighbor(ResizeAttrs),
    /// `resize_nearest_neighbor_grad(grads)`, back to the original size.
    ResizeNearestNeighborGrad(ResizeAttrs),
    /// `crop_and_resize`'s box indices checked to lie in `0..batch` and
    /// turned into the flat offsets `index * pixels` (`i64`) of their
    /// images; not differentiable.
    CropBoxOffsets {
        /// The images' batch size.
        batch: usize,
        /// Pixels per image (`h * w`).
        pixels: usize,
    },
}

impl ImageOp {
    /// The op's name, as recorded on tapes.
    pub fn name(&self) -> &'static str {
        match self {
            ImageOp::ResizeBilinear(_) => "ResizeBilinear",
            ImageOp::ResizeBilinearGrad(_) => "ResizeBilinearGrad",
            ImageOp::ResizeNearestNeighbor(_) => "ResizeNearestNeighbor",
            ImageOp::ResizeNearestNeighborGrad(_) => "ResizeNearestNeighborGrad",
            ImageOp::CropBoxOffsets { .. } => "CropBoxOffsets",
        }
    }

    /// Runs the op again through its public method.
    pub fn eval(&self, inputs: &[Tensor]) -> Result<Outputs> {
        let x = super::one_input(self.name(), inputs)?;
        let y = match self {
            ImageOp::ResizeBilinear(a) => x.resize_bilinear(a.size, a.align_corners, a.half_pixel_centers)?,
            ImageOp::ResizeBilinearGrad(a) => x.resize_bilinear_grad(a.size, a.align_corners, a.half_pixel_centers)?,
            ImageOp::ResizeNearestNeighbor(a) => {
                x.resize_nearest_neighbor(a.size, a.align_corners, a.half_pixel_centers)?
            }
            ImageOp::ResizeNearestNeighborGrad(a) => {
                x.resize_nearest_neighbor_grad(a.size, a.align_corners, a.half_pixel_centers)?
            }
            ImageOp::CropBoxOffsets { batch, pixels } => crate::ops::image::box_offsets(x, *batch, *pixels)?,
        };
        Ok(smallvec::smallvec![y])
    }

    pub(crate) fn fmt_attrs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = match self {
            ImageOp::ResizeBilinear(a)
            | ImageOp::ResizeBilinearGrad(a)
            | ImageOp::ResizeNearestNeighbor(a)
            | ImageOp::ResizeNearestNeighborGrad(a) => a,
            ImageOp::CropBoxOffsets { batch, pixels } => {
                return write!(f, "[batch={batch}, pixels={pixels}]");
            }
        };
        write!(f, "[size={:?}", a.size)?;
        if a.align_corners {
            f.write_str(", align_corners")?;
        }
        if a.half_pixel_centers {
            f.write_str(", half_pixel_centers")?;
        }
        f.write_str("]")
    }
}
