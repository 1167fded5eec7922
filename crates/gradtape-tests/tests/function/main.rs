//! Traced functions (`gradtape::function`): tracing and retracing, the
//! graph compiler (folding, simplification, fusion, joined and diagonal
//! products) and the values of every family of ops when traced. The
//! allocation tests of the compiled graphs are the `alloc` binary.
//!
//! One test binary (`cargo test --release --test function`) for the files
//! below, each a module: `cargo test --release --test function <file>::` runs
//! one of them.
//!
//! Process-wide: every graph compiled in this binary is checked after each
//! compiler pass (`GRADTAPE_VERIFY_PASSES=1`, set below before `main`).

mod aliasing;
mod calls_state;
mod cond_grads;
mod cond_residuals;
mod control_effects;
mod control_forward_effects;
mod control_outputs;
mod control_variable_reads;
mod data_dependent_shapes;
mod function;
mod function_compile;
mod function_diag;
mod function_errors;
mod function_fuse;
mod function_fuse_plan;
mod function_fuse_views;
mod function_join;
mod function_loops;
mod function_math;
mod function_nn;
mod function_optim;
mod function_passes;
mod function_remat;
mod function_shape;
mod function_values;
mod function_watch;
mod function_wins;
mod half_fusion;
mod half_traced_vs_eager;
mod lent_operands;
mod loop_compiled;
mod loop_history;
mod loop_iterations;
mod loop_kept_once;
mod loop_residuals;
mod loop_sizes;
mod loop_sums_after;
mod loops_growing_grads;
mod loops_traced_vs_eager;
mod nested_loop_effects;
mod random_programs;
mod random_steps;
mod retracing;
mod scale_into_update;
mod shared_args;
mod small_products;
mod sort_ties;
mod sparse_xent_grad_op;
mod traced_grads;
mod traced_rng;
mod vmap;
mod vmap_dynamic;
mod xent_keeps_softmax;
mod zero_sizes;

/// Sets `GRADTAPE_VERIFY_PASSES=1` before `main` runs (the library reads it
/// once, at the first compile), so that every graph any test compiles is
/// checked after every pass (`Graph::verify`; a pass that breaks the graph
/// fails the call that compiles it).
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static VERIFY_PASSES: extern "C" fn() = {
    extern "C" fn verify_passes() {
        // SAFETY: runs before `main`, while the process has one thread and
        // nothing reads the environment.
        unsafe { std::env::set_var("GRADTAPE_VERIFY_PASSES", "1") };
    }
    verify_passes
};
