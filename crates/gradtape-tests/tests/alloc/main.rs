//! What the compiled graphs allocate: a traced step allocates (almost)
//! nothing after its first calls (`function_alloc`), and the executor
//! writes buffers in place only when nothing else holds them
//! (`function_exec`), and two gradients are written into buffers they own
//! (`gradient_in_place`). A binary of its own, since it installs a counting
//! global allocator (`counting.rs`); its tests run one at a time
//! (`counting::serial`).
//!
//! One test binary (`cargo test --release --test alloc`) for the files
//! below, each a module: `cargo test --release --test alloc <file>::` runs
//! one of them.

#[path = "../common/mod.rs"]
mod common;
mod counting;

mod buffer_cache;
mod function_alloc;
mod function_exec;
mod gradient_in_place;
mod split_alloc;
