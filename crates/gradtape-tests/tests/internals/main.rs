//! The library's internals: the tests that were unit tests of the library
//! (one module per source file, named after its path: `function_compile_fold`
//! holds those of `src/function/compile/fold.rs`), moved here so that `cargo
//! test` compiles the library once. They reach crate-private items through
//! `gradtape::__internals`, which exists for them only and is not API.
//!
//! One test binary (`cargo test --release --test internals`);
//! `cargo test --release --test internals function_compile_fold::` runs one file.
//!
//! Process-wide: every graph compiled in this binary is checked after each
//! compiler pass (`GRADTAPE_VERIFY_PASSES=1`, set below before `main`), as
//! the library's unit tests did.

mod autodiff_forward;
mod autodiff_variable;
mod dispatch_layering;
mod function_compile_concat_of_reshapes;
mod function_compile_diag_matmul;
mod function_compile_exec;
mod function_compile_fold;
mod function_compile_grads_into_concat;
mod function_compile_kernel;
mod function_compile_kernel_chain;
mod function_compile_kernel_cost;
mod function_compile_kernel_cuda;
mod function_compile_kernel_epilogue;
mod function_compile_kernel_one_pass;
mod function_compile_kernel_one_pass_broadcast;
mod function_compile_kernel_prepared;
mod function_compile_kernel_regs;
mod function_compile_kernel_scratch;
mod function_compile_kernel_sums;
mod function_compile_kernel_testing;
mod function_compile_pads_to_concat;
mod function_compile_pair_products;
mod function_compile_pipeline;
mod function_compile_residual_into_norm_grad;
mod function_compile_sharing;
mod function_compile_simplify;
mod function_compile_sums_after_loops;
mod function_control;
mod function_jacobian;
mod function_passes;
mod function_sizes;
mod function_verify;
mod function_vmap_cache;
mod kernels_cpu_attention_gemm;
mod kernels_cpu_attention_output_rows;
mod kernels_cpu_attention_rows;
mod kernels_cpu_causal_tiles;
mod kernels_cpu_complex_fns;
mod kernels_cpu_decomp;
mod kernels_cpu_eig;
mod kernels_cpu_flat_tiles;
mod kernels_cpu_layer_norm;
mod kernels_cpu_lockstep;
mod kernels_cpu_math;
mod kernels_cpu_matmul;
mod kernels_cpu_narrow_matmul;
mod kernels_cpu_reduce;
mod kernels_cpu_scratch;
mod kernels_cpu_sgemm;
mod kernels_cpu_workers;
#[cfg(feature = "cuda")]
mod kernels_cuda_attention;
#[cfg(feature = "cuda")]
mod kernels_cuda_conv;
#[cfg(feature = "cuda")]
mod kernels_cuda_conv3d;
#[cfg(feature = "cuda")]
mod kernels_cuda_fused;
#[cfg(feature = "cuda")]
mod kernels_cuda_index;
#[cfg(feature = "cuda")]
mod kernels_cuda_resize;
#[cfg(feature = "cuda")]
mod kernels_cuda_scan;
#[cfg(feature = "cuda")]
mod kernels_cuda_source;
#[cfg(feature = "cuda")]
mod kernels_cuda_source_host;
mod ops_array_join;
mod ops_desc_elementwise;
mod ops_linalg_einsum_path;
mod ops_math_cuda_expr;
mod ops_math_igamma;
mod ops_math_table;
mod ops_random;
mod ops_sorting_sort;
mod optim_half_update;
mod optim_kernel;
mod optim_kernel_bits;
mod scoped;
mod tensor_alloc;
mod tensor_layout;
mod tensor_pool;
mod tensor_recycle;

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
