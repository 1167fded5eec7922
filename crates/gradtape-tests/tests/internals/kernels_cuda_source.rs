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

/// The GPU's `argmax`/`argmin` kernel, run as host C++ (one thread walks
/// each row), against the CPU's `argmax`/`argmin` on rows with ties, NaN,
/// a row of NaN only and negative values, in `double`, `float` and
/// `long long`; and the pairwise rule its threads combine by (on the
/// host's one thread the block's combining loop does not run).
#[test]
fn arg_extremum_kernel_agrees_with_the_cpu_as_host_cxx() {
    use crate::kernels_cuda_source_host as host;
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let nan = f64::NAN;
    let rows: [[f64; 5]; 5] = [
        [1.0, 3.0, 3.0, 0.0, -2.0],
        [nan, -1.0, nan, -1.0, -5.0],
        [nan, nan, nan, nan, nan],
        [-7.0, -7.0, -7.0, -7.0, -7.0],
        [0.0, 2.0, nan, 9.0, 9.0],
    ];
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    for (t, ints) in [("double", false), ("float", false), ("long long", true)] {
        let data: Vec<f64> = flat.iter().map(|&v| if ints && v.is_nan() { 4.0 } else { v }).collect();
        let x = gradtape::Tensor::from_vec(data.clone(), &[5, 5]).unwrap();
        for largest in [true, false] {
            let want = if largest { x.argmax(1) } else { x.argmin(1) }
                .unwrap()
                .to_vec::<i64>()
                .unwrap();
            let body = format!(
                "{}static long long y[5];\nk(x, y, 5LL, 5LL);\ngt_put(y, 5);",
                host::array(t, "x", &data)
            );
            let got = host::run(&arg_rows(t, largest), &body).unwrap();
            let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
            assert_eq!(got, want, "{t} largest={largest}");
        }
    }
    // the combining rule: (candidate value, index) against (best, index)
    let cases: [(f64, i64, f64, i64, bool); 7] = [
        (1.0, 3, 0.0, 1, true),   // a larger value
        (1.0, 3, 1.0, 1, false),  // a tie: the smaller index stays
        (1.0, 1, 1.0, 3, true),   // a tie: the smaller index wins
        (nan, 0, 1.0, 3, false),  // NaN never wins
        (0.0, -1, 1.0, 3, false), // no candidate
        (-9.0, 4, 0.0, -1, true), // anything beats no best
        (0.5, 2, 1.0, 0, false),  // a smaller value
    ];
    let calls: String = cases
        .iter()
        .enumerate()
        .map(|(i, &(v, i0, b, i1, _))| {
            let c = |x: f64| {
                if x.is_nan() {
                    "NAN".to_string()
                } else {
                    format!("{x:?}")
                }
            };
            format!(
                "r[{i}] = gt_arg_wins((double)({}), {i0}LL, (double)({}), {i1}LL);\n",
                c(v),
                c(b)
            )
        })
        .collect();
    let body = format!("static double r[{}];\n{calls}gt_put(r, {});", cases.len(), cases.len());
    let got = host::run(&arg_rows("double", true), &body).unwrap();
    let want: Vec<f64> = cases.iter().map(|c| if c.4 { 1.0 } else { 0.0 }).collect();
    assert_eq!(got, want);
}

