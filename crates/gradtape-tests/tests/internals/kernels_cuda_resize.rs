//! The GPU's image resizes (`kernels::cuda::resize`), run as host C++
//! (`kernels_cuda_source_host`) against the CPU's: bilinear and
//! nearest-neighbour and their transposes, bit for bit in `double` and
//! `float`, up and down by whole and fractional factors, to and from one
//! pixel, with each of TensorFlow's coordinate rules.
use crate::kernels_cuda_conv::vals;
use crate::kernels_cuda_source_host as host;
use gradtape::__internals::kernels::cpu::resize::{Coords, Dims};
use gradtape::__internals::kernels::cuda::resize::*;
use gradtape::__internals::kernels::cuda::source::Lay;
use gradtape::__internals::tensor::layout::Layout;
use gradtape::{DType, Tensor};

fn lay(shape: &[usize]) -> String {
    Lay::of(&Layout::contiguous(shape), shape).unwrap().c_init()
}

/// `[n, h, w, c]` of the images, and the other size.
const CASES: [([usize; 4], [usize; 2]); 6] = [
    ([2, 3, 4, 2], [7, 9]),
    ([1, 7, 5, 1], [3, 2]),
    ([1, 5, 6, 2], [5, 6]),
    ([1, 4, 3, 1], [1, 1]),
    ([1, 1, 1, 3], [3, 4]),
    ([2, 6, 5, 1], [4, 11]),
];

const RULES: [(bool, bool); 3] = [(false, true), (true, false), (false, false)];

/// Runs `src` on `input` (shaped `ins`) into `n_out` values.
fn run(src: &str, t: &str, input: &[f64], ins: &[usize], n_out: usize, z: &Rz) -> Vec<f64> {
    let body = format!(
        "{}static {t} y[{n_out}];\nLay lx = {}; Rz z = {};\nk(lx, x, y, z, {n_out}LL);\ngt_put(y, {n_out});",
        host::array(t, "x", input),
        lay(ins),
        z.c_init(),
    );
    host::run(src, &body).unwrap()
}

fn bits_equal(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{what}: element {i}: {a} (kernel) vs {b} (CPU)"
        );
    }
}

#[test]
fn resizes_and_their_transposes_agree_with_the_cpu_bit_for_bit_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    for (t, dtype) in [("double", DType::F64), ("float", DType::F32)] {
        for (xs, size) in CASES {
            for (align, half) in RULES {
                let co = Coords {
                    align_corners: align,
                    half_pixel_centers: half,
                };
                let what = format!("{t} {xs:?} -> {size:?} align={align} half={half}");
                let [n, h, w, c] = xs;
                let ys = [n, size[0], size[1], c];
                let d = Dims {
                    n,
                    ih: h,
                    iw: w,
                    oh: size[0],
                    ow: size[1],
                    c,
                };
                let z = Rz::of(&d, co, t == "double");
                let nx: usize = xs.iter().product();
                let ny: usize = ys.iter().product();
                let x = Tensor::from_vec(vals(nx, 1), &xs).unwrap().cast(dtype).unwrap();
                let xv = x.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
                let as64 = |t: Tensor| t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
                // forward passes
                let want = as64(x.resize_bilinear(size, align, half).unwrap());
                bits_equal(
                    &run(&bilinear_source(t), t, &xv, &xs, ny, &z),
                    &want,
                    &format!("bilinear {what}"),
                );
                let want = as64(x.resize_nearest_neighbor(size, align, half).unwrap());
                bits_equal(
                    &run(&nearest_source(t), t, &xv, &xs, ny, &z),
                    &want,
                    &format!("nearest {what}"),
                );
                // transposes: the cotangent of the resized images gathered back
                let g = Tensor::from_vec(vals(ny, 2), &ys).unwrap().cast(dtype).unwrap();
                let gv = g.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
                let want = as64(g.resize_bilinear_grad([h, w], align, half).unwrap());
                bits_equal(
                    &run(&bilinear_grad_source(t), t, &gv, &ys, nx, &z),
                    &want,
                    &format!("bilinear grad {what}"),
                );
                let want = as64(g.resize_nearest_neighbor_grad([h, w], align, half).unwrap());
                bits_equal(
                    &run(&nearest_grad_source(t), t, &gv, &ys, nx, &z),
                    &want,
                    &format!("nearest grad {what}"),
                );
            }
        }
    }
}

/// Every resize source compiles with NVRTC (where the library is found).
#[test]
fn resize_kernels_compile_with_nvrtc() {
    // SAFETY: only looks the library up
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    for src in all_sources() {
        if let Err(log) =
            gradtape::__internals::kernels::cuda::runtime::compile_with(&src, "--gpu-architecture=compute_90", false)
        {
            panic!("{log}\nsource:\n{src}");
        }
    }
}
