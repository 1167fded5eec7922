//! The sweeps: tests whose own loops run over millions of values (every
//! `f32` of a range through the vectorised `exp`, `sin`, `erf`, ...;
//! matrix products and broadcasts on every layout against plain loops).
//!
//! They are the one test binary of the `gradtape` package, built with the
//! library's optimisation (`opt-level = 3`), where their loops take seconds.
//! Every other test lives in `crates/gradtape-tests`, built without
//! optimisation, which compiles about seven times faster (see its
//! `Cargo.toml`).
//!
//! `cargo test --release -p gradtape --test sweeps` runs them;
//! `... --test sweeps kernels_cpu_math::` one file.

#[path = "../../../gradtape-tests/tests/common/values.rs"]
#[allow(dead_code)]
pub mod values;

/// The `common` module of the other binaries, as far as these files use it.
mod common {
    pub use super::values;
}

mod broadcast_layouts;
mod kernels_cpu_erf;
mod kernels_cpu_math;
mod matmul_layouts;