/// The integer ops' C expressions, run as host C++ through the
/// elementwise kernel (`zip`), wrap as the CPU's integer kernels do
/// (`i32` and `i64`, at the ends of their ranges), and broadcast a row.
#[test]
fn integer_kernels_wrap_as_the_cpu_as_host_cxx() {
    use crate::kernels_cuda_source_host as host;
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let a32: Vec<i64> = vec![i32::MAX as i64, i32::MIN as i64, -7, 123_456, 0, -1];
    let b32: Vec<i64> = vec![1, -1, 3, 65_536, i32::MIN as i64, i32::MAX as i64];
    let a64: Vec<i64> = vec![i64::MAX, i64::MIN, -7, 1 << 40, 0, -1];
    let b64: Vec<i64> = vec![1, -1, 3, 1 << 30, i64::MIN, i64::MAX];
    type F = fn(i64, i64, bool) -> i64;
    let ops: [(&str, F); 6] = [
        (INT_ADD, |a, b, w| {
            if w {
                (a as i32).wrapping_add(b as i32) as i64
            } else {
                a.wrapping_add(b)
            }
        }),
        (INT_SUB, |a, b, w| {
            if w {
                (a as i32).wrapping_sub(b as i32) as i64
            } else {
                a.wrapping_sub(b)
            }
        }),
        (INT_MUL, |a, b, w| {
            if w {
                (a as i32).wrapping_mul(b as i32) as i64
            } else {
                a.wrapping_mul(b)
            }
        }),
        (INT_MAX, |a, b, _| a.max(b)),
        (INT_MIN, |a, b, _| a.min(b)),
        (INT_DIV, |a, b, w| {
            if w {
                (a as i32).wrapping_div(b as i32) as i64
            } else {
                a.wrapping_div(b)
            }
        }),
    ];
    let lay = |shape: &[usize]| Lay::of(&Layout::contiguous(shape), &[6]).unwrap().c_init();
    for (t, narrow, a, b) in [("int", true, &a32, &b32), ("long long", false, &a64, &b64)] {
        // (printed through a double: compared as the strings C++ prints)
        let arr = |name: &str, v: &[i64]| {
            let items: Vec<String> = v.iter().map(|x| format!("({t})({x}LL)")).collect();
            format!("static {t} {name}[] = {{{}}};\n", items.join(", "))
        };
        for (expr, f) in ops {
            let body = format!(
                "{}{}static {t} y[6];\nLay la = {}, lb = {};\nk(la, a, lb, b, y, 6LL);\nfor (int i = 0; i < 6; ++i) printf(\"%lld \", (long long)y[i]);\nprintf(\"\\n\");",
                arr("a", a),
                arr("b", b),
                lay(&[6]),
                lay(&[6]),
            );
            let got = host::run_text(&zip("", t, t, expr), &body).unwrap();
            let want: Vec<String> = a.iter().zip(b).map(|(&x, &y)| f(x, y, narrow).to_string()).collect();
            assert_eq!(got.split_whitespace().collect::<Vec<_>>(), want, "{t}: {expr}");
        }
    }
}

/// The one-input integer ops' C expressions, run as host C++ through the
/// elementwise kernel (`map`), give the CPU's wrapping values (`i32` and
/// `i64`, at the ends of their ranges; `c0` = -3).
#[test]
fn integer_one_input_kernels_wrap_as_the_cpu_as_host_cxx() {
    use crate::kernels_cuda_source_host as host;
    if host::cxx().is_none() {
        println!("skipped: no C++ compiler");
        return;
    }
    let vals = |min: i64, max: i64| vec![max, min, -7, 0, 5, min + 1];
    type F = fn(i64, bool) -> i64;
    fn w(v: i64, narrow: bool, f: fn(i64) -> i64, f32: fn(i32) -> i32) -> i64 {
        if narrow {
            f32(v as i32) as i64
        } else {
            f(v)
        }
    }
    let ops: [(&str, F); 8] = [
        (INT_NEG, |v, n| w(v, n, i64::wrapping_neg, i32::wrapping_neg)),
        (INT_ABS, |v, n| w(v, n, i64::wrapping_abs, i32::wrapping_abs)),
        (INT_SQUARE, |v, n| w(v, n, |v| v.wrapping_mul(v), |v| v.wrapping_mul(v))),
        (INT_SIGN, |v, _| v.signum()),
        (INT_RELU, |v, _| v.max(0)),
        (INT_ADD_C, |v, n| {
            w(v, n, |v| v.wrapping_add(-3), |v| v.wrapping_add(-3))
        }),
        (INT_MUL_C, |v, n| {
            w(v, n, |v| v.wrapping_mul(-3), |v| v.wrapping_mul(-3))
        }),
        (INT_DIV_C, |v, n| {
            w(v, n, |v| v.wrapping_div(-3), |v| v.wrapping_div(-3))
        }),
    ];
    let lay = Lay::of(&Layout::contiguous(&[6]), &[6]).unwrap().c_init();
    for (t, narrow, x) in [
        ("int", true, vals(i32::MIN as i64, i32::MAX as i64)),
        ("long long", false, vals(i64::MIN, i64::MAX)),
    ] {
        let items: Vec<String> = x.iter().map(|v| format!("({t})({v}LL)")).collect();
        for (expr, f) in ops {
            let body = format!(
                "static {t} x[] = {{{}}};\nstatic {t} y[6];\nLay lx = {lay};\nk(lx, x, y, 6LL, -3.0, 0.0);\nfor (int i = 0; i < 6; ++i) printf(\"%lld \", (long long)y[i]);",
                items.join(", ")
            );
            let got = host::run_text(&map("", t, t, expr), &body).unwrap();
            let want: Vec<String> = x.iter().map(|&v| f(v, narrow).to_string()).collect();
            assert_eq!(got.split_whitespace().collect::<Vec<_>>(), want, "{t}: {expr}");
        }
    }
}
