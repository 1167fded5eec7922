//! Traced functions (`gradtape::function`): tracing and retracing, the
//! graph compiler (folding, simplification, fusion, joined and diagonal
//! products) and the values of every family of ops when traced. The
//! allocation tests of the compiled graphs are the `alloc` binary.
//!
//! One test binary (`cargo test --release --test function`) for the files
//! below, each a module: `cargo test --release --test function <file>::` runs
//! one of them.

mod function;
mod function_compile;
mod function_diag;
mod function_fuse;
mod function_join;
mod function_math;
mod function_nn;
mod function_optim;
mod function_shape;
mod function_values;
mod vmap;
