//! The window kernels of `kernels::cuda::conv` with a depth (the 3-D
//! convolution's im2col and col2im, the 3-D pools and the average pool's
//! adjoint: the same sources as the 2-D ops', whose geometry has depth 1),
//! run as host C++ (`kernels_cuda_source_host`) against the CPU's 3-D
//! kernels (`kernels::cpu::conv3d`) in `f64`, over geometries with
//! strides, dilations and both paddings on every axis.
use crate::kernels_cuda_conv::{tied, vals};
use crate::kernels_cuda_source_host as host;
use gradtape::__internals::kernels::cpu::conv::Padding;
use gradtape::__internals::kernels::cpu::conv3d::{self as cpu, Geom3};
use gradtape::__internals::kernels::cuda::conv::*;
use gradtape::__internals::kernels::cuda::source::Lay;
use gradtape::__internals::tensor::layout::Layout;

fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * (1.0 + y.abs());
        assert!(ok, "{what}: element {i}: {x} (kernel) vs {y} (CPU)");
    }
}

fn lay(shape: &[usize]) -> String {
    Lay::of(&Layout::contiguous(shape), shape).unwrap().c_init()
}

/// `[n, d, h, w, c]`, window, output channels, strides, dilations, padding.
type Case = ([usize; 5], [usize; 3], usize, [usize; 3], [usize; 3], Padding);

fn geoms(pool: bool) -> Vec<Geom3> {
    let cases: [Case; 5] = [
        ([2, 4, 5, 5, 2], [2, 3, 3], 3, [1, 1, 1], [1, 1, 1], Padding::Same),
        ([1, 5, 6, 4, 2], [3, 2, 2], 2, [2, 2, 1], [1, 1, 1], Padding::Valid),
        ([1, 6, 5, 5, 1], [2, 2, 3], 2, [2, 1, 2], [2, 1, 1], Padding::Same),
        ([2, 3, 4, 6, 2], [3, 3, 2], 1, [1, 2, 3], [1, 1, 2], Padding::Valid),
        ([1, 3, 3, 3, 2], [4, 4, 4], 2, [3, 1, 2], [1, 1, 1], Padding::Same),
    ];
    cases
        .iter()
        .map(|&(x, k, o, s, d, p)| {
            let (o, d) = if pool { (1, [1, 1, 1]) } else { (o, d) };
            Geom3::new("test", &x, k, o, s, d, p).unwrap()
        })
        .collect()
}

fn xshape(g: &Geom3) -> [usize; 5] {
    [g.n, g.x[0], g.x[1], g.x[2], g.c]
}

fn yshape(g: &Geom3, ch: usize) -> [usize; 5] {
    [g.n, g.y[0], g.y[1], g.y[2], ch]
}

/// `a [m, k] · b [k, n]` (`ta`: `a` given as `[k, m]`; `tb`: `b` as `[n, k]`).
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize, ta: bool, tb: bool) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|p| {
                    let av = if ta { a[p * m + i] } else { a[i * k + p] };
                    let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                    av * bv
                })
                .sum();
        }
    }
    out
}

#[test]
fn im2col_and_col2im_with_a_depth_agree_with_the_cpu_3d_convolution_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    for g in geoms(false) {
        let xs = xshape(&g);
        let x = vals(xs.iter().product(), 1);
        let f = vals(g.kdim() * g.o, 2);
        let (rows, kd) = (g.n * g.rows(), g.kdim());
        let geo = Geo::of3(&g).c_init();
        let body = format!(
            "{}static double cols[{}];\nLay lx = {}; Geo g = {geo};\nk(lx, x, cols, g, {}LL);\ngt_put(cols, {});",
            host::array("double", "x", &x),
            rows * kd,
            lay(&xs),
            rows * kd,
            rows * kd,
        );
        let cols = host::run(&im2col_source("double"), &body).unwrap();
        assert_eq!(cols.len(), rows * kd);
        // the forward pass and the filter gradient are products with cols
        let want = cpu::conv3d(&x, &f, &g).unwrap();
        close(
            &matmul(&cols, &f, rows, kd, g.o, false, false),
            &want,
            1e-12,
            &format!("conv3d {g:?}"),
        );
        let dy = vals(rows * g.o, 3);
        let want = cpu::conv3d_backprop_filter(&x, &dy, &g).unwrap();
        close(
            &matmul(&cols, &dy, kd, rows, g.o, true, false),
            &want,
            1e-12,
            &format!("conv3d filter gradient {g:?}"),
        );
        // col2im of dcols = dy fᵀ is the input gradient
        let dcols = matmul(&dy, &f, rows, g.o, kd, false, true);
        let nx: usize = xs.iter().product();
        let body = format!(
            "{}static double dx[{nx}];\nGeo g = {geo};\nk(dcols, dx, g, {nx}LL);\ngt_put(dx, {nx});",
            host::array("double", "dcols", &dcols),
        );
        let got = host::run(&col2im_source("double"), &body).unwrap();
        let want = cpu::conv3d_backprop_input(&dy, &f, &g).unwrap();
        close(&got, &want, 1e-12, &format!("conv3d input gradient {g:?}"));
    }
}

#[test]
fn pools_with_a_depth_agree_with_the_cpu_3d_pools_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    for g in geoms(true) {
        let xs = xshape(&g);
        let nx: usize = xs.iter().product();
        let ny = g.n * g.rows() * g.c;
        let geo = Geo::of3(&g).c_init();
        let x = tied(nx);
        let (want_y, want_a) = cpu::max_pool3d(&x, &g).unwrap();
        let body = format!(
            "{}static double y[{ny}]; static long long a[{ny}];\nLay lx = {}; Geo g = {geo};\nk(lx, x, y, a, g, {ny}LL);\ngt_put(y, {ny}); gt_put(a, {ny});",
            host::array("double", "x", &x),
            lay(&xs),
        );
        let got = host::run(&max_pool_source("double"), &body).unwrap();
        close(&got[..ny], &want_y, 0.0, &format!("max_pool3d {g:?}"));
        let want_a: Vec<f64> = want_a.iter().map(|&a| a as f64).collect();
        close(&got[ny..], &want_a, 0.0, &format!("max_pool3d positions {g:?}"));

        let x = vals(nx, 4);
        let want = cpu::avg_pool3d(&x, &g).unwrap();
        let body = format!(
            "{}static double y[{ny}];\nLay lx = {}; Geo g = {geo};\nk(lx, x, y, g, {ny}LL);\ngt_put(y, {ny});",
            host::array("double", "x", &x),
            lay(&xs),
        );
        let got = host::run(&avg_pool_source("double"), &body).unwrap();
        close(&got, &want, 1e-12, &format!("avg_pool3d {g:?}"));

        let dy = vals(ny, 5);
        let want = cpu::avg_pool3d_grad(&dy, &g).unwrap();
        let body = format!(
            "{}static double dx[{nx}];\nLay ld = {}; Geo g = {geo};\nk(ld, dy, dx, g, {nx}LL);\ngt_put(dx, {nx});",
            host::array("double", "dy", &dy),
            lay(&yshape(&g, g.c)),
        );
        let got = host::run(&avg_pool_grad_source("double"), &body).unwrap();
        close(&got, &want, 1e-12, &format!("avg_pool3d_grad {g:?}"));
    }
}
