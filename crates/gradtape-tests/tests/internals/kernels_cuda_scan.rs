//! The GPU's cumulative sums and products (`kernels::cuda::scan`) and its
//! integer products and sums (`reduce_rows`), run as host C++
//! (`kernels_cuda_source_host`) against the CPU's `cumsum`, `cumprod` and
//! `prod`: bit for bit, along every axis of a 3-D tensor, with both flags,
//! read through a transposed view, and wrapping at the ends of the
//! integer ranges; and its `argsort` against the CPU's (ties, NaN, both
//! directions, every axis).
use crate::kernels_cuda_source_host as host;
use gradtape::__internals::kernels::cuda::scan::{argsort_source, scan_source};
use gradtape::__internals::kernels::cuda::source::{reduce_rows, Lay};
use gradtape::__internals::TensorInternals;
use gradtape::Tensor;

fn vals(n: usize) -> Vec<f64> {
    // spread magnitudes and signs, so that a sum in another order would
    // round differently
    (0..n)
        .map(|i| {
            let v = ((i * 7919) % 1009) as f64 / 1009.0 * 2.0 - 1.0;
            v * [1.0, 1e-3, 37.0, 0.71][i % 4]
        })
        .collect()
}

/// The C initializer of `x`'s view over its own shape.
fn lay_of(x: &Tensor) -> String {
    Lay::of(x.layout(), x.shape()).unwrap().c_init()
}

#[test]
fn scans_agree_with_the_cpu_bit_for_bit_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let shape = [3usize, 4, 5];
    let base = Tensor::from_vec(vals(60), &shape).unwrap();
    // the same values read through a transposed view of a [5, 4, 3] buffer
    let t_buf = base.permute(&[2, 1, 0]).unwrap().contiguous().unwrap();
    let viewed = t_buf.permute(&[2, 1, 0]).unwrap();
    assert_eq!(viewed.to_vec::<f64>().unwrap(), base.to_vec::<f64>().unwrap());
    for (x, name) in [(&base, "contiguous"), (&viewed, "transposed view")] {
        // the buffer the view reads, in storage order
        let storage = if name == "contiguous" { &base } else { &t_buf };
        let data = storage.to_vec::<f64>().unwrap();
        for axis in 0..3 {
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            for prod in [false, true] {
                for exclusive in [false, true] {
                    for reverse in [false, true] {
                        let want = if prod {
                            x.cumprod(axis as isize, exclusive, reverse)
                        } else {
                            x.cumsum(axis as isize, exclusive, reverse)
                        }
                        .unwrap()
                        .to_vec::<f64>()
                        .unwrap();
                        let body = format!(
                            "{}static double y[60];\nLay lx = {};\nk(lx, x, y, {outer}LL, {}LL, {inner}LL, {}, {});\ngt_put(y, 60);",
                            host::array("double", "x", &data),
                            lay_of(x),
                            shape[axis],
                            i32::from(exclusive),
                            i32::from(reverse),
                        );
                        let got = host::run(&scan_source("double", prod), &body).unwrap();
                        let what = format!("{name} axis={axis} prod={prod} exclusive={exclusive} reverse={reverse}");
                        assert_eq!(got.len(), 60, "{what}");
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}: {g} vs {w}");
                        }
                    }
                }
            }
        }
    }
}

