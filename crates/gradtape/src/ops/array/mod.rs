//! Shapes and arrays: what moves, copies or builds elements without
//! arithmetic.
//!
//! - `shape.rs`: `reshape`, `permute`/`transpose`, `broadcast_to`,
//!   `expand_dims`, `squeeze` (views over the same storage)
//! - `slice.rs`: `narrow`/`slice` (views) and zero padding, each the other's
//!   adjoint
//! - `strided.rs`: NumPy-style strided slicing, `reverse`, `tile`, `repeat`,
//!   reflection padding
//! - `dynamic.rs`: `dynamic_slice` and `dynamic_update_slice`, a block at
//!   a start held in a tensor (so that one trace serves every start)
//! - `join.rs`: `concat`, `stack`, `unstack`, `split`
//! - `fill.rs`: constructors (`eye`, `linspace`, `range`, `one_hot`)

mod dynamic;
mod fill;
pub(crate) mod join;
mod shape;
mod slice;
pub(crate) mod strided;
