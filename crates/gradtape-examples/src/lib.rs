//! gradtape's training examples, in `examples/` (this library is empty):
//!
//! ```text
//! cargo run --release --example digits                  # a CNN on the UCI digits
//! cargo run --release --example digits --features plot  # and its loss curve
//! cargo run --release --example gpt                     # a character-level GPT
//! ```
//!
//! They are a package of their own so that their dependencies (gzip,
//! progress bars, plots, MPI) are not built for gradtape's own examples
//! and tests.
