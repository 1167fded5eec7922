//! The unit tests of `src/kernels/cuda/fused.rs`, moved out of the library.

use gradtape::__internals::kernels::cuda::fused::*;

#[test]
fn the_sums_kernel_compiles_with_nvrtc() {
    // SAFETY: only looks the library up
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    for t in ["float", "double"] {
        if let Err(log) = gradtape::__internals::kernels::cuda::runtime::compile_with(
            &sums_source(t),
            "--gpu-architecture=compute_90",
            false,
        ) {
            panic!("{log}");
        }
    }
}
