//! Image ops, as TensorFlow's `tf.image`.
//!
//! - `resize.rs`: `resize_images` (bilinear, nearest, and through
//!   `resample.rs` bicubic and area) and TensorFlow 1's `resize_bilinear` /
//!   `resize_nearest_neighbor` with their gradients
//! - `resample.rs`: bicubic and area resizing, as compositions of gathers
//! - `crop.rs`: `crop_and_resize`, differentiable in the image and the boxes
//! - `patches.rs`: `extract_patches`

mod crop;
mod patches;
mod resample;
mod resize;

pub(crate) use crop::box_offsets;
pub use resize::ResizeMethod;
