//! Sorting, searching and segments.
//!
//! - `sort.rs`: `sort`, `argsort`, `take_along_axis`, `top_k`, `unique`,
//!   `searchsorted`, `bincount`, `argwhere`, `boolean_mask`, `roll`
//! - `segment.rs`: `segment_*` and `unsorted_segment_*` reductions over
//!   segment ids, `tensor_scatter_nd_update`/`add`

pub(crate) mod segment;
pub(crate) mod sort;
