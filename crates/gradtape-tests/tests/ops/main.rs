//! The values of the ops, eager: math ops at special points, special
//! functions, complex tensors, FFTs, einsum, image resizing, conv3d and
//! the pools, CTC, seeded random tensors, the `f32` kernels against `f64`,
//! and the table of ops and dtypes (`docs/dtypes.md`); tensor ids and
//! printing, the seeded `Rng`, and copies of strided views. The `tf_*`
//! files are differential tests against TensorFlow 2.21 at edge points
//! (elementwise, vector, loss and normalisation, linear algebra, segment,
//! convolution and pool, complex ops; their data in `tests/data/`, printed
//! by the scripts of `tests/reference/`), and `f32_accuracy` sweeps the
//! `f32` functions against `f64` over every binade.
//!
//! One test binary (`cargo test --release --test ops`) for the files
//! below, each a module: `cargo test --release --test ops <file>::` runs
//! one of them.

#[path = "../common/mod.rs"]
mod common;

mod activation_check;
mod clip_tensors;
mod complex;
mod complex_fns;
mod concat_large;
mod conv3d_values;
mod conv_filter_accuracy;
mod ctc;
mod dtype_table;
mod einsum;
mod f32_accuracy;
mod f32_kernels;
mod fft;
mod half_blocks;
mod image;
mod linalg_scales;
mod math_values;
mod pow_scalar_forms;
mod random_ops;
mod reductions;
mod rng;
mod row_ops_any_axis;
mod select_layouts;
mod sparse_xent_rows;
mod special;
mod special_igamma;
mod strided_copies;
mod strided_operands;
mod tensor_display;
mod tensor_ids;
mod tf_activations_extreme;
mod tf_activations_more;
mod tf_complex;
mod tf_complex_index;
mod tf_conv;
mod tf_conv_groups;
mod tf_conv_more;
mod tf_cotangents;
mod tf_edge_cases;
mod tf_elementwise;
mod tf_image;
mod tf_image_more;
mod tf_integer;
mod tf_linalg;
mod tf_nn;
mod tf_programs;
mod tf_programs_known;
mod tf_programs_ops;
mod tf_segment;
mod tf_spectral;
mod tf_util;
mod tf_vector;
