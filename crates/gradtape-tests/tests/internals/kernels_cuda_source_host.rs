//! Running kernel sources as host C++ (one thread: the grid-stride loops
//! cover every element), to check their index arithmetic against the CPU
//! kernels on machines without a GPU (the `host` module of
//! `src/kernels/cuda/source.rs`, moved out of the library).

/// What makes CUDA C host C++: the qualifiers away, one thread of one
/// block, the intrinsics the kernels use.
const EMU: &str = r#"
#include <cstdio>
#include <cstring>
struct gt_dim3 { unsigned x; };
static gt_dim3 blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double f; memcpy(&f, &i, 8); return f; }
template <typename T> static inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicCAS(T* p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }
static inline void __syncthreads() {}
"#;

/// The first of `c++` and `g++` that runs.
pub fn cxx() -> Option<&'static str> {
    ["c++", "g++"].into_iter().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A C array definition `static T name[] = {..};` (one element at least).
pub fn array(ty: &str, name: &str, v: &[f64]) -> String {
    let items: Vec<String> = if v.is_empty() {
        vec!["0".into()]
    } else {
        v.iter()
            .map(|x| {
                if x.is_nan() {
                    "NAN".into()
                } else if x.is_infinite() {
                    format!("({ty})({}INFINITY)", if *x < 0.0 { "-" } else { "" })
                } else {
                    format!("({ty})({x:?})")
                }
            })
            .collect()
    };
    format!("static {ty} {name}[] = {{{}}};\n", items.join(", "))
}

/// Compiles `source` (a kernel `k`) with `main`'s `body` as host C++,
/// runs it and returns the numbers it prints (`None` without a C++
/// compiler). `body` prints with `gt_put(ptr, n)`.
pub fn run(source: &str, body: &str) -> Option<Vec<f64>> {
    Some(
        run_text(source, body)?
            .split_whitespace()
            .map(|w| match w {
                "nan" | "-nan" => f64::NAN,
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                _ => w.parse().unwrap(),
            })
            .collect(),
    )
}

/// [`run`], returning what the program prints.
pub fn run_text(source: &str, body: &str) -> Option<String> {
    let cxx = cxx()?;
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "gradtape-hostk-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = format!(
        "{EMU}\n#include <cmath>\n{source}\n\
         template <typename T> static void gt_put(const T* p, long long n) {{ for (long long i = 0; i < n; ++i) printf(\"%.17g \", (double)p[i]); printf(\"\\n\"); }}\n\
         int main() {{\n{body}\nreturn 0;\n}}\n"
    );
    let (src, exe) = (dir.join("k.cpp"), dir.join("k"));
    std::fs::write(&src, &prog).unwrap();
    let out = std::process::Command::new(cxx)
        .args(["-std=c++17", "-O1", "-w", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{prog}", String::from_utf8_lossy(&out.stderr));
    let run = std::process::Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    Some(String::from_utf8_lossy(&run.stdout).into_owned())
}
