//! Compute backends: `cpu`, and `cuda` (NVIDIA GPUs, feature `cuda`)
//! beside it behind the same functions; `gpu` is the device side every op
//! with a GPU kernel goes through (placement, copies, the host emulator).

pub(crate) mod cpu;
pub(crate) mod cuda;
pub(crate) mod gpu;
