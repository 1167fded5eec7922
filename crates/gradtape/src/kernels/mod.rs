//! Compute backends: `cpu`, and `cuda` (NVIDIA GPUs, feature `cuda`)
//! beside it behind the same functions. `cuda_expr` is the CUDA C of the
//! elementwise table's functions (plain strings, built with or without the
//! feature, so that its tests run everywhere).

pub(crate) mod cpu;
#[allow(dead_code)]
pub(crate) mod cuda_expr;
