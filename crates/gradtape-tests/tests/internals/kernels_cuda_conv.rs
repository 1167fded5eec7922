//! The kernels' index arithmetic, run as host C++ (`kernels_cuda_source_host`),
//! against the CPU kernels, in `f64` over geometries with strides,
//! dilations and both paddings; and their sources in every float type
//! compiled with NVRTC.
use crate::kernels_cuda_source_host as host;
use gradtape::__internals::kernels::cpu::conv as cpu;
use gradtape::__internals::kernels::cpu::conv::Geom;
use gradtape::__internals::kernels::cpu::conv::Padding;
use gradtape::__internals::kernels::cpu::pooling;
use gradtape::__internals::kernels::cuda::conv::*;
use gradtape::__internals::kernels::cuda::source::Lay;
use gradtape::__internals::tensor::layout::Layout;

/// Every kernel of `kernels::cuda::conv` compiles with NVRTC (to PTX for
/// Hopper: no GPU needed) in every float type, the half types (stored as
/// `gt_f16`/`gt_bf16`, summed in `f32`) included, where the NVRTC library
/// is found. (`all_fixed`'s check compiles them too, among every source.)
#[test]
fn conv_and_pool_kernels_compile_with_nvrtc_in_every_float_type() {
    // SAFETY: only looks the library up
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC (libnvrtc.so) not found; set LD_LIBRARY_PATH to its folder to check the kernels");
        return;
    }
    let all = all_sources();
    for t in ["float", "double", "gt_f16", "gt_bf16"] {
        let sources = [
            ("im2col", im2col_source(t)),
            ("col2im", col2im_source(t)),
            ("max_pool", max_pool_source(t)),
            ("avg_pool", avg_pool_source(t)),
            ("avg_pool_grad", avg_pool_grad_source(t)),
        ];
        for (name, src) in &sources {
            assert!(all.contains(src), "{name}|{t} is missing from all_sources()");
            if let Err(log) =
                gradtape::__internals::kernels::cuda::runtime::compile_with(src, "--gpu-architecture=compute_90", false)
            {
                panic!("{name}|{t}: {log}\nsource:\n{src}");
            }
        }
    }
}

pub(crate) fn vals(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (((i * 7919 + seed * 104_729) % 1009) as f64 / 1009.0) * 2.0 - 1.0)
        .collect()
}

/// Values with ties and NaNs (for max pooling).
pub(crate) fn tied(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            if i % 13 == 5 {
                f64::NAN
            } else {
                ((i * 37) % 7) as f64 - 3.0
            }
        })
        .collect()
}

fn same(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-12 * (1.0 + y.abs());
        assert!(ok, "{what}: element {i}: {x} (kernel) vs {y} (CPU)");
    }
}

fn geoms() -> Vec<Geom> {
    let g = |x: [usize; 4], k: [usize; 2], o, s: [usize; 2], d: [usize; 2], p| {
        Geom::new("test", &x, k, o, s, d, p).unwrap()
    };
    vec![
        g([2, 5, 5, 3], [3, 3], 4, [1, 1], [1, 1], Padding::Same),
        g([2, 7, 6, 2], [3, 2], 3, [2, 2], [1, 1], Padding::Valid),
        g([1, 6, 7, 2], [3, 3], 3, [2, 2], [1, 1], Padding::Same),
        g([1, 7, 6, 2], [2, 3], 2, [1, 2], [2, 1], Padding::Same),
        g([2, 9, 8, 1], [3, 2], 2, [3, 2], [2, 3], Padding::Valid),
        g([1, 4, 5, 2], [4, 4], 2, [3, 1], [1, 1], Padding::Same),
    ]
}

fn lay(shape: &[usize]) -> String {
    Lay::of(&Layout::contiguous(shape), shape).unwrap().c_init()
}

