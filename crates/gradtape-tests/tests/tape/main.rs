//! Automatic differentiation itself: `GradientTape` (recording, watching,
//! persistent and nested tapes, what a tape keeps alive), forward mode,
//! Jacobians, the functional API, custom gradients (and the `ct` helpers),
//! recompute_grad, long tapes across record chunks,
//! `cond`/`while_loop`, sparse (IndexedSlices) gradients, the documented
//! `tf.GradientTape` examples and the cases a differential test against
//! TensorFlow found.
//!
//! One test binary (`cargo test --release --test tape`) for the files
//! below, each a module: `cargo test --release --test tape <file>::` runs
//! one of them.

#[path = "../common/mod.rs"]
mod common;

mod backprop_chunks;
mod control_flow;
mod conv2d_forward;
mod custom_gradient;
mod differential;
mod forward;
mod functional;
mod gelu_slope;
mod gru_sequence;
mod jacobian;
mod lstm_cell;
mod lstm_sequence;
mod matmul_pair;
mod memory;
mod recompute;
mod seed_examples;
mod sparse;
mod split_grad;
mod tape;
