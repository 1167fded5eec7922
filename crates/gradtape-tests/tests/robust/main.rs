//! Bad input and edge cases: the `Err` each op gives for bad shapes,
//! dtypes and arguments (`errors*`), NaN and infinities (`nan`), the
//! never-panic property tests (`robust_*`, with the reference shape rules
//! of `tests/common/shapes.rs`), huge and overflowing sizes
//! (`robust_sizes`, whose cases run in child processes of this binary) and
//! the regressions the fuzz test (`crates/gradtape-fuzz/tests/fuzz/`) found.
//!
//! One test binary (`cargo test --release --test robust`) for the files
//! below, each a module: `cargo test --release --test robust <file>::` runs
//! one of them.

#[path = "../common/shapes.rs"]
mod shapes;

mod errors;
mod errors_conv;
mod errors_conv3d;
mod errors_linalg;
mod errors_math;
mod errors_transformer;
mod nan;
mod robust_attention_nan;
mod robust_complex;
mod robust_conv;
mod robust_fuzz_found;
mod robust_math;
mod robust_nn;
mod robust_shape;
mod robust_sizes;
mod robust_transformer;