#[test]
fn im2col_and_col2im_agree_with_the_cpu_kernels_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    for g in geoms() {
        let xs = [g.n, g.h, g.w, g.c];
        let x = vals(xs.iter().product(), 1);
        let f = vals(g.kdim() * g.o, 2);
        let (_, cols) = cpu::conv2d_keep(&x, &f, &g, true).unwrap();
        let cols = cols.expect("the CPU kept its im2col matrix");
        let total = g.n * g.rows() * g.kdim();
        let body = format!(
            "{}static double cols[{total}];\nLay lx = {}; Geo g = {};\nk(lx, x, cols, g, {total}LL);\ngt_put(cols, {total});",
            host::array("double", "x", &x),
            lay(&xs),
            Geo::of(&g).c_init()
        );
        let got = host::run(&im2col_source("double"), &body).unwrap();
        same(&got, &cols, &format!("im2col {g:?}"));
        // col2im of dcols = dy fᵀ is the CPU's input gradient
        let rows = g.n * g.rows();
        let dy = vals(rows * g.o, 3);
        let mut dcols = vec![0.0; rows * g.kdim()];
        for r in 0..rows {
            for j in 0..g.kdim() {
                dcols[r * g.kdim() + j] = (0..g.o).map(|o| dy[r * g.o + o] * f[j * g.o + o]).sum();
            }
        }
        let want = cpu::conv2d_backprop_input(&dy, &f, &g).unwrap();
        let nx = want.len();
        let body = format!(
            "{}static double dx[{nx}];\nGeo g = {};\nk(dcols, dx, g, {nx}LL);\ngt_put(dx, {nx});",
            host::array("double", "dcols", &dcols),
            Geo::of(&g).c_init()
        );
        let got = host::run(&col2im_source("double"), &body).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                "col2im {g:?} element {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn pools_agree_with_the_cpu_kernels_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let pools = |x: [usize; 4], k: [usize; 2], s: [usize; 2], p| Geom::new("test", &x, k, 1, s, [1, 1], p).unwrap();
    for g in [
        pools([2, 5, 5, 3], [2, 2], [2, 2], Padding::Same),
        pools([2, 6, 5, 2], [3, 3], [2, 1], Padding::Valid),
        pools([1, 5, 7, 2], [2, 3], [1, 2], Padding::Valid),
        pools([1, 4, 4, 1], [3, 3], [3, 3], Padding::Same),
        pools([1, 3, 3, 2], [5, 5], [1, 1], Padding::Same),
    ] {
        let xs = [g.n, g.h, g.w, g.c];
        let nx: usize = xs.iter().product();
        let ny = g.n * g.oh * g.ow * g.c;
        let x = tied(nx);
        let (want_y, want_a) = pooling::max_pool(&x, &g).unwrap();
        let body = format!(
            "{}static double y[{ny}]; static long long a[{ny}];\nLay lx = {}; Geo g = {};\nk(lx, x, y, a, g, {ny}LL);\ngt_put(y, {ny}); gt_put(a, {ny});",
            host::array("double", "x", &x),
            lay(&xs),
            Geo::of(&g).c_init()
        );
        let got = host::run(&max_pool_source("double"), &body).unwrap();
        same(&got[..ny], &want_y, &format!("max_pool {g:?}"));
        let want_a: Vec<f64> = want_a.iter().map(|&a| a as f64).collect();
        same(&got[ny..], &want_a, &format!("max_pool positions {g:?}"));

        let x = vals(nx, 4);
        let want = pooling::avg_pool(&x, &g).unwrap();
        let body = format!(
            "{}static double y[{ny}];\nLay lx = {}; Geo g = {};\nk(lx, x, y, g, {ny}LL);\ngt_put(y, {ny});",
            host::array("double", "x", &x),
            lay(&xs),
            Geo::of(&g).c_init()
        );
        same(
            &host::run(&avg_pool_source("double"), &body).unwrap(),
            &want,
            &format!("avg_pool {g:?}"),
        );

        let dy = vals(ny, 5);
        let want = pooling::avg_pool_grad(&dy, &g).unwrap();
        let body = format!(
            "{}static double dx[{nx}];\nLay ld = {}; Geo g = {};\nk(ld, dy, dx, g, {nx}LL);\ngt_put(dx, {nx});",
            host::array("double", "dy", &dy),
            lay(&[g.n, g.oh, g.ow, g.c]),
            Geo::of(&g).c_init()
        );
        let got = host::run(&avg_pool_grad_source("double"), &body).unwrap();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                "avg_pool_grad {g:?} element {i}: {a} vs {b}"
            );
        }
        assert_eq!(got.len(), want.len());
    }
}

/// The depthwise convolution's kernels (forward, input gradient, filter
/// gradient; the geometries' `o` as the channel multiplier) agree with
/// the CPU's. On the host's one thread the filter gradient's block is
/// one thread walking all the outputs (its tree sum does not run).
#[test]
fn depthwise_kernels_agree_with_the_cpu_kernels_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    for g in geoms() {
        let xs = [g.n, g.h, g.w, g.c];
        let (nx, cm) = (xs.iter().product::<usize>(), g.c * g.o);
        let ny = g.n * g.oh * g.ow * cm;
        let nf = g.kh * g.kw * cm;
        let (x, f, dy) = (vals(nx, 6), vals(nf, 7), vals(ny, 8));
        let (fs, ys) = ([g.kh, g.kw, g.c, g.o], [g.n, g.oh, g.ow, cm]);
        let geo = Geo::of(&g).c_init();
        let want = cpu::depthwise(&x, &f, &g).unwrap();
        let body = format!(
            "{}{}static double y[{ny}];\nLay la = {}, lb = {}; Geo g = {geo};\nk(la, x, lb, f, y, g, {ny}LL);\ngt_put(y, {ny});",
            host::array("double", "x", &x),
            host::array("double", "f", &f),
            lay(&xs),
            lay(&fs),
        );
        let got = host::run(&depthwise_source("double"), &body).unwrap();
        same(&got, &want, &format!("depthwise {g:?}"));

        let want = cpu::depthwise_backprop_input(&dy, &f, &g).unwrap();
        let body = format!(
            "{}{}static double dx[{nx}];\nLay la = {}, lb = {}; Geo g = {geo};\nk(la, dy, lb, f, dx, g, {nx}LL);\ngt_put(dx, {nx});",
            host::array("double", "dy", &dy),
            host::array("double", "f", &f),
            lay(&ys),
            lay(&fs),
        );
        let got = host::run(&depthwise_input_source("double"), &body).unwrap();
        same(&got, &want, &format!("depthwise input gradient {g:?}"));

        let want = cpu::depthwise_backprop_filter(&x, &dy, &g).unwrap();
        let body = format!(
            "{}{}static double df[{nf}];\nLay la = {}, lb = {}; Geo g = {geo};\nk(la, x, lb, dy, df, g, {nf}LL);\ngt_put(df, {nf});",
            host::array("double", "x", &x),
            host::array("double", "dy", &dy),
            lay(&xs),
            lay(&ys),
        );
        let got = host::run(&depthwise_filter_source("double"), &body).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                "depthwise filter gradient {g:?} element {i}: {a} vs {b}"
            );
        }
    }
}
