//! Image ops, as TensorFlow's `tf.image`.
//!
//! - `resize.rs`: `resize_images` (bilinear, nearest) and TensorFlow 1's
//!   `resize_bilinear` / `resize_nearest_neighbor` with their gradients

mod resize;

pub use resize::ResizeMethod;
