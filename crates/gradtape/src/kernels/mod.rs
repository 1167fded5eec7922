//! Compute backends. Only the CPU exists today; a GPU backend would sit
//! beside `cpu` behind the same functions.

pub(crate) mod cpu;
