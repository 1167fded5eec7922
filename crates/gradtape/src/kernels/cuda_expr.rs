//! The CUDA C of the elementwise table's functions (to be written).
