//! The unit tests of `src/kernels/cuda/source.rs`, moved out of the library.

use gradtape::__internals::kernels::cuda::source::*;
use gradtape::__internals::tensor::layout::Layout;

/// Every fixed kernel source compiles with NVRTC (to PTX for Hopper:
/// no GPU needed), where the NVRTC library is found; the generated
/// elementwise kernels are compiled by `ops::math::cuda_expr`'s tests.
#[test]
fn every_kernel_source_compiles_with_nvrtc() {
    // SAFETY: only looks the library up
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC (libnvrtc.so) not found; set LD_LIBRARY_PATH to its folder to check the kernels");
        return;
    }
    let sources = all_fixed();
    assert!(sources.len() > 30);
    for src in &sources {
        if let Err(log) =
            gradtape::__internals::kernels::cuda::runtime::compile_with(src, "--gpu-architecture=compute_90", false)
        {
            panic!("{log}\nsource:\n{src}");
        }
    }
    println!("compiled {} kernel sources with NVRTC", sources.len());
}

#[test]
fn a_views_lay_reads_its_broadcast_strides() {
    let l = Layout::contiguous(&[3, 1]);
    let lay = Lay::of(&l, &[2, 3, 4]).unwrap();
    assert_eq!((lay.rank, lay.contig), (3, 0));
    assert_eq!(&lay.shape[..3], &[2, 3, 4]);
    assert_eq!(&lay.stride[..3], &[0, 1, 0]);
    let same = Lay::of(&l, &[3, 1]).unwrap();
    assert_eq!(same.contig, 1);
    assert!(Lay::of(&Layout::contiguous(&[1; 9]), &[1; 9]).is_none());
}
