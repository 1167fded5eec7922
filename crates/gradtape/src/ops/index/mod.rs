//! Indexing by tensors of indices.
//!
//! - `gather.rs`: `gather` along an axis and its adjoint, scatter-add (and
//!   the row helpers that `while_loop`'s history uses)
//! - `gather_nd.rs`: `gather_nd`, its adjoint `scatter_nd`, and `gather`
//!   with batch dims

mod gather;
pub(crate) mod gather_nd;

pub(crate) use gather::*;