/// Integer scans and products wrap as the CPU's (`i32` and `i64`).
#[test]
fn integer_scans_and_products_wrap_as_the_cpu_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let v32: Vec<i32> = vec![i32::MAX, 3, -7, i32::MIN, 65_536, 65_536];
    let v64: Vec<i64> = vec![i64::MAX, 3, -7, i64::MIN, 1 << 40, 1 << 40];
    let cases: [(&str, Tensor, Vec<i64>); 2] = [
        (
            "int",
            Tensor::from_vec(v32.clone(), &[6]).unwrap(),
            v32.iter().map(|&v| v as i64).collect(),
        ),
        ("long long", Tensor::from_vec(v64.clone(), &[6]).unwrap(), v64.clone()),
    ];
    for (t, x, v) in cases {
        let arr: Vec<String> = v.iter().map(|x| format!("({t})({x}LL)")).collect();
        let decl = format!("static {t} x[] = {{{}}};\nstatic {t} y[6];\n", arr.join(", "));
        let print = "for (int i = 0; i < 6; ++i) printf(\"%lld \", (long long)y[i]);\nprintf(\"\\n\");";
        let as_i64 = |t: &Tensor| -> Vec<String> {
            let t = t.cast(gradtape::DType::I64).unwrap();
            t.to_vec::<i64>().unwrap().iter().map(|v| v.to_string()).collect()
        };
        for prod in [false, true] {
            let want = if prod {
                x.cumprod(0, false, false)
            } else {
                x.cumsum(0, false, false)
            }
            .unwrap();
            let body = format!(
                "{decl}Lay lx = {};\nk(lx, x, y, 1LL, 6LL, 1LL, 0, 0);\n{print}",
                lay_of(&x)
            );
            let got = host::run_text(&scan_source(t, prod), &body).unwrap();
            assert_eq!(
                got.split_whitespace().collect::<Vec<_>>(),
                as_i64(&want),
                "{t} prod={prod}"
            );
        }
        // the reduction kernel's products and sums of a row, wrapping
        for kind in ["prod", "sum"] {
            let want = if kind == "prod" {
                x.prod(&[0], false)
            } else {
                x.sum(&[0], false)
            }
            .unwrap();
            let body = format!("{decl}k(x, y, 1LL, 6LL);\nprintf(\"%lld\\n\", (long long)y[0]);");
            let got = host::run_text(&reduce_rows(t, t, t, kind), &body).unwrap();
            assert_eq!(got.split_whitespace().collect::<Vec<_>>(), as_i64(&want), "{t} {kind}");
        }
    }
}

/// Every scan source compiles with NVRTC (where the library is found).
#[test]
fn scan_kernels_compile_with_nvrtc_in_every_type() {
    // SAFETY: only looks the library up
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("skipped: NVRTC (libnvrtc.so) not found");
        return;
    }
    for src in gradtape::__internals::kernels::cuda::scan::all_sources() {
        if let Err(log) =
            gradtape::__internals::kernels::cuda::runtime::compile_with(&src, "--gpu-architecture=compute_90", false)
        {
            panic!("{log}\nsource:\n{src}");
        }
    }
}

/// The counting `argsort` gives the CPU's stable permutation: ties keep
/// their order, NaN sorts after every number (before, descending), `-0.0`
/// ties `0.0`; along each axis of a 3-D tensor, ascending and descending,
/// in `double` and `long long`.
#[test]
fn argsort_agrees_with_the_cpu_as_host_cxx() {
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let shape = [3usize, 4, 5];
    let pool = [
        2.0,
        -1.0,
        f64::NAN,
        0.0,
        -0.0,
        2.0,
        7.5,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        3.0,
    ];
    let data: Vec<f64> = (0..60).map(|i| pool[(i * 7 + i / 5) % pool.len()]).collect();
    for (t, ints) in [("double", false), ("long long", true)] {
        let v: Vec<f64> = data
            .iter()
            .map(|&x| if ints && !x.is_finite() { 5.0 } else { x })
            .map(|x| if ints { x.trunc() } else { x })
            .collect();
        let x = Tensor::from_vec(v.clone(), &shape).unwrap();
        let x = if ints { x.cast(gradtape::DType::I64).unwrap() } else { x };
        for axis in 0..3 {
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            for descending in [false, true] {
                let want: Vec<f64> = x
                    .argsort(axis as isize, descending)
                    .unwrap()
                    .to_vec::<i64>()
                    .unwrap()
                    .iter()
                    .map(|&i| i as f64)
                    .collect();
                let body = format!(
                    "{}static long long y[60];\nk(x, y, {outer}LL, {}LL, {inner}LL, {});\ngt_put(y, 60);",
                    host::array(t, "x", &v),
                    shape[axis],
                    i32::from(descending),
                );
                let got = host::run(&argsort_source(t), &body).unwrap();
                assert_eq!(got, want, "{t} axis={axis} descending={descending}");
            }
        }
    }
}
