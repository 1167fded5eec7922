//! Every differentiable op through the gradient checker (first and second
//! order, eager and traced), one table per family of ops, all run by the
//! harness in `tests/common/`.
//!
//! One test binary (`cargo test --release --test gradcheck`) for the files
//! below, each a module: `cargo test --release --test gradcheck <file>::` runs
//! one of them.

#[path = "../common/mod.rs"]
mod common;

mod gradcheck;
mod gradcheck_complex;
mod gradcheck_conv;
mod gradcheck_conv3d;
mod gradcheck_conv_groups;
mod gradcheck_ctc;
mod gradcheck_image;
mod gradcheck_linalg;
mod gradcheck_math;
mod gradcheck_nn;
mod gradcheck_shape;
mod gradcheck_sort;
mod gradcheck_spectral;
